//! The `tzr` binary: every command, its JSON, and its exit codes on bad input.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{TEST_KEY_HEX, vectors_dir};

fn tzr(args: &[&str]) -> Output {
    Command::new(crate::common::tzr_bin())
        .args(args)
        .env("TZR_TEST_PASS", "test-passphrase-not-secret")
        .output()
        .unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn inspect_prints_a_table_and_json() {
    let file = vectors_dir().join("v2_dtypes.tensors");
    let out = tzr(&["inspect", path(&file)]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("data version 2") && text.contains("bfloat16"), "{text}");
    let out = tzr(&["inspect", "--json", path(&file)]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["data_version"], 2);
    assert_eq!(
        json["tensors"].as_array().unwrap().len(),
        json["tensor_count"].as_u64().unwrap() as usize
    );
    // Encrypted files can be inspected without a key.
    assert!(tzr(&["inspect", path(&vectors_dir().join("v3_enc_key.tensors"))]).status.success());
}

#[test]
fn verify_encrypt_decrypt_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.hex");
    std::fs::write(&key, TEST_KEY_HEX).unwrap();
    let enc = vectors_dir().join("v3_enc_key.tensors");
    assert_eq!(tzr(&["verify", path(&enc), "--key-file", path(&key)]).status.code(), Some(0));
    let pass = vectors_dir().join("v3_enc_pass.tensors");
    assert_eq!(
        tzr(&["verify", path(&pass), "--passphrase-env", "TZR_TEST_PASS"]).status.code(),
        Some(0)
    );

    let plain = dir.path().join("plain.tensors");
    assert_eq!(
        tzr(&["decrypt", path(&enc), path(&plain), "--key-file", path(&key)]).status.code(),
        Some(0)
    );
    let out = tzr(&["verify", "--json", path(&plain)]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["ok"], true);

    let new_key = dir.path().join("new.key");
    let again = dir.path().join("again.tensors");
    let out = tzr(&[
        "encrypt",
        path(&plain),
        path(&again),
        "--generate-key",
        path(&new_key),
        "--tensorizer-layout",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tzr(&["verify", path(&again), "--key-file", path(&new_key)]).status.code(), Some(0));
    // The wrong key is a verification failure (exit 1), not a crash.
    assert_eq!(tzr(&["verify", path(&again), "--key-file", path(&key)]).status.code(), Some(1));
}

#[test]
fn convert_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("m.safetensors");
    let back = dir.path().join("m.tensors");
    let src = vectors_dir().join("v1_module.tensors");
    assert_eq!(tzr(&["convert", path(&src), path(&st)]).status.code(), Some(0));
    assert_eq!(tzr(&["convert", path(&st), path(&back)]).status.code(), Some(0));
    assert_eq!(tzr(&["verify", path(&back)]).status.code(), Some(0));
    // tensorizer to tensorizer re-lays the file out.
    let relaid = dir.path().join("relaid.tensors");
    let out = tzr(&["convert", path(&back), path(&relaid), "--tensorizer-layout"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tzr(&["verify", path(&relaid)]).status.code(), Some(0));
}

#[test]
fn bad_files_give_one_line_and_a_documented_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(vectors_dir().join("v1_flat.tensors")).unwrap();
    let cases: Vec<(&str, Vec<u8>, i32)> = vec![
        ("empty", Vec::new(), 3),
        ("not-tensorizer", b"PK\x03\x04 a zip file".to_vec(), 3),
        ("truncated", good[..good.len() - 100].to_vec(), 3),
        ("bad-version", [&good[..5], &[9, 0, 0, 0], &good[9..]].concat(), 3),
        (
            "flipped-data",
            {
                let mut b = good.clone();
                let n = b.len();
                b[n - 9] ^= 0x40;
                b
            },
            1,
        ),
    ];
    for (name, bytes, code) in cases {
        let file = dir.path().join(format!("{name}.tensors"));
        std::fs::write(&file, &bytes).unwrap();
        let out = tzr(&["verify", path(&file)]);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(code), "{name}: {stderr}");
        assert!(stderr.starts_with("tzr: ") && stderr.contains(name), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        let out = tzr(&["inspect", path(&file)]);
        if code == 3 {
            assert_eq!(out.status.code(), Some(3), "{name}");
            assert_eq!(String::from_utf8(out.stderr).unwrap().lines().count(), 1, "{name}");
        }
    }
    assert_eq!(tzr(&["verify", path(&dir.path().join("missing.tensors"))]).status.code(), Some(3));
    assert_eq!(tzr(&["frobnicate"]).status.code(), Some(2));
}

/// A file whose first tensor stores no hashes (our writer always stores
/// them; tensorizer's format allows none): the freed bytes become padding,
/// so every offset stays the same.
fn file_without_hashes(dir: &Path) -> std::path::PathBuf {
    use tensorizer_core::{
        Dtype, ElementType, File, TensorHeader, TensorSpec, WriterOptions, write,
    };
    let u8t = Dtype::from_element(ElementType::U8);
    let specs = [
        TensorSpec::state_dict("bare", u8t.clone(), vec![3]),
        TensorSpec::state_dict("hashed", u8t, vec![2]),
    ];
    let mut bytes =
        write::to_vec(&specs, &[&[1, 2, 3], &[4, 5]], &WriterOptions::default(), None, || [0; 24])
            .unwrap();
    let file = File::parse(&bytes).unwrap();
    let e = file.metadata.entries[0].clone();
    let range = e.header_offset as usize..e.data_offset as usize;
    let (mut header, _) =
        TensorHeader::parse(&bytes[range.clone()], e.header_offset, false, false).unwrap();
    let full = header.unpadded_len().unwrap();
    header.hashes.clear();
    header.padding += full - header.unpadded_len().unwrap();
    let mut raw = Vec::new();
    header.emit(&mut raw).unwrap();
    assert_eq!(raw.len(), range.len());
    bytes[range].copy_from_slice(&raw);
    let path = dir.join("bare.tensors");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn verify_says_which_tensors_have_no_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let file = file_without_hashes(dir.path());
    let out = tzr(&["verify", path(&file)]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("1 of 2 tensors verified, 1 with no hashes"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"bare\" has no hashes"));
    let out = tzr(&["verify", "--json", path(&file)]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verified"], 1);
    assert_eq!(json["no_hashes"], serde_json::json!(["bare"]));
}

#[test]
fn inspect_escapes_terminal_control_characters_in_names() {
    use tensorizer_core::{Dtype, ElementType, TensorSpec, WriterOptions, write};
    let dir = tempfile::tempdir().unwrap();
    let name = "evil\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}txt";
    let spec = TensorSpec::state_dict(name, Dtype::from_element(ElementType::U8), vec![1]);
    let bytes =
        write::to_vec(&[spec], &[&[1]], &WriterOptions::default(), None, || [0; 24]).unwrap();
    let file = dir.path().join("evil.tensors");
    std::fs::write(&file, bytes).unwrap();
    let out = tzr(&["inspect", path(&file)]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'),
        "{text:?}"
    );
    assert!(text.contains("evil\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{202e}txt"), "{text}");
    // JSON keeps the exact name (JSON escapes control characters itself).
    let out = tzr(&["inspect", "--json", path(&file)]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["tensors"][0]["name"], name);
}

#[test]
fn inspect_shows_big_endian_dtypes() {
    use tensorizer_core::{Dtype, ElementType, TensorSpec};
    let dir = tempfile::tempdir().unwrap();
    let spec = TensorSpec::state_dict("be", Dtype::from_element(ElementType::F32), vec![1]);
    let patch: [(&[u8], &[u8]); 1] = [(b"<f4", b">f4")];
    let bytes = crate::common::file_with_dtypes_patched(&[spec], &[&1.5f32.to_be_bytes()], &patch);
    let file = dir.path().join("be.tensors");
    std::fs::write(&file, bytes).unwrap();
    let text = String::from_utf8(tzr(&["inspect", path(&file)]).stdout).unwrap();
    assert!(text.contains("float32 (big-endian)"), "{text}");
}

/// A report that cannot be written (a full device, a closed pipe) is a
/// failure with a non-zero exit, never a panic and never a silent success.
#[test]
fn output_that_cannot_be_written_is_a_failure() {
    let flat = vectors_dir().join("v1_flat.tensors");
    let list = vectors_dir().join("v1_list.tensors");
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    let Ok(full) = full else { return };
    for (args, code) in [
        (vec!["inspect", path(&flat)], 3),
        (vec!["inspect", "--json", path(&flat)], 3),
        (vec!["verify", path(&flat)], 3),
        (vec!["fingerprint", path(&flat)], 3),
        (vec!["diff", path(&flat), path(&list)], 2),
    ] {
        let out = Command::new(crate::common::tzr_bin())
            .args(&args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.starts_with("tzr: could not write the output:"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    // A reader that has gone away (`tzr inspect | head -1`) ends the command
    // quietly, with SIGPIPE's conventional status.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(crate::common::tzr_bin())
        .args(["inspect", path(&flat)])
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}
