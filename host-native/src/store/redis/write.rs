//! Writing a file to Redis: every key under a temporary prefix, then one
//! `MULTI`/`EXEC` that swaps them in.

use tensorizer_core::FileHeader;

use super::access::Access;
use super::fault::Fault;
use super::resp::{Conn, Reply};
use super::{PIPELINE, RedisOptions, RedisTarget, TlsOptions, fault_error, scan};
use crate::error::{Error, Result};
use crate::read::Reader;
use crate::source::RangeSource;

/// Bytes read from the source per write call while uploading a value.
pub(super) const UPLOAD_PIECE: usize = 8 << 20;

/// Uploaded bytes after which the replies queued so far are read.
pub(super) const UPLOAD_DRAIN: u64 = 64 << 20;

/// Lifetime of the temporary keys of a write, so that a writer that dies
/// before committing leaves nothing behind for good.
pub(super) const TEMP_TTL_SECS: &[u8] = b"86400";

/// Redis refuses longer values unless `proto-max-bulk-len` is raised.
pub(super) const DEFAULT_MAX_VALUE: u64 = 512 << 20;

/// One key to write: its name after `{prefix}:`, and its bytes in the file.
pub(super) struct Planned {
    pub(super) suffix: Vec<u8>,
    pub(super) offset: u64,
    pub(super) len: u64,
}

/// The keys tensorizer's `to_redis` writes for the file behind `reader`,
/// in file order, checked to tile it.
pub(super) fn plan<S: RangeSource>(uri: &str, reader: &Reader<S>) -> Result<Vec<Planned>> {
    let mut entries: Vec<_> = reader.entries().iter().collect();
    entries.sort_by_key(|e| e.header_offset);
    let index_end = reader.header().metadata_range().end;
    let first = entries.first().map_or(index_end, |e| e.header_offset);
    if first < index_end || index_end < FileHeader::LEN as u64 {
        return Err(Error::Invalid(format!("{uri}: the first tensor header (byte {first}) lies inside the index")));
    }
    let mut keys = vec![Planned { suffix: b"header:0".to_vec(), offset: 0, len: first }];
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
        for (offset, len) in [(e.header_offset, e.data_offset - e.header_offset), (e.data_offset, e.data_length)] {
            let mut suffix = name.clone();
            suffix.push(b':');
            suffix.extend_from_slice(offset.to_string().as_bytes());
            keys.push(Planned { suffix, offset, len });
        }
        end = e.data_end();
        if end == u64::MAX || end > reader.source().len() {
            return Err(Error::Invalid(format!("{uri}: tensor {:?} ends past the file", e.path.to_string())));
        }
    }
    Ok(keys)
}

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
/// checked to tile the file. `name` names the file in errors. The one
/// place this layout is computed: the writers here and Python's
/// `to_redis` (which writes through the caller's client) use it.
pub fn key_layout<S: RangeSource>(name: &str, reader: &Reader<S>) -> Result<Vec<LayoutKey>> {
    Ok(plan(name, reader)?.into_iter().map(|p| LayoutKey { suffix: p.suffix, offset: p.offset, len: p.len }).collect())
}

/// The generation marker's key for `prefix` (spec §12.3): a key-by-key
/// writer deletes it first, so readers of the file being replaced notice.
pub fn generation_key(prefix: &str) -> String {
    format!("{prefix}{}", super::GENERATION_SUFFIX)
}

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
    let access = Access::for_target(&addr, tls)?;
    let keys = plan(uri, reader)?;
    let fail = |offset, len, f: Fault| fault_error(uri, offset, len, f.kind(), f);
    let connect = || Conn::connect(&addr.host, addr.port, options.connect_timeout, options.io_timeout, &access);
    let mut conn = connect().map_err(|f| fail(0, 0, f))?;
    let refuse = |existing: usize| {
        let why = format!("it already holds a file ({existing} keys under {}:); pass force to replace it", addr.prefix);
        Error::store(uri, None, crate::error::StoreErrorKind::AlreadyExists, why)
    };
    let existing = scan(&mut conn, &addr).map_err(|f| fail(0, 0, f))?;
    if !force && !existing.is_empty() {
        return Err(refuse(existing.len()));
    }
    let mut tag = [0u8; 8];
    getrandom::fill(&mut tag).map_err(|e| Error::Invalid(format!("no randomness for a temporary key name: {e}")))?;
    let temp_prefix = format!("{}.tmp-{}:", addr.prefix, hex::encode(tag)).into_bytes();
    let final_prefix = addr.key_start();
    let named = |prefix: &[u8], k: &Planned| [prefix, &k.suffix].concat();
    let temp: Vec<Vec<u8>> = keys.iter().map(|k| named(&temp_prefix, k)).collect();

    let result = upload(&mut conn, uri, reader, &keys, &temp).and_then(|()| {
        let finals: Vec<Vec<u8>> = keys.iter().map(|k| named(&final_prefix, k)).collect();
        let end = keys.last().map_or(0, |k| k.offset + k.len);
        let generation = hex::encode(tag).into_bytes();
        commit(&mut conn, &addr, &temp, &finals, &generation, force).map_err(|e| match e {
            Commit::Fault(f) => fail(0, end, f),
            Commit::Exists(n) => refuse(n),
            Commit::Aborted(why) => Error::Invalid(format!("{uri}: the write was abandoned, nothing changed: {why}")),
        })
    });
    if result.is_err() {
        // Best effort, on a fresh connection: the old one may be mid-command.
        // Keys this misses expire with their temporary expiry.
        drop(conn);
        if let Ok(mut c) = connect() {
            let _ = delete(&mut c, &temp);
        }
    }
    result
}

/// Sends `SET temp value EX ttl` for every key, reading replies in batches.
/// Values up to [`UPLOAD_PIECE`] bytes are read whole before their command
/// starts; longer ones are streamed from the source in pieces of that size.
fn upload<S: RangeSource>(
    conn: &mut Conn,
    uri: &str,
    reader: &Reader<S>,
    keys: &[Planned],
    temp: &[Vec<u8>],
) -> Result<()> {
    let source = reader.source();
    let mut piece = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    let mut unread_bytes = 0u64;
    let drain = |conn: &mut Conn, pending: &mut Vec<usize>| -> Result<()> {
        conn.flush().map_err(|f| set_error(uri, keys, pending.first().copied().unwrap_or(0), f))?;
        for &i in pending.iter() {
            match conn.reply() {
                Ok(Reply::Status(s)) if s == b"OK" => {}
                Ok(other) => return Err(set_error(uri, keys, i, Fault::Protocol(format!("SET answered {other:?}")))),
                Err(f) => return Err(set_error(uri, keys, i, f)),
            }
        }
        pending.clear();
        Ok(())
    };
    for (i, (k, name)) in keys.iter().zip(temp).enumerate() {
        // Every SET sent is confirmed before the source can fail with a
        // command half-sent, so that the cleanup after a failure (on another
        // connection) runs after all of them.
        let streamed = k.len > UPLOAD_PIECE as u64;
        if streamed {
            drain(conn, &mut pending)?;
            unread_bytes = 0;
        } else {
            piece.resize(k.len as usize, 0);
            if let Err(e) = source.read_exact_at(k.offset, &mut piece) {
                let _ = drain(conn, &mut pending);
                return Err(e);
            }
        }
        conn.start(5);
        conn.arg(b"SET");
        conn.arg(name);
        conn.arg_header(k.len);
        if streamed {
            let mut done = 0u64;
            while done < k.len {
                let n = (k.len - done).min(UPLOAD_PIECE as u64) as usize;
                piece.resize(n, 0);
                source.read_exact_at(k.offset + done, &mut piece)?;
                conn.raw(&piece).map_err(|f| set_error(uri, keys, i, f))?;
                done += n as u64;
            }
        } else {
            conn.raw(&piece).map_err(|f| set_error(uri, keys, i, f))?;
        }
        conn.end_arg();
        conn.arg(b"EX");
        conn.arg(TEMP_TTL_SECS);
        pending.push(i);
        unread_bytes = unread_bytes.saturating_add(k.len);
        if pending.len() >= PIPELINE || unread_bytes >= UPLOAD_DRAIN {
            drain(conn, &mut pending)?;
            unread_bytes = 0;
        }
    }
    drain(conn, &mut pending)
}

/// An error for the `SET` of `keys[i]`.
fn set_error(uri: &str, keys: &[Planned], i: usize, f: Fault) -> Error {
    let Some(k) = keys.get(i) else {
        return fault_error(uri, 0, 0, f.kind(), f);
    };
    let hint = if k.len > DEFAULT_MAX_VALUE {
        " (Redis refuses values over proto-max-bulk-len, 512 MiB by default)"
    } else {
        ""
    };
    let name = String::from_utf8_lossy(&k.suffix);
    fault_error(uri, k.offset, k.len, f.kind(), format!("writing key {name:?}: {f}{hint}"))
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
        Ok(Reply::Array(None)) => Err(Commit::Aborted("a temporary key changed or expired during the write".into())),
        Ok(Reply::Array(Some(results))) => match results.iter().find_map(|r| match r {
            Reply::Error(m) => Some(m),
            _ => None,
        }) {
            // Not expected: every renamed key was watched and exists.
            Some(m) => Err(Commit::Fault(Fault::Server(format!("a command of the transaction failed: {m}")))),
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
