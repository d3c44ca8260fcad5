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
pub fn pack_aligned(lens: impl IntoIterator<Item = u64>, align: u64, max_bytes: u64) -> Option<Vec<Pack>> {
    let align = align.max(1);
    let mut packs = Vec::new();
    let mut current = Pack { first: 0, end: 0, offsets: Vec::new(), size: 0 };
    for (pos, len) in lens.into_iter().enumerate() {
        let mut start = current.size.checked_next_multiple_of(align)?;
        if !current.offsets.is_empty() && start.checked_add(len)? > max_bytes {
            let next = Pack { first: pos, end: pos, offsets: Vec::new(), size: 0 };
            packs.push(std::mem::replace(&mut current, next));
            start = 0;
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
        assert_eq!(big.iter().map(|p| (p.first, p.end)).collect::<Vec<_>>(), vec![(0, 1), (1, 2), (2, 3)]);
        assert_eq!(pack_aligned([u64::MAX, 1], 2, u64::MAX), None);
    }
}
