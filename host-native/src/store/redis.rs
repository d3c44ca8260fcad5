//! Redis as a source and a sink: a `.tensors` file stored as string keys
//! under `redis://host[:port]/prefix`, laid out as tensorizer 2.12's
//! `TensorDeserializer.to_redis` writes it and `RedisStreamFile` reads it.
//!
//! * `{prefix}:header:0` holds the bytes from 0 up to the first tensor
//!   header (magic, file header, metadata index);
//! * for each tensor, `{prefix}:{name}:{header_offset}` holds its header and
//!   `{prefix}:{name}:{data_offset}` its data (empty for meta tensors), with
//!   `name` the stored tensor path ([`TensorPath::to_bytes`]).
//!
//! A reader treats the keys as one file, each key's bytes starting at the
//! integer after its last `:`. The file's trailing 8-byte end marker is not
//! stored, so a [`RedisSource`] is 8 bytes shorter than the file written.
//!
//! [`RedisSource`] finds the keys with `SCAN`, checks that they tile the
//! file exactly, and serves reads with `GETRANGE` (pipelined when a read
//! spans several keys) on a small pool of connections, retrying a failed
//! read on a new connection for the bytes still missing. [`write_redis`]
//! writes every key under a temporary prefix, then swaps them in with one
//! `MULTI`/`EXEC`, so readers see the old file or the new one, never a mix.
//!
//! That `EXEC` also sets `{prefix}.tzr-generation` (outside the `{prefix}:`
//! key space, so tensorizer never sees it) to a new random value. The
//! source reads it when opened and again after every MiB or so of
//! `GETRANGE` replies, on the same connection: a file replaced after the
//! source was opened is then an error ("changed during the read") instead
//! of a mix of old and new tensors, as an ETag change is over HTTP. The
//! bytes before each matching check are kept when a connection breaks, and
//! an attempt that kept at least a MiB does not use up a retry, so a reset
//! costs about the MiB in flight.
//!
//! The path of the URI is the key prefix, not a database number (database
//! 0 is used, as tensorizer does). Credentials and TLS (`rediss://`,
//! `rediss+cluster://`) are not supported. Keys of another file whose prefix starts with
//! `{prefix}:` match the same `SCAN` pattern, so such prefixes must not be
//! nested.
//!
//! A Redis Cluster is read and written under `redis+cluster://host[:port]/prefix`
//! ([`ClusterSource`], [`write_cluster`]): the same keys, spread over the
//! masters by their slots (spec §12.5).
//!
//! [`TensorPath::to_bytes`]: tensorizer_core::TensorPath::to_bytes

mod access;
mod cluster;
mod cluster_read;
mod cluster_write;
mod fault;
mod resp;
mod server_write;
mod slots;
mod write;

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Location;
use crate::error::{Error, Result, StoreErrorKind};
use crate::source::{RangeSource, TransferLimits, check_range};
pub use crate::store::retry::RetryPolicy;
use crate::store::retry::{Attempt, Pace, Target, deadline, retry};
pub use crate::store::tls::TlsOptions;
use access::Access;
/// The environment variable read for a password when the URI has none
/// (what `redis-cli` reads).
pub const PASSWORD_VAR: &str = "REDISCLI_AUTH";
pub use cluster_read::ClusterSource;
pub use cluster_write::{write_cluster, write_cluster_target, write_cluster_with};
use fault::Fault;
use resp::{Conn, Reply};
pub use server_write::{write_redis, write_redis_target, write_redis_with};
pub use slots::key_slot;
pub use write::{LayoutKey, generation_key, key_layout};

/// Most keys one file may have (two per tensor, plus the header).
const MAX_KEYS: usize = 1 << 22;

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: u64 = 1000;

/// Most `SCAN` calls one listing may take, whatever `DBSIZE` says: enough
/// for half a billion keys.
const MAX_SCAN_CALLS: u64 = 1 << 22;

/// Most key names (repeats included) one listing may return: every key a
/// file can have, each listed twice (`SCAN` repeats keys while the server
/// resizes its table).
const MAX_SCANNED: u64 = 2 * MAX_KEYS as u64;

/// Appended to the prefix: the key holding the generation marker of a file
/// written by [`write_redis`] (outside `{prefix}:*`).
const GENERATION_SUFFIX: &str = ".tzr-generation";

/// Times the listing is redone when the file is replaced while it runs.
const LIST_TRIES: usize = 3;

/// Commands sent before their replies are read.
const PIPELINE: usize = 512;

/// Most bytes of `GETRANGE` replies one pipeline asks for. The server
/// queues a pipeline's replies until they are read: deeper pipelines (512
/// MiB) made it buffer that much and single-server reads 30% slower
/// (spec §14.5).
const ROUND_BYTES: usize = 16 << 20;

/// Longest `GETRANGE` asked for at once (bounds the server's reply buffer,
/// and what a broken connection can take with it).
const MAX_GETRANGE: u64 = 1 << 20;

/// A pipeline checks the generation marker after at least this many bytes
/// of `GETRANGE` replies; the bytes before a matching marker are kept
/// when the connection breaks later.
const CHECK_EVERY: usize = 1 << 20;

/// A failed attempt that kept at least this many new bytes is resumed at
/// once, without using up an attempt (as HTTP's are).
const RESUMABLE_PROGRESS: usize = crate::store::retry::RESUMABLE_PROGRESS as usize;

/// Idle connections a source keeps for later reads.
const MAX_IDLE: usize = 32;

pub use crate::store::location::RedisTarget;

impl RedisTarget {
    /// The port used when the URI names none.
    pub const DEFAULT_PORT: u16 = super::REDIS_DEFAULT_PORT;

    /// Parses `redis[s]://[user[:password]@]host[:port]/prefix` as
    /// tensorizer does (scheme in any case, default port 6379, leading
    /// slashes of the path dropped). Unlike tensorizer, an empty prefix, a
    /// query or a fragment are rejected rather than silently dropped.
    pub fn parse(uri: &str) -> Result<Self> {
        match Location::parse(uri)? {
            Location::Redis(target) => Ok(target),
            _ => Err(Error::Invalid(format!("{uri}: not a redis://host[:port]/prefix URI"))),
        }
    }

    /// The `SCAN` pattern for every key under the prefix: the prefix with
    /// its glob characters escaped, then `:*`.
    fn pattern(&self) -> Vec<u8> {
        glob_pattern(&self.prefix)
    }

    /// The first bytes of every key under the prefix.
    fn key_start(&self) -> Vec<u8> {
        key_start(&self.prefix)
    }

    /// The key of the generation marker.
    fn generation_key(&self) -> Vec<u8> {
        generation_key(&self.prefix).into_bytes()
    }
}

/// The first bytes of every key of the file under `prefix`: `{prefix}:`.
fn key_start(prefix: &str) -> Vec<u8> {
    format!("{prefix}:").into_bytes()
}

/// `prefix` with Redis glob characters escaped, then `:*`.
fn glob_pattern(prefix: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 2);
    for &b in prefix.as_bytes() {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.extend_from_slice(b":*");
    out
}

/// Retry and timeout settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisOptions {
    /// How failed reads (and the listing of the keys) are retried.
    pub retry: RetryPolicy,
    /// Longest wait for any single socket read or write (a stalled server).
    pub io_timeout: Duration,
    /// Longest wait to connect.
    pub connect_timeout: Duration,
    /// Minimum transfer rate of each batch of commands and deadline of
    /// each read (a trickling server), on top of `io_timeout`.
    pub limits: TransferLimits,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            io_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            limits: TransferLimits::default(),
        }
    }
}

/// One key of a stored file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisKey {
    /// The full key name.
    pub name: Vec<u8>,
    /// Where its bytes start in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl RedisKey {
    fn display(&self) -> String {
        format!("{:?}", String::from_utf8_lossy(&self.name))
    }
}

/// A file stored in Redis, read with `GETRANGE`.
pub struct RedisSource {
    uri: String,
    addr: RedisTarget,
    options: RedisOptions,
    access: Access,
    /// Non-empty keys sorted by offset, tiling `0..len`.
    keys: Vec<RedisKey>,
    len: u64,
    /// The generation marker when the keys were listed (`None`: none).
    generation: Option<Vec<u8>>,
    pool: Mutex<Vec<Conn>>,
}

impl fmt::Debug for RedisSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSource")
            .field("uri", &self.uri)
            .field("keys", &self.keys.len())
            .field("len", &self.len)
            .finish()
    }
}

impl RedisSource {
    /// Lists the keys under the URI's prefix (`SCAN`, then `STRLEN` of
    /// each) and checks that they tile the file: no keys, a gap or an
    /// overlap is an error naming the URI and the byte offset.
    /// `rediss://` connections trust what the environment and the system
    /// say (see [`crate::store::tls`]).
    pub fn open(uri: &str, options: RedisOptions) -> Result<Self> {
        Self::open_target(RedisTarget::parse(uri)?, options, &TlsOptions::default())
    }

    /// [`RedisSource::open`] of a parsed target, trusting `tls` for
    /// `rediss://`.
    pub fn open_target(addr: RedisTarget, options: RedisOptions, tls: &TlsOptions) -> Result<Self> {
        let uri = &addr.to_string();
        let access = Access::for_target(&addr, tls)?;
        let mut this = Self {
            access,
            uri: uri.clone(),
            addr,
            options,
            keys: Vec::new(),
            len: 0,
            generation: None,
            pool: Mutex::new(Vec::new()),
        };
        let until = deadline(&options.limits);
        let (found, generation) =
            retry(&options.retry, Target { location: uri, range: None }, || {
                this.attempt(0, 0, this.list_keys(until))
            })?;
        let (keys, len) = tile(uri, &this.addr.prefix, found)?;
        this.keys = keys;
        this.len = len;
        this.generation = generation;
        Ok(this)
    }

    /// The non-empty keys, in file order.
    pub fn keys(&self) -> &[RedisKey] {
        &self.keys
    }

    /// Maps a fault to a retry decision, naming the range. A broken
    /// connection also drops the idle ones: they likely broke the same way
    /// (a restarted server), and the retry should not pick one of them.
    fn attempt<T>(&self, offset: u64, len: u64, result: Result<T, Fault>) -> Attempt<T> {
        match result {
            Ok(v) => Attempt::Ok(v),
            Err(f) => {
                if let (Fault::Io(_), Ok(mut pool)) = (&f, self.pool.lock()) {
                    pool.clear();
                }
                let error = match &f {
                    Fault::Changed(why) => Error::store(
                        &self.uri,
                        Some(offset..offset + len.max(1)),
                        StoreErrorKind::Changed,
                        why,
                    ),
                    _ => fault_error(&self.uri, offset, len, f.kind(), &f),
                };
                if f.is_transient() { Attempt::Retry(error) } else { Attempt::Final(error) }
            }
        }
    }

    /// A pooled or new connection, paced for one request of a read that
    /// must end by `until`.
    fn conn(&self, until: Option<Instant>) -> Result<Conn, Fault> {
        let mut conn = match self.pool.lock().ok().and_then(|mut p| p.pop()) {
            Some(c) => c,
            None => {
                let o = &self.options;
                Conn::connect(
                    &self.addr.host,
                    self.addr.port,
                    o.connect_timeout,
                    o.io_timeout,
                    &self.access,
                )?
            }
        };
        conn.pace(Pace::new(&self.options.limits, until))?;
        Ok(conn)
    }

    /// Returns a healthy connection to the pool (one that failed is dropped
    /// instead: its stream may be mid-reply).
    fn put(&self, conn: Conn) {
        if let Ok(mut pool) = self.pool.lock()
            && pool.len() < MAX_IDLE
        {
            pool.push(conn);
        }
    }

    /// Every key under the prefix whose name ends in `:<offset>`, with its
    /// length, and the generation marker, read before and after them (the
    /// listing is redone if it changed meanwhile).
    fn list_keys(&self, until: Option<Instant>) -> Result<(Vec<RedisKey>, Option<Vec<u8>>), Fault> {
        let mut conn = self.conn(until)?;
        let marker = self.addr.generation_key();
        let mut before = generation(&mut conn, &marker)?;
        for _ in 0..LIST_TRIES {
            let keys = self.list_once(&mut conn)?;
            let after = generation(&mut conn, &marker)?;
            if after == before {
                self.put(conn);
                return Ok((keys, after));
            }
            before = after;
        }
        Err(Fault::Changed(format!(
            "the file was replaced {LIST_TRIES} times while its keys were listed"
        )))
    }

    fn list_once(&self, conn: &mut Conn) -> Result<Vec<RedisKey>, Fault> {
        let names = scan(conn, &self.addr)?;
        let mut keys: Vec<RedisKey> = names
            .into_iter()
            .filter_map(|name| key_offset(&name).map(|offset| RedisKey { name, offset, len: 0 }))
            .collect();
        for batch in keys.chunks_mut(PIPELINE) {
            for k in batch.iter() {
                conn.command(&[b"STRLEN", &k.name]);
            }
            conn.flush()?;
            for k in batch.iter_mut() {
                match conn.reply() {
                    Ok(Reply::Int(n)) if n >= 0 => k.len = n as u64,
                    Ok(other) => {
                        return Err(Fault::Protocol(format!(
                            "STRLEN {} answered {other:?}",
                            k.display()
                        )));
                    }
                    Err(Fault::Server(m)) => {
                        return Err(Fault::Server(format!("{m} (key {})", k.display())));
                    }
                    Err(f) => return Err(f),
                }
            }
        }
        Ok(keys)
    }

    /// One attempt at filling `buf[*done..]`, in pipelines planned by
    /// [`plan_round`]: the marker must not have changed since the source
    /// was opened, and the bytes before each matching marker count as done,
    /// so progress survives failures.
    fn fetch(
        &self,
        offset: u64,
        buf: &mut [u8],
        done: &mut usize,
        until: Option<Instant>,
    ) -> Result<(), Fault> {
        let mut conn = self.conn(until)?;
        let marker = self.addr.generation_key();
        while *done < buf.len() {
            let steps = plan_round(&self.keys, offset, buf.len(), *done)?;
            for step in &steps {
                match *step {
                    Step::Range { key, within, n } => conn.command(&[
                        b"GETRANGE",
                        &self.keys[key].name,
                        within.to_string().as_bytes(),
                        (within + n as u64 - 1).to_string().as_bytes(),
                    ]),
                    Step::Check => conn.command(&[b"GET", &marker]),
                }
            }
            conn.flush()?;
            self.receive(&mut conn, &steps, buf, done)?;
        }
        self.put(conn);
        Ok(())
    }

    /// Reads the replies to one pipeline of `steps` into `buf` from
    /// `*done` on, advancing `*done` at each matching marker.
    fn receive(
        &self,
        conn: &mut Conn,
        steps: &[Step],
        buf: &mut [u8],
        done: &mut usize,
    ) -> Result<(), Fault> {
        let mut filled = *done;
        for step in steps {
            match *step {
                Step::Range { key, within, n } => {
                    let got = conn.bulk_into(&mut buf[filled..filled + n])?;
                    if got != n {
                        return Err(Fault::Protocol(format!(
                            "key {} holds {got} bytes from byte {within}, not {n}: it changed after the \
                             source was opened",
                            self.keys[key].display(),
                        )));
                    }
                    filled += n;
                }
                Step::Check => {
                    let now = read_generation(conn)?;
                    if now != self.generation {
                        return Err(self.replaced(&now));
                    }
                    *done = filled;
                }
            }
        }
        Ok(())
    }

    /// The fault of a read that found the generation marker at `now`.
    fn replaced(&self, now: &Option<Vec<u8>>) -> Fault {
        let show = |g: &Option<Vec<u8>>| {
            g.as_ref().map_or("none".into(), |g| String::from_utf8_lossy(g).into_owned())
        };
        Fault::Changed(format!(
            "the file changed during the read: it was replaced after the source was opened \
             (generation marker {:?} was {}, is {}); open it again",
            String::from_utf8_lossy(&self.addr.generation_key()),
            show(&self.generation),
            show(now),
        ))
    }
}

/// One pipelined command of a read: a range of a key, or a check of the
/// generation marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Range { key: usize, within: u64, n: usize },
    Check,
}

/// The next pipeline of a read of `len` bytes at `offset` of the file
/// `keys` tile, from byte `done` of the read on: one `GETRANGE` per key
/// (or per [`MAX_GETRANGE`] bytes), at most [`PIPELINE`] commands and
/// [`ROUND_BYTES`] of replies, with a marker check after every
/// [`CHECK_EVERY`] bytes and at the end.
fn plan_round(keys: &[RedisKey], offset: u64, len: usize, done: usize) -> Result<Vec<Step>, Fault> {
    let end = len.min(done.saturating_add(ROUND_BYTES));
    let mut steps = Vec::new();
    let mut planned = done;
    let mut unchecked = 0usize;
    let mut k = keys.partition_point(|k| k.offset <= offset + planned as u64).saturating_sub(1);
    while planned < end && steps.len() < PIPELINE {
        let at = offset + planned as u64;
        let Some(key) = keys.get(k) else {
            return Err(Fault::Protocol(format!("no key holds byte {at}")));
        };
        let within = at - key.offset;
        let n = (key.len - within).min(MAX_GETRANGE).min((end - planned) as u64) as usize;
        steps.push(Step::Range { key: k, within, n });
        planned += n;
        unchecked += n;
        if within + n as u64 == key.len {
            k += 1;
        }
        if unchecked >= CHECK_EVERY {
            steps.push(Step::Check);
            unchecked = 0;
        }
    }
    if unchecked > 0 {
        steps.push(Step::Check);
    }
    Ok(steps)
}

impl RangeSource for RedisSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        read_resuming(
            &self.uri,
            self.len,
            &self.options,
            offset,
            buf,
            |buf, done, until, start, len| {
                let result = self.fetch(offset, buf, done, until);
                self.attempt(start, len, result)
            },
        )
    }

    fn name(&self) -> &str {
        &self.uri
    }
}

/// Reads `buf` at `offset` of the file behind `uri` (of `file_len` bytes),
/// single node or cluster alike: range checked, retried under `options`,
/// and resumed from the bytes already received. `fetch(buf, done, until,
/// start, len)` fills `buf` from `done` on and says whether to retry the
/// missing `start..start + len`; an attempt that received at least
/// [`RESUMABLE_PROGRESS`] bytes before failing does not use up the retries.
pub(super) fn read_resuming(
    uri: &str,
    file_len: u64,
    options: &RedisOptions,
    offset: u64,
    buf: &mut [u8],
    mut fetch: impl FnMut(&mut [u8], &mut usize, Option<Instant>, u64, u64) -> Attempt<()>,
) -> Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    check_range(uri, file_len, offset, buf.len())?;
    let len = buf.len() as u64;
    let mut done = 0usize;
    let until = deadline(&options.limits);
    retry(&options.retry, Target { location: uri, range: Some(offset..offset + len) }, || {
        let began = done;
        let start = offset + done as u64;
        match fetch(buf, &mut done, until, start, offset + len - start) {
            Attempt::Retry(e) if done - began >= RESUMABLE_PROGRESS => Attempt::Resumable(e),
            other => other,
        }
    })
}

/// An error naming the URI and the byte range `offset..offset + len`.
fn fault_error(
    uri: &str,
    offset: u64,
    len: u64,
    kind: io::ErrorKind,
    why: impl fmt::Display,
) -> Error {
    // `Error::Io` already names the first byte.
    let message = match len {
        0 => why.to_string(),
        _ => format!("bytes {offset}..{}: {why}", offset.saturating_add(len)),
    };
    Error::Io { file: uri.to_string(), offset, source: io::Error::new(kind, message) }
}

/// The offset after the last `:` of a key name, if it is a decimal integer.
fn key_offset(name: &[u8]) -> Option<u64> {
    let colon = name.iter().rposition(|&b| b == b':')?;
    let digits = &name[colon + 1..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The generation marker `key` (`None` if unset).
fn generation(conn: &mut Conn, key: &[u8]) -> Result<Option<Vec<u8>>, Fault> {
    conn.command(&[b"GET", key]);
    conn.flush()?;
    read_generation(conn)
}

fn read_generation(conn: &mut Conn) -> Result<Option<Vec<u8>>, Fault> {
    match conn.reply()? {
        Reply::Bulk(value) => Ok(value),
        other => Err(Fault::Protocol(format!("GET of the generation marker answered {other:?}"))),
    }
}

/// `SCAN` calls allowed for a database of `keys` keys (`None`: unknown).
/// A call returns once it has found `COUNT` keys or visited `10 × COUNT`
/// buckets, and a table has fewer than 64 buckets per key (Redis shrinks
/// sparser ones), so a full iteration takes fewer than
/// `keys / COUNT × 7.4 + 1` calls; the budget doubles as margin for keys
/// added meanwhile.
fn scan_budget(keys: Option<u64>) -> u64 {
    keys.map_or(MAX_SCAN_CALLS, |n| {
        (n / SCAN_COUNT).saturating_mul(16).saturating_add(1024).min(MAX_SCAN_CALLS)
    })
}

/// Every key name matching the URI's pattern, each once (`SCAN` may repeat
/// keys). A server whose cursor never comes back to 0 within
/// [`scan_budget`] calls, or that lists more than [`MAX_SCANNED`] names, is
/// an error.
fn scan(conn: &mut Conn, addr: &RedisTarget) -> Result<Vec<Vec<u8>>, Fault> {
    let pattern = addr.pattern();
    let start = addr.key_start();
    let dbsize = match conn.call(&[b"DBSIZE"]) {
        Ok(Reply::Int(n)) => u64::try_from(n).ok(),
        Ok(other) => return Err(Fault::Protocol(format!("DBSIZE answered {other:?}"))),
        // Not every Redis-compatible server has it.
        Err(Fault::Server(_)) => None,
        Err(f) => return Err(f),
    };
    let budget = scan_budget(dbsize);
    let count = SCAN_COUNT.to_string();
    let mut cursor = b"0".to_vec();
    let mut seen = HashSet::new();
    let mut listed = 0u64;
    for call in 0.. {
        if call >= budget {
            let size = dbsize.map_or("an unknown number of".into(), |n| n.to_string());
            return Err(Fault::Protocol(format!(
                "SCAN did not finish within {budget} calls, more than a database of {size} keys needs \
                 (its cursor never came back to 0)"
            )));
        }
        let reply =
            conn.call(&[b"SCAN", &cursor, b"MATCH", &pattern, b"COUNT", count.as_bytes()])?;
        let Reply::Array(Some(mut parts)) = reply else {
            return Err(Fault::Protocol(format!("SCAN answered {reply:?}")));
        };
        let (Some(Reply::Array(Some(names))), Some(Reply::Bulk(Some(next))), None) =
            (parts.pop(), parts.pop(), parts.pop())
        else {
            return Err(Fault::Protocol("SCAN answered an unexpected shape".into()));
        };
        listed = listed.saturating_add(names.len() as u64);
        if listed > MAX_SCANNED {
            return Err(Fault::Protocol(format!(
                "SCAN listed more than {MAX_SCANNED} key names, more than a file can have"
            )));
        }
        for name in names {
            let Reply::Bulk(Some(name)) = name else {
                return Err(Fault::Protocol("SCAN listed a key that is not a string".into()));
            };
            if name.starts_with(&start) {
                seen.insert(name);
            }
            if seen.len() > MAX_KEYS {
                return Err(Fault::Protocol(format!("more than {MAX_KEYS} keys under the prefix")));
            }
        }
        if next == b"0" {
            break;
        }
        cursor = next;
    }
    Ok(seen.into_iter().collect())
}

/// Sorts `keys` into file order and checks that the non-empty ones cover
/// `0..len` exactly once; returns them and `len`.
fn tile(uri: &str, prefix: &str, mut keys: Vec<RedisKey>) -> Result<(Vec<RedisKey>, u64)> {
    keys.retain(|k| k.len > 0);
    if keys.is_empty() {
        let why =
            format!("no keys under the prefix (a file stored there has a key {prefix}:header:0)");
        return Err(Error::store(uri, None, StoreErrorKind::NotFound, why));
    }
    keys.sort_by(|a, b| (a.offset, &a.name).cmp(&(b.offset, &b.name)));
    let mut end = 0u64;
    for k in &keys {
        if k.offset > end {
            return Err(Error::Invalid(format!(
                "{uri}: no key holds bytes {end}..{} (the next key is {}): a key is missing",
                k.offset,
                k.display()
            )));
        }
        if k.offset < end {
            return Err(Error::Invalid(format!(
                "{uri}: key {} at byte {} overlaps the key before it, which ends at byte {end}",
                k.display(),
                k.offset
            )));
        }
        end = k.offset.checked_add(k.len).ok_or_else(|| {
            Error::Invalid(format!(
                "{uri}: key {} at byte {} ends past 2^64",
                k.display(),
                k.offset
            ))
        })?;
    }
    Ok((keys, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_uris_through_location() {
        let u = RedisTarget::parse("REDIS://LocalHost/models/llama:7b").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.prefix.as_str()),
            ("localhost", 6379, "models/llama:7b")
        );
        assert_eq!(
            RedisTarget::parse("redis://[::1]:7001/p").unwrap().to_string(),
            "redis://[::1]:7001/p"
        );
        for bad in ["redis://h", "http://h/p", "h/p"] {
            assert!(RedisTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn escapes_glob_characters_in_the_pattern() {
        assert_eq!(glob_pattern("a*b?[c]\\d:e"), b"a\\*b\\?\\[c\\]\\\\d:e:*".to_vec());
    }

    #[test]
    fn key_offsets_come_after_the_last_colon() {
        assert_eq!(key_offset(b"p:header:0"), Some(0));
        assert_eq!(key_offset(b"p:\x1e[\"a:b\",0]:262217"), Some(262217));
        assert_eq!(key_offset(b"p:x:"), None);
        assert_eq!(key_offset(b"p:x:-1"), None);
        assert_eq!(key_offset(b"p:x:1e3"), None);
        assert_eq!(key_offset(b"p:x:99999999999999999999"), None);
        assert_eq!(key_offset(b"nocolon"), None);
    }

    fn key(name: &str, offset: u64, len: u64) -> RedisKey {
        RedisKey { name: name.as_bytes().to_vec(), offset, len }
    }

    #[test]
    fn a_pipeline_asks_for_at_most_a_round_of_bytes() {
        let keys = [key("p:header:0", 0, 100), key("p:a:100", 100, 40 << 20)];
        let len = (40 << 20) + 50;
        let mut done = 0usize;
        let mut rounds = 0;
        while done < len {
            let steps = plan_round(&keys, 50, len, done).unwrap();
            let mut asked = 0usize;
            for step in &steps {
                if let Step::Range { key, within, n } = *step {
                    assert_eq!(keys[key].offset + within, 50 + (done + asked) as u64);
                    assert!(n as u64 <= MAX_GETRANGE);
                    asked += n;
                }
            }
            assert!(asked <= ROUND_BYTES, "round {rounds} asked for {asked} bytes");
            assert_eq!(steps.last(), Some(&Step::Check));
            done += asked;
            rounds += 1;
        }
        assert_eq!((done, rounds), (len, 3));
        let past = plan_round(&keys, (40 << 20) + 100, 1, 0).unwrap_err().to_string();
        assert!(past.contains("no key holds byte"), "{past}");
    }

    #[test]
    fn keys_must_tile_the_file() {
        let uri = "redis://h/p";
        let (keys, len) = tile(
            uri,
            "p",
            vec![
                key("p:b:10", 10, 5),
                key("p:e:15", 15, 0),
                key("p:header:0", 0, 10),
                key("p:a:15", 15, 3),
            ],
        )
        .unwrap();
        assert_eq!(len, 18);
        assert_eq!(keys.iter().map(|k| k.offset).collect::<Vec<_>>(), [0, 10, 15]);
        let gap = tile(uri, "p", vec![key("p:header:0", 0, 10), key("p:a:12", 12, 3)])
            .unwrap_err()
            .to_string();
        assert!(gap.contains(uri) && gap.contains("bytes 10..12"), "{gap}");
        let late = tile(uri, "p", vec![key("p:a:5", 5, 3)]).unwrap_err().to_string();
        assert!(late.contains("bytes 0..5"), "{late}");
        let overlap = tile(uri, "p", vec![key("p:header:0", 0, 10), key("p:a:8", 8, 3)])
            .unwrap_err()
            .to_string();
        assert!(overlap.contains("overlaps") && overlap.contains("byte 8"), "{overlap}");
        let none = tile(uri, "p", vec![key("p:a:0", 0, 0)]).unwrap_err().to_string();
        assert!(none.starts_with("redis://h/p: not found: no keys under the prefix"), "{none}");
        assert!(
            tile(uri, "p", vec![key("p:header:0", 0, 10), key("p:a:10", 10, u64::MAX - 5)])
                .is_err()
        );
    }
}
