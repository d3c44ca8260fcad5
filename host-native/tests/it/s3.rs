//! Reading and writing `s3://` objects against a real S3-compatible server
//! (moto's `moto_server`, from PyPI) on 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tensorizer_native::store::http::{HttpOptions, RetryPolicy};
use tensorizer_native::store::s3::{self, S3Options};
use tensorizer_native::{RangeSource, ReadOptions, Reader};

use crate::common::vectors;
use crate::servers::{Fault, FaultProxy, within};

/// `moto_server` on a loopback port; stopped on drop.
pub(crate) struct Moto {
    child: Child,
    pub(crate) port: u16,
}

impl Moto {
    /// Starts moto from `$TZR_MOTO_SERVER` or the test virtualenv
    /// (tests/python-env.sh installs it).
    pub(crate) fn start() -> Option<Self> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let env_bin = std::env::var("TZR_MOTO_SERVER").unwrap_or_default();
        let venv_bin = root.join(".venv-test/bin/moto_server");
        let bin = crate::servers::binary(
            "moto_server",
            &[env_bin.as_str(), &venv_bin.to_string_lossy()],
        )?;
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().port();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Self { child, port };
        for _ in 0..300 {
            if raw(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").is_some() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("moto_server did not start on port {port}");
    }

    pub(crate) fn create_bucket(&self, bucket: &str) {
        let reply = raw(
            self.port,
            &format!("PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        )
        .unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }

    pub(crate) fn options(&self, port: u16) -> S3Options {
        S3Options {
            access_key_id: Some("testing".into()),
            secret_access_key: Some("testing".into()),
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            force_http: Some(true),
            http: HttpOptions {
                retry: RetryPolicy::new(6, Duration::from_millis(5)),
                ..HttpOptions::default()
            },
            ..S3Options::default()
        }
    }

    /// The raw reply to a GET of `path`.
    pub(crate) fn get(&self, path: &str) -> String {
        raw(
            self.port,
            &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        )
        .unwrap()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 exchange over a fresh connection; the reply as text.
fn raw(port: u16, request: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(request.as_bytes()).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn load_all<S: RangeSource>(reader: &Reader<S>) -> Vec<Vec<u8>> {
    let mut bufs: Vec<Vec<u8>> =
        reader.entries().iter().map(|e| vec![0; e.nbytes() as usize]).collect();
    reader
        .load_many(bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect())
        .unwrap();
    bufs
}

#[test]
fn vectors_round_trip_through_s3() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket("models");
    let options = moto.options(moto.port);
    for v in vectors().iter().filter(|v| !v.name().contains("long")) {
        let uri = format!("s3://models/vectors/{}", v.name());
        s3::upload(&v.path, &uri, &options).unwrap();
        let local =
            Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap();
        for num_readers in [1, 4] {
            let source = s3::open(&uri, &options).unwrap();
            assert_eq!(source.name(), uri, "messages name the s3:// URI, not the presigned URL");
            let remote =
                Reader::new(source, ReadOptions { key: v.key(), verify_hash: true, num_readers })
                    .unwrap();
            assert_eq!(load_all(&remote), load_all(&local), "{}", v.name());
        }
    }
}

#[test]
fn multipart_uploads_and_aborts_leave_nothing_partial() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket("big");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blob");
    let data: Vec<u8> =
        (0..(23u32 << 20) / 4).flat_map(|i| i.wrapping_mul(2654435761).to_le_bytes()).collect();
    std::fs::write(&path, &data).unwrap();
    let mut options = moto.options(moto.port);
    options.part_size = Some(5 << 20);
    options.upload_concurrency = Some(3);
    s3::upload(&path, "s3://big/blob", &options).unwrap();
    let source = s3::open("s3://big/blob", &options).unwrap();
    let mut back = vec![0u8; data.len()];
    source.read_exact_at(0, &mut back).unwrap();
    assert!(back == data, "five parts reassemble to the file");

    // Every other connection answers 503 and nothing is retried: some part
    // fails, the upload is aborted, and the old object stays as it was.
    let proxy = FaultProxy::start(moto.port, Fault::Status503);
    let mut failing = moto.options(proxy.port);
    failing.part_size = Some(5 << 20);
    failing.http.retry.attempts = 1;
    std::fs::write(&path, vec![7u8; 12 << 20]).unwrap();
    let err = s3::upload(&path, "s3://big/blob", &failing).unwrap_err().to_string();
    assert!(
        err.contains("s3://big/blob") && err.contains("part") && !err.contains("abort"),
        "{err}"
    );
    let mut again = vec![0u8; data.len()];
    s3::open("s3://big/blob", &options).unwrap().read_exact_at(0, &mut again).unwrap();
    assert!(again == data, "a failed upload leaves the previous object intact");
    let uploads = moto.get("/big?uploads");
    assert!(
        uploads.contains("ListMultipartUploadsResult") && !uploads.contains("<UploadId>"),
        "{uploads}"
    );
}

#[test]
fn missing_objects_and_buckets_are_clear_errors() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket("here");
    let options = moto.options(moto.port);
    let err = s3::open("s3://here/missing.tensors", &options).unwrap_err().to_string();
    assert!(err.contains("s3://here/missing.tensors") && err.contains("404"), "{err}");
    assert!(!err.contains("Signature"), "no credentials in messages: {err}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let err =
        s3::upload(&dir.path().join("f"), "s3://nobucket/f", &options).unwrap_err().to_string();
    assert!(err.contains("NoSuchBucket"), "{err}");
}

#[test]
fn tzr_copies_between_local_s3_and_redis() {
    let Some(moto) = Moto::start() else { return };
    let Some(redis) = crate::servers::RedisServer::start() else { return };
    moto.create_bucket("cli");
    let dir = tempfile::tempdir().unwrap();
    let input = crate::common::vectors_dir().join("v4_meta.tensors");
    let tzr = |args: &[&str]| {
        std::process::Command::new(crate::common::tzr_bin())
            .args(args)
            .env("HOME", dir.path())
            .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{}", moto.port))
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .output()
            .unwrap()
    };
    let redis_uri = format!("redis://127.0.0.1:{}/cli", redis.port);
    let back = dir.path().join("back.tensors");
    let back = back.to_str().unwrap();
    for (from, to) in [
        (input.to_str().unwrap(), "s3://cli/m.tensors"),
        ("s3://cli/m.tensors", redis_uri.as_str()),
        (redis_uri.as_str(), "s3://cli/again.tensors"),
        ("s3://cli/again.tensors", back),
    ] {
        let out = tzr(&["copy", from, to]);
        assert!(out.status.success(), "{from} -> {to}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // Redis does not store the 8-byte end marker; everything else is the same.
    let original = std::fs::read(&input).unwrap();
    let copied = std::fs::read(back).unwrap();
    assert_eq!(copied[..], original[..original.len() - 8]);
    let out = tzr(&["inspect", "--json", "s3://cli/again.tensors"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Existing targets need --force; a non-tensorizer input writes nothing.
    assert_eq!(tzr(&["copy", input.to_str().unwrap(), &redis_uri]).status.code(), Some(3));
    assert_eq!(tzr(&["copy", input.to_str().unwrap(), back]).status.code(), Some(2));
    assert!(tzr(&["copy", "--force", input.to_str().unwrap(), &redis_uri]).status.success());
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"not a tensorizer file").unwrap();
    assert_eq!(tzr(&["copy", junk.to_str().unwrap(), "s3://cli/junk"]).status.code(), Some(3));
    assert!(moto.get("/cli/junk").starts_with("HTTP/1.1 404"));
}

#[test]
fn a_completed_upload_whose_reply_is_lost_is_a_success() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket("lost");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blob");
    let data: Vec<u8> =
        (0..(11u32 << 20) / 4).flat_map(|i| i.wrapping_mul(2246822519).to_le_bytes()).collect();
    std::fs::write(&path, &data).unwrap();
    let upload = |fault: Fault, uri: &str, attempts: u32| {
        let proxy = FaultProxy::start(moto.port, fault);
        let mut options = moto.options(proxy.port);
        options.part_size = Some(5 << 20);
        options.http.retry.attempts = attempts;
        let (path, uri) = (path.clone(), uri.to_string());
        let result = within(Duration::from_secs(60), move || s3::upload(&path, &uri, &options));
        assert!(
            proxy.dropped.load(std::sync::atomic::Ordering::Relaxed) >= 1,
            "no completion was lost"
        );
        result
    };
    let read = |uri: &str| {
        let source = s3::open(uri, &moto.options(moto.port)).unwrap();
        let mut back = vec![0u8; source.len() as usize];
        source.read_exact_at(0, &mut back).unwrap();
        back
    };
    // One lost reply: retried (moto answers the repeat with the result, S3 may say NoSuchUpload).
    // Every reply lost: the attempts run out, and only the check can tell.
    for times in [1, 100] {
        let uri = format!("s3://lost/blob-{times}");
        upload(Fault::LoseCompletion { forward: true, times }, &uri, 3)
            .unwrap_or_else(|e| panic!("{times} lost replies: {e}"));
        assert!(read(&uri) == data, "{times} lost replies: the object is the upload");
    }

    // A completion that never reached S3 still fails, and the object that
    // was there (same size, other bytes) is kept.
    let other: Vec<u8> = data.iter().map(|b| b ^ 0xFF).collect();
    let other_path = dir.path().join("other");
    std::fs::write(&other_path, &other).unwrap();
    let mut direct = moto.options(moto.port);
    direct.part_size = Some(5 << 20);
    s3::upload(&other_path, "s3://lost/kept", &direct).unwrap();
    let err = upload(Fault::LoseCompletion { forward: false, times: 100 }, "s3://lost/kept", 2)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("s3://lost/kept") && err.contains("complete") && err.contains("ETag"),
        "{err}"
    );
    assert!(read("s3://lost/kept") == other, "the previous object is kept");
    let err = upload(Fault::LoseCompletion { forward: false, times: 100 }, "s3://lost/none", 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("s3://lost/none") && err.contains("404"), "{err}");
}
