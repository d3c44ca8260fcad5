//! Packing tensors into shared allocations: each tensor at an aligned
//! offset, the allocations capped in size. CPU arenas (many small tensors
//! in one buffer) and carved device memory (one allocation cut into views)
//! are both laid out here, so the rule is written once.

/// Alignment of tensors carved from one device allocation (what torch's
/// caching allocator gives each block, so views behave as separate
/// tensors would).
pub const DEVICE_VIEW_ALIGN: u64 = 256;

/// One allocation: the tensors `first..end` of the packed list, the
/// offset of each inside it, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pack {
    /// Position of the first tensor in the packed list.
    pub first: usize,
    /// One past the last tensor's position.
    pub end: usize,
    /// Where each tensor starts, a multiple of the alignment.
    pub offsets: Vec<u64>,
    /// Bytes the allocation needs: the end of its last tensor.
    pub size: u64,
}

/// Lays out tensors of `lens` bytes, in order, each starting at a multiple
/// of `align` (0 is taken as 1). A new allocation starts whenever the next
/// tensor would take the current one past `max_bytes`; a tensor larger
/// than that gets an allocation of its own. `None` when a size overflows.
pub fn pack_aligned(
    lens: impl IntoIterator<Item = u64>,
    align: u64,
    max_bytes: u64,
) -> Option<Vec<Pack>> {
    pack_placed(lens.into_iter().map(|len| (len, None)), align, 1, max_bytes)
}

/// [`pack_aligned`] where a tensor may also ask for a phase: `(len,
/// Some(p))` starts at the first aligned offset that is `p` more than a
/// multiple of `block` (an allocation itself starting at a multiple of
/// `block`), so that its bytes sit at the same place in each block as they
/// do in the file (`p` a multiple of `align`, below `block`). Reads that
/// bypass the page cache can then land in it directly.
pub fn pack_placed(
    items: impl IntoIterator<Item = (u64, Option<u64>)>,
    align: u64,
    block: u64,
    max_bytes: u64,
) -> Option<Vec<Pack>> {
    let align = align.max(1);
    let block = block.max(1);
    let place = |at: u64, phase: Option<u64>| -> Option<u64> {
        let aligned = at.checked_next_multiple_of(align)?;
        match phase {
            Some(p) => {
                let base = aligned - aligned % block;
                let start = base.checked_add(p % block)?;
                if start >= aligned { Some(start) } else { start.checked_add(block) }
            }
            None => Some(aligned),
        }
    };
    let mut packs = Vec::new();
    let mut current = Pack { first: 0, end: 0, offsets: Vec::new(), size: 0 };
    for (pos, (len, phase)) in items.into_iter().enumerate() {
        let mut start = place(current.size, phase)?;
        if !current.offsets.is_empty() && start.checked_add(len)? > max_bytes {
            let next = Pack { first: pos, end: pos, offsets: Vec::new(), size: 0 };
            packs.push(std::mem::replace(&mut current, next));
            start = place(0, phase)?;
        }
        current.offsets.push(start);
        current.size = start.checked_add(len)?;
        current.end = pos + 1;
    }
    if !current.offsets.is_empty() {
        packs.push(current);
    }
    Some(packs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_start_aligned_and_allocations_stay_under_the_cap() {
        let packs = pack_aligned([10, 64, 1, 100, 30], 64, 200).unwrap();
        assert_eq!(packs[0], Pack { first: 0, end: 3, offsets: vec![0, 64, 128], size: 129 });
        assert_eq!(packs[1], Pack { first: 3, end: 5, offsets: vec![0, 128], size: 158 });
        assert!(pack_aligned([], 64, 200).unwrap().is_empty());
        // A tensor over the cap is alone in its allocation.
        let big = pack_aligned([5, 500, 5], 8, 100).unwrap();
        assert_eq!(
            big.iter().map(|p| (p.first, p.end)).collect::<Vec<_>>(),
            vec![(0, 1), (1, 2), (2, 3)]
        );
        assert_eq!(pack_aligned([u64::MAX, 1], 2, u64::MAX), None);
    }

    #[test]
    fn placed_tensors_keep_their_phase_in_each_block() {
        let packs =
            pack_placed([(10, None), (100, Some(192)), (5, Some(0)), (7, None)], 64, 256, 1000)
                .unwrap();
        assert_eq!(packs[0].offsets, vec![0, 192, 512, 576]);
        assert_eq!(packs[0].size, 583);
        // A new allocation starts at the phase too.
        let split = pack_placed([(300, None), (100, Some(64))], 64, 256, 400).unwrap();
        assert_eq!(split[1].offsets, vec![64]);
        assert_eq!(pack_placed([(u64::MAX - 10, None), (1, Some(64))], 64, 256, u64::MAX), None);
    }
}
