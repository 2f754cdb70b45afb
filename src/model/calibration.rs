//! Calibration replay (filled below).
