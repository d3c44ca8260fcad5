//! Cold loads: a local file whose pages are not cached is read around the
//! page cache, straight into buffers placed at the file's phase and through
//! bounce buffers otherwise, and gives the same bytes as a cached load,
//! with encryption and hashes too.

use std::os::fd::AsRawFd;

use tensorizer_core::write::WriterOptions;
use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::read::plan::{Destination, file_phase, plan_load};
use tensorizer_native::{RangeSource, ReadOptions, Reader, WriteOptions, write_file};

/// Drops the file's clean pages from the page cache (what a cold start
/// finds), without root.
pub(crate) fn evict(path: &std::path::Path) {
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: posix_fadvise only reads its arguments; the descriptor is open.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

/// `len` bytes whose address is `phase` past a 4 KiB boundary.
fn placed(storage: &mut Vec<u8>, len: usize, phase: usize) -> &mut [u8] {
    *storage = vec![0xAA; len + 8192];
    let start = storage.as_ptr().align_offset(4096) + phase;
    &mut storage[start..start + len]
}

#[test]
fn a_cold_file_loads_the_same_bytes_around_the_cache() {
    let mut tensors: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for i in 0..24u32 {
        // 1.5 MiB + a few bytes: long enough to be read straight in.
        let n = (3 << 18) + i as usize * 3;
        let data: Vec<u8> = (0..n as u32).flat_map(|v| ((v ^ i) as u16).to_le_bytes()).collect();
        let spec = TensorSpec::state_dict(
            format!("w{i}").as_str(),
            Dtype::from_element(ElementType::BF16),
            vec![n as u64],
        );
        tensors.push((spec, data));
        let small: Vec<u8> = (0..i + 1).map(|v| v as u8).collect();
        tensors.push((
            TensorSpec::state_dict(
                format!("b{i}").as_str(),
                Dtype::from_element(ElementType::U8),
                vec![u64::from(i + 1)],
            ),
            small,
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    for encrypted in [false, true] {
        let path = dir.path().join(format!("c{encrypted}.tensors"));
        let key = tensorizer_core::crypto::Key::from_bytes([9; 32]);
        let options = WriteOptions {
            layout: WriterOptions {
                encryption: encrypted.then_some(None),
                ..WriterOptions::default()
            },
            key: encrypted.then(|| key.clone()),
            num_writers: 2,
        };
        let input: Vec<(TensorSpec, &[u8])> =
            tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
        write_file(&path, &input, &options).unwrap();
        evict(&path);
        let read = ReadOptions {
            num_readers: 2,
            verify_hash: true,
            key: encrypted.then(|| tensorizer_core::KeySource::Key(key.clone())),
        };
        let reader = Reader::open(&path, read).unwrap();
        // Where O_DIRECT is not allowed (tmpfs) the load goes through the
        // cache and must give the same bytes all the same.
        let direct = reader.source().is_cold();
        let entries = reader.entries().to_vec();
        let all: Vec<usize> = (0..entries.len()).collect();
        let plan = plan_load(&entries, &all, Destination::Cpu, false).unwrap();
        assert!(plan.large.is_empty());
        // Every other long tensor at its file phase, the rest at the wrong one.
        let mut storage: Vec<Vec<u8>> = vec![Vec::new(); entries.len()];
        let mut jobs = Vec::new();
        for ((i, e), store) in entries.iter().enumerate().zip(storage.iter_mut()) {
            let phase = match file_phase(e) {
                Some(p) if i % 4 == 0 => p as usize,
                Some(p) => (p as usize + 64) % 4096,
                None => 0,
            };
            jobs.push((i, placed(store, e.nbytes() as usize, phase)));
        }
        reader.load_many(jobs).unwrap();
        for ((i, e), store) in entries.iter().enumerate().zip(&storage) {
            let start = store.as_ptr().align_offset(4096);
            let phase = match file_phase(e) {
                Some(p) if i % 4 == 0 => p as usize,
                Some(p) => (p as usize + 64) % 4096,
                None => 0,
            };
            assert_eq!(
                &store[start + phase..start + phase + e.nbytes() as usize],
                tensors[i].1.as_slice(),
                "{}",
                e.path
            );
        }
        if direct {
            assert!(reader.source().is_cold(), "a load around the cache leaves the file uncached");
        }
        // A damaged byte is still found on a cold load.
        let mut bytes = std::fs::read(&path).unwrap();
        let target = entries[0].data_offset as usize + 5000;
        bytes[target] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        evict(&path);
        let reader = Reader::open(&path, reader.options().clone()).unwrap();
        let mut bufs: Vec<Vec<u8>> =
            reader.entries().iter().map(|e| vec![0; e.nbytes() as usize]).collect();
        let jobs = bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect();
        assert!(reader.load_many(jobs).unwrap_err().to_string().contains("w0"));
    }
}
