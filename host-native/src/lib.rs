#![doc = include_str!("../README.md")]

pub mod atomic;
pub mod checkpoint;
pub mod convert;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod error;
pub mod fingerprint;
pub mod kdf;
mod parallel;
pub mod reader;
mod retry;
pub mod safetensors;
pub mod slice_plan;
pub mod source;
pub mod staging;
pub mod store;
pub mod verify;
pub mod writer;

pub use checkpoint::CheckpointReader;
pub use error::{Error, Result};
pub use parallel::default_readers;
pub use reader::{ReadOptions, Reader};
pub use source::{LocalFile, MemorySource, RangeSource};
pub use store::{Intent, Location, Sink, StoreOptions, open_sink, open_source, open_uri};
// The stores under their old paths (`tensorizer_native::http`, …).
#[cfg(feature = "cloud")]
pub use store::cloud;
#[cfg(feature = "redis")]
pub use store::redis;
#[cfg(feature = "s3")]
pub use store::s3;
#[cfg(feature = "http")]
pub use store::{http, tls};
pub use writer::{FileWriter, WriteOptions, write_file};
