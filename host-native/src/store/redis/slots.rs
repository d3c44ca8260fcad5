//! Redis Cluster's key space: the slot of a key (CRC16/XMODEM of the key
//! or of its `{hash tag}`, modulo 16384), the slot map learnt from
//! `CLUSTER SLOTS`, and short hash tags that pin a key to a chosen slot.

use std::fmt;
use std::sync::OnceLock;

use super::fault::Fault;
use super::resp::Reply;

/// Slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16384;

/// Most numbers tried while looking for a hash tag for every slot (the
/// search ends near 2^18; this bounds it whatever happens).
const TAG_SEARCH_LIMIT: u32 = 1 << 22;

/// CRC16 as Redis Cluster computes it: CCITT polynomial `0x1021`, initial
/// value 0, no reflection (XMODEM).
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// The part of `key` that Redis Cluster hashes: the bytes between the
/// first `{` and the first `}` after it when there is at least one byte
/// between them, otherwise the whole key.
fn hashed_part(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The cluster slot (0..16384) of `key`, as `CLUSTER KEYSLOT` computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) & (SLOTS as u16 - 1)
}

/// Whether `prefix` could put a hash tag on every key under it (it holds a
/// `{`), which would store a whole file in one slot.
pub(crate) fn has_hash_tag(prefix: &str) -> bool {
    prefix.contains('{')
}

/// For each slot, the smallest number whose decimal digits hash to it
/// (`None` only if the search limit was hit, which the tests rule out).
fn tag_table() -> &'static [Option<u32>] {
    static TABLE: OnceLock<Vec<Option<u32>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![None; SLOTS];
        let mut missing = SLOTS;
        for n in 0..TAG_SEARCH_LIMIT {
            let slot = key_slot(n.to_string().as_bytes()) as usize;
            if let Some(entry @ None) = table.get_mut(slot) {
                *entry = Some(n);
                missing -= 1;
                if missing == 0 {
                    break;
                }
            }
        }
        table
    })
}

/// A hash tag (`{digits}`) that puts a key starting with it in `slot`.
pub(crate) fn tag_for_slot(slot: u16) -> Option<String> {
    tag_table().get(slot as usize).copied().flatten().map(|n| format!("{{{n}}}"))
}

/// One node's address, as the cluster announces it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Node {
    /// Host name or IP address (IPv6 without brackets).
    pub(crate) host: String,
    /// TCP port.
    pub(crate) port: u16,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Node {
    /// Parses the `host:port` of a `MOVED`/`ASK` redirect (the host may be
    /// empty, meaning the node that answered: `fallback`).
    pub(crate) fn parse(endpoint: &str, fallback: &Self) -> Option<Self> {
        let (host, port) = endpoint.rsplit_once(':')?;
        let port = port.parse::<u16>().ok().filter(|&p| p != 0)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = if host.is_empty() { fallback.host.clone() } else { host.to_string() };
        Some(Self { host, port })
    }
}

/// Which master serves each slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// The masters, each once, sorted.
    nodes: Vec<Node>,
    /// For each slot, an index into `nodes` (`u16::MAX`: served by none).
    owner: Vec<u16>,
}

/// A slot no master serves.
const UNSERVED: u16 = u16::MAX;

impl SlotMap {
    /// Parses a `CLUSTER SLOTS` reply, as answered by `asked` (whose host
    /// stands in for an empty or unknown endpoint).
    pub(crate) fn parse(reply: Reply, asked: &Node) -> Result<Self, Fault> {
        let bad = |why: &str| Fault::Protocol(format!("CLUSTER SLOTS answered {why}"));
        let Reply::Array(Some(ranges)) = reply else {
            return Err(bad("something that is not a list of slot ranges"));
        };
        let mut nodes: Vec<Node> = Vec::new();
        let mut owner = vec![UNSERVED; SLOTS];
        for range in ranges {
            let Reply::Array(Some(parts)) = range else {
                return Err(bad("a slot range that is not a list"));
            };
            let mut parts = parts.into_iter();
            let (Some(Reply::Int(start)), Some(Reply::Int(end)), Some(Reply::Array(Some(master)))) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad("a slot range without start, end and master"));
            };
            let (start, end) = match (usize::try_from(start), usize::try_from(end)) {
                (Ok(s), Ok(e)) if s <= e && e < SLOTS => (s, e),
                _ => return Err(bad(&format!("slots {start}..={end}, outside 0..{SLOTS}"))),
            };
            let mut master = master.into_iter();
            let (Some(Reply::Bulk(Some(host))), Some(Reply::Int(port))) =
                (master.next(), master.next())
            else {
                return Err(bad("a master without host and port"));
            };
            let port = u16::try_from(port)
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| bad(&format!("port {port}")))?;
            let host = String::from_utf8(host).map_err(|_| bad("a host name that is not UTF-8"))?;
            // "?" marks an endpoint the node does not know: nobody to ask.
            if host == "?" {
                continue;
            }
            let host = if host.is_empty() { asked.host.clone() } else { host };
            let node = Node { host, port };
            let index = match nodes.iter().position(|n| *n == node) {
                Some(i) => i,
                None => {
                    nodes.push(node);
                    nodes.len() - 1
                }
            };
            // At most one node per slot range, and ranges are within SLOTS.
            let index = u16::try_from(index).map_err(|_| bad("more masters than slots"))?;
            owner[start..=end].fill(index);
        }
        if nodes.is_empty() {
            return Err(Fault::Server("CLUSTERDOWN the cluster serves no slot".into()));
        }
        Ok(Self::sorted(nodes, owner))
    }

    /// The same map with node indices in sorted node order (so that two
    /// maps of one topology compare equal).
    fn sorted(nodes: Vec<Node>, owner: Vec<u16>) -> Self {
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by(|&a, &b| nodes[a].cmp(&nodes[b]));
        let mut renumber = vec![UNSERVED; nodes.len()];
        for (new, &old) in order.iter().enumerate() {
            renumber[old] = new as u16;
        }
        let owner = owner
            .into_iter()
            .map(|o| renumber.get(o as usize).copied().unwrap_or(UNSERVED))
            .collect();
        let nodes = order.into_iter().map(|i| nodes[i].clone()).collect();
        Self { nodes, owner }
    }

    /// The master serving `slot`, if any.
    pub(crate) fn owner(&self, slot: u16) -> Option<&Node> {
        let index = *self.owner.get(slot as usize)?;
        self.nodes.get(index as usize)
    }

    /// Every master, each once.
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The map with `slot` served by `node` (a `MOVED` reply says so
    /// before `CLUSTER SLOTS` may).
    pub(crate) fn moved(&self, slot: u16, node: &Node) -> Self {
        let mut nodes = self.nodes.clone();
        let mut owner = self.owner.clone();
        let index = match nodes.iter().position(|n| n == node) {
            Some(i) => i,
            None => {
                nodes.push(node.clone());
                nodes.len() - 1
            }
        };
        if let (Some(o), Ok(i)) = (owner.get_mut(slot as usize), u16::try_from(index)) {
            *o = i;
        }
        Self::sorted(nodes, owner)
    }
}

/// A `MOVED` or `ASK` redirect from an error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// The slot now lives on this node for good: update the map.
    Moved(u16, Node),
    /// Ask this node once, after `ASKING` (the slot is being migrated).
    Ask(u16, Node),
}

impl Redirect {
    /// Parses `MOVED <slot> <host>:<port>` or `ASK <slot> <host>:<port>`,
    /// sent by `from`.
    pub(crate) fn parse(message: &str, from: &Node) -> Option<Self> {
        let mut words = message.split_ascii_whitespace();
        let kind = words.next()?;
        let slot = words.next()?.parse::<u16>().ok().filter(|&s| (s as usize) < SLOTS)?;
        let node = Node::parse(words.next()?, from)?;
        match kind {
            "MOVED" => Some(Self::Moved(slot, node)),
            "ASK" => Some(Self::Ask(slot, node)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on redis-server 7.0.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"no}tag{"), crc16(b"no}tag{") & 16383);
    }

    #[test]
    fn every_slot_has_a_tag() {
        for slot in 0..SLOTS as u16 {
            let tag = tag_for_slot(slot).unwrap();
            assert_eq!(key_slot(format!("{tag}model.tmp-1:t:0").as_bytes()), slot);
        }
    }

    fn node(port: u16) -> Node {
        Node { host: "127.0.0.1".into(), port }
    }

    fn range(start: i64, end: i64, host: &str, port: i64) -> Reply {
        let master = Reply::Array(Some(vec![
            Reply::Bulk(Some(host.as_bytes().to_vec())),
            Reply::Int(port),
            Reply::Bulk(Some(b"id".to_vec())),
            Reply::Array(Some(vec![])),
        ]));
        Reply::Array(Some(vec![Reply::Int(start), Reply::Int(end), master]))
    }

    #[test]
    fn parses_cluster_slots() {
        let reply = Reply::Array(Some(vec![
            range(5461, 16383, "127.0.0.1", 7001),
            range(0, 5460, "", 7000),
            range(100, 100, "?", 7009),
        ]));
        let map = SlotMap::parse(reply, &node(7000)).unwrap();
        assert_eq!(map.nodes(), [node(7000), node(7001)]);
        assert_eq!(map.owner(0), Some(&node(7000)));
        assert_eq!(map.owner(5461), Some(&node(7001)));
        assert_eq!(map.owner(100), Some(&node(7000)));
        let moved = map.moved(0, &node(7002));
        assert_eq!(moved.owner(0), Some(&node(7002)));
        assert_eq!(moved.owner(1), Some(&node(7000)));
        for bad in [
            Reply::Int(1),
            Reply::Array(Some(vec![range(0, 16384, "h", 1)])),
            Reply::Array(Some(vec![range(5, 4, "h", 1)])),
            Reply::Array(Some(vec![range(0, 1, "h", 0)])),
            Reply::Array(Some(vec![range(0, 1, "h", 70000)])),
            Reply::Array(Some(vec![Reply::Array(Some(vec![Reply::Int(0)]))])),
        ] {
            assert!(matches!(SlotMap::parse(bad, &node(1)), Err(Fault::Protocol(_))));
        }
        assert!(matches!(
            SlotMap::parse(Reply::Array(Some(vec![])), &node(1)),
            Err(Fault::Server(_))
        ));
    }

    #[test]
    fn parses_redirects() {
        let from = node(7000);
        assert_eq!(
            Redirect::parse("MOVED 3999 127.0.0.1:6381", &from),
            Some(Redirect::Moved(3999, node(6381)))
        );
        assert_eq!(Redirect::parse("ASK 3999 :6381", &from), Some(Redirect::Ask(3999, node(6381))));
        assert_eq!(
            Redirect::parse("MOVED 1 [::1]:6381", &from),
            Some(Redirect::Moved(1, Node { host: "::1".into(), port: 6381 }))
        );
        for bad in
            ["MOVED 16384 h:1", "MOVED x h:1", "MOVED 1 h", "MOVED 1 h:0", "ERR 1 h:1", "MOVED"]
        {
            assert_eq!(Redirect::parse(bad, &from), None, "{bad}");
        }
    }
}
