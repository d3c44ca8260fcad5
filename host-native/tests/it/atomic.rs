//! Killing a writer part-way leaves the previous file intact.
//!
//! The test re-runs its own binary as a child that writes slowly over an
//! existing file, kills it mid-write, and checks the old bytes are still
//! there and no partial file took the target's name.

use std::process::Command;
use std::time::Duration;

use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::WriteOptions;
use tensorizer_native::write::FileWriter;

const CHILD_ENV: &str = "TZR_ATOMIC_CHILD_TARGET";

/// The child half: writes a 64 MiB file in small, slow pieces.
#[test]
fn atomic_child_writer() {
    let Ok(target) = std::env::var(CHILD_ENV) else {
        return;
    };
    let specs =
        vec![TensorSpec::state_dict("w", Dtype::from_element(ElementType::U8), vec![64 << 20])];
    let writer = FileWriter::create(&target, &specs, &WriteOptions::default()).unwrap();
    let mut sink = writer.tensor(0).unwrap();
    let piece = vec![0x5a; 1 << 20];
    for _ in 0..64 {
        sink.write(&piece).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    sink.finish().unwrap();
    writer.commit().unwrap();
}

#[test]
fn killed_writer_leaves_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("model.tensors");
    std::fs::write(&target, b"the previous, good file").unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "atomic::atomic_child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &target)
        .spawn()
        .unwrap();
    // Wait until the child's temporary file exists and is being filled.
    let mut seen = false;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(25));
        let tmp = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().ends_with(".tmp"));
        if tmp {
            seen = true;
            std::thread::sleep(Duration::from_millis(300));
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen, "the child never started writing");
    assert_eq!(std::fs::read(&target).unwrap(), b"the previous, good file");
}

/// New outputs get `0666 & !umask`, replaced ones keep their mode, and a
/// symlink at the output path is written through, as `cp` would.
#[test]
fn outputs_honour_the_umask_keep_modes_and_write_through_symlinks() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let input = crate::common::vectors_dir().join("v1_flat.tensors");
    let tzr = |umask: &str, args: &[&std::path::Path]| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
            .arg(crate::common::tzr_bin());
        cmd.args(args);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let copy = dir.path().join("copy.tensors");
    tzr("022", &[std::path::Path::new("copy"), &input, &copy]);
    assert_eq!(mode(&copy), 0o644);
    let st = dir.path().join("model.safetensors");
    tzr("002", &[std::path::Path::new("convert"), &input, &st]);
    assert_eq!(mode(&st), 0o664);
    // Replacing keeps the existing mode.
    std::fs::set_permissions(&st, std::fs::Permissions::from_mode(0o640)).unwrap();
    tzr("022", &[std::path::Path::new("convert"), &input, &st]);
    assert_eq!(mode(&st), 0o640);
    // A symlink stays a symlink; the file it names is replaced.
    let real = dir.path().join("store").join("real.tensors");
    std::fs::create_dir(real.parent().unwrap()).unwrap();
    std::fs::write(&real, b"old").unwrap();
    let link = dir.path().join("link.tensors");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    tzr("022", &[std::path::Path::new("copy"), std::path::Path::new("--force"), &input, &link]);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), std::fs::read(&input).unwrap());
}
