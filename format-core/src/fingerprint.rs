//! Weight fingerprints (spec §21): one SHA-256 digest for a set of named
//! tensors that does not depend on the file format holding them.
//!
//! Each tensor becomes a record (its flat name, its dtype's torch name, its
//! shape and the SHA-256 of its C-contiguous little-endian bytes); the
//! records, sorted by name, are hashed together into the fingerprint. This
//! module encodes and combines records and compares two fingerprints
//! ([`diff`]); reading the tensors and hashing their bytes (with
//! [`DataHasher`]) is the host's part.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use sha2::{Digest as _, Sha256};

use crate::dtype::ElementType;
use crate::error::{Error, Result};

mod diff;
mod json;

pub use diff::{Change, Difference, diff};
pub use json::{
    change_json, diff_json, fingerprint_from_json, fingerprint_json, record_from_json, record_json,
};

/// The algorithm's name. Its bytes, then a NUL, open the combined hash.
pub const ALGORITHM: &str = "tzr-fingerprint-v1";

/// Bytes in a SHA-256 digest.
pub const DIGEST_LEN: usize = 32;

/// A SHA-256 digest.
pub type Digest = [u8; DIGEST_LEN];

/// Record tag: the tensor's data digest follows.
pub const TAG_DATA: u8 = 0;

/// Record tag: a meta tensor (a shape and dtype, no data); nothing follows.
pub const TAG_META: u8 = 1;

/// Longest element byte swap: a float64 (a complex128 swaps its halves).
const MAX_SWAP_UNIT: usize = 16;

/// SHA-256 of one tensor's little-endian element bytes (spec §21.1), fed
/// the stored bytes in any chunking; big-endian data is swapped element
/// by element as it is fed ([`DataHasher::swapping`]).
#[derive(Clone, Default)]
pub struct DataHasher {
    inner: Sha256,
    /// Bytes per swapped unit; 0 or 1: none.
    unit: usize,
    /// A unit split across two `update` calls, and its bytes so far.
    carry: [u8; MAX_SWAP_UNIT],
    carried: usize,
}

impl DataHasher {
    /// A hasher over no bytes yet, for little-endian (or single-byte) data.
    pub fn new() -> Self {
        Self::default()
    }

    /// A hasher for big-endian data: every `unit` bytes (an element, or
    /// one float of a complex element: [`crate::Dtype::swap_unit`],
    /// [`ElementType::swap_unit`]) are reversed before hashing. A unit
    /// above 16 bytes, which no type has, is hashed as stored.
    pub fn swapping(unit: usize) -> Self {
        Self { unit: if unit <= MAX_SWAP_UNIT { unit } else { 0 }, ..Self::default() }
    }

    /// Feeds the next stored bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        let unit = self.unit;
        if unit < 2 {
            self.inner.update(bytes);
            return;
        }
        if self.carried > 0 {
            let take = (unit - self.carried).min(bytes.len());
            self.carry[self.carried..self.carried + take].copy_from_slice(&bytes[..take]);
            self.carried += take;
            bytes = &bytes[take..];
            if self.carried < unit {
                return;
            }
            self.carry[..unit].reverse();
            self.inner.update(&self.carry[..unit]);
            self.carried = 0;
        }
        let mut buf = [0u8; 4096];
        let per = buf.len() / unit * unit;
        let whole = bytes.len() / unit * unit;
        for chunk in bytes[..whole].chunks(per) {
            let out = &mut buf[..chunk.len()];
            out.copy_from_slice(chunk);
            for element in out.chunks_exact_mut(unit) {
                element.reverse();
            }
            self.inner.update(out);
        }
        let rest = &bytes[whole..];
        self.carry[..rest.len()].copy_from_slice(rest);
        self.carried = rest.len();
    }

    /// The digest of everything fed (a trailing partial element, which a
    /// whole tensor never leaves, is hashed as stored).
    pub fn finish(mut self) -> Digest {
        if self.carried > 0 {
            self.inner.update(&self.carry[..self.carried]);
        }
        self.inner.finalize().into()
    }
}

/// One tensor's part of a fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorFingerprint {
    /// The flat dotted name ([`crate::TensorPath::dotted_name`]).
    pub name: String,
    /// The element type; its torch name goes into the record.
    pub dtype: ElementType,
    /// The shape, outermost dimension first.
    pub shape: Vec<u64>,
    /// SHA-256 of the C-contiguous little-endian element bytes; `None` for
    /// a meta tensor, which has no data.
    pub data: Option<Digest>,
}

impl TensorFingerprint {
    /// The dtype's name in the record: torch's, without `torch.`.
    pub fn dtype_name(&self) -> &'static str {
        self.dtype.torch_name()
    }

    /// Appends the record's bytes (spec §21.2) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let name = self.name.as_bytes();
        let dtype = self.dtype_name().as_bytes();
        out.extend_from_slice(&(name.len() as u64).to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&(dtype.len() as u64).to_le_bytes());
        out.extend_from_slice(dtype);
        out.extend_from_slice(&(self.shape.len() as u64).to_le_bytes());
        for dim in &self.shape {
            out.extend_from_slice(&dim.to_le_bytes());
        }
        match &self.data {
            Some(digest) => {
                out.push(TAG_DATA);
                out.extend_from_slice(digest);
            }
            None => out.push(TAG_META),
        }
    }

    /// The record's bytes (spec §21.2).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Whether two records agree on everything but the name.
    pub fn same_content(&self, other: &Self) -> bool {
        self.dtype == other.dtype && self.shape == other.shape && self.data == other.data
    }
}

/// The fingerprint of a set of tensors: the combined digest and the
/// records it was made from, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    digest: Digest,
    tensors: Vec<TensorFingerprint>,
}

impl Fingerprint {
    /// Sorts `tensors` by name (byte-wise) and combines them (spec §21.3).
    /// Two tensors with one name are refused
    /// ([`Error::ConflictingPaths`]).
    pub fn new(mut tensors: Vec<TensorFingerprint>) -> Result<Self> {
        tensors.sort_unstable_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        if let Some(pair) = tensors.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(Error::ConflictingPaths { path: pair[0].name.clone() });
        }
        let mut hasher = Sha256::new();
        hasher.update(ALGORITHM.as_bytes());
        hasher.update([0u8]);
        hasher.update((tensors.len() as u64).to_le_bytes());
        let mut record = Vec::new();
        for t in &tensors {
            record.clear();
            t.encode_into(&mut record);
            hasher.update(&record);
        }
        Ok(Self { digest: hasher.finalize().into(), tensors })
    }

    /// The combined digest.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// The combined digest in lowercase hex (64 digits): what `tzr
    /// fingerprint` prints.
    pub fn hex(&self) -> String {
        to_hex(&self.digest)
    }

    /// The records, sorted by name.
    pub fn tensors(&self) -> &[TensorFingerprint] {
        &self.tensors
    }

    /// The record named `name`.
    pub fn get(&self, name: &str) -> Option<&TensorFingerprint> {
        self.tensors
            .binary_search_by(|t| t.name.as_bytes().cmp(name.as_bytes()))
            .ok()
            .map(|i| &self.tensors[i])
    }
}

/// `bytes` in lowercase hex.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec;

    use super::*;

    pub(super) fn record(
        name: &str,
        dtype: ElementType,
        shape: &[u64],
        data: &[u8],
    ) -> TensorFingerprint {
        let mut h = DataHasher::new();
        h.update(data);
        TensorFingerprint {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            data: Some(h.finish()),
        }
    }

    #[test]
    fn the_record_bytes_are_as_specified() {
        let r = record("w", ElementType::F32, &[2], &[0; 8]);
        let mut want = vec![1, 0, 0, 0, 0, 0, 0, 0, b'w', 7, 0, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(b"float32");
        want.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, TAG_DATA]);
        want.extend_from_slice(&Sha256::digest([0u8; 8]));
        assert_eq!(r.encode(), want);
        let meta = TensorFingerprint { data: None, ..r };
        assert_eq!(meta.encode().last(), Some(&TAG_META));
        assert_eq!(meta.encode().len(), want.len() - DIGEST_LEN);
    }

    #[test]
    fn the_combination_is_as_specified() {
        // Hand-computed from the spec's text: the two records in name order.
        let a = record("a", ElementType::I64, &[], &7i64.to_le_bytes());
        let b = record("b", ElementType::BF16, &[0, 3], &[]);
        let mut stream = Vec::new();
        stream.extend_from_slice(b"tzr-fingerprint-v1\0");
        stream.extend_from_slice(&2u64.to_le_bytes());
        stream.extend_from_slice(&a.encode());
        stream.extend_from_slice(&b.encode());
        let want: Digest = Sha256::digest(&stream).into();
        let fp = Fingerprint::new(vec![b.clone(), a.clone()]).unwrap();
        assert_eq!(fp.digest(), &want);
        assert_eq!(fp.tensors(), &[a.clone(), b.clone()]);
        assert_eq!(fp.hex(), to_hex(&want));
        assert_eq!(fp.hex().len(), 64);
        assert_eq!(fp.get("b"), Some(&b));
        assert_eq!(fp.get("c"), None);
    }

    #[test]
    fn the_empty_set_has_a_fingerprint() {
        let fp = Fingerprint::new(Vec::new()).unwrap();
        let want: Digest = Sha256::digest(b"tzr-fingerprint-v1\0\0\0\0\0\0\0\0\0").into();
        assert_eq!(fp.digest(), &want);
    }

    #[test]
    fn every_field_changes_the_fingerprint() {
        let base = record("x", ElementType::F32, &[2, 2], &[1; 16]);
        let fp = |r: &TensorFingerprint| Fingerprint::new(vec![r.clone()]).unwrap().hex();
        let variants = [
            TensorFingerprint { name: "y".into(), ..base.clone() },
            TensorFingerprint { dtype: ElementType::I32, ..base.clone() },
            TensorFingerprint { shape: vec![4], ..base.clone() },
            TensorFingerprint { shape: vec![4, 1], ..base.clone() },
            TensorFingerprint { data: None, ..base.clone() },
            record("x", ElementType::F32, &[2, 2], &[2; 16]),
        ];
        for v in &variants {
            assert_ne!(fp(v), fp(&base), "{v:?}");
        }
    }

    #[test]
    fn big_endian_data_hashes_as_little_endian_in_any_chunking() {
        let le: Vec<u8> = (0u8..48).collect();
        let want = Sha256::digest(&le);
        for unit in [2usize, 4, 8, 16] {
            let be: Vec<u8> = le.chunks(unit).flat_map(|c| c.iter().rev().copied()).collect();
            for split in [1usize, 3, 5, 7, 48] {
                let mut h = DataHasher::swapping(unit);
                for piece in be.chunks(split) {
                    h.update(piece);
                }
                assert_eq!(h.finish()[..], want[..], "unit {unit}, pieces of {split}");
            }
        }
        let mut h = DataHasher::swapping(1);
        h.update(&le);
        assert_eq!(h.finish()[..], want[..]);
    }

    #[test]
    fn duplicate_names_are_refused() {
        let r = record("x", ElementType::U8, &[1], &[0]);
        let err = Fingerprint::new(vec![r.clone(), r]).unwrap_err();
        assert_eq!(err, Error::ConflictingPaths { path: "x".into() });
    }

    #[test]
    fn names_sort_by_bytes() {
        let names = ["b", "B", "a.1", "a.10", "a.2", "é"];
        let fp =
            Fingerprint::new(names.iter().map(|n| record(n, ElementType::U8, &[], &[0])).collect())
                .unwrap();
        let got: Vec<&str> = fp.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(got, ["B", "a.1", "a.10", "a.2", "b", "é"]);
    }
}
