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

#[test]
fn big_endian_tensors_are_swapped_into_safetensors() {
    use tensorizer_core::{Dtype, ElementType, TensorSpec};
    let dir = tempfile::tempdir().unwrap();
    let floats: Vec<u8> = [1.5f32, -2.25, 1e-3].iter().flat_map(|v| v.to_be_bytes()).collect();
    let complex: Vec<u8> = [0.5f32, -4.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    let specs = [
        TensorSpec::state_dict("f", Dtype::from_element(ElementType::F32), vec![3]),
        TensorSpec::state_dict("c", Dtype::from_element(ElementType::Complex64), vec![1]),
    ];
    let patches: [(&[u8], &[u8]); 2] = [(b"<f4", b">f4"), (b"<c8", b">c8")];
    let bytes = crate::common::file_with_dtypes_patched(&specs, &[&floats, &complex], &patches);
    let input = dir.path().join("be.tensors");
    std::fs::write(&input, bytes).unwrap();
    let reader = Reader::open(&input, ReadOptions::default()).unwrap();
    let st = dir.path().join("be.safetensors");
    to_safetensors(&reader, &st, |_| {}).unwrap();
    let raw = std::fs::read(&st).unwrap();
    let data = &raw[8 + u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize..];
    let le: Vec<f32> = data.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(le, [1.5, -2.25, 1e-3, 0.5, -4.0]);
    // Back in tensorizer form the values are the same, stored little-endian.
    let back = dir.path().join("back.tensors");
    from_safetensors(&st, &back, &WriteOptions::default(), |_| {}).unwrap();
    let again = Reader::open(&back, ReadOptions { verify_hash: true, ..ReadOptions::default() }).unwrap();
    assert_eq!(again.entries()[0].dtype.as_str(), "<f4");
    let mut out = vec![0; 12];
    again.load_into(0, &mut out).unwrap();
    assert_eq!(out, [1.5f32, -2.25, 1e-3].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
}

#[test]
fn a_safetensors_header_with_a_repeated_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let json =
        br#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
    let input = dir.path().join("dup.safetensors");
    std::fs::write(&input, [&(json.len() as u64).to_le_bytes()[..], json, &[7, 9]].concat()).unwrap();
    let out = dir.path().join("dup.tensors");
    let err = from_safetensors(&input, &out, &WriteOptions::default(), |_| {}).unwrap_err();
    assert!(err.to_string().contains("duplicate tensor name \"w\""), "{err}");
    assert!(!out.exists());
}
