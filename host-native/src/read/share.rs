//! The share plan of a cooperative load (spec §24): which rank of a group
//! of `ranks` readers reads which tensors of a load, so that together they
//! read each selected tensor's bytes once and then exchange them. Every
//! rank computes it from the index alone, so the ranks agree without
//! talking to each other.
//!
//! The stored tensors, in file order, are cut into `ranks` contiguous runs
//! balanced by the bytes each rank reads (a tensor's header and data): a
//! tensor goes to the rank whose equal slice of the total holds the middle
//! of its bytes. Each rank then reads one region of the file, in the order
//! the reader batches best, and no rank reads more than its equal slice plus
//! half the largest tensor. Tensors are never split: a tensor is verified
//! and decrypted whole by the rank that owns it. Meta tensors have no
//! stored bytes; every rank builds them itself.

use tensorizer_core::MetadataEntry;

/// Who reads what: `shares[r]` holds the tensor indices rank `r` reads, in
/// file order; `local` holds the meta tensors every rank builds itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharePlan {
    /// Per rank, the stored tensors it reads and sends to the others.
    pub shares: Vec<Vec<usize>>,
    /// Meta tensors (no stored bytes), in the order given.
    pub local: Vec<usize>,
}

/// Plans a load of tensors `indices` of `entries` shared among `ranks`
/// readers (`ranks` ≥ 1). `None` when an index is out of range, `ranks` is
/// 0 or a size overflows.
pub fn plan_shares(
    entries: &[MetadataEntry],
    indices: &[usize],
    ranks: usize,
) -> Option<SharePlan> {
    if ranks == 0 {
        return None;
    }
    let mut plan = SharePlan { shares: vec![Vec::new(); ranks], local: Vec::new() };
    // (start of its bytes in the file, bytes read, index) per stored tensor.
    let mut stored = Vec::with_capacity(indices.len());
    for &i in indices {
        let e = entries.get(i)?;
        if e.is_meta() {
            plan.local.push(i);
        } else {
            let span = e.data_offset.checked_add(e.data_length)?.checked_sub(e.header_offset)?;
            stored.push((e.header_offset, span, i));
        }
    }
    stored.sort_unstable();
    let total = stored.iter().try_fold(0u64, |acc, &(_, span, _)| acc.checked_add(span))?;
    let mut before = 0u64;
    for (_, span, i) in stored {
        // The rank whose slice [r·total/ranks, (r+1)·total/ranks) holds
        // the tensor's middle byte; u128 so the product cannot overflow.
        let middle = u128::from(before) + u128::from(span) / 2;
        let rank = if total == 0 { 0 } else { middle * ranks as u128 / u128::from(total) };
        let rank = usize::try_from(rank).ok()?.min(ranks - 1);
        plan.shares[rank].push(i);
        before = before.checked_add(span)?;
    }
    Some(plan)
}

#[cfg(test)]
mod tests {
    use tensorizer_core::{Dtype, ElementType, TensorPath, TensorType};

    use super::*;

    /// A float32 tensor of `len` stored bytes whose 64-byte header starts
    /// at `at` (`len` 0 with `meta`: a meta tensor of 4 elements).
    fn entry(at: u64, len: u64, meta: bool) -> MetadataEntry {
        let elements = if meta { 4 } else { len / 4 };
        MetadataEntry {
            path: TensorPath::parse(b"t", 0).unwrap(),
            tensor_type: TensorType::Param,
            dtype: Dtype::from_element(ElementType::F32),
            shape: vec![elements],
            header_offset: at,
            data_offset: at + 64,
            data_length: len,
            long_dims: false,
        }
    }

    /// Entries laid out one after another with these data lengths.
    fn file(lens: &[u64]) -> Vec<MetadataEntry> {
        let mut at = 0;
        lens.iter()
            .map(|&len| {
                let e = entry(at, len, false);
                at += 64 + len;
                e
            })
            .collect()
    }

    fn bytes(entries: &[MetadataEntry], share: &[usize]) -> u64 {
        share.iter().map(|&i| 64 + entries[i].data_length).sum()
    }

    #[test]
    fn shares_are_contiguous_and_balanced() {
        let entries = file(&[1000; 12]);
        let all: Vec<usize> = (0..12).collect();
        let plan = plan_shares(&entries, &all, 3).unwrap();
        assert_eq!(plan.shares, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9, 10, 11]]);
        // Uneven sizes: no rank reads more than its slice plus half the
        // largest tensor, and the runs stay in file order.
        let entries = file(&[10, 5000, 20, 20, 3000, 7, 900, 900, 64, 4000]);
        let all: Vec<usize> = (0..entries.len()).collect();
        for ranks in 1..=5 {
            let plan = plan_shares(&entries, &all, ranks).unwrap();
            let flat: Vec<usize> = plan.shares.concat();
            assert_eq!(flat, all, "{ranks} ranks");
            let total: u64 = bytes(&entries, &all);
            for share in &plan.shares {
                assert!(
                    bytes(&entries, share) <= total / ranks as u64 + (64 + 5000) / 2 + 1,
                    "{ranks} ranks"
                );
            }
        }
    }

    #[test]
    fn meta_tensors_are_local_and_bad_input_is_refused() {
        let mut entries = file(&[400, 400]);
        entries.push(entry(928, 0, true));
        let plan = plan_shares(&entries, &[2, 1, 0], 2).unwrap();
        assert_eq!(plan, SharePlan { shares: vec![vec![0], vec![1]], local: vec![2] });
        // More ranks than tensors: some shares are empty.
        let plan = plan_shares(&entries, &[0, 1], 4).unwrap();
        assert_eq!(plan.shares.iter().filter(|s| s.is_empty()).count(), 2);
        assert_eq!(plan_shares(&entries, &[3], 2), None);
        assert_eq!(plan_shares(&entries, &[0], 0), None);
    }
}
