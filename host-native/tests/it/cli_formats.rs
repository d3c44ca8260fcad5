//! `tzr` as a newcomer meets it: names mean formats, every command takes
//! every format it can, and one message per outcome (a summary line on
//! success, one line for a wrong key, a JSON object under `--json`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{TEST_KEY_HEX, vectors_dir};

fn tzr(args: &[&str]) -> Output {
    Command::new(crate::common::tzr_bin()).args(args).output().unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A safetensors copy of a vector, made by `tzr convert`.
fn safetensors_file(dir: &Path) -> PathBuf {
    let st = dir.join("m.safetensors");
    let out =
        tzr(&["convert", "--quiet", path(&vectors_dir().join("v1_module.tensors")), path(&st)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    st
}

#[test]
fn convert_writes_only_the_format_the_name_says() {
    let dir = tempfile::tempdir().unwrap();
    let src = vectors_dir().join("v1_module.tensors");
    for (output, to, says) in [
        ("b.pt", None, "cannot write torch.save checkpoints"),
        ("b.bin", None, "cannot write torch.save checkpoints"),
        ("b.tensors", Some("safetensors"), "contradicts the name"),
        ("b.safetensors", Some("tensorizer"), "contradicts the name"),
        ("b.weights", None, "cannot tell the output format"),
    ] {
        let target = dir.path().join(output);
        let mut args = vec!["convert", path(&src), path(&target)];
        args.extend(to.iter().flat_map(|t| ["--to", *t]));
        let out = tzr(&args);
        assert_eq!(out.status.code(), Some(2), "{output}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{output}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{output}: {}", stderr(&out));
        assert!(!target.exists(), "{output} was written");
    }
    // A name without a known extension takes `--to`.
    let named = dir.path().join("b.weights");
    assert_eq!(
        tzr(&["convert", "-q", path(&src), path(&named), "--to", "safetensors"]).status.code(),
        Some(0)
    );
    assert!(
        String::from_utf8(tzr(&["inspect", path(&named)]).stdout).unwrap().contains("safetensors")
    );
    // encrypt and decrypt write tensorizer files: another format's name is refused.
    let key = dir.path().join("k.hex");
    std::fs::write(&key, TEST_KEY_HEX).unwrap();
    let out = tzr(&[
        "encrypt",
        path(&src),
        path(&dir.path().join("e.safetensors")),
        "--key-file",
        path(&key),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn writing_commands_end_with_one_summary_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = vectors_dir().join("v1_module.tensors");
    let st = dir.path().join("s.safetensors");
    let out = tzr(&["convert", path(&src), path(&st)]);
    assert_eq!(out.status.code(), Some(0));
    let said = stderr(&out);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.starts_with("tzr: wrote ")
            && said.contains("s.safetensors (safetensors): ")
            && said.contains(" tensors, ")
    );
    let key = dir.path().join("k.hex");
    std::fs::write(&key, TEST_KEY_HEX).unwrap();
    let enc = dir.path().join("e.tensors");
    let out = tzr(&["encrypt", path(&src), path(&enc), "--key-file", path(&key)]);
    assert!(stderr(&out).starts_with("tzr: encrypted "), "{}", stderr(&out));
    let out = tzr(&[
        "decrypt",
        "--quiet",
        path(&enc),
        path(&dir.path().join("d.tensors")),
        "--key-file",
        path(&key),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "--quiet: {}", stderr(&out));
    let out = tzr(&["copy", path(&src), path(&dir.path().join("c.tensors"))]);
    assert!(stderr(&out).starts_with("tzr: copied "), "{}", stderr(&out));
}

#[test]
fn inspect_and_verify_take_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let st = safetensors_file(dir.path());
    let out = tzr(&["inspect", path(&st)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8(out.stdout).unwrap().contains("safetensors, "));
    let json: serde_json::Value =
        serde_json::from_slice(&tzr(&["inspect", "--json", path(&st)]).stdout).unwrap();
    assert_eq!(json["format"], "safetensors");
    assert_eq!(
        json["tensors"].as_array().unwrap().len(),
        json["tensor_count"].as_u64().unwrap() as usize
    );
    let out = tzr(&["verify", path(&st)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8(out.stdout).unwrap().contains("no checksums"));
    // A truncated one is refused with one line.
    let bytes = std::fs::read(&st).unwrap();
    let cut = dir.path().join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let out = tzr(&["verify", path(&cut)]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

#[test]
fn a_wrong_key_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong.hex");
    std::fs::write(&wrong, "ff".repeat(32)).unwrap();
    let enc = vectors_dir().join("v3_enc_key.tensors");
    let out = tzr(&["verify", path(&enc), "--key-file", path(&wrong)]);
    assert_eq!(out.status.code(), Some(1));
    let said = stderr(&out);
    assert!(said.contains("no tensor decrypts: wrong key or passphrase"), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    let out = tzr(&["verify", "--json", path(&enc), "--key-file", path(&wrong)]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["error"].as_str().unwrap().contains("wrong key"), "{json}");
}

#[test]
fn a_failed_verify_says_how_many_failed() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(vectors_dir().join("v1_flat.tensors")).unwrap();
    let n = bytes.len();
    bytes[n - 9] ^= 0x40;
    let file = dir.path().join("flipped.tensors");
    std::fs::write(&file, bytes).unwrap();
    let said = stderr(&tzr(&["verify", path(&file)]));
    assert!(said.lines().last().unwrap().contains(" tensors verified, 1 failed"), "{said}");
}

#[test]
fn every_json_outcome_is_one_object_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.tensors");
    let junk = dir.path().join("junk.tensors");
    std::fs::write(&junk, b"not a model file at all").unwrap();
    for args in [
        vec!["inspect", "--json", path(&missing)],
        vec!["verify", "--json", path(&junk)],
        vec!["fingerprint", "--json", path(&missing)],
        vec!["diff", "--json", path(&missing), path(&junk)],
    ] {
        let out = tzr(&args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{args:?}: {e}: {:?}", String::from_utf8_lossy(&out.stdout))
        });
        assert_eq!(json["ok"], false, "{args:?}");
        assert!(json["error"].as_str().is_some_and(|e| !e.is_empty()), "{args:?}");
        assert_eq!(json["exit_code"].as_i64(), out.status.code().map(i64::from), "{args:?}");
    }
}

#[test]
fn short_help_is_one_line_per_command() {
    let help = String::from_utf8(tzr(&["--help"]).stdout).unwrap();
    for line in help.lines().filter(|l| l.starts_with("  ") && !l.trim_start().starts_with('-')) {
        assert!(line.len() <= 100, "too long: {line}");
        assert!(!line.contains('§'), "spec jargon: {line}");
    }
    assert!(!help.contains('§'), "{help}");
}
