#![doc = include_str!("../README.md")]

pub mod atomic;
pub mod checkpoint;
#[cfg(feature = "cloud")]
pub mod cloud;
pub mod convert;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod error;
#[cfg(feature = "http")]
pub mod http;
pub mod mmap;
mod parallel;
pub mod reader;
pub mod redis;
mod retry;
#[cfg(feature = "s3")]
pub mod s3;
pub mod safetensors;
pub mod slice_plan;
pub mod source;
pub mod staging;
#[cfg(feature = "http")]
pub mod tls;
pub mod verify;
pub mod writer;

pub use checkpoint::CheckpointReader;
pub use error::{Error, Result};
pub use parallel::default_readers;
pub use reader::{ReadOptions, Reader};
pub use source::{Intent, LocalFile, MemorySource, RangeSource, open_source, open_source_for};
pub use writer::{FileWriter, WriteOptions, write_file};
