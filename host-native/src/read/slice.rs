//! Partial tensor reads (spec §17): a byte range, a set of spans, or a
//! basic-index slice of one tensor, reading only those bytes — or, for an
//! encrypted file, only the chunks that hold them, each opened (and so
//! authenticated) whole.
//!
//! Hashes cover a whole tensor, so these reads check none;
//! [`Reader::verify_tensor`] checks one tensor's hashes by streaming it.

pub mod plan;

use std::ops::Range;

use super::{PIECE_LEN, Reader, decrypt_piece};
use crate::error::{Error, Result};
use crate::read::slice::plan::{
    Index, SpanPolicy, StridedView, align_spans, gather, plan_spans, read_spans, spans_len,
};
use crate::source::RangeSource;

impl<S: RangeSource> Reader<S> {
    /// Reads bytes `range` of tensor `i`'s data (plaintext) into `out`,
    /// which must be exactly as long.
    pub fn read_tensor_range(&self, i: usize, range: Range<u64>, out: &mut [u8]) -> Result<()> {
        if range.start > range.end {
            return Err(Error::Invalid(format!("byte range {range:?} ends before it starts")));
        }
        self.read_tensor_spans(i, &[range], out)
    }

    /// Reads the bytes of `spans` of tensor `i`'s data (plaintext; sorted,
    /// disjoint ranges inside the data) back to back into `out`. Plain
    /// data: one read per span (long spans in parallel pieces). Encrypted
    /// data: the chunks the spans touch, each read once, decrypted and
    /// authenticated, then the spans copied out. No hash is checked.
    pub fn read_tensor_spans(&self, i: usize, spans: &[Range<u64>], out: &mut [u8]) -> Result<()> {
        let entry = self.entry(i)?;
        let name = || format!("{}: tensor {:?}", self.source.name(), entry.path.to_string());
        let mut end = 0u64;
        for span in spans {
            if span.start < end || span.start > span.end || span.end > entry.data_length {
                return Err(Error::Invalid(format!(
                    "{}: byte spans must be sorted, disjoint and inside its {} data bytes; {span:?} is not",
                    name(),
                    entry.data_length
                )));
            }
            end = span.end;
        }
        if spans_len(spans)? != out.len() as u64 {
            return Err(Error::Invalid(format!(
                "{}: the buffer differs in length from the spans",
                name()
            )));
        }
        let spans: Vec<Range<u64>> = spans.iter().filter(|s| s.start < s.end).cloned().collect();
        if spans.is_empty() {
            return Ok(());
        }
        let record = self.record(i)?;
        let threads = self.options.num_readers;
        let cipher = record.cipher().map_err(self.tensor_err(entry))?;
        let (Some(cipher), Some(key)) = (cipher, self.key_for(&record)?) else {
            return read_spans(
                &self.source,
                entry.data_offset,
                &spans,
                PIECE_LEN as u64,
                threads,
                out,
                |_, _| Ok(()),
            );
        };
        let windows = align_spans(&spans, cipher.chunk_size, entry.data_length);
        let chunk = cipher.chunk_size.max(1);
        let piece = (PIECE_LEN as u64 / chunk).max(1).saturating_mul(chunk);
        let total = usize::try_from(spans_len(&windows)?)
            .map_err(|_| Error::Invalid("slice too large".into()))?;
        let mut data = vec![0u8; total];
        read_spans(
            &self.source,
            entry.data_offset,
            &windows,
            piece,
            threads,
            &mut data,
            |at, piece| decrypt_piece(&cipher, &key, at, piece).map_err(self.tensor_err(entry)),
        )?;
        // Copy each span out of its window.
        let mut window = 0usize;
        let mut window_at = 0usize;
        let mut filled = 0usize;
        for span in &spans {
            while windows[window].end < span.end {
                window_at += (windows[window].end - windows[window].start) as usize;
                window += 1;
            }
            let from = window_at + (span.start - windows[window].start) as usize;
            let n = (span.end - span.start) as usize;
            out[filled..filled + n].copy_from_slice(&data[from..from + n]);
            filled += n;
        }
        Ok(())
    }

    /// The view `tensor i[index]` selects in the tensor's data (the shape
    /// of what [`Reader::read_slice`] returns).
    pub fn slice_view(&self, i: usize, index: &[Index]) -> Result<StridedView> {
        StridedView::contiguous(&self.entry(i)?.shape)?.index(index)
    }

    /// Reads `tensor i[index]` row-major into `out` (exactly `numel ×
    /// itemsize` of the slice), fetching only the spans the slice covers
    /// ([`plan_spans`]) — for encrypted data, only the chunks holding them.
    /// A meta tensor's slice is zeros. No hash is checked.
    pub fn read_slice(&self, i: usize, index: &[Index], out: &mut [u8]) -> Result<()> {
        let entry = self.entry(i)?;
        let view = self.slice_view(i, index)?;
        let itemsize = u64::from(entry.dtype.itemsize());
        let need = view.numel().and_then(|n| n.checked_mul(itemsize));
        if need != Some(out.len() as u64) {
            return Err(Error::Invalid(format!(
                "{}: a slice of tensor {:?} needs a {}-byte buffer, got {}",
                self.source.name(),
                entry.path.to_string(),
                need.map_or_else(|| "too large".to_string(), |n| n.to_string()),
                out.len()
            )));
        }
        if entry.is_meta() {
            self.record(i)?;
            out.fill(0);
            return Ok(());
        }
        let spans = plan_spans(&view, itemsize, SpanPolicy::for_source(&self.source))?;
        if view.is_row_major() && spans.len() == 1 && spans_len(&spans)? == out.len() as u64 {
            return self.read_tensor_spans(i, &spans, out);
        }
        let total = usize::try_from(spans_len(&spans)?)
            .map_err(|_| Error::Invalid("slice too large".into()))?;
        let mut data = vec![0u8; total];
        self.read_tensor_spans(i, &spans, &mut data)?;
        gather(&view, itemsize, &spans, &data, out)
    }

    /// Checks tensor `i`'s stored hashes against its data, streamed in
    /// pieces (memory stays bounded by one piece): what a slice read
    /// cannot do on its own.
    pub fn verify_tensor(&self, i: usize) -> Result<()> {
        self.stream(i, PIECE_LEN, true, |_| Ok(())).map(|_| ())
    }
}
