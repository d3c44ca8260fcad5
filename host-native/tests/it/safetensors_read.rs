//! safetensors files through the tensorizer reader: the same load paths
//! (batches, whole reads, pieces, spans over a long-read source, cold
//! reads around the page cache) give each tensor's bytes, with no hashes
//! to check and no key to take.

use std::sync::Arc;

use tensorizer_core::{ElementType, KeySource, TensorPath};
use tensorizer_native::{Layout, MemorySource, ReadOptions, Reader};

/// A safetensors file of `tensors` (name, dtype name, shape, data), in
/// that order, with `metadata`.
pub(crate) fn safetensors(tensors: &[(&str, &str, Vec<u64>, Vec<u8>)], metadata: &str) -> Vec<u8> {
    let mut json = format!("{{\"__metadata__\":{metadata}");
    let mut at = 0usize;
    for (name, dtype, shape, data) in tensors {
        let end = at + data.len();
        json.push_str(&format!(
            ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":{shape:?},\"data_offsets\":[{at},{end}]}}"
        ));
        at = end;
    }
    json.push('}');
    while (8 + json.len()) % 8 != 0 {
        json.push(' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
    }
    out
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Small (batched), middling (whole), large (in pieces) and empty tensors.
fn sample() -> Vec<(&'static str, &'static str, Vec<u64>, Vec<u8>)> {
    vec![
        ("a.bias", "F32", vec![3], bytes(12, 1)),
        ("a.weight", "BF16", vec![4, 8], bytes(64, 2)),
        ("empty", "F16", vec![0, 4], Vec::new()),
        ("mid", "U8", vec![200_000], bytes(200_000, 3)),
        ("big", "F32", vec![5 << 20], bytes(20 << 20, 4)),
        ("z", "I64", vec![2], bytes(16, 5)),
    ]
}

fn check_loads<S: tensorizer_native::RangeSource>(reader: &Reader<S>) {
    let want = sample();
    let mut bufs: Vec<Vec<u8>> = want.iter().map(|(_, _, _, d)| vec![0xEE; d.len()]).collect();
    let jobs = bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect();
    reader.load_many_with(jobs, true).unwrap();
    for ((name, _, _, data), got) in want.iter().zip(&bufs) {
        assert!(got == data, "{name}");
    }
}

#[test]
fn a_safetensors_file_reads_like_a_tensorizer_file() {
    let file = safetensors(&sample(), r#"{"format":"pt"}"#);
    let reader = Reader::new(MemorySource::new(file, "m.safetensors"), ReadOptions::default())
        .expect("a safetensors file opens");
    assert!(reader.header().is_none() && !reader.is_encrypted());
    let Layout::Safetensors { metadata, .. } = reader.layout() else { panic!("the layout") };
    assert_eq!(metadata, &[("format".to_string(), "pt".to_string())]);
    let names: Vec<String> = reader.entries().iter().map(|e| e.path.to_string()).collect();
    assert_eq!(names, ["a.bias", "a.weight", "empty", "mid", "big", "z"]);
    let e = &reader.entries()[1];
    let want = (Some(ElementType::BF16), vec![4, 8], 0);
    assert_eq!((e.dtype.element(), e.shape.clone(), e.header_len()), want);
    assert_eq!(reader.index_of(&TensorPath::Plain("z".into())), Some(5));
    assert_eq!(reader.tensor_size(), sample().iter().map(|t| t.3.len() as u64).sum::<u64>());
    check_loads(&reader);
}

#[test]
fn a_long_read_source_and_a_cold_file_give_the_same_bytes() {
    let file = safetensors(&sample(), "{}");
    // Spans: a source that prefers long reads (as HTTP and S3 do).
    let source = crate::common::LongReads(Arc::new(MemorySource::new(file.clone(), "m")));
    check_loads(&Reader::new(source, ReadOptions::default()).unwrap());
    // Around the page cache: a local file whose pages were dropped.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cold.safetensors");
    std::fs::write(&path, &file).unwrap();
    crate::cold::evict(&path);
    let reader = Reader::open(&path, ReadOptions::default()).unwrap();
    assert!(reader.reads_cold(20 << 20), "the file's pages were dropped");
    check_loads(&reader);
}

#[test]
fn a_key_for_a_safetensors_file_is_refused() {
    let file = safetensors(&sample()[..1], "{}");
    let options = ReadOptions {
        key: Some(KeySource::Key(tensorizer_core::crypto::Key::from_bytes([1; 32]))),
        ..ReadOptions::default()
    };
    let err = Reader::new(MemorySource::new(file, "k.safetensors"), options).err().unwrap();
    assert!(err.to_string().contains("not encrypted"), "{err}");
}

#[test]
fn a_safetensors_header_the_loader_refuses_is_an_error_with_its_offset() {
    let mut file = safetensors(&sample()[..2], "{}");
    file.truncate(file.len() - 1);
    let err = Reader::new(MemorySource::new(file, "t.safetensors"), ReadOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("t.safetensors"), "{err}");
}
