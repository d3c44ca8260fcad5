#![doc = include_str!("../README.md")]
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod checkpoint;
mod codec;
pub mod crypto;
pub mod dtype;
pub mod error;
pub mod fingerprint;
pub mod gguf;
pub mod hash;
pub mod layout;
pub mod path;
pub mod read;
mod registry;
pub mod report;
pub mod safetensors;
pub mod scan;
pub mod sniff;
pub mod source;
mod tensor_type;
pub mod totals;
#[cfg(feature = "std")]
pub mod walk;
pub mod write;

pub use checkpoint::{Checkpoint, StateDict};
pub use codec::crypt_info::{CryptChunk, CryptInfo, KdfParams};
pub use codec::file_header::{FileHeader, MAX_VERSION};
pub use codec::metadata::{Metadata, MetadataEntry};
pub use codec::tensor_header::{HashValue, HeaderLayout, TensorHeader};
pub use dtype::{Dtype, ElementType};
pub use error::{Error, HashKind, Result};
pub use fingerprint::{Fingerprint, TensorFingerprint};
pub use path::{PathComponent, TensorPath};
pub use read::{File, KeySource, TensorRecord};
pub use scan::{Finding, Format, RuleId, Scan, ScanOptions, Severity, scan};
pub use sniff::{Sniffed, sniff_format};
pub use source::{RandomAccess, ReadError, SliceSource};
pub use tensor_type::TensorType;
pub use write::{TensorSpec, Writer, WriterOptions};
