//! Slices of stored tensors (spec §17): basic indexing of a strided view,
//! the few byte spans of its storage that the slice needs, and the gather
//! of those bytes into a row-major buffer. Tensorizer files
//! ([`crate::Reader::read_slice`]) and torch checkpoints
//! ([`crate::CheckpointReader::read_slice`]) share it.
//!
//! Everything about the view comes from the file, so every product and sum
//! is checked, and the work done is bounded by named limits rather than by
//! what a shape claims.

use std::ops::Range;

use tensorizer_core::checkpoint::state_dict;

use crate::error::{Error, Result};
use crate::parallel::for_each;
use crate::source::RangeSource;

/// Most items in one index (ints, slices, `...`, new axes).
pub const MAX_INDEX_ITEMS: usize = 1024;

/// Most separately located runs a plan enumerates; beyond it, inner
/// dimensions are read whole (a superset of the bytes, never more than the
/// view's extent).
pub const MAX_RUNS: u64 = 1 << 20;

/// Most spans (read requests, before splitting into pieces) one slice
/// read makes on a remote source; beyond it, the spans with the smallest
/// gaps between them are merged.
pub const MAX_SPANS: usize = 1024;

/// [`MAX_SPANS`] for local files, where a read is one system call.
pub const MAX_LOCAL_SPANS: usize = 1 << 16;

/// Spans of a local file closer than this are read as one: about what a
/// system call costs in copying from the page cache.
pub const LOCAL_GAP: u64 = 16 << 10;

/// Spans of a remote source (HTTP, S3) closer than this are read as one:
/// about what one request's latency costs in bandwidth.
pub const REMOTE_GAP: u64 = 1 << 20;

/// How [`plan_spans`] trades extra bytes for fewer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanPolicy {
    /// Spans closer than this many bytes are read as one.
    pub gap: u64,
    /// Most spans; beyond it the closest ones are merged (at least 1).
    pub max_spans: usize,
}

impl SpanPolicy {
    /// Local files: [`LOCAL_GAP`], [`MAX_LOCAL_SPANS`].
    pub const LOCAL: Self = Self { gap: LOCAL_GAP, max_spans: MAX_LOCAL_SPANS };
    /// Remote sources: [`REMOTE_GAP`], [`MAX_SPANS`].
    pub const REMOTE: Self = Self { gap: REMOTE_GAP, max_spans: MAX_SPANS };

    /// [`SpanPolicy::REMOTE`] where requests are expensive, else
    /// [`SpanPolicy::LOCAL`].
    pub fn for_source<S: RangeSource + ?Sized>(source: &S) -> Self {
        if source.prefers_long_reads() { Self::REMOTE } else { Self::LOCAL }
    }
}

/// One item of a basic (numpy/torch) index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// One position (negative counts from the end); removes the dimension.
    At(i64),
    /// `start:stop:step`, Python slice semantics (bounds clamped, negative
    /// bounds count from the end); `step` must be at least 1.
    Range {
        /// First position, `None` for the start.
        start: Option<i64>,
        /// End (exclusive), `None` for the end.
        stop: Option<i64>,
        /// Step, at least 1.
        step: i64,
    },
    /// `...`: as many full slices as the dimensions left unindexed.
    Ellipsis,
    /// `None`: a new dimension of size 1.
    NewAxis,
}

impl Index {
    /// `a:b` (step 1).
    pub fn range(start: i64, stop: i64) -> Self {
        Self::Range { start: Some(start), stop: Some(stop), step: 1 }
    }

    /// `:` (every position).
    pub fn full() -> Self {
        Self::Range { start: None, stop: None, step: 1 }
    }
}

/// A strided view of a storage, in elements: element `(i₀, …, iₙ)` is at
/// `offset + Σ iₖ × stride[k]`. Strides are never negative (torch's are not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StridedView {
    /// The shape.
    pub shape: Vec<u64>,
    /// Strides in elements (0 for expanded or new dimensions).
    pub stride: Vec<u64>,
    /// Position of element 0 in the storage, in elements.
    pub offset: u64,
}

pub(crate) fn invalid(what: impl Into<String>) -> Error {
    Error::Invalid(what.into())
}

pub(crate) fn overflow() -> Error {
    invalid("tensor slice size overflows")
}

impl StridedView {
    /// The row-major view of a tensor of `shape` at offset 0.
    pub fn contiguous(shape: &[u64]) -> Result<Self> {
        let mut stride = vec![0u64; shape.len()];
        let mut step = 1u64;
        for (k, &d) in shape.iter().enumerate().rev() {
            stride[k] = step;
            step = step.checked_mul(d.max(1)).ok_or_else(overflow)?;
        }
        Ok(Self { shape: shape.to_vec(), stride, offset: 0 })
    }

    /// Number of elements, `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        state_dict::numel(&self.shape)
    }

    /// Whether the elements lie row-major and back to back.
    pub fn is_row_major(&self) -> bool {
        state_dict::is_row_major(&self.shape, &self.stride)
    }

    /// The view `self[index]` under numpy's basic-indexing rules (as
    /// `torch.Tensor.__getitem__` with ints, slices of step ≥ 1, `...` and
    /// `None`). Errors name the offending dimension.
    pub fn index(&self, index: &[Index]) -> Result<Self> {
        let consuming = self.check_index(index)?;
        let ndim = self.shape.len();
        let mut shape = Vec::with_capacity(ndim + index.len());
        let mut stride = Vec::with_capacity(ndim + index.len());
        let mut offset = self.offset;
        let mut d = 0usize;
        for item in index {
            match *item {
                Index::Ellipsis => {
                    shape.extend_from_slice(&self.shape[d..d + ndim - consuming]);
                    stride.extend_from_slice(&self.stride[d..d + ndim - consuming]);
                    d += ndim - consuming;
                }
                Index::NewAxis => {
                    shape.push(1);
                    stride.push(0);
                }
                Index::At(i) => {
                    offset = offset.checked_add(self.at(d, i)?).ok_or_else(overflow)?;
                    d += 1;
                }
                Index::Range { start, stop, step } => {
                    let (len, step, skip) = self.range(d, start, stop, step)?;
                    offset = offset.checked_add(skip).ok_or_else(overflow)?;
                    shape.push(len);
                    stride.push(step);
                    d += 1;
                }
            }
        }
        shape.extend_from_slice(&self.shape[d..]);
        stride.extend_from_slice(&self.stride[d..]);
        Ok(Self { shape, stride, offset })
    }

    /// Refuses an index this view cannot take; returns how many of its
    /// items consume a dimension.
    fn check_index(&self, index: &[Index]) -> Result<usize> {
        if index.len() > MAX_INDEX_ITEMS {
            return Err(invalid(format!(
                "an index of {} items is more than {MAX_INDEX_ITEMS}",
                index.len()
            )));
        }
        if self.stride.len() != self.shape.len() {
            return Err(invalid("shape and strides differ in length"));
        }
        let ndim = self.shape.len();
        let ellipses = index.iter().filter(|i| matches!(i, Index::Ellipsis)).count();
        if ellipses > 1 {
            return Err(invalid("an index can only have a single ellipsis ('...')"));
        }
        let consuming =
            index.iter().filter(|i| matches!(i, Index::At(_) | Index::Range { .. })).count();
        if consuming > ndim {
            return Err(invalid(format!(
                "too many indices for a tensor of dimension {ndim}: {consuming} were given"
            )));
        }
        Ok(consuming)
    }

    /// The elements skipped by taking position `i` (negative: from the end)
    /// of dimension `d`.
    fn at(&self, d: usize, i: i64) -> Result<u64> {
        let size = self.shape[d];
        let at = i128::from(i) + if i < 0 { i128::from(size) } else { 0 };
        if at < 0 || at >= i128::from(size) {
            return Err(invalid(format!(
                "index {i} is out of bounds for dimension {d} with size {size}"
            )));
        }
        (at as u64).checked_mul(self.stride[d]).ok_or_else(overflow)
    }

    /// (length, stride, elements skipped) of dimension `d` sliced
    /// `start:stop:step`, bounds clamped as Python clamps them.
    fn range(
        &self,
        d: usize,
        start: Option<i64>,
        stop: Option<i64>,
        step: i64,
    ) -> Result<(u64, u64, u64)> {
        if step < 1 {
            return Err(invalid(format!(
                "slice step must be at least 1, got {step} (dimension {d})"
            )));
        }
        let size = i128::from(self.shape[d]);
        let bound = |v: Option<i64>, default: i128| match v {
            None => default,
            Some(v) => {
                let v = i128::from(v);
                (if v < 0 { v + size } else { v }).clamp(0, size)
            }
        };
        let (start, stop, step) = (bound(start, 0), bound(stop, size), i128::from(step));
        let len = if stop > start { (stop - start + step - 1) / step } else { 0 };
        // All three are within 0..=size (a u64) or a positive i64.
        let (start, len, step) = (start as u64, len as u64, step as u64);
        let skip =
            if len > 0 { start.checked_mul(self.stride[d]).ok_or_else(overflow)? } else { 0 };
        let stride = if len > 1 {
            self.stride[d].checked_mul(step).ok_or_else(overflow)?
        } else {
            self.stride[d]
        };
        Ok((len, stride, skip))
    }
}

/// The byte spans of the storage (from its first byte; sorted, disjoint,
/// not touching) that hold every element of `view`, with elements of
/// `itemsize` bytes. Spans closer than `policy.gap` bytes are merged, and
/// so are the closest ones when more than `policy.max_spans` remain. A
/// row-major slice is exactly one span of exactly its bytes; an empty view
/// (or one of zero-sized elements) has none.
pub fn plan_spans(
    view: &StridedView,
    itemsize: u64,
    policy: SpanPolicy,
) -> Result<Vec<Range<u64>>> {
    let (gap, max_spans) = (policy.gap, policy.max_spans.max(1));
    let numel = view.numel().ok_or_else(overflow)?;
    if numel == 0 || itemsize == 0 {
        return Ok(Vec::new());
    }
    let base = view.offset.checked_mul(itemsize).ok_or_else(overflow)?;
    let mut outer = outer_dims(view, itemsize)?;
    // The highest byte, checked once: every offset below stays under it.
    let mut end = base.checked_add(itemsize).ok_or_else(overflow)?;
    for &(n, s) in &outer {
        end = end.checked_add((n - 1).checked_mul(s).ok_or_else(overflow)?).ok_or_else(overflow)?;
    }
    let run = run_length(&mut outer, itemsize, gap);
    let spans = merge_runs(run_starts(&outer, base), run, gap);
    Ok(cap_spans(spans, max_spans))
}

/// The (count, byte stride) of the dimensions that matter, largest stride
/// first, contiguous neighbours merged: the set of bytes depends neither
/// on the order of the dimensions nor on those of size 1 or stride 0.
fn outer_dims(view: &StridedView, itemsize: u64) -> Result<Vec<(u64, u64)>> {
    let mut dims: Vec<(u64, u64)> = Vec::with_capacity(view.shape.len());
    for (&n, &s) in view.shape.iter().zip(&view.stride) {
        if n > 1 && s > 0 {
            dims.push((n, s.checked_mul(itemsize).ok_or_else(overflow)?));
        }
    }
    dims.sort_by_key(|d| std::cmp::Reverse(d.1));
    let mut outer: Vec<(u64, u64)> = Vec::with_capacity(dims.len());
    for (n, s) in dims {
        match outer.last_mut() {
            Some(last) if n.checked_mul(s) == Some(last.1) => {
                last.0 = last.0.checked_mul(n).ok_or_else(overflow)?;
                last.1 = s;
            }
            _ => outer.push((n, s)),
        }
    }
    Ok(outer)
}

/// The length of each run read as one interval: an element, or a whole
/// inner block when its pieces are back to back, closer than `gap`, or too
/// many. The inner dimensions it covers are popped off `outer` (whose end
/// the caller has checked for overflow).
fn run_length(outer: &mut Vec<(u64, u64)>, itemsize: u64, gap: u64) -> u64 {
    let mut run = itemsize;
    while let Some(&(n, s)) = outer.last() {
        let count = outer.iter().try_fold(1u64, |a, &(n, _)| a.checked_mul(n));
        if s <= run.saturating_add(gap) || count.is_none_or(|c| c > MAX_RUNS) {
            run += (n - 1) * s;
            outer.pop();
        } else {
            break;
        }
    }
    run
}

/// Where each run starts, sorted: every combination of the `outer`
/// dimensions' positions from `base` (at most MAX_RUNS of them).
fn run_starts(outer: &[(u64, u64)], base: u64) -> Vec<u64> {
    let count = outer.iter().map(|&(n, _)| n).product::<u64>() as usize;
    let mut starts = Vec::with_capacity(count);
    let mut at = vec![0u64; outer.len()];
    let mut offset = base;
    'runs: loop {
        starts.push(offset);
        let mut k = outer.len();
        loop {
            if k == 0 {
                break 'runs;
            }
            k -= 1;
            let (n, s) = outer[k];
            if at[k] + 1 < n {
                at[k] += 1;
                offset += s;
                continue 'runs;
            }
            offset -= (n - 1) * s;
            at[k] = 0;
        }
    }
    if !starts.is_sorted() {
        starts.sort_unstable();
    }
    starts
}

/// Runs of `run` bytes at `starts` as spans, those closer than `gap`
/// merged.
fn merge_runs(starts: Vec<u64>, run: u64, gap: u64) -> Vec<Range<u64>> {
    let mut spans: Vec<Range<u64>> = Vec::new();
    for start in starts {
        let stop = start + run;
        match spans.last_mut() {
            Some(last) if start <= last.end.saturating_add(gap) => last.end = last.end.max(stop),
            _ => spans.push(start..stop),
        }
    }
    spans
}

/// `spans` with the closest ones merged until at most `max_spans` remain.
fn cap_spans(spans: Vec<Range<u64>>, max_spans: usize) -> Vec<Range<u64>> {
    if spans.len() <= max_spans {
        return spans;
    }
    let mut gaps: Vec<u64> = spans.windows(2).map(|w| w[1].start - w[0].end).collect();
    let merge = spans.len() - max_spans;
    let (_, &mut widest, _) = gaps.select_nth_unstable(merge - 1);
    // Every gap narrower than `widest`, and as many equal to it as make up
    // the count (ties would otherwise merge everything).
    let mut ties = merge - spans.windows(2).filter(|w| w[1].start - w[0].end < widest).count();
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(max_spans);
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start - last.end < widest => last.end = span.end,
            Some(last) if span.start - last.end == widest && ties > 0 => {
                ties -= 1;
                last.end = span.end;
            }
            _ => merged.push(span),
        }
    }
    merged
}

/// Total bytes of `spans`.
pub fn spans_len(spans: &[Range<u64>]) -> Result<u64> {
    spans.iter().try_fold(0u64, |a, s| a.checked_add(s.end - s.start)).ok_or_else(overflow)
}

/// `spans` widened to whole chunks of `chunk` bytes of data `len` bytes
/// long (the last chunk may be shorter), merged where they meet: the
/// encrypted chunks a read must fetch and open.
pub fn align_spans(spans: &[Range<u64>], chunk: u64, len: u64) -> Vec<Range<u64>> {
    let chunk = chunk.max(1);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(spans.len());
    for span in spans.iter().filter(|s| s.start < s.end) {
        let start = span.start / chunk * chunk;
        let end = span.end.div_ceil(chunk).saturating_mul(chunk).min(len);
        match out.last_mut() {
            Some(last) if start <= last.end => last.end = last.end.max(end),
            _ => out.push(start..end),
        }
    }
    out
}

/// Copies `view`'s elements row-major into `out` (exactly `numel ×
/// itemsize` bytes) from `data`, the bytes of `spans` back to back (any
/// sorted, disjoint spans holding every element, such as
/// [`plan_spans`]'s).
pub fn gather(
    view: &StridedView,
    itemsize: u64,
    spans: &[Range<u64>],
    data: &[u8],
    out: &mut [u8],
) -> Result<()> {
    let numel = view.numel().ok_or_else(overflow)?;
    let size = usize::try_from(itemsize).map_err(|_| overflow())?;
    if numel.checked_mul(itemsize) != Some(out.len() as u64) {
        return Err(invalid(format!(
            "a slice of {numel} elements needs {} bytes, got {}",
            numel * itemsize,
            out.len()
        )));
    }
    if spans_len(spans)? != data.len() as u64 {
        return Err(invalid("the data read differs in length from its spans"));
    }
    if numel == 0 || itemsize == 0 {
        return Ok(());
    }
    let mut starts = Vec::with_capacity(spans.len());
    let mut at = 0u64;
    for s in spans {
        starts.push(at);
        at += s.end - s.start;
    }
    // Position in `data` of `len` bytes at storage byte `offset`.
    let locate = |offset: u64, len: u64| -> Option<usize> {
        let k = spans.partition_point(|s| s.start <= offset).checked_sub(1)?;
        let span = &spans[k];
        (offset.checked_add(len)? <= span.end).then(|| (starts[k] + offset - span.start) as usize)
    };
    let missing = || invalid("a slice element lies outside the spans read");
    // Storage byte of the element at `index` (trailing dimensions at 0).
    let elem_at = |index: &[u64]| -> Option<u64> {
        let mut e = view.offset;
        for (&i, &s) in index.iter().zip(&view.stride) {
            e = e.checked_add(i.checked_mul(s)?)?;
        }
        e.checked_mul(itemsize)
    };
    let ndim = view.shape.len();
    if ndim == 0 {
        let at = elem_at(&[]).ok_or_else(overflow)?;
        let p = locate(at, itemsize).ok_or_else(missing)?;
        out.copy_from_slice(&data[p..p + size]);
        return Ok(());
    }
    let last = view.shape[ndim - 1];
    let step = view.stride[ndim - 1].checked_mul(itemsize).ok_or_else(overflow)?;
    let row_bytes = usize::try_from(last * itemsize).map_err(|_| overflow())?;
    let mut index = vec![0u64; ndim - 1];
    for row in out.chunks_exact_mut(row_bytes) {
        let base = elem_at(&index).ok_or_else(overflow)?;
        match locate(base, row_bytes as u64) {
            Some(p) if step == itemsize => row.copy_from_slice(&data[p..p + row_bytes]),
            _ => {
                for (k, element) in row.chunks_exact_mut(size).enumerate() {
                    let at = (k as u64)
                        .checked_mul(step)
                        .and_then(|o| base.checked_add(o))
                        .ok_or_else(overflow)?;
                    let p = locate(at, itemsize).ok_or_else(missing)?;
                    element.copy_from_slice(&data[p..p + size]);
                }
            }
        }
        for k in (0..index.len()).rev() {
            index[k] += 1;
            if index[k] < view.shape[k] {
                break;
            }
            index[k] = 0;
        }
    }
    Ok(())
}

/// Reads the bytes of `spans` (storage offsets, added to `base` for file
/// offsets) back to back into `out`, cutting long spans into pieces of
/// `piece_len` bytes read on `threads` threads. `finish` gets each piece
/// with its storage offset once it is in (to decrypt it); pieces start at
/// a span start plus a multiple of `piece_len`.
pub(crate) fn read_spans<S: RangeSource + ?Sized>(
    source: &S,
    base: u64,
    spans: &[Range<u64>],
    piece_len: u64,
    threads: usize,
    out: &mut [u8],
    finish: impl Fn(u64, &mut [u8]) -> Result<()> + Sync,
) -> Result<()> {
    if spans_len(spans)? != out.len() as u64 {
        return Err(invalid("the buffer differs in length from the spans to read"));
    }
    let piece_len = usize::try_from(piece_len.max(1)).unwrap_or(usize::MAX);
    let mut pieces: Vec<(u64, &mut [u8])> = Vec::new();
    let mut rest = out;
    for span in spans {
        let (mine, tail) = rest.split_at_mut((span.end - span.start) as usize);
        rest = tail;
        for (n, piece) in mine.chunks_mut(piece_len).enumerate() {
            pieces.push((span.start + (n * piece_len) as u64, piece));
        }
    }
    for_each(threads, pieces, |(at, piece)| {
        let offset = base.checked_add(at).ok_or_else(overflow)?;
        source.read_exact_at(offset, piece)?;
        finish(at, piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(gap: u64) -> SpanPolicy {
        SpanPolicy { gap, max_spans: MAX_SPANS }
    }

    fn view(shape: &[u64]) -> StridedView {
        StridedView::contiguous(shape).unwrap()
    }

    #[test]
    fn a_row_slice_is_one_exact_span() {
        let v = view(&[10, 4]).index(&[Index::range(2, 5)]).unwrap();
        assert_eq!(v.shape, vec![3, 4]);
        assert_eq!(plan_spans(&v, 4, gap(0)).unwrap(), vec![32..80]);
        assert!(v.is_row_major());
    }

    #[test]
    fn a_column_slice_is_one_span_per_row_without_gap() {
        let v = view(&[3, 8]).index(&[Index::Ellipsis, Index::range(2, 4)]).unwrap();
        assert_eq!(v.shape, vec![3, 2]);
        assert_eq!(plan_spans(&v, 2, gap(0)).unwrap(), vec![4..8, 20..24, 36..40]);
        assert_eq!(plan_spans(&v, 2, gap(16)).unwrap(), vec![4..40]);
    }

    #[test]
    fn ints_new_axes_and_negative_indices() {
        let v = view(&[2, 3, 4])
            .index(&[
                Index::At(-1),
                Index::NewAxis,
                Index::Range { start: None, stop: None, step: 2 },
            ])
            .unwrap();
        assert_eq!(v.shape, vec![1, 2, 4]);
        assert_eq!(v.stride, vec![0, 8, 1]);
        assert_eq!(v.offset, 12);
        assert!(view(&[2]).index(&[Index::At(2)]).is_err());
        assert!(view(&[2]).index(&[Index::At(-3)]).is_err());
        assert!(view(&[2]).index(&[Index::full(), Index::full()]).is_err());
        assert!(view(&[2]).index(&[Index::Ellipsis, Index::Ellipsis]).is_err());
        assert!(view(&[2]).index(&[Index::Range { start: None, stop: None, step: 0 }]).is_err());
    }

    #[test]
    fn hostile_shapes_fail_cleanly() {
        let v = StridedView { shape: vec![u64::MAX, 2], stride: vec![u64::MAX, 1], offset: 5 };
        assert!(plan_spans(&v, 8, gap(0)).is_err());
        let big =
            v.index(&[Index::Range { start: Some(1), stop: None, step: i64::MAX }, Index::At(0)]);
        assert!(big.is_err() || plan_spans(&big.unwrap(), 8, gap(0)).is_err());
        assert!(StridedView::contiguous(&[u64::MAX, u64::MAX]).is_err());
        // Zero-sized elements: nothing to read or copy.
        let v = view(&[4, 4]);
        assert!(plan_spans(&v, 0, gap(0)).unwrap().is_empty());
        gather(&v, 0, &[], &[], &mut []).unwrap();
    }

    #[test]
    fn many_runs_read_whole_inner_blocks_and_many_spans_merge() {
        // 2^21 single-element runs 3 elements apart: too many, merged.
        let v = StridedView { shape: vec![1 << 21], stride: vec![3], offset: 0 };
        let spans = plan_spans(&v, 1, gap(0)).unwrap();
        assert_eq!(spans, vec![0..3 * ((1 << 21) - 1) + 1]);
        // 4096 rows 1 MiB apart: merged down to MAX_SPANS spans.
        let v = StridedView { shape: vec![4096, 4], stride: vec![1 << 20, 1], offset: 0 };
        let spans = plan_spans(&v, 1, gap(0)).unwrap();
        assert_eq!(spans.len(), MAX_SPANS);
        assert!(spans.iter().all(|s| s.start % (1 << 20) == 0));
    }

    #[test]
    fn chunk_windows() {
        assert_eq!(align_spans(&[5..6, 9..25, 40..41], 10, 45), vec![0..30, 40..45]);
        let one = 3..4;
        assert_eq!(align_spans(std::slice::from_ref(&one), 100, 7), vec![0..7, 8..8][..1].to_vec());
    }
}
