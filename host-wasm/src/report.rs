//! The JSON report. Field names are a stable contract (documented in the
//! crate README); new fields may be added, none renamed or removed without
//! bumping [`REPORT_VERSION`].

use std::collections::BTreeMap;

use serde::Serialize;
use tensorizer_core::{MetadataEntry, PathComponent, TensorPath};

use crate::error::ValidateError;

/// Version of the report layout.
pub const REPORT_VERSION: u32 = 2;

/// The whole report: file header, totals, one row per tensor, and the
/// verification summary when `--verify` was given.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`REPORT_VERSION`].
    pub report_version: u32,
    /// The path as given on the command line.
    pub file: String,
    /// File length in bytes.
    pub file_bytes: u64,
    /// Data version, 1 to 5.
    pub data_version: u32,
    /// The feature-flag byte (bit 0 encrypted, bit 1 versioned headers).
    pub feature_flags: u8,
    /// Whether tensor headers carry crypt info (data is encrypted).
    pub encrypted: bool,
    /// Whether metadata entries carry a version tag (u64 dimensions possible).
    pub versioned_headers: bool,
    /// The verdict: the file parsed and, with `--verify`, every tensor
    /// passed (the embedding contract: `valid`, `tensors`, `errors`).
    pub valid: bool,
    /// Number of tensors.
    pub tensors: usize,
    /// Every failure, one line each: empty when `valid`.
    pub errors: Vec<ErrorItem>,
    /// Number of tensors (the same as `tensors`; kept from version 1).
    pub tensor_count: usize,
    /// Stored data bytes over all tensors (the header's total; meta tensors count 0).
    pub data_bytes: u64,
    /// Length of the metadata index.
    pub metadata_index_bytes: u64,
    /// Totals per dtype (torch's name), sorted by name.
    pub by_dtype: BTreeMap<String, DtypeTotal>,
    /// One row per tensor, in file order.
    pub tensor_rows: Vec<TensorRow>,
    /// The verification summary; `null` without `--verify`.
    pub verification: Option<VerifySummary>,
}

/// One failure in the contract's `errors` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorItem {
    /// The tensor's name, or `null` for a failure of the whole file.
    pub tensor: Option<String>,
    /// Absolute byte offset of the offending field, read or chunk.
    pub offset: Option<u64>,
    /// One line.
    pub message: String,
}

impl ErrorItem {
    /// The item for `error`, about `tensor` (or the whole file).
    pub fn new(tensor: Option<&str>, error: &ValidateError) -> Self {
        Self { tensor: tensor.map(str::to_owned), offset: error.offset, message: error.message.clone() }
    }
}

impl Report {
    /// Fills `valid` and `errors` from the per-tensor results (call after
    /// verification).
    pub fn conclude(&mut self) {
        self.errors = self
            .tensor_rows
            .iter()
            .filter_map(|t| Some(ErrorItem::new(Some(&t.name), t.verification.as_ref()?.error.as_ref()?)))
            .collect();
        self.valid = self.errors.is_empty() && self.verification.as_ref().is_none_or(|v| v.ok);
    }
}

/// Totals for one dtype.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DtypeTotal {
    /// Tensors of this dtype.
    pub tensors: u64,
    /// Their in-memory size (item size × elements, meta tensors included).
    pub bytes: u64,
    /// Their stored data bytes (meta tensors count 0).
    pub data_bytes: u64,
}

/// One tensor, as the metadata index describes it.
#[derive(Debug, Clone, Serialize)]
pub struct TensorRow {
    /// Position in the file.
    pub index: usize,
    /// The name as text (structured paths as `a.b[0]`).
    pub name: String,
    /// The path components: strings (keys) and integers (indices).
    pub path: Vec<serde_json::Value>,
    /// `PARAM`, `BUFFER` or `STATE_DICT`.
    pub tensor_type: String,
    /// torch's name for the dtype (`float32`, `bfloat16`, ...).
    pub dtype: String,
    /// The dtype string exactly as stored.
    pub dtype_string: String,
    /// The shape.
    pub shape: Vec<u64>,
    /// In-memory size: item size × elements.
    pub bytes: u64,
    /// Stored data bytes (0 for meta tensors).
    pub data_length: u64,
    /// Whether it is a meta tensor (elements but no stored data).
    pub meta: bool,
    /// Absolute offset of the tensor header.
    pub header_offset: u64,
    /// Absolute offset of the data.
    pub data_offset: u64,
    /// This tensor's verification; `null` without `--verify`.
    pub verification: Option<TensorVerification>,
}

/// How one tensor fared under `--verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorVerification {
    /// `verified`, `unverified` (nothing vouches for the data: no stored
    /// hash and no MAC) or `failed`.
    pub status: Status,
    /// What was checked: `crc32`, `sha256`, `mac` (encrypted data).
    pub checks: Vec<&'static str>,
    /// Why it failed; `null` unless `status` is `failed`.
    pub error: Option<ValidateError>,
}

/// A tensor's verification status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every stored hash (and MAC) matched.
    Verified,
    /// Read and decrypted, but nothing was stored to check it against.
    Unverified,
    /// A hash or MAC did not match, or the tensor header is invalid.
    Failed,
}

/// Totals of a `--verify` run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifySummary {
    /// No tensor failed.
    pub ok: bool,
    /// Tensors whose hashes (or MACs) matched.
    pub verified: usize,
    /// Tensors with nothing to check (no hashes, not encrypted).
    pub unverified: usize,
    /// Tensors that failed.
    pub failed: usize,
    /// Stored data bytes read, decrypted and hashed.
    pub data_bytes_checked: u64,
}

/// The row for a metadata entry (no verification yet).
pub fn row(index: usize, e: &MetadataEntry) -> TensorRow {
    let path = match &e.path {
        TensorPath::Plain(s) => vec![serde_json::Value::from(s.clone())],
        TensorPath::Structured(c) => c
            .iter()
            .map(|p| match p {
                PathComponent::Key(k) => serde_json::Value::from(k.clone()),
                PathComponent::Index(i) => serde_json::Value::from(*i),
            })
            .collect(),
    };
    TensorRow {
        index,
        name: e.path.to_string(),
        path,
        tensor_type: e.tensor_type.to_string(),
        dtype: e.dtype.to_string(),
        dtype_string: e.dtype.as_str().to_string(),
        shape: e.shape.clone(),
        bytes: e.nbytes(),
        data_length: e.data_length,
        meta: e.is_meta(),
        header_offset: e.header_offset,
        data_offset: e.data_offset,
        verification: None,
    }
}

/// The JSON document printed instead of a report when the file cannot be
/// read at all (exit 2 or 3).
#[derive(Debug, Clone, Serialize)]
pub struct ErrorReport<'a> {
    /// [`REPORT_VERSION`].
    pub report_version: u32,
    /// The path as given.
    pub file: &'a str,
    /// Always false.
    pub valid: bool,
    /// 0: the file was not read that far.
    pub tensors: usize,
    /// The one failure, as in a report.
    pub errors: Vec<ErrorItem>,
    /// What went wrong.
    pub error: &'a ValidateError,
}

impl<'a> ErrorReport<'a> {
    /// The document for `error` on `file`.
    pub fn new(file: &'a str, error: &'a ValidateError) -> Self {
        Self {
            report_version: REPORT_VERSION,
            file,
            valid: false,
            tensors: 0,
            errors: vec![ErrorItem::new(None, error)],
            error,
        }
    }
}
