//! A pickle machine that executes nothing. It walks the opcodes a
//! `torch.save` state dict uses and builds a graph of plain values in an
//! arena; the few callables a state dict needs (`OrderedDict`, the tensor
//! rebuild functions, `torch.Size`) are interpreted, never imported or run.
//! Every other global is refused when it is named.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::globals::Global;
use crate::codec::cursor::Cursor;
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::layout::{
    MAX_PICKLE_CONTAINER_LEN, MAX_PICKLE_DEPTH, MAX_PICKLE_LEN, MAX_PICKLE_LONG_BYTES,
    MAX_PICKLE_MEMO, MAX_PICKLE_OPCODES, MAX_PICKLE_VALUE_BYTES,
};

/// Index of a value in a [`Pickle`]'s arena.
pub type NodeId = u32;

/// The storage a persistent id names: `('storage', type, key, location, numel)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageRef {
    /// Element type of a typed storage (`torch.FloatStorage`...), or `None`
    /// for `torch.storage.UntypedStorage` (whose numel counts bytes).
    pub dtype: Option<ElementType>,
    /// The storage key: the entry `data/<key>` holds its bytes.
    pub key: String,
    /// The device it was saved from (`"cpu"`, `"cuda:0"`...).
    pub location: String,
    /// Its element count (bytes for an untyped storage).
    pub numel: u64,
}

/// A tensor rebuilt by `_rebuild_tensor_v2`/`_v3` (and perhaps wrapped by
/// `_rebuild_parameter`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorNode {
    /// The storage it views.
    pub storage: StorageRef,
    /// The tensor's element type.
    pub dtype: ElementType,
    /// Offset into the storage, in elements of `dtype`.
    pub storage_offset: u64,
    /// The shape.
    pub shape: Vec<u64>,
    /// The strides, in elements.
    pub stride: Vec<u64>,
    /// Whether the tensor (or parameter) requires grad.
    pub requires_grad: bool,
}

/// One value in the arena. Containers hold ids, so shared references and
/// memo lookups never copy, and dropping the arena never recurses.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int (at most 16 bytes in the pickle).
    Int(i128),
    /// A float.
    Float(f64),
    /// A str.
    Str(String),
    /// bytes.
    Bytes(Vec<u8>),
    /// A tuple (also `torch.Size`).
    Tuple(Vec<NodeId>),
    /// A list.
    List(Vec<NodeId>),
    /// A dict or `OrderedDict`, in insertion order. Duplicate keys are kept
    /// here and refused when the state dict is flattened.
    Dict {
        /// Whether it was built as a `collections.OrderedDict`.
        ordered: bool,
        /// Key/value pairs.
        items: Vec<(NodeId, NodeId)>,
    },
    /// An allow-listed global, not yet called.
    Global(Global),
    /// A storage named by a persistent id.
    Storage(Box<StorageRef>),
    /// A rebuilt tensor.
    Tensor(Box<TensorNode>),
}

/// A walked pickle: the arena and the id of the value `STOP` returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Pickle {
    /// Every value built.
    pub nodes: Vec<Node>,
    /// The result.
    pub root: NodeId,
    /// The protocol from `PROTO` (0 if absent).
    pub protocol: u8,
}

impl Pickle {
    /// The node `id` (ids come from this pickle, so lookups do not fail; a
    /// foreign id gives `None`).
    pub fn node(&self, id: NodeId) -> &Node {
        self.nodes.get(id as usize).unwrap_or(&Node::None)
    }

    /// Walks `bytes`, whose first byte is at absolute offset `base`.
    pub fn parse(bytes: &[u8], base: u64) -> Result<Self> {
        if bytes.len() as u64 > MAX_PICKLE_LEN {
            return Err(Error::limit(base, "pickle length", bytes.len() as u64, MAX_PICKLE_LEN));
        }
        Machine {
            c: Cursor::new(bytes, base),
            nodes: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: BTreeMap::new(),
            protocol: 0,
            held: 0,
        }
        .run()
    }
}

pub(super) struct Machine<'a> {
    c: Cursor<'a>,
    nodes: Vec<Node>,
    stack: Vec<NodeId>,
    marks: Vec<usize>,
    memo: BTreeMap<u32, NodeId>,
    protocol: u8,
    /// Bytes of values held (node headers plus what they own).
    held: u64,
}

/// Bytes a node owns besides its header.
fn owned_bytes(node: &Node) -> u64 {
    let dims = |t: &TensorNode| (t.shape.len() + t.stride.len()) as u64 * 8;
    let storage = |s: &StorageRef| (s.key.len() + s.location.len()) as u64 + 64;
    match node {
        Node::Str(s) => s.len() as u64,
        Node::Bytes(b) => b.len() as u64,
        Node::Tuple(v) | Node::List(v) => v.len() as u64 * 4,
        Node::Dict { items, .. } => items.len() as u64 * 8,
        Node::Storage(s) => storage(s),
        Node::Tensor(t) => dims(t) + storage(&t.storage) + 64,
        _ => 0,
    }
}

impl<'a> Machine<'a> {
    fn add(&mut self, node: Node) -> NodeId {
        // The arena grows by at most a few nodes per opcode, and opcodes are
        // bounded, so the id always fits.
        let id = self.nodes.len() as NodeId;
        self.nodes.push(node);
        id
    }

    fn charge(&mut self, at: u64, bytes: u64) -> Result<()> {
        self.held = self.held.saturating_add(bytes);
        if self.held > MAX_PICKLE_VALUE_BYTES {
            return Err(Error::limit(at, "pickle value bytes", self.held, MAX_PICKLE_VALUE_BYTES));
        }
        Ok(())
    }

    fn push(&mut self, at: u64, node: Node) -> Result<()> {
        self.charge(at, core::mem::size_of::<Node>() as u64 + owned_bytes(&node))?;
        let id = self.add(node);
        self.push_id(at, id)
    }

    fn push_id(&mut self, at: u64, id: NodeId) -> Result<()> {
        if self.stack.len() as u64 >= MAX_PICKLE_CONTAINER_LEN {
            return Err(Error::limit(
                at,
                "pickle stack length",
                self.stack.len() as u64 + 1,
                MAX_PICKLE_CONTAINER_LEN,
            ));
        }
        self.stack.push(id);
        Ok(())
    }

    fn pop(&mut self, at: u64) -> Result<NodeId> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(Error::malformed(at, "pickle stack underflow"));
        }
        self.stack.pop().ok_or(Error::malformed(at, "pickle stack underflow"))
    }

    fn top(&self, at: u64) -> Result<NodeId> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match self.stack.last() {
            Some(&id) if self.stack.len() > floor => Ok(id),
            _ => Err(Error::malformed(at, "pickle stack underflow")),
        }
    }

    fn pop_mark(&mut self, at: u64) -> Result<Vec<NodeId>> {
        let Some(mark) = self.marks.pop() else {
            return Err(Error::malformed(at, "pickle MARK missing"));
        };
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    fn memo_put(&mut self, at: u64, index: u32) -> Result<()> {
        let id = self.top(at)?;
        if !self.memo.contains_key(&index) && self.memo.len() as u64 >= MAX_PICKLE_MEMO {
            return Err(Error::limit(
                at,
                "pickle memo entries",
                self.memo.len() as u64 + 1,
                MAX_PICKLE_MEMO,
            ));
        }
        self.memo.insert(index, id);
        Ok(())
    }

    fn memo_get(&mut self, at: u64, index: u32) -> Result<()> {
        let id =
            *self.memo.get(&index).ok_or(Error::malformed(at, "pickle memo index not defined"))?;
        self.push_id(at, id)
    }

    fn text(&self, at: u64, bytes: &[u8]) -> Result<String> {
        // Python pickles str as UTF-8 with surrogatepass; lone surrogates are
        // refused here.
        core::str::from_utf8(bytes)
            .map(String::from)
            .map_err(|_| Error::malformed(at, "pickle string is not UTF-8"))
    }

    fn run(mut self) -> Result<Pickle> {
        let mut ops: u64 = 0;
        loop {
            let at = self.c.offset();
            ops += 1;
            if ops > MAX_PICKLE_OPCODES {
                return Err(Error::limit(at, "pickle opcode count", ops, MAX_PICKLE_OPCODES));
            }
            let op = self.c.u8()?;
            match op {
                0x80 => {
                    let p = self.c.u8()?;
                    if p > 5 {
                        return Err(Error::malformed(at, "pickle protocol above 5"));
                    }
                    self.protocol = p;
                }
                0x95 => {
                    // FRAME: a length hint; frames are not needed to read.
                    self.c.u64()?;
                }
                b'.' => {
                    let root = self.pop(at)?;
                    if !self.stack.is_empty() || !self.marks.is_empty() {
                        return Err(Error::malformed(
                            at,
                            "pickle STOP with values left on the stack",
                        ));
                    }
                    if self.c.remaining() != 0 {
                        return Err(Error::malformed(
                            self.c.offset(),
                            "bytes after the pickle STOP",
                        ));
                    }
                    return Ok(Pickle { nodes: self.nodes, root, protocol: self.protocol });
                }
                b'c' => {
                    let module = self.read_line()?;
                    let name = self.read_line()?;
                    let g = Global::resolve(at, module, name)?;
                    self.push(at, Node::Global(g))?;
                }
                0x93 => {
                    // STACK_GLOBAL: module and name strings from the stack.
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    let (Node::Str(m), Node::Str(n)) = (self.node(module), self.node(name)) else {
                        return Err(Error::malformed(at, "STACK_GLOBAL needs two strings"));
                    };
                    let g = Global::resolve(at, m.as_bytes(), n.as_bytes())?;
                    self.push(at, Node::Global(g))?;
                }
                b'q' => {
                    let i = self.c.u8()?;
                    self.memo_put(at, u32::from(i))?;
                }
                b'r' => {
                    let i = self.c.u32()?;
                    self.memo_put(at, i)?;
                }
                0x94 => {
                    let i = u32::try_from(self.memo.len()).unwrap_or(u32::MAX);
                    self.memo_put(at, i)?;
                }
                b'h' => {
                    let i = self.c.u8()?;
                    self.memo_get(at, u32::from(i))?;
                }
                b'j' => {
                    let i = self.c.u32()?;
                    self.memo_get(at, i)?;
                }
                b'(' => {
                    if self.marks.len() >= MAX_PICKLE_DEPTH {
                        return Err(Error::limit(
                            at,
                            "pickle nesting depth",
                            self.marks.len() as u64 + 1,
                            MAX_PICKLE_DEPTH as u64,
                        ));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop(at)?;
                }
                b'1' => {
                    self.pop_mark(at)?;
                }
                b't' => {
                    let items = self.pop_mark(at)?;
                    self.push(at, Node::Tuple(items))?;
                }
                b')' => self.push(at, Node::Tuple(Vec::new()))?,
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = alloc::vec![0; n];
                    for slot in items.iter_mut().rev() {
                        *slot = self.pop(at)?;
                    }
                    self.push(at, Node::Tuple(items))?;
                }
                b']' => self.push(at, Node::List(Vec::new()))?,
                b'l' => {
                    let items = self.pop_mark(at)?;
                    self.push(at, Node::List(items))?;
                }
                b'}' => self.push(at, Node::Dict { ordered: false, items: Vec::new() })?,
                b'd' => {
                    let items = self.pop_mark(at)?;
                    let pairs = pairs(at, &items)?;
                    self.push(at, Node::Dict { ordered: false, items: pairs })?;
                }
                b'a' => {
                    let v = self.pop(at)?;
                    let list = self.top(at)?;
                    self.extend_list(at, list, &[v])?;
                }
                b'e' => {
                    let items = self.pop_mark(at)?;
                    let list = self.top(at)?;
                    self.extend_list(at, list, &items)?;
                }
                b's' => {
                    let v = self.pop(at)?;
                    let k = self.pop(at)?;
                    let dict = self.top(at)?;
                    self.extend_dict(at, dict, &[(k, v)])?;
                }
                b'u' => {
                    let items = self.pop_mark(at)?;
                    let pairs = pairs(at, &items)?;
                    let dict = self.top(at)?;
                    self.extend_dict(at, dict, &pairs)?;
                }
                b'R' | 0x81 => {
                    let args = self.pop(at)?;
                    let callable = self.pop(at)?;
                    let node = self.call(at, callable, args)?;
                    self.push(at, node)?;
                }
                b'b' => {
                    let state = self.pop(at)?;
                    let target = self.top(at)?;
                    self.build(at, target, state)?;
                }
                b'Q' => {
                    let pid = self.pop(at)?;
                    let storage = self.persistent(at, pid)?;
                    self.push(at, Node::Storage(Box::new(storage)))?;
                }
                b'N' => self.push(at, Node::None)?,
                0x88 => self.push(at, Node::Bool(true))?,
                0x89 => self.push(at, Node::Bool(false))?,
                b'K' => {
                    let v = self.c.u8()?;
                    self.push(at, Node::Int(i128::from(v)))?;
                }
                b'M' => {
                    let v = self.c.u16()?;
                    self.push(at, Node::Int(i128::from(v)))?;
                }
                b'J' => {
                    let v = self.c.i32()?;
                    self.push(at, Node::Int(i128::from(v)))?;
                }
                0x8a | 0x8b => {
                    let n =
                        if op == 0x8a { u64::from(self.c.u8()?) } else { u64::from(self.c.u32()?) };
                    if n > MAX_PICKLE_LONG_BYTES {
                        return Err(Error::limit(
                            at,
                            "pickle integer length",
                            n,
                            MAX_PICKLE_LONG_BYTES,
                        ));
                    }
                    let bytes = self.c.take(n)?;
                    self.push(at, Node::Int(long(bytes)))?;
                }
                b'G' => {
                    let raw = self.c.array::<8>()?;
                    self.push(at, Node::Float(f64::from_be_bytes(raw)))?;
                }
                b'X' | 0x8c | 0x8d | b'U' | b'T' | b'C' | b'B' | 0x8e => {
                    let n = match op {
                        0x8c | b'U' | b'C' => u64::from(self.c.u8()?),
                        0x8d | 0x8e => self.c.u64()?,
                        b'T' => u64::try_from(self.c.i32()?)
                            .map_err(|_| Error::malformed(at, "negative length"))?,
                        _ => u64::from(self.c.u32()?),
                    };
                    // The length is checked against the bytes present before
                    // anything is allocated.
                    let bytes = self.c.take(n)?;
                    let node = match op {
                        b'C' | b'B' | 0x8e => Node::Bytes(bytes.to_vec()),
                        b'U' | b'T' if !bytes.is_ascii() => {
                            return Err(Error::malformed(
                                at,
                                "non-ASCII Python 2 string in the pickle",
                            ));
                        }
                        _ => Node::Str(self.text(at, bytes)?),
                    };
                    self.push(at, node)?;
                }
                other => return Err(Error::UnsupportedOpcode { offset: at, opcode: other }),
            }
        }
    }

    fn read_line(&mut self) -> Result<&'a [u8]> {
        let at = self.c.offset();
        let rest = self.c.take(self.c.remaining() as u64)?;
        let Some(n) = rest.iter().position(|&b| b == b'\n') else {
            return Err(Error::truncated(at + rest.len() as u64, 1));
        };
        self.c = Cursor::new(&rest[n + 1..], at + n as u64 + 1);
        Ok(&rest[..n])
    }

    pub(super) fn node(&self, id: NodeId) -> &Node {
        self.nodes.get(id as usize).unwrap_or(&Node::None)
    }

    fn extend_list(&mut self, at: u64, list: NodeId, items: &[NodeId]) -> Result<()> {
        let Some(Node::List(v)) = self.nodes.get_mut(list as usize) else {
            return Err(Error::malformed(at, "APPEND to something that is not a list"));
        };
        if (v.len() + items.len()) as u64 > MAX_PICKLE_CONTAINER_LEN {
            return Err(Error::limit(
                at,
                "pickle list length",
                (v.len() + items.len()) as u64,
                MAX_PICKLE_CONTAINER_LEN,
            ));
        }
        v.extend_from_slice(items);
        self.charge(at, items.len() as u64 * 4)
    }

    fn extend_dict(&mut self, at: u64, dict: NodeId, pairs: &[(NodeId, NodeId)]) -> Result<()> {
        let Some(Node::Dict { items, .. }) = self.nodes.get_mut(dict as usize) else {
            return Err(Error::malformed(at, "SETITEM on something that is not a dict"));
        };
        if (items.len() + pairs.len()) as u64 > MAX_PICKLE_CONTAINER_LEN {
            return Err(Error::limit(
                at,
                "pickle dict length",
                (items.len() + pairs.len()) as u64,
                MAX_PICKLE_CONTAINER_LEN,
            ));
        }
        items.extend_from_slice(pairs);
        self.charge(at, pairs.len() as u64 * 8)
    }
}

fn pairs(at: u64, items: &[NodeId]) -> Result<Vec<(NodeId, NodeId)>> {
    if !items.len().is_multiple_of(2) {
        return Err(Error::malformed(at, "odd number of items for a dict"));
    }
    Ok(items.chunks_exact(2).map(|p| (p[0], p[1])).collect())
}

/// Two's-complement little-endian integer of at most 16 bytes.
fn long(bytes: &[u8]) -> i128 {
    let mut buf = [0u8; 16];
    let negative = bytes.last().is_some_and(|&b| b & 0x80 != 0);
    if negative {
        buf = [0xFF; 16];
    }
    buf[..bytes.len()].copy_from_slice(bytes);
    i128::from_le_bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(body: &[u8]) -> Pickle {
        Pickle::parse(body, 0).unwrap()
    }

    #[test]
    fn long_integers_are_twos_complement() {
        assert_eq!(long(&[]), 0);
        assert_eq!(long(&[0xff]), -1);
        assert_eq!(long(&[0x00, 0x80]), -32768);
        assert_eq!(long(&[0xff, 0x00]), 255);
        assert_eq!(long(&[0xff; 16]), -1);
        let p = walk(b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.");
        assert_eq!(p.node(p.root), &Node::Int(1 << 64));
    }

    #[test]
    fn memo_lookups_alias_like_python() {
        // d = {}; memo[0] = d; x = [d]; d['a'] = 1 after the list holds it.
        let p = walk(b"\x80\x02}q\x000](h\x00eh\x00(X\x01\x00\x00\x00aK\x01u0.");
        let Node::List(items) = p.node(p.root) else { panic!("{:?}", p.node(p.root)) };
        let Node::Dict { items: pairs, .. } = p.node(items[0]) else { panic!() };
        assert_eq!(pairs.len(), 1);
    }

    #[test]
    fn stack_never_pops_below_a_mark() {
        assert!(matches!(Pickle::parse(b"K\x01(0.", 7), Err(Error::Malformed { offset: 10, .. })));
        assert!(matches!(Pickle::parse(b"K\x01(.", 0), Err(Error::Malformed { .. })));
        assert!(matches!(Pickle::parse(b"K\x01K\x02.", 0), Err(Error::Malformed { .. })));
        assert!(matches!(Pickle::parse(b"K\x01.x", 0), Err(Error::Malformed { offset: 3, .. })));
    }
}
