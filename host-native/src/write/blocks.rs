//! Plain (unencrypted) tensors written in whole, aligned blocks of the file.
//!
//! The page cache keeps a file in folios whose size follows the writes that
//! made them: a write covering a whole 2 MiB-aligned range gets one 2 MiB
//! folio, while a write that starts mid-range (a tensor's header, a small
//! tensor, the tail of one and the head of the next) gets small ones. A
//! memory map of the file later pays page-table work per folio on first
//! touch: MiniLM's 87 MiB written per tensor took 1.6–2.4 ms to touch
//! through a map, written in aligned 2 MiB blocks 0.25 ms. So the bytes of
//! a batch of tensors go out block by block: every block assembled from
//! the headers, data and padding it covers and written with one call.
//!
//! A block without any header bytes does not wait for hashing and is
//! written while the tensors are hashed; the blocks holding headers follow
//! once every hash is in.

use std::ops::Range;
use std::sync::OnceLock;

use tensorizer_core::write::PlannedTensor;

use super::FileWriter;
use crate::error::{Error, Result};
use crate::parallel::for_each;

thread_local! {
    /// Each writing thread's block buffer, kept between blocks (fresh
    /// memory for every block would cost a page fault per 4 KiB).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Blocks start at multiples of this in the file (x86-64's huge page, the
/// page cache's largest folio there).
pub(super) const BLOCK: u64 = 2 << 20;

/// Tensors `planned` with their data `data`, in file order, and their
/// finished headers (set by the hashers) in `headers`.
pub(super) struct Batch<'a> {
    pub(super) planned: &'a [PlannedTensor],
    pub(super) data: &'a [&'a [u8]],
    pub(super) headers: &'a [OnceLock<Vec<u8>>],
}

impl Batch<'_> {
    /// The file range the batch covers, cut at every multiple of [`BLOCK`].
    pub(super) fn blocks(&self) -> Vec<Range<u64>> {
        let (Some(first), Some(last)) = (self.planned.first(), self.planned.last()) else {
            return Vec::new();
        };
        let (start, end) = (first.header_offset, last.data_offset + last.data_length);
        let mut blocks = Vec::new();
        let mut at = start;
        while at < end {
            let next = ((at / BLOCK) + 1).saturating_mul(BLOCK).min(end);
            blocks.push(at..next);
            at = next;
        }
        blocks
    }

    /// Tensors whose header or data overlap `range`.
    fn overlapping(&self, range: &Range<u64>) -> Range<usize> {
        let first = self.planned.partition_point(|p| p.data_offset + p.data_length <= range.start);
        let end = self.planned.partition_point(|p| p.header_offset < range.end);
        first..end.max(first)
    }

    /// Whether `range` holds no header bytes (it can be written before
    /// the hashes are known).
    pub(super) fn data_only(&self, range: &Range<u64>) -> bool {
        self.planned[self.overlapping(range)].iter().all(|p| {
            let header = p.header_offset..p.header_offset + p.header.len() as u64;
            header.end <= range.start || header.start >= range.end
        })
    }

    /// Writes `range` with one call: a lone slice of data as it is, any
    /// other mix of headers, data and padding assembled first.
    pub(super) fn write(&self, owner: &FileWriter, range: Range<u64>) -> Result<()> {
        let mut parts: Vec<(u64, &[u8])> = Vec::new();
        for i in self.overlapping(&range) {
            let p = &self.planned[i];
            let header_end = p.header_offset + p.header.len() as u64;
            if p.header_offset < range.end && header_end > range.start {
                let header = self.headers[i].get().map(Vec::as_slice);
                let header = header.ok_or_else(|| {
                    Error::Invalid(format!("{}: tensor {i} was not hashed", owner.name))
                })?;
                parts.push((p.header_offset, header));
            }
            parts.push((p.data_offset, self.data[i]));
        }
        let clipped: Vec<(u64, &[u8])> = parts
            .into_iter()
            .filter_map(|(at, bytes)| {
                let end = at + bytes.len() as u64;
                let (from, to) = (at.max(range.start), end.min(range.end));
                (from < to).then(|| (from, &bytes[(from - at) as usize..(to - at) as usize]))
            })
            .collect();
        if let [(at, bytes)] = clipped.as_slice()
            && *at == range.start
            && bytes.len() as u64 == range.end - range.start
        {
            return owner.pwrite(range.start, bytes);
        }
        SCRATCH.with_borrow_mut(|block| {
            // Parts come in file order; the gaps between them are
            // alignment padding: zeros.
            block.clear();
            for (at, bytes) in clipped {
                block.resize((at - range.start) as usize, 0);
                block.extend_from_slice(bytes);
            }
            block.resize((range.end - range.start) as usize, 0);
            owner.pwrite(range.start, block)
        })
    }

    /// Writes every block in `blocks` on up to `threads` threads.
    pub(super) fn write_all(
        &self,
        owner: &FileWriter,
        blocks: Vec<Range<u64>>,
        threads: usize,
    ) -> Result<()> {
        for_each(threads, blocks, |range| self.write(owner, range))
    }
}
