//! tools (filled in by its own change).
