//! Writing a file to a Redis Cluster: the [`Link`] of the shared writer
//! that puts every key under a temporary name in the slot of its final
//! name, then commits under a lock: the generation marker set to
//! `writing-<new>`, the keys renamed into place (one `RENAME` per key,
//! each within its slot), and the marker set to the new generation.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::access::Access;
use super::cluster::{Cluster, Command, NodeFault};
use super::cluster_read::{WRITING, node_error, parse_uri, scan_cluster, to_attempt};
use super::resp::{Conn, Reply};
use super::slots::{Node, has_hash_tag, key_slot, tag_for_slot};
use super::write::{Link, refuse, write_keys};
use super::{PIPELINE, RedisOptions, RedisTarget, TlsOptions};
use crate::error::{Error, Result, StoreErrorKind};
use crate::read::Reader;
use crate::source::{RangeSource, TransferLimits};
use crate::store::retry::{Target, retry};

/// Writes the file behind `reader` to `uri`
/// (`redis+cluster://host[:port]/prefix`) with the keys of
/// [`write_redis`](super::write_redis), spread over the cluster's masters
/// by their slots.
///
/// A cluster cannot swap keys of many slots in one transaction, so the
/// write is not atomic as on one server; it is made safe instead:
///
/// 1. every key is written under `{tag}{prefix}.tmp-<random hex>:…`, where
///    `{tag}` puts it in the slot of its final name, with a one-day expiry
///    (the file already there stays readable meanwhile);
/// 2. the commit lock `{tag}{prefix}.tzr-lock` is taken (`SET NX`, a
///    five-minute expiry; a write already holding it makes this one fail),
///    and the generation marker `{prefix}.tzr-generation` is set to
///    `writing-<random hex>`;
/// 3. the keys under `{prefix}:` that the new file does not have are
///    deleted, and each temporary key is renamed to its final name and its
///    expiry removed;
/// 4. one script sets the marker to the random hex and releases the lock,
///    if the lock is still this write's.
///
/// A [`ClusterSource`](super::ClusterSource) opened before step 2 fails at
/// its next check ("changed during the read"); one opened between steps 2
/// and 4, or after a write that died between them, refuses to read ("a
/// write … is in progress or was interrupted") until a write completes.
/// Readers never mix two files, and two writes never interleave.
///
/// Without `force`, a prefix that already holds keys is an error. A prefix
/// holding `{` is refused: a hash tag would put every key in one slot.
pub fn write_cluster<S: RangeSource>(uri: &str, reader: &Reader<S>, force: bool) -> Result<()> {
    write_cluster_with(uri, reader, force, &RedisOptions::default())
}

/// [`write_cluster`] with these retry and connection settings (the
/// transfer limits do not apply to writes).
pub fn write_cluster_with<S: RangeSource>(
    uri: &str,
    reader: &Reader<S>,
    force: bool,
    options: &RedisOptions,
) -> Result<()> {
    write_cluster_target(parse_uri(uri)?, reader, force, options, &TlsOptions::default())
}

/// [`write_cluster_with`] to a parsed target (the seed node's).
pub fn write_cluster_target<S: RangeSource>(
    addr: RedisTarget,
    reader: &Reader<S>,
    force: bool,
    options: &RedisOptions,
    tls: &TlsOptions,
) -> Result<()> {
    let uri = &crate::store::Location::RedisCluster(addr.clone()).to_string();
    let access = Access::for_target(&addr, tls)?;
    if has_hash_tag(&addr.prefix) {
        return Err(Error::Invalid(format!(
            "{uri}: the prefix holds '{{': on a cluster a hash tag would put every key of the file in one slot"
        )));
    }
    let options = RedisOptions {
        limits: TransferLimits { min_rate: 0, deadline: None, ..options.limits },
        ..*options
    };
    let cluster = retry(&options.retry, Target { location: uri, range: None }, || {
        to_attempt(
            uri,
            0,
            0,
            Cluster::connect(&addr.host, addr.port, options, access.clone(), None),
        )
    })?;
    write_keys(&Masters(cluster), uri, &addr, reader, force)
}

/// A cluster's masters: each key goes to the master of its slot.
struct Masters(Cluster);

impl Link for Masters {
    fn owner(&self, key: &[u8]) -> Result<Node, NodeFault> {
        self.0.owner(key_slot(key))
    }

    fn conn(&self, node: &Node) -> Result<Conn, NodeFault> {
        self.0.conn(node, None)
    }

    fn put(&self, node: &Node, conn: Conn) {
        self.0.put(node, conn);
    }

    fn moved(&self, slot: u16, node: &Node) {
        self.0.moved(slot, node);
    }

    fn refresh(&self) {
        let _ = self.0.refresh(None);
    }

    fn existing(&self, uri: &str, addr: &RedisTarget) -> Result<Vec<Vec<u8>>> {
        scan_cluster(&self.0, addr, None).map_err(|f| node_error(uri, 0, 0, f))
    }

    /// `{tag}{prefix}.tmp-<generation>:<suffix>`, with `{tag}` putting it
    /// in the slot of its final name, so that its rename stays in a slot.
    fn temp_name(
        &self,
        uri: &str,
        addr: &RedisTarget,
        generation: &str,
        final_name: &[u8],
        suffix: &[u8],
    ) -> Result<Vec<u8>> {
        let tag = tag_for_slot(key_slot(final_name))
            .ok_or_else(|| Error::Invalid(format!("{uri}: no hash tag for a slot")))?;
        Ok([format!("{tag}{}.tmp-{generation}:", addr.prefix).as_bytes(), suffix].concat())
    }

    fn commit(
        &self,
        uri: &str,
        addr: &RedisTarget,
        temp: &[Vec<u8>],
        finals: &[Vec<u8>],
        generation: &[u8],
        force: bool,
        end: u64,
    ) -> Result<()> {
        commit(&self.0, uri, addr, temp, finals, generation, force, end)
    }

    fn discard(&self, temp: &[Vec<u8>]) {
        let commands: Vec<Command> =
            temp.iter().map(|t| Command::keyed(vec![b"DEL".to_vec(), t.clone()])).collect();
        for chunk in commands.chunks(PIPELINE) {
            let _ = self.0.run(chunk, None);
        }
    }
}

/// Runs `commands` in pipelined chunks; each reply must satisfy `ok`. No
/// chunk is sent after `until` (the commit lock may have expired).
#[allow(clippy::too_many_arguments)]
fn run_all(
    cluster: &Cluster,
    uri: &str,
    end: u64,
    commands: &[Command],
    what: &str,
    until: Option<Instant>,
    ok: impl Fn(&Reply) -> bool,
) -> Result<()> {
    for chunk in commands.chunks(PIPELINE) {
        if until.is_some_and(|u| Instant::now() >= u) {
            return Err(Error::store(
                uri,
                None,
                StoreErrorKind::TimedOut,
                format!(
                    "the commit ran past half its lock's {} s, so the write stopped before the next {what}; the \
                     prefix may now hold a partial file, which readers refuse: write it again",
                    COMMIT_LOCK_TTL.as_secs()
                ),
            ));
        }
        let replies = cluster.run(chunk, None).map_err(|f| node_error(uri, 0, end, f))?;
        for (command, reply) in chunk.iter().zip(replies) {
            let good = matches!(&reply, Ok(r) if ok(r));
            if !good {
                let key = command
                    .args
                    .get(1)
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .unwrap_or_default();
                let node = cluster
                    .owner(command.slot)
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "?".into());
                return Err(Error::Invalid(format!(
                    "{uri}: {what} of key {key:?} on node {node} answered {reply:?}; the prefix may now hold a \
                     partial file, which readers refuse: write it again"
                )));
            }
        }
    }
    Ok(())
}

/// Appended to the prefix (after a hash tag for the marker's slot): the
/// key a write holds while it replaces the keys (steps 2 to 4).
const LOCK_SUFFIX: &str = ".tzr-lock";

/// Lifetime of the commit lock: a writer that dies holding it blocks other
/// writes of the prefix this long. A commit stops sending commands after
/// half of it.
const COMMIT_LOCK_TTL: Duration = Duration::from_secs(300);

/// Releases the lock `KEYS[1]` if it still holds `ARGV[1]`.
const UNLOCK: &[u8] =
    b"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// If the lock `KEYS[2]` still holds `ARGV[1]`, sets the marker `KEYS[1]`
/// to it and releases the lock (one slot: the lock is tagged into the
/// marker's slot).
const FINISH: &[u8] =
    b"if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[1]) \
redis.call('DEL', KEYS[2]) return 1 end return 0";

/// Steps 2 to 4 of [`write_cluster`], under the commit lock: taken with
/// `SET NX`, so that two writes never interleave their renames; released
/// with the final marker in one script, and only if still held.
#[allow(clippy::too_many_arguments)]
fn commit(
    cluster: &Cluster,
    uri: &str,
    addr: &RedisTarget,
    temp: &[Vec<u8>],
    finals: &[Vec<u8>],
    generation: &[u8],
    force: bool,
    end: u64,
) -> Result<()> {
    let marker = addr.generation_key();
    let slot = key_slot(&marker);
    let tag = tag_for_slot(slot)
        .ok_or_else(|| Error::Invalid(format!("{uri}: no hash tag for a slot")))?;
    let lock = format!("{tag}{}{LOCK_SUFFIX}", addr.prefix).into_bytes();
    let ttl = COMMIT_LOCK_TTL.as_millis().to_string().into_bytes();
    let acquire = Command::keyed(vec![
        b"SET".to_vec(),
        lock.clone(),
        generation.to_vec(),
        b"NX".to_vec(),
        b"PX".to_vec(),
        ttl,
    ]);
    let until = Instant::now().checked_add(COMMIT_LOCK_TTL / 2);
    match cluster.run(&[acquire], None).map_err(|f| node_error(uri, 0, 0, f))?.pop() {
        Some(Ok(Reply::Status(s))) if s == b"OK" => {}
        Some(Ok(Reply::Bulk(None))) => {
            return Err(Error::store(
                uri,
                None,
                StoreErrorKind::Changed,
                format!(
                    "another write to this prefix is being committed, or one failed while committing in the last {} \
                     s (lock key {:?}); try again later",
                    COMMIT_LOCK_TTL.as_secs(),
                    String::from_utf8_lossy(&lock)
                ),
            ));
        }
        other => {
            return Err(Error::Invalid(format!(
                "{uri}: SET NX of the commit lock answered {other:?}"
            )));
        }
    }
    // Listed again now, under the lock, so that keys written since go too.
    let existing =
        scan_cluster(cluster, addr, None::<Instant>).map_err(|f| node_error(uri, 0, 0, f))?;
    if !force && !existing.is_empty() {
        // Nothing was changed: the lock can go at once.
        let unlock = Command {
            slot,
            args: vec![b"EVAL".to_vec(), UNLOCK.to_vec(), b"1".to_vec(), lock, generation.to_vec()],
        };
        let _ = cluster.run(&[unlock], None);
        return Err(refuse(uri, addr, existing.len()));
    }
    let status_ok = |r: &Reply| matches!(r, Reply::Status(s) if s == b"OK");
    let writing =
        Command::keyed(vec![b"SET".to_vec(), marker.clone(), [WRITING, generation].concat()]);
    run_all(cluster, uri, end, &[writing], "SET", until, status_ok)?;
    let keep: HashSet<&Vec<u8>> = finals.iter().collect();
    let mut commands: Vec<Command> = existing
        .into_iter()
        .filter(|name| !keep.contains(name))
        .map(|name| Command::keyed(vec![b"DEL".to_vec(), name]))
        .collect();
    run_all(cluster, uri, end, &commands, "DEL", until, |r| matches!(r, Reply::Int(_)))?;
    commands = temp
        .iter()
        .zip(finals)
        .map(|(t, f)| Command::keyed(vec![b"RENAME".to_vec(), t.clone(), f.clone()]))
        .collect();
    run_all(cluster, uri, end, &commands, "RENAME", until, status_ok)?;
    commands =
        finals.iter().map(|f| Command::keyed(vec![b"PERSIST".to_vec(), f.clone()])).collect();
    run_all(cluster, uri, end, &commands, "PERSIST", until, |r| *r == Reply::Int(1))?;
    let finish = Command {
        slot,
        args: vec![
            b"EVAL".to_vec(),
            FINISH.to_vec(),
            b"2".to_vec(),
            marker,
            lock,
            generation.to_vec(),
        ],
    };
    run_all(cluster, uri, end, &[finish], "the final marker", until, |r| *r == Reply::Int(1))
}
