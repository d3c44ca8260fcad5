//! tensorizer ↔ safetensors round trips.

use tensorizer_native::safetensors::{flat_name, from_safetensors, to_safetensors};
use tensorizer_native::{ReadOptions, Reader, WriteOptions};

use crate::common::vectors;

#[test]
fn vectors_survive_a_round_trip_through_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let mut converted = 0;
    for v in vectors() {
        let reader = Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap();
        let st = dir.path().join(format!("{}.safetensors", v.name()));
        if to_safetensors(&reader, &st, |_| {}).is_err() {
            // Meta tensors, or dtypes safetensors lacks: refused, and nothing is left behind.
            assert!(!st.exists());
            continue;
        }
        converted += 1;
        let back = dir.path().join(format!("{}.back.tensors", v.name()));
        from_safetensors(&st, &back, &WriteOptions::default(), |_| {}).unwrap();
        let again = Reader::open(&back, ReadOptions { verify_hash: true, ..ReadOptions::default() }).unwrap();
        for (i, e) in reader.entries().iter().enumerate() {
            let j = again
                .entries()
                .iter()
                .position(|b| b.path.to_string() == flat_name(&e.path))
                .unwrap_or_else(|| panic!("{}: {} missing", v.name(), e.path));
            let mut a = vec![0; e.nbytes() as usize];
            let mut b = vec![0; e.nbytes() as usize];
            reader.load_into(i, &mut a).unwrap();
            again.load_into(j, &mut b).unwrap();
            assert_eq!(a, b, "{} {}", v.name(), e.path);
            assert_eq!(e.shape, again.entries()[j].shape);
            assert_eq!(e.dtype, again.entries()[j].dtype);
        }
    }
    assert!(converted >= 8, "only {converted} vectors converted");
}

#[test]
fn hostile_safetensors_headers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<Vec<u8>> = vec![
        vec![1, 2, 3],
        u64::MAX.to_le_bytes().to_vec(),
        [&16u64.to_le_bytes()[..], b"{\"a\": 1}        "].concat(),
        [&48u64.to_le_bytes()[..], br#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,99]}}"#.as_slice()].concat(),
    ];
    for (n, bytes) in cases.iter().enumerate() {
        let input = dir.path().join(format!("bad{n}.safetensors"));
        std::fs::write(&input, bytes).unwrap();
        let out = dir.path().join(format!("bad{n}.tensors"));
        assert!(from_safetensors(&input, &out, &WriteOptions::default(), |_| {}).is_err(), "case {n}");
        assert!(!out.exists());
    }
}
