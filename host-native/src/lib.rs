#![doc = include_str!("../README.md")]

pub mod convert;
pub mod device;
pub mod error;
pub mod kernels;
pub mod memory;
mod parallel;
pub mod read;
pub mod shards;
pub mod source;
pub mod store;
pub mod write;

pub use convert::checkpoint::CheckpointReader;
pub use error::{Error, Result};
pub use parallel::default_readers;
pub use read::{Layout, ReadOptions, Reader};
pub use source::{Intent, LocalFile, MemorySource, RangeSource};
pub use store::{Location, Sink, StoreOptions, open_sink, open_source, open_uri};
pub use write::{FileWriter, WriteOptions, write_file};
