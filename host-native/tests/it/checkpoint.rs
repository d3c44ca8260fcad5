//! torch.save checkpoints through the host: every committed vector read over
//! a local file and memory equals the core's in-memory result; open reads
//! little; conversions round-trip; hostile files fail cleanly in `tzr`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tensorizer_core::checkpoint::{Checkpoint, Leaf, TensorView};
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::hash::TensorHasher;
use tensorizer_core::{ElementType, HashValue};
use tensorizer_native::convert::checkpoint::CheckpointReader;
use tensorizer_native::convert::safetensors::flat_name;
use tensorizer_native::source::Counted;
use tensorizer_native::{LocalFile, MemorySource, RangeSource, ReadOptions, Reader, WriteOptions};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/torch")
}

fn manifest() -> Value {
    serde_json::from_slice(&std::fs::read(dir().join("manifest.json")).unwrap()).unwrap()
}

fn good() -> Vec<(String, Value)> {
    manifest()["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["file"].as_str().unwrap().to_string(), v.clone()))
        .collect()
}

fn tzr(args: &[&str]) -> Output {
    Command::new(crate::common::tzr_bin()).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The view's elements row-major, little-endian (an independent, element
/// by element reference).
fn gather(view: &TensorView, data: &[u8], order: ByteOrder) -> Vec<u8> {
    let size = view.dtype.size() as usize;
    let swap = match view.dtype {
        ElementType::Complex32 | ElementType::Complex64 | ElementType::Complex128 => size / 2,
        _ => size,
    };
    let n = view.numel().unwrap() as usize;
    let mut out = Vec::with_capacity(n * size);
    let mut index = vec![0u64; view.shape.len()];
    for _ in 0..n {
        let at = index.iter().zip(&view.stride).map(|(i, s)| i * s).sum::<u64>() as usize * size;
        let mut element = data[at..at + size].to_vec();
        if order == ByteOrder::Big {
            element.chunks_mut(swap).for_each(<[u8]>::reverse);
        }
        out.extend_from_slice(&element);
        for k in (0..index.len()).rev() {
            index[k] += 1;
            if index[k] < view.shape[k] {
                break;
            }
            index[k] = 0;
        }
    }
    out
}

/// Each tensor entry of a parsed checkpoint: (index, flat name, LE bytes).
pub(crate) fn expected(ckpt: &Checkpoint<'_>) -> Vec<(usize, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, e) in ckpt.entries().iter().enumerate() {
        if let Leaf::Tensor(_) = &e.value {
            let (view, data) = ckpt.tensor_bytes(i).unwrap();
            out.push((i, flat_name(&e.path), gather(view, data, ckpt.byte_order())));
        }
    }
    out
}

fn check_reader<S: RangeSource>(
    reader: &CheckpointReader<S>,
    ckpt: &Checkpoint<'_>,
    info: &Value,
    name: &str,
) {
    assert_eq!(reader.state_dict(), &ckpt.state_dict, "{name}");
    assert_eq!(reader.byte_order(), ckpt.byte_order(), "{name}");
    assert_eq!(reader.entries().len(), info["entries"].as_array().unwrap().len(), "{name}");
    for (i, flat, want) in expected(ckpt) {
        let e = &info["entries"][i];
        let view = reader.tensor(i).unwrap();
        assert_eq!(view.dtype.torch_name(), e["dtype"].as_str().unwrap(), "{name} {flat}");
        let n = reader.nbytes(i).unwrap() as usize;
        let mut got = vec![0xAAu8; n];
        reader.read_contiguous(i, &mut got).unwrap();
        assert!(got == want, "{name} {flat}: values differ");
    }
    for (s, _) in reader.storages().iter().enumerate() {
        assert_eq!(reader.storage_range(s).unwrap(), ckpt.storage_ranges[s], "{name} storage {s}");
    }
}

#[test]
fn every_vector_reads_as_the_core_parses_it() {
    for (name, info) in good() {
        let bytes = std::fs::read(dir().join(&name)).unwrap();
        let ckpt = Checkpoint::parse(&bytes).unwrap();
        let local = CheckpointReader::open(dir().join(&name)).unwrap();
        check_reader(&local, &ckpt, &info, &name);
        let memory = CheckpointReader::new(MemorySource::new(bytes.clone(), name.clone())).unwrap();
        check_reader(&memory, &ckpt, &info, &name);
        // Every zip entry's CRC-32 matches.
        let checks = memory.verify(|_| {}).unwrap();
        assert_eq!(checks.len(), ckpt.directory.entries.len());
        assert!(checks.iter().all(|c| c.ok()), "{name}: {checks:?}");
        memory.verify_all().unwrap();
    }
}

#[test]
fn wrong_buffers_non_tensors_and_expanded_views_are_refused() {
    let mut reader = CheckpointReader::open(dir().join("views.pt")).unwrap();
    let expanded = reader.entries().iter().position(|e| e.path.to_string() == "expanded").unwrap();
    assert_eq!(reader.nbytes(expanded).unwrap(), 24);
    assert!(reader.read_contiguous(expanded, &mut [0u8; 23]).is_err());
    reader.set_max_expanded_bytes(16);
    let err = reader.nbytes(expanded).unwrap_err();
    assert!(err.to_string().contains("expanded"), "{err}");
    assert!(reader.read_contiguous(expanded, &mut [0u8; 24]).is_err());
    // Contiguous and strided views are not expansions.
    assert_eq!(reader.nbytes(0).unwrap(), 96);
    let nested = CheckpointReader::open(dir().join("nested.pt")).unwrap();
    let int = nested.entries().iter().position(|e| matches!(e.value, Leaf::Int(_))).unwrap();
    assert!(nested.tensor(int).is_err());
    assert!(nested.read_contiguous(int, &mut []).is_err());
}

// ---- a checkpoint with big tensors, written here --------------------------

fn crc32(data: &[u8]) -> u32 {
    let mut h = TensorHasher::new(&[], true, false);
    h.update(data);
    match h.finish()[0] {
        HashValue::Crc32(c) => c,
        _ => unreachable!(),
    }
}

/// A stored zip (no alignment, no ZIP64) with correct CRCs.
pub(crate) fn zip_of(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let crc = crc32(data);
        let fixed = |sig: u32, out: &mut Vec<u8>| {
            out.extend_from_slice(&sig.to_le_bytes());
        };
        fixed(0x0403_4b50, &mut out);
        for v in [20u16, 0, 0, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        fixed(0x0201_4b50, &mut central);
        for v in [20u16, 20, 0, 0, 0, 0] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        central.extend_from_slice(&crc.to_le_bytes());
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        for v in [name.len() as u16, 0, 0, 0, 0] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        central.extend_from_slice(&0u32.to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    for v in [0u16, 0, entries.len() as u16, entries.len() as u16] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn unicode(out: &mut Vec<u8>, s: &str) {
    out.push(b'X');
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The pickle torch writes for `{name: float32 tensor of numel elements}`.
fn state_dict_pickle(tensors: &[(String, u32)]) -> Vec<u8> {
    let mut p = vec![0x80, 2, b'}', b'('];
    for (key, (name, numel)) in tensors.iter().enumerate() {
        unicode(&mut p, name);
        p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n((");
        unicode(&mut p, "storage");
        p.extend_from_slice(b"ctorch\nFloatStorage\n");
        unicode(&mut p, &key.to_string());
        unicode(&mut p, "cpu");
        p.push(b'J');
        p.extend_from_slice(&numel.to_le_bytes());
        p.extend_from_slice(b"tQK\x00J");
        p.extend_from_slice(&numel.to_le_bytes());
        p.extend_from_slice(b"\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR");
    }
    p.extend_from_slice(b"u.");
    p
}

fn big_checkpoint(tensors: usize, numel: u32) -> Vec<u8> {
    let names: Vec<(String, u32)> =
        (0..tensors).map(|i| (format!("layer.{i}.weight"), numel)).collect();
    let mut entries = vec![("big/data.pkl".to_string(), state_dict_pickle(&names))];
    entries.push(("big/byteorder".into(), b"little".to_vec()));
    for i in 0..tensors {
        let data: Vec<u8> =
            (0..numel).flat_map(|k| ((k as f32) + i as f32).to_le_bytes()).collect();
        entries.push((format!("big/data/{i}"), data));
    }
    entries.push(("big/version".into(), b"3\n".to_vec()));
    zip_of(&entries)
}

#[test]
fn open_and_keys_read_little_of_a_big_checkpoint() {
    // 8 tensors of 8 MiB: 64 MiB of storages.
    let numel = 2 << 20;
    let bytes = big_checkpoint(8, numel);
    let ckpt = Checkpoint::parse(&bytes).unwrap();
    let source = std::sync::Arc::new(Counted::new(MemorySource::new(bytes.clone(), "big.pt")));
    let started = std::time::Instant::now();
    let reader = CheckpointReader::new(std::sync::Arc::clone(&source)).unwrap();
    let keys: Vec<String> = reader.entries().iter().map(|e| e.path.to_string()).collect();
    let open_time = started.elapsed();
    assert_eq!(keys.len(), 8);
    assert_eq!(keys[3], "layer.3.weight");
    let (opened, requests) = (source.bytes(), source.requests());
    assert!(opened < 1 << 20, "open + keys read {opened} bytes");
    assert!(requests <= 5, "{requests} requests: sniff, tail, two records, data.pkl");
    eprintln!("open + keys: {opened} bytes in {requests} requests, {open_time:?}");
    // One tensor: its bytes plus one local header.
    let mut out = vec![0u8; reader.nbytes(5).unwrap() as usize];
    reader.read_contiguous(5, &mut out).unwrap();
    let extra = source.bytes() - opened - out.len() as u64;
    assert!(extra <= 30 + 64 + 128, "{extra} bytes beyond the tensor");
    assert_eq!(out, expected(&ckpt)[5].2);
    assert_eq!(&out[4..8], &6.0f32.to_le_bytes());
    reader.verify_all().unwrap();
    // A flipped byte in a storage fails its CRC (and only that entry).
    let at = ckpt.storage_ranges[2].start as usize + 1000;
    let mut bad = bytes.clone();
    bad[at] ^= 1;
    let reader = CheckpointReader::new(MemorySource::new(bad.clone(), "bad.pt")).unwrap();
    let checks = reader.verify(|_| {}).unwrap();
    let failed: Vec<_> = checks.iter().filter(|c| !c.ok()).map(|c| c.name.as_str()).collect();
    assert_eq!(failed, ["big/data/2"]);
    assert!(reader.verify_all().unwrap_err().is_verification_failure());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.pt");
    std::fs::write(&file, &bad).unwrap();
    assert_eq!(tzr(&["verify", s(&file)]).status.code(), Some(1));
    assert_eq!(tzr(&["verify", s(&dir.path().join("missing.pt"))]).status.code(), Some(3));
}

// ---- conversion --------------------------------------------------------------

/// Reads a safetensors file: name → (dtype, shape, bytes).
fn read_safetensors(path: &Path) -> Vec<(String, String, Vec<u64>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    header
        .into_iter()
        .filter(|(k, _)| k != "__metadata__")
        .map(|(k, v)| {
            let o: Vec<usize> = v["data_offsets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect();
            let shape =
                v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
            (k, v["dtype"].as_str().unwrap().to_string(), shape, data[o[0]..o[1]].to_vec())
        })
        .collect()
}

#[test]
fn every_vector_converts_to_tensorizer_and_safetensors() {
    let dir_out = tempfile::tempdir().unwrap();
    for (name, _) in good() {
        let bytes = std::fs::read(dir().join(&name)).unwrap();
        let ckpt = Checkpoint::parse(&bytes).unwrap();
        let want = expected(&ckpt);
        let reader = CheckpointReader::open(dir().join(&name)).unwrap();
        // Tensorizer, through the library and the CLI.
        let out = dir_out.path().join(format!("{name}.tensors"));
        let done = tensorizer_native::convert::checkpoint_to_tensorizer(
            &reader,
            &out,
            &WriteOptions::default(),
            |_| {},
        )
        .unwrap();
        assert_eq!(done.tensors, want.len(), "{name}");
        let skipped = ckpt.entries().len() - want.len();
        assert_eq!(done.skipped.len(), skipped, "{name}");
        let back = Reader::<LocalFile>::open(
            &out,
            ReadOptions { verify_hash: true, ..Default::default() },
        )
        .unwrap();
        assert_eq!(back.entries().len(), want.len(), "{name}");
        for (k, (i, flat, data)) in want.iter().enumerate() {
            let e = &back.entries()[k];
            let view = reader.tensor(*i).unwrap();
            assert_eq!(flat_name(&e.path), *flat, "{name}");
            assert_eq!(e.shape, view.shape, "{name} {flat}");
            assert_eq!(e.dtype.element(), Some(view.dtype), "{name} {flat}");
            let mut got = vec![0u8; e.nbytes() as usize];
            back.load_into(k, &mut got).unwrap();
            assert!(got == *data, "{name} {flat}: tensorizer values differ");
        }
        let cli_out = dir_out.path().join(format!("{name}.cli.tensors"));
        let run = tzr(&["convert", s(&dir().join(&name)), s(&cli_out)]);
        assert!(run.status.success(), "{name}: {}", String::from_utf8_lossy(&run.stderr));
        assert_eq!(
            std::fs::read(&cli_out).unwrap().len(),
            std::fs::read(&out).unwrap().len(),
            "{name}"
        );
        if skipped > 0 {
            assert!(String::from_utf8_lossy(&run.stderr).contains("not a tensor"), "{name}");
        }
        // safetensors: every dtype it can name.
        let st = dir_out.path().join(format!("{name}.safetensors"));
        let supported = want.iter().all(|(i, _, _)| {
            tensorizer_native::convert::safetensors::safetensors_dtype(
                reader.tensor(*i).unwrap().dtype,
            )
            .is_some()
        });
        let result = tensorizer_native::convert::checkpoint_to_safetensors(&reader, &st, |_| {});
        let run =
            tzr(&["convert", s(&dir().join(&name)), s(&dir_out.path().join("cli.safetensors"))]);
        if !supported {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("safetensors has no dtype"), "{err}");
            assert_eq!(run.status.code(), Some(3), "{name}");
            assert!(!st.exists());
            continue;
        }
        result.unwrap();
        assert!(run.status.success(), "{name}: {}", String::from_utf8_lossy(&run.stderr));
        let mut got = read_safetensors(&st);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want = want.clone();
        want.sort_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(got.len(), want.len(), "{name}");
        for ((gname, _, shape, data), (i, flat, wdata)) in got.iter().zip(&want) {
            assert_eq!(gname, flat, "{name}");
            assert_eq!(shape, &reader.tensor(*i).unwrap().shape, "{name} {flat}");
            assert!(data == wdata, "{name} {flat}: safetensors values differ");
        }
    }
}

// ---- hostile files and the CLI --------------------------------------------

#[test]
fn hostile_vectors_fail_cleanly_with_exit_code_3() {
    let out = tempfile::tempdir().unwrap();
    for h in manifest()["hostile"].as_array().unwrap() {
        let name = h["file"].as_str().unwrap();
        let file = dir().join(name);
        let err = match CheckpointReader::open(&file) {
            Ok(_) => panic!("{name} opened"),
            Err(e) => e,
        };
        let kind = format!("{:?}", err.format_error().unwrap_or_else(|| panic!("{name}: {err}")));
        assert!(kind.starts_with(h["error"].as_str().unwrap()), "{name}: {kind}");
        assert!(err.to_string().contains(name), "{name}: the message names the file: {err}");
        for args in [
            vec!["inspect", s(&file)],
            vec!["inspect", "--json", s(&file)],
            vec!["verify", s(&file)],
            vec!["convert", s(&file), s(&out.path().join("x.tensors"))],
            vec!["convert", s(&file), s(&out.path().join("x.safetensors"))],
        ] {
            let run = tzr(&args);
            let stderr = String::from_utf8_lossy(&run.stderr);
            assert_eq!(run.status.code(), Some(3), "{args:?}: {stderr}");
            assert!(
                stderr.starts_with("tzr: ") && !stderr.contains("panicked"),
                "{args:?}: {stderr}"
            );
        }
        assert!(
            std::fs::read_dir(out.path()).unwrap().next().is_none(),
            "{name}: no output left behind"
        );
    }
    let legacy = tzr(&["inspect", s(&dir().join("hostile_legacy.pt"))]);
    assert!(String::from_utf8_lossy(&legacy.stderr).contains("weights_only=True"));
}

#[test]
fn inspect_shows_views_and_storages() {
    let file = dir().join("views.pt");
    let run = tzr(&["inspect", s(&file)]);
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    assert!(
        text.contains("torch.save checkpoint")
            && text.contains("transposed")
            && text.contains("[1, 6]"),
        "{text}"
    );
    let run = tzr(&["inspect", "--json", s(&file)]);
    let json: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(json["format"], "torch-checkpoint");
    let rows = json["tensors"].as_array().unwrap();
    let column = rows.iter().find(|r| r["name"] == "column").unwrap();
    assert_eq!(column["stride"], serde_json::json!([6]));
    assert_eq!(column["storage_offset"], 2);
    assert_eq!(column["contiguous"], false);
    let tied: Vec<_> =
        rows.iter().filter(|r| r["name"].as_str().unwrap().starts_with("tied_")).collect();
    assert!(tied.iter().all(|r| r["storage"] == tied[0]["storage"]));
    // Nested values and non-tensor leaves.
    let run = tzr(&["inspect", "--json", s(&dir().join("nested.pt"))]);
    let json: Value = serde_json::from_slice(&run.stdout).unwrap();
    let lr =
        json["tensors"].as_array().unwrap().iter().find(|r| r["name"] == "optimizer.lr").unwrap();
    assert_eq!((lr["kind"].as_str(), lr["value"].as_f64()), (Some("float"), Some(0.125)));
    // Verify: every zip entry.
    let run = tzr(&["verify", "--json", s(&dir().join("big_endian.pt"))]);
    assert!(run.status.success());
    let json: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(json["ok"], true);
    assert!(json["zip_entries"].as_u64().unwrap() >= 6);
    // --to must agree with the extension for tensorizer inputs.
    let tensors =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/v2_dtypes.tensors");
    assert_eq!(
        tzr(&["convert", s(&tensors), "/tmp/unused.tensors", "--to", "safetensors"]).status.code(),
        Some(2)
    );
}

/// A checkpoint of `views` float32 tensors, each `numel` elements expanded
/// (stride 0) from the one element of a single 4-byte storage, as
/// `torch.zeros(1).expand(numel)` saves.
fn expanded_checkpoint(views: usize, numel: u32) -> Vec<u8> {
    expanded_checkpoint_of(&vec![numel; views])
}

/// [`expanded_checkpoint`] with a view of each of `numels` elements.
pub(crate) fn expanded_checkpoint_of(numels: &[u32]) -> Vec<u8> {
    let mut p = vec![0x80, 2, b'}', b'('];
    for (i, &numel) in numels.iter().enumerate() {
        unicode(&mut p, &format!("v{i}"));
        p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n((");
        unicode(&mut p, "storage");
        p.extend_from_slice(b"ctorch\nFloatStorage\n");
        unicode(&mut p, "0");
        unicode(&mut p, "cpu");
        p.push(b'J');
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(b"tQK\x00J");
        p.extend_from_slice(&numel.to_le_bytes());
        p.extend_from_slice(b"\x85K\x00\x85\x89ccollections\nOrderedDict\n)RtR");
    }
    p.extend_from_slice(b"u.");
    zip_of(&[
        ("x/data.pkl".into(), p),
        ("x/byteorder".into(), b"little".to_vec()),
        ("x/data/0".into(), 0f32.to_le_bytes().to_vec()),
        ("x/version".into(), b"3\n".to_vec()),
    ])
}

#[test]
fn expanded_views_cannot_blow_a_small_checkpoint_up_on_conversion() {
    use tensorizer_native::convert::{self, ConvertOptions};
    // 64 views of 960 MiB each: 60 GiB from a few KB.
    let bytes = expanded_checkpoint(64, 960 << 18);
    assert!(bytes.len() < 16 << 10, "{}", bytes.len());
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bomb.pt");
    std::fs::write(&input, &bytes).unwrap();
    for out in ["bomb.tensors", "bomb.safetensors"] {
        let dst = dir.path().join(out);
        let started = std::time::Instant::now();
        // Stops at 64 MiB should the bound not hold, instead of filling the disk.
        let guard = |done: u64, _| match done > 64 << 20 {
            true => Err(tensorizer_native::Error::Invalid(format!("{done} bytes written"))),
            false => Ok(()),
        };
        let err = convert::convert(s(&input), &dst, &ConvertOptions::default(), guard).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("max_output_bytes") && text.contains("64424509440"), "{text}");
        assert!(!dst.exists() && started.elapsed().as_secs() < 10, "{out}");
        // tzr says the same, naming its option.
        let o = tzr(&["convert", s(&input), s(&dst)]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && stderr.contains("--max-output-bytes"), "{stderr}");
        assert!(!dst.exists());
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "nothing written");

    // Small expansions stay under the default floor; the option lowers or
    // raises the bound.
    let input = dir.path().join("small.pt");
    std::fs::write(&input, expanded_checkpoint(4, 1 << 18)).unwrap(); // 4 × 1 MiB
    let dst = dir.path().join("small.tensors");
    let done =
        convert::convert(s(&input), &dst, &ConvertOptions::default(), |_, _| Ok(())).unwrap();
    assert_eq!(done.bytes, 4 << 20);
    let tight = ConvertOptions { max_output_bytes: Some((4 << 20) - 1), ..Default::default() };
    let err = convert::convert(s(&input), &dst, &tight, |_, _| Ok(())).unwrap_err();
    assert!(err.to_string().contains("max_output_bytes"), "{err}");
    let exact = ConvertOptions { max_output_bytes: Some(4 << 20), ..Default::default() };
    convert::convert(s(&input), &dst, &exact, |_, _| Ok(())).unwrap();
    let o = tzr(&[
        "convert",
        "--max-output-bytes",
        "1048576",
        s(&input),
        s(&dir.path().join("cli.tensors")),
    ]);
    assert!(!o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let o = tzr(&[
        "convert",
        "--max-output-bytes",
        "4194304",
        s(&input),
        s(&dir.path().join("cli.tensors")),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn the_reader_loads_a_checkpoint_of_contiguous_tensors_as_the_checkpoint_reader_reads_it() {
    for file in ["dtypes.pt", "module.pt", "params.pt"] {
        let path = dir().join(file);
        let reader = Reader::open(&path, ReadOptions::default()).unwrap();
        assert_eq!(reader.layout(), &tensorizer_native::Layout::Torch, "{file}");
        assert!(reader.header().is_none());
        let checkpoint = CheckpointReader::open(&path).unwrap();
        assert_eq!(reader.entries().len(), checkpoint.entries().len(), "{file}");
        let mut bufs: Vec<Vec<u8>> =
            reader.entries().iter().map(|e| vec![0xEE; e.data_length as usize]).collect();
        let jobs = bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect();
        reader.load_many(jobs).unwrap();
        for (i, (entry, got)) in reader.entries().iter().zip(&bufs).enumerate() {
            assert_eq!(entry.path, checkpoint.entries()[i].path, "{file}");
            let mut want = vec![0u8; checkpoint.nbytes(i).unwrap() as usize];
            checkpoint.read_contiguous(i, &mut want).unwrap();
            assert_eq!(got, &want, "{file}: {}", entry.path);
        }
        assert_eq!(reader.tensor_size(), bufs.iter().map(|b| b.len() as u64).sum::<u64>());
    }
}

#[test]
fn the_reader_names_what_it_cannot_load_from_a_checkpoint_and_what_can() {
    for (file, what) in [
        ("views.pt", "tensor \"transposed\" is not contiguous in its storage"),
        ("nested.pt", "\"optimizer.step\" is not a tensor"),
        ("big_endian.pt", "its storages are big-endian"),
    ] {
        let Err(err) = Reader::open(dir().join(file), ReadOptions::default()) else {
            panic!("{file} was loaded");
        };
        assert!(matches!(err, tensorizer_native::Error::Unsupported { .. }), "{file}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(what), "{file}: {message}");
        assert!(message.contains("tzr convert"), "{file}: {message}");
        assert!(!message.contains('\n'), "{file}: {message}");
    }
}
