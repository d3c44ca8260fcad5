//! Tensorizer scanning: the file header, the metadata index and every
//! tensor header, each checked as the reader checks it; every failure is a
//! finding with its byte offset. Tensor data (hashes, authentication) is
//! the host's to stream: [`super::rule_for_error`] maps what its verifier
//! finds to the same rules.

use alloc::format;
use alloc::string::ToString;

use super::{Finding, Findings, RuleId, ScanOptions, error_offset, read_vec, rule_for_error};
use crate::codec::file_header::FileHeader;
use crate::codec::metadata::Metadata;
use crate::error::{Error, Result};
use crate::layout::{METADATA_OFFSET, MIN_METADATA_ENTRY_LEN, TENSOR_COUNT_OFFSET};
use crate::read::TensorRecord;
use crate::source::RandomAccess;

/// A tensorizer file's parsed header and index.
#[derive(Debug, Clone)]
pub struct Index {
    /// The file header.
    pub header: FileHeader,
    /// The metadata index.
    pub metadata: Metadata,
}

/// Memory a host may need per tensor of the index to parse it and report
/// on it (entries, the path registry, report rows, JSON text), with room
/// for allocator slack: measured in wasm32 at about 500 to 1,200 bytes
/// with short names.
pub const MEMORY_PER_TENSOR: u64 = 1024;

/// Memory verification adds per tensor (a result and, for a tensor that
/// fails, its message): measured at about 1,800 bytes.
pub const MEMORY_PER_VERIFIED_TENSOR: u64 = 2048;

/// Memory per byte of the index beyond [`MEMORY_PER_TENSOR`]: names and
/// dtypes are copied into the entries, report rows and JSON text.
pub const MEMORY_PER_INDEX_BYTE: u64 = 8;

/// Makes sure the memory parsing and reporting `header`'s index takes can
/// be had before any of it is parsed: reserves it fallibly and gives it
/// back (in wasm, memory once grown stays with the module, so the many
/// small allocations that follow find it). Counts only the tensors the
/// index, present in the file, can hold, so a claimed count alone
/// reserves nothing.
pub fn reserve_for_index(header: &FileHeader, verify: bool) -> Result<()> {
    let per_tensor = MEMORY_PER_TENSOR + if verify { MEMORY_PER_VERIFIED_TENSOR } else { 0 };
    let tensors = header.tensor_count.min(header.metadata_len / MIN_METADATA_ENTRY_LEN as u64);
    let bytes = tensors
        .saturating_mul(per_tensor)
        .saturating_add(header.metadata_len.saturating_mul(MEMORY_PER_INDEX_BYTE));
    let no_memory = || Error::OutOfMemory {
        offset: TENSOR_COUNT_OFFSET,
        what: "the index and its report",
        bytes,
    };
    let n = usize::try_from(bytes).map_err(|_| no_memory())?;
    let mut probe: alloc::vec::Vec<u8> = alloc::vec::Vec::new();
    probe.try_reserve_exact(n).map_err(|_| no_memory())
}

/// The finding for a core error met while reading a tensorizer file's
/// header or index (`rule` is the rule it breaks).
pub fn finding(rule: RuleId, e: &Error) -> Finding {
    let offset = error_offset(e);
    let mut message = format!("{e}");
    if let Some(at) = offset
        && !message.contains("byte ")
    {
        message.push_str(&format!(" (at byte {at})"));
    }
    Finding::new(rule, offset, message)
}

/// The rule a core error met in one tensor's header breaks: sizes and
/// limits keep their rules, everything else is [`RuleId::TzrTensorHeader`].
pub fn tensor_rule(e: &Error) -> RuleId {
    match rule_for_error(e) {
        r @ (RuleId::TzrTruncated
        | RuleId::TzrLimit
        | RuleId::TzrEncryption
        | RuleId::TzrHashMismatch) => r,
        RuleId::TzrAuthFailed => RuleId::TzrAuthFailed,
        _ => RuleId::TzrTensorHeader,
    }
}

/// The rule an error in a tensor's encryption metadata breaks.
fn cipher_rule(e: &Error) -> RuleId {
    match rule_for_error(e) {
        r @ (RuleId::TzrTruncated | RuleId::TzrLimit) => r,
        _ => RuleId::TzrEncryption,
    }
}

/// Scans a tensorizer file: `None` when the header or index could not be
/// parsed (the findings say why).
pub fn scan<R: RandomAccess + ?Sized>(
    src: &mut R,
    options: &ScanOptions<'_>,
    findings: &mut Findings,
) -> Result<Option<Index>> {
    let len = src.len();
    let head = read_vec(src, 0, len.min(FileHeader::LEN as u64), "the file header")?;
    let header = match FileHeader::parse(&head) {
        Ok(h) => h,
        Err(e) => {
            findings.push(finding(rule_for_error(&e), &e));
            return Ok(None);
        }
    };
    let available = len.saturating_sub(METADATA_OFFSET);
    if header.metadata_len > available {
        let e = Error::Truncated { offset: len, needed: header.metadata_len - available };
        findings.push(finding(RuleId::TzrTruncated, &e));
        return Ok(None);
    }
    if header.tensor_count <= options.limits.max_tensors {
        reserve_for_index(&header, options.verify)?;
    }
    let index = read_vec(src, METADATA_OFFSET, header.metadata_len, "the metadata index")?;
    let metadata = match Metadata::parse_within(&header, &index, &options.limits) {
        Ok(m) => m,
        Err(e) => {
            findings.push(finding(rule_for_error(&e), &e));
            return Ok(None);
        }
    };
    drop(index);
    let entries = &metadata.entries;
    let mut window = Window::default();
    for (i, entry) in entries.iter().enumerate() {
        let name = || entry.path.to_string();
        if entry.data_end() > len {
            let e = Error::Truncated {
                offset: entry.header_offset.min(len),
                needed: entry.data_end() - len,
            };
            findings.push_lazy(RuleId::TzrTruncated, || {
                finding(RuleId::TzrTruncated, &e).in_tensor(name())
            });
            if entry.data_offset > len {
                continue;
            }
        }
        let raw = window.get(src, entries, i)?;
        let (rule, e) = match TensorRecord::parse(entry, raw, &header) {
            Err(e) => (tensor_rule(&e), e),
            Ok(record) => match record.cipher() {
                Err(e) => (cipher_rule(&e), e),
                Ok(_) => continue,
            },
        };
        findings.push_lazy(rule, || finding(rule, &e).in_tensor(name()));
    }
    Ok(Some(Index { header, metadata }))
}

/// Bytes read at once to reach several tensor headers: the headers of
/// small tensors (and the data between them) come in one read, a large
/// tensor's header alone.
pub const HEADER_READ_WINDOW: u64 = 1 << 20;

/// The bytes of the last read, and where they start.
#[derive(Debug, Default)]
struct Window {
    start: u64,
    bytes: alloc::vec::Vec<u8>,
}

impl Window {
    /// Tensor `i`'s header bytes (its entry lies within the file). A read
    /// starting at the header covers every following header that ends
    /// within [`HEADER_READ_WINDOW`] of it (and within the file).
    fn get<R: RandomAccess + ?Sized>(
        &mut self,
        src: &mut R,
        entries: &[crate::MetadataEntry],
        i: usize,
    ) -> Result<&[u8]> {
        let e = &entries[i];
        let end = self.start.saturating_add(self.bytes.len() as u64);
        if e.header_offset < self.start || e.data_offset > end {
            let limit = e.header_offset.saturating_add(HEADER_READ_WINDOW).min(src.len());
            let reach = entries[i..]
                .iter()
                .map(|n| n.data_offset)
                .take_while(|&d| d <= limit)
                .last()
                .unwrap_or(e.data_offset)
                .max(e.data_offset);
            self.bytes = read_vec(src, e.header_offset, reach - e.header_offset, "tensor headers")?;
            self.start = e.header_offset;
        }
        let at = usize::try_from(e.header_offset - self.start).unwrap_or(usize::MAX);
        let n = usize::try_from(e.header_len()).unwrap_or(usize::MAX);
        Ok(self.bytes.get(at..at.saturating_add(n)).unwrap_or_default())
    }
}
