//! WebAssembly front ends for tensorizer (`.tensors`) files.
//!
//! This slice holds the **WASI validator**: `tensorizer-validate`, a
//! `wasm32-wasip1` command module that other tools embed (wasmtime,
//! wasmtime-py, Node's `node:wasi`, ...) to check an untrusted file inside a
//! sandbox with bounded memory and time. See the crate README for the
//! command-line contract, the JSON report and embedding examples.
//!
//! The logic is plain Rust over a small positioned-read trait, so other
//! front ends (a wasm-bindgen browser inspector) reuse it unchanged:
//!
//! * [`source`]: [`RandomAccess`], with [`SliceSource`] and [`FileSource`];
//! * [`validate`]: [`inspect`] (file header + index, two reads),
//!   [`verify_all`] (every tensor streamed in bounded pieces), and the step
//!   functions underneath for hosts with asynchronous reads;
//! * [`report`]: the serde report; [`error`]: errors with kind, byte offset
//!   and exit code; [`cli`]: the command line.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod browser;
pub mod cli;
pub mod error;
pub mod report;
pub mod source;
pub mod validate;

pub use error::{ErrorKind, ValidateError};
pub use report::Report;
pub use source::{FileSource, RandomAccess, SliceSource};
pub use validate::{Inspection, inspect, verify_all};
