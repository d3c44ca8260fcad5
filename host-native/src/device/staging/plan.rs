//! Cutting the requested tensors' data into buffer fills: each fill is one
//! contiguous read of at most one buffer's length, holding whole small
//! tensors or a piece of a large one.

use tensorizer_core::MetadataEntry;

use crate::error::{Error, Result};

/// Gaps between wanted bytes (tensor headers, unrequested tensors) up to
/// this long are read and skipped rather than starting a new fill.
pub(super) const MAX_GAP: u64 = 64 << 10;

/// A piece of one tensor's data inside a fill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Segment {
    /// Position of the tensor in the caller's list (its destination).
    pub dst: usize,
    /// Offset of the piece in the tensor's data.
    pub at: u64,
    /// Length of the piece.
    pub len: usize,
    /// Where the piece starts in the buffer.
    pub buf_at: usize,
}

/// One read into one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fill {
    /// File offset of the read.
    pub start: u64,
    /// Bytes read (at most the buffer length).
    pub len: usize,
    /// The tensor pieces in it, in file order.
    pub segments: Vec<Segment>,
}

/// One requested tensor, as the planner sees it.
pub(super) struct Wanted<'a> {
    /// Position in the caller's list.
    pub dst: usize,
    /// Its index entry.
    pub entry: &'a MetadataEntry,
    /// Pieces must start at multiples of this (the encryption chunk size;
    /// 1 for plain data).
    pub unit: u64,
}

/// Plans the fills for `wanted` (any order) with buffers of `buffer_len`
/// bytes. Tensors without stored data get no segment.
pub(super) fn plan(
    mut wanted: Vec<Wanted<'_>>,
    buffer_len: usize,
    file: &str,
) -> Result<Vec<Fill>> {
    wanted.sort_by_key(|w| w.entry.data_offset);
    let cap = buffer_len as u64;
    let mut fills: Vec<Fill> = Vec::new();
    let mut open: Option<Fill> = None;
    for w in wanted {
        let len = w.entry.data_length;
        if w.unit > cap && len > cap {
            return Err(Error::Invalid(format!(
                "{file}: tensor {:?} is encrypted in chunks of {} bytes, more than the {buffer_len}-byte \
                 staging buffers; use buffers of at least that size",
                w.entry.path.to_string(),
                w.unit
            )));
        }
        let mut at = 0u64;
        while at < len {
            let pos = w.entry.data_offset + at;
            if let Some(f) = &open {
                let end = f.start + f.len as u64;
                if pos < end || pos - end > MAX_GAP || pos - f.start >= cap {
                    fills.extend(open.take());
                }
            }
            let fill =
                open.get_or_insert_with(|| Fill { start: pos, len: 0, segments: Vec::new() });
            let buf_at = (pos - fill.start) as usize;
            let room = cap - buf_at as u64;
            let mut take = room.min(len - at);
            if take < len - at {
                take -= take % w.unit.max(1);
            }
            if take == 0 {
                // Not even one chunk fits after what is already in this
                // fill: the next fill starts with it.
                fills.extend(open.take());
                continue;
            }
            fill.segments.push(Segment { dst: w.dst, at, len: take as usize, buf_at });
            fill.len = buf_at + take as usize;
            at += take;
        }
    }
    fills.extend(open);
    Ok(fills)
}

#[cfg(test)]
mod tests {
    use tensorizer_core::write::{self, WriterOptions};
    use tensorizer_core::{Dtype, ElementType, File, TensorSpec};

    use super::*;

    /// Index entries of a file with tensors of `sizes` bytes (u8).
    fn entries(sizes: &[u64]) -> Vec<MetadataEntry> {
        let specs: Vec<TensorSpec> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                TensorSpec::state_dict(
                    format!("t{i}").as_str(),
                    Dtype::from_element(ElementType::U8),
                    vec![n],
                )
            })
            .collect();
        let data: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![1; n as usize]).collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let bytes =
            write::to_vec(&specs, &refs, &WriterOptions::default(), None, || [0; 24]).unwrap();
        File::parse(&bytes).unwrap().metadata.entries
    }

    fn shape(fills: &[Fill]) -> Vec<Vec<(usize, u64, usize)>> {
        fills.iter().map(|f| f.segments.iter().map(|s| (s.dst, s.at, s.len)).collect()).collect()
    }

    #[test]
    fn small_tensors_share_a_fill_and_large_ones_split() {
        let e = entries(&[100, 200, 5000, 50]);
        let wanted =
            e.iter().enumerate().map(|(dst, entry)| Wanted { dst, entry, unit: 1 }).collect();
        let fills = plan(wanted, 2048, "f").unwrap();
        let s = shape(&fills);
        // t0 and t1 and the start of t2 share the first buffer.
        assert_eq!(s[0][..2], [(0, 0, 100), (1, 0, 200)]);
        assert_eq!(s[0][2].0, 2);
        let t2: u64 = s.iter().flatten().filter(|p| p.0 == 2).map(|p| p.2 as u64).sum();
        assert_eq!(t2, 5000);
        assert!(fills.iter().all(|f| f.len <= 2048));
        assert_eq!(s.last().unwrap().last(), Some(&(3, 0, 50)));
        for f in &fills {
            for seg in &f.segments {
                assert_eq!(f.start + seg.buf_at as u64, e[seg.dst].data_offset + seg.at);
            }
        }
    }

    #[test]
    fn encrypted_pieces_start_at_chunk_boundaries() {
        let e = entries(&[300, 10_000]);
        let wanted =
            e.iter().enumerate().map(|(dst, entry)| Wanted { dst, entry, unit: 1024 }).collect();
        let fills = plan(wanted, 4096, "f").unwrap();
        for (dst, at, len) in shape(&fills).into_iter().flatten() {
            assert!(at.is_multiple_of(1024));
            assert!((len as u64).is_multiple_of(1024) || at + len as u64 == e[dst].data_length);
        }
        let one = vec![Wanted { dst: 0, entry: &e[1], unit: 8192 }];
        assert!(plan(one, 4096, "f").is_err(), "chunks longer than a buffer");
        let unrequested_gap = vec![Wanted { dst: 0, entry: &e[0], unit: 1 }];
        assert_eq!(plan(unrequested_gap, 4096, "f").unwrap().len(), 1);
    }
}
