//! server (filled in by its own change).
