//! tensorizer ↔ safetensors round trips.

use tensorizer_native::convert::safetensors::flat_name;
use tensorizer_native::convert::{safetensors_to_tensorizer, tensorizer_to_safetensors};
use tensorizer_native::{ReadOptions, Reader, WriteOptions};

use crate::common::vectors;

#[test]
fn vectors_survive_a_round_trip_through_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let mut converted = 0;
    for v in vectors() {
        let reader =
            Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap();
        let st = dir.path().join(format!("{}.safetensors", v.name()));
        if tensorizer_to_safetensors(&reader, &st, |_| {}).is_err() {
            // Meta tensors, or dtypes safetensors lacks: refused, and nothing is left behind.
            assert!(!st.exists());
            continue;
        }
        converted += 1;
        let back = dir.path().join(format!("{}.back.tensors", v.name()));
        safetensors_to_tensorizer(&st, &back, &WriteOptions::default(), |_| {}).unwrap();
        let again =
            Reader::open(&back, ReadOptions { verify_hash: true, ..ReadOptions::default() })
                .unwrap();
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
        [
            &48u64.to_le_bytes()[..],
            br#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,99]}}"#.as_slice(),
        ]
        .concat(),
    ];
    for (n, bytes) in cases.iter().enumerate() {
        let input = dir.path().join(format!("bad{n}.safetensors"));
        std::fs::write(&input, bytes).unwrap();
        let out = dir.path().join(format!("bad{n}.tensors"));
        assert!(
            safetensors_to_tensorizer(&input, &out, &WriteOptions::default(), |_| {}).is_err(),
            "case {n}"
        );
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
    tensorizer_to_safetensors(&reader, &st, |_| {}).unwrap();
    let raw = std::fs::read(&st).unwrap();
    let data = &raw[8 + u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize..];
    let le: Vec<f32> = data.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(le, [1.5, -2.25, 1e-3, 0.5, -4.0]);
    // Back in tensorizer form the values are the same, stored little-endian.
    let back = dir.path().join("back.tensors");
    safetensors_to_tensorizer(&st, &back, &WriteOptions::default(), |_| {}).unwrap();
    let again =
        Reader::open(&back, ReadOptions { verify_hash: true, ..ReadOptions::default() }).unwrap();
    assert_eq!(again.entries()[0].dtype.as_str(), "<f4");
    let mut out = vec![0; 12];
    again.load_into(0, &mut out).unwrap();
    assert_eq!(out, [1.5f32, -2.25, 1e-3].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
}

/// A safetensors file from its raw header JSON and data.
fn safetensors_bytes(json: &[u8], data: &[u8]) -> Vec<u8> {
    [&(json.len() as u64).to_le_bytes()[..], json, data].concat()
}

#[test]
fn a_safetensors_header_with_a_repeated_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let json =
        br#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
    let input = dir.path().join("dup.safetensors");
    std::fs::write(&input, safetensors_bytes(json, &[7, 9])).unwrap();
    let out = dir.path().join("dup.tensors");
    let err =
        safetensors_to_tensorizer(&input, &out, &WriteOptions::default(), |_| {}).unwrap_err();
    assert!(err.to_string().contains("\"w\" appears more than once in the header"), "{err}");
    assert!(!out.exists());
}

#[test]
fn an_empty_tensor_listed_after_a_full_one_at_its_offset_is_read() {
    // Both start at 0; safetensors orders by (start, end), whatever the
    // header's order. Found by `written_read`.
    let dir = tempfile::tempdir().unwrap();
    let json =
        br#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#;
    let input = dir.path().join("empty.safetensors");
    std::fs::write(&input, safetensors_bytes(json, &[7, 9])).unwrap();
    let out = dir.path().join("empty.tensors");
    safetensors_to_tensorizer(&input, &out, &WriteOptions::default(), |_| {}).unwrap();
    let reader =
        Reader::open(&out, ReadOptions { verify_hash: true, ..ReadOptions::default() }).unwrap();
    let names: Vec<String> = reader.entries().iter().map(|e| e.path.to_string()).collect();
    assert_eq!(names, ["b", "a"]);
}

// ---- tensorizer_native::convert: any input to either output -----------------

mod library {
    use std::path::{Path, PathBuf};

    use tensorizer_native::convert::checkpoint::CheckpointReader;
    use tensorizer_native::convert::{self, ConvertOptions, Format};
    use tensorizer_native::{Error, ReadOptions, Reader, WriteOptions};

    use crate::common::vectors_dir;

    fn torch(name: &str) -> PathBuf {
        vectors_dir().join("torch").join(name)
    }

    fn s(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    fn threads(n: usize) -> ConvertOptions {
        ConvertOptions {
            write: WriteOptions { num_writers: n, ..WriteOptions::default() },
            ..Default::default()
        }
    }

    /// Every tensor of a tensorizer file, verified, by flat name.
    fn tensorizer_tensors(path: &Path) -> Vec<(String, Vec<u8>)> {
        let r = Reader::open(path, ReadOptions { verify_hash: true, ..ReadOptions::default() })
            .unwrap();
        (0..r.entries().len())
            .map(|i| {
                let mut out = vec![0; r.entries()[i].nbytes() as usize];
                r.load_into(i, &mut out).unwrap();
                (tensorizer_native::convert::safetensors::flat_name(&r.entries()[i].path), out)
            })
            .collect()
    }

    #[test]
    fn checkpoints_convert_the_same_on_any_number_of_threads() {
        let dir = tempfile::tempdir().unwrap();
        for name in
            ["views.pt", "big_endian.pt", "module.pt", "nested.pt", "params.pt", "dtypes.pt"]
        {
            let reader = CheckpointReader::open(torch(name)).unwrap();
            let mut want = Vec::new();
            for (i, e) in reader.entries().iter().enumerate() {
                if let Ok(n) = reader.nbytes(i) {
                    let mut out = vec![0; n as usize];
                    reader.read_contiguous(i, &mut out).unwrap();
                    want.push((tensorizer_native::convert::safetensors::flat_name(&e.path), out));
                }
            }
            let one = dir.path().join(format!("{name}.1.tensors"));
            let four = dir.path().join(format!("{name}.4.tensors"));
            let mut reports = Vec::new();
            let done = convert::convert(s(&torch(name)), &one, &threads(1), |d, t| {
                reports.push((d, t));
                Ok(())
            })
            .unwrap();
            convert::convert(s(&torch(name)), &four, &threads(4), |_, _| Ok(())).unwrap();
            assert_eq!(
                (done.from, done.to, done.tensors),
                (Format::TorchCheckpoint, Format::Tensorizer, want.len())
            );
            assert_eq!(
                reports.last().copied(),
                Some((done.bytes, done.bytes)),
                "{name}: a final report"
            );
            assert!(
                std::fs::read(&one).unwrap() == std::fs::read(&four).unwrap(),
                "{name}: bytes depend on threads"
            );
            assert_eq!(tensorizer_tensors(&one), want, "{name}");
            // safetensors, where it can name every dtype; then back to tensorizer.
            let st = dir.path().join(format!("{name}.safetensors"));
            match convert::convert(s(&torch(name)), &st, &threads(3), |_, _| Ok(())) {
                Ok(done) => assert_eq!(done.to, Format::Safetensors),
                Err(e) => {
                    assert!(e.to_string().contains("safetensors has no dtype"), "{name}: {e}");
                    assert!(!st.exists());
                    continue;
                }
            }
            let back = dir.path().join(format!("{name}.back.tensors"));
            let done = convert::convert(s(&st), &back, &threads(2), |_, _| Ok(())).unwrap();
            assert_eq!((done.from, done.to), (Format::Safetensors, Format::Tensorizer));
            let mut got = tensorizer_tensors(&back);
            got.sort();
            let mut sorted = want.clone();
            sorted.sort();
            assert_eq!(got, sorted, "{name}: through safetensors");
        }
    }

    #[test]
    fn inputs_are_recognised_by_their_first_bytes_not_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let pt = dir.path().join("model.safetensors");
        std::fs::copy(torch("views.pt"), &pt).unwrap();
        // Output names do not lie: their extension names the format written.
        let tensors = dir.path().join("model.tensors");
        let done =
            convert::convert(s(&pt), &tensors, &ConvertOptions::default(), |_, _| Ok(())).unwrap();
        assert_eq!((done.from, done.to), (Format::TorchCheckpoint, Format::Tensorizer));
        let st = dir.path().join("model.weights");
        let options = ConvertOptions { to: Some(Format::Safetensors), ..Default::default() };
        let done = convert::convert(s(&tensors), &st, &options, |_, _| Ok(())).unwrap();
        assert_eq!((done.from, done.to), (Format::Tensorizer, Format::Safetensors));
        let again = dir.path().join("again.tensors");
        let done =
            convert::convert(s(&st), &again, &ConvertOptions::default(), |_, _| Ok(())).unwrap();
        assert_eq!((done.from, done.to), (Format::Safetensors, Format::Tensorizer));
        // Writing a checkpoint is refused, naming what can be written.
        let options = ConvertOptions { to: Some(Format::TorchCheckpoint), ..Default::default() };
        let err = convert::convert(s(&st), &dir.path().join("x.pt"), &options, |_, _| Ok(()))
            .unwrap_err();
        assert!(err.to_string().contains("cannot write torch.save checkpoints"), "{err}");
        // So is a name that says torch.save, or contradicts `to`.
        let err = convert::convert(
            s(&st),
            &dir.path().join("x.pt"),
            &ConvertOptions::default(),
            |_, _| Ok(()),
        );
        assert!(err.unwrap_err().to_string().contains("cannot write torch.save checkpoints"));
        let options = ConvertOptions { to: Some(Format::Safetensors), ..Default::default() };
        let err = convert::convert(s(&st), &dir.path().join("x.tensors"), &options, |_, _| Ok(()))
            .unwrap_err();
        assert!(err.to_string().contains("contradicts the name"), "{err}");
    }

    /// A safetensors file holding one F32 tensor `[1.0, 2.0]`, its JSON
    /// header padded with spaces to `n` bytes as the safetensors library
    /// pads (to a multiple of 8).
    fn padded_safetensors(n: usize) -> Vec<u8> {
        let json = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        assert!(n >= json.len());
        let mut out = (n as u64).to_le_bytes().to_vec();
        out.extend_from_slice(json);
        out.resize(8 + n, b' ');
        out.extend_from_slice(&[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);
        out
    }

    #[test]
    fn a_safetensors_file_starting_with_0x80_is_not_taken_for_a_pickle() {
        // A header length ≡ 128 (mod 256) makes byte 0 0x80, a pickle's
        // PROTO opcode: about one safetensors file in 32.
        let dir = tempfile::tempdir().unwrap();
        for (n, name) in [(128, "a.safetensors"), (384, "b.safetensors"), (640, "c.bin")] {
            let input = dir.path().join(name);
            std::fs::write(&input, padded_safetensors(n)).unwrap();
            assert_eq!(std::fs::read(&input).unwrap()[0], 0x80);
            let out = dir.path().join(format!("{name}.tensors"));
            let done = convert::convert(s(&input), &out, &ConvertOptions::default(), |_, _| Ok(()))
                .unwrap();
            assert_eq!((done.from, done.tensors), (Format::Safetensors, 1), "{name}");
            let got = tensorizer_tensors(&out);
            assert_eq!(
                got,
                vec![("w".to_string(), vec![0, 0, 0x80, 0x3f, 0, 0, 0, 0x40])],
                "{name}"
            );
        }
    }

    proptest::proptest! {
        /// Every header length, whatever its first byte, is safetensors.
        #[test]
        fn every_safetensors_header_length_is_recognised(pad in 0usize..2048) {
            let bytes = padded_safetensors(55 + pad);
            let source = tensorizer_native::MemorySource::new(bytes, "model.bin");
            proptest::prop_assert_eq!(convert::sniff(&source).unwrap(), Format::Safetensors);
        }
    }

    #[test]
    fn more_tensors_than_a_reader_accepts_are_refused_before_writing() {
        use tensorizer_core::layout::MAX_TENSORS;
        let n = MAX_TENSORS + 1;
        let mut json = String::from("{");
        for i in 0..n {
            json.push_str(&format!(r#""t{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}},"#));
        }
        json.pop();
        json.push('}');
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("many.safetensors");
        std::fs::write(&input, super::safetensors_bytes(json.as_bytes(), &[])).unwrap();
        drop(json);
        let out = dir.path().join("many.tensors");
        let err = convert::convert(s(&input), &out, &ConvertOptions::default(), |_, _| Ok(()))
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("MAX_TENSORS") && text.contains(&n.to_string()), "{text}");
        assert!(!out.exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "nothing written beside the input"
        );
    }

    #[test]
    fn a_failed_conversion_leaves_an_existing_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        // A name without a format of its own: `to` says which.
        let dst = dir.path().join("out.weights");
        std::fs::write(&dst, b"old").unwrap();
        let listing = || {
            let mut names: Vec<_> =
                std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            names.sort();
            names
        };
        let before = listing();
        // A dtype safetensors lacks: refused before anything is written.
        let options = ConvertOptions { to: Some(Format::Safetensors), ..Default::default() };
        let err =
            convert::convert(s(&torch("dtypes.pt")), &dst, &options, |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("safetensors has no dtype"), "{err}");
        // Stopped by the progress callback once tensors are being written.
        for to in [Format::Tensorizer, Format::Safetensors] {
            let options = ConvertOptions { to: Some(to), ..threads(2) };
            let err = convert::convert(s(&torch("views.pt")), &dst, &options, |_, _| {
                Err(Error::Invalid("stopped by the caller".into()))
            })
            .unwrap_err();
            assert!(err.to_string().contains("stopped by the caller"), "{err}");
        }
        // A source that is not there.
        let missing = dir.path().join("missing.pt");
        let options = ConvertOptions { to: Some(Format::Tensorizer), ..Default::default() };
        let err = convert::convert(s(&missing), &dst, &options, |_, _| Ok(())).unwrap_err();
        assert!(err.store_kind().is_some(), "{err}");
        assert_eq!(std::fs::read(&dst).unwrap(), b"old");
        assert_eq!(listing(), before, "no temporary file is left behind");
    }

    #[test]
    fn encrypted_tensorizer_inputs_need_their_key() {
        let v = crate::common::vectors()
            .into_iter()
            .find(|v| v.name() == "v3_enc_key.tensors")
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("plain.tensors");
        let st = dir.path().join("plain.safetensors");
        assert!(
            convert::convert(s(&v.path), &st, &ConvertOptions::default(), |_, _| Ok(())).is_err()
        );
        assert!(!st.exists());
        let options = ConvertOptions { key: v.key(), ..Default::default() };
        convert::convert(s(&v.path), &st, &options, |_, _| Ok(())).unwrap();
        convert::convert(s(&st), &dst, &ConvertOptions::default(), |_, _| Ok(())).unwrap();
        let r = Reader::open(
            &v.path,
            ReadOptions { key: v.key(), verify_hash: true, ..ReadOptions::default() },
        )
        .unwrap();
        let want: Vec<(String, Vec<u8>)> = (0..r.entries().len())
            .map(|i| {
                let mut out = vec![0; r.entries()[i].nbytes() as usize];
                r.load_into(i, &mut out).unwrap();
                (tensorizer_native::convert::safetensors::flat_name(&r.entries()[i].path), out)
            })
            .collect();
        let mut got = tensorizer_tensors(&dst);
        got.sort();
        let mut want = want;
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn sources_over_http_convert_like_local_files() {
        let Some(server) = crate::servers::Nginx::serve(&vectors_dir()) else {
            eprintln!("skipped: no nginx");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        for (file, out) in [
            ("torch/views.pt", "a.tensors"),
            ("torch/module.pt", "b.safetensors"),
            ("v1_module.tensors", "c.safetensors"),
        ] {
            let local = dir.path().join(format!("local-{out}"));
            let remote = dir.path().join(format!("remote-{out}"));
            convert::convert(s(&vectors_dir().join(file)), &local, &threads(2), |_, _| Ok(()))
                .unwrap();
            let done =
                convert::convert(&server.url(file), &remote, &threads(2), |_, _| Ok(())).unwrap();
            assert!(done.tensors > 0);
            assert!(std::fs::read(&local).unwrap() == std::fs::read(&remote).unwrap(), "{file}");
        }
    }

    #[test]
    fn sources_in_s3_convert_like_local_files() {
        let Some(moto) = crate::s3::Moto::start() else {
            eprintln!("skipped: no moto_server");
            return;
        };
        moto.create_bucket("models");
        let options = moto.options(moto.port);
        let dir = tempfile::tempdir().unwrap();
        for (file, out) in [("torch/views.pt", "a.safetensors"), ("torch/params.pt", "b.tensors")] {
            let uri = format!("s3://models/{file}");
            tensorizer_native::store::s3::upload(&vectors_dir().join(file), &uri, &options)
                .unwrap();
            let local = dir.path().join(format!("local-{out}"));
            let remote = dir.path().join(format!("remote-{out}"));
            convert::convert(s(&vectors_dir().join(file)), &local, &threads(2), |_, _| Ok(()))
                .unwrap();
            let source = tensorizer_native::store::s3::open(&uri, &options).unwrap();
            convert::convert_source(source, &remote, &threads(2), |_, _| Ok(())).unwrap();
            assert!(std::fs::read(&local).unwrap() == std::fs::read(&remote).unwrap(), "{file}");
        }
    }
}
