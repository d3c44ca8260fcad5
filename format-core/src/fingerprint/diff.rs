//! Comparing two fingerprints tensor by tensor (spec §21.5).

use alloc::vec::Vec;
use core::cmp::Ordering;

use super::{Fingerprint, TensorFingerprint};

/// What differs between two records of one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Difference {
    /// The dtypes differ.
    pub dtype: bool,
    /// The shapes differ.
    pub shape: bool,
    /// The data digests differ (or one is a meta tensor).
    pub data: bool,
}

/// One difference between fingerprint `a` and fingerprint `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    /// Only `b` has a tensor of this name.
    Added(&'a TensorFingerprint),
    /// Only `a` has a tensor of this name.
    Removed(&'a TensorFingerprint),
    /// A tensor only `a` has and one only `b` has agree on dtype, shape
    /// and data.
    Renamed {
        /// The record in `a`.
        from: &'a TensorFingerprint,
        /// The record in `b`.
        to: &'a TensorFingerprint,
    },
    /// Both have a tensor of this name, and they differ.
    Changed {
        /// The record in `a`.
        a: &'a TensorFingerprint,
        /// The record in `b`.
        b: &'a TensorFingerprint,
        /// What differs.
        difference: Difference,
    },
}

impl Change<'_> {
    /// The name the change is listed under: `a`'s name, or `b`'s for an
    /// added tensor.
    pub fn name(&self) -> &str {
        match self {
            Self::Added(t) | Self::Removed(t) => &t.name,
            Self::Renamed { from, .. } => &from.name,
            Self::Changed { a, .. } => &a.name,
        }
    }
}

/// Every difference between `a` and `b`, sorted by [`Change::name`]
/// (byte-wise); empty exactly when the fingerprints are equal. A tensor
/// only in `a` and one only in `b` with the same dtype, shape and data form
/// a [`Change::Renamed`]; they pair in name order, each at most once.
pub fn diff<'a>(a: &'a Fingerprint, b: &'a Fingerprint) -> Vec<Change<'a>> {
    let (ta, tb) = (a.tensors(), b.tensors());
    let mut changes = Vec::new();
    let mut removed = Vec::new();
    let mut added = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < ta.len() || j < tb.len() {
        let order = match (ta.get(i), tb.get(j)) {
            (Some(x), Some(y)) => x.name.as_bytes().cmp(y.name.as_bytes()),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        match order {
            Ordering::Less => {
                removed.push(&ta[i]);
                i += 1;
            }
            Ordering::Greater => {
                added.push(&tb[j]);
                j += 1;
            }
            Ordering::Equal => {
                let (x, y) = (&ta[i], &tb[j]);
                let difference = Difference {
                    dtype: x.dtype != y.dtype,
                    shape: x.shape != y.shape,
                    data: x.data != y.data,
                };
                if difference.dtype || difference.shape || difference.data {
                    changes.push(Change::Changed { a: x, b: y, difference });
                }
                i += 1;
                j += 1;
            }
        }
    }
    let mut paired = alloc::vec![false; added.len()];
    for from in removed {
        let partner =
            added.iter().zip(paired.iter_mut()).find(|(to, used)| !**used && to.same_content(from));
        match partner {
            Some((to, used)) => {
                *used = true;
                changes.push(Change::Renamed { from, to });
            }
            None => changes.push(Change::Removed(from)),
        }
    }
    changes.extend(
        added.into_iter().zip(paired).filter(|(_, used)| !used).map(|(t, _)| Change::Added(t)),
    );
    changes.sort_by(|x, y| x.name().as_bytes().cmp(y.name().as_bytes()));
    changes
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::super::tests::record;
    use super::*;
    use crate::ElementType::{BF16, F32};

    fn fp(records: &[TensorFingerprint]) -> Fingerprint {
        Fingerprint::new(records.to_vec()).unwrap()
    }

    #[test]
    fn equal_fingerprints_have_no_changes() {
        let a = fp(&[record("x", F32, &[1], &[0; 4]), record("y", F32, &[1], &[1; 4])]);
        assert!(diff(&a, &a.clone()).is_empty());
    }

    #[test]
    fn each_kind_of_change_is_named() {
        let x = record("x", F32, &[2], &[0; 8]);
        let y = record("y", F32, &[2], &[1; 8]);
        let z = record("z", F32, &[3], &[2; 12]);
        let a = fp(&[x.clone(), y.clone(), z.clone()]);
        let x2 = record("x", BF16, &[2], &[0; 4]);
        let y2 = record("y2", F32, &[2], &[1; 8]);
        let w = record("w", F32, &[1], &[3; 4]);
        let b = fp(&[x2.clone(), y2.clone(), w.clone()]);
        let d = Difference { dtype: true, shape: false, data: true };
        assert_eq!(
            diff(&a, &b),
            vec![
                Change::Added(&w),
                Change::Changed { a: &x, b: &x2, difference: d },
                Change::Renamed { from: &y, to: &y2 },
                Change::Removed(&z),
            ]
        );
        // Reversed, a rename goes the other way.
        assert!(diff(&b, &a).contains(&Change::Renamed { from: &y2, to: &y }));
    }

    #[test]
    fn a_rename_pairs_once() {
        let zeros = |n: &str| record(n, F32, &[1], &[0; 4]);
        let a = fp(&[zeros("a"), zeros("b")]);
        let b = fp(&[zeros("c")]);
        let changes = diff(&a, &b);
        assert_eq!(changes.len(), 2);
        assert!(
            matches!(changes[0], Change::Renamed { from, to } if from.name == "a" && to.name == "c")
        );
        assert!(matches!(changes[1], Change::Removed(t) if t.name == "b"));
    }
}
