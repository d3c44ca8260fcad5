//! One model-file scanner: tells the format from the bytes, walks the
//! structure as permissively as the loaders that accept the file, and
//! reports every anomaly as a [`Finding`] with a stable rule id
//! ([`rules`]), a byte offset and a remediation. Nothing is executed.
//!
//! Sans-IO like the rest of the core: [`scan`] reads through a
//! [`RandomAccess`] the host supplies, one bounded read at a time. Memory is
//! bounded by the limits in [`crate::layout`]; findings are deterministic
//! (sorted by offset, then rule) and bounded
//! ([`MAX_FINDINGS_PER_RULE`](crate::layout::MAX_FINDINGS_PER_RULE), then
//! one [`RuleId::FindingsCapped`] finding per rule saying how many more
//! there were).
//!
//! Formats, asked in this order ([`crate::sniff::classify`]):
//! tensorizer ([`tensorizer`]), torch.save zip archives ([`zip`], every
//! `*.pkl` inside through [`pickle`]), safetensors ([`crate::safetensors`]),
//! legacy `torch.save` pickle streams and bare pickles ([`pickle`]).
//!
//! With `--verify`, tensorizer hashes and authentication are checked by
//! the host's streaming verifier; [`rule_for_error`] maps its failures to
//! the same rules.

mod allow;
pub(crate) mod buffer;
pub(crate) mod finding;
pub mod gguf;
pub mod pickle;
pub mod rules;
pub mod sarif;
pub mod shards;
pub mod suppress;
pub mod tensorizer;
pub mod zip;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

pub(crate) use buffer::read_vec;
pub use buffer::zeroed;
pub use finding::{Finding, Findings};
pub use rules::{RULES, Rule, RuleId, Severity};

use crate::error::{Error, Result};
use crate::layout::ParseLimits;
use crate::sniff::{Classified, classify};
use crate::source::RandomAccess;

/// A file format as the scanner names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// A tensorizer (`.tensors`) file.
    Tensorizer,
    /// A safetensors file.
    Safetensors,
    /// A `torch.save` ZIP archive (or any ZIP archive).
    TorchZip,
    /// A legacy `torch.save` pickle stream (torch's magic number first).
    TorchLegacy,
    /// A bare pickle.
    Pickle,
    /// A tar archive (torch's oldest save format), not scanned inside.
    TorchTar,
    /// A sharded checkpoint's index (`*.index.json`, [`shards`]).
    ShardIndex,
    /// A GGUF file (llama.cpp's format, [`gguf`]).
    Gguf,
    /// None of the above.
    Unknown,
}

impl Format {
    /// The name reports use: `tensorizer`, `safetensors`, `torch-zip`,
    /// `torch-legacy`, `pickle`, `torch-tar`, `shard-index`, `gguf`, `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tensorizer => "tensorizer",
            Self::Safetensors => "safetensors",
            Self::TorchZip => "torch-zip",
            Self::TorchLegacy => "torch-legacy",
            Self::Pickle => "pickle",
            Self::TorchTar => "torch-tar",
            Self::ShardIndex => "shard-index",
            Self::Gguf => "gguf",
            Self::Unknown => "unknown",
        }
    }
}

/// What a scan is told besides the bytes.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions<'a> {
    /// The file's name, for [`RuleId::ExtensionMismatch`] (none: not checked).
    pub name: Option<&'a str>,
    /// Limits on a tensorizer index.
    pub limits: ParseLimits,
    /// Whether the host will verify the tensorizer data afterwards (the
    /// memory reserved for the index then includes verification's).
    pub verify: bool,
}

/// The outcome of a scan: the format, the tensor count and the findings,
/// plus the parsed tensorizer index for hosts that report on or verify it.
#[derive(Debug, Clone)]
pub struct Scan {
    /// The format told from the bytes.
    pub format: Format,
    /// Tensors found: index entries (tensorizer), header entries
    /// (safetensors), tensor rebuild calls (pickles).
    pub tensors: u64,
    /// The findings, sorted (see [`Findings::finish`]).
    pub findings: Vec<Finding>,
    /// The file's length.
    pub file_len: u64,
    /// A tensorizer file's header and index, when they parsed.
    pub tensorizer: Option<tensorizer::Index>,
    /// A safetensors file's header, when it parsed.
    pub safetensors: Option<crate::safetensors::Header>,
    /// A torch zip checkpoint's tensors, when the checkpoint reader reads
    /// its `data.pkl` (a pickle with any global off the reader's list has
    /// none).
    pub torch_rows: Option<Vec<crate::report::TensorRow>>,
    /// A shard index's map, when it parsed (its shards are checked by the
    /// host, [`shards::check`]).
    pub shard_index: Option<shards::ShardIndex>,
    /// A GGUF file's header, when it parsed.
    pub gguf: Option<crate::gguf::Header>,
}

impl Scan {
    /// Whether nothing was found.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    /// Whether every finding is suppressed (or there is none): the JSON
    /// reports' `valid`.
    pub fn is_valid(&self) -> bool {
        self.findings.iter().all(|f| f.suppressed.is_some())
    }

    /// The names of the tensors the file holds, when its format lists
    /// them and they were read (a shard index checks its map against them).
    pub fn tensor_names(&self) -> Option<alloc::collections::BTreeSet<String>> {
        use alloc::string::ToString as _;
        if let Some(h) = &self.gguf {
            return Some(h.tensors.iter().map(|t| t.name.clone()).collect());
        }
        if let Some(i) = &self.tensorizer {
            return Some(i.metadata.entries.iter().map(|e| e.path.to_string()).collect());
        }
        if let Some(h) = &self.safetensors {
            return Some(h.tensors.iter().map(|t| t.name.clone()).collect());
        }
        self.torch_rows.as_ref().map(|rows| rows.iter().map(|r| r.name.clone()).collect())
    }

    /// Adds `more` (a shard index's [`shards::check`]) to the findings,
    /// sorted as a scan sorts them.
    pub fn add_findings(&mut self, more: Vec<Finding>) {
        let mut all = Findings::default();
        all.extend(core::mem::take(&mut self.findings));
        all.extend(more);
        self.findings = all.finish();
    }
}

/// Scans `src`. Findings are the file's problems; an `Err` means the scan
/// itself could not be done (a failed read, memory that could not be had).
pub fn scan<R: RandomAccess + ?Sized>(src: &mut R, options: &ScanOptions<'_>) -> Result<Scan> {
    let file_len = src.len();
    let mut head = [0u8; crate::checkpoint::SNIFF_LEN];
    let head = &mut head
        [..usize::try_from(file_len).unwrap_or(usize::MAX).min(crate::checkpoint::SNIFF_LEN)];
    src.read_exact_at(0, head)?;
    let mut findings = Findings::default();
    let mut out = Scan {
        format: Format::Unknown,
        tensors: 0,
        findings: Vec::new(),
        file_len,
        tensorizer: None,
        safetensors: None,
        torch_rows: None,
        shard_index: None,
        gguf: None,
    };
    let classified = if head.starts_with(crate::gguf::MAGIC) {
        out.format = Format::Gguf;
        out.gguf = gguf::scan(src, &mut findings)?;
        out.tensors = out.gguf.as_ref().map_or(0, |h| h.tensors.len() as u64);
        None
    } else {
        Some(classify(head, file_len))
    };
    match classified {
        None => {}
        Some(Classified::Tensorizer) => {
            out.format = Format::Tensorizer;
            out.tensorizer = tensorizer::scan(src, options, &mut findings)?;
            out.tensors = out.tensorizer.as_ref().map_or(0, |i| i.metadata.entries.len() as u64);
        }
        Some(Classified::Zip) => {
            out.format = Format::TorchZip;
            let z = zip::scan(src, &mut findings)?;
            (out.tensors, out.torch_rows) = (z.tensors, z.rows);
        }
        Some(Classified::Safetensors { header_len }) => {
            out.format = Format::Safetensors;
            out.safetensors = crate::safetensors::scan(src, header_len, &mut findings)?;
            out.tensors = out.safetensors.as_ref().map_or(0, |h| h.tensors.len() as u64);
        }
        Some(Classified::TorchLegacy) => {
            out.format = Format::TorchLegacy;
            out.tensors =
                pickle::scan_stream(src, 0, file_len, pickle::Stream::TorchLegacy, &mut findings)?;
        }
        Some(Classified::Pickle) => {
            out.format = Format::Pickle;
            out.tensors =
                pickle::scan_stream(src, 0, file_len, pickle::Stream::Bare, &mut findings)?;
        }
        Some(Classified::Tar) => {
            out.format = Format::TorchTar;
            findings.push(Finding::new(
                RuleId::PklNotScanned,
                Some(0),
                "a tar archive (torch's oldest save format): its pickles were not scanned",
            ));
        }
        Some(Classified::Unknown) => {
            // A ZIP with bytes in front (a polyglot) has its end record at
            // the end; a protocol 0 pickle has no header at all.
            if zip::has_end_record(src)? {
                out.format = Format::TorchZip;
                let z = zip::scan(src, &mut findings)?;
                (out.tensors, out.torch_rows) = (z.tensors, z.rows);
            } else if shards::sniff(head) {
                out.format = Format::ShardIndex;
                out.shard_index = shards::scan(src, &mut findings)?;
                out.tensors = out.shard_index.as_ref().map_or(0, |i| i.weight_map.len() as u64);
            } else if let Some((n, found)) = pickle::guess(src, head)? {
                out.format = Format::Pickle;
                out.tensors = n;
                findings.merge(found);
            } else {
                findings.push(Finding::new(RuleId::UnknownFormat, Some(0), unknown_message(head)));
            }
        }
    }
    if let Some(name) = options.name
        && let Some(f) = extension_mismatch(name, out.format)
    {
        findings.push(f);
    }
    out.findings = findings.finish();
    Ok(out)
}

fn unknown_message(head: &[u8]) -> String {
    let shown: String = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
    if head.is_empty() {
        "the file is empty".into()
    } else {
        format!("no known format starts with bytes {shown}")
    }
}

/// The formats a file name's extension promises, or `None` when the
/// extension says nothing (`.bin` holds anything).
fn promised(name: &str) -> Option<&'static [Format]> {
    let ext = name.rsplit_once('.').map(|(_, e)| e)?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "safetensors" => &[Format::Safetensors],
        "tensors" => &[Format::Tensorizer],
        "pt" | "pth" | "ckpt" => {
            &[Format::TorchZip, Format::TorchLegacy, Format::Pickle, Format::TorchTar]
        }
        "pkl" | "pickle" => &[Format::Pickle, Format::TorchLegacy],
        "gguf" => &[Format::Gguf],
        _ => return None,
    })
}

fn extension_mismatch(name: &str, format: Format) -> Option<Finding> {
    let ok = promised(name)?;
    if ok.contains(&format) || format == Format::Unknown {
        return None;
    }
    Some(Finding::new(
        RuleId::ExtensionMismatch,
        Some(0),
        format!(
            "the name ends in .{} but the bytes are {}",
            name.rsplit_once('.')?.1,
            format.as_str()
        ),
    ))
}

/// The rule a core error found in a tensorizer file breaks.
pub fn rule_for_error(e: &Error) -> RuleId {
    match e {
        Error::NotTensorizer
        | Error::UnsupportedVersion { .. }
        | Error::UnsupportedFlags { .. } => RuleId::TzrFileHeader,
        Error::LimitExceeded { .. } => RuleId::TzrLimit,
        Error::Truncated { .. } => RuleId::TzrTruncated,
        Error::HeaderMismatch { .. } => RuleId::TzrTensorHeader,
        Error::HashMismatch { .. } => RuleId::TzrHashMismatch,
        Error::Decryption => RuleId::TzrAuthFailed,
        Error::Encryption { .. } => RuleId::TzrEncryption,
        _ => RuleId::TzrIndex,
    }
}

/// The byte offset a core error names, if any.
pub fn error_offset(e: &Error) -> Option<u64> {
    match e {
        Error::Truncated { offset, .. }
        | Error::Malformed { offset, .. }
        | Error::LimitExceeded { offset, .. }
        | Error::InvalidName { offset, .. }
        | Error::UnsupportedDtype { offset, .. }
        | Error::HeaderMismatch { offset, .. }
        | Error::Read { offset, .. }
        | Error::OutOfMemory { offset, .. } => Some(*offset),
        Error::NotTensorizer => Some(0),
        Error::UnsupportedVersion { .. } => Some(5),
        Error::UnsupportedFlags { .. } => Some(9),
        _ => None,
    }
}

/// Whether `e` means the scan could not be done (not a problem of the file).
pub fn is_scan_failure(e: &Error) -> bool {
    matches!(e, Error::Read { .. } | Error::OutOfMemory { .. })
}

/// A name (a zip entry's, a pickle's context) as messages show it: quoted,
/// control characters escaped.
pub(crate) fn shown(name: &str) -> String {
    format!("{name:?}")
}

#[cfg(test)]
mod tests;
