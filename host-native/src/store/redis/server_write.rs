//! Writing a file to one Redis server: the [`Link`] of the shared writer
//! whose commit is one `MULTI`/`EXEC` that swaps every key in at once.

use std::sync::Mutex;

use super::access::Access;
use super::cluster::NodeFault;
use super::cluster_read::node_error;
use super::fault::Fault;
use super::resp::{Conn, Reply};
use super::slots::Node;
use super::write::{Link, refuse, write_keys};
use super::{PIPELINE, RedisOptions, RedisTarget, TlsOptions, fault_error, scan};
use crate::error::{Error, Result};
use crate::read::Reader;
use crate::source::RangeSource;

/// Writes the file behind `reader` to `uri` (`redis://host[:port]/prefix`)
/// with the keys tensorizer's `to_redis` writes, byte for byte (see the
/// [module docs](crate::store::redis)).
///
/// The write is atomic: every key goes first under the temporary prefix
/// `{prefix}.tmp-<random hex>` (with a one-day expiry, in case this process
/// dies), then one `MULTI`/`EXEC` deletes the keys already under `{prefix}:`
/// and renames the new keys into place, and sets the generation marker
/// `{prefix}.tzr-generation` to the same random hex (readers opened before
/// then fail instead of mixing files). It aborts, changing nothing, if a
/// temporary key was touched meanwhile. On any error the temporary keys are
/// deleted (best effort; any left over expire within a day) and the
/// previous file is left as it was.
///
/// Without `force`, a prefix that already holds keys is an error. (tensorizer
/// instead overwrites `header:0` and skips tensors whose header key exists.)
pub fn write_redis<S: RangeSource>(uri: &str, reader: &Reader<S>, force: bool) -> Result<()> {
    write_redis_with(uri, reader, force, &RedisOptions::default())
}

/// [`write_redis`] with these connection timeouts.
pub fn write_redis_with<S: RangeSource>(
    uri: &str,
    reader: &Reader<S>,
    force: bool,
    options: &RedisOptions,
) -> Result<()> {
    write_redis_target(RedisTarget::parse(uri)?, reader, force, options, &TlsOptions::default())
}

/// [`write_redis_with`] to a parsed target.
pub fn write_redis_target<S: RangeSource>(
    addr: RedisTarget,
    reader: &Reader<S>,
    force: bool,
    options: &RedisOptions,
    tls: &TlsOptions,
) -> Result<()> {
    let uri = &addr.to_string();
    let server = Server {
        node: Node { host: addr.host.clone(), port: addr.port },
        options: *options,
        access: Access::for_target(&addr, tls)?,
        idle: Mutex::new(None),
    };
    write_keys(&server, uri, &addr, reader, force)
}

/// One server: every key goes to its one node, over one connection kept
/// between uses.
struct Server {
    node: Node,
    options: RedisOptions,
    access: Access,
    /// The connection, while no command of it awaits a reply.
    idle: Mutex<Option<Conn>>,
}

impl Server {
    /// A new connection.
    fn connect(&self) -> Result<Conn, NodeFault> {
        let o = &self.options;
        Conn::connect(
            &self.node.host,
            self.node.port,
            o.connect_timeout,
            o.io_timeout,
            &self.access,
        )
        .map_err(|f| NodeFault::new(&self.node, f))
    }
}

impl Link for Server {
    fn owner(&self, _key: &[u8]) -> Result<Node, NodeFault> {
        Ok(self.node.clone())
    }

    fn conn(&self, _node: &Node) -> Result<Conn, NodeFault> {
        match self.idle.lock().ok().and_then(|mut idle| idle.take()) {
            Some(conn) => Ok(conn),
            None => self.connect(),
        }
    }

    fn put(&self, _node: &Node, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            *idle = Some(conn);
        }
    }

    // A single server never redirects.
    fn moved(&self, _slot: u16, _node: &Node) {}

    fn refresh(&self) {}

    fn existing(&self, uri: &str, addr: &RedisTarget) -> Result<Vec<Vec<u8>>> {
        let mut conn = self.conn(&self.node).map_err(|f| node_error(uri, 0, 0, f))?;
        let names = scan(&mut conn, addr)
            .map_err(|f| node_error(uri, 0, 0, NodeFault::new(&self.node, f)))?;
        self.put(&self.node, conn);
        Ok(names)
    }

    fn temp_name(
        &self,
        _uri: &str,
        addr: &RedisTarget,
        generation: &str,
        _final_name: &[u8],
        suffix: &[u8],
    ) -> Result<Vec<u8>> {
        Ok([format!("{}.tmp-{generation}:", addr.prefix).as_bytes(), suffix].concat())
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
        let mut conn = self.conn(&self.node).map_err(|f| node_error(uri, 0, end, f))?;
        commit(&mut conn, addr, temp, finals, generation, force).map_err(|e| match e {
            Commit::Fault(f) => fault_error(uri, 0, end, f.kind(), f),
            Commit::Exists(n) => refuse(uri, addr, n),
            Commit::Aborted(why) => {
                Error::Invalid(format!("{uri}: the write was abandoned, nothing changed: {why}"))
            }
        })?;
        self.put(&self.node, conn);
        Ok(())
    }

    fn discard(&self, temp: &[Vec<u8>]) {
        // On a fresh connection: the one kept may be mid-command.
        if let Ok(mut conn) = self.connect() {
            let _ = delete(&mut conn, temp);
        }
    }
}

/// Why [`commit`] failed.
enum Commit {
    Fault(Fault),
    /// Without force, keys appeared under the prefix during the upload.
    Exists(usize),
    /// EXEC ran nothing (a watched key changed) or a command failed.
    Aborted(String),
}

impl From<Fault> for Commit {
    fn from(f: Fault) -> Self {
        Self::Fault(f)
    }
}

/// Watches the temporary keys, then in one transaction deletes what is
/// under the final prefix, renames each temporary key to its final name and
/// removes its expiry, and sets the generation marker to `generation`.
fn commit(
    conn: &mut Conn,
    addr: &RedisTarget,
    temp: &[Vec<u8>],
    finals: &[Vec<u8>],
    generation: &[u8],
    force: bool,
) -> Result<(), Commit> {
    for chunk in temp.chunks(PIPELINE) {
        let mut args: Vec<&[u8]> = vec![b"WATCH"];
        args.extend(chunk.iter().map(Vec::as_slice));
        conn.command(&args);
    }
    conn.flush()?;
    for _ in temp.chunks(PIPELINE) {
        expect_status(conn.reply()?, b"OK", "WATCH")?;
    }
    // Listed again now, so that keys written during the upload go too.
    let existing = scan(conn, addr)?;
    if !force && !existing.is_empty() {
        conn.call(&[b"UNWATCH"])?;
        return Err(Commit::Exists(existing.len()));
    }
    conn.command(&[b"MULTI"]);
    let mut queued = 0usize;
    for chunk in existing.chunks(PIPELINE) {
        let mut args: Vec<&[u8]> = vec![b"DEL"];
        args.extend(chunk.iter().map(Vec::as_slice));
        conn.command(&args);
        queued += 1;
    }
    for (t, f) in temp.iter().zip(finals) {
        conn.command(&[b"RENAME", t, f]);
        conn.command(&[b"PERSIST", f]);
        queued += 2;
    }
    conn.command(&[b"SET", &addr.generation_key(), generation]);
    queued += 1;
    conn.command(&[b"EXEC"]);
    conn.flush()?;
    expect_status(conn.reply()?, b"OK", "MULTI")?;
    let mut refused = None;
    for _ in 0..queued {
        match conn.reply() {
            Ok(r) => expect_status(r, b"QUEUED", "a queued command")?,
            Err(Fault::Server(m)) => refused = refused.or(Some(m)),
            Err(f) => return Err(f.into()),
        }
    }
    match conn.reply() {
        Ok(Reply::Array(None)) => {
            Err(Commit::Aborted("a temporary key changed or expired during the write".into()))
        }
        Ok(Reply::Array(Some(results))) => match results.iter().find_map(|r| match r {
            Reply::Error(m) => Some(m),
            _ => None,
        }) {
            // Not expected: every renamed key was watched and exists.
            Some(m) => Err(Commit::Fault(Fault::Server(format!(
                "a command of the transaction failed: {m}"
            )))),
            None => Ok(()),
        },
        Ok(other) => Err(Commit::Fault(Fault::Protocol(format!("EXEC answered {other:?}")))),
        Err(Fault::Server(m)) => Err(Commit::Aborted(refused.unwrap_or(m))),
        Err(f) => Err(f.into()),
    }
}

fn expect_status(reply: Reply, want: &[u8], what: &str) -> Result<(), Fault> {
    match reply {
        Reply::Status(s) if s == want => Ok(()),
        other => Err(Fault::Protocol(format!("{what} answered {other:?}"))),
    }
}

/// Deletes `keys` in batches.
fn delete(conn: &mut Conn, keys: &[Vec<u8>]) -> Result<(), Fault> {
    for chunk in keys.chunks(PIPELINE) {
        let mut args: Vec<&[u8]> = vec![b"DEL"];
        args.extend(chunk.iter().map(Vec::as_slice));
        conn.call(&args)?;
    }
    Ok(())
}
