//! The port library (under construction in this commit).
