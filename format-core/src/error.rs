//! The crate's single error type. Every structural error names the absolute
//! byte offset where the problem was found.

use alloc::string::String;
use core::fmt;

/// Which stored hash failed verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashKind {
    /// The CRC-32 (zlib / IEEE) value.
    Crc32,
    /// The SHA-256 digest.
    Sha256,
}

impl fmt::Display for HashKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Crc32 => "CRC32",
            Self::Sha256 => "SHA256",
        })
    }
}

/// Everything that can go wrong while parsing, emitting, hashing or
/// decrypting tensorizer data.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The input ended early: `needed` more bytes were required at `offset`.
    Truncated {
        /// Absolute offset where more bytes were needed.
        offset: u64,
        /// How many bytes were still missing.
        needed: u64,
    },
    /// The file does not start with `|TZR|`.
    NotTensorizer,
    /// The data version is not one of 1 to 5.
    UnsupportedVersion {
        /// The version found in the file.
        version: u32,
    },
    /// The feature flags contain bits this format does not define, or a flag
    /// the data version does not allow.
    UnsupportedFlags {
        /// The lowest 64 bits of the flags field.
        flags: u64,
        /// The data version of the file.
        version: u32,
    },
    /// The bytes at `offset` do not form a valid record.
    Malformed {
        /// Absolute offset of the offending field.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A declared size is above one of the limits in [`crate::layout`].
    LimitExceeded {
        /// Absolute offset of the declaring field.
        offset: u64,
        /// What the size measures.
        what: &'static str,
        /// The declared value.
        value: u64,
        /// The limit it broke.
        limit: u64,
    },
    /// A tensor name is not a valid plain or structured tensor path.
    InvalidName {
        /// Absolute offset of the name (0 when emitting).
        offset: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A dtype string this crate cannot interpret.
    UnsupportedDtype {
        /// Absolute offset of the dtype string (0 when emitting).
        offset: u64,
        /// The dtype string, lossily decoded.
        dtype: String,
    },
    /// Two tensor paths conflict: a duplicate, a path that is also a prefix
    /// of another, or string and integer keys mixed at one level.
    ConflictingPaths {
        /// The path that could not be registered.
        path: String,
    },
    /// A tensor header disagrees with its metadata index entry.
    HeaderMismatch {
        /// Absolute offset of the tensor header.
        offset: u64,
        /// The field that differs.
        field: &'static str,
    },
    /// A stored hash does not match the recomputed one.
    HashMismatch {
        /// The tensor's name as stored.
        tensor: String,
        /// Which hash failed.
        kind: HashKind,
        /// The stored value (CRC-32 in decimal as tensorizer prints it,
        /// SHA-256 in hex).
        expected: String,
        /// The recomputed value, in the same notation.
        actual: String,
    },
    /// Decryption failed: wrong key, or corrupted ciphertext or MAC.
    /// Deliberately carries no detail.
    Decryption,
    /// The file (or tensor) is encrypted but no key was supplied, or a key
    /// was supplied for data that is not encrypted, or the key material does
    /// not fit the file (for example a passphrase for a file without a
    /// key-derivation chunk).
    Encryption {
        /// What does not fit.
        reason: &'static str,
    },
    /// The writer's metadata reservation is too small for the tensors given.
    MetadataOverflow {
        /// Bytes the index needs.
        needed: u64,
        /// Bytes reserved.
        capacity: u64,
    },
    /// A writer was given an argument it cannot encode.
    InvalidArgument {
        /// What is wrong.
        reason: &'static str,
    },
    /// The input is not a ZIP archive (no usable end-of-central-directory
    /// record, or no local file header at byte 0).
    NotZip {
        /// What is missing.
        reason: &'static str,
    },
    /// A legacy (pre-zip) `torch.save` file, which can only be read by
    /// unpickling it. Nothing of it is interpreted.
    LegacyTorchCheckpoint {
        /// What the file looks like.
        layout: &'static str,
    },
    /// A ZIP entry is compressed (or encrypted); checkpoints are read only
    /// from stored entries, which can be sliced without inflating.
    CompressedEntry {
        /// Absolute offset of the entry's central-directory record.
        offset: u64,
        /// The entry name, lossily decoded.
        name: String,
        /// The compression method (0xFFFF for an encrypted entry).
        method: u16,
    },
    /// The pickle names a global outside the state-dict allow-list.
    /// Nothing is imported or called.
    ForbiddenGlobal {
        /// Absolute offset of the opcode.
        offset: u64,
        /// The module, lossily decoded (cut at 200 bytes).
        module: String,
        /// The name, lossily decoded (cut at 200 bytes).
        name: String,
    },
    /// A pickle opcode this reader does not interpret.
    UnsupportedOpcode {
        /// Absolute offset of the opcode.
        offset: u64,
        /// The opcode byte.
        opcode: u8,
    },
    /// The checkpoint's structure is well-formed pickle and ZIP but its
    /// torch layout is inconsistent (a view outside its storage, a missing
    /// storage entry, a storage of the wrong length...).
    CorruptCheckpoint {
        /// The state-dict entry or storage key concerned.
        key: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A host's positioned read failed ([`crate::source::RandomAccess`]).
    Read {
        /// Absolute offset of the read.
        offset: u64,
        /// What the host reported.
        message: String,
    },
    /// Memory for something the file really holds could not be had.
    OutOfMemory {
        /// Absolute offset of what was to be read.
        offset: u64,
        /// What it is.
        what: &'static str,
        /// How many bytes were asked for.
        bytes: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { offset, needed } => {
                write!(f, "file truncated at byte {offset}: {needed} more bytes needed")
            }
            Self::NotTensorizer => {
                f.write_str("Not a tensorizer file (the magic bytes |TZR| are missing)")
            }
            Self::UnsupportedVersion { version } => {
                write!(
                    f,
                    "Unsupported version: data version {version} (this reader handles 1 to 5)"
                )
            }
            Self::UnsupportedFlags { flags, version } if flags & 2 != 0 && *version < 5 => {
                write!(
                    f,
                    "Invalid feature flag present: versioned headers need data version 5, the file has {version}"
                )
            }
            Self::UnsupportedFlags { flags, version } => {
                write!(f, "Unsupported feature flags {flags:#x} for data version {version}")
            }
            Self::Malformed { offset, reason } => write!(f, "malformed at byte {offset}: {reason}"),
            Self::LimitExceeded { offset, what, value, limit } => {
                write!(f, "at byte {offset}: {what} is {value}, above the limit of {limit}")
            }
            Self::InvalidName { offset, reason } => {
                write!(f, "invalid tensor name at byte {offset}: {reason}")
            }
            Self::UnsupportedDtype { offset, dtype } => {
                write!(f, "unsupported dtype {dtype:?} at byte {offset}")
            }
            Self::ConflictingPaths { path } => write!(f, "Conflicting tensor paths at {path}"),
            Self::HeaderMismatch { offset, field } => {
                write!(
                    f,
                    "tensor header at byte {offset} disagrees with the metadata index ({field})"
                )
            }
            Self::HashMismatch { tensor, kind, expected, actual } => {
                write!(
                    f,
                    "tensor {tensor:?} failed {kind} verification: expected {expected}, got {actual}"
                )
            }
            Self::Decryption => {
                f.write_str("Tensor decryption failed (wrong key or corrupted data)")
            }
            Self::Encryption { reason } => write!(f, "encryption: {reason}"),
            Self::MetadataOverflow { needed, capacity } => {
                write!(
                    f,
                    "metadata overflow: the index needs {needed} bytes but {capacity} are reserved"
                )
            }
            Self::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            Self::NotZip { reason } => write!(f, "not a torch.save zip checkpoint: {reason}"),
            Self::LegacyTorchCheckpoint { layout } => write!(
                f,
                "legacy (pre-zip) torch.save checkpoint ({layout}): it can only be read by unpickling, which this \
                 reader never does. Convert it in a trusted environment: `torch.save(torch.load(path, weights_only=True), \
                 new_path)` with torch 1.6 or later writes the zip format"
            ),
            Self::CompressedEntry { offset, name, method } => write!(
                f,
                "zip entry {name:?} (central record at byte {offset}) uses compression method {method}; \
                 only stored (uncompressed) entries are read, as torch.save writes them"
            ),
            Self::ForbiddenGlobal { offset, module, name } => write!(
                f,
                "pickle at byte {offset} references {module}.{name}, which is not part of a state dict; refused \
                 (nothing is executed)"
            ),
            Self::UnsupportedOpcode { offset, opcode } => {
                write!(
                    f,
                    "pickle opcode {opcode:#04x} at byte {offset} is not supported by this reader"
                )
            }
            Self::CorruptCheckpoint { key, reason } => {
                write!(f, "corrupt checkpoint at {key:?}: {reason}")
            }
            Self::Read { offset, message } => write!(f, "read failed at byte {offset}: {message}"),
            Self::OutOfMemory { offset, what, bytes } => {
                write!(
                    f,
                    "cannot allocate {bytes} bytes for {what} at byte {offset} (raise the memory limit)"
                )
            }
        }
    }
}

impl core::error::Error for Error {}

impl From<crate::source::ReadError> for Error {
    fn from(e: crate::source::ReadError) -> Self {
        Self::Read { offset: e.offset, message: e.message }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// The absolute byte offset the error points at, where it has one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Self::Truncated { offset, .. }
            | Self::Malformed { offset, .. }
            | Self::LimitExceeded { offset, .. }
            | Self::InvalidName { offset, .. }
            | Self::UnsupportedDtype { offset, .. }
            | Self::HeaderMismatch { offset, .. }
            | Self::CompressedEntry { offset, .. }
            | Self::ForbiddenGlobal { offset, .. }
            | Self::UnsupportedOpcode { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// The tensor (or checkpoint key) the error names, where it names one.
    pub fn tensor_name(&self) -> Option<&str> {
        match self {
            Self::HashMismatch { tensor, .. } => Some(tensor),
            Self::CorruptCheckpoint { key, .. } => Some(key),
            _ => None,
        }
    }

    #[cold]
    pub(crate) fn malformed(offset: u64, reason: &'static str) -> Self {
        Self::Malformed { offset, reason }
    }

    #[cold]
    pub(crate) fn truncated(offset: u64, needed: u64) -> Self {
        Self::Truncated { offset, needed }
    }

    #[cold]
    pub(crate) fn limit(offset: u64, what: &'static str, value: u64, limit: u64) -> Self {
        Self::LimitExceeded { offset, what, value, limit }
    }

    #[cold]
    pub(crate) fn invalid(reason: &'static str) -> Self {
        Self::InvalidArgument { reason }
    }
}
