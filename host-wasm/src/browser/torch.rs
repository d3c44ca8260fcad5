//! `torch.save` zip checkpoints, with range reads only: the first bytes,
//! the zip's tail (end records, usually the central directory too), the
//! central directory if it is not in the tail, then the small records and
//! `data.pkl`. Storages are never read to open a file. Nothing is
//! executed: the core's pickle machine only builds the state dict.

use std::ops::Range;

use tensorizer_core::checkpoint::{
    Archive, CentralDirectory, EndRecord, Leaf, Pickle, Records, StateDict, ZipEntry,
    check_storage_len, sniff, zip,
};
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::totals::top_module;

use crate::error::ValidateError;

use super::source::{AsyncSource, read_exact};
use super::summary::{Row, Summary, field, name_and_path, totals};

/// Bytes read past a local header's fixed part in the same request, to
/// take in the name and torch's alignment padding at once.
const LOCAL_HEADER_SLACK: u64 = 128;

/// A checkpoint's structure and state dict.
#[derive(Debug)]
pub struct Index {
    /// The file's length.
    pub file_len: u64,
    /// The central directory.
    pub directory: CentralDirectory,
    /// Where the torch parts are.
    pub archive: Archive,
    /// The text records.
    pub records: Records,
    /// The state dict.
    pub state_dict: StateDict,
    /// Each storage's zip entry (an index into `directory.entries`),
    /// parallel to `state_dict.storages`.
    pub storage_entries: Vec<usize>,
}

fn sub(bytes: &[u8], base: u64, r: &Range<u64>) -> Option<Vec<u8>> {
    let s = usize::try_from(r.start.checked_sub(base)?).ok()?;
    let e = usize::try_from(r.end.checked_sub(base)?).ok()?;
    bytes.get(s..e).map(<[u8]>::to_vec)
}

/// Opens a checkpoint whose first bytes (up to `FIRST_READ`) are `head`.
pub async fn open<S: AsyncSource>(src: &mut S, head: &[u8]) -> Result<Index, ValidateError> {
    sniff(head.get(..tensorizer_core::checkpoint::SNIFF_LEN).unwrap_or(head))?;
    let len = src.len();
    let tail_at = zip::tail_start(len);
    let tail = match sub(head, 0, &(tail_at..len)) {
        Some(t) => t,
        None => read_exact(src, tail_at, len - tail_at, "the zip's tail").await?,
    };
    let end = EndRecord::find(&tail, tail_at, len)?;
    let zip64 = match end.zip64_range() {
        Some(r) => match sub(&tail, tail_at, &r) {
            Some(b) => Some(b),
            None => Some(read_exact(src, r.start, r.end - r.start, "the zip64 end record").await?),
        },
        None => None,
    };
    let location = end.directory(zip64.as_deref())?;
    let cd = location.range();
    let cd_bytes = match sub(&tail, tail_at, &cd).or_else(|| sub(head, 0, &cd)) {
        Some(b) => b,
        None => read_exact(src, cd.start, cd.end - cd.start, "the zip's central directory").await?,
    };
    let directory = CentralDirectory::parse(&cd_bytes, &location)?;
    drop(cd_bytes);
    let archive = Archive::locate(&directory)?;
    let mut records = Records::default();
    for &(record, i) in &archive.records {
        let (range, bytes) = read_entry(src, head, &directory.entries[i]).await?;
        records.apply(record, &bytes, range.start)?;
    }
    let (pkl_range, pkl) = read_entry(src, head, &directory.entries[archive.pickle]).await?;
    let pickle = Pickle::parse(&pkl, pkl_range.start)?;
    drop(pkl);
    let state_dict = StateDict::from_pickle(&pickle)?;
    let mut storage_entries = Vec::with_capacity(state_dict.storages.len());
    for storage in &state_dict.storages {
        let i = archive.storage_entry(&directory, &storage.key)?;
        check_storage_len(storage, &(0..directory.entries[i].size))?;
        storage_entries.push(i);
    }
    Ok(Index { file_len: len, directory, archive, records, state_dict, storage_entries })
}

/// Reads a small entry (a record, `data.pkl`): its local header and data,
/// from `head` when they lie in it, else in one request with torch's
/// header layout (two when the header is longer).
async fn read_entry<S: AsyncSource>(
    src: &mut S,
    head: &[u8],
    entry: &ZipEntry,
) -> Result<(Range<u64>, Vec<u8>), ValidateError> {
    let max = tensorizer_core::layout::MAX_PICKLE_LEN;
    if entry.size > max {
        return Err(tensorizer_core::Error::LimitExceeded {
            offset: entry.record_offset,
            what: "data.pkl or record length",
            value: entry.size,
            limit: max,
        }
        .into());
    }
    let range = data_range(src, head, entry).await?;
    let bytes = match sub(head, 0, &range) {
        Some(b) => b,
        None => read_exact(src, range.start, range.end - range.start, "a zip entry").await?,
    };
    Ok((range, bytes))
}

/// Reads `entry`'s local header and returns where its data lies.
pub async fn data_range<S: AsyncSource>(
    src: &mut S,
    head: &[u8],
    entry: &ZipEntry,
) -> Result<Range<u64>, ValidateError> {
    let at = entry.header_offset;
    let guess = zip::LOCAL_HEADER_LEN + entry.name.len() as u64 + LOCAL_HEADER_SLACK;
    let end = at.saturating_add(guess).min(entry.span_end).min(src.len()).max(at);
    let mut local = match sub(head, 0, &(at..end)) {
        Some(b) => b,
        None => read_exact(src, at, end - at, "a zip local header").await?,
    };
    let need = entry.local_header_len(&local)?;
    if need > local.len() as u64 {
        if at.checked_add(need).is_none_or(|e| e > entry.span_end) {
            return Err(tensorizer_core::Error::Malformed {
                offset: at,
                reason: "local header overlaps the next entry or the central directory",
            }
            .into());
        }
        local = read_exact(src, at, need, "a zip local header").await?;
    }
    Ok(entry.data_range(&local)?)
}

impl Index {
    /// The summary the page shows.
    pub fn summary(&self, file: &str) -> Summary {
        let mut rows = Vec::new();
        let mut paths = Vec::new();
        let mut values = 0usize;
        for e in &self.state_dict.entries {
            let Leaf::Tensor(v) = &e.value else {
                values += 1;
                continue;
            };
            let storage = &self.state_dict.storages[v.storage];
            let item = u64::from(v.dtype.size());
            let bytes = v.numel().and_then(|n| n.checked_mul(item)).unwrap_or(u64::MAX);
            let offset = v.storage_offset.saturating_mul(item);
            let strides =
                if v.is_contiguous() { String::new() } else { format!(", stride {:?}", v.stride) };
            let (name, path) = name_and_path(&e.path);
            paths.push(&e.path);
            rows.push(Row {
                index: rows.len(),
                name,
                path,
                dtype: v.dtype.torch_name().into(),
                dtype_string: v.dtype.torch_name().into(),
                shape: v.shape.clone(),
                bytes,
                data_offset: None,
                data_length: bytes,
                kind: format!("storage {} +{offset}{strides}", storage.key).into(),
                meta: false,
            });
        }
        let order = match self.records.storage_byte_order() {
            ByteOrder::Little => "little",
            ByteOrder::Big => "big",
            ByteOrder::NotApplicable => "n/a",
        };
        let mut header = vec![
            field("archive folder", self.archive.prefix.clone()),
            field("zip entries", self.directory.entries.len() as u64),
            field("storages", self.state_dict.storages.len() as u64),
            field("byte order", order),
        ];
        if let Some(v) = self.records.version {
            header.push(field("archive version", v));
        }
        if let Some(v) = self.records.format_version {
            header.push(field("format version", v));
        }
        if values > 0 {
            header.push(field("non-tensor entries", values as u64));
        }
        let data_bytes =
            self.state_dict.storages.iter().map(|s| s.byte_len).fold(0u64, u64::saturating_add);
        Summary {
            summary_version: super::summary::SUMMARY_VERSION,
            format: "torch",
            file: file.to_string(),
            file_bytes: self.file_len,
            header,
            encrypted: false,
            tensor_count: rows.len(),
            data_bytes,
            totals: totals(&rows, |r| top_module(paths[r.index])),
            tensors: rows,
            verify: "checks every zip entry's CRC-32 against the central directory",
            reads: 0,
            bytes_read: 0,
        }
    }
}
