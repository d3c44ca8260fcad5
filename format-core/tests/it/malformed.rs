//! Truncated and corrupted files end in errors, never panics, and never
//! in silently different tensors.

use tensorizer_core::{Error, File, FileHeader};

use crate::common::{Vector, vectors};

/// How many bytes of one tensor's data are flipped, at most (its first and
/// last byte among them). Each flip decrypts or hashes the whole file
/// again, so this bounds the test's time: 256 made it a core-minute.
const DATA_SAMPLES: usize = 24;

/// Byte ranges worth flipping: the file header, the used part of the
/// index, and every tensor header and its data. Data regions over
/// [`DATA_SAMPLES`] bytes are sampled evenly: every data byte is covered by
/// the same hash or MAC check, so more samples only repeat it.
fn regions(v: &Vector) -> Vec<usize> {
    let file = File::parse(&v.bytes).unwrap();
    let mut offsets: Vec<usize> = (0..FileHeader::LEN).collect();
    let first = file.metadata.entries.first().map_or(v.bytes.len(), |e| e.header_offset as usize);
    let index_end = 73 + v.bytes[73..first].iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
    offsets.extend(73..(index_end + 16).min(first));
    offsets.extend((index_end + 16..first).step_by(4093));
    for e in &file.metadata.entries {
        offsets.extend(e.header_offset as usize..e.data_offset as usize);
        let data = e.data_offset as usize..e.data_end() as usize;
        let step = data.len().div_ceil(DATA_SAMPLES).max(1);
        offsets.extend(data.clone().step_by(step));
        offsets.extend(data.end.saturating_sub(1)..data.end);
    }
    offsets
}

/// Flips that a reader cannot notice because the field is not covered by
/// any hash and the flipped value means the same thing (spec §11): the
/// data version (1 and 2 differ only in what dtypes may appear) and the
/// crypt-info chunk size of a single-chunk tensor.
fn harmless(v: &Vector, offset: usize, loaded: &[Vec<u8>]) -> bool {
    let original = Vector::load_all(&v.bytes, v.key().as_ref()).unwrap();
    let file = File::parse(&v.bytes).unwrap();
    let in_crypt_info = file.metadata.entries.iter().enumerate().any(|(i, e)| {
        let (record, _) = file.tensor(i).unwrap();
        record.layout.crypt_info.is_some_and(|r| {
            (e.header_offset as usize + r.start..e.header_offset as usize + r.end).contains(&offset)
        })
    });
    loaded == original && ((5..9).contains(&offset) || in_crypt_info)
}

#[test]
fn every_byte_flip_is_caught() {
    for v in vectors().iter().filter(|v| v.readable_by_tensorizer()) {
        let key = v.key();
        let mut copy = v.bytes.clone();
        for offset in regions(v) {
            for mask in [0x01u8, 0x80] {
                copy[offset] ^= mask;
                let result = Vector::load_all(&copy, key.as_ref());
                if result.is_ok_and(|loaded| !harmless(v, offset, &loaded)) {
                    panic!("{}: flipping bit {mask:#x} at byte {offset} went unnoticed", v.name);
                }
                copy[offset] ^= mask;
            }
        }
    }
}

#[test]
fn truncation_at_every_offset_is_an_error() {
    for v in vectors() {
        let key = v.key();
        let file = File::parse(&v.bytes).unwrap();
        let last_end = file.metadata.entries.last().map_or(0, |e| e.data_end()) as usize;
        let mut cuts: Vec<usize> = regions(&v).into_iter().filter(|&o| o < last_end).collect();
        cuts.push(last_end - 1);
        for cut in cuts {
            let result = Vector::load_all(&v.bytes[..cut], key.as_ref());
            assert!(
                matches!(result, Err(Error::Truncated { .. } | Error::NotTensorizer)),
                "{}: cut at {cut} gave {result:?}",
                v.name
            );
        }
        // The end marker is optional.
        Vector::load_all(&v.bytes[..last_end], key.as_ref()).unwrap();
    }
}

#[test]
fn wrong_key_is_one_opaque_error() {
    for v in vectors().iter().filter(|v| v.encrypted()) {
        let wrong =
            tensorizer_core::KeySource::Key(tensorizer_core::crypto::Key::from_bytes([0x5a; 32]));
        let result = Vector::load_all(&v.bytes, Some(&wrong));
        assert_eq!(result.unwrap_err(), Error::Decryption, "{}", v.name);
        let none = Vector::load_all(&v.bytes, None);
        assert!(matches!(none, Err(Error::Encryption { .. })), "{}", v.name);
    }
    let plain = vectors().into_iter().find(|v| !v.encrypted()).unwrap();
    let key = tensorizer_core::KeySource::Key(tensorizer_core::crypto::Key::from_bytes([1; 32]));
    assert!(matches!(Vector::load_all(&plain.bytes, Some(&key)), Err(Error::Encryption { .. })));
}
