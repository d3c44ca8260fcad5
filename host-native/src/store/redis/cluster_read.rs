//! [`ClusterSource`]: a file stored in a Redis Cluster under
//! `redis+cluster://host[:port]/prefix`, with the keys of §12 spread over
//! the masters by their slots, read with `GETRANGE` pipelined per node.

use std::collections::HashSet;
use std::fmt;
use std::time::Instant;

use super::TlsOptions;
use super::access::Access;
use super::cluster::{Cluster, Command, NodeFault};
use super::fault::Fault;
use super::resp::Reply;
use super::slots::key_slot;
use super::{
    LIST_TRIES, MAX_GETRANGE, MAX_KEYS, PIPELINE, ROUND_BYTES, RedisKey, RedisOptions, RedisTarget,
    fault_error, key_offset, read_resuming, scan, tile,
};
use crate::error::{Error, Result, StoreErrorKind};
use crate::source::RangeSource;
use crate::store::Location;
use crate::store::retry::{Attempt, Target, deadline, retry};

/// The value of the generation marker while [`super::write_cluster`]
/// replaces the keys: this prefix, then the new generation.
pub(crate) const WRITING: &[u8] = b"writing-";

/// A `redis+cluster://` URI's parts.
pub(crate) fn parse_uri(uri: &str) -> Result<RedisTarget> {
    match Location::parse(uri)? {
        Location::RedisCluster(target) => Ok(target),
        _ => Err(Error::Invalid(format!("{uri}: not a redis+cluster://host[:port]/prefix URI"))),
    }
}

/// The error for a fault of `node` while reading `offset..offset + len`.
pub(crate) fn node_error(uri: &str, offset: u64, len: u64, f: NodeFault) -> Error {
    match &f.fault {
        Fault::Changed(_) => {
            Error::store(uri, Some(offset..offset + len.max(1)), StoreErrorKind::Changed, f)
        }
        _ => fault_error(uri, offset, len, f.fault.kind(), f),
    }
}

/// A file stored in a Redis Cluster, read with `GETRANGE` from the master
/// of each key's slot (see [`crate::store::redis`]).
pub struct ClusterSource {
    uri: String,
    addr: RedisTarget,
    cluster: Cluster,
    options: RedisOptions,
    /// Non-empty keys sorted by offset, tiling `0..len`.
    keys: Vec<RedisKey>,
    len: u64,
    /// The generation marker when the keys were listed (`None`: none).
    generation: Option<Vec<u8>>,
}

impl fmt::Debug for ClusterSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSource")
            .field("uri", &self.uri)
            .field("masters", &self.cluster.map().nodes().len())
            .field("keys", &self.keys.len())
            .field("len", &self.len)
            .finish()
    }
}

impl ClusterSource {
    /// Learns the slot map from the node the URI names, lists the keys
    /// under the prefix on every master (`SCAN`, then `STRLEN` of each on
    /// its master) and checks that they tile the file, as
    /// [`RedisSource::open`](super::RedisSource::open) does.
    pub fn open(uri: &str, options: RedisOptions) -> Result<Self> {
        Self::open_target(parse_uri(uri)?, options, &TlsOptions::default())
    }

    /// [`ClusterSource::open`] of a parsed target (the seed node's),
    /// trusting `tls` for `rediss+cluster://`.
    pub fn open_target(addr: RedisTarget, options: RedisOptions, tls: &TlsOptions) -> Result<Self> {
        let uri = &Location::RedisCluster(addr.clone()).to_string();
        let access = Access::for_target(&addr, tls)?;
        let until = deadline(&options.limits);
        let target = || Target { location: uri, range: None };
        let cluster = retry(&options.retry, target(), || {
            to_attempt(
                uri,
                0,
                0,
                Cluster::connect(&addr.host, addr.port, options, access.clone(), until),
            )
        })?;
        let mut this = Self {
            uri: uri.to_string(),
            addr,
            cluster,
            options,
            keys: Vec::new(),
            len: 0,
            generation: None,
        };
        let (found, generation) = retry(&options.retry, target(), || {
            let result = this.list_keys(until);
            if let Err(f) = &result {
                this.cluster.forget(f, until);
            }
            to_attempt(uri, 0, 0, result)
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

    /// The masters the cluster has now, as `host:port`.
    pub fn masters(&self) -> Vec<String> {
        self.cluster.map().nodes().iter().map(ToString::to_string).collect()
    }

    /// The generation marker (`None` if unset), refusing the value a write
    /// in progress leaves.
    fn generation(&self, until: Option<Instant>) -> Result<Option<Vec<u8>>, NodeFault> {
        let marker = self.addr.generation_key();
        let command = Command::keyed(vec![b"GET".to_vec(), marker.clone()]);
        let node = self.cluster.owner(command.slot)?;
        let reply = self.cluster.run(&[command], until)?.pop();
        let value = match reply {
            Some(Ok(Reply::Bulk(value))) => value,
            // CLUSTERDOWN and the like: the caller decides on retrying.
            Some(Err(m)) => return Err(NodeFault::new(&node, Fault::Server(m))),
            other => {
                let why = format!("GET of the generation marker answered {other:?}");
                return Err(NodeFault::new(&node, Fault::Protocol(why)));
            }
        };
        if let Some(v) = &value
            && v.starts_with(WRITING)
        {
            let why = format!(
                "a write to this prefix is in progress or was interrupted (generation marker {:?} is {:?}); \
                 open it again once a write has completed",
                String::from_utf8_lossy(&marker),
                String::from_utf8_lossy(v)
            );
            return Err(NodeFault::new(&node, Fault::Changed(why)));
        }
        Ok(value)
    }

    /// Every key under the prefix on every master with its length, and
    /// the generation marker read before and after; listed again when the
    /// marker or the slot map changed meanwhile.
    fn list_keys(
        &self,
        until: Option<Instant>,
    ) -> Result<(Vec<RedisKey>, Option<Vec<u8>>), NodeFault> {
        let mut before = self.generation(until)?;
        for _ in 0..LIST_TRIES {
            let map = self.cluster.map();
            let mut keys: Vec<RedisKey> = scan_cluster(&self.cluster, &self.addr, until)?
                .into_iter()
                .filter_map(|name| {
                    key_offset(&name).map(|offset| RedisKey { name, offset, len: 0 })
                })
                .collect();
            for batch in keys.chunks_mut(PIPELINE) {
                let commands: Vec<Command> = batch
                    .iter()
                    .map(|k| Command::keyed(vec![b"STRLEN".to_vec(), k.name.clone()]))
                    .collect();
                let replies = self.cluster.run(&commands, until)?;
                for (k, reply) in batch.iter_mut().zip(replies) {
                    let node = || self.cluster.owner(key_slot(&k.name));
                    k.len = match reply {
                        Ok(Reply::Int(n)) if n >= 0 => n as u64,
                        Err(m) => {
                            return Err(NodeFault::new(
                                &node()?,
                                Fault::Server(format!("{m} (key {})", k.display())),
                            ));
                        }
                        other => {
                            let node = node()?;
                            let why = format!("STRLEN {} answered {other:?}", k.display());
                            return Err(NodeFault::new(&node, Fault::Protocol(why)));
                        }
                    };
                }
            }
            let after = self.generation(until)?;
            self.cluster.refresh(until)?;
            if after == before && *self.cluster.map() == *map {
                return Ok((keys, after));
            }
            before = after;
        }
        let why = format!(
            "the file or the cluster's slots changed {LIST_TRIES} times while the keys were listed"
        );
        Err(NodeFault::new(&self.cluster.owner(0)?, Fault::Changed(why)))
    }

    /// One attempt at filling `buf[*done..]`, in rounds of at most
    /// [`ROUND_BYTES`]: one `GETRANGE` per key (or per [`MAX_GETRANGE`]
    /// bytes), pipelined per master, then the generation marker (every
    /// node's share is read first: what a broken connection can cost), which
    /// must not have changed since the source was opened; a round's bytes
    /// count as done only then.
    fn fetch(
        &self,
        offset: u64,
        buf: &mut [u8],
        done: &mut usize,
        until: Option<Instant>,
    ) -> Result<(), NodeFault> {
        while *done < buf.len() {
            let round_end = buf.len().min(done.saturating_add(ROUND_BYTES));
            let mut commands = Vec::new();
            let mut pieces = Vec::new();
            let mut planned = *done;
            let mut k = self
                .keys
                .partition_point(|k| k.offset <= offset + planned as u64)
                .saturating_sub(1);
            while planned < round_end && commands.len() < PIPELINE {
                let at = offset + planned as u64;
                let Some(key) =
                    self.keys.get(k).filter(|key| key.offset <= at && at < key.offset + key.len)
                else {
                    let why = format!("no key holds byte {at}");
                    return Err(NodeFault::new(&self.cluster.owner(0)?, Fault::Protocol(why)));
                };
                let within = at - key.offset;
                let n =
                    (key.len - within).min(MAX_GETRANGE).min((round_end - planned) as u64) as usize;
                let last = within + n as u64 - 1;
                commands.push(Command::keyed(vec![
                    b"GETRANGE".to_vec(),
                    key.name.clone(),
                    within.to_string().into_bytes(),
                    last.to_string().into_bytes(),
                ]));
                pieces.push((k, planned, n));
                planned += n;
                if within + n as u64 == key.len {
                    k += 1;
                }
            }
            self.cluster.run_with(&commands, until, |i, conn| {
                let (key, at, n) = pieces[i];
                let got = conn.bulk_into(&mut buf[at..at + n])?;
                if got != n {
                    // Only a write changes a listed key's length.
                    return Err(Fault::Changed(format!(
                        "the file changed during the read: key {} holds {got} bytes from byte {}, not {n}; open \
                         it again",
                        self.keys[key].display(),
                        offset + at as u64 - self.keys[key].offset,
                    )));
                }
                Ok(())
            })?;
            self.check_generation(until)?;
            *done = planned;
        }
        Ok(())
    }

    /// Fails if the generation marker is not the one seen when opened.
    fn check_generation(&self, until: Option<Instant>) -> Result<(), NodeFault> {
        let now = match self.generation(until) {
            Ok(now) => now,
            Err(NodeFault { node, fault: Fault::Changed(_) }) => {
                let why = "the file changed during the read: a write replaced it after the source was opened; \
                           open it again";
                return Err(NodeFault::new(&node, Fault::Changed(why.into())));
            }
            Err(e) => return Err(e),
        };
        if now != self.generation {
            let show = |g: &Option<Vec<u8>>| {
                g.as_ref().map_or("none".into(), |g| String::from_utf8_lossy(g).into_owned())
            };
            let marker = self.addr.generation_key();
            let node = self.cluster.owner(key_slot(&marker))?;
            let why = format!(
                "the file changed during the read: it was replaced after the source was opened (generation marker \
                 {:?} was {}, is {}); open it again",
                String::from_utf8_lossy(&marker),
                show(&self.generation),
                show(&now),
            );
            return Err(NodeFault::new(&node, Fault::Changed(why)));
        }
        Ok(())
    }
}

/// Every key name under the prefix, from a `SCAN` of each master (a key
/// being migrated may be listed by two; it is listed once).
pub(crate) fn scan_cluster(
    cluster: &Cluster,
    addr: &RedisTarget,
    until: Option<Instant>,
) -> Result<Vec<Vec<u8>>, NodeFault> {
    let map = cluster.map();
    let mut names = HashSet::new();
    for node in map.nodes() {
        let mut conn = cluster.conn(node, until)?;
        names.extend(scan(&mut conn, addr).map_err(|f| NodeFault::new(node, f))?);
        cluster.put(node, conn);
        if names.len() > MAX_KEYS {
            let why = format!("more than {MAX_KEYS} keys under the prefix");
            return Err(NodeFault::new(node, Fault::Protocol(why)));
        }
    }
    Ok(names.into_iter().collect())
}

/// Maps a cluster result to a retry decision naming `offset..offset + len`.
pub(crate) fn to_attempt<T>(
    uri: &str,
    offset: u64,
    len: u64,
    result: Result<T, NodeFault>,
) -> Attempt<T> {
    match result {
        Ok(v) => Attempt::Ok(v),
        Err(f) => {
            let transient = f.is_transient();
            let error = node_error(uri, offset, len, f);
            if transient { Attempt::Retry(error) } else { Attempt::Final(error) }
        }
    }
}

impl RangeSource for ClusterSource {
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
                if let Err(f) = &result {
                    self.cluster.forget(f, until);
                }
                to_attempt(&self.uri, start, len, result)
            },
        )
    }

    fn name(&self) -> &str {
        &self.uri
    }
}
