//! A model stored as shards (a folder, an `*.index.json`) as one model in
//! `tzr convert`, `fingerprint`, `diff` and `inspect` (spec §26.5): the
//! same answers as for the same tensors in one file, and the shards
//! checked against the index with one-line errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::safetensors_read::safetensors;

type Tensor = (&'static str, &'static str, Vec<u64>, Vec<u8>);

fn tzr(args: &[&str]) -> Output {
    Command::new(crate::common::tzr_bin()).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stdout(run: &Output) -> String {
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    String::from_utf8_lossy(&run.stdout).into_owned()
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed)).collect()
}

/// Two shards' tensors.
fn halves() -> (Vec<Tensor>, Vec<Tensor>) {
    let first = vec![
        ("embed.weight", "BF16", vec![16, 8], data(256, 1)),
        ("layers.0.w", "F32", vec![4, 4], data(64, 2)),
    ];
    let second = vec![
        ("layers.1.w", "F32", vec![4, 4], data(64, 3)),
        ("lm_head.weight", "F16", vec![3, 5], data(30, 4)),
        ("empty", "I64", vec![0], Vec::new()),
    ];
    (first, second)
}

/// `dir` holding the two shards and, with `index`, an index mapping each
/// tensor to its shard (and `extra` more entries).
fn folder(dir: &Path, index: bool, extra: &[(&str, &str)]) -> PathBuf {
    let (first, second) = halves();
    let names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    std::fs::create_dir_all(dir).unwrap();
    let mut map = serde_json::Map::new();
    for (name, tensors) in names.iter().zip([&first, &second]) {
        std::fs::write(dir.join(name), safetensors(tensors, "{\"format\":\"pt\"}")).unwrap();
        for t in tensors {
            map.insert(t.0.into(), Value::from(*name));
        }
    }
    for (t, shard) in extra {
        map.insert((*t).into(), Value::from(*shard));
    }
    if index {
        let doc = serde_json::json!({"metadata": {"total_size": 414}, "weight_map": map});
        std::fs::write(dir.join("model.safetensors.index.json"), doc.to_string()).unwrap();
    }
    dir.to_path_buf()
}

/// The same tensors in one file, in another order.
fn one_file(dir: &Path) -> PathBuf {
    let (first, second) = halves();
    let mut all: Vec<Tensor> = second.into_iter().chain(first).collect();
    all.reverse();
    let path = dir.join("one.safetensors");
    std::fs::write(&path, safetensors(&all, "{}")).unwrap();
    path
}

fn hex(run: &Output) -> String {
    stdout(run).split_whitespace().next().unwrap().to_string()
}

#[test]
fn a_folder_fingerprints_diffs_and_converts_as_its_tensors_in_one_file() {
    let tmp = tempfile::tempdir().unwrap();
    let model = folder(&tmp.path().join("model"), true, &[]);
    let bare = folder(&tmp.path().join("bare"), false, &[]);
    let file = one_file(tmp.path());
    let index = model.join("model.safetensors.index.json");
    let want = hex(&tzr(&["fingerprint", s(&file)]));
    for location in [&model, &index, &bare] {
        let run = tzr(&["fingerprint", s(location)]);
        assert_eq!(stdout(&run), format!("{want}  {}\n", s(location)), "{}", s(location));
    }
    let run = tzr(&["diff", s(&model), s(&file)]);
    assert!(stdout(&run).contains("hold the same 5 tensors"), "{}", stdout(&run));
    for out in ["out.tensors", "out.safetensors"] {
        let out = tmp.path().join(out);
        stdout(&tzr(&["convert", s(&model), s(&out)]));
        assert_eq!(hex(&tzr(&["fingerprint", s(&out)])), want, "{}", s(&out));
    }
    // Python's fingerprint and convert take the same path (one native
    // function each); the library call gives the same digest.
    let opts = tensorizer_native::convert::fingerprint::FingerprintOptions::default();
    let got = tensorizer_native::convert::fingerprint::fingerprint(s(&bare), &opts, |_, _| Ok(()));
    assert_eq!(got.unwrap().fingerprint.hex(), want);
}

#[test]
fn inspecting_a_folder_lists_its_shards_and_totals() {
    let tmp = tempfile::tempdir().unwrap();
    let model = folder(&tmp.path().join("model"), true, &[]);
    let text = stdout(&tzr(&["inspect", s(&model)]));
    assert!(text.contains("2 shards, index "), "{text}");
    assert!(text.contains("5 tensors, 414 B of data"), "{text}");
    assert!(text.contains("model-00002-of-00002.safetensors"), "{text}");
    let doc: Value =
        serde_json::from_str(&stdout(&tzr(&["inspect", "--json", s(&model)]))).unwrap();
    assert_eq!(doc["totals"]["shards"], 2);
    assert_eq!(doc["totals"]["tensors"], 5);
    assert_eq!(doc["totals"]["data_bytes"], 414);
    assert_eq!(doc["by_dtype"]["float32"]["tensors"], 2);
    let shards = doc["shards"].as_array().unwrap();
    assert_eq!(
        (shards[0]["tensors"].as_u64(), shards[1]["data_bytes"].as_u64()),
        (Some(2), Some(94))
    );
    assert_eq!(shards[0]["format"], "safetensors");
}

#[test]
fn an_index_that_disagrees_with_its_shards_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let second = "model-00002-of-00002.safetensors";
    let cases = [
        ("absent", ("ghost.weight", second), "IDX-005"),
        ("missing", ("more.weight", "model-00003-of-00003.safetensors"), "IDX-003"),
    ];
    for (name, extra, rule) in cases {
        let model = folder(&tmp.path().join(name), true, &[extra]);
        let out = tmp.path().join(format!("{name}.tensors"));
        for args in [
            vec!["convert", s(&model), s(&out)],
            vec!["fingerprint", s(&model)],
            vec!["inspect", s(&model)],
            vec!["diff", s(&model), s(&model)],
        ] {
            let run = tzr(&args);
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(matches!(run.status.code(), Some(2 | 3)), "{args:?}: {err}");
            assert!(err.contains(rule) && err.trim().lines().count() == 1, "{args:?}: {err}");
        }
        assert!(!out.exists(), "{name}: nothing is written");
    }
    // Without an index, a tensor in two shards is refused.
    let twice = folder(&tmp.path().join("twice"), false, &[]);
    let (first, _) = halves();
    std::fs::write(twice.join("z.safetensors"), safetensors(&first[..1], "{}")).unwrap();
    let run = tzr(&["fingerprint", s(&twice)]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("\"embed.weight\" is in two shards"), "{err}");
}

#[test]
fn a_store_prefix_lists_as_one_model_and_http_asks_for_the_index() {
    let run = tzr(&["fingerprint", "http://127.0.0.1:9/model/"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{err}");
    assert!(err.contains("HTTP cannot list a folder; pass the model's *.index.json URI"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let Some(moto) = crate::s3::Moto::start() else { return };
    moto.create_bucket("shards");
    let tmp = tempfile::tempdir().unwrap();
    let options = moto.options(moto.port);
    let put = |path: &Path, key: &str| {
        let uri = format!("s3://shards/{key}");
        tensorizer_native::store::s3::upload(path, &uri, &options).unwrap();
    };
    let model = folder(&tmp.path().join("model"), true, &[]);
    for entry in std::fs::read_dir(&model).unwrap() {
        let entry = entry.unwrap().path();
        let name = entry.file_name().unwrap().to_str().unwrap().to_string();
        put(&entry, &format!("indexed/{name}"));
        if name.ends_with(".safetensors") {
            put(&entry, &format!("bare/{name}"));
            // One level only: a shard in a sub-prefix is not the model's.
            put(&entry, &format!("bare/sub/{name}"));
        }
    }
    let file = one_file(tmp.path());
    let want = hex(&tzr(&["fingerprint", s(&file)]));
    let tzr_s3 = |args: &[&str]| {
        Command::new(crate::common::tzr_bin())
            .args(args)
            .env("HOME", tmp.path())
            .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{}", moto.port))
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .output()
            .unwrap()
    };
    for uri in [
        "s3://shards/indexed/",
        "s3://shards/bare/",
        "s3://shards/indexed/model.safetensors.index.json",
    ] {
        assert_eq!(hex(&tzr_s3(&["fingerprint", uri])), want, "{uri}");
    }
    let doc: Value =
        serde_json::from_str(&stdout(&tzr_s3(&["inspect", "--json", "s3://shards/indexed/"])))
            .unwrap();
    assert_eq!(doc["totals"]["shards"], 2);
    assert_eq!(doc["index"], "s3://shards/indexed/model.safetensors.index.json");
    // A scan lists the prefix as a folder: the model's files, each once,
    // the shards as the index's, and an object of no model format left out.
    std::fs::write(tmp.path().join("config.json"), "{}").unwrap();
    put(&tmp.path().join("config.json"), "indexed/config.json");
    let run = tzr_s3(&["scan", "--json", "s3://shards/indexed/"]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let doc: Value = serde_json::from_str(&stdout(&run)).unwrap();
    let files = doc["files"].as_array().unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["file"].as_str().unwrap()).collect();
    let index = "s3://shards/indexed/model.safetensors.index.json";
    assert_eq!(
        names,
        [
            "s3://shards/indexed/model-00001-of-00002.safetensors",
            "s3://shards/indexed/model-00002-of-00002.safetensors",
            index,
        ]
    );
    assert_eq!(files[2]["findings"], serde_json::json!([]), "the index matches its shards: {doc}");
    assert!(files[..2].iter().all(|f| f["model"] == index), "{doc}");
    assert_eq!(files[2]["shards"].as_array().unwrap().len(), 2, "{doc}");
    let run = tzr_s3(&["fingerprint", "s3://shards/nothing/"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("no *.safetensors file and no *.index.json under this prefix"), "{err}");
}
