//! Headers of many tensors at once. Each tensor's header sits just before
//! its data, so the headers of neighbouring small tensors are read with one
//! positioned read per run instead of one read each (a 20,000-tensor file's
//! module indices: one read of a few MiB instead of 20,000).

use tensorizer_core::TensorRecord;

use super::{BATCH_SPAN, Reader};
use crate::error::Result;
use crate::source::RangeSource;

/// Most data between two headers read through rather than skipped with a
/// second read: about what one positioned read costs in copying time.
pub(super) const HEADER_GAP: u64 = 16 << 10;

impl<S: RangeSource> Reader<S> {
    /// The parsed headers of tensors `indices`, in that order. Runs of
    /// tensors in ascending file order with at most `HEADER_GAP` bytes
    /// between one's header and the next, within `BATCH_SPAN` of the run's
    /// start, share one read.
    pub fn records(&self, indices: &[usize]) -> Result<Vec<TensorRecord>> {
        let mut out = Vec::with_capacity(indices.len());
        let mut scratch = Vec::new();
        let mut k = 0;
        while k < indices.len() {
            let first = self.entry(indices[k])?;
            let start = first.header_offset;
            let mut end = first.data_offset;
            let mut next = k + 1;
            while let Some(&i) = indices.get(next) {
                let e = self.entry(i)?;
                let joins = e.header_offset >= end
                    && e.header_offset - end <= HEADER_GAP
                    && e.data_offset.saturating_sub(start) <= BATCH_SPAN;
                if !joins {
                    break;
                }
                end = e.data_offset;
                next += 1;
            }
            if end - start > BATCH_SPAN {
                // One header longer than a batch: read it alone.
                out.push(self.record(indices[k])?);
                k += 1;
                continue;
            }
            // At most BATCH_SPAN bytes: fits usize.
            scratch.resize((end - start) as usize, 0);
            self.source.read_exact_at(start, &mut scratch)?;
            for &i in &indices[k..next] {
                let e = self.entry(i)?;
                let from = (e.header_offset - start) as usize;
                let to = (e.data_offset - start) as usize;
                out.push(self.parse_record(e, &scratch[from..to])?);
            }
            k = next;
        }
        Ok(out)
    }
}

impl<S: RangeSource> Reader<S> {
    /// Checks `data`, tensor `i`'s bytes held elsewhere (in memory, in a
    /// module), against the hashes stored in its header, which cover the
    /// header too. A tensor stored without hashes passes.
    pub fn verify_bytes(&self, i: usize, data: &[u8]) -> Result<()> {
        let record = self.record(i)?;
        let entry = self.entry(i)?;
        record.verify_on(data, crate::kernels::digest::kernel()).map_err(self.tensor_err(entry))
    }
}
