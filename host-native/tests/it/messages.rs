//! What errors say: no byte offset for a file that does not open, a
//! tensor named once, another format named as such, a wrong key reported
//! once.

use tensorizer_core::KeySource;
use tensorizer_core::crypto::Key;
use tensorizer_native::error::StoreErrorKind;
use tensorizer_native::read::verify::verify_all;
use tensorizer_native::{Error, MemorySource, ReadOptions, Reader};

use crate::common::vectors;

fn vector(name: &str) -> crate::common::Vector {
    vectors().into_iter().find(|v| v.name() == name).unwrap()
}

#[test]
fn a_missing_file_names_no_byte_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.tensors");
    let err = Reader::open(&path, ReadOptions::default()).err().unwrap();
    assert_eq!(err.to_string(), format!("{}: No such file or directory", path.display()));
    assert_eq!((err.offset(), err.store_kind()), (None, Some(StoreErrorKind::NotFound)));
}

#[test]
fn a_hash_mismatch_names_the_tensor_once() {
    let v = vector("v1_flat.tensors");
    let mut bytes = std::fs::read(&v.path).unwrap();
    let reader =
        Reader::new(MemorySource::new(bytes.clone(), "flat"), ReadOptions::default()).unwrap();
    bytes[reader.entries()[0].data_offset as usize] ^= 1;
    let options = ReadOptions { verify_hash: true, ..ReadOptions::default() };
    let reader = Reader::new(MemorySource::new(bytes, "flat"), options).unwrap();
    let mut buf = vec![0; reader.entries()[0].nbytes() as usize];
    let text = reader.load_into(0, &mut buf).unwrap_err().to_string();
    assert_eq!(text.matches("f32_2x3").count(), 1, "{text}");
}

fn safetensors_bytes() -> Vec<u8> {
    let json = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json);
    out.extend_from_slice(&[0; 8]);
    out
}

#[test]
fn bytes_of_no_format_are_named_so() {
    let source = MemorySource::new(vec![7u8; 300], "random.bin");
    let err = tensorizer_native::convert::sniff(&source).unwrap_err();
    assert_eq!(err.to_string(), "random.bin: not a tensorizer, safetensors or torch.save file");
    // Unknown bytes opened as a tensorizer file keep the reader's message.
    let err = Reader::new(source, ReadOptions::default()).err().unwrap();
    assert!(err.to_string().contains("Not a tensorizer file"), "{err}");
}

#[test]
fn a_refused_safetensors_header_fills_offset_and_location() {
    let mut bytes = safetensors_bytes();
    bytes.truncate(bytes.len() - 4); // data shorter than the header says
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let out = dir.path().join("o.tensors");
    let options = tensorizer_native::convert::ConvertOptions::default();
    let err =
        tensorizer_native::convert::convert(path.to_str().unwrap(), &out, &options, |_, _| Ok(()))
            .unwrap_err();
    assert!(matches!(err, Error::Safetensors { .. }), "{err:?}");
    assert!(err.offset().is_some() && err.location() == Some(path.to_str().unwrap()), "{err:?}");
}

fn wrong_key_reader(bytes: Vec<u8>, key: [u8; 32]) -> Reader<MemorySource> {
    let options =
        ReadOptions { key: Some(KeySource::Key(Key::from_bytes(key))), ..ReadOptions::default() };
    Reader::new(MemorySource::new(bytes, "enc"), options).unwrap()
}

fn load_all(reader: &Reader<MemorySource>) -> Result<(), Error> {
    let mut bufs: Vec<Vec<u8>> =
        reader.entries().iter().map(|e| vec![0; e.nbytes() as usize]).collect();
    reader.load_many(bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect())
}

#[test]
fn a_wrong_key_is_reported_once() {
    let v = vector("v3_enc_key.tensors");
    let reader = wrong_key_reader(std::fs::read(&v.path).unwrap(), [0; 32]);
    let err = load_all(&reader).unwrap_err();
    assert!(matches!(err, Error::WrongKey { .. }) && err.is_verification_failure(), "{err:?}");
    assert_eq!(err.to_string(), "enc: no tensor decrypts: wrong key or passphrase");
    let err = verify_all(&reader, |_| {}).unwrap_err();
    assert!(matches!(err, Error::WrongKey { .. }), "{err:?}");
}

#[test]
fn one_damaged_encrypted_tensor_is_not_a_wrong_key() {
    let v = vector("v3_enc_key.tensors");
    let key = match v.key() {
        Some(KeySource::Key(k)) => k,
        _ => unreachable!("v3_enc_key has a key"),
    };
    let mut bytes = std::fs::read(&v.path).unwrap();
    let plain =
        Reader::new(MemorySource::new(bytes.clone(), "enc"), ReadOptions::default()).unwrap();
    let last = plain.entries().iter().rfind(|e| e.data_length > 0).unwrap().clone();
    bytes[last.data_offset as usize] ^= 1;
    let options = ReadOptions { key: Some(KeySource::Key(key)), ..ReadOptions::default() };
    let reader = Reader::new(MemorySource::new(bytes, "enc"), options).unwrap();
    let err = load_all(&reader).unwrap_err();
    assert!(matches!(err, Error::Tensor { .. }), "{err:?}");
    let checks = verify_all(&reader, |_| {}).unwrap();
    assert_eq!(checks.iter().filter(|c| c.error.is_some()).count(), 1);
}
