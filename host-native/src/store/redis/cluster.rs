//! A Redis Cluster client over the RESP code of [`super::resp`]: the slot
//! map (from `CLUSTER SLOTS`, asked of the seed node or any master known),
//! a pool of connections per master, and pipelined commands grouped per
//! node that follow `MOVED` (the map is updated and refreshed) and `ASK`
//! (`ASKING`, then the command, on the node named) at most
//! [`MAX_REDIRECTS`] times.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::RedisOptions;
use super::access::Access;
use super::fault::Fault;
use super::resp::{Conn, Reply};
use super::slots::{Node, Redirect, SlotMap, key_slot};
use crate::store::retry::Pace;

/// Times one command may be redirected (`MOVED`, `ASK`, `TRYAGAIN`) before
/// the attempt fails (and is retried under the retry policy).
pub(crate) const MAX_REDIRECTS: usize = 5;

/// Idle connections kept per node.
const MAX_IDLE_PER_NODE: usize = 16;

/// Pause before re-sending a command that got `TRYAGAIN` (a multi-key
/// command during a slot migration).
const TRYAGAIN_PAUSE: Duration = Duration::from_millis(20);

/// A [`Fault`] and the node it came from.
#[derive(Debug)]
pub(crate) struct NodeFault {
    /// The node that failed, or sent the reply.
    pub(crate) node: Node,
    /// What went wrong.
    pub(crate) fault: Fault,
}

impl NodeFault {
    pub(crate) fn new(node: &Node, fault: Fault) -> Self {
        Self { node: node.clone(), fault }
    }

    /// Whether another attempt may succeed: as for one server, and also
    /// while the cluster is down (a failover) or keeps redirecting.
    pub(crate) fn is_transient(&self) -> bool {
        self.fault.is_transient()
            || matches!(&self.fault, Fault::Server(m) if m.starts_with("CLUSTERDOWN"))
    }
}

impl fmt::Display for NodeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}: {}", self.node, self.fault)
    }
}

/// One command for [`Cluster::run`]: its arguments and the slot of its key.
#[derive(Debug, Clone)]
pub(crate) struct Command {
    /// The slot the command's keys live in.
    pub(crate) slot: u16,
    /// The whole command, name first.
    pub(crate) args: Vec<Vec<u8>>,
}

impl Command {
    /// A command whose key is its second argument.
    pub(crate) fn keyed(args: Vec<Vec<u8>>) -> Self {
        let slot = args.get(1).map_or(0, |k| key_slot(k));
        Self { slot, args }
    }
}

/// Where a command goes next: the owner of its slot, or a node that asked
/// for it with `ASK`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Route {
    pub(crate) node: Node,
    pub(crate) asking: bool,
}

/// The topology of one cluster and connections to its masters.
pub(crate) struct Cluster {
    seed: Node,
    options: RedisOptions,
    map: RwLock<Arc<SlotMap>>,
    pools: Mutex<HashMap<Node, Vec<Conn>>>,
    /// TLS and credentials, the same for every node.
    access: Access,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster").field("seed", &self.seed).field("map", &self.map()).finish()
    }
}

impl Cluster {
    /// Learns the slot map from the seed node `host:port`.
    pub(crate) fn connect(
        host: &str,
        port: u16,
        options: RedisOptions,
        access: Access,
        until: Option<Instant>,
    ) -> Result<Self, NodeFault> {
        let seed = Node { host: host.to_string(), port };
        let map = Self::ask_slots(&seed, &options, &access, until)?;
        Ok(Self {
            seed,
            options,
            access,
            map: RwLock::new(Arc::new(map)),
            pools: Mutex::new(HashMap::new()),
        })
    }

    /// The current slot map.
    pub(crate) fn map(&self) -> Arc<SlotMap> {
        match self.map.read() {
            Ok(m) => Arc::clone(&m),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    fn set_map(&self, map: SlotMap) {
        match self.map.write() {
            Ok(mut m) => *m = Arc::new(map),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(map),
        }
    }

    /// `CLUSTER SLOTS` of one node, on a fresh connection.
    fn ask_slots(
        node: &Node,
        options: &RedisOptions,
        access: &Access,
        until: Option<Instant>,
    ) -> Result<SlotMap, NodeFault> {
        let fail = |f| NodeFault::new(node, f);
        let mut conn = Conn::connect(
            &node.host,
            node.port,
            options.connect_timeout,
            options.io_timeout,
            access,
        )
        .map_err(fail)?;
        conn.pace(Pace::new(&options.limits, until)).map_err(fail)?;
        let reply = match conn.call(&[b"CLUSTER", b"SLOTS"]) {
            Err(Fault::Server(m)) if m.contains("cluster support disabled") => {
                Err(Fault::Protocol(format!(
                    "{m}: this is a single Redis server, not a cluster (use redis://, not redis+cluster://)"
                )))
            }
            other => other,
        };
        SlotMap::parse(reply.map_err(fail)?, node).map_err(fail)
    }

    /// Asks the seed, then every master known, for the slot map, and keeps
    /// the first answer; the error of the last node asked otherwise.
    pub(crate) fn refresh(&self, until: Option<Instant>) -> Result<(), NodeFault> {
        let mut candidates = vec![self.seed.clone()];
        candidates.extend(self.map().nodes().iter().filter(|n| **n != self.seed).cloned());
        let mut last = None;
        for node in &candidates {
            match Self::ask_slots(node, &self.options, &self.access, until) {
                Ok(map) => {
                    self.set_map(map);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            NodeFault::new(&self.seed, Fault::Protocol("no node to ask".into()))
        }))
    }

    /// Where a command for `slot` goes now.
    pub(crate) fn owner(&self, slot: u16) -> Result<Node, NodeFault> {
        self.map().owner(slot).cloned().ok_or_else(|| {
            NodeFault::new(
                &self.seed,
                Fault::Server(format!("CLUSTERDOWN no master serves slot {slot}")),
            )
        })
    }

    /// Records a `MOVED`: `slot` is served by `node` from now on.
    pub(crate) fn moved(&self, slot: u16, node: &Node) {
        let map = self.map().moved(slot, node);
        self.set_map(map);
    }

    /// A pooled or new connection to `node`, paced for one request that
    /// must end by `until`.
    pub(crate) fn conn(&self, node: &Node, until: Option<Instant>) -> Result<Conn, NodeFault> {
        let fail = |f| NodeFault::new(node, f);
        let pooled = self.pools.lock().ok().and_then(|mut p| p.get_mut(node).and_then(Vec::pop));
        let mut conn = match pooled {
            Some(c) => c,
            None => {
                let o = &self.options;
                Conn::connect(&node.host, node.port, o.connect_timeout, o.io_timeout, &self.access)
                    .map_err(fail)?
            }
        };
        conn.pace(Pace::new(&self.options.limits, until)).map_err(fail)?;
        Ok(conn)
    }

    /// Returns a healthy connection to its node's pool.
    pub(crate) fn put(&self, node: &Node, conn: Conn) {
        if let Ok(mut pools) = self.pools.lock() {
            let pool = pools.entry(node.clone()).or_default();
            if pool.len() < MAX_IDLE_PER_NODE {
                pool.push(conn);
            }
        }
    }

    /// After a failure: drops the idle connections of `node` (they likely
    /// broke the same way) and, for a broken connection, re-learns the map
    /// (best effort: the node may have failed over).
    pub(crate) fn forget(&self, fault: &NodeFault, until: Option<Instant>) {
        if let Fault::Io(_) = fault.fault {
            if let Ok(mut pools) = self.pools.lock() {
                pools.remove(&fault.node);
            }
            let _ = self.refresh(until);
        }
    }

    /// Runs `commands`, pipelined per node, following redirects; returns
    /// each command's reply in order (`Err` holds an error reply other than
    /// a redirect). A broken connection or a malformed reply fails the
    /// whole call.
    pub(crate) fn run(
        &self,
        commands: &[Command],
        until: Option<Instant>,
    ) -> Result<Vec<Result<Reply, String>>, NodeFault> {
        let mut replies: Vec<Result<Reply, String>> = vec![Err("no reply".into()); commands.len()];
        self.run_with(commands, until, |i, conn| {
            replies[i] = match conn.reply() {
                Ok(reply) => Ok(reply),
                Err(Fault::Server(m)) if !is_redirect(&m) => Err(m),
                Err(f) => return Err(f),
            };
            Ok(())
        })?;
        Ok(replies)
    }

    /// Sends `commands`, pipelined: grouped per node (the owner of each
    /// command's slot, or the node of an `ASK`), every group sent before
    /// any reply is read; `read(i, conn)` then reads the reply of command
    /// `i`. A `MOVED`, `ASK` or `TRYAGAIN` error reply (returned by `read`
    /// as [`Fault::Server`]) sends the command again, at most
    /// [`MAX_REDIRECTS`] times; any other fault ends the call.
    pub(crate) fn run_with(
        &self,
        commands: &[Command],
        until: Option<Instant>,
        mut read: impl FnMut(usize, &mut Conn) -> Result<(), Fault>,
    ) -> Result<(), NodeFault> {
        let mut pending: Vec<(usize, Option<Node>)> =
            (0..commands.len()).map(|i| (i, None)).collect();
        for round in 0..=MAX_REDIRECTS {
            let Some(&(first, _)) = pending.first() else { return Ok(()) };
            if round == MAX_REDIRECTS {
                let slot = commands[first].slot;
                let node = self.owner(slot)?;
                let why = format!(
                    "TRYAGAIN slot {slot} was still redirected after {MAX_REDIRECTS} tries"
                );
                return Err(NodeFault::new(&node, Fault::Server(why)));
            }
            let mut groups: BTreeMap<Route, Vec<usize>> = BTreeMap::new();
            for (i, ask) in pending.drain(..) {
                let route = match ask {
                    Some(node) => Route { node, asking: true },
                    None => Route { node: self.owner(commands[i].slot)?, asking: false },
                };
                groups.entry(route).or_default().push(i);
            }
            let mut sent = Vec::with_capacity(groups.len());
            for (route, members) in groups {
                let mut conn = self.conn(&route.node, until)?;
                for &i in &members {
                    if route.asking {
                        conn.command(&[b"ASKING"]);
                    }
                    let args: Vec<&[u8]> = commands[i].args.iter().map(Vec::as_slice).collect();
                    conn.command(&args);
                }
                conn.flush().map_err(|f| NodeFault::new(&route.node, f))?;
                sent.push((route, members, conn));
            }
            let mut moved = false;
            let mut retry_later = false;
            for (route, members, mut conn) in sent {
                let fail = |f| NodeFault::new(&route.node, f);
                for i in members {
                    if route.asking {
                        expect_ok(conn.reply().map_err(fail)?, "ASKING").map_err(fail)?;
                    }
                    match read(i, &mut conn) {
                        Ok(()) => {}
                        Err(Fault::Server(m)) => match Redirect::parse(&m, &route.node) {
                            Some(Redirect::Moved(slot, node)) => {
                                self.moved(slot, &node);
                                moved = true;
                                pending.push((i, None));
                            }
                            Some(Redirect::Ask(_, node)) => pending.push((i, Some(node))),
                            None if m.starts_with("TRYAGAIN") => {
                                retry_later = true;
                                pending.push((i, None));
                            }
                            None => return Err(fail(Fault::Server(m))),
                        },
                        Err(f) => return Err(fail(f)),
                    }
                }
                self.put(&route.node, conn);
            }
            if moved {
                // Best effort: the MOVED replies already updated the map.
                let before = self.map();
                if self.refresh(until).is_ok() {
                    self.set_map(redirected(&self.map(), &before, commands, &pending));
                }
            }
            if retry_later {
                std::thread::sleep(TRYAGAIN_PAUSE);
            }
        }
        Ok(())
    }
}

/// Whether an error reply asks for the command to be sent again
/// (elsewhere, or later).
fn is_redirect(message: &str) -> bool {
    message.starts_with("MOVED ") || message.starts_with("ASK ") || message.starts_with("TRYAGAIN")
}

/// `fresh` with the owners that `MOVED` replies put in `before` kept for
/// the slots still pending (a node asked for `CLUSTER SLOTS` may not know
/// of the move yet).
fn redirected(
    fresh: &SlotMap,
    before: &SlotMap,
    commands: &[Command],
    pending: &[(usize, Option<Node>)],
) -> SlotMap {
    let mut map = fresh.clone();
    for (i, _) in pending {
        let slot = commands[*i].slot;
        if let Some(node) = before.owner(slot)
            && map.owner(slot) != Some(node)
        {
            map = map.moved(slot, node);
        }
    }
    map
}

/// Checks a `+OK` status reply.
pub(crate) fn expect_ok(reply: Reply, what: &str) -> Result<(), Fault> {
    match reply {
        Reply::Status(s) if s == b"OK" => Ok(()),
        other => Err(Fault::Protocol(format!("{what} answered {other:?}"))),
    }
}
