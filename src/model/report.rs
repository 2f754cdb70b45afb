//! Text report (filled below).
