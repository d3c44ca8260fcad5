//! What the inspector page shows, as one serde structure for all three
//! formats: header fields, totals by dtype and one row per tensor.

use std::collections::BTreeMap;

use serde::Serialize;
use tensorizer_core::{PathComponent, TensorPath};

use crate::error::ValidateError;
use crate::report::DtypeTotal;

/// Version of the summary layout the page reads.
pub const SUMMARY_VERSION: u32 = 1;

/// A file's header and index, ready to show.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// [`SUMMARY_VERSION`].
    pub summary_version: u32,
    /// `tensorizer`, `safetensors` or `torch`.
    pub format: &'static str,
    /// The name the page gave.
    pub file: String,
    /// The file's length.
    pub file_bytes: u64,
    /// Format-specific header fields, in display order: `[label, value]`.
    pub header: Vec<(String, serde_json::Value)>,
    /// Whether tensor data is encrypted (a key is needed to verify).
    pub encrypted: bool,
    /// Number of rows in [`Summary::tensors`].
    pub tensor_count: usize,
    /// Stored data bytes over all tensors.
    pub data_bytes: u64,
    /// Totals per dtype, sorted by name.
    pub by_dtype: BTreeMap<String, DtypeTotal>,
    /// One row per tensor, in file order.
    pub tensors: Vec<Row>,
    /// What "Verify" checks for this format, or why it cannot.
    pub verify: &'static str,
    /// Reads made to open the file.
    pub reads: u64,
    /// Bytes read to open the file.
    pub bytes_read: u64,
}

/// One tensor.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Position in the file's index.
    pub index: usize,
    /// The name as text (structured paths as `a.b[0]`).
    pub name: String,
    /// Path components: strings (keys) and integers (list indices).
    pub path: Vec<serde_json::Value>,
    /// The dtype (torch's name for tensorizer and torch files,
    /// safetensors' own name for safetensors).
    pub dtype: String,
    /// The shape.
    pub shape: Vec<u64>,
    /// In-memory size in bytes.
    pub bytes: u64,
    /// Absolute offset of the data, when known without further reads.
    pub data_offset: Option<u64>,
    /// Stored data bytes.
    pub data_length: u64,
    /// Format-specific detail: tensorizer's tensor type, torch's storage.
    pub kind: String,
    /// A meta tensor: elements but no stored data.
    pub meta: bool,
}

/// The path of `p` as JSON values.
pub fn path_values(p: &TensorPath) -> Vec<serde_json::Value> {
    match p {
        TensorPath::Plain(s) => vec![serde_json::Value::from(s.clone())],
        TensorPath::Structured(c) => c
            .iter()
            .map(|p| match p {
                PathComponent::Key(k) => serde_json::Value::from(k.clone()),
                PathComponent::Index(i) => serde_json::Value::from(*i),
            })
            .collect(),
    }
}

/// Totals by dtype over `rows`.
pub fn totals(rows: &[Row]) -> BTreeMap<String, DtypeTotal> {
    let mut by_dtype: BTreeMap<String, DtypeTotal> = BTreeMap::new();
    for r in rows {
        let t = by_dtype.entry(r.dtype.clone()).or_default();
        t.tensors = t.tensors.saturating_add(1);
        t.bytes = t.bytes.saturating_add(r.bytes);
        t.data_bytes = t.data_bytes.saturating_add(r.data_length);
    }
    by_dtype
}

/// A header field.
pub fn field(label: &str, value: impl Into<serde_json::Value>) -> (String, serde_json::Value) {
    (label.to_string(), value.into())
}

/// The one line the page shows for an error: the message, with the byte
/// offset appended when the message does not already name it.
pub fn error_line(e: &ValidateError) -> String {
    match e.offset {
        Some(at) if !e.message.contains(&format!("byte {at}")) => format!("{} (at byte {at})", e.message),
        _ => e.message.clone(),
    }
}
