//! Fingerprints and their differences as JSON, written once for every
//! host (`tzr fingerprint --json`, `tzr diff --json`, the browser
//! inspector): each host adds its own fields (file names, timings).

use alloc::vec::Vec;

use serde_json::{Value, json};

use super::{ALGORITHM, Change, DIGEST_LEN, Digest, Fingerprint, TensorFingerprint, to_hex};
use crate::dtype::ElementType;
use crate::error::Result;

/// One record: `name`, `dtype` (torch's name), `shape` and `sha256` (hex,
/// or `null` for a meta tensor).
pub fn record_json(t: &TensorFingerprint) -> Value {
    json!({
        "name": t.name,
        "dtype": t.dtype_name(),
        "shape": t.shape,
        "sha256": t.data.as_ref().map(|d| to_hex(d)),
    })
}

/// The record [`record_json`] wrote, or `None` when `v` is not one.
pub fn record_from_json(v: &Value) -> Option<TensorFingerprint> {
    let dtype = ElementType::from_torch_name(v.get("dtype")?.as_str()?)?;
    let shape =
        v.get("shape")?.as_array()?.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>()?;
    let data = match v.get("sha256")? {
        Value::Null => None,
        Value::String(hex) => Some(digest_from_hex(hex)?),
        _ => return None,
    };
    Some(TensorFingerprint { name: v.get("name")?.as_str()?.into(), dtype, shape, data })
}

fn digest_from_hex(hex: &str) -> Option<Digest> {
    let bytes = hex.as_bytes();
    if bytes.len() != 2 * DIGEST_LEN {
        return None;
    }
    let nibble = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; DIGEST_LEN];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// The fingerprint [`fingerprint_json`] wrote, recombined from its
/// records (so a changed record cannot pass for the stated digest):
/// `None` when `v` is not one, an error when its names repeat.
pub fn fingerprint_from_json(v: &Value) -> Option<Result<Fingerprint>> {
    let records =
        v.get("tensors")?.as_array()?.iter().map(record_from_json).collect::<Option<Vec<_>>>()?;
    Some(Fingerprint::new(records))
}

/// A fingerprint: `algorithm`, `fingerprint` (hex), `tensor_count` and
/// every record (`tensors`, in name order).
pub fn fingerprint_json(fp: &Fingerprint) -> Value {
    json!({
        "algorithm": ALGORITHM,
        "fingerprint": fp.hex(),
        "tensor_count": fp.tensors().len(),
        "tensors": fp.tensors().iter().map(record_json).collect::<Vec<_>>(),
    })
}

/// One change: `change` (`added`, `removed`, `renamed`, `changed`),
/// `name`, the records as `a` and `b` (whichever exist), `to` for a
/// rename, and for a change which of `dtype`, `shape` and `data` differ.
pub fn change_json(c: &Change<'_>) -> Value {
    match *c {
        Change::Added(t) => json!({"change": "added", "name": t.name, "b": record_json(t)}),
        Change::Removed(t) => json!({"change": "removed", "name": t.name, "a": record_json(t)}),
        Change::Renamed { from, to } => {
            json!({"change": "renamed", "name": from.name, "to": to.name, "a": record_json(from), "b": record_json(to)})
        }
        Change::Changed { a, b, difference } => json!({
            "change": "changed",
            "name": a.name,
            "dtype": difference.dtype,
            "shape": difference.shape,
            "data": difference.data,
            "a": record_json(a),
            "b": record_json(b),
        }),
    }
}

/// The comparison of `a` and `b`: `same`, `algorithm`, both
/// fingerprints, the count of each kind of change, and `changes` (as
/// [`change_json`], in [`super::diff`]'s order).
pub fn diff_json(a: &Fingerprint, b: &Fingerprint) -> Value {
    let changes = super::diff(a, b);
    let count = |kind: &str| {
        changes
            .iter()
            .filter(|c| {
                matches!(
                    (kind, c),
                    ("added", Change::Added(_))
                        | ("removed", Change::Removed(_))
                        | ("renamed", Change::Renamed { .. })
                        | ("changed", Change::Changed { .. })
                )
            })
            .count()
    };
    json!({
        "same": changes.is_empty(),
        "algorithm": ALGORITHM,
        "fingerprint_a": a.hex(),
        "fingerprint_b": b.hex(),
        "added": count("added"),
        "removed": count("removed"),
        "renamed": count("renamed"),
        "changed": count("changed"),
        "changes": changes.iter().map(change_json).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::super::tests::record;
    use super::*;

    #[test]
    fn records_round_trip_through_json() {
        let a = record("w", ElementType::BF16, &[2, 0], &[]);
        let meta = TensorFingerprint { data: None, ..record("m", ElementType::F32, &[3], &[]) };
        let fp = Fingerprint::new(vec![a, meta]).unwrap();
        let back = fingerprint_from_json(&fingerprint_json(&fp)).unwrap().unwrap();
        assert_eq!(back, fp);
        assert!(
            record_from_json(
                &serde_json::json!({"name": "x", "dtype": "float32", "shape": [1], "sha256": "zz"})
            )
            .is_none()
        );
        assert!(diff_json(&fp, &back)["same"].as_bool().unwrap());
    }
}
