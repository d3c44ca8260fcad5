//! Fault injection for every remote store: S3 (moto_server), Redis
//! (redis-server) and, with feature `cloud`, GCS (gcp-storage-emulator)
//! and Azure Blob (Azurite), each behind the fault-injecting
//! [`FaultProxy`]. A small model (512 KiB) is read through connections
//! that are cut, stalled, answered `503`, or trickled, and must load the
//! bytes the local reader loads, or fail with a typed error in bounded
//! time, never hang.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::error::StoreErrorKind;
use tensorizer_native::source::TransferLimits;
use tensorizer_native::store::RetryPolicy;
use tensorizer_native::store::redis::{RedisOptions, RedisSource, write_redis};
use tensorizer_native::store::s3;
use tensorizer_native::{RangeSource, ReadOptions, Reader, WriteOptions, write_file};

use crate::s3::Moto;
use crate::servers::{FakeRedis, Fault, FaultProxy, RedisServer, within};

/// Tensors of the model read through the faults.
const TENSORS: usize = 4;
/// Bytes of each tensor.
const TENSOR_BYTES: usize = 128 << 10;
/// Longest a read through a fault may take before the test calls it a
/// hang: generous, for a busy 2-core machine.
const HANG: Duration = Duration::from_secs(90);

/// The knobs every store maps onto its own options.
#[derive(Clone, Copy)]
struct Knobs {
    retry: RetryPolicy,
    /// The longest silence of one connection (read timeout, rate window).
    stall: Duration,
    limits: TransferLimits,
}

impl Knobs {
    /// Short timeouts, a few quick retries.
    fn short() -> Self {
        Self {
            retry: RetryPolicy {
                attempts: 4,
                backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(50),
                give_up_after: Some(Duration::from_secs(20)),
            },
            stall: Duration::from_millis(300),
            limits: TransferLimits {
                min_rate: 8 << 10,
                rate_window: Duration::from_millis(300),
                deadline: None,
            },
        }
    }
}

/// The two files every store holds.
#[derive(Clone, Copy)]
enum Object {
    /// [`TENSORS`] tensors of [`TENSOR_BYTES`], loaded through a `Reader`.
    Small,
    /// [`BIG_TENSORS`] tensors of [`BIG_TENSOR_BYTES`], read in one request.
    Big,
}

impl Object {
    /// The object's name under `faults` (`faults/m`, `faults-big`, ...).
    fn name(self) -> &'static str {
        match self {
            Self::Small => "m",
            Self::Big => "big",
        }
    }
}

/// Tensors of [`Object::Big`].
const BIG_TENSORS: usize = 4;
/// Bytes of each tensor of [`Object::Big`].
const BIG_TENSOR_BYTES: usize = 3 << 19;

/// Opens an object through a proxy on the given port, under the knobs.
type Opener = Arc<
    dyn Fn(u16, Knobs, Object) -> tensorizer_native::Result<Box<dyn RangeSource>> + Send + Sync,
>;

/// One store holding both objects: its server's port and how to open them.
struct Remote {
    name: &'static str,
    port: u16,
    open: Opener,
    /// What the local reader loads from [`Object::Small`].
    expected: Vec<Vec<u8>>,
    /// The bytes of [`Object::Big`].
    big: Vec<u8>,
}

/// What one read through a fault came to.
struct Outcome {
    got: tensorizer_native::Result<Vec<Vec<u8>>>,
    connections: usize,
    elapsed: Duration,
}

impl Remote {
    /// Loads the model with two readers through `fault`.
    fn read(&self, fault: Fault, knobs: Knobs) -> Outcome {
        let proxy = FaultProxy::start(self.port, fault);
        let (open, port) = (self.open.clone(), proxy.port);
        let started = Instant::now();
        let got = within(HANG, move || {
            let source = open(port, knobs, Object::Small)?;
            let reader =
                Reader::new(source, ReadOptions { num_readers: 2, ..ReadOptions::default() })?;
            load(&reader)
        });
        Outcome {
            got,
            connections: proxy.connections.load(Ordering::Relaxed),
            elapsed: started.elapsed(),
        }
    }

    /// `fault` is survived: the bytes are the local reader's.
    fn survives(&self, what: &str, fault: Fault, knobs: Knobs) -> Outcome {
        let outcome = self.read(fault, knobs);
        match &outcome.got {
            Ok(got) => {
                assert!(*got == self.expected, "{} ({what}): the bytes read differ", self.name)
            }
            Err(e) => panic!("{} ({what}): {e}", self.name),
        }
        outcome
    }

    /// `fault` is a typed error of `kind`, naming the object.
    fn fails(&self, what: &str, fault: Fault, knobs: Knobs, kind: StoreErrorKind) -> Outcome {
        let outcome = self.read(fault, knobs);
        let Err(err) = &outcome.got else {
            panic!("{} ({what}): read through a permanent fault", self.name)
        };
        let text = err.to_string();
        eprintln!("{} ({what}) after {:?}: {text}", self.name, outcome.elapsed);
        assert_eq!(err.store_kind(), Some(kind), "{} ({what}): {text}", self.name);
        assert!(
            text.contains("faults"),
            "{} ({what}): the error names the object: {text}",
            self.name
        );
        for internal in
            ["os error", "max_retries", "Error performing", "fill whole buffer", "http://"]
        {
            assert!(
                !text.contains(internal),
                "{} ({what}): the error shows internals ({internal}): {text}",
                self.name
            );
        }
        outcome
    }

    /// Case 1: A connection reset mid-body: the read completes on another.
    fn resets(&self) {
        for (what, fault) in [
            ("first connection reset after 200 KiB", Fault::ResetFirstAfter(200 << 10)),
            ("first connection reset after 20 KiB", Fault::ResetFirstAfter(20 << 10)),
        ] {
            let outcome = self.survives(what, fault, Knobs::short());
            assert!(
                outcome.connections > 1,
                "{} ({what}): {} connection(s)",
                self.name,
                outcome.connections
            );
        }
    }

    /// Case 2: A stall mid-body: abandoned for a new connection; a stall on
    /// every connection is a timeout, in bounded time.
    fn stalls(&self) {
        let what = "first connection silent after 96 KiB";
        let outcome = self.survives(what, Fault::StallFirstAfter(96 << 10), Knobs::short());
        assert!(
            outcome.connections > 1,
            "{} ({what}): {} connection(s)",
            self.name,
            outcome.connections
        );
        let mut knobs = Knobs::short();
        knobs.retry.attempts = 3;
        knobs.retry.give_up_after = Some(Duration::from_secs(5));
        self.fails(
            "every connection silent after 96 KiB",
            Fault::StallEachAfter(96 << 10),
            knobs,
            StoreErrorKind::TimedOut,
        );
    }

    /// Case 3: `503`: retried while transient; retries exhausted when not.
    fn status_503(&self) {
        for first in [1, 3] {
            let what = format!("the first {first} connection(s) answered 503");
            let outcome = self.survives(&what, Fault::Status503First(first), Knobs::short());
            assert!(
                outcome.connections > first,
                "{} ({what}): {} connection(s)",
                self.name,
                outcome.connections
            );
        }
        self.fails(
            "every connection answered 503",
            Fault::Status503Always,
            Knobs::short(),
            StoreErrorKind::RetriesExhausted,
        );
    }

    /// Case 4: A transfer that trickles (64 KiB at once, then 8 KiB every
    /// 10 ms) but keeps moving is not cut off, though it takes longer than
    /// the retry policy's time limit.
    fn trickle(&self) {
        let mut knobs = Knobs::short();
        knobs.retry.attempts = 2;
        knobs.retry.give_up_after = Some(Duration::from_millis(200));
        let fault = Fault::Trickle { after: 64 << 10, chunk: 8 << 10, gap_ms: 10 };
        let outcome = self.survives("trickle", fault, knobs);
        let limit = knobs.retry.give_up_after.unwrap();
        assert!(
            outcome.elapsed > limit,
            "{}: the trickle took {:?}, not past {limit:?}",
            self.name,
            outcome.elapsed
        );
    }

    /// Case 5: Every connection trickles (128 KiB every 10 ms) and is cut
    /// after 2.5 MiB: each attempt keeps more than a MiB (Redis keeps its
    /// bytes a MiB or more at a time, hence 2.5), which does not use up a
    /// retry, so a 6 MiB read finishes with two attempts and a time limit
    /// on failing (100 ms) that it outlasts several times over.
    fn resumes(&self) {
        const WHAT: &str = "trickled and cut every 2.5 MiB";
        let mut knobs = Knobs::short();
        knobs.retry.attempts = 2;
        knobs.retry.give_up_after = Some(Duration::from_millis(100));
        let fault = Fault::TrickleThenReset { chunk: 128 << 10, gap_ms: 10, reset: 5 << 19 };
        let proxy = FaultProxy::start(self.port, fault);
        let (open, port) = (self.open.clone(), proxy.port);
        let started = Instant::now();
        let got = within(HANG, move || {
            let source = open(port, knobs, Object::Big)?;
            let mut got = vec![0u8; source.len() as usize];
            source.read_exact_at(0, &mut got).map(|()| got)
        })
        .unwrap_or_else(|e| panic!("{} ({WHAT}): {e}", self.name));
        let elapsed = started.elapsed();
        // Redis does not store the file's 8-byte end marker.
        let whole = got.len() + 8 >= self.big.len();
        assert!(
            whole && self.big.starts_with(&got),
            "{} ({WHAT}): the bytes read differ",
            self.name
        );
        let connections = proxy.connections.load(Ordering::Relaxed);
        assert!(connections >= 3, "{} ({WHAT}): {connections} connection(s) for 6 MiB", self.name);
        let limit = knobs.retry.give_up_after.unwrap();
        assert!(
            elapsed > limit,
            "{} ({WHAT}): the read took {elapsed:?}, not past {limit:?}",
            self.name
        );
        eprintln!("{} ({WHAT}): {elapsed:?}, {connections} connections", self.name);
    }

    fn all(&self) {
        self.resets();
        self.stalls();
        self.status_503();
        self.trickle();
        self.resumes();
    }
}

fn load<S: RangeSource>(reader: &Reader<S>) -> tensorizer_native::Result<Vec<Vec<u8>>> {
    let mut bufs: Vec<Vec<u8>> =
        reader.entries().iter().map(|e| vec![0; e.nbytes() as usize]).collect();
    reader.load_many(bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect())?;
    Ok(bufs)
}

/// Both objects, written to `dir` by our writer: their paths, what the
/// local reader loads from the small one, the bytes of the big one.
fn models(dir: &Path) -> (PathBuf, PathBuf, Vec<Vec<u8>>, Vec<u8>) {
    let small = model(dir, "m", TENSORS, TENSOR_BYTES);
    let expected = load(&Reader::open(&small, ReadOptions::default()).unwrap()).unwrap();
    let big = model(dir, "big", BIG_TENSORS, BIG_TENSOR_BYTES);
    let bytes = std::fs::read(&big).unwrap();
    (small, big, expected, bytes)
}

/// A file of `count` tensors of `size` bytes, `dir/name`.
fn model(dir: &Path, name: &str, count: usize, size: usize) -> PathBuf {
    let tensors: Vec<(TensorSpec, Vec<u8>)> = (0..count)
        .map(|i| {
            let data: Vec<u8> = (0..size as u32)
                .map(|b| (b.wrapping_mul(2654435761) >> 13) as u8 ^ i as u8)
                .collect();
            let spec = TensorSpec::state_dict(
                format!("t{i}").as_str(),
                Dtype::from_element(ElementType::U8),
                vec![data.len() as u64],
            );
            (spec, data)
        })
        .collect();
    let input: Vec<(TensorSpec, &[u8])> =
        tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
    let path = dir.join(name);
    write_file(&path, &input, &WriteOptions::default()).unwrap();
    path
}

#[test]
fn s3_reads_survive_resets_stalls_503s_and_trickles() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket("faults");
    let dir = tempfile::tempdir().unwrap();
    let (small, big_path, expected, big) = models(dir.path());
    let base = moto.options(moto.port);
    s3::upload(&small, "s3://faults/m", &base).unwrap();
    s3::upload(&big_path, "s3://faults/big", &base).unwrap();
    let open: Opener = Arc::new(move |port, knobs: Knobs, object: Object| {
        let mut options = base.clone();
        options.endpoint = Some(format!("http://127.0.0.1:{port}"));
        options.http.retry = knobs.retry;
        options.http.read_timeout = knobs.stall;
        options.http.limits = knobs.limits;
        Ok(Box::new(s3::open(&format!("s3://faults/{}", object.name()), &options)?)
            as Box<dyn RangeSource>)
    });
    Remote { name: "s3", port: moto.port, open, expected, big }.all();
}

/// Both objects written to `server` (prefixes `faults-m`, `faults-big`).
fn redis_remote(server: &RedisServer) -> Remote {
    let dir = tempfile::tempdir().unwrap();
    let (small, big_path, expected, big) = models(dir.path());
    for (path, object) in [(small, Object::Small), (big_path, Object::Big)] {
        let reader = Reader::open(&path, ReadOptions::default()).unwrap();
        write_redis(&server.uri(&format!("faults-{}", object.name())), &reader, false).unwrap();
    }
    let open: Opener = Arc::new(|port, knobs: Knobs, object: Object| {
        let options = RedisOptions {
            retry: knobs.retry,
            io_timeout: knobs.stall,
            limits: knobs.limits,
            ..RedisOptions::default()
        };
        let uri = format!("redis://127.0.0.1:{port}/faults-{}", object.name());
        Ok(Box::new(RedisSource::open(&uri, options)?) as Box<dyn RangeSource>)
    });
    Remote { name: "redis", port: server.port, open, expected, big }
}

#[test]
fn redis_reads_survive_resets_stalls_and_trickles() {
    let Some(server) = RedisServer::start() else { return };
    let remote = redis_remote(&server);
    remote.resets();
    remote.stalls();
    remote.trickle();
    remote.resumes();
}

#[test]
fn redis_servers_that_close_or_refuse_every_connection_are_errors_not_hangs() {
    let Some(server) = RedisServer::start() else { return };
    let remote = redis_remote(&server);
    // Every connection closed as its first reply arrives.
    let outcome = remote.fails(
        "every connection closed",
        Fault::ResetEachAfter(0),
        Knobs::short(),
        StoreErrorKind::RetriesExhausted,
    );
    assert!(
        outcome.connections > 1,
        "the closed connections were not retried: {}",
        outcome.connections
    );
    // A server that answers every command with a transient error.
    fn loading(_: &[Vec<u8>]) -> (Vec<u8>, bool) {
        (b"-LOADING Redis is loading the dataset in memory\r\n".to_vec(), false)
    }
    let fake = FakeRedis::start(loading, None);
    let remote = Remote { port: fake.port, ..remote };
    let outcome = remote.fails(
        "every command answered LOADING",
        Fault::Pass,
        Knobs::short(),
        StoreErrorKind::RetriesExhausted,
    );
    assert!(outcome.got.unwrap_err().to_string().contains("LOADING"));
    assert!(fake.commands.load(Ordering::Relaxed) > 1, "the LOADING answers were not retried");
}

#[cfg(feature = "cloud")]
mod cloud {
    //! GCS and Azure Blob through the faults (feature `cloud`).

    use std::sync::Arc;

    use tensorizer_native::RangeSource;
    use tensorizer_native::source::TransferLimits;
    use tensorizer_native::store::cloud::{self, CloudOptions};

    use super::{Knobs, Object, Opener, Remote, models};
    use crate::cloud::{Server, azurite, gcs};

    /// The store behind `options`, reached on `port` under `knobs`.
    fn via(gcs: bool, options: &CloudOptions, port: u16, knobs: Knobs) -> CloudOptions {
        let mut options = options.clone();
        let url = Some(format!("http://127.0.0.1:{port}"));
        if gcs {
            options.gcs_base_url = url;
        } else {
            options.azure_endpoint = url;
        }
        options.retry = knobs.retry;
        options.limits = TransferLimits { rate_window: knobs.stall, ..knobs.limits };
        options
    }

    fn remote(name: &'static str, server: &Server, base: CloudOptions) -> Remote {
        let gcs = name == "gs";
        let dir = tempfile::tempdir().unwrap();
        let (small, big_path, expected, big) = models(dir.path());
        for (path, object) in [(small, Object::Small), (big_path, Object::Big)] {
            let object = format!("faults/{}", object.name());
            if gcs {
                cloud::upload_gcs(&path, "tzr", &object, &base).unwrap();
            } else {
                cloud::upload_azure(&path, None, "tzr", &object, &base).unwrap();
            }
        }
        let open: Opener = Arc::new(move |port, knobs, object: Object| {
            let options = via(gcs, &base, port, knobs);
            let object = format!("faults/{}", object.name());
            let source: Box<dyn RangeSource> = if gcs {
                cloud::open_gcs("tzr", &object, &options)?
            } else {
                cloud::open_azure(None, "tzr", &object, &options)?
            };
            Ok(source)
        });
        Remote { name, port: server.port, open, expected, big }
    }

    #[test]
    fn gcs_reads_survive_resets_stalls_503s_and_trickles() {
        let Some((server, options)) = gcs() else { return };
        remote("gs", &server, options).all();
    }

    #[test]
    fn azure_reads_survive_resets_stalls_503s_and_trickles() {
        let Some((server, options)) = azurite() else { return };
        remote("az", &server, options).all();
    }

    /// Reads through `object_store`, as for credentials that cannot sign a
    /// URL (the faults above go through the direct client).
    #[test]
    fn object_store_reads_survive_resets_stalls_503s_and_trickles() {
        let Some((server, options)) = azurite() else { return };
        remote("az", &server, CloudOptions { direct_reads: false, ..options }).all();
    }
}
