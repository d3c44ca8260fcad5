//! The JSON report. Field names are a stable contract (documented in the
//! crate README); new fields may be added, none renamed or removed without
//! bumping [`REPORT_VERSION`].

use std::collections::BTreeMap;

use serde::Serialize;
use tensorizer_core::MetadataEntry;
use tensorizer_core::scan::suppress::{self, Suppression};
use tensorizer_core::scan::{Finding, Findings, Format, RuleId, Scan};
use tensorizer_core::totals::Totals;

use crate::error::ValidateError;

/// Version of the report layout. 4: safetensors and torch zip files have
/// tensor rows, and `by_dtype` uses torch's dtype names for every format;
/// 3: `format` and `findings`, the fields only a tensorizer file has are
/// `null` for other formats.
pub const REPORT_VERSION: u32 = 4;

/// The whole report: file header, totals, one row per tensor, and the
/// verification summary when `--verify` was given.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`REPORT_VERSION`].
    pub report_version: u32,
    /// The path as given on the command line.
    pub file: String,
    /// The format told from the bytes: `tensorizer`, `safetensors`,
    /// `torch-zip`, `torch-legacy`, `pickle`, `torch-tar` or `unknown`.
    pub format: &'static str,
    /// File length in bytes.
    pub file_bytes: u64,
    /// Data version, 1 to 5 (tensorizer files only).
    pub data_version: Option<u32>,
    /// The feature-flag byte (bit 0 encrypted, bit 1 versioned headers).
    pub feature_flags: Option<u8>,
    /// Whether tensor headers carry crypt info (data is encrypted).
    pub encrypted: Option<bool>,
    /// Whether metadata entries carry a version tag (u64 dimensions possible).
    pub versioned_headers: Option<bool>,
    /// The verdict: no findings (the embedding contract: `valid`,
    /// `format`, `tensors`, `findings`).
    pub valid: bool,
    /// Number of tensors: index entries (tensorizer), header entries
    /// (safetensors), tensor rebuild calls (pickles).
    pub tensors: u64,
    /// Every finding, sorted by offset then rule.
    pub findings: Vec<FindingItem>,
    /// The findings in version 2's shape (tensor, offset, message).
    pub errors: Vec<ErrorItem>,
    /// Number of tensors (the same as `tensors`; kept from version 1).
    pub tensor_count: u64,
    /// Stored data bytes over all tensors (tensorizer: the header's total,
    /// meta tensors count 0; safetensors: the data area; torch zip: the
    /// rows' `data_length`s).
    pub data_bytes: u64,
    /// Length of the metadata index (tensorizer files only).
    pub metadata_index_bytes: Option<u64>,
    /// Totals per dtype (torch's name), sorted by name.
    pub by_dtype: BTreeMap<String, DtypeTotal>,
    /// One row per tensor, in file order (tensorizer, safetensors, and a
    /// torch zip whose state dict the checkpoint reader reads).
    pub tensor_rows: Vec<TensorRow>,
    /// The verification summary; `null` without `--verify`.
    pub verification: Option<VerifySummary>,
    /// The shard index this file is a shard of (spec §22.3), when one
    /// named it; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A shard index's shards that were found, as paths; absent for any
    /// other file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<String>>,
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
        Self {
            tensor: tensor.map(str::to_owned),
            offset: error.offset,
            message: error.message.clone(),
        }
    }
}

/// One finding, as the report lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FindingItem {
    /// The stable rule id (`TZR-004`, `PKL-001`, ...).
    pub rule: &'static str,
    /// `error`, `warning` or `note`.
    pub severity: &'static str,
    /// Whether its rule means loading the file runs code (spec §22.3).
    pub executes_code: bool,
    /// Absolute byte offset, when there is one.
    pub offset: Option<u64>,
    /// Bytes spanned from `offset`, when known.
    pub length: Option<u64>,
    /// The tensor or archive entry concerned.
    pub tensor: Option<String>,
    /// One line.
    pub message: String,
    /// What to do about it.
    pub remediation: &'static str,
    /// How many findings of one cause it stands for (spec §22.1).
    pub count: u64,
    /// The reason of the suppression entry that accepts it (spec §22.8),
    /// or `null`.
    pub suppressed: Option<String>,
}

impl FindingItem {
    /// The core's finding for this item (for SARIF and suppressions).
    pub fn to_finding(&self) -> Finding {
        let rule = RuleId::from_id(self.rule).unwrap_or(RuleId::UnknownFormat);
        let mut out = Finding::new(rule, self.offset, self.message.clone());
        out.length = self.length;
        out.tensor = self.tensor.clone();
        out.count = self.count;
        out.suppressed = self.suppressed.as_deref().map(Into::into);
        out
    }
}

impl From<&Finding> for FindingItem {
    fn from(f: &Finding) -> Self {
        Self {
            rule: f.rule.as_str(),
            severity: f.severity.as_str(),
            executes_code: f.rule.executes_code(),
            offset: f.offset,
            length: f.length,
            tensor: f.tensor.as_deref().map(crate::error::one_line),
            message: crate::error::one_line(&f.message),
            remediation: f.remediation,
            count: f.count,
            suppressed: f.suppressed.as_deref().map(str::to_owned),
        }
    }
}

impl Report {
    /// The report for a scan whose file is not a tensorizer file (or whose
    /// tensorizer index did not parse).
    pub fn from_scan(scan: &Scan, file: &str) -> Self {
        let rows = scan_rows(scan);
        let mut totals = Totals::new();
        for r in &rows {
            totals.add(&r.module, &r.dtype, &r.shape, r.bytes, r.data_length);
        }
        let data_bytes = match &scan.safetensors {
            Some(h) => scan.file_len.saturating_sub(h.data_start()),
            None => rows.iter().fold(0u64, |n, r| n.saturating_add(r.data_length)),
        };
        let by_dtype = dtype_totals(&totals);
        Self {
            report_version: REPORT_VERSION,
            file: file.to_string(),
            format: scan.format.as_str(),
            file_bytes: scan.file_len,
            data_version: None,
            feature_flags: None,
            encrypted: None,
            versioned_headers: None,
            valid: true,
            tensors: scan.tensors,
            findings: Vec::new(),
            errors: Vec::new(),
            tensor_count: scan.tensors,
            data_bytes,
            metadata_index_bytes: None,
            by_dtype,
            tensor_rows: rows
                .into_iter()
                .map(|row| TensorRow { row, verification: None })
                .collect(),
            verification: None,
            model: None,
            shards: None,
        }
        .with_findings(&scan.findings)
    }

    /// Sets the scan's findings (sorted and capped by the core).
    pub fn with_findings(mut self, findings: &[Finding]) -> Self {
        self.findings = findings.iter().map(FindingItem::from).collect();
        self.conclude();
        self
    }

    /// Adds the per-tensor verification failures as findings (capped per
    /// rule as the core caps them, and not repeating a finding the scan
    /// already made), then fills `valid` and `errors`. Call after
    /// verification.
    pub fn conclude(&mut self) {
        let mut more = Findings::default();
        for t in &self.tensor_rows {
            let Some(e) = t.verification.as_ref().and_then(|v| v.error.as_ref()) else { continue };
            let rule = e.rule.unwrap_or(RuleId::TzrTensorHeader);
            if self.findings.iter().any(|f| f.rule == rule.as_str() && f.offset == e.offset) {
                continue;
            }
            more.push(Finding::new(rule, e.offset, e.message.clone()).in_tensor(t.name.clone()));
        }
        if !more.is_empty() {
            let capped = |f: &FindingItem| f.rule == RuleId::FindingsCapped.as_str();
            let (mut notes, mut all): (Vec<FindingItem>, Vec<FindingItem>) =
                self.findings.drain(..).partition(capped);
            let new = more.finish();
            all.extend(
                new.iter().filter(|f| f.rule != RuleId::FindingsCapped).map(FindingItem::from),
            );
            notes.extend(
                new.iter().filter(|f| f.rule == RuleId::FindingsCapped).map(FindingItem::from),
            );
            all.sort_by(|a, b| (a.offset, a.rule).cmp(&(b.offset, b.rule)));
            all.extend(notes);
            self.findings = all;
        }
        self.errors = self
            .findings
            .iter()
            .map(|f| ErrorItem {
                tensor: f.tensor.clone(),
                offset: f.offset,
                message: f.message.clone(),
            })
            .collect();
        self.judge();
    }

    /// Marks the findings `entries` cover (counting each entry's use in
    /// `used`, as `suppress::apply` does), then fills `valid` again.
    pub fn suppress(&mut self, entries: &[Suppression], used: &mut [u64]) {
        let mut found: Vec<Finding> = self.findings.iter().map(FindingItem::to_finding).collect();
        suppress::apply(entries, used, &self.file, &mut found);
        for (item, f) in self.findings.iter_mut().zip(found) {
            item.suppressed = f.suppressed.as_deref().map(str::to_owned);
        }
        self.judge();
    }

    /// `valid`: every finding suppressed (or none), and a failed
    /// verification among them.
    fn judge(&mut self) {
        let unlisted =
            self.findings.is_empty() && self.verification.as_ref().is_some_and(|v| !v.ok);
        self.valid = !unlisted && self.findings.iter().all(|f| f.suppressed.is_some());
    }

    /// Whether the format was told from the bytes as `format`.
    pub fn is(&self, format: Format) -> bool {
        self.format == format.as_str()
    }
}

/// The core's rows for a scan's safetensors header or torch checkpoint
/// (none for other formats, or when they did not parse).
fn scan_rows(scan: &Scan) -> Vec<tensorizer_core::report::TensorRow> {
    use tensorizer_core::report::TensorRow as Row;
    if let Some(h) = &scan.safetensors {
        let start = h.data_start();
        return h
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| Row::of_safetensors(i, t, start))
            .collect();
    }
    scan.torch_rows.clone().unwrap_or_default()
}

/// The report's `by_dtype` from the core's totals (the sums every host's
/// summary shares; this report lists three of them).
pub fn dtype_totals(totals: &Totals) -> BTreeMap<String, DtypeTotal> {
    totals
        .by_dtype
        .iter()
        .map(|(k, t)| {
            (k.clone(), DtypeTotal { tensors: t.tensors, bytes: t.bytes, data_bytes: t.data_bytes })
        })
        .collect()
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

/// One tensor: the core's row ([`tensorizer_core::report::TensorRow`],
/// the fields every inspector shows, read through `Deref`) and, after
/// `--verify`, how it fared. Serialized as one object: the row's members
/// in the core's order, then `verification`.
#[derive(Debug, Clone)]
pub struct TensorRow {
    /// What the metadata index says of the tensor.
    pub row: tensorizer_core::report::TensorRow,
    /// This tensor's verification; `null` without `--verify`.
    pub verification: Option<TensorVerification>,
}

impl std::ops::Deref for TensorRow {
    type Target = tensorizer_core::report::TensorRow;
    fn deref(&self) -> &Self::Target {
        &self.row
    }
}

impl Serialize for TensorRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let members = self.row.members();
        let mut m = s.serialize_map(Some(members.len() + 1))?;
        for (k, v) in &members {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry("verification", &self.verification)?;
        m.end()
    }
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
    TensorRow { row: tensorizer_core::report::TensorRow::of(index, e), verification: None }
}

/// The JSON document printed instead of a report when the file could not
/// be scanned (exit 2).
#[derive(Debug, Clone, Serialize)]
pub struct ErrorReport<'a> {
    /// [`REPORT_VERSION`].
    pub report_version: u32,
    /// The path as given.
    pub file: &'a str,
    /// Always `null`: the file was not read that far.
    pub format: Option<&'static str>,
    /// Always false.
    pub valid: bool,
    /// 0: the file was not read that far.
    pub tensors: usize,
    /// Always empty: nothing was scanned.
    pub findings: Vec<FindingItem>,
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
            format: None,
            valid: false,
            tensors: 0,
            findings: Vec::new(),
            errors: vec![ErrorItem::new(None, error)],
            error,
        }
    }
}
