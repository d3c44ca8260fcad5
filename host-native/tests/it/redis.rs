//! Redis as a source and a sink, against a real redis-server on 127.0.0.1:
//! every vector round-trips, the keys are the ones tensorizer's `to_redis`
//! writes, broken layouts and dead servers are clear errors, and replacing
//! a file is all or nothing.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::error::StoreErrorKind;
use tensorizer_native::source::TransferLimits;
use tensorizer_native::store::redis::{
    RedisOptions, RedisSource, RetryPolicy, write_redis, write_redis_target,
};
use tensorizer_native::{
    Error, MemorySource, RangeSource, ReadOptions, Reader, WriteOptions, write_file,
};

use crate::common::vectors;
use crate::servers::{Drip, FakeRedis, Fault, FaultProxy, RedisServer, within};

/// Tensors larger than this are not loaded (the 4 GiB meta tensor of the
/// v5 vectors).
const LOAD_LIMIT: u64 = 64 << 20;

/// A reply, as the test client sees it.
#[derive(Debug, PartialEq)]
enum Resp {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Self>),
}

/// Runs one command on a fresh connection (a test-only client, independent
/// of the one under test).
fn cmd(server: &RedisServer, args: &[&[u8]]) -> Resp {
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
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
        "-" => Resp::Error(rest.to_string()),
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

/// Key names matching `pattern`, sorted.
fn keys(server: &RedisServer, pattern: &str) -> Vec<Vec<u8>> {
    let Resp::Array(items) = cmd(server, &[b"KEYS", pattern.as_bytes()]) else {
        panic!("KEYS failed")
    };
    let mut names: Vec<Vec<u8>> = items
        .into_iter()
        .map(|i| match i {
            Resp::Bulk(Some(n)) => n,
            other => panic!("{other:?}"),
        })
        .collect();
    names.sort();
    names
}

fn get(server: &RedisServer, key: &[u8]) -> Vec<u8> {
    match cmd(server, &[b"GET", key]) {
        Resp::Bulk(Some(v)) => v,
        other => panic!("GET {:?}: {other:?}", String::from_utf8_lossy(key)),
    }
}

/// Loads every tensor up to [`LOAD_LIMIT`] bytes.
fn load<S: RangeSource>(reader: &Reader<S>) -> tensorizer_native::Result<Vec<Vec<u8>>> {
    let mut bufs: Vec<Vec<u8>> = reader
        .entries()
        .iter()
        .map(
            |e| if e.nbytes() <= LOAD_LIMIT { vec![0xAA; e.nbytes() as usize] } else { Vec::new() },
        )
        .collect();
    let jobs = bufs
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| reader.entries()[*i].nbytes() <= LOAD_LIMIT)
        .map(|(i, b)| (i, b.as_mut_slice()))
        .collect();
    reader.load_many(jobs)?;
    Ok(bufs)
}

fn open(uri: &str) -> RedisSource {
    RedisSource::open(uri, RedisOptions::default()).unwrap()
}

fn local(name: &str) -> Reader {
    let v = vectors().into_iter().find(|v| v.name() == name).unwrap();
    Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap()
}

/// Tensors of `sizes` bytes each, written to `dir/name` in our layout.
fn write_local(dir: &std::path::Path, name: &str, sizes: &[usize]) -> Vec<u8> {
    write_seeded(dir, name, sizes, 0)
}

/// As [`write_local`], with data that depends on `seed`.
fn write_seeded(dir: &std::path::Path, name: &str, sizes: &[usize], seed: u8) -> Vec<u8> {
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
    write_file(dir.join(name), &input, &WriteOptions::default()).unwrap();
    std::fs::read(dir.join(name)).unwrap()
}

#[test]
fn every_vector_round_trips_through_redis() {
    let Some(server) = RedisServer::start() else { return };
    for v in vectors() {
        let name = v.name();
        let file = std::fs::read(&v.path).unwrap();
        let local =
            Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap();
        let uri = server.uri(&format!("vectors/{name}"));
        write_redis(&uri, &local, false).unwrap();

        // The keys are the file without its 8-byte end marker, one header
        // key plus two keys per tensor.
        assert_eq!(
            keys(&server, &format!("vectors/{name}:*")).len(),
            1 + 2 * local.entries().len(),
            "{name}"
        );
        let source = open(&uri);
        assert_eq!(source.len(), file.len() as u64 - 8, "{name}");
        let mut all = vec![0u8; source.len() as usize];
        source.read_exact_at(0, &mut all).unwrap();
        assert!(all == file[..all.len()], "{name}: bytes differ");

        let expected = load(&local).unwrap();
        for readers in [1, 4] {
            let options = ReadOptions { num_readers: readers, verify_hash: true, key: v.key() };
            let remote = Reader::new(open(&uri), options).unwrap();
            assert!(load(&remote).unwrap() == expected, "{name} with {readers} readers");
        }
        let options = ReadOptions { verify_hash: true, key: v.key(), ..ReadOptions::default() };
        assert!(
            load(&tensorizer_native::store::open_reader(&uri, options).unwrap()).unwrap()
                == expected,
            "{name} via open_uri"
        );
    }
    assert!(keys(&server, "*.tmp-*").is_empty(), "temporary keys left behind");
}

#[test]
fn keys_match_tensorizer_to_redis() {
    let Some(server) = RedisServer::start() else { return };
    // What tensorizer 2.12.1's to_redis wrote for this vector (names, offsets, lengths).
    let tensorizer: &[(&str, u64)] = &[
        ("header:0", 262217),
        ("real_f32:262217", 81),
        ("real_f32:262298", 16),
        ("meta_f32:262314", 85),
        ("meta_f32:262399", 0),
        ("real_i64:262399", 81),
        ("real_i64:262480", 16),
        ("meta_i64:262496", 81),
        ("meta_i64:262577", 0),
        ("after:262577", 78),
        ("after:262655", 8),
    ];
    let file = std::fs::read(crate::common::vectors_dir().join("v4_meta.tensors")).unwrap();
    write_redis(&server.uri("tz/v4_meta"), &local("v4_meta.tensors"), false).unwrap();
    let mut expected: Vec<Vec<u8>> =
        tensorizer.iter().map(|(k, _)| format!("tz/v4_meta:{k}").into_bytes()).collect();
    expected.sort();
    assert_eq!(keys(&server, "tz/v4_meta:*"), expected);
    for (suffix, len) in tensorizer {
        let key = format!("tz/v4_meta:{suffix}");
        let offset: usize = suffix.rsplit(':').next().unwrap().parse().unwrap();
        assert!(get(&server, key.as_bytes()) == file[offset..offset + *len as usize], "{key}");
        // The expiry of the temporary key was removed.
        assert_eq!(cmd(&server, &[b"TTL", key.as_bytes()]), Resp::Int(-1), "{key}");
    }
    // Structured names are stored serialized, as tensorizer does.
    write_redis(&server.uri("tz/v1_nested"), &local("v1_nested.tensors"), false).unwrap();
    let first = get(&server, b"tz/v1_nested:\x1e[\"model\",\"layers\",0,\"w\"]:262217");
    assert_eq!(first.len(), 102);
}

#[test]
fn reads_span_key_boundaries() {
    let Some(server) = RedisServer::start() else { return };
    let file = std::fs::read(crate::common::vectors_dir().join("v1_flat.tensors")).unwrap();
    let uri = server.uri("spans");
    write_redis(&uri, &local("v1_flat.tensors"), false).unwrap();
    let source = open(&uri);
    assert_eq!(source.keys().len(), 29); // 31 keys, 2 of them empty
    let len = source.len();
    for key in &source.keys()[1..] {
        let b = key.offset;
        for (start, end) in
            [(b - 1, b + 1), (b.saturating_sub(100), (b + 100).min(len)), (b - 1, b)]
        {
            let mut buf = vec![0u8; (end - start) as usize];
            source.read_exact_at(start, &mut buf).unwrap();
            assert!(buf == file[start as usize..end as usize], "{start}..{end}");
        }
    }
    // Arbitrary ranges, many spanning several keys.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..300 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let start = (x >> 33) % len;
        let end = (start + 1 + (x >> 7) % 2048).min(len);
        let mut buf = vec![0u8; (end - start) as usize];
        source.read_exact_at(start, &mut buf).unwrap();
        assert!(buf == file[start as usize..end as usize], "{start}..{end}");
    }
    let mut past = [0u8; 2];
    assert!(source.read_exact_at(len - 1, &mut past).is_err());

    // One key larger than a single GETRANGE, read whole and in pieces.
    let dir = tempfile::tempdir().unwrap();
    let big = write_local(dir.path(), "big.tensors", &[20 << 20, 3, 5 << 20]);
    let uri = server.uri("big");
    write_redis(
        &uri,
        &Reader::open(dir.path().join("big.tensors"), ReadOptions::default()).unwrap(),
        false,
    )
    .unwrap();
    let source = open(&uri);
    let mut all = vec![0u8; source.len() as usize];
    source.read_exact_at(0, &mut all).unwrap();
    assert!(all == big[..all.len()]);
}

#[test]
fn missing_and_broken_layouts_are_clear_errors() {
    let Some(server) = RedisServer::start() else { return };
    let uri = server.uri("nothing/here");
    let err = RedisSource::open(&uri, RedisOptions::default()).unwrap_err().to_string();
    assert!(err.contains("no keys under") && err.contains(&uri), "{err}");
    let err = tensorizer_native::store::open_reader(&server.uri(""), ReadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("no key prefix"), "{err}");

    // A missing data key: the gap is named by its byte range.
    let uri = server.uri("gap");
    write_redis(&uri, &local("v1_flat.tensors"), false).unwrap();
    assert_eq!(cmd(&server, &[b"DEL", b"gap:f32_2x3:262301"]), Resp::Int(1));
    let err = RedisSource::open(&uri, RedisOptions::default()).unwrap_err().to_string();
    assert!(
        err.contains(&uri) && err.contains("bytes 262301..262325") && err.contains("missing"),
        "{err}"
    );

    // An extra key overlapping another; keys without an integer offset are ignored.
    let uri = server.uri("overlap");
    write_redis(&uri, &local("v1_flat.tensors"), false).unwrap();
    assert_eq!(cmd(&server, &[b"SET", b"overlap:notes:about", b"x"]), Resp::Status("OK".into()));
    assert_eq!(open(&uri).len(), 263693);
    assert_eq!(cmd(&server, &[b"SET", b"overlap:junk:262300", b"xyz"]), Resp::Status("OK".into()));
    let err = RedisSource::open(&uri, RedisOptions::default()).unwrap_err().to_string();
    assert!(err.contains("overlaps") && err.contains("262300"), "{err}");

    // Glob characters in a prefix match only themselves.
    write_redis(&server.uri("ab"), &local("v1_module_root.tensors"), false).unwrap();
    write_redis(&server.uri("a*"), &local("v1_list.tensors"), false).unwrap();
    assert_eq!(open(&server.uri("a*")).len(), 263157 - 8);
    assert_eq!(open(&server.uri("ab")).len(), 262419 - 8);

    // A key of the wrong type.
    assert_eq!(cmd(&server, &[b"RPUSH", b"wrongtype:header:0", b"x"]), Resp::Int(1));
    let err = RedisSource::open(&server.uri("wrongtype"), RedisOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("WRONGTYPE"), "{err}");
}

/// A source whose reads past `limit` fail.
struct FailPast {
    inner: MemorySource,
    limit: u64,
}

impl RangeSource for FailPast {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> tensorizer_native::Result<()> {
        if offset + buf.len() as u64 > self.limit {
            return Err(Error::Invalid("injected read failure".into()));
        }
        self.inner.read_exact_at(offset, buf)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[test]
fn overwrite_needs_force_and_replaces_all_or_nothing() {
    let Some(server) = RedisServer::start() else { return };
    let uri = server.uri("model");
    let big = local("v2_dtypes.tensors");
    write_redis(&uri, &big, false).unwrap();
    let big_keys = keys(&server, "model:*");
    assert_eq!(big_keys.len(), 1 + 2 * 43);

    let small = local("v1_module_root.tensors");
    let err = write_redis(&uri, &small, false).unwrap_err().to_string();
    assert!(err.contains("already holds a file") && err.contains("force"), "{err}");
    assert_eq!(keys(&server, "model:*"), big_keys);

    write_redis(&uri, &small, true).unwrap();
    assert_eq!(keys(&server, "model:*").len(), 5, "the larger file's keys are gone");
    let reader =
        Reader::new(open(&uri), ReadOptions { verify_hash: true, ..ReadOptions::default() })
            .unwrap();
    assert_eq!(load(&reader).unwrap(), load(&small).unwrap());

    // A write that fails part-way leaves the previous file and no temporary keys.
    let bytes = std::fs::read(crate::common::vectors_dir().join("v2_dtypes.tensors")).unwrap();
    let failing = FailPast { inner: MemorySource::new(bytes, "v2_dtypes.tensors"), limit: 263_000 };
    let failing = Reader::new(failing, ReadOptions::default()).unwrap();
    let err = write_redis(&uri, &failing, true).unwrap_err().to_string();
    assert!(err.contains("injected"), "{err}");
    assert_eq!(keys(&server, "model:*").len(), 5);
    assert_eq!(
        load(&Reader::new(open(&uri), ReadOptions::default()).unwrap()).unwrap(),
        load(&small).unwrap()
    );
    assert!(keys(&server, "model.tmp-*").is_empty(), "temporary keys left behind");

    // The same when the source fails inside a value streamed in pieces.
    let dir = tempfile::tempdir().unwrap();
    let bytes = write_local(dir.path(), "big.tensors", &[1000, 20 << 20]);
    let failing = FailPast { inner: MemorySource::new(bytes, "big.tensors"), limit: 12 << 20 };
    let failing = Reader::new(failing, ReadOptions::default()).unwrap();
    let err = write_redis(&uri, &failing, true).unwrap_err().to_string();
    assert!(err.contains("injected"), "{err}");
    assert_eq!(keys(&server, "model:*").len(), 5);
    assert!(keys(&server, "model.tmp-*").is_empty(), "temporary keys left behind");
}

#[test]
fn a_read_cut_again_and_again_resumes_where_it_was_cut() {
    // Every connection is cut after 3 MiB of replies; a 24 MiB read with
    // two attempts can only finish by keeping what each connection got.
    let Some(server) = RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let expected = write_local(dir.path(), "cut.tensors", &[8 << 20; 3]);
    let uri = server.uri("cut");
    write_redis(
        &uri,
        &Reader::open(dir.path().join("cut.tensors"), ReadOptions::default()).unwrap(),
        false,
    )
    .unwrap();
    let proxy = FaultProxy::start(server.port, Fault::ResetEachAfter(3 << 20));
    let options = RedisOptions {
        retry: RetryPolicy::new(2, Duration::from_millis(10)),
        ..RedisOptions::default()
    };
    let source =
        RedisSource::open(&format!("redis://127.0.0.1:{}/cut", proxy.port), options).unwrap();
    let len = source.len() as usize;
    let got = within(Duration::from_secs(60), move || {
        let mut got = vec![0u8; len];
        source.read_exact_at(0, &mut got).map(|()| got)
    })
    .unwrap();
    assert!(got == expected[..len], "the bytes read through the cuts differ");
    assert!(
        proxy.connections.load(std::sync::atomic::Ordering::Relaxed) >= 8,
        "the proxy cut too little"
    );
}

#[test]
fn a_stalled_or_killed_server_is_an_error_not_a_hang() {
    let Some(mut server) = RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    write_local(dir.path(), "big.tensors", &[4 << 20; 6]);
    let uri = server.uri("big");
    write_redis(
        &uri,
        &Reader::open(dir.path().join("big.tensors"), ReadOptions::default()).unwrap(),
        false,
    )
    .unwrap();
    let options = RedisOptions {
        retry: RetryPolicy::new(2, Duration::from_millis(10)),
        io_timeout: Duration::from_millis(300),
        ..RedisOptions::default()
    };

    // Stalled: every read times out, retries are bounded.
    let source = RedisSource::open(&uri, options).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    source.read_exact_at(0, &mut buf).unwrap();
    server.signal("STOP");
    let started = Instant::now();
    let err = source.read_exact_at(1 << 20, &mut buf).unwrap_err().to_string();
    server.signal("CONT");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(
        err.contains(&uri) && err.contains("sent nothing for a whole RedisOptions::io_timeout"),
        "{err}"
    );

    // Killed while four readers load in a loop: the load fails, promptly.
    let reader = Reader::new(
        RedisSource::open(&uri, options).unwrap(),
        ReadOptions { num_readers: 4, ..Default::default() },
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = loop {
            if let Err(e) = load(&reader) {
                break e.to_string();
            }
        };
        let _ = tx.send(outcome);
    });
    std::thread::sleep(Duration::from_millis(300));
    server.kill();
    let err =
        rx.recv_timeout(Duration::from_secs(30)).expect("the load hung after the server died");
    assert!(err.contains(&uri) && err.contains("bytes "), "{err}");
}

/// The first argument of a command, upper-cased.
fn command_name(args: &[Vec<u8>]) -> String {
    args.first().map(|a| String::from_utf8_lossy(a).to_ascii_uppercase()).unwrap_or_default()
}

#[test]
fn a_scan_that_never_ends_is_an_error_not_a_hang() {
    // A cursor that never comes back to 0, with no keys, or with the same keys each time.
    fn no_keys(args: &[Vec<u8>]) -> (Vec<u8>, bool) {
        match command_name(args).as_str() {
            "DBSIZE" => (b":5\r\n".to_vec(), false),
            "SCAN" => (b"*2\r\n$2\r\n17\r\n*0\r\n".to_vec(), false),
            _ => (b"$-1\r\n".to_vec(), false),
        }
    }
    fn same_keys(args: &[Vec<u8>]) -> (Vec<u8>, bool) {
        match command_name(args).as_str() {
            "DBSIZE" => (b":2\r\n".to_vec(), false),
            "SCAN" => {
                (b"*2\r\n$1\r\n9\r\n*2\r\n$10\r\np:header:0\r\n$5\r\np:x:9\r\n".to_vec(), false)
            }
            _ => (b"$-1\r\n".to_vec(), false),
        }
    }
    for answer in [no_keys as fn(&[Vec<u8>]) -> (Vec<u8>, bool), same_keys] {
        let fake = FakeRedis::start(answer, None);
        let uri = fake.uri("p");
        let started = Instant::now();
        let err = within(Duration::from_secs(20), move || {
            RedisSource::open(&uri, RedisOptions::default()).unwrap_err()
        });
        let text = err.to_string();
        assert!(text.contains(&fake.uri("p")) && text.contains("SCAN did not finish"), "{text}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        // Final: listed once, not retried.
        assert!(fake.commands.load(std::sync::atomic::Ordering::Relaxed) < 2000);
    }
}

/// A fake server holding one 100,000-byte key `p:header:0`, whose
/// `GETRANGE` replies it sends slowly.
fn one_key_trickling(args: &[Vec<u8>]) -> (Vec<u8>, bool) {
    match command_name(args).as_str() {
        "DBSIZE" => (b":1\r\n".to_vec(), false),
        "SCAN" => (b"*2\r\n$1\r\n0\r\n*1\r\n$10\r\np:header:0\r\n".to_vec(), false),
        "STRLEN" => (b":100000\r\n".to_vec(), false),
        "GETRANGE" => {
            let n = |i: usize| String::from_utf8_lossy(&args[i]).parse::<usize>().unwrap();
            let len = n(3) + 1 - n(2);
            let mut reply = format!("${len}\r\n").into_bytes();
            reply.extend(std::iter::repeat_n(b'x', len));
            reply.extend_from_slice(b"\r\n");
            (reply, true)
        }
        _ => (b"$-1\r\n".to_vec(), false),
    }
}

#[test]
fn a_trickling_redis_server_is_cut_off_by_the_minimum_rate() {
    let fake = FakeRedis::start(
        one_key_trickling,
        Some(Drip { bytes: 1, gap: Duration::from_millis(100) }),
    );
    let uri = fake.uri("p");
    let options = RedisOptions {
        retry: RetryPolicy::new(2, Duration::from_millis(5)),
        limits: TransferLimits {
            min_rate: 1 << 10,
            rate_window: Duration::from_secs(1),
            deadline: None,
        },
        ..RedisOptions::default()
    };
    let started = Instant::now();
    let err = within(Duration::from_secs(20), move || {
        let source = RedisSource::open(&uri, options)?;
        let mut buf = vec![0u8; 4000];
        source.read_exact_at(0, &mut buf)
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(err.store_kind() == Some(StoreErrorKind::TimedOut), "{err:?}");
    assert!(
        text.contains(&fake.uri("p"))
            && text.contains("bytes 0..4000")
            && text.contains("min_rate"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());

    // A deadline is final.
    let uri = fake.uri("p");
    let options = RedisOptions {
        limits: TransferLimits {
            min_rate: 0,
            deadline: Some(Duration::from_millis(500)),
            ..TransferLimits::default()
        },
        ..options
    };
    let started = Instant::now();
    let err = within(Duration::from_secs(20), move || {
        let mut buf = vec![0u8; 4000];
        RedisSource::open(&uri, options)?.read_exact_at(0, &mut buf)
    })
    .unwrap_err();
    assert!(err.to_string().contains("deadline"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

#[test]
fn a_file_replaced_after_opening_is_an_error_not_a_mix() {
    let Some(server) = RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Same layout (every key the same length), different bytes.
    let sizes = [3000, 5000, 7000];
    write_seeded(dir.path(), "a.tensors", &sizes, 0);
    write_seeded(dir.path(), "b.tensors", &sizes, 0x5A);
    let a = Reader::open(dir.path().join("a.tensors"), ReadOptions::default()).unwrap();
    let b = Reader::open(dir.path().join("b.tensors"), ReadOptions::default()).unwrap();
    let uri = server.uri("swap");
    write_redis(&uri, &a, false).unwrap();

    let no_verify = ReadOptions { verify_hash: false, ..ReadOptions::default() };
    let reader = Reader::new(open(&uri), no_verify.clone()).unwrap();
    write_redis(&uri, &b, true).unwrap();
    let err = load(&reader).unwrap_err().to_string();
    assert!(err.contains(&uri) && err.contains("changed during the read"), "{err}");
    // Opened again, it is the new file.
    let again = Reader::new(open(&uri), no_verify.clone()).unwrap();
    assert_eq!(load(&again).unwrap(), load(&b).unwrap());

    // A file without the marker (written key by key, as tensorizer does) reads as before...
    let marker = b"swap.tzr-generation";
    assert_eq!(cmd(&server, &[b"DEL", marker]), Resp::Int(1));
    let unmarked = Reader::new(open(&uri), no_verify).unwrap();
    assert_eq!(load(&unmarked).unwrap(), load(&b).unwrap());
    // ...and a marker that appears later (a write_redis replacing it) is a change too.
    assert_eq!(cmd(&server, &[b"SET", marker, b"0123"]), Resp::Status("OK".into()));
    let err = load(&unmarked).unwrap_err().to_string();
    assert!(err.contains("changed during the read"), "{err}");
}

#[test]
fn rediss_with_credentials_round_trips_and_refusals_are_clear() {
    let Some(pki) = crate::tls::Pki::make() else { return };
    let tls_port = RedisServer::free_port();
    let (cert, key, ca) = (pki.path("server.pem"), pki.path("server.key"), pki.path("ca.pem"));
    let Some(server) = RedisServer::start_with(&[
        "--requirepass",
        "s3cret:@/",
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
        "--tls-ca-cert-file",
        ca.to_str().unwrap(),
        "--tls-auth-clients",
        "no",
    ]) else {
        return;
    };
    use tensorizer_native::store::tls::TlsOptions;
    use tensorizer_native::store::{Location, RedisTarget};
    let target = |uri: &str| match Location::parse(uri).unwrap() {
        Location::Redis(t) => t,
        other => panic!("{other:?}"),
    };
    let trusted = TlsOptions::ca_file(&ca);
    let uri = format!("rediss://default:s3cret%3A%40%2F@127.0.0.1:{tls_port}/secure");
    let t: RedisTarget = target(&uri);
    assert!(t.tls && t.password.as_deref() == Some("s3cret:@/"));
    let local = local("v1_flat.tensors");
    write_redis_target(t.clone(), &local, false, &RedisOptions::default(), &trusted).unwrap();
    let source = RedisSource::open_target(t.clone(), RedisOptions::default(), &trusted).unwrap();
    let file = std::fs::read(crate::common::vectors_dir().join("v1_flat.tensors")).unwrap();
    // (The stored file ends before the local file's last 8 bytes, as
    // tensorizer's to_redis stores it.)
    let mut back = vec![0u8; source.len() as usize];
    source.read_exact_at(0, &mut back).unwrap();
    assert_eq!(back, file[..back.len()]);
    // The same keys over plain TCP with the password alone (no user).
    let plain = target(&format!("redis://:s3cret%3A%40%2F@127.0.0.1:{}/secure", server.port));
    let again =
        RedisSource::open_target(plain, RedisOptions::default(), &TlsOptions::default()).unwrap();
    assert_eq!(again.len(), source.len());

    let quick = RedisOptions {
        retry: RetryPolicy::new(2, Duration::from_millis(10)),
        ..RedisOptions::default()
    };
    // A wrong password: refused at once, the password never shown.
    let wrong = target(&format!("rediss://:nope@127.0.0.1:{tls_port}/secure"));
    let err = RedisSource::open_target(wrong, quick, &trusted).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("WRONGPASS") && text.contains("REDISCLI_AUTH") && !text.contains("nope"),
        "{text}"
    );
    assert_eq!(err.store_kind(), Some(StoreErrorKind::PermissionDenied), "{text}");
    // No password: the server asks for one.
    let none = target(&format!("redis://127.0.0.1:{}/secure", server.port));
    let text =
        RedisSource::open_target(none, quick, &TlsOptions::default()).unwrap_err().to_string();
    assert!(text.contains("NOAUTH"), "{text}");
    // A certificate signed by a CA nobody named: refused, said as such.
    let untrusted =
        RedisSource::open_target(t.clone(), quick, &TlsOptions::ca_file(pki.path("server.pem")));
    let text = untrusted.unwrap_err().to_string();
    assert!(text.contains("certificate"), "{text}");
    // Verification off (CAInfo(allow_untrusted=True)) still speaks TLS.
    assert!(RedisSource::open_target(t, quick, &TlsOptions::insecure()).is_ok());
}
