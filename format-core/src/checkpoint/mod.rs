//! `torch.save` zip checkpoints (`.pt`, `.pth`), read without executing
//! anything.
//!
//! A checkpoint is a ZIP archive of stored entries under one top-level
//! folder: `data.pkl` (a pickle of the state dict), `data/<key>` (one per
//! storage, raw element bytes) and small text records. This module reads
//! the ZIP structure ([`zip`]), walks `data.pkl` with a pickle machine that
//! only understands what a state dict uses ([`pickle`], [`Global`]), and
//! flattens the result into checked entries ([`StateDict`]).
//!
//! Hosts that read with range requests drive the steps themselves:
//!
//! 1. [`sniff`] the first [`SNIFF_LEN`] bytes (refuses legacy files);
//! 2. fetch `zip::tail_start(len)..len`, then [`EndRecord::find`] and
//!    [`EndRecord::directory`] (with the ZIP64 end record's bytes, usually
//!    inside the tail);
//! 3. fetch [`DirectoryLocation::range`] and [`CentralDirectory::parse`];
//!    [`Archive::locate`] finds `data.pkl` and the records;
//! 4. for each entry needed, fetch its local header
//!    ([`ZipEntry::local_header_len`], [`ZipEntry::data_range`]), then its
//!    data; read records with [`Records::apply`];
//! 5. [`Pickle::parse`] `data.pkl`, then [`StateDict::from_pickle`];
//! 6. for each storage, [`Archive::storage_entry`] and
//!    [`check_storage_len`] against the entry's data range; tensor bytes
//!    are then `TensorView::byte_span` inside that range.
//!
//! [`Checkpoint::parse`] does all of it over a buffer in memory.

pub mod archive;
mod calls;
mod globals;
pub mod pickle;
pub mod state_dict;
pub mod zip;

use alloc::vec::Vec;
use core::ops::Range;

pub use archive::{Archive, Record, Records, SNIFF_LEN, sniff};
pub use globals::Global;
pub use pickle::{Node, NodeId, Pickle, StorageRef, TensorNode};
pub use state_dict::{
    Container, ContainerKind, Leaf, StateDict, StateDictEntry, StorageInfo, TensorView,
};
pub use zip::{CentralDirectory, DirectoryLocation, EndRecord, ZipEntry};

use crate::dtype::ByteOrder;
use crate::error::{Error, Result};

/// Checks that a storage's zip entry holds exactly `numel × itemsize`
/// bytes (`data` is the entry's data range).
pub fn check_storage_len(storage: &StorageInfo, data: &Range<u64>) -> Result<()> {
    if data.end - data.start != storage.byte_len {
        return Err(Error::CorruptCheckpoint {
            key: storage.key.clone(),
            reason: "storage entry length differs from numel × itemsize",
        });
    }
    Ok(())
}

/// A whole checkpoint in memory, parsed and checked.
#[derive(Debug, Clone)]
pub struct Checkpoint<'data> {
    bytes: &'data [u8],
    /// The central directory.
    pub directory: CentralDirectory,
    /// Where the torch parts are.
    pub archive: Archive,
    /// The text records.
    pub records: Records,
    /// The flattened state dict and its storages.
    pub state_dict: StateDict,
    /// Each storage's data range in the file, parallel to
    /// `state_dict.storages`.
    pub storage_ranges: Vec<Range<u64>>,
}

fn slice<'d>(bytes: &'d [u8], r: &Range<u64>) -> Result<&'d [u8]> {
    let (Ok(s), Ok(e)) = (usize::try_from(r.start), usize::try_from(r.end)) else {
        return Err(Error::truncated(r.start, r.end - r.start));
    };
    bytes.get(s..e).ok_or(Error::truncated(r.start, r.end - r.start))
}

fn entry_data<'d>(bytes: &'d [u8], entry: &ZipEntry) -> Result<(&'d [u8], Range<u64>)> {
    let start = usize::try_from(entry.header_offset).unwrap_or(usize::MAX);
    let local = bytes.get(start..).unwrap_or_default();
    let range = entry.data_range(local)?;
    Ok((slice(bytes, &range)?, range))
}

impl<'data> Checkpoint<'data> {
    /// Parses a whole `torch.save` zip checkpoint.
    pub fn parse(bytes: &'data [u8]) -> Result<Self> {
        sniff(bytes.get(..SNIFF_LEN).unwrap_or(bytes))?;
        let len = bytes.len() as u64;
        let tail_at = zip::tail_start(len);
        let end = EndRecord::find(slice(bytes, &(tail_at..len))?, tail_at, len)?;
        let zip64 = end.zip64_range().map(|r| slice(bytes, &r)).transpose()?;
        let location = end.directory(zip64)?;
        let directory = CentralDirectory::parse(slice(bytes, &location.range())?, &location)?;
        let archive = Archive::locate(&directory)?;
        let mut records = Records::default();
        for &(record, i) in &archive.records {
            let entry = &directory.entries[i];
            let (data, range) = entry_data(bytes, entry)?;
            records.apply(record, data, range.start)?;
        }
        let (pkl, pkl_range) = entry_data(bytes, &directory.entries[archive.pickle])?;
        let pickle = Pickle::parse(pkl, pkl_range.start)?;
        let state_dict = StateDict::from_pickle(&pickle)?;
        let mut storage_ranges = Vec::with_capacity(state_dict.storages.len());
        for storage in &state_dict.storages {
            let i = archive.storage_entry(&directory, &storage.key)?;
            let (_, range) = entry_data(bytes, &directory.entries[i])?;
            check_storage_len(storage, &range)?;
            storage_ranges.push(range);
        }
        Ok(Self { bytes, directory, archive, records, state_dict, storage_ranges })
    }

    /// The storages' byte order (little-endian unless a `byteorder` record
    /// says `big`).
    pub fn byte_order(&self) -> ByteOrder {
        self.records.storage_byte_order()
    }

    /// The state-dict entries, in order.
    pub fn entries(&self) -> &[StateDictEntry] {
        &self.state_dict.entries
    }

    /// All bytes of storage `s` (an index into `state_dict.storages`).
    pub fn storage_bytes(&self, s: usize) -> Result<&'data [u8]> {
        let range =
            self.storage_ranges.get(s).ok_or(Error::invalid("storage index out of range"))?;
        slice(self.bytes, range)
    }

    /// Entry `i`'s tensor and the bytes its view spans in its storage,
    /// starting at the storage offset: element `(i0, i1, …)` is at byte
    /// `Σ ik × stride[k] × itemsize` of the returned slice. Bytes are in
    /// [`Checkpoint::byte_order`].
    pub fn tensor_bytes(&self, i: usize) -> Result<(&TensorView, &'data [u8])> {
        let entry =
            self.state_dict.entries.get(i).ok_or(Error::invalid("entry index out of range"))?;
        let Leaf::Tensor(view) = &entry.value else {
            return Err(Error::invalid("entry is not a tensor"));
        };
        let storage = self.storage_bytes(view.storage)?;
        // Checked against the storage by `StateDict::from_pickle`.
        let span = view.byte_span().ok_or(Error::invalid("tensor view size overflows"))?;
        let data = slice(storage, &span)?;
        Ok((view, data))
    }
}
