//! Fingerprints (spec §21): the same weights give the same digest in every
//! format and through every source; each kind of change gives another
//! digest and its `tzr diff` line; hostile files fail cleanly.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tensorizer_core::checkpoint::Checkpoint;
use tensorizer_core::fingerprint::{DataHasher, to_hex};
use tensorizer_core::{
    Dtype, ElementType, Fingerprint, TensorFingerprint, TensorSpec, WriterOptions, write,
};
use tensorizer_native::convert::Format;
use tensorizer_native::convert::checkpoint::CheckpointReader;
use tensorizer_native::convert::fingerprint::{
    FingerprintOptions, fingerprint, fingerprint_source,
};
use tensorizer_native::{MemorySource, ReadOptions, Reader, WriteOptions};

use crate::checkpoint::expected;
use crate::common::{TEST_KEY_HEX, file_with_dtypes_patched, vectors, vectors_dir};

fn tzr(args: &[&str]) -> Output {
    Command::new(crate::common::tzr_bin()).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn fp(path: &Path) -> String {
    fingerprint(s(path), &FingerprintOptions::default(), |_, _| Ok(())).unwrap().fingerprint.hex()
}

fn torch_dir() -> std::path::PathBuf {
    vectors_dir().join("torch")
}

fn torch_vectors() -> Vec<String> {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(torch_dir().join("manifest.json")).unwrap()).unwrap();
    manifest["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["file"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn checkpoints_hash_their_views_as_contiguous_little_endian_bytes() {
    // The reference: the test's own element-by-element gather of every
    // view (transposed, strided, offset, expanded, big-endian), hashed.
    for name in torch_vectors() {
        let bytes = std::fs::read(torch_dir().join(&name)).unwrap();
        let ckpt = Checkpoint::parse(&bytes).unwrap();
        let records = expected(&ckpt)
            .into_iter()
            .map(|(i, flat, data)| {
                let tensorizer_core::checkpoint::Leaf::Tensor(view) = &ckpt.entries()[i].value
                else {
                    unreachable!()
                };
                let mut h = DataHasher::new();
                h.update(&data);
                TensorFingerprint {
                    name: flat,
                    dtype: view.dtype,
                    shape: view.shape.clone(),
                    data: Some(h.finish()),
                }
            })
            .collect();
        let want = Fingerprint::new(records).unwrap();
        let got =
            fingerprint(s(&torch_dir().join(&name)), &FingerprintOptions::default(), |_, _| Ok(()))
                .unwrap();
        assert_eq!(got.format, Format::TorchCheckpoint);
        assert_eq!(got.fingerprint, want, "{name}");
        // One thread or many, the same.
        let one = FingerprintOptions { num_threads: 1, ..Default::default() };
        let again = fingerprint_source(MemorySource::new(bytes, name.clone()), &one, |_, _| Ok(()))
            .unwrap();
        assert_eq!(again.fingerprint, want, "{name}");
    }
}

#[test]
fn every_format_gives_the_same_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    for name in torch_vectors() {
        let src = torch_dir().join(&name);
        let want = fp(&src);
        let reader = CheckpointReader::open(&src).unwrap();
        let tz = dir.path().join(format!("{name}.tensors"));
        tensorizer_native::convert::checkpoint_to_tensorizer(
            &reader,
            &tz,
            &WriteOptions::default(),
            |_| {},
        )
        .unwrap();
        assert_eq!(fp(&tz), want, "{name} as tensorizer");
        let st = dir.path().join(format!("{name}.safetensors"));
        // safetensors cannot name every dtype (dtypes.pt holds them all).
        if tensorizer_native::convert::checkpoint_to_safetensors(&reader, &st, |_| {}).is_ok() {
            assert_eq!(fp(&st), want, "{name} as safetensors");
        }
    }
    // Tensorizer vectors (structured names, opaque dtypes, meta tensors,
    // long dims) and their safetensors conversions.
    for v in vectors().iter().filter(|v| v.key().is_none()) {
        let want = fp(&v.path);
        let reader = Reader::open(&v.path, ReadOptions::default()).unwrap();
        let st = dir.path().join(format!("{}.safetensors", v.name()));
        if tensorizer_native::convert::tensorizer_to_safetensors(&reader, &st, |_| {}).is_ok() {
            assert_eq!(fp(&st), want, "{}", v.name());
        }
    }
}

#[test]
fn encrypted_files_fingerprint_as_their_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key.hex");
    std::fs::write(&key_file, TEST_KEY_HEX).unwrap();
    for v in vectors().iter().filter(|v| v.key().is_some()) {
        let options = FingerprintOptions { key: v.key(), num_threads: 0 };
        let got = fingerprint(s(&v.path), &options, |_, _| Ok(())).unwrap();
        let plain = dir.path().join(v.name());
        let reader =
            Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap();
        tensorizer_native::convert::write(
            tensorizer_native::convert::Input::Tensorizer(&reader),
            &plain,
            Format::Tensorizer,
            &WriteOptions::default(),
            |_, _| Ok(()),
        )
        .unwrap();
        assert_eq!(got.fingerprint.hex(), fp(&plain), "{}", v.name());
    }
    // The CLI takes the key options of the other commands, and asks for one.
    let enc = vectors_dir().join("v3_enc_key.tensors");
    let run = tzr(&["fingerprint", s(&enc), "--key-file", s(&key_file)]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(
        String::from_utf8_lossy(&run.stdout)
            .starts_with(&fp(&dir.path().join("v3_enc_key.tensors")))
    );
    let run = tzr(&["fingerprint", s(&enc)]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--key-file"));
}

#[test]
fn big_endian_tensorizer_data_hashes_as_little_endian() {
    let f: Vec<f32> = vec![1.5, -2.25, 1e-3];
    let c: Vec<f32> = vec![0.5, -4.0];
    let specs = [
        TensorSpec::state_dict("f", Dtype::from_element(ElementType::F32), vec![3]),
        TensorSpec::state_dict("c", Dtype::from_element(ElementType::Complex64), vec![1]),
    ];
    let le = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let be = |v: &[f32]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
    let little =
        write::to_vec(&specs, &[&le(&f), &le(&c)], &WriterOptions::default(), None, || [0; 24])
            .unwrap();
    let patches: [(&[u8], &[u8]); 2] = [(b"<f4", b">f4"), (b"<c8", b">c8")];
    let big = file_with_dtypes_patched(&specs, &[&be(&f), &be(&c)], &patches);
    let of = |bytes: Vec<u8>| {
        fingerprint_source(MemorySource::new(bytes, "m"), &FingerprintOptions::default(), |_, _| {
            Ok(())
        })
        .unwrap()
        .fingerprint
    };
    assert_eq!(of(big), of(little));
}

/// A tensor: (name, dtype, shape, data).
type Tensor<'a> = (&'a str, ElementType, Vec<u64>, Vec<u8>);

/// A tensorizer file of `tensors`.
fn file(dir: &Path, file_name: &str, tensors: &[Tensor<'_>]) -> std::path::PathBuf {
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|(n, d, shape, _)| TensorSpec::state_dict(*n, Dtype::from_element(*d), shape.clone()))
        .collect();
    let data: Vec<&[u8]> = tensors.iter().map(|t| t.3.as_slice()).collect();
    let bytes = write::to_vec(&specs, &data, &WriterOptions::default(), None, || [0; 24]).unwrap();
    let path = dir.join(file_name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn each_change_gives_another_fingerprint_and_its_diff_line() {
    use ElementType::{BF16, F32, I64};
    let dir = tempfile::tempdir().unwrap();
    let w: Vec<u8> = (0..24u8).collect();
    let b: Vec<u8> = vec![7; 16];
    let base = vec![("layer.w", F32, vec![2, 3], w.clone()), ("layer.b", I64, vec![2], b.clone())];
    let a = file(dir.path(), "a.tensors", &base);
    let mut one = w.clone();
    one[5] ^= 1;
    let cases: Vec<(&str, Vec<Tensor<'_>>, &str)> = vec![
        ("same", base.clone(), ""),
        (
            "element",
            vec![("layer.w", F32, vec![2, 3], one), base[1].clone()],
            "changed  layer.w  data",
        ),
        (
            "dtype",
            vec![("layer.w", BF16, vec![2, 6], w.clone()), base[1].clone()],
            "changed  layer.w  dtype float32 -> bfloat16, shape [2, 3] -> [2, 6]",
        ),
        (
            "rename",
            vec![("layer.weight", F32, vec![2, 3], w.clone()), base[1].clone()],
            "renamed  layer.w -> layer.weight  float32 [2, 3]",
        ),
        (
            "reshape",
            vec![("layer.w", F32, vec![3, 2], w.clone()), base[1].clone()],
            "changed  layer.w  shape [2, 3] -> [3, 2]",
        ),
        (
            "added",
            [base.clone(), vec![("extra", F32, vec![], vec![0; 4])]].concat(),
            "added    extra  float32 []",
        ),
        ("removed", vec![base[0].clone()], "removed  layer.b  int64 [2]"),
    ];
    let fa = fp(&a);
    for (name, tensors, line) in cases {
        let b = file(dir.path(), &format!("{name}.tensors"), &tensors);
        let run = tzr(&["diff", s(&a), s(&b)]);
        let stdout = String::from_utf8_lossy(&run.stdout);
        if line.is_empty() {
            assert_eq!(fp(&b), fa, "{name}");
            assert_eq!(run.status.code(), Some(0), "{name}: {stdout}");
            assert!(stdout.contains("hold the same 2 tensors"), "{name}: {stdout}");
            continue;
        }
        assert_ne!(fp(&b), fa, "{name}");
        assert_eq!(run.status.code(), Some(1), "{name}: {stdout}");
        assert_eq!(stdout.lines().next(), Some(line), "{name}: {stdout}");
        let json = tzr(&["diff", "--json", s(&a), s(&b)]);
        assert_eq!(json.status.code(), Some(1));
        let report: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(report["same"], false);
        assert_eq!(report["changes"].as_array().unwrap().len(), 1, "{name}: {report}");
        assert_eq!(report["changes"][0]["change"], line.split(' ').next().unwrap(), "{name}");
    }
}

#[test]
fn fingerprint_json_lists_every_record() {
    let file = vectors_dir().join("v4_meta.tensors");
    let run = tzr(&["fingerprint", "--json", s(&file)]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["algorithm"], "tzr-fingerprint-v1");
    assert_eq!(report["fingerprint"], fp(&file));
    let tensors = report["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), report["tensor_count"].as_u64().unwrap() as usize);
    let names: Vec<&str> = tensors.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    // Meta tensors have no data digest; the others have 64 hex digits.
    assert!(tensors.iter().any(|t| t["sha256"].is_null()));
    assert!(
        tensors.iter().filter(|t| !t["sha256"].is_null()).all(|t| t["sha256"]
            .as_str()
            .unwrap()
            .len()
            == 64)
    );
    let text = tzr(&["fingerprint", s(&file)]);
    assert_eq!(String::from_utf8_lossy(&text.stdout), format!("{}  {}\n", fp(&file), s(&file)));
    // An empty data digest is SHA-256 of no bytes.
    let empty = to_hex(&DataHasher::new().finish());
    assert_eq!(empty, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

#[test]
fn hostile_files_fail_with_one_line_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let good = vectors_dir().join("v1_flat.tensors");
    let bytes = std::fs::read(&good).unwrap();
    let mut hostile: Vec<std::path::PathBuf> = Vec::new();
    for (name, content) in [
        ("empty.tensors", Vec::new()),
        ("truncated.tensors", bytes[..bytes.len() - 100].to_vec()),
        ("garbage.safetensors", b"\x10\0\0\0\0\0\0\0{\"a\":{\"dtype\":".to_vec()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        hostile.push(path);
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(torch_dir().join("manifest.json")).unwrap()).unwrap();
    hostile.extend(
        manifest["hostile"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| torch_dir().join(h["file"].as_str().unwrap())),
    );
    hostile.push(dir.path().join("missing.tensors"));
    for h in &hostile {
        for (args, code) in [
            (vec!["diff", s(h), s(&good)], 2),
            (vec!["diff", "--json", s(&good), s(h)], 2),
            (vec!["fingerprint", s(h)], 3),
            (vec!["fingerprint", "--json", s(h)], 3),
        ] {
            let run = tzr(&args);
            let stderr = String::from_utf8_lossy(&run.stderr);
            assert_eq!(run.status.code(), Some(code), "{args:?}: {stderr}");
            assert!(
                stderr.starts_with("tzr: ") && stderr.lines().count() == 1,
                "{args:?}: {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
            // Under --json the failure is one object on stdout; otherwise nothing.
            if args.contains(&"--json") {
                let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
                assert_eq!(json["ok"], false, "{args:?}");
            } else {
                assert!(run.stdout.is_empty(), "{args:?}: {stderr}");
            }
        }
    }
}

#[test]
fn remote_sources_give_the_local_fingerprint() {
    let Some(server) = crate::servers::Nginx::serve(&torch_dir()) else {
        eprintln!("skipped: no nginx");
        return;
    };
    for name in ["views.pt", "big_endian.pt"] {
        let url = server.url(name);
        let got = fingerprint(&url, &FingerprintOptions::default(), |_, _| Ok(())).unwrap();
        assert_eq!(got.fingerprint.hex(), fp(&torch_dir().join(name)), "{name}");
        let run = tzr(&["fingerprint", &url]);
        assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    }
}

#[test]
fn many_paths_and_directories_fingerprint_every_model_file() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("nested");
    std::fs::create_dir(&sub).unwrap();
    let flat = vectors_dir().join("v1_flat.tensors");
    // Named for what it is not: files are chosen by content.
    std::fs::copy(&flat, sub.join("weights.txt")).unwrap();
    std::fs::copy(torch_dir().join("dtypes.pt"), dir.path().join("a.bin")).unwrap();
    std::fs::write(dir.path().join("README.md"), b"# not a model").unwrap();
    let missing = dir.path().join("missing.tensors");
    let (a, w) = (dir.path().join("a.bin"), sub.join("weights.txt"));
    // Text: one line per model file, sorted; the README is left out.
    let run = tzr(&["fingerprint", s(dir.path())]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let want = format!("{}  {}\n{}  {}\n", fp(&a), s(&a), fp(&w), s(&w));
    assert_eq!(String::from_utf8_lossy(&run.stdout), want);
    // JSON covers every file, a failure included; the worst status wins.
    let run = tzr(&["fingerprint", "--json", s(dir.path()), s(&flat), s(&missing)]);
    assert_eq!(run.status.code(), Some(3), "{}", String::from_utf8_lossy(&run.stderr));
    let doc: Value = serde_json::from_slice(&run.stdout).unwrap();
    let files = doc["files"].as_array().unwrap();
    let shown: Vec<_> = files.iter().map(|f| f["file"].as_str().unwrap()).collect();
    assert_eq!(shown, [s(&a), s(&w), s(&flat), s(&missing)]);
    assert_eq!(files[2]["fingerprint"], fp(&flat));
    assert_eq!((&files[3]["ok"], &files[3]["exit_code"]), (&Value::from(false), &Value::from(3)));
    assert_eq!(doc["ok"], false);
    // A named file that is no model is fingerprinted (and fails) as before.
    let run = tzr(&["fingerprint", s(&dir.path().join("README.md")), s(&flat)]);
    assert_eq!(run.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&run.stdout), format!("{}  {}\n", fp(&flat), s(&flat)));
}
