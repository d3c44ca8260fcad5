//! The host crate's error type. Every variant names the file (or URI) and,
//! where it applies, the tensor and byte offset.

use std::fmt;
use std::io;
use std::ops::Range;

/// The kinds of store failure a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The object, file, bucket or key prefix does not exist (HTTP 404,
    /// S3 `NoSuchKey`/`NoSuchBucket`, no Redis keys).
    NotFound,
    /// The credentials are missing, wrong or not allowed this (HTTP 401/403).
    PermissionDenied,
    /// Something is already at a location that a write would replace.
    AlreadyExists,
    /// The object was replaced while it was being read (its ETag or Redis
    /// generation changed); reading it again from the start may succeed.
    Changed,
    /// The server ignores `Range` requests (answers 200 with the whole body).
    RangeNotSupported,
    /// A deadline passed, or the transfer stalled or was too slow.
    TimedOut,
    /// Every attempt failed on a transient fault (resets, 5xx, throttling).
    RetriesExhausted,
}

impl StoreErrorKind {
    /// The matching [`io::ErrorKind`].
    pub fn io_kind(self) -> io::ErrorKind {
        match self {
            Self::NotFound => io::ErrorKind::NotFound,
            Self::PermissionDenied => io::ErrorKind::PermissionDenied,
            Self::AlreadyExists => io::ErrorKind::AlreadyExists,
            Self::Changed => io::ErrorKind::Other,
            Self::RangeNotSupported => io::ErrorKind::Unsupported,
            Self::TimedOut => io::ErrorKind::TimedOut,
            Self::RetriesExhausted => io::ErrorKind::ConnectionAborted,
        }
    }
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotFound => "not found",
            Self::PermissionDenied => "permission denied",
            Self::AlreadyExists => "already exists",
            Self::Changed => "changed during the read",
            Self::RangeNotSupported => "range requests not supported",
            Self::TimedOut => "timed out",
            Self::RetriesExhausted => "retries exhausted",
        })
    }
}

/// ` (bytes a-b)` for a non-empty range (`b` inclusive), else nothing.
/// An OS error without the "(os error N)" suffix its Display adds: the
/// description says it all.
fn os_text(e: &io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => {
            text.strip_suffix(&format!(" (os error {code})")).unwrap_or(&text).to_string()
        }
        None => text,
    }
}

/// The prefix naming `tensor` before its error `source`, unless the core's
/// message names it already (a hash mismatch does).
pub fn tensor_prefix(tensor: &str, source: &tensorizer_core::Error) -> Option<String> {
    (source.tensor_name() != Some(tensor)).then(|| format!("tensor {tensor:?}"))
}

fn tensor_text(tensor: &str, source: &tensorizer_core::Error) -> String {
    match tensor_prefix(tensor, source) {
        Some(prefix) => format!("{prefix}: {source}"),
        None => source.to_string(),
    }
}

fn range_text(range: &Option<Range<u64>>) -> String {
    match range {
        Some(r) if r.end > r.start => format!(" (bytes {}-{})", r.start, r.end - 1),
        _ => String::new(),
    }
}

/// Errors from reading or writing tensorizer files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes are not a valid tensorizer file.
    #[error("{file}: {source}")]
    Format {
        /// The file.
        file: String,
        /// What the format core found.
        #[source]
        source: Box<tensorizer_core::Error>,
    },
    /// A tensor failed to decrypt or verify, or did not parse. The tensor
    /// is named once: not again when the core's message names it.
    #[error("{file}: {}", tensor_text(tensor, source))]
    Tensor {
        /// The file.
        file: String,
        /// The tensor's name.
        tensor: String,
        /// What went wrong.
        #[source]
        source: Box<tensorizer_core::Error>,
    },
    /// Opening, creating, sizing, syncing or renaming a file failed: no
    /// byte position applies, so none is named.
    #[error("{file}: {}", os_text(source))]
    File {
        /// The file.
        file: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file is in another format the caller did not ask for (a
    /// safetensors file or a torch.save checkpoint opened as a tensorizer
    /// file).
    #[error("{file} is {}, not a tensorizer file", found.describe())]
    OtherFormat {
        /// The file.
        file: String,
        /// What its first bytes say it is.
        found: tensorizer_core::Sniffed,
    },
    /// The bytes match none of the formats read here.
    #[error("{file}: not a tensorizer, safetensors or torch.save file")]
    UnknownFormat {
        /// The file.
        file: String,
    },
    /// A safetensors file a loader refuses, or holding a tensor tensorizer
    /// cannot store.
    #[error("{file}: not a valid safetensors file: {reason}")]
    Safetensors {
        /// The file.
        file: String,
        /// The offending field's absolute offset, where one is known.
        offset: Option<u64>,
        /// The tensor concerned, where one is.
        tensor: Option<String>,
        /// What is wrong (with the scanner rule's id, where one applies).
        reason: String,
    },
    /// Encrypted tensors were read and not one decrypted: the key or
    /// passphrase is wrong (a corrupted file fails some tensors, not all).
    #[error("{file}: no tensor decrypts: wrong key or passphrase")]
    WrongKey {
        /// The file.
        file: String,
    },
    /// Reading or writing failed.
    #[error("{file}: I/O error at byte {offset}: {source}")]
    Io {
        /// The file.
        file: String,
        /// Where the operation started.
        offset: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A store failed in a way the caller can act on (see
    /// [`StoreErrorKind`]), at a location and, for reads, a byte range.
    #[error("{location}{}: {kind}: {detail}", range_text(range))]
    Store {
        /// The path or URI (never a presigned URL).
        location: String,
        /// The bytes being read (`start..end`), if a read failed.
        range: Option<Range<u64>>,
        /// What kind of failure.
        kind: StoreErrorKind,
        /// What the store said, and what to do about it.
        detail: String,
    },
    /// This build, or this store, cannot do what was asked: a scheme whose
    /// feature is not compiled in, writing to `http://`, an unknown scheme.
    #[error("{location}: {what}")]
    Unsupported {
        /// The path or URI.
        location: String,
        /// What is not supported, and what to do instead.
        what: String,
    },
    /// The caller asked for something impossible (wrong buffer size,
    /// unknown tensor, missing key, ...).
    #[error("{0}")]
    Invalid(String),
    /// A CA bundle or directory named by the TLS options or the
    /// environment could not be used (see [`crate::store::tls`]).
    #[cfg(feature = "http")]
    #[error(transparent)]
    Tls(#[from] crate::store::tls::TlsError),
    /// The CUDA driver is missing or failed (see [`crate::device::cuda`]).
    #[cfg(feature = "cuda")]
    #[error("{0}")]
    Cuda(String),
}

impl Error {
    pub(crate) fn format(file: impl Into<String>, source: tensorizer_core::Error) -> Self {
        Self::Format { file: file.into(), source: Box::new(source) }
    }

    pub(crate) fn tensor(
        file: impl Into<String>,
        tensor: impl Into<String>,
        source: tensorizer_core::Error,
    ) -> Self {
        Self::Tensor { file: file.into(), tensor: tensor.into(), source: Box::new(source) }
    }

    /// A [`Store`](Self::Store) error.
    #[cfg_attr(not(any(feature = "http", feature = "redis")), allow(dead_code))]
    pub(crate) fn store(
        location: impl Into<String>,
        range: Option<Range<u64>>,
        kind: StoreErrorKind,
        detail: impl fmt::Display,
    ) -> Self {
        Self::Store { location: location.into(), range, kind, detail: detail.to_string() }
    }

    /// The kind of store failure, for [`Store`](Self::Store) errors and
    /// for I/O errors of a matching [`io::ErrorKind`] (a missing local
    /// file is `NotFound` too).
    pub fn store_kind(&self) -> Option<StoreErrorKind> {
        match self {
            Self::Store { kind, .. } => Some(*kind),
            Self::Io { source, .. } | Self::File { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => Some(StoreErrorKind::NotFound),
                io::ErrorKind::PermissionDenied => Some(StoreErrorKind::PermissionDenied),
                io::ErrorKind::AlreadyExists => Some(StoreErrorKind::AlreadyExists),
                // A socket read timeout surfaces as `WouldBlock`.
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                    Some(StoreErrorKind::TimedOut)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// The format-core error behind this error, if any.
    pub fn format_error(&self) -> Option<&tensorizer_core::Error> {
        match self {
            Self::Format { source, .. } | Self::Tensor { source, .. } => Some(&**source),
            _ => None,
        }
    }

    /// The absolute byte offset the error points at: the field a format
    /// error names, where an I/O error happened, the start of a failed
    /// range.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Self::Format { source, .. } | Self::Tensor { source, .. } => source.offset(),
            Self::Io { offset, .. } => Some(*offset),
            Self::Store { range, .. } => range.as_ref().map(|r| r.start),
            Self::Safetensors { offset, .. } => *offset,
            _ => None,
        }
    }

    /// The tensor the error is about, where it names one.
    pub fn tensor_name(&self) -> Option<&str> {
        match self {
            Self::Tensor { tensor, .. } => Some(tensor),
            Self::Format { source, .. } => source.tensor_name(),
            Self::Safetensors { tensor, .. } => tensor.as_deref(),
            _ => None,
        }
    }

    /// The file or location (path or URI) the error is about, where it
    /// names one.
    pub fn location(&self) -> Option<&str> {
        match self {
            Self::Format { file, .. }
            | Self::Tensor { file, .. }
            | Self::Io { file, .. }
            | Self::File { file, .. }
            | Self::OtherFormat { file, .. }
            | Self::UnknownFormat { file }
            | Self::Safetensors { file, .. }
            | Self::WrongKey { file } => Some(file),
            Self::Store { location, .. } | Self::Unsupported { location, .. } => Some(location),
            _ => None,
        }
    }

    /// Whether this is a verification failure (hash mismatch or failed
    /// decryption) rather than unreadable input.
    pub fn is_verification_failure(&self) -> bool {
        matches!(self, Self::WrongKey { .. })
            || matches!(
                self.format_error(),
                Some(
                    tensorizer_core::Error::HashMismatch { .. }
                        | tensorizer_core::Error::Decryption
                )
            )
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An open, create, size, sync or rename failure of `file` (no offset).
pub(crate) fn file_err(file: &str) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::File { file: file.to_string(), source }
}

pub(crate) fn io_err(file: &str, offset: u64) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io { file: file.to_string(), offset, source }
}
