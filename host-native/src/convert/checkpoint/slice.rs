//! Slices of a torch checkpoint's tensors (spec §17), planned by
//! [`crate::read::slice::plan`] as tensorizer files' slices are.

use super::{CheckpointReader, swap_unit};
use crate::convert::safetensors::swap_bytes;
use crate::error::Result;
use crate::parallel::default_readers;
use crate::read::PIECE_LEN;
use crate::read::slice::plan::{
    Index, SpanPolicy, StridedView, gather, invalid, overflow, plan_spans, read_spans, spans_len,
};
use crate::source::RangeSource;

impl<S: RangeSource> CheckpointReader<S> {
    /// The view `entry i[index]` selects in its storage (the shape of what
    /// [`CheckpointReader::read_slice`] returns), after the same checks as
    /// a whole read (cap on expanded views).
    pub fn slice_view(&self, i: usize, index: &[Index]) -> Result<StridedView> {
        let view = self.tensor(i)?;
        self.nbytes(i)?;
        let whole = StridedView {
            shape: view.shape.clone(),
            stride: view.stride.clone(),
            offset: view.storage_offset,
        };
        whole.index(index)
    }

    /// Reads `entry i[index]` as contiguous little-endian bytes into `out`
    /// (exactly `numel × itemsize` of the slice), fetching only the spans
    /// of the storage the slice covers ([`plan_spans`]). Like
    /// [`CheckpointReader::read_contiguous`], no CRC is checked.
    pub fn read_slice(&self, i: usize, index: &[Index], out: &mut [u8]) -> Result<()> {
        let view = self.slice_view(i, index)?;
        let dtype = self.tensor(i)?.dtype;
        let storage = self.tensor(i)?.storage;
        let itemsize = u64::from(dtype.size());
        let need = view.numel().and_then(|n| n.checked_mul(itemsize)).ok_or_else(overflow)?;
        if need != out.len() as u64 {
            return Err(invalid(format!(
                "{}: slice of entry {i} needs a {need}-byte buffer, got {}",
                self.source().name(),
                out.len()
            )));
        }
        if need == 0 {
            return Ok(());
        }
        let range = self.storage_range(storage)?;
        let spans = plan_spans(&view, itemsize, SpanPolicy::for_source(self.source()))?;
        if spans.last().is_some_and(|s| s.end > range.end - range.start) {
            return Err(invalid(format!(
                "{}: slice of entry {i} reaches past its storage",
                self.source().name()
            )));
        }
        let threads = default_readers();
        let none = |_: u64, _: &mut [u8]| Ok(());
        if view.is_row_major() && spans.len() == 1 && spans_len(&spans)? == need {
            read_spans(self.source(), range.start, &spans, PIECE_LEN as u64, threads, out, none)?;
        } else {
            let mut data = vec![0u8; usize::try_from(spans_len(&spans)?).map_err(|_| overflow())?];
            read_spans(
                self.source(),
                range.start,
                &spans,
                PIECE_LEN as u64,
                threads,
                &mut data,
                none,
            )?;
            gather(&view, itemsize, &spans, &data, out)?;
        }
        if self.byte_order() == tensorizer_core::dtype::ByteOrder::Big {
            let unit = swap_unit(dtype);
            if unit > 1 {
                swap_bytes(out, unit);
            }
        }
        Ok(())
    }
}
