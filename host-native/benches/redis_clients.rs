//! Redis and Redis Cluster reads through both clients, in one run against
//! the same servers and keys: ours (`RedisSource`, `ClusterSource`:
//! replies read from the socket into the caller's buffer) and the `redis`
//! crate (sync API, its pipelines, each reply copied out of the `Vec` it
//! allocates).
//!
//! Run (servers started by the project's own scripts, see spec/ "Protocol
//! libraries"):
//! `TZR_BENCH_REDIS=127.0.0.1:PORT TZR_BENCH_CLUSTER=127.0.0.1:PORT
//! cargo bench -p tensorizer-native --features redis-crate-bench --bench redis_clients`
//! (either variable may be left out; `TZR_BENCH_SIZES`, MiB, default
//! `256,1024`; `TZR_BENCH_READERS`, default one per core; `TZR_BENCH_REPS`,
//! default 7).
//!
//! The bench stores a file of the given size under `tzr-bench-{MiB}` in
//! tensorizer's key layout (a header key, then a small header key and a
//! data key per tensor, tensors of 64 KiB to 48 MiB as in a transformer
//! layer) with a generation marker, then reads all of it as a load does:
//! N threads, each filling its contiguous share of one pre-faulted buffer.
//! Ours is one `read_exact_at` per thread. The crate sends the same
//! `GETRANGE`s (at most 1 MiB each) in rounds of 16 MiB, each round one
//! pipeline ending in a `GET` of the marker, as the cluster source does
//! (ours pipelines up to 512 ranges with a marker check every MiB). The
//! contenders alternate, one untimed round first; medians are reported.
//! Each side keeps one connection per reader thread between rounds (ours
//! in its pool, the crate's made once up front).

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{env_usize, race};
use redis::Value;
use redis::cluster::{ClusterClient, ClusterConnection, cluster_pipe};
use tensorizer_native::RangeSource;
use tensorizer_native::default_readers;
use tensorizer_native::store::redis::{
    ClusterSource, RedisKey, RedisOptions, RedisSource, generation_key,
};

/// Longest `GETRANGE` (as ours).
const PIECE: u64 = 1 << 20;
/// Bytes per pipeline of the crate's reads (as our cluster source's rounds).
const ROUND: usize = 16 << 20;
/// Tensor data sizes, cycled: a transformer layer's norms, biases and
/// projections.
const TENSORS: [usize; 6] = [64 << 10, 48 << 20, 16 << 20, 4 << 10, 32 << 20, 2 << 20];
/// Bytes of each tensor header key and of the file's header key.
const HEADER: usize = 320;

/// The keys and values of a file of about `size` bytes under `prefix`.
fn layout(prefix: &str, size: usize) -> Vec<(String, Vec<u8>)> {
    let mut keys = vec![(format!("{prefix}:header:0"), vec![7u8; HEADER])];
    let mut offset = HEADER;
    let mut i = 0usize;
    while offset < size {
        let data = TENSORS[i % TENSORS.len()].min(size - offset).max(1);
        keys.push((format!("{prefix}:t{i}:{offset}"), vec![(i % 251) as u8; HEADER]));
        offset += HEADER;
        keys.push((format!("{prefix}:t{i}:{offset}"), vec![(i % 241) as u8; data]));
        offset += data;
        i += 1;
    }
    keys
}

/// Stores `keys` and the generation marker through `set` (one `SET` each).
fn store(prefix: &str, keys: &[(String, Vec<u8>)], mut set: impl FnMut(&str, &[u8])) {
    for (k, v) in keys {
        set(k, v);
    }
    set(&generation_key(prefix), b"bench");
}

/// The `GETRANGE` pieces (key index, start, length) covering
/// `offset..offset + len` of the file the keys tile.
fn pieces(keys: &[RedisKey], offset: u64, len: u64) -> Vec<(usize, u64, usize)> {
    let mut out = Vec::new();
    let mut at = offset;
    let mut k = keys.partition_point(|k| k.offset <= at).saturating_sub(1);
    while at < offset + len {
        let key = &keys[k];
        let within = at - key.offset;
        let n = (key.len - within).min(PIECE).min(offset + len - at);
        out.push((k, within, n as usize));
        at += n;
        if within + n == key.len {
            k += 1;
        }
    }
    out
}

/// One thread's share through the crate: rounds of pipelined `GETRANGE`s,
/// each ending in a `GET` of the marker; `query` runs a pipeline.
fn crate_read(
    keys: &[RedisKey],
    marker: &str,
    offset: u64,
    part: &mut [u8],
    mut query: impl FnMut(&[(usize, u64, usize)]) -> Vec<Value>,
) {
    let all = pieces(keys, offset, part.len() as u64);
    let mut filled = 0usize;
    let mut first = 0usize;
    while first < all.len() {
        let mut bytes = 0usize;
        let mut last = first;
        while last < all.len() && bytes < ROUND {
            bytes += all[last].2;
            last += 1;
        }
        let replies = query(&all[first..last]);
        let (marker_reply, ranges) = replies.split_last().expect("replies");
        assert!(matches!(marker_reply, Value::BulkString(v) if v == b"bench"), "{marker}");
        for (reply, &(_, _, n)) in ranges.iter().zip(&all[first..last]) {
            let Value::BulkString(bytes) = reply else { panic!("GETRANGE answered {reply:?}") };
            assert_eq!(bytes.len(), n);
            part[filled..filled + n].copy_from_slice(bytes);
            filled += n;
        }
        first = last;
    }
    assert_eq!(filled, part.len());
}

fn report(kind: &str, size_mib: usize, readers: usize, medians: &[Duration]) {
    let (ours, lib) = (medians[0].as_secs_f64() * 1e3, medians[1].as_secs_f64() * 1e3);
    println!(
        "| {kind:<7} | {size_mib:>4} MiB | {readers:>2} | {ours:>8.0} ms | {lib:>8.0} ms | {:>5.2} |",
        lib / ours
    );
}

fn single(addr: &str, size_mib: usize, readers: usize, reps: usize) {
    let prefix = format!("tzr-bench-{size_mib}");
    let client = redis::Client::open(format!("redis://{addr}/")).expect("client");
    let mut con = client.get_connection().expect("connect");
    let keys = layout(&prefix, size_mib << 20);
    store(&prefix, &keys, |k, v| redis::cmd("SET").arg(k).arg(v).exec(&mut con).expect("SET"));
    drop(keys);
    let uri = format!("redis://{addr}/{prefix}");
    let ours = RedisSource::open(&uri, RedisOptions::default()).expect("open");
    let mut buf = vec![1u8; usize::try_from(ours.len()).expect("fits")];
    let marker = generation_key(&prefix);
    let keys = ours.keys();
    let by_ours = |offset: u64, part: &mut [u8]| ours.read_exact_at(offset, part).expect("read");
    let share = buf.len().div_ceil(readers) as u64;
    let conns: Vec<Mutex<redis::Connection>> =
        (0..readers).map(|_| Mutex::new(client.get_connection().expect("connect"))).collect();
    let by_crate = |offset: u64, part: &mut [u8]| {
        let mut con = conns[(offset / share) as usize].lock().expect("connection");
        crate_read(keys, &marker, offset, part, |round| {
            let mut pipe = redis::pipe();
            for &(k, within, n) in round {
                pipe.cmd("GETRANGE").arg(&keys[k].name).arg(within).arg(within + n as u64 - 1);
            }
            pipe.cmd("GET").arg(&marker);
            pipe.query(&mut *con).expect("pipeline")
        });
    };
    let medians = race(&mut buf, readers, reps, &[&by_ours, &by_crate]);
    report("redis", size_mib, readers, &medians);
    redis::cmd("FLUSHALL").exec(&mut con).expect("FLUSHALL");
}

fn cluster(addr: &str, size_mib: usize, readers: usize, reps: usize) {
    let prefix = format!("tzr-bench-{size_mib}");
    let client = ClusterClient::new(vec![format!("redis://{addr}/")]).expect("client");
    let mut con: ClusterConnection = client.get_connection().expect("connect");
    let keys = layout(&prefix, size_mib << 20);
    store(&prefix, &keys, |k, v| redis::cmd("SET").arg(k).arg(v).exec(&mut con).expect("SET"));
    drop(keys);
    let uri = format!("redis+cluster://{addr}/{prefix}");
    let ours = ClusterSource::open(&uri, RedisOptions::default()).expect("open");
    let mut buf = vec![1u8; usize::try_from(ours.len()).expect("fits")];
    let marker = generation_key(&prefix);
    let keys = ours.keys();
    let by_ours = |offset: u64, part: &mut [u8]| ours.read_exact_at(offset, part).expect("read");
    let share = buf.len().div_ceil(readers) as u64;
    let conns: Vec<Mutex<ClusterConnection>> =
        (0..readers).map(|_| Mutex::new(client.get_connection().expect("connect"))).collect();
    let by_crate = |offset: u64, part: &mut [u8]| {
        let mut con = conns[(offset / share) as usize].lock().expect("connection");
        crate_read(keys, &marker, offset, part, |round| {
            let mut pipe = cluster_pipe();
            for &(k, within, n) in round {
                pipe.cmd("GETRANGE").arg(&keys[k].name).arg(within).arg(within + n as u64 - 1);
            }
            pipe.cmd("GET").arg(&marker);
            pipe.query(&mut con).expect("pipeline")
        });
    };
    let medians = race(&mut buf, readers, reps, &[&by_ours, &by_crate]);
    report("cluster", size_mib, readers, &medians);
    let flush = |con: &mut ClusterConnection| {
        redis::cmd("FLUSHALL").exec(con).expect("FLUSHALL");
    };
    // FLUSHALL goes to every master through the cluster connection.
    flush(&mut con);
}

fn main() {
    let single_addr = std::env::var("TZR_BENCH_REDIS").ok();
    let cluster_addr = std::env::var("TZR_BENCH_CLUSTER").ok();
    if single_addr.is_none() && cluster_addr.is_none() {
        eprintln!(
            "redis_clients: set TZR_BENCH_REDIS and/or TZR_BENCH_CLUSTER to 127.0.0.1:PORT; skipped"
        );
        return;
    }
    let readers = env_usize("TZR_BENCH_READERS", default_readers());
    let reps = env_usize("TZR_BENCH_REPS", 7);
    let sizes = std::env::var("TZR_BENCH_SIZES").unwrap_or_else(|_| "256,1024".into());
    println!("| server  | file     | rd | ours        | redis crate | crate / ours |");
    for size in sizes.split(',').filter_map(|s| s.trim().parse::<usize>().ok()) {
        if let Some(addr) = &single_addr {
            single(addr, size, readers, reps);
        }
        if let Some(addr) = &cluster_addr {
            cluster(addr, size, readers, reps);
        }
    }
}
