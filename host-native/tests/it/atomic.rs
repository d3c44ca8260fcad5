//! Killing a writer part-way leaves the previous file intact.
//!
//! The test re-runs its own binary as a child that writes slowly over an
//! existing file, kills it mid-write, and checks the old bytes are still
//! there and no partial file took the target's name.

use std::process::Command;
use std::time::Duration;

use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::WriteOptions;
use tensorizer_native::writer::FileWriter;

const CHILD_ENV: &str = "TZR_ATOMIC_CHILD_TARGET";

/// The child half: writes a 64 MiB file in small, slow pieces.
#[test]
fn atomic_child_writer() {
    let Ok(target) = std::env::var(CHILD_ENV) else {
        return;
    };
    let specs = vec![TensorSpec::state_dict("w", Dtype::from_element(ElementType::U8), vec![64 << 20])];
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
