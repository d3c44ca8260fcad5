//! Integration tests: the real tensorizer's files, malformed input and
//! property-based round trips. One binary, several modules.

mod checkpoint;
mod common;
mod malformed;
mod props;
mod vectors;
mod writer;
