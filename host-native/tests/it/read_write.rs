//! Every vector loads through the concurrent reader exactly as the format
//! core loads it; files we write read back; memory maps borrow aligned data.

use tensorizer_core::write::WriterOptions;
use tensorizer_core::{Dtype, ElementType, File, TensorSpec};
use tensorizer_native::source::Counted;
use tensorizer_native::write::FileWriter;
use tensorizer_native::{LocalFile, MemorySource, ReadOptions, Reader, WriteOptions, write_file};

use crate::common::vectors;

fn load_everything<S: tensorizer_native::RangeSource>(reader: &Reader<S>) -> Vec<Vec<u8>> {
    let mut bufs: Vec<Vec<u8>> =
        reader.entries().iter().map(|e| vec![0xAA; e.nbytes() as usize]).collect();
    let jobs = bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect();
    reader.load_many(jobs).unwrap();
    bufs
}

#[test]
fn reader_matches_the_core_for_every_vector() {
    for v in vectors() {
        let bytes = std::fs::read(&v.path).unwrap();
        let file = File::parse(&bytes).unwrap();
        let expected: Vec<Vec<u8>> = (0..file.metadata.entries.len())
            .map(|i| {
                let mut data = file.load(i, v.key().as_ref()).unwrap();
                if data.is_empty() {
                    data = vec![0; file.metadata.entries[i].nbytes() as usize];
                }
                data
            })
            .collect();
        for readers in [1, 4] {
            if v.name().contains("long") {
                continue; // a 4 GiB meta tensor: covered by the core tests
            }
            let options = ReadOptions { num_readers: readers, verify_hash: true, key: v.key() };
            let reader = Reader::open(&v.path, options).unwrap();
            assert_eq!(load_everything(&reader), expected, "{} with {readers} readers", v.name());
        }
    }
}

#[test]
fn large_tensors_are_read_in_parallel_pieces() {
    // 40 MiB of f32 across pieces, plus many small tensors, encrypted and not.
    let big: Vec<u8> = (0..10u32 << 20).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut tensors: Vec<(TensorSpec, Vec<u8>)> = vec![(
        TensorSpec::state_dict("big", Dtype::from_element(ElementType::F32), vec![10 << 20]),
        big,
    )];
    for i in 0..300u32 {
        let data: Vec<u8> = (0..i % 17).flat_map(|v| (v as u16 + i as u16).to_le_bytes()).collect();
        tensors.push((
            TensorSpec::state_dict(
                format!("small.{i}").as_str(),
                Dtype::from_element(ElementType::BF16),
                vec![u64::from(i % 17)],
            ),
            data,
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    for encrypted in [false, true] {
        let path = dir.path().join(format!("m{encrypted}.tensors"));
        let key = tensorizer_core::crypto::Key::from_bytes([7; 32]);
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
        let read = ReadOptions {
            num_readers: 3,
            verify_hash: true,
            key: encrypted.then(|| tensorizer_core::KeySource::Key(key.clone())),
        };
        let reader = Reader::open(&path, read).unwrap();
        let loaded = load_everything(&reader);
        for ((_, data), got) in tensors.iter().zip(&loaded) {
            assert_eq!(data, got);
        }
        for e in reader.entries().iter().filter(|e| e.data_length > 0) {
            assert_eq!(e.data_offset % 64, 0, "aligned by default");
        }
    }
}

#[test]
fn small_tensors_between_large_ones_are_read_once() {
    // Biases between weights: the weights are read on their own, and a
    // batch of biases must not read through them again.
    let mut tensors: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for i in 0..8u8 {
        let f32s = Dtype::from_element(ElementType::F32);
        tensors.push((
            TensorSpec::state_dict(format!("w{i}").as_str(), f32s.clone(), vec![64 << 10]),
            vec![i; 256 << 10],
        ));
        tensors.push((
            TensorSpec::state_dict(format!("b{i}").as_str(), f32s, vec![256]),
            vec![i; 1024],
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.tensors");
    let input: Vec<(TensorSpec, &[u8])> =
        tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
    write_file(&path, &input, &WriteOptions::default()).unwrap();
    let source = Counted::new(LocalFile::open(&path).unwrap());
    let reader =
        Reader::new(source, ReadOptions { num_readers: 2, ..ReadOptions::default() }).unwrap();
    let opened = reader.source().bytes();
    let loaded = load_everything(&reader);
    for ((_, data), got) in tensors.iter().zip(&loaded) {
        assert_eq!(data, got);
    }
    let first = reader.entries()[0].header_offset;
    let rest = std::fs::metadata(&path).unwrap().len() - first;
    assert!(
        reader.source().bytes() - opened <= rest,
        "{} bytes read for {rest}",
        reader.source().bytes() - opened
    );
}

#[test]
fn corruption_is_reported_with_file_and_tensor() {
    let v = vectors().into_iter().find(|v| v.name() == "v1_flat.tensors").unwrap();
    let mut bytes = std::fs::read(&v.path).unwrap();
    let reader =
        Reader::new(MemorySource::new(bytes.clone(), "flat"), ReadOptions::default()).unwrap();
    let target = reader.entries()[0].data_offset as usize;
    bytes[target] ^= 1;
    let options = ReadOptions { verify_hash: true, ..ReadOptions::default() };
    let reader = Reader::new(MemorySource::new(bytes, "flat"), options).unwrap();
    let mut buf = vec![0; reader.entries()[0].nbytes() as usize];
    let err = reader.load_into(0, &mut buf).unwrap_err();
    assert!(err.is_verification_failure(), "{err}");
    let text = err.to_string();
    assert!(text.contains("flat") && text.contains("f32_2x3") && text.contains("CRC32"), "{text}");
    // A wrongly sized buffer is refused before any read.
    assert!(reader.load_into(0, &mut [0u8; 3]).is_err());
}

#[test]
fn streaming_writer_accepts_any_order_and_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.tensors");
    let specs: Vec<TensorSpec> = (0..4)
        .map(|i| {
            TensorSpec::state_dict(
                format!("t{i}").as_str(),
                Dtype::from_element(ElementType::U8),
                vec![5000 + i],
            )
        })
        .collect();
    let writer = FileWriter::create(&path, &specs, &WriteOptions::default()).unwrap();
    for i in [2usize, 0, 3, 1] {
        let mut sink = writer.tensor(i).unwrap();
        let data: Vec<u8> = (0..5000 + i).map(|b| (b % 251) as u8).collect();
        for piece in data.chunks(777) {
            sink.write(piece).unwrap();
        }
        sink.finish().unwrap();
    }
    writer.commit().unwrap();
    let reader =
        Reader::open(&path, ReadOptions { verify_hash: true, ..ReadOptions::default() }).unwrap();
    let loaded = load_everything(&reader);
    for (i, got) in loaded.iter().enumerate() {
        assert_eq!(got.len(), 5000 + i);
        assert!(got.iter().enumerate().all(|(b, &v)| v == (b % 251) as u8));
    }
    // An unfinished file is never committed.
    let writer =
        FileWriter::create(dir.path().join("u.tensors"), &specs, &WriteOptions::default()).unwrap();
    assert!(writer.commit().is_err());
    assert!(!dir.path().join("u.tensors").exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary files left behind");
}

#[test]
fn file_writer_reproduces_every_unencrypted_vector_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    for v in vectors().iter().filter(|v| v.key().is_none()) {
        let bytes = std::fs::read(&v.path).unwrap();
        let reader = Reader::open(&v.path, ReadOptions::default()).unwrap();
        let mut specs = Vec::new();
        let mut data = Vec::new();
        for i in 0..reader.entries().len() {
            specs.push(reader.spec(i).unwrap());
            let mut buf = Vec::new();
            reader
                .stream(i, 1 << 20, true, |p| {
                    buf.extend_from_slice(p);
                    Ok(())
                })
                .unwrap();
            data.push(buf);
        }
        let out = dir.path().join(v.name());
        let options =
            WriteOptions { layout: WriterOptions::tensorizer(), ..WriteOptions::default() };
        let writer = FileWriter::create(&out, &specs, &options).unwrap();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        writer.write_all(&refs, 3).unwrap();
        writer.commit().unwrap();
        assert!(std::fs::read(&out).unwrap() == bytes, "{} differs", v.name());
    }
}

#[test]
fn incremental_appends_build_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inc.tensors");
    let mut writer = FileWriter::open(&path, &WriteOptions::default()).unwrap();
    let a: Vec<u8> = (0..600_000u32).flat_map(|v| v.to_le_bytes()).collect();
    let spec = |n: &str, len: u64| {
        TensorSpec::state_dict(n, Dtype::from_element(ElementType::U32), vec![len])
    };
    writer.append(&[(spec("a", 600_000), a.as_slice())], 2).unwrap();
    writer
        .append(
            &[(spec("b", 2), &[1, 0, 0, 0, 2, 0, 0, 0][..]), (spec("c", 1), &[9, 0, 0, 0][..])],
            2,
        )
        .unwrap();
    // A conflicting name is refused without spoiling the file.
    assert!(writer.append(&[(spec("a", 1), &[0, 0, 0, 0][..])], 2).is_err());
    assert_eq!(writer.version(), 1);
    writer.commit().unwrap();
    let reader =
        Reader::open(&path, ReadOptions { verify_hash: true, ..ReadOptions::default() }).unwrap();
    let loaded = load_everything(&reader);
    assert_eq!(loaded[0], a);
    assert_eq!(loaded[2], vec![9, 0, 0, 0]);
}

#[test]
fn a_refused_write_keeps_the_core_error_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small-index.tensors");
    let mut options = WriteOptions::default();
    options.layout.metadata_len = Some(16);
    let mut writer = FileWriter::open(&path, &options).unwrap();
    let spec = TensorSpec::state_dict(
        "a.long.name.that.does.not.fit",
        Dtype::from_element(ElementType::F32),
        vec![1],
    );
    let err = writer.append(&[(spec, &[0u8; 4][..])], 1).unwrap_err();
    assert!(
        matches!(err.format_error(), Some(tensorizer_core::Error::MetadataOverflow { .. })),
        "{err:?}"
    );
    assert_eq!(err.location(), Some(path.display().to_string().as_str()));
    drop(writer);
    assert!(!path.exists(), "nothing is left where the file would have been");
}
