//! The load plan: how each tensor of a load reaches memory, decided once
//! for every host that loads (Python's `TensorDeserializer` asks it and
//! carries it out). Meta tensors get no bytes; with a memory map open and
//! no hashes to check, CPU tensors aligned to their element size become
//! views of the map; the rest are copied: through the device staging ring,
//! or on the CPU into shared arenas (small tensors) or memory of their own
//! (large ones).

use tensorizer_core::MetadataEntry;

use crate::read::cold::STRAIGHT_MIN;
use crate::read::pack::{Pack, pack_placed};
use crate::source::DIRECT_BLOCK;

/// CPU tensors loaded together are packed into arenas of at most this many
/// bytes: one allocation and one buffer hand-off for many small tensors. A
/// tensor that survives keeps its arena (at most this much) alive.
pub const ARENA_BYTES: u64 = 64 << 20;

/// Alignment of each tensor's data inside an arena (what torch's CPU
/// allocator gives).
pub const ARENA_ALIGN: u64 = 64;

/// Every CPU allocation of a load (arena or large tensor) starts at a
/// multiple of this, so that [`file_phase`] placements line up with the
/// file's blocks.
pub const ALLOCATION_ALIGN: u64 = DIRECT_BLOCK;

/// CPU allocations (arenas, large tensors) of at least this many bytes get
/// memory of their own advised for transparent huge pages: first touches
/// then fault 2 MiB pages instead of 4 KiB ones. Measured: 5-10 % off a CPU
/// load (the reads fault pages from inside the kernel, where faults are
/// cheap), and 4x faster for code that then writes such memory from user
/// space (BENCHMARKS.md).
pub const HUGE_PAGE_MIN: u64 = 2 << 20;

/// Where the tensors go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// CPU memory.
    Cpu,
    /// A device, through the native staging ring (pinned buffers,
    /// asynchronous copies, decryption and hashing on the way).
    Staged,
    /// A device the native ring does not serve: staged in CPU memory by the
    /// caller, then copied.
    Other,
}

/// How each tensor of a load is carried out; every list holds tensor
/// indices, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadPlan {
    /// Meta tensors: no stored bytes, only their headers to check.
    pub meta: Vec<usize>,
    /// Views of the file's memory map.
    pub mapped: Vec<usize>,
    /// Through the device staging ring.
    pub staged: Vec<usize>,
    /// Copied into memory of their own.
    pub large: Vec<usize>,
    /// For each of [`LoadPlan::large`], where its bytes start in CPU memory
    /// of its own (an allocation starting at a multiple of
    /// [`ALLOCATION_ALIGN`]): its file phase ([`file_phase`]), or 0.
    pub large_leads: Vec<u64>,
    /// Copied into shared arenas, laid out by [`LoadPlan::arenas`].
    pub small: Vec<usize>,
    /// The arenas over [`LoadPlan::small`] (positions in that list).
    pub arenas: Vec<Pack>,
    /// Whether the CPU copies should get transparent huge pages (set by
    /// [`crate::Reader::plan_load`]; `false` from [`plan_load`] alone).
    pub huge_pages: bool,
}

/// The least alignment a CPU copy placed at its file phase may get: what
/// safetensors gives every tensor in its files (its data area starts on a
/// multiple of 8), and so what its own memory-mapped tensors have. Files
/// we write align data to [`ARENA_ALIGN`], so their copies keep that.
pub const PHASE_ALIGN_MIN: u64 = 8;

/// Where in a block a CPU copy of `e` should start so that a cold load can
/// read its data straight in around the page cache: its data offset's
/// place in a [`DIRECT_BLOCK`], for data long enough to be read so whose
/// offset is a multiple of [`PHASE_ALIGN_MIN`] and of its element size.
/// Arenas start on block boundaries.
pub fn file_phase(e: &MetadataEntry) -> Option<u64> {
    let align = PHASE_ALIGN_MIN.max(u64::from(e.dtype.itemsize()));
    (e.data_length >= STRAIGHT_MIN && e.data_offset.is_multiple_of(align))
        .then_some(e.data_offset % DIRECT_BLOCK)
}

/// Plans loading tensors `indices` of `entries` to `destination`. `mapped`:
/// a memory map of the file is open and no hashes are to be checked, so
/// CPU tensors may be views of it. `None` when an index is out of range or
/// a size overflows.
pub fn plan_load(
    entries: &[MetadataEntry],
    indices: &[usize],
    destination: Destination,
    mapped: bool,
) -> Option<LoadPlan> {
    let mut plan = LoadPlan::default();
    let mut rest = Vec::with_capacity(indices.len());
    for &i in indices {
        let e = entries.get(i)?;
        if e.is_meta() {
            plan.meta.push(i);
        } else if mapped
            && destination == Destination::Cpu
            && e.data_length > 0
            && e.data_offset.is_multiple_of(u64::from(e.dtype.itemsize().max(1)))
        {
            plan.mapped.push(i);
        } else {
            rest.push(i);
        }
    }
    match destination {
        Destination::Staged => plan.staged = rest,
        Destination::Other => plan.large = rest,
        Destination::Cpu => {
            // A tensor whose stored length is not its size in memory goes
            // the per-tensor way, and fails there with the reader's error.
            let fits = |i: &usize| {
                let e = &entries[*i];
                e.data_length <= ARENA_BYTES && e.data_length == e.nbytes()
            };
            (plan.small, plan.large) = rest.into_iter().partition(fits);
            let items =
                plan.small.iter().map(|&i| (entries[i].data_length, file_phase(&entries[i])));
            plan.arenas = pack_placed(items, ARENA_ALIGN, DIRECT_BLOCK, ARENA_BYTES)?;
        }
    }
    plan.large_leads = plan.large.iter().map(|&i| file_phase(&entries[i]).unwrap_or(0)).collect();
    Some(plan)
}

#[cfg(test)]
mod tests {
    use tensorizer_core::{Dtype, ElementType, TensorPath, TensorType};

    use super::*;

    fn entry(data_offset: u64, shape: Vec<u64>, data_length: u64) -> MetadataEntry {
        MetadataEntry {
            path: TensorPath::parse(b"t", 0).unwrap(),
            tensor_type: TensorType::StateDict,
            dtype: Dtype::from_element(ElementType::F32),
            shape,
            header_offset: data_offset.saturating_sub(64),
            data_offset,
            data_length,
            long_dims: false,
        }
    }

    #[test]
    fn each_tensor_goes_one_way() {
        let entries = vec![
            entry(128, vec![4], 16),                  // small
            entry(256, vec![4], 0),                   // meta
            entry(130, vec![4], 16),                  // small; unaligned for a map
            entry(1 << 20, vec![1 << 25], 128 << 20), // large
        ];
        let all = [0, 1, 2, 3];
        let cpu = plan_load(&entries, &all, Destination::Cpu, false).unwrap();
        assert_eq!((cpu.meta, cpu.small, cpu.large), (vec![1], vec![0, 2], vec![3]));
        assert_eq!(cpu.arenas.len(), 1);
        assert_eq!(cpu.arenas[0].offsets, vec![0, 64]);
        let mapped = plan_load(&entries, &all, Destination::Cpu, true).unwrap();
        assert_eq!((mapped.mapped, mapped.small), (vec![0, 3], vec![2]));
        let staged = plan_load(&entries, &all, Destination::Staged, true).unwrap();
        assert_eq!((staged.mapped.len(), staged.staged), (0, vec![0, 2, 3]));
        let other = plan_load(&entries, &all, Destination::Other, false).unwrap();
        assert_eq!(other.large, vec![0, 2, 3]);
        assert_eq!(plan_load(&entries, &[4], Destination::Cpu, false), None);
    }

    #[test]
    fn long_data_keeps_its_place_in_a_block() {
        let entries = vec![
            entry(128, vec![4], 16),                          // short: packed tight
            entry(3 * 4096 + 192, vec![1 << 18], 1 << 20),    // phase 192
            entry(5 * 4096 + 100, vec![1 << 18], 1 << 20),    // unaligned: no phase
            entry(7 * 4096 + 8, vec![1 << 18], 1 << 20),      // safetensors' 8: phase 8
            entry((1 << 30) + 640, vec![1 << 25], 128 << 20), // large, phase 640
        ];
        let cpu = plan_load(&entries, &[0, 1, 2, 3, 4], Destination::Cpu, false).unwrap();
        let after_two = 192 + (2 << 20);
        assert_eq!(
            cpu.arenas[0].offsets,
            vec![0, 192, 192 + (1 << 20), after_two - 192 + 4096 + 8]
        );
        assert_eq!((cpu.large, cpu.large_leads), (vec![4], vec![640]));
        assert_eq!(file_phase(&entries[0]), None);
    }
}
