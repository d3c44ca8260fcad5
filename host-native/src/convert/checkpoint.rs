//! `torch.save` zip checkpoints over any [`RangeSource`], with range reads
//! only (spec §16.7): the first 512 bytes, the tail, the central directory,
//! `data.pkl` and the records at open; each storage's local header and the
//! bytes a view spans when that tensor is read. Nothing is executed.

mod slice;

use std::ops::Range;
use std::sync::OnceLock;

use tensorizer_core::checkpoint::{
    Archive, CentralDirectory, EndRecord, Leaf, Pickle, Records, SNIFF_LEN, StateDict,
    StateDictEntry, StorageInfo, TensorView, ZipEntry, check_storage_len, sniff, zip,
};
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::hash::TensorHasher;
use tensorizer_core::{ElementType, HashKind, HashValue};

use crate::error::{Error, Result};
use crate::parallel::{default_readers, for_each};
use crate::source::{LocalFile, RangeSource};

/// Default of [`CheckpointReader::set_max_expanded_bytes`]: 1 GiB.
pub const DEFAULT_MAX_EXPANDED_BYTES: u64 = 1 << 30;

/// Bytes read after a local header's fixed part in the same request, to
/// take in the name and torch's alignment extra field at once.
const LOCAL_HEADER_SLACK: u64 = 128;

/// Bytes per read (and per CRC step) for large spans.
const PIECE: usize = 8 << 20;

/// A `torch.save` checkpoint opened for range reads: the state dict parsed,
/// storages read on demand.
pub struct CheckpointReader<S: RangeSource = LocalFile> {
    source: S,
    directory: CentralDirectory,
    archive: Archive,
    records: Records,
    state_dict: StateDict,
    /// Each storage's data range, found (and checked) on first use.
    storage_ranges: Vec<OnceLock<Range<u64>>>,
    max_expanded_bytes: u64,
}

/// One zip entry's CRC-32 check by [`CheckpointReader::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryCheck {
    /// The zip entry name.
    pub name: String,
    /// Its data length.
    pub size: u64,
    /// The CRC-32 the central directory records.
    pub expected: u32,
    /// The CRC-32 of the data read.
    pub actual: u32,
}

impl EntryCheck {
    /// Whether the data matches the directory.
    pub fn ok(&self) -> bool {
        self.expected == self.actual
    }
}

/// Whether the first bytes of a file of `file_len` bytes (up to
/// [`SNIFF_LEN`]) look like a torch checkpoint, current (zip) or legacy:
/// `Some(true)` for a zip, `Some(false)` for a legacy layout, `None` for
/// anything else ([`tensorizer_core::sniff_format`]: a safetensors file
/// whose first byte is a pickle's `0x80` is not a checkpoint). A zip that
/// is not torch's is only told apart once its directory is read.
pub fn looks_like_checkpoint(head: &[u8], file_len: u64) -> Option<bool> {
    match tensorizer_core::sniff_format(head, file_len) {
        Some(tensorizer_core::Sniffed::TorchZip) => Some(true),
        Some(tensorizer_core::Sniffed::LegacyTorch) => Some(false),
        _ => None,
    }
}

impl CheckpointReader<LocalFile> {
    /// Opens a local file.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Self::new(LocalFile::open(path)?)
    }
}

impl CheckpointReader<Box<dyn RangeSource>> {
    /// Opens a local path or a remote URI (see [`crate::store::open_uri`]).
    pub fn open_uri(uri: &str) -> Result<Self> {
        Self::new(crate::store::open_uri(uri, crate::source::Intent::Peek)?)
    }
}

impl<S: RangeSource> CheckpointReader<S> {
    /// Reads and checks the archive structure and `data.pkl`.
    pub fn new(source: S) -> Result<Self> {
        let name = source.name().to_string();
        let fmt = |e| Error::format(name.clone(), e);
        let len = source.len();
        let read = |range: Range<u64>| -> Result<Vec<u8>> {
            let mut buf = vec![0u8; usize::try_from(range.end - range.start).unwrap_or(usize::MAX)];
            source.read_exact_at(range.start, &mut buf)?;
            Ok(buf)
        };
        let head = read(0..len.min(SNIFF_LEN as u64))?;
        sniff(&head).map_err(fmt)?;
        let tail_at = zip::tail_start(len);
        let tail = read(tail_at..len)?;
        let end = EndRecord::find(&tail, tail_at, len).map_err(fmt)?;
        let zip64 = match end.zip64_range() {
            Some(r) if r.start >= tail_at => {
                Some(tail[(r.start - tail_at) as usize..(r.end - tail_at) as usize].to_vec())
            }
            Some(r) => Some(read(r)?),
            None => None,
        };
        let location = end.directory(zip64.as_deref()).map_err(fmt)?;
        let cd_range = location.range();
        let cd_bytes = if cd_range.start >= tail_at {
            tail[(cd_range.start - tail_at) as usize..(cd_range.end - tail_at) as usize].to_vec()
        } else {
            read(cd_range)?
        };
        let directory = CentralDirectory::parse(&cd_bytes, &location).map_err(fmt)?;
        drop(cd_bytes);
        let archive = Archive::locate(&directory).map_err(fmt)?;
        let mut this = Self {
            source,
            directory,
            archive,
            records: Records::default(),
            state_dict: StateDict {
                entries: Vec::new(),
                storages: Vec::new(),
                containers: Vec::new(),
            },
            storage_ranges: Vec::new(),
            max_expanded_bytes: DEFAULT_MAX_EXPANDED_BYTES,
        };
        for &(record, i) in &this.archive.records.clone() {
            let (range, bytes) = this.read_entry(&this.directory.entries[i])?;
            this.records.apply(record, &bytes, range.start).map_err(fmt)?;
        }
        let (pkl_range, pkl) = this.read_entry(&this.directory.entries[this.archive.pickle])?;
        let pickle = Pickle::parse(&pkl, pkl_range.start).map_err(fmt)?;
        this.state_dict = StateDict::from_pickle(&pickle).map_err(fmt)?;
        // Every storage must have its entry; lengths are checked from the
        // central directory now (the local header is read on first use).
        for storage in &this.state_dict.storages {
            let i = this.archive.storage_entry(&this.directory, &storage.key).map_err(fmt)?;
            let entry = &this.directory.entries[i];
            check_storage_len(storage, &(0..entry.size)).map_err(fmt)?;
        }
        this.storage_ranges =
            (0..this.state_dict.storages.len()).map(|_| OnceLock::new()).collect();
        Ok(this)
    }

    fn fmt(&self, e: tensorizer_core::Error) -> Error {
        Error::format(self.source.name(), e)
    }

    fn read_vec(&self, range: Range<u64>) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; usize::try_from(range.end - range.start).unwrap_or(usize::MAX)];
        self.source.read_exact_at(range.start, &mut buf)?;
        Ok(buf)
    }

    /// Reads a whole small entry (records, `data.pkl`): its local header and
    /// data in one request when the header is as long as torch makes it.
    fn read_entry(&self, entry: &ZipEntry) -> Result<(Range<u64>, Vec<u8>)> {
        let at = entry.header_offset;
        let guess = zip::LOCAL_HEADER_LEN + entry.name.len() as u64 + LOCAL_HEADER_SLACK;
        let end = at
            .saturating_add(guess)
            .saturating_add(entry.size)
            .min(entry.span_end)
            .min(self.source.len());
        let max = tensorizer_core::layout::MAX_PICKLE_LEN;
        if entry.size > max {
            // Records and data.pkl are refused above this anyway: never read it.
            return Err(self.fmt(tensorizer_core::Error::LimitExceeded {
                offset: entry.record_offset,
                what: "data.pkl or record length",
                value: entry.size,
                limit: max,
            }));
        }
        let bytes = self.read_vec(at..end.max(at))?;
        if entry.local_header_len(&bytes).is_ok_and(|need| need <= bytes.len() as u64) {
            let range = entry.data_range(&bytes).map_err(|e| self.fmt(e))?;
            if range.end <= end {
                let data = bytes[(range.start - at) as usize..(range.end - at) as usize].to_vec();
                return Ok((range, data));
            }
            return Ok((range.clone(), self.read_vec(range)?));
        }
        let range = self.data_range(entry)?;
        Ok((range.clone(), self.read_vec(range)?))
    }

    /// Reads `entry`'s local header (one request with torch's layout) and
    /// returns its data range.
    fn data_range(&self, entry: &ZipEntry) -> Result<Range<u64>> {
        let at = entry.header_offset;
        let guess = zip::LOCAL_HEADER_LEN + entry.name.len() as u64 + LOCAL_HEADER_SLACK;
        let mut local =
            self.read_vec(at..(at + guess).min(entry.span_end).min(self.source.len()))?;
        let need = entry.local_header_len(&local).map_err(|e| self.fmt(e))?;
        if need > local.len() as u64 {
            if at.checked_add(need).is_none_or(|end| end > entry.span_end) {
                return Err(self.fmt(tensorizer_core::Error::Malformed {
                    offset: at,
                    reason: "local header overlaps the next entry or the central directory",
                }));
            }
            local = self.read_vec(at..at + need)?;
        }
        entry.data_range(&local).map_err(|e| self.fmt(e))
    }

    /// The byte source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The byte source, given back.
    pub fn into_source(self) -> S {
        self.source
    }

    /// Caps the bytes one expanded view (stride 0, more elements than the
    /// storage bytes it spans) may produce in [`CheckpointReader::read_contiguous`].
    pub fn set_max_expanded_bytes(&mut self, cap: u64) {
        self.max_expanded_bytes = cap;
    }

    /// The flattened state dict: entries in `torch.load` order, storages.
    pub fn state_dict(&self) -> &StateDict {
        &self.state_dict
    }

    /// Every entry (tensors and other leaves) in `torch.load` order.
    pub fn entries(&self) -> &[StateDictEntry] {
        &self.state_dict.entries
    }

    /// The storage table.
    pub fn storages(&self) -> &[StorageInfo] {
        &self.state_dict.storages
    }

    /// The records (version, byte order, alignment).
    pub fn records(&self) -> &Records {
        &self.records
    }

    /// The storages' byte order.
    pub fn byte_order(&self) -> ByteOrder {
        self.records.storage_byte_order()
    }

    /// The archive's top-level folder and entry indices.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// The zip central directory.
    pub fn directory(&self) -> &CentralDirectory {
        &self.directory
    }

    /// Entry `i`'s tensor view, or an error naming it when it is not a tensor.
    pub fn tensor(&self, i: usize) -> Result<&TensorView> {
        let entry = self.state_dict.entries.get(i).ok_or_else(|| {
            Error::Invalid(format!("{}: no entry number {i}", self.source.name()))
        })?;
        match &entry.value {
            Leaf::Tensor(view) => Ok(view),
            _ => Err(Error::Invalid(format!(
                "{}: entry {:?} is not a tensor",
                self.source.name(),
                entry.path.to_string()
            ))),
        }
    }

    /// Bytes entry `i` takes gathered contiguously (`numel × itemsize`),
    /// checked against the cap on expanded views.
    pub fn nbytes(&self, i: usize) -> Result<u64> {
        let view = self.tensor(i)?;
        let name = || self.state_dict.entries[i].path.to_string();
        let size = u64::from(view.dtype.size());
        let total = view.numel().and_then(|n| n.checked_mul(size)).ok_or_else(|| {
            Error::tensor(
                self.source.name(),
                name(),
                tensorizer_core::Error::CorruptCheckpoint {
                    key: name(),
                    reason: "tensor size overflows",
                },
            )
        })?;
        let span = view.byte_span().map_or(0, |s| s.end - s.start);
        if total > span && total > self.max_expanded_bytes {
            return Err(Error::tensor(
                self.source.name(),
                name(),
                tensorizer_core::Error::LimitExceeded {
                    offset: 0,
                    what: "bytes of an expanded (stride-0) view",
                    value: total,
                    limit: self.max_expanded_bytes,
                },
            ));
        }
        Ok(total)
    }

    /// Storage `s`'s data range in the file (reads its local header once).
    pub fn storage_range(&self, s: usize) -> Result<Range<u64>> {
        let cell = self.storage_ranges.get(s).ok_or_else(|| {
            Error::Invalid(format!("{}: no storage number {s}", self.source.name()))
        })?;
        if let Some(r) = cell.get() {
            return Ok(r.clone());
        }
        let storage = &self.state_dict.storages[s];
        let i =
            self.archive.storage_entry(&self.directory, &storage.key).map_err(|e| self.fmt(e))?;
        let range = self.data_range(&self.directory.entries[i])?;
        check_storage_len(storage, &range).map_err(|e| self.fmt(e))?;
        Ok(cell.get_or_init(|| range).clone())
    }

    /// Reads entry `i`'s elements, row-major, as contiguous little-endian
    /// bytes into `out` (exactly [`CheckpointReader::nbytes`] long). Only
    /// the storage bytes the view spans are read; big-endian archives are
    /// byte-swapped (per element, per half for complex types).
    pub fn read_contiguous(&self, i: usize, out: &mut [u8]) -> Result<()> {
        let view = self.tensor(i)?;
        let need = self.nbytes(i)?;
        if out.len() as u64 != need {
            return Err(Error::Invalid(format!(
                "{}: tensor {:?} needs a {need}-byte buffer, got {}",
                self.source.name(),
                self.state_dict.entries[i].path.to_string(),
                out.len()
            )));
        }
        if need == 0 {
            return Ok(());
        }
        let storage = self.storage_range(view.storage)?;
        let span =
            view.byte_span().ok_or_else(|| Error::Invalid("tensor view size overflows".into()))?;
        let start = storage.start + span.start;
        if view.is_contiguous() && span.end - span.start == need {
            self.read_parallel(start, out)?;
        } else {
            let mut scratch =
                vec![0u8; usize::try_from(span.end - span.start).unwrap_or(usize::MAX)];
            self.read_parallel(start, &mut scratch)?;
            view.gather(&scratch, out)
                .ok_or_else(|| Error::Invalid("tensor view does not fit its data".into()))?;
        }
        if self.byte_order() == ByteOrder::Big {
            let unit = swap_unit(view.dtype);
            if unit > 1 {
                crate::convert::safetensors::swap_bytes(out, unit);
            }
        }
        Ok(())
    }

    /// Fills `out` from `offset`, in pieces on several threads when large
    /// and the source is local.
    fn read_parallel(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        if out.len() <= PIECE || self.source.prefers_long_reads() {
            return self.source.read_exact_at(offset, out);
        }
        let pieces: Vec<(u64, &mut [u8])> = out
            .chunks_mut(PIECE)
            .enumerate()
            .map(|(n, p)| (offset + (n * PIECE) as u64, p))
            .collect();
        for_each(default_readers(), pieces, |(at, p)| self.source.read_exact_at(at, p))
    }

    /// Checks every zip entry's CRC-32 against the central directory,
    /// reading each entry's data once in pieces (memory stays bounded by
    /// one piece). `progress` gets the data bytes done so far.
    pub fn verify(&self, mut progress: impl FnMut(u64)) -> Result<Vec<EntryCheck>> {
        let mut out = Vec::with_capacity(self.directory.entries.len());
        let mut buf = Vec::new();
        let mut done = 0u64;
        for entry in &self.directory.entries {
            let range = self.data_range(entry)?;
            let mut hasher = TensorHasher::new(&[], true, false);
            let mut at = range.start;
            while at < range.end {
                let n = ((range.end - at) as usize).min(PIECE);
                buf.resize(n, 0);
                self.source.read_exact_at(at, &mut buf)?;
                hasher.update(&buf);
                at += n as u64;
                done += n as u64;
                progress(done);
            }
            let actual = match hasher.finish().first() {
                Some(HashValue::Crc32(c)) => *c,
                _ => 0,
            };
            out.push(EntryCheck {
                name: entry.name.clone(),
                size: entry.size,
                expected: entry.crc32,
                actual,
            });
        }
        Ok(out)
    }

    /// [`CheckpointReader::verify`], failing on the first mismatch with a
    /// verification error (`HashMismatch` naming the entry).
    pub fn verify_all(&self) -> Result<()> {
        for check in self.verify(|_| {})? {
            if !check.ok() {
                return Err(mismatch(self.source.name(), &check));
            }
        }
        Ok(())
    }
}

/// The verification error for a failed [`EntryCheck`].
pub fn mismatch(file: &str, check: &EntryCheck) -> Error {
    Error::tensor(
        file,
        check.name.clone(),
        tensorizer_core::Error::HashMismatch {
            tensor: check.name.clone(),
            kind: HashKind::Crc32,
            expected: check.expected.to_string(),
            actual: check.actual.to_string(),
        },
    )
}

/// Bytes that swap as one unit for `dtype` (half the size for complex types).
pub fn swap_unit(dtype: ElementType) -> usize {
    dtype.swap_unit()
}
