//! Writing a file to Redis, one writer for a single server and a cluster:
//! the keys are planned, every key is uploaded under a temporary name, and
//! the [`Link`] commits them into place (one `MULTI`/`EXEC` on a server,
//! the locked rename of spec §12.5 on a cluster). Only the connections and
//! the commit differ between the two; they live in `server_write.rs` and
//! `cluster_write.rs`.

use std::collections::HashMap;

use tensorizer_core::FileHeader;

use super::cluster::{MAX_REDIRECTS, NodeFault, expect_ok};
use super::cluster_read::node_error;
use super::fault::Fault;
use super::resp::{Conn, Reply};
use super::slots::{Node, Redirect};
use super::{PIPELINE, RedisTarget, fault_error};
use crate::error::{Error, Result, StoreErrorKind};
use crate::read::Reader;
use crate::source::RangeSource;

/// Bytes read from the source per write call while uploading a value.
const UPLOAD_PIECE: usize = 8 << 20;

/// Uploaded bytes after which the replies queued so far are read.
const UPLOAD_DRAIN: u64 = 64 << 20;

/// Lifetime of the temporary keys of a write, so that a writer that dies
/// before committing leaves nothing behind for good.
const TEMP_TTL_SECS: &[u8] = b"86400";

/// Redis refuses longer values unless `proto-max-bulk-len` is raised.
const DEFAULT_MAX_VALUE: u64 = 512 << 20;

/// One key of the Redis layout (spec §12.1): its name after `{prefix}:`
/// and the bytes of the file it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutKey {
    /// The key's name after `{prefix}:` (`header:0`, `{name}:{offset}`).
    pub suffix: Vec<u8>,
    /// Offset in the file of the key's bytes.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
}

/// The keys of the Redis layout for the file behind `reader`, in file
/// order (the `header:0` key, then each tensor's header and data keys),
/// checked to tile the file. `uri` names the file in errors. The one
/// place this layout is computed: the writers here and Python's
/// `to_redis` (which writes through the caller's client) use it.
pub fn key_layout<S: RangeSource>(uri: &str, reader: &Reader<S>) -> Result<Vec<LayoutKey>> {
    let mut entries: Vec<_> = reader.entries().iter().collect();
    entries.sort_by_key(|e| e.header_offset);
    let Some(header) = reader.header() else {
        return Err(Error::Invalid(format!(
            "{uri}: only tensorizer files have a Redis layout; convert it first (tzr convert)"
        )));
    };
    let index_end = header.metadata_range().end;
    let first = entries.first().map_or(index_end, |e| e.header_offset);
    if first < index_end || index_end < FileHeader::LEN as u64 {
        return Err(Error::Invalid(format!(
            "{uri}: the first tensor header (byte {first}) lies inside the index"
        )));
    }
    let mut keys = vec![LayoutKey { suffix: b"header:0".to_vec(), offset: 0, len: first }];
    let mut end = first;
    for e in entries {
        let name = e.path.to_bytes().map_err(|err| Error::tensor(uri, e.path.to_string(), err))?;
        if e.header_offset != end || e.data_offset <= e.header_offset {
            return Err(Error::Invalid(format!(
                "{uri}: tensor {:?} does not start where the previous one ends (byte {end}): \
                 Redis keys must tile the file",
                e.path.to_string()
            )));
        }
        for (offset, len) in
            [(e.header_offset, e.data_offset - e.header_offset), (e.data_offset, e.data_length)]
        {
            let mut suffix = name.clone();
            suffix.push(b':');
            suffix.extend_from_slice(offset.to_string().as_bytes());
            keys.push(LayoutKey { suffix, offset, len });
        }
        end = e.data_end();
        if end == u64::MAX || end > reader.source().len() {
            return Err(Error::Invalid(format!(
                "{uri}: tensor {:?} ends past the file",
                e.path.to_string()
            )));
        }
    }
    Ok(keys)
}

impl LayoutKey {
    /// The key's full name under `prefix`: `{prefix}:{suffix}`.
    pub fn name(&self, prefix: &str) -> Vec<u8> {
        [super::key_start(prefix), self.suffix.clone()].concat()
    }
}

/// The generation marker's key for `prefix` (spec §12.3): a key-by-key
/// writer deletes it first, so readers of the file being replaced notice.
pub fn generation_key(prefix: &str) -> String {
    format!("{prefix}{}", super::GENERATION_SUFFIX)
}

/// Where a write's keys go, and how they are committed: a single server
/// or the masters of a cluster. [`write_keys`] drives either.
pub(super) trait Link {
    /// The node that takes writes of `key` now.
    fn owner(&self, key: &[u8]) -> Result<Node, NodeFault>;
    /// A connection to `node` (pooled or new).
    fn conn(&self, node: &Node) -> Result<Conn, NodeFault>;
    /// Returns a connection whose replies were all read.
    fn put(&self, node: &Node, conn: Conn);
    /// Records a `MOVED` of `slot` to `node` (a cluster's slot map).
    fn moved(&self, slot: u16, node: &Node);
    /// Re-learns where keys go after `MOVED`s (best effort).
    fn refresh(&self);
    /// Every key name under the prefix now.
    fn existing(&self, uri: &str, addr: &RedisTarget) -> Result<Vec<Vec<u8>>>;
    /// The temporary name of the key `final_name` (`suffix` after the
    /// prefix) for the write `generation`.
    fn temp_name(
        &self,
        uri: &str,
        addr: &RedisTarget,
        generation: &str,
        final_name: &[u8],
        suffix: &[u8],
    ) -> Result<Vec<u8>>;
    /// Moves the uploaded `temp` keys to their `finals` names, replacing
    /// what is under the prefix, and sets the generation marker. `end` is
    /// the file's length, for errors.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &self,
        uri: &str,
        addr: &RedisTarget,
        temp: &[Vec<u8>],
        finals: &[Vec<u8>],
        generation: &[u8],
        force: bool,
        end: u64,
    ) -> Result<()>;
    /// Deletes the temporary keys after a failure (best effort; those it
    /// misses expire with their temporary expiry).
    fn discard(&self, temp: &[Vec<u8>]);
}

/// The error for a prefix that already holds `existing` keys.
pub(super) fn refuse(uri: &str, addr: &RedisTarget, existing: usize) -> Error {
    let why = format!(
        "it already holds a file ({existing} keys under {}:); pass force to replace it",
        addr.prefix
    );
    Error::store(uri, None, StoreErrorKind::AlreadyExists, why)
}

/// Writes the file behind `reader` to `addr` through `link`: without
/// `force`, a prefix that holds keys is refused; every key is uploaded
/// under its temporary name (with a one-day expiry), then committed; on
/// any error the temporary keys are discarded and the file already there
/// is left as the link's commit leaves it (spec §12.3, §12.5).
pub(super) fn write_keys<S: RangeSource, L: Link>(
    link: &L,
    uri: &str,
    addr: &RedisTarget,
    reader: &Reader<S>,
    force: bool,
) -> Result<()> {
    let keys = key_layout(uri, reader)?;
    let existing = link.existing(uri, addr)?;
    if !force && !existing.is_empty() {
        return Err(refuse(uri, addr, existing.len()));
    }
    let mut random = [0u8; 8];
    getrandom::fill(&mut random)
        .map_err(|e| Error::Invalid(format!("no randomness for a temporary key name: {e}")))?;
    let generation = hex::encode(random);
    let finals: Vec<Vec<u8>> = keys.iter().map(|k| k.name(&addr.prefix)).collect();
    let temp = finals
        .iter()
        .zip(&keys)
        .map(|(f, k)| link.temp_name(uri, addr, &generation, f, &k.suffix))
        .collect::<Result<Vec<_>>>()?;
    let end = keys.last().map_or(0, |k| k.offset + k.len);
    let result = upload(link, uri, reader, &keys, &temp)
        .and_then(|()| link.commit(uri, addr, &temp, &finals, generation.as_bytes(), force, end));
    if result.is_err() {
        link.discard(&temp);
    }
    result
}

/// The error for the `SET` of `keys[i]` on `node`.
fn set_error(uri: &str, keys: &[LayoutKey], i: usize, node: &Node, f: Fault) -> Error {
    let Some(k) = keys.get(i) else {
        return node_error(uri, 0, 0, NodeFault::new(node, f));
    };
    let hint = if k.len > DEFAULT_MAX_VALUE {
        " (Redis refuses values over proto-max-bulk-len, 512 MiB by default)"
    } else {
        ""
    };
    let name = String::from_utf8_lossy(&k.suffix);
    fault_error(
        uri,
        k.offset,
        k.len,
        f.kind(),
        format!("writing key {name:?} on node {node}: {f}{hint}"),
    )
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
fn drain(
    link: &impl Link,
    uri: &str,
    keys: &[LayoutKey],
    node: &Node,
    p: &mut Pending,
    redo: &mut Redo,
) -> Result<()> {
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
                    link.moved(slot, &to);
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

/// Sends `SET temp value EX ttl` for every key to the node that takes it,
/// pipelined per node, and sends again those redirected (a cluster's
/// `MOVED`, `ASK`, `TRYAGAIN`). Values up to [`UPLOAD_PIECE`] bytes are
/// read whole before their command starts; longer ones are streamed from
/// the source in pieces of that size, after every node's earlier replies
/// are read.
fn upload<S: RangeSource>(
    link: &impl Link,
    uri: &str,
    reader: &Reader<S>,
    keys: &[LayoutKey],
    temp: &[Vec<u8>],
) -> Result<()> {
    let source = reader.source();
    let mut piece = Vec::new();
    let mut queue: Vec<(usize, Option<Node>)> = (0..keys.len()).map(|i| (i, None)).collect();
    for round in 0..=MAX_REDIRECTS {
        let Some(&(first, _)) = queue.first() else { return Ok(()) };
        if round == MAX_REDIRECTS {
            let node = link.owner(&temp[first]).map_err(|f| node_error(uri, 0, 0, f))?;
            let why =
                Fault::Server(format!("TRYAGAIN still redirected after {MAX_REDIRECTS} tries"));
            return Err(set_error(uri, keys, first, &node, why));
        }
        let mut nodes: HashMap<Node, Pending> = HashMap::new();
        let mut redo = Redo::default();
        for (i, ask) in std::mem::take(&mut queue) {
            let k = &keys[i];
            let node = match ask.clone() {
                Some(n) => n,
                None => link.owner(&temp[i]).map_err(|f| node_error(uri, k.offset, k.len, f))?,
            };
            if !nodes.contains_key(&node) {
                let conn = link.conn(&node).map_err(|f| node_error(uri, k.offset, k.len, f))?;
                nodes.insert(node.clone(), Pending { conn, keys: Vec::new(), bytes: 0 });
            }
            let streamed = k.len > UPLOAD_PIECE as u64;
            if streamed {
                // Every SET sent is confirmed before the source can fail
                // with a command half-sent, so that the cleanup after a
                // failure runs after all of them.
                for (n, other) in nodes.iter_mut() {
                    drain(link, uri, keys, n, other, &mut redo)?;
                }
            } else {
                piece.resize(k.len as usize, 0);
                if let Err(e) = source.read_exact_at(k.offset, &mut piece) {
                    for (n, p) in nodes.iter_mut() {
                        let _ = drain(link, uri, keys, n, p, &mut redo);
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
                drain(link, uri, keys, &node, p, &mut redo)?;
            }
        }
        for (node, mut p) in nodes {
            drain(link, uri, keys, &node, &mut p, &mut redo)?;
            link.put(&node, p.conn);
        }
        if redo.moved {
            link.refresh();
        }
        queue = redo.keys;
    }
    Ok(())
}
