//! torch.save zip checkpoints: the committed vectors written by torch 2.15
//! match their manifest; hostile files, bombs and truncations end in typed
//! errors, quickly.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tensorizer_core::checkpoint::{
    CentralDirectory, Checkpoint, EndRecord, Leaf, Pickle, TensorView, sniff, zip,
};
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::{ElementType, Error, PathComponent};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/torch")
}

fn manifest() -> Value {
    serde_json::from_slice(&std::fs::read(dir().join("manifest.json")).unwrap()).unwrap()
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The view's elements gathered row-major into little-endian bytes.
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

fn components(path: &Value) -> Vec<PathComponent> {
    path.as_array()
        .unwrap()
        .iter()
        .map(|c| match c {
            Value::String(s) => PathComponent::Key(s.clone()),
            Value::Number(n) => PathComponent::Index(n.as_u64().unwrap()),
            other => panic!("bad component {other}"),
        })
        .collect()
}

fn dims(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect()
}

#[test]
fn every_vector_matches_its_manifest() {
    let m = manifest();
    let vectors = m["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 6);
    let mut dtypes_seen = std::collections::BTreeSet::new();
    for v in vectors {
        let name = v["file"].as_str().unwrap();
        let bytes = read(name);
        let ckpt = Checkpoint::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ckpt.archive.prefix, v["prefix"].as_str().unwrap(), "{name}");
        let order = if v["byteorder"] == "big" { ByteOrder::Big } else { ByteOrder::Little };
        assert_eq!(ckpt.byte_order(), order, "{name}");
        assert_eq!(ckpt.records.version, Some(3), "{name}");
        let expected = v["entries"].as_array().unwrap();
        assert_eq!(ckpt.entries().len(), expected.len(), "{name}");
        for (i, (entry, e)) in ckpt.entries().iter().zip(expected).enumerate() {
            let ctx = format!("{name} entry {i} {}", entry.path);
            assert_eq!(entry.path.components(), components(&e["path"]), "{ctx}");
            match (&entry.value, e["kind"].as_str().unwrap()) {
                (Leaf::Tensor(view), "tensor") => {
                    assert_eq!(view.dtype.torch_name(), e["dtype"].as_str().unwrap(), "{ctx}");
                    dtypes_seen.insert(view.dtype.torch_name());
                    assert_eq!(view.shape, dims(&e["shape"]), "{ctx}");
                    assert_eq!(view.stride, dims(&e["stride"]), "{ctx}");
                    assert_eq!(view.storage_offset, e["storage_offset"].as_u64().unwrap(), "{ctx}");
                    assert_eq!(view.requires_grad, e["requires_grad"].as_bool().unwrap(), "{ctx}");
                    let (same, data) =
                        ckpt.tensor_bytes(i).unwrap_or_else(|err| panic!("{ctx}: {err}"));
                    assert_eq!(same, view);
                    let le = gather(view, data, order);
                    assert_eq!(
                        hex::encode(Sha256::digest(&le)),
                        e["sha256"].as_str().unwrap(),
                        "{ctx}"
                    );
                    let first = e["shares_storage_with"].as_u64().unwrap() as usize;
                    let Leaf::Tensor(owner) = &ckpt.entries()[first].value else { panic!("{ctx}") };
                    assert_eq!(owner.storage, view.storage, "{ctx}: storage sharing");
                }
                (Leaf::Int(x), "int") => {
                    assert_eq!(*x, i128::from(e["value"].as_i64().unwrap()), "{ctx}")
                }
                (Leaf::Float(x), "float") => assert_eq!(*x, e["value"].as_f64().unwrap(), "{ctx}"),
                (Leaf::Str(x), "str") => assert_eq!(x, e["value"].as_str().unwrap(), "{ctx}"),
                (Leaf::Bool(x), "bool") => assert_eq!(*x, e["value"].as_bool().unwrap(), "{ctx}"),
                (Leaf::None, "none") => {}
                (got, want) => panic!("{ctx}: got {got:?}, manifest says {want}"),
            }
        }
        // Tied entries share a storage; every storage is distinct otherwise.
        let firsts: std::collections::BTreeSet<u64> =
            expected.iter().filter_map(|e| e["shares_storage_with"].as_u64()).collect();
        assert_eq!(ckpt.state_dict.storages.len(), firsts.len(), "{name}");
    }
    for t in
        ["float8_e4m3fn", "float4_e2m1fn_x2", "complex32", "uint64", "bool", "bfloat16", "bits1x8"]
    {
        assert!(dtypes_seen.contains(t), "{t} not covered");
    }
}

#[test]
fn hostile_vectors_end_in_their_typed_error() {
    for h in manifest()["hostile"].as_array().unwrap() {
        let name = h["file"].as_str().unwrap();
        let bytes = read(name);
        let start = Instant::now();
        let err = Checkpoint::parse(&bytes).expect_err(name);
        assert!(start.elapsed() < Duration::from_secs(1), "{name} took {:?}", start.elapsed());
        let kind = format!("{err:?}");
        assert!(kind.starts_with(h["error"].as_str().unwrap()), "{name}: {err:?}");
        if let Error::ForbiddenGlobal { module, name: global, .. } = &err
            && let Some(m) = h["module"].as_str()
        {
            assert_eq!(module, m, "{name}");
            assert_eq!(global, h["name"].as_str().unwrap(), "{name}");
        }
        assert!(!err.to_string().is_empty());
    }
}

#[test]
fn legacy_error_says_how_to_convert() {
    let err = Checkpoint::parse(&read("hostile_legacy.pt")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("legacy") && text.contains("torch.save("), "{text}");
    assert!(text.contains("_use_new_zipfile_serialization=False"), "{text}");
}

#[test]
fn every_truncation_and_byte_flip_is_an_error_or_harmless() {
    let bytes = read("views.pt");
    let start = Instant::now();
    for len in 0..bytes.len() {
        assert!(Checkpoint::parse(&bytes[..len]).is_err(), "prefix of {len} bytes parsed");
    }
    let mut flipped = bytes.clone();
    for i in 0..flipped.len() {
        flipped[i] ^= 0xA5;
        let _ = Checkpoint::parse(&flipped);
        flipped[i] ^= 0xA5;
    }
    assert!(start.elapsed() < Duration::from_secs(30), "{:?}", start.elapsed());
}

#[test]
fn range_steps_give_the_same_result_as_parse() {
    let bytes = read("module.pt");
    let len = bytes.len() as u64;
    sniff(&bytes[..512]).unwrap();
    let tail_at = zip::tail_start(len);
    let end = EndRecord::find(&bytes[tail_at as usize..], tail_at, len).unwrap();
    let z64 = end.zip64_range().expect("torch always writes a ZIP64 end record");
    let location = end.directory(Some(&bytes[z64.start as usize..z64.end as usize])).unwrap();
    let cd = CentralDirectory::parse(
        &bytes[location.range().start as usize..location.range().end as usize],
        &location,
    )
    .unwrap();
    let archive = tensorizer_core::checkpoint::Archive::locate(&cd).unwrap();
    assert_eq!(archive.prefix, "module");
    let entry = &cd.entries[archive.pickle];
    let at = entry.header_offset as usize;
    let header_len = entry.local_header_len(&bytes[at..at + 30]).unwrap() as usize;
    let data = entry.data_range(&bytes[at..at + header_len]).unwrap();
    assert_eq!(data.start % 64, 0, "torch aligns entry data to 64 bytes");
    let pickle = Pickle::parse(&bytes[data.start as usize..data.end as usize], data.start).unwrap();
    assert_eq!(pickle.protocol, 2);
    let sd = tensorizer_core::StateDict::from_pickle(&pickle).unwrap();
    assert_eq!(sd, Checkpoint::parse(&bytes).unwrap().state_dict);
}

// ---- crafted archives and pickles ------------------------------------------

/// A minimal stored ZIP writer (no alignment, no ZIP64).
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let crc = 0u32;
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        central.extend_from_slice(&crc.to_le_bytes());
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        central.extend_from_slice(&(name.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 12]);
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn with_pickle(pkl: &[u8]) -> Vec<u8> {
    zip_of(&[("archive/data.pkl", pkl), ("archive/version", b"3\n")])
}

fn parse_timed(bytes: &[u8]) -> Error {
    let start = Instant::now();
    let err = Checkpoint::parse(bytes).expect_err("hostile input parsed");
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}: {err}", start.elapsed());
    err
}

fn limit(err: &Error, what: &str) {
    assert!(matches!(err, Error::LimitExceeded { what: w, .. } if w.contains(what)), "{err:?}");
}

/// `PROTO 2`, `EMPTY_DICT`, `X 'k'`, `body` (which pushes one value), SETITEM, STOP.
fn dict_with(body: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, 2, b'}', b'X', 1, 0, 0, 0, b'k'];
    p.extend_from_slice(body);
    p.extend_from_slice(b"s.");
    p
}

#[test]
fn a_crafted_plain_archive_parses() {
    let bytes = with_pickle(&dict_with(b"K\x05"));
    let ckpt = Checkpoint::parse(&bytes).unwrap();
    assert_eq!(ckpt.entries().len(), 1);
    assert_eq!(ckpt.entries()[0].value, Leaf::Int(5));
    assert_eq!(ckpt.byte_order(), ByteOrder::Little);
}

#[test]
fn forbidden_globals_are_refused_when_named() {
    for (module, name) in [
        ("os", "system"),
        ("builtins", "eval"),
        ("torch", "load"),
        ("torch._utils", "_rebuild_qtensor"),
    ] {
        let body = format!("c{module}\n{name}\n");
        let err = parse_timed(&with_pickle(&dict_with(body.as_bytes())));
        assert_eq!(
            err,
            Error::ForbiddenGlobal {
                offset: err_offset(&err),
                module: module.into(),
                name: name.into()
            }
        );
    }
    // STACK_GLOBAL (protocol 4) goes through the same allow-list.
    let err = parse_timed(&with_pickle(&dict_with(b"\x8c\x02os\x8c\x06system\x93")));
    assert!(matches!(err, Error::ForbiddenGlobal { ref module, .. } if module == "os"), "{err:?}");
}

fn err_offset(err: &Error) -> u64 {
    match err {
        Error::ForbiddenGlobal { offset, .. } => *offset,
        _ => panic!("{err:?}"),
    }
}

#[test]
fn memo_bombs_are_bounded() {
    // More memo entries than the limit.
    let mut body = b"N".to_vec();
    for i in 0..=(1u32 << 20) {
        body.push(b'r');
        body.extend_from_slice(&i.to_le_bytes());
    }
    limit(&parse_timed(&with_pickle(&dict_with(&body))), "memo");
    // A memo index that was never defined, and one far above any count.
    let err = parse_timed(&with_pickle(&dict_with(b"j\xff\xff\xff\xff")));
    assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
    // Billion laughs: 40 levels of lists each holding the previous one 10 times.
    let mut body = b"]q\x000".to_vec();
    for level in 1..=40u8 {
        body.extend_from_slice(b"](");
        for _ in 0..10 {
            body.extend_from_slice(&[b'h', level - 1]);
        }
        body.extend_from_slice(&[b'e', b'q', level, b'0']);
    }
    body.extend_from_slice(&[b'h', 40]);
    // Whichever bound is reached first: values visited, or the path
    // components copied for the entries and containers met on the way.
    let err = parse_timed(&with_pickle(&dict_with(&body)));
    assert!(
        matches!(&err, Error::LimitExceeded { what, .. } if what.contains("visited") || what.contains("path components")),
        "{err:?}"
    );
}

#[test]
fn nesting_bombs_are_bounded() {
    // 100,000 open MARKs.
    let body = vec![b'('; 100_000];
    limit(&parse_timed(&with_pickle(&dict_with(&body))), "nesting");
    // 100,000 nested lists, built without marks.
    let mut body = vec![b']'; 100_000];
    body.extend(std::iter::repeat_n(b'a', 99_999));
    limit(&parse_timed(&with_pickle(&dict_with(&body))), "depth");
    // A list that contains itself.
    limit(&parse_timed(&with_pickle(&dict_with(b"]q\x00h\x00a"))), "depth");
}

#[test]
fn lying_lengths_and_unknown_opcodes_are_errors() {
    type Check = fn(&Error) -> bool;
    let cases: &[(&[u8], Check)] = &[
        (b"X\xff\xff\xff\xff", |e| matches!(e, Error::Truncated { .. })),
        (b"\x8d\xff\xff\xff\xff\xff\xff\xff\xff", |e| matches!(e, Error::Truncated { .. })),
        (b"B\xff\xff\xff\x7f", |e| matches!(e, Error::Truncated { .. })),
        (b"\x8a\x11\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11", |e| {
            matches!(e, Error::LimitExceeded { .. })
        }),
        (b"\x8b\xff\xff\xff\xff", |e| matches!(e, Error::LimitExceeded { .. })),
        (b"I1\n", |e| matches!(e, Error::UnsupportedOpcode { opcode: b'I', .. })),
        (b"cos\nsystem", |e| matches!(e, Error::Truncated { .. })),
        (b"X\x02\x00\x00\x00\xff\xfe", |e| matches!(e, Error::Malformed { .. })),
        (b"t", |e| matches!(e, Error::Malformed { .. })),
    ];
    for (body, ok) in cases {
        let err = parse_timed(&with_pickle(&dict_with(body)));
        assert!(ok(&err), "{body:?}: {err:?}");
    }
    let err = parse_timed(&with_pickle(b"\x80\x06}."));
    assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
    // A persistent id of the wrong shape.
    let err = parse_timed(&with_pickle(&dict_with(b"(X\x07\x00\x00\x00storagetQ")));
    assert!(
        matches!(err, Error::Malformed { reason, .. } if reason.contains("5-tuple")),
        "{err:?}"
    );
    // The root must be a container.
    let err = parse_timed(&with_pickle(b"\x80\x02K\x01."));
    assert!(matches!(err, Error::CorruptCheckpoint { .. }), "{err:?}");
}

#[test]
fn zip_structure_lies_are_errors() {
    let pkl = dict_with(b"K\x01");
    // Duplicate names.
    let err = parse_timed(&zip_of(&[("archive/data.pkl", &pkl), ("archive/data.pkl", &pkl)]));
    assert!(
        matches!(err, Error::Malformed { reason, .. } if reason.contains("duplicate")),
        "{err:?}"
    );
    // No data.pkl; entries outside any folder.
    assert!(matches!(
        parse_timed(&zip_of(&[("archive/x", b"1")])),
        Error::CorruptCheckpoint { .. }
    ));
    assert!(matches!(parse_timed(&zip_of(&[("data.pkl", &pkl)])), Error::CorruptCheckpoint { .. }));
    // Local name differs from the central name.
    let mut bytes = with_pickle(&pkl);
    bytes[30] = b'A';
    let err = parse_timed(&bytes);
    assert!(
        matches!(err, Error::Malformed { reason, .. } if reason.contains("local file name")),
        "{err:?}"
    );
    // Two central records pointing at one local header overlap.
    let good = with_pickle(&pkl);
    let cd = u32::from_le_bytes(good[good.len() - 6..good.len() - 2].try_into().unwrap()) as usize;
    let second = cd + 46 + "archive/data.pkl".len();
    let mut bytes = good.clone();
    bytes[second + 42..second + 46].copy_from_slice(&0u32.to_le_bytes());
    let err = parse_timed(&bytes);
    assert!(
        matches!(err, Error::Malformed { reason, .. } if reason.contains("overlap")),
        "{err:?}"
    );
    // The end record declares more entries than the directory holds.
    let mut bytes = good.clone();
    let n = bytes.len();
    bytes[n - 12..n - 10].copy_from_slice(&3u16.to_le_bytes());
    bytes[n - 14..n - 12].copy_from_slice(&3u16.to_le_bytes());
    assert!(Checkpoint::parse(&bytes).is_err());
    // Bytes before the archive, and a comment holding a fake end record.
    let mut prefixed = b"junk".to_vec();
    prefixed.extend_from_slice(&good);
    assert!(matches!(parse_timed(&prefixed), Error::NotZip { .. }));
    let mut commented = good.clone();
    let n = commented.len();
    commented[n - 2..].copy_from_slice(&22u16.to_le_bytes());
    commented.extend_from_slice(&good[n - 22..]);
    // The fake record (the whole comment) is consistent with the end of the
    // file, so it is the one found; its directory does not end where it
    // starts, and the ambiguous archive is refused.
    assert!(matches!(parse_timed(&commented), Error::Malformed { .. }));
    // Not a zip at all.
    assert!(matches!(parse_timed(b"|TZR|"), Error::NotZip { .. }));
    assert!(matches!(parse_timed(b""), Error::NotZip { .. }));
}

#[test]
fn storage_records_and_byte_order_are_checked() {
    let pkl = dict_with(b"K\x01");
    let bad_order = zip_of(&[("a/data.pkl", &pkl), ("a/byteorder", b"middle")]);
    assert!(matches!(parse_timed(&bad_order), Error::Malformed { .. }));
    let bad_version = zip_of(&[("a/data.pkl", &pkl), ("a/version", b"99\n")]);
    assert!(matches!(parse_timed(&bad_version), Error::Malformed { .. }));
    let big = zip_of(&[("a/data.pkl", &pkl), ("a/byteorder", b"big"), (".data/version", b"1")]);
    let ckpt = Checkpoint::parse(&big).unwrap();
    assert_eq!(ckpt.byte_order(), ByteOrder::Big);
    assert_eq!(ckpt.archive.prefix, "a");
}

#[test]
fn memoized_values_passed_again_and_again_are_bounded() {
    // A 100,000-item tuple, memoized, then REDUCEd 100,000 times.
    let mut body = b"(".to_vec();
    body.extend(std::iter::repeat_n(b'N', 100_000));
    body.extend_from_slice(b"tq\x00\x30ccollections\nOrderedDict\nq\x01");
    for _ in 0..100_000 {
        body.extend_from_slice(b"h\x01h\x00R0");
    }
    body.extend_from_slice(b"N");
    let err = parse_timed(&with_pickle(&dict_with(&body)));
    assert!(
        matches!(err, Error::Malformed { reason, .. } if reason.contains("arguments")),
        "{err:?}"
    );
    // torch.Size of a huge tuple.
    let mut body = b"ctorch\nSize\n((".to_vec();
    body.extend(std::iter::repeat_n(b'K', 1000).flat_map(|k| [k, 1]));
    body.extend_from_slice(b"ttR");
    limit(&parse_timed(&with_pickle(&dict_with(&body))), "dimensions");
    // A 1 MiB key, in a dict referenced 10,000 times: the copies are bounded.
    let mut body = b"}q\x00X\x00\x00\x10\x00".to_vec();
    body.extend(std::iter::repeat_n(b'x', 1 << 20));
    body.extend_from_slice(b"K\x01s0](");
    for _ in 0..10_000 {
        body.extend_from_slice(b"h\x00");
    }
    body.extend_from_slice(b"e");
    limit(&parse_timed(&with_pickle(&dict_with(&body))), "copied");
}

#[test]
fn a_storage_without_its_entry_is_corrupt() {
    let bytes = read("views.pt");
    let ckpt = Checkpoint::parse(&bytes).unwrap();
    let pkl = &ckpt.directory.entries[ckpt.archive.pickle];
    let at = pkl.header_offset as usize;
    let range = pkl.data_range(&bytes[at..]).unwrap();
    let data = &bytes[range.start as usize..range.end as usize];
    let err = parse_timed(&zip_of(&[("archive/data.pkl", data), ("archive/version", b"3\n")]));
    assert!(
        matches!(err, Error::CorruptCheckpoint { reason, .. } if reason.contains("no data/")),
        "{err:?}"
    );
}

#[test]
fn containers_are_recorded_in_order_with_their_kinds() {
    use tensorizer_core::checkpoint::ContainerKind;
    // {"a": [5], "b": (), "c": 7}
    let mut p = vec![0x80, 2, b'}'];
    p.extend_from_slice(b"X\x01\x00\x00\x00a]K\x05as");
    p.extend_from_slice(b"X\x01\x00\x00\x00b)s");
    p.extend_from_slice(b"X\x01\x00\x00\x00cK\x07s.");
    let bytes = with_pickle(&p);
    let ckpt = Checkpoint::parse(&bytes).expect("parses");
    let sd = &ckpt.state_dict;
    let kinds: Vec<(String, ContainerKind, usize, usize)> = sd
        .containers
        .iter()
        .map(|c| (c.path.to_string(), c.kind, c.len, c.entries_before))
        .collect();
    assert_eq!(
        kinds,
        vec![("a".into(), ContainerKind::List, 1, 0), ("b".into(), ContainerKind::Tuple, 0, 1)]
    );
    let leaves: Vec<(String, Leaf)> =
        sd.entries.iter().map(|e| (e.path.to_string(), e.value.clone())).collect();
    assert_eq!(leaves.len(), 2);
    assert_eq!(leaves[0].1, Leaf::Int(5));
    assert_eq!(leaves[1], ("c".into(), Leaf::Int(7)));
}

/// `good` with its end record replaced by a ZIP64 end record, its
/// locator, and a classic record pointing to them (sentinel fields), the
/// ZIP64 record declaring `entries` entries.
fn with_zip64_entries(good: &[u8], entries: u64) -> Vec<u8> {
    let n = good.len();
    let field = |at: usize| u32::from_le_bytes(good[n - at..n - at + 4].try_into().unwrap()) as u64;
    let (cd_size, cd_offset) = (field(10), field(6));
    let mut out = good[..n - 22].to_vec();
    let z64_at = out.len() as u64;
    out.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
    out.extend_from_slice(&44u64.to_le_bytes());
    out.extend_from_slice(&[45, 0, 45, 0]);
    out.extend_from_slice(&[0; 8]);
    for v in [entries, entries, cd_size, cd_offset] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&z64_at.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&[0xff; 4]);
    out.extend_from_slice(&(cd_size as u32).to_le_bytes());
    out.extend_from_slice(&(cd_offset as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn exceeded(err: &Error, what: &str, limit: u64) {
    let ok = matches!(err, Error::LimitExceeded { what: w, value, limit: l, .. }
        if w.contains(what) && *l == limit && *value == limit + 1);
    assert!(ok, "{what}: {err:?}");
}

#[test]
fn every_checkpoint_limit_exceeded_by_one_is_a_typed_refusal() {
    use tensorizer_core::layout::{
        MAX_CHECKPOINT_RECORD_LEN, MAX_PICKLE_CONTAINER_LEN, MAX_PICKLE_DEPTH,
        MAX_PICKLE_LONG_BYTES, MAX_PICKLE_OPCODES, MAX_TORCH_ARCHIVE_VERSION,
        MAX_ZIP_CENTRAL_DIRECTORY_LEN, MAX_ZIP_ENTRIES,
    };
    let pkl = dict_with(b"K\x01");
    let good = with_pickle(&pkl);
    // Entries and directory length are claims: refused before any is read.
    exceeded(
        &parse_timed(&with_zip64_entries(&good, MAX_ZIP_ENTRIES + 1)),
        "zip entry count",
        MAX_ZIP_ENTRIES,
    );
    let mut bytes = good.clone();
    let n = bytes.len();
    bytes[n - 10..n - 6].copy_from_slice(&(MAX_ZIP_CENTRAL_DIRECTORY_LEN as u32 + 1).to_le_bytes());
    exceeded(&parse_timed(&bytes), "central directory length", MAX_ZIP_CENTRAL_DIRECTORY_LEN);
    // A record one byte too long, and an archive version one too new.
    let long = vec![b'3'; MAX_CHECKPOINT_RECORD_LEN as usize + 1];
    let err = parse_timed(&zip_of(&[("a/data.pkl", &pkl), ("a/version", &long)]));
    exceeded(&err, "checkpoint record length", MAX_CHECKPOINT_RECORD_LEN);
    let newer = (MAX_TORCH_ARCHIVE_VERSION + 1).to_string();
    let err = parse_timed(&zip_of(&[("a/data.pkl", &pkl), ("a/version", newer.as_bytes())]));
    assert!(
        matches!(err, Error::Malformed { reason: "unsupported torch archive version", .. }),
        "{err:?}"
    );
    // The pickle: an integer one byte too long; one opcode too many (the
    // dict's own five, then pairs of NONE and POP); one value too many on
    // the stack; one MARK too deep.
    let mut body = vec![0x8a, MAX_PICKLE_LONG_BYTES as u8 + 1];
    body.extend(std::iter::repeat_n(1, MAX_PICKLE_LONG_BYTES as usize + 1));
    exceeded(
        &parse_timed(&with_pickle(&dict_with(&body))),
        "pickle integer length",
        MAX_PICKLE_LONG_BYTES,
    );
    let mut body = b"N".to_vec();
    body.extend(std::iter::repeat_n(*b"0N", (MAX_PICKLE_OPCODES as usize - 4) / 2).flatten());
    exceeded(
        &parse_timed(&with_pickle(&dict_with(&body))),
        "pickle opcode count",
        MAX_PICKLE_OPCODES,
    );
    let body = vec![b'N'; MAX_PICKLE_CONTAINER_LEN as usize];
    exceeded(
        &parse_timed(&with_pickle(&dict_with(&body))),
        "pickle stack length",
        MAX_PICKLE_CONTAINER_LEN,
    );
    let body = vec![b'('; MAX_PICKLE_DEPTH + 1];
    let err = parse_timed(&with_pickle(&dict_with(&body)));
    assert!(
        matches!(err, Error::LimitExceeded { limit, .. } if limit == MAX_PICKLE_DEPTH as u64),
        "{err:?}"
    );
}
