//! Writing a file to a Redis Cluster: every key under a temporary name in
//! the slot of its final name, then, under a commit lock, the generation
//! marker set to `writing-<new>`, the keys renamed into place (one `RENAME`
//! per key, each within its slot), and the marker set to the new
//! generation.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::access::Access;
use super::cluster::{Cluster, Command, MAX_REDIRECTS, NodeFault, expect_ok};
use super::cluster_read::{WRITING, node_error, parse_uri, scan_cluster, to_attempt};
use super::fault::Fault;
use super::resp::{Conn, Reply};
use super::slots::{Node, Redirect, has_hash_tag, key_slot, tag_for_slot};
use super::write::{DEFAULT_MAX_VALUE, Planned, TEMP_TTL_SECS, UPLOAD_DRAIN, UPLOAD_PIECE, plan};
use super::{PIPELINE, RedisOptions, RedisTarget, TlsOptions, fault_error};
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
    let keys = plan(uri, reader)?;
    let options = RedisOptions { limits: TransferLimits { min_rate: 0, deadline: None, ..options.limits }, ..*options };
    let cluster = retry(&options.retry, Target { location: uri, range: None }, || {
        to_attempt(uri, 0, 0, Cluster::connect(&addr.host, addr.port, options, access.clone(), None))
    })?;
    let existing = scan_cluster(&cluster, &addr, None).map_err(|f| node_error(uri, 0, 0, f))?;
    if !force && !existing.is_empty() {
        return Err(refuse(uri, &addr, existing.len()));
    }
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| Error::Invalid(format!("no randomness for a temporary key name: {e}")))?;
    let generation = hex::encode(random);
    let finals: Vec<Vec<u8>> = keys.iter().map(|k| [addr.key_start().as_slice(), &k.suffix].concat()).collect();
    let temp = finals
        .iter()
        .zip(&keys)
        .map(|(f, k)| {
            let tag =
                tag_for_slot(key_slot(f)).ok_or_else(|| Error::Invalid(format!("{uri}: no hash tag for a slot")))?;
            Ok(format!("{tag}{}.tmp-{generation}:", addr.prefix)
                .into_bytes()
                .into_iter()
                .chain(k.suffix.iter().copied())
                .collect())
        })
        .collect::<Result<Vec<Vec<u8>>>>()?;

    let end = keys.last().map_or(0, |k| k.offset + k.len);
    let result = upload(&cluster, uri, reader, &keys, &temp)
        .and_then(|()| commit(&cluster, uri, &addr, &temp, &finals, generation.as_bytes(), force, end));
    if result.is_err() {
        // Best effort; keys this misses expire with their temporary expiry.
        let commands: Vec<Command> = temp.iter().map(|t| Command::keyed(vec![b"DEL".to_vec(), t.clone()])).collect();
        for chunk in commands.chunks(PIPELINE) {
            let _ = cluster.run(chunk, None);
        }
    }
    result
}

/// The error for a prefix that already holds `existing` keys.
fn refuse(uri: &str, addr: &RedisTarget, existing: usize) -> Error {
    let why = format!("it already holds a file ({existing} keys under {}:); pass force to replace it", addr.prefix);
    Error::store(uri, None, StoreErrorKind::AlreadyExists, why)
}

/// The error for the `SET` of `keys[i]` on `node`.
fn set_error(uri: &str, keys: &[Planned], i: usize, node: &Node, f: Fault) -> Error {
    let Some(k) = keys.get(i) else {
        return node_error(uri, 0, 0, NodeFault::new(node, f));
    };
    let hint = if k.len > DEFAULT_MAX_VALUE {
        " (Redis refuses values over proto-max-bulk-len, 512 MiB by default)"
    } else {
        ""
    };
    let name = String::from_utf8_lossy(&k.suffix);
    fault_error(uri, k.offset, k.len, f.kind(), format!("writing key {name:?} on node {node}: {f}{hint}"))
}

/// `SET`s on one node whose replies are still to be read.
struct Pending {
    conn: Conn,
    /// Key indices, and whether each was sent after `ASKING`.
    keys: Vec<(usize, bool)>,
    bytes: u64,
}

/// What reading a node's replies asks for next.
#[derive(Default)]
struct Redo {
    /// Keys to send again, to the owner of their slot or to an `ASK` node.
    keys: Vec<(usize, Option<Node>)>,
    /// A `MOVED` was seen: refresh the map before the next round.
    moved: bool,
}

/// Reads every reply pending on `node`.
fn drain(cluster: &Cluster, uri: &str, keys: &[Planned], node: &Node, p: &mut Pending, redo: &mut Redo) -> Result<()> {
    let first = p.keys.first().map_or(0, |&(i, _)| i);
    p.conn.flush().map_err(|f| set_error(uri, keys, first, node, f))?;
    for (i, asked) in p.keys.drain(..) {
        let fail = |f| set_error(uri, keys, i, node, f);
        if asked {
            expect_ok(p.conn.reply().map_err(fail)?, "ASKING").map_err(fail)?;
        }
        match p.conn.reply() {
            Ok(Reply::Status(s)) if s == b"OK" => {}
            Ok(other) => return Err(fail(Fault::Protocol(format!("SET answered {other:?}")))),
            Err(Fault::Server(m)) => match Redirect::parse(&m, node) {
                Some(Redirect::Moved(slot, to)) => {
                    cluster.moved(slot, &to);
                    redo.moved = true;
                    redo.keys.push((i, None));
                }
                Some(Redirect::Ask(_, to)) => redo.keys.push((i, Some(to))),
                None if m.starts_with("TRYAGAIN") => redo.keys.push((i, None)),
                None => return Err(fail(Fault::Server(m))),
            },
            Err(f) => return Err(fail(f)),
        }
    }
    p.bytes = 0;
    Ok(())
}

/// Sends `SET temp value EX ttl` for every key to the master of its slot,
/// pipelined per node, and sends again those redirected. Values up to
/// [`UPLOAD_PIECE`] bytes are read whole before their command starts;
/// longer ones are streamed from the source in pieces of that size, after
/// the node's earlier replies are read.
fn upload<S: RangeSource>(
    cluster: &Cluster,
    uri: &str,
    reader: &Reader<S>,
    keys: &[Planned],
    temp: &[Vec<u8>],
) -> Result<()> {
    let source = reader.source();
    let mut piece = Vec::new();
    let mut queue: Vec<(usize, Option<Node>)> = (0..keys.len()).map(|i| (i, None)).collect();
    for round in 0..=MAX_REDIRECTS {
        let Some(&(first, _)) = queue.first() else { return Ok(()) };
        if round == MAX_REDIRECTS {
            let node = cluster.owner(key_slot(&temp[first])).map_err(|f| node_error(uri, 0, 0, f))?;
            let why = Fault::Server(format!("TRYAGAIN still redirected after {MAX_REDIRECTS} tries"));
            return Err(set_error(uri, keys, first, &node, why));
        }
        let mut nodes: HashMap<Node, Pending> = HashMap::new();
        let mut redo = Redo::default();
        for (i, ask) in std::mem::take(&mut queue) {
            let k = &keys[i];
            let node = match ask.clone() {
                Some(n) => n,
                None => cluster.owner(key_slot(&temp[i])).map_err(|f| node_error(uri, k.offset, k.len, f))?,
            };
            if !nodes.contains_key(&node) {
                let conn = cluster.conn(&node, None).map_err(|f| node_error(uri, k.offset, k.len, f))?;
                nodes.insert(node.clone(), Pending { conn, keys: Vec::new(), bytes: 0 });
            }
            let streamed = k.len > UPLOAD_PIECE as u64;
            if streamed {
                // Every SET sent is confirmed before the source can fail
                // with a command half-sent, so that the cleanup after a
                // failure runs after all of them.
                for (n, other) in nodes.iter_mut() {
                    drain(cluster, uri, keys, n, other, &mut redo)?;
                }
            } else {
                piece.resize(k.len as usize, 0);
                if let Err(e) = source.read_exact_at(k.offset, &mut piece) {
                    for (n, p) in nodes.iter_mut() {
                        let _ = drain(cluster, uri, keys, n, p, &mut redo);
                    }
                    return Err(e);
                }
            }
            let Some(p) = nodes.get_mut(&node) else { continue };
            let fail = |f| set_error(uri, keys, i, &node, f);
            if ask.is_some() {
                p.conn.command(&[b"ASKING"]);
            }
            p.conn.start(5);
            p.conn.arg(b"SET");
            p.conn.arg(&temp[i]);
            p.conn.arg_header(k.len);
            if streamed {
                let mut done = 0u64;
                while done < k.len {
                    let n = (k.len - done).min(UPLOAD_PIECE as u64) as usize;
                    piece.resize(n, 0);
                    source.read_exact_at(k.offset + done, &mut piece)?;
                    p.conn.raw(&piece).map_err(fail)?;
                    done += n as u64;
                }
            } else {
                p.conn.raw(&piece).map_err(fail)?;
            }
            p.conn.end_arg();
            p.conn.arg(b"EX");
            p.conn.arg(TEMP_TTL_SECS);
            p.keys.push((i, ask.is_some()));
            p.bytes = p.bytes.saturating_add(k.len);
            if p.keys.len() >= PIPELINE || p.bytes >= UPLOAD_DRAIN {
                drain(cluster, uri, keys, &node, p, &mut redo)?;
            }
        }
        for (node, mut p) in nodes {
            drain(cluster, uri, keys, &node, &mut p, &mut redo)?;
            cluster.put(&node, p.conn);
        }
        if redo.moved {
            let _ = cluster.refresh(None);
        }
        queue = redo.keys;
    }
    Ok(())
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
                let key = command.args.get(1).map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_default();
                let node = cluster.owner(command.slot).map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
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
const UNLOCK: &[u8] = b"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// If the lock `KEYS[2]` still holds `ARGV[1]`, sets the marker `KEYS[1]`
/// to it and releases the lock (one slot: the lock is tagged into the
/// marker's slot).
const FINISH: &[u8] = b"if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[1]) \
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
    let tag = tag_for_slot(slot).ok_or_else(|| Error::Invalid(format!("{uri}: no hash tag for a slot")))?;
    let lock = format!("{tag}{}{LOCK_SUFFIX}", addr.prefix).into_bytes();
    let ttl = COMMIT_LOCK_TTL.as_millis().to_string().into_bytes();
    let acquire =
        Command::keyed(vec![b"SET".to_vec(), lock.clone(), generation.to_vec(), b"NX".to_vec(), b"PX".to_vec(), ttl]);
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
        other => return Err(Error::Invalid(format!("{uri}: SET NX of the commit lock answered {other:?}"))),
    }
    // Listed again now, under the lock, so that keys written since go too.
    let existing = scan_cluster(cluster, addr, None::<Instant>).map_err(|f| node_error(uri, 0, 0, f))?;
    if !force && !existing.is_empty() {
        // Nothing was changed: the lock can go at once.
        let unlock =
            Command { slot, args: vec![b"EVAL".to_vec(), UNLOCK.to_vec(), b"1".to_vec(), lock, generation.to_vec()] };
        let _ = cluster.run(&[unlock], None);
        return Err(refuse(uri, addr, existing.len()));
    }
    let status_ok = |r: &Reply| matches!(r, Reply::Status(s) if s == b"OK");
    let writing = Command::keyed(vec![b"SET".to_vec(), marker.clone(), [WRITING, generation].concat()]);
    run_all(cluster, uri, end, &[writing], "SET", until, status_ok)?;
    let keep: HashSet<&Vec<u8>> = finals.iter().collect();
    let mut commands: Vec<Command> = existing
        .into_iter()
        .filter(|name| !keep.contains(name))
        .map(|name| Command::keyed(vec![b"DEL".to_vec(), name]))
        .collect();
    run_all(cluster, uri, end, &commands, "DEL", until, |r| matches!(r, Reply::Int(_)))?;
    commands =
        temp.iter().zip(finals).map(|(t, f)| Command::keyed(vec![b"RENAME".to_vec(), t.clone(), f.clone()])).collect();
    run_all(cluster, uri, end, &commands, "RENAME", until, status_ok)?;
    commands = finals.iter().map(|f| Command::keyed(vec![b"PERSIST".to_vec(), f.clone()])).collect();
    run_all(cluster, uri, end, &commands, "PERSIST", until, |r| *r == Reply::Int(1))?;
    let finish = Command {
        slot,
        args: vec![b"EVAL".to_vec(), FINISH.to_vec(), b"2".to_vec(), marker, lock, generation.to_vec()],
    };
    run_all(cluster, uri, end, &[finish], "the final marker", until, |r| *r == Reply::Int(1))
}
