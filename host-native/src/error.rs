//! The host crate's error type. Every variant names the file (or URI) and,
//! where it applies, the tensor and byte offset.

use std::io;

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
    /// A tensor failed to decrypt or verify, or did not parse.
    #[error("{file}: tensor {tensor:?}: {source}")]
    Tensor {
        /// The file.
        file: String,
        /// The tensor's name.
        tensor: String,
        /// What went wrong.
        #[source]
        source: Box<tensorizer_core::Error>,
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
    /// The caller asked for something impossible (wrong buffer size,
    /// unknown tensor, missing key, ...).
    #[error("{0}")]
    Invalid(String),
    /// A CA bundle or directory named by the TLS options or the
    /// environment could not be used (see [`crate::tls`]).
    #[cfg(feature = "http")]
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The CUDA driver is missing or failed (see [`crate::cuda`]).
    #[cfg(feature = "cuda")]
    #[error("{0}")]
    Cuda(String),
}

impl Error {
    pub(crate) fn format(file: impl Into<String>, source: tensorizer_core::Error) -> Self {
        Self::Format { file: file.into(), source: Box::new(source) }
    }

    pub(crate) fn tensor(file: impl Into<String>, tensor: impl Into<String>, source: tensorizer_core::Error) -> Self {
        Self::Tensor { file: file.into(), tensor: tensor.into(), source: Box::new(source) }
    }

    /// The format-core error behind this error, if any.
    pub fn format_error(&self) -> Option<&tensorizer_core::Error> {
        match self {
            Self::Format { source, .. } | Self::Tensor { source, .. } => Some(&**source),
            _ => None,
        }
    }

    /// Whether this is a verification failure (hash mismatch or failed
    /// decryption) rather than unreadable input.
    pub fn is_verification_failure(&self) -> bool {
        matches!(
            self.format_error(),
            Some(tensorizer_core::Error::HashMismatch { .. } | tensorizer_core::Error::Decryption)
        )
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(file: &str, offset: u64) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io { file: file.to_string(), offset, source }
}
