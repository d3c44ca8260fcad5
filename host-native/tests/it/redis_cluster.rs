//! Redis Cluster as a source and a sink, against three real redis-server
//! masters that `tests/redis-cluster.sh` starts on 127.0.0.1: files round
//! trip (whole and in concurrent ranges), their keys spread over the
//! masters, reads and writes follow `ASK` and `MOVED` through a slot migration, a
//! replaced file is detected, concurrent writes never mix, and a dead or stalled node is a typed error
//! within the deadline.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::error::StoreErrorKind;
use tensorizer_native::store::redis::{
    ClusterSource, RedisOptions, RetryPolicy, key_slot, write_cluster,
};
use tensorizer_native::{RangeSource, ReadOptions, Reader, WriteOptions, write_file};

use crate::servers::{binary, within};

/// Three cluster masters, stopped (and their files removed) on drop.
struct Cluster {
    ports: Vec<u16>,
    dir: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/redis-cluster.sh")
}

impl Cluster {
    /// `None` (the test is skipped) without redis-server and redis-cli.
    fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// A cluster started with `redis-cluster.sh`'s variables
    /// (`TZR_CLUSTER_TLS`, `TZR_CLUSTER_PASSWORD`).
    fn start_with(env: &[(&str, &Path)]) -> Option<Self> {
        binary("redis-server", &["/usr/bin/redis-server", "/usr/local/bin/redis-server"])?;
        binary("redis-cli", &["/usr/bin/redis-cli", "/usr/local/bin/redis-cli"])?;
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(script());
        command.arg("start").arg(dir.path());
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        let mut this = Self { ports: Vec::new(), dir };
        assert!(
            out.status.success(),
            "redis-cluster.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        this.ports = String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        Some(this)
    }

    fn uri(&self, prefix: &str) -> String {
        format!("redis+cluster://127.0.0.1:{}/{prefix}", self.ports[0])
    }

    /// The pid of the node on `port`.
    fn pid(&self, port: u16) -> String {
        std::fs::read_to_string(self.dir.path().join(port.to_string()).join("redis.pid"))
            .unwrap()
            .trim()
            .to_string()
    }

    fn signal(&self, port: u16, signal: &str) {
        assert!(
            Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(self.pid(port))
                .status()
                .unwrap()
                .success()
        );
    }

    /// The port of the master serving `key`.
    fn owner(&self, key: &[u8]) -> u16 {
        self.owner_of_slot(key_slot(key))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for port in &self.ports {
            // Stopped nodes do not die of SIGTERM.
            let _ = Command::new("kill").arg("-CONT").arg(self.pid(*port)).status();
        }
        let _ = Command::new(script()).arg("stop").arg(self.dir.path()).status();
    }
}

/// A reply, as this test client sees it (error texts are not needed).
#[derive(Debug, PartialEq)]
enum Resp {
    Status(String),
    Error,
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Self>),
}

/// One command on a fresh connection to `port` (no redirects followed).
fn cmd(port: u16, args: &[&[u8]]) -> Resp {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    s.write_all(&out).unwrap();
    read_resp(&mut BufReader::new(s))
}

fn read_resp(r: &mut impl BufRead) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let (kind, rest) = line.trim_end().split_at(1);
    match kind {
        "+" => Resp::Status(rest.to_string()),
        "-" => Resp::Error,
        ":" => Resp::Int(rest.parse().unwrap()),
        "$" if rest == "-1" => Resp::Bulk(None),
        "$" => {
            let mut v = vec![0u8; rest.parse::<usize>().unwrap() + 2];
            r.read_exact(&mut v).unwrap();
            v.truncate(v.len() - 2);
            Resp::Bulk(Some(v))
        }
        "*" => Resp::Array((0..rest.parse::<usize>().unwrap()).map(|_| read_resp(r)).collect()),
        _ => panic!("bad reply {line:?}"),
    }
}

fn ok(port: u16, args: &[&[u8]]) {
    assert_eq!(
        cmd(port, args),
        Resp::Status("OK".into()),
        "{:?}",
        args.iter().map(|a| String::from_utf8_lossy(a)).collect::<Vec<_>>()
    );
}

fn bulk(port: u16, args: &[&[u8]]) -> Vec<u8> {
    match cmd(port, args) {
        Resp::Bulk(Some(v)) => v,
        other => panic!("{other:?}"),
    }
}

/// A section of `INFO` of the node at `port`.
fn info(port: u16, section: &str) -> String {
    String::from_utf8(bulk(port, &[b"INFO", section.as_bytes()])).unwrap()
}

/// The keys on the node at `port` matching `pattern`.
fn keys_on(port: u16, pattern: &str) -> Vec<Vec<u8>> {
    let Resp::Array(items) = cmd(port, &[b"KEYS", pattern.as_bytes()]) else {
        panic!("KEYS failed")
    };
    items
        .into_iter()
        .map(|i| match i {
            Resp::Bulk(Some(n)) => n,
            other => panic!("{other:?}"),
        })
        .collect()
}

/// A file of tensors of `sizes` bytes (data depending on `seed`); returns
/// its path and bytes.
fn write_local(dir: &Path, name: &str, sizes: &[usize], seed: u8) -> (PathBuf, Vec<u8>) {
    let tensors: Vec<(TensorSpec, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let data: Vec<u8> = (0..n as u32)
                .map(|b| (b.wrapping_mul(2654435761) >> 13) as u8 ^ i as u8 ^ seed)
                .collect();
            (
                TensorSpec::state_dict(
                    format!("t{i}").as_str(),
                    Dtype::from_element(ElementType::U8),
                    vec![n as u64],
                ),
                data,
            )
        })
        .collect();
    let input: Vec<(TensorSpec, &[u8])> =
        tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
    let path = dir.join(name);
    write_file(&path, &input, &WriteOptions::default()).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// Writes the local file at `path` to `uri`.
fn put(path: &Path, uri: &str, force: bool) -> tensorizer_native::Result<()> {
    let reader = Reader::open(path, ReadOptions::default()).unwrap();
    write_cluster(uri, &reader, force)
}

fn open(uri: &str) -> ClusterSource {
    ClusterSource::open(uri, RedisOptions::default()).unwrap()
}

/// Everything the source holds (the file without its 8-byte end marker).
fn read_all(source: &dyn RangeSource) -> tensorizer_native::Result<Vec<u8>> {
    let mut buf = vec![0u8; source.len() as usize];
    source.read_exact_at(0, &mut buf)?;
    Ok(buf)
}

/// Sizes spanning the cases: empty, small, more than one `GETRANGE`
/// (1 MiB), streamed on upload (over 8 MiB), and many small keys.
fn sizes() -> Vec<usize> {
    let mut sizes = vec![0, 1, 3000, (1 << 20) + 17, (9 << 20) + 5];
    sizes.extend((0..40).map(|i| 100 + i * 37));
    sizes
}

#[test]
fn files_round_trip_and_spread_over_the_masters() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = write_local(dir.path(), "a.tensors", &sizes(), 1);
    let uri = cluster.uri("models/a");
    put(&path, &uri, false).unwrap();

    let source = Arc::new(open(&uri));
    assert_eq!(source.len(), bytes.len() as u64 - 8);
    assert_eq!(read_all(&*source).unwrap(), bytes[..bytes.len() - 8]);
    assert_eq!(source.masters().len(), 3);

    // Concurrent ranges, crossing key boundaries.
    let len = source.len();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let source = Arc::clone(&source);
            let expected = bytes.clone();
            std::thread::spawn(move || {
                for i in 0..20u64 {
                    let start = (t * 7_919_993 + i * 1_299_709) % len;
                    let n = ((i * 524_287 + t * 31) % (3 << 20)).min(len - start) as usize;
                    let mut buf = vec![0u8; n];
                    source.read_exact_at(start, &mut buf).unwrap();
                    assert!(
                        buf == expected[start as usize..start as usize + n],
                        "bytes {start}+{n}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }

    // The tensors, through the reader, equal the local file's.
    let remote = Reader::new(open(&uri), ReadOptions::default()).unwrap();
    let local = Reader::open(&path, ReadOptions::default()).unwrap();
    for (i, (r, l)) in remote.entries().iter().zip(local.entries()).enumerate() {
        let (mut a, mut b) = (vec![0u8; r.nbytes() as usize], vec![0u8; l.nbytes() as usize]);
        remote.load_into(i, &mut a).unwrap();
        local.load_into(i, &mut b).unwrap();
        assert!(a == b, "{}", r.path);
    }

    // Keys on every master, in many slots; the slot we compute is Redis's.
    let per_node: Vec<usize> =
        cluster.ports.iter().map(|&p| keys_on(p, "models/a:*").len()).collect();
    eprintln!("keys per master: {per_node:?}");
    assert_eq!(per_node.iter().sum::<usize>(), 1 + 2 * sizes().len(), "{per_node:?}");
    assert!(per_node.iter().filter(|&&n| n > 0).count() >= 2, "{per_node:?}");
    let names: Vec<Vec<u8>> =
        cluster.ports.iter().flat_map(|&p| keys_on(p, "models/a:*")).collect();
    let slots: std::collections::HashSet<u16> = names.iter().map(|n| key_slot(n)).collect();
    assert!(slots.len() > names.len() / 2, "{} keys in {} slots", names.len(), slots.len());
    for name in names.iter().take(10) {
        assert_eq!(
            cmd(cluster.ports[0], &[b"CLUSTER", b"KEYSLOT", name]),
            Resp::Int(key_slot(name).into())
        );
    }
    // No temporary key is left, and the marker is set.
    let all: usize = cluster.ports.iter().map(|&p| keys_on(p, "*").len()).sum();
    assert_eq!(all, names.len() + 1);

    // An existing file is kept without force and replaced with it.
    let err = put(&path, &uri, false).unwrap_err();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::AlreadyExists), "{err}");
    let (path2, bytes2) = write_local(dir.path(), "b.tensors", &[5, 6], 2);
    put(&path2, &uri, true).unwrap();
    assert_eq!(read_all(&open(&uri)).unwrap(), bytes2[..bytes2.len() - 8]);
    let left: usize = cluster.ports.iter().map(|&p| keys_on(p, "models/a:*").len()).sum();
    assert_eq!(left, 5, "the old file's keys are gone");

    // A hash tag in the prefix would put the file in one slot.
    assert!(put(&path2, &cluster.uri("m{x}"), false).unwrap_err().to_string().contains("one slot"));
    // A single server is not a cluster.
    let single = crate::servers::RedisServer::start().unwrap();
    let err = ClusterSource::open(
        &format!("redis+cluster://127.0.0.1:{}/p", single.port),
        RedisOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("not a cluster") && err.contains(&single.port.to_string()), "{err}");
}

#[test]
fn a_replaced_file_is_detected() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = write_local(dir.path(), "a.tensors", &[4000, 5000, 6000], 1);
    let (b, bytes_b) = write_local(dir.path(), "b.tensors", &[4000, 5000, 6000], 2);
    let uri = cluster.uri("m");
    put(&a, &uri, false).unwrap();
    let old = open(&uri);
    let mut buf = vec![0u8; 100];
    old.read_exact_at(0, &mut buf).unwrap();
    put(&b, &uri, true).unwrap();
    let err = old.read_exact_at(0, &mut buf).unwrap_err();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::Changed), "{err}");
    assert!(err.to_string().contains("changed during the read"), "{err}");
    assert_eq!(read_all(&open(&uri)).unwrap(), bytes_b[..bytes_b.len() - 8]);

    // A write that died between its marker and its renames: readers refuse.
    let marker = b"m.tzr-generation";
    let port = cluster.owner_of_slot(key_slot(marker));
    ok(port, &[b"SET", marker, b"writing-0123456789abcdef"]);
    let err = ClusterSource::open(&uri, RedisOptions::default()).unwrap_err();
    assert!(err.to_string().contains("in progress or was interrupted"), "{err}");
    // A write completes it.
    put(&a, &uri, true).unwrap();
    assert_ne!(bulk(port, &[b"GET", marker]), b"writing-0123456789abcdef");
    open(&uri);
}

#[test]
fn concurrent_writes_never_mix() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let many: Vec<usize> = (0..200).map(|i| 64 + i).collect();
    let (a, bytes_a) = write_local(dir.path(), "a.tensors", &many, 1);
    let (b, bytes_b) = write_local(dir.path(), "b.tensors", &many, 2);
    let uri = cluster.uri("race");
    put(&a, &uri, false).unwrap();
    for round in 0..4 {
        let writers: Vec<_> = [a.clone(), b.clone()]
            .into_iter()
            .map(|path| {
                let uri = uri.clone();
                std::thread::spawn(move || put(&path, &uri, true))
            })
            .collect();
        let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(results.iter().any(Result::is_ok), "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(
                    e.to_string().contains("another write to this prefix"),
                    "round {round}: {e}"
                );
            }
        }
        let got = read_all(&open(&uri)).unwrap();
        assert!(
            got == bytes_a[..bytes_a.len() - 8] || got == bytes_b[..bytes_b.len() - 8],
            "round {round}: a mix"
        );
    }
    // Nothing but the file's keys and its marker is left (no lock, no temporary key).
    let all: usize = cluster.ports.iter().map(|&p| keys_on(p, "*").len()).sum();
    assert_eq!(all, 1 + 2 * many.len() + 1);

    // A lock held (a writer committing, or one that died committing) stops a write.
    let port = cluster.owner(b"race.tzr-generation");
    let tag = (0..)
        .map(|n: u32| n.to_string())
        .find(|n| key_slot(n.as_bytes()) == key_slot(b"race.tzr-generation"));
    let lock_key = format!("{{{}}}race.tzr-lock", tag.unwrap());
    ok(port, &[b"SET", lock_key.as_bytes(), b"someone"]);
    let err = put(&b, &uri, true).unwrap_err();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::Changed), "{err}");
    assert!(err.to_string().contains("race.tzr-lock"), "{err}");
    // The file is untouched.
    let got = read_all(&open(&uri)).unwrap();
    assert!(got == bytes_a[..bytes_a.len() - 8] || got == bytes_b[..bytes_b.len() - 8]);
}

impl Cluster {
    /// The port of the master serving `slot`.
    fn owner_of_slot(&self, slot: u16) -> u16 {
        let Resp::Array(ranges) = cmd(self.ports[0], &[b"CLUSTER", b"SLOTS"]) else { panic!() };
        for range in ranges {
            let Resp::Array(parts) = range else { panic!() };
            let (Resp::Int(start), Resp::Int(end), Resp::Array(master)) =
                (&parts[0], &parts[1], &parts[2])
            else {
                panic!()
            };
            if (*start..=*end).contains(&i64::from(slot)) {
                let Resp::Int(port) = master[1] else { panic!() };
                return port as u16;
            }
        }
        panic!("slot {slot} is not served")
    }

    fn id(&self, port: u16) -> Vec<u8> {
        bulk(port, &[b"CLUSTER", b"MYID"])
    }
}

#[test]
fn reads_and_writes_follow_ask_and_moved_through_a_slot_migration() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = write_local(dir.path(), "a.tensors", &sizes(), 3);
    let uri = cluster.uri("mig");
    put(&path, &uri, false).unwrap();
    let source = open(&uri);
    let expected = &bytes[..bytes.len() - 8];

    // The slot of the largest key, and another master to move it to.
    let key = source.keys().iter().max_by_key(|k| k.len).unwrap().clone();
    let slot = key_slot(&key.name);
    let from = cluster.owner_of_slot(slot);
    let to = *cluster.ports.iter().find(|&&p| p != from).unwrap();
    let slot_arg = slot.to_string();
    let slot_arg = slot_arg.as_bytes();
    ok(to, &[b"CLUSTER", b"SETSLOT", slot_arg, b"IMPORTING", &cluster.id(from)]);
    ok(from, &[b"CLUSTER", b"SETSLOT", slot_arg, b"MIGRATING", &cluster.id(to)]);
    let to_port = to.to_string();
    let migrate = |k: &[u8]| {
        ok(from, &[b"MIGRATE", b"127.0.0.1", to_port.as_bytes(), b"", b"0", b"5000", b"KEYS", k]);
    };
    migrate(&key.name);

    // Mid-way: the key is on the target, its slot still on the source (ASK).
    assert_eq!(cmd(from, &[b"EXISTS", &key.name]), Resp::Error, "an ASK redirect");
    let mut buf = vec![0u8; key.len as usize];
    source.read_exact_at(key.offset, &mut buf).unwrap();
    assert!(buf == expected[key.offset as usize..(key.offset + key.len) as usize]);
    assert_eq!(read_all(&source).unwrap(), expected);
    // Opening mid-way lists the key on the target and measures it there.
    assert_eq!(read_all(&open(&uri)).unwrap(), expected);
    assert!(
        info(to, "commandstats").contains("cmdstat_asking:calls="),
        "no ASKING reached the target"
    );
    // Writing mid-way follows ASK too (the temporary key goes to the
    // target, and is renamed there); the source opened before sees the change.
    put(&path, &uri, true).unwrap();
    let err = source.read_exact_at(key.offset, &mut buf).unwrap_err();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::Changed), "{err}");
    let source = open(&uri);
    assert_eq!(read_all(&source).unwrap(), expected);

    // Done: every key of the slot moved, the slot assigned to the target (MOVED).
    let Resp::Array(rest) = cmd(from, &[b"CLUSTER", b"GETKEYSINSLOT", slot_arg, b"1000"]) else {
        panic!()
    };
    for k in rest {
        let Resp::Bulk(Some(k)) = k else { panic!() };
        migrate(&k);
    }
    for &p in &cluster.ports {
        ok(p, &[b"CLUSTER", b"SETSLOT", slot_arg, b"NODE", &cluster.id(to)]);
    }
    assert_eq!(cluster.owner_of_slot(slot), to);
    assert!(!info(from, "errorstats").contains("errorstat_MOVED"));
    source.read_exact_at(key.offset, &mut buf).unwrap();
    assert!(buf == expected[key.offset as usize..(key.offset + key.len) as usize]);
    assert!(info(from, "errorstats").contains("errorstat_MOVED"), "the source was not redirected");
    assert_eq!(read_all(&source).unwrap(), expected);
    // The writer follows the move too.
    put(&path, &uri, true).unwrap();
    assert_eq!(read_all(&open(&uri)).unwrap(), expected);
    assert_eq!(cluster.owner(&key.name), to);
}

#[test]
fn a_dead_or_stalled_node_is_a_typed_error_within_the_deadline() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_local(dir.path(), "a.tensors", &sizes(), 4);
    let uri = cluster.uri("dead");
    put(&path, &uri, false).unwrap();
    let options = RedisOptions {
        retry: RetryPolicy::new(2, Duration::from_millis(10)),
        io_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        ..RedisOptions::default()
    };
    let source = ClusterSource::open(&uri, options).unwrap();
    // Not the seed node, so that the map can still be asked for.
    let victim = cluster.ports[1];

    // Stalled: every read from it times out.
    cluster.signal(victim, "STOP");
    let started = Instant::now();
    let source = Arc::new(source);
    let s = Arc::clone(&source);
    let err = within(Duration::from_secs(20), move || read_all(&*s).unwrap_err());
    let message = err.to_string();
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(message.contains(&format!("127.0.0.1:{victim}")), "{message}");
    assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{message}");
    cluster.signal(victim, "CONT");

    // Dead: connections are refused.
    cluster.signal(victim, "KILL");
    let started = Instant::now();
    let s = Arc::clone(&source);
    let err = within(Duration::from_secs(20), move || read_all(&*s).unwrap_err());
    let message = err.to_string();
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(message.contains(&format!("node 127.0.0.1:{victim}")), "{message}");
    assert_eq!(err.store_kind(), Some(StoreErrorKind::RetriesExhausted), "{message}");
    // Opening fails the same way.
    let err =
        within(Duration::from_secs(20), move || ClusterSource::open(&uri, options).unwrap_err());
    assert!(err.to_string().contains(&format!("127.0.0.1:{victim}")), "{err}");
}

#[test]
fn tzr_copies_inspects_and_verifies_cluster_files() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = write_local(dir.path(), "a.tensors", &[10, 20000, 3], 5);
    let uri = cluster.uri("cli/a");
    let tzr = |args: &[&str]| Command::new(crate::common::tzr_bin()).args(args).output().unwrap();
    let out = tzr(&["copy", path.to_str().unwrap(), &uri]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = tzr(&["verify", &uri]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("3 tensors verified")
    );
    let out = tzr(&["inspect", &uri]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("3 tensors"));
    // Back to a local file: the same bytes (the end marker is rewritten).
    let back = dir.path().join("back.tensors");
    let out = tzr(&["copy", &uri, back.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let copied = std::fs::read(&back).unwrap();
    assert_eq!(copied[..copied.len().min(bytes.len() - 8)], bytes[..bytes.len() - 8]);
    let out = tzr(&["copy", "--force", back.to_str().unwrap(), &uri]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // TLS is understood; nothing listens there.
    let out = tzr(&["inspect", "rediss+cluster://127.0.0.1:1/x"]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("rediss+cluster://127.0.0.1:1/x")
    );
}

#[test]
fn a_tls_cluster_with_a_password_round_trips() {
    use tensorizer_native::store::Location;
    use tensorizer_native::store::redis::{TlsOptions, write_cluster_target};
    let Some(pki) = crate::tls::Pki::make() else { return };
    let certs = pki.path("");
    let Some(cluster) = Cluster::start_with(&[
        ("TZR_CLUSTER_TLS", certs.as_path()),
        ("TZR_CLUSTER_PASSWORD", Path::new("c1uster")),
    ]) else {
        return;
    };
    let target = |uri: &str| match Location::parse(uri).unwrap() {
        Location::RedisCluster(t) => t,
        other => panic!("{other:?}"),
    };
    let uri = format!("rediss+cluster://:c1uster@127.0.0.1:{}/secure/model", cluster.ports[0]);
    let trusted = TlsOptions::ca_file(pki.path("ca.pem"));
    let local =
        Reader::open(crate::common::vectors_dir().join("v1_flat.tensors"), ReadOptions::default())
            .unwrap();
    write_cluster_target(target(&uri), &local, false, &RedisOptions::default(), &trusted).unwrap();
    let source =
        ClusterSource::open_target(target(&uri), RedisOptions::default(), &trusted).unwrap();
    let file = std::fs::read(crate::common::vectors_dir().join("v1_flat.tensors")).unwrap();
    let mut back = vec![0u8; source.len() as usize];
    source.read_exact_at(0, &mut back).unwrap();
    assert_eq!(back, file[..back.len()]);
    let quick = RedisOptions {
        retry: RetryPolicy::new(1, Duration::from_millis(10)),
        ..RedisOptions::default()
    };
    let wrong = format!("rediss+cluster://:nope@127.0.0.1:{}/secure/model", cluster.ports[0]);
    let err = ClusterSource::open_target(target(&wrong), quick, &trusted).unwrap_err();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::PermissionDenied), "{err}");
    assert!(!err.to_string().contains("nope"), "{err}");
}
