//! Native host for tensorizer files: positioned reads from local files
//! (and any [`RangeSource`]), zero-copy memory maps, atomic writers, and
//! the `tzr` command-line tool. The byte layout lives in
//! [`tensorizer_core`]; this crate does the I/O and the parallelism.

pub mod error;
pub mod mmap;
mod parallel;
pub mod reader;
pub mod safetensors;
pub mod source;
pub mod verify;
pub mod writer;

pub use error::{Error, Result};
pub use parallel::default_readers;
pub use reader::{ReadOptions, Reader};
pub use source::{LocalFile, MemorySource, RangeSource};
pub use writer::{FileWriter, WriteOptions, write_file};
