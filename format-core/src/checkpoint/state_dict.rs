//! The walked pickle flattened into an ordered list of entries, plus the
//! table of storages they view, every view checked against its storage.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::pickle::{Node, NodeId, Pickle, StorageRef, TensorNode};
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::layout::{
    MAX_PATH_COMPONENTS, MAX_PICKLE_DEPTH, MAX_STATE_DICT_PATH_BYTES, MAX_STATE_DICT_VISITS,
};
use crate::path::{PathComponent, TensorPath};

/// One storage: the bytes of zip entry `data/<key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageInfo {
    /// The storage key.
    pub key: String,
    /// Element type of a typed storage; `None` for an untyped one.
    pub dtype: Option<ElementType>,
    /// Element count as pickled (bytes for an untyped storage).
    pub numel: u64,
    /// Device it was saved from.
    pub location: String,
    /// Its length in bytes: `numel × itemsize` (checked).
    pub byte_len: u64,
}

/// A tensor: a strided view of one storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorView {
    /// Index into [`StateDict::storages`].
    pub storage: usize,
    /// Element type of the tensor.
    pub dtype: ElementType,
    /// Offset of element 0 in the storage, in elements of `dtype`.
    pub storage_offset: u64,
    /// The shape.
    pub shape: Vec<u64>,
    /// Strides in elements (0 for expanded dimensions).
    pub stride: Vec<u64>,
    /// Whether it requires grad (parameters saved with it).
    pub requires_grad: bool,
}

impl TensorView {
    /// Number of elements (`None` on overflow; may exceed the storage when
    /// a stride is 0).
    pub fn numel(&self) -> Option<u64> {
        numel(&self.shape)
    }

    /// Whether strides are the row-major strides of the shape.
    pub fn is_contiguous(&self) -> bool {
        is_row_major(&self.shape, &self.stride)
    }

    /// Elements of the storage the view spans from its offset: 0 for an
    /// empty tensor, else `1 + Σ (size−1) × stride`. `None` on overflow.
    pub fn extent(&self) -> Option<u64> {
        if self.shape.contains(&0) {
            return Some(0);
        }
        self.shape
            .iter()
            .zip(&self.stride)
            .try_fold(1u64, |a, (&d, &s)| a.checked_add((d - 1).checked_mul(s)?))
    }

    /// The byte range of the view inside its storage:
    /// `[offset × itemsize, (offset + extent) × itemsize)`.
    pub fn byte_span(&self) -> Option<core::ops::Range<u64>> {
        let size = u64::from(self.dtype.size());
        let start = self.storage_offset.checked_mul(size)?;
        let end = self.storage_offset.checked_add(self.extent()?)?.checked_mul(size)?;
        Some(start..end)
    }

    /// Gathers the view's elements in row-major order from `data` (the
    /// bytes of [`TensorView::byte_span`]) into `out` (`numel × itemsize`
    /// bytes): what `tensor.contiguous()` holds. Runs along the last
    /// dimension are copied at once when its stride is 1. `None` when
    /// `data` or `out` has the wrong length (nothing is read out of
    /// bounds).
    pub fn gather(&self, data: &[u8], out: &mut [u8]) -> Option<()> {
        let size = self.dtype.size() as usize;
        let span = self.byte_span()?;
        let numel = usize::try_from(self.numel()?).ok()?;
        if (data.len() as u64) != span.end - span.start || out.len() != numel.checked_mul(size)? {
            return None;
        }
        let Some((&last, outer)) = self.shape.split_last() else {
            out.copy_from_slice(data.get(..size)?);
            return Some(());
        };
        if numel == 0 {
            return Some(());
        }
        let last = usize::try_from(last).ok()?;
        let last_stride = usize::try_from(*self.stride.last()?).ok()?;
        let row_bytes = last * size;
        let mut index = alloc::vec![0u64; outer.len()];
        for row in out.chunks_exact_mut(row_bytes) {
            // Within the span: every index is below its dimension, so the
            // offset is at most the extent (checked by byte_span).
            let base =
                index.iter().zip(&self.stride).map(|(i, s)| i * s).sum::<u64>() as usize * size;
            if last_stride == 1 {
                row.copy_from_slice(data.get(base..base + row_bytes)?);
            } else {
                for (k, element) in row.chunks_exact_mut(size).enumerate() {
                    let at = base + k * last_stride * size;
                    element.copy_from_slice(data.get(at..at + size)?);
                }
            }
            for k in (0..index.len()).rev() {
                index[k] += 1;
                if index[k] < outer[k] {
                    break;
                }
                index[k] = 0;
            }
        }
        Some(())
    }
}

/// A state-dict leaf. Non-tensor leaves (ints, floats, strings...) are
/// kept, since optimizer states and `_extra_state` carry them.
#[derive(Debug, Clone, PartialEq)]
pub enum Leaf {
    /// A tensor or parameter.
    Tensor(TensorView),
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int.
    Int(i128),
    /// A float.
    Float(f64),
    /// A str.
    Str(String),
    /// bytes.
    Bytes(Vec<u8>),
}

/// One flattened entry: the path of keys (and list indices) leading to it.
#[derive(Debug, Clone, PartialEq)]
pub struct StateDictEntry {
    /// Its path; a top-level key `"layer.weight"` is a plain name.
    pub path: TensorPath,
    /// What it holds.
    pub value: Leaf,
}

/// What a nested container was pickled as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// A `dict` (`ordered`: a `collections.OrderedDict`).
    Dict {
        /// Whether it was built as a `collections.OrderedDict`.
        ordered: bool,
    },
    /// A `list`.
    List,
    /// A `tuple`.
    Tuple,
}

/// A container below the root, so that a host can rebuild values that
/// hold no tensor exactly as `torch.load` gives them (a module's
/// `_extra_state`, an optimizer's hyper-parameters), empty ones included.
#[derive(Debug, Clone, PartialEq)]
pub struct Container {
    /// Its path.
    pub path: TensorPath,
    /// What it was pickled as.
    pub kind: ContainerKind,
    /// How many items it holds.
    pub len: usize,
    /// How many entries come before it in depth-first order (where it
    /// sits among [`StateDict::entries`]).
    pub entries_before: usize,
}

/// The checked result: entries in pickle order and the storages they use,
/// in first-use order.
#[derive(Debug, Clone, PartialEq)]
pub struct StateDict {
    /// Every leaf, in insertion order, depth first.
    pub entries: Vec<StateDictEntry>,
    /// Every storage referenced.
    pub storages: Vec<StorageInfo>,
    /// Every container below the root, in the same depth-first order
    /// (each before what it holds).
    pub containers: Vec<Container>,
}

enum Frame {
    Enter { id: NodeId, component: Option<PathComponent>, depth: usize },
    Exit,
}

fn corrupt(path: &[PathComponent], reason: &'static str) -> Error {
    let key = TensorPath::from_components(path.to_vec()).map(|p| p.to_string()).unwrap_or_default();
    Error::CorruptCheckpoint { key, reason }
}

fn component_bytes(c: &PathComponent) -> u64 {
    match c {
        PathComponent::Key(k) => k.len() as u64 + 8,
        PathComponent::Index(_) => 8,
    }
}

struct Flattener<'p> {
    pickle: &'p Pickle,
    out: StateDict,
    by_key: BTreeMap<String, usize>,
    path: Vec<PathComponent>,
    path_bytes: u64,
    copied_bytes: u64,
    components: u64,
}

impl StateDict {
    /// Flattens a walked pickle. The root must be a dict (or a list or
    /// tuple); nested dicts, lists and tuples become path components;
    /// empty containers produce no entry. Keys must be strings or
    /// non-negative ints, unique within their dict. Every view must fit
    /// its storage.
    pub fn from_pickle(pickle: &Pickle) -> Result<Self> {
        if !matches!(pickle.node(pickle.root), Node::Dict { .. } | Node::List(_) | Node::Tuple(_)) {
            return Err(Error::CorruptCheckpoint {
                key: String::new(),
                reason: "the pickled object is not a dict (a state dict) or a list",
            });
        }
        let mut f = Flattener {
            pickle,
            out: Self { entries: Vec::new(), storages: Vec::new(), containers: Vec::new() },
            by_key: BTreeMap::new(),
            path: Vec::new(),
            path_bytes: 0,
            copied_bytes: 0,
            components: 0,
        };
        f.run()?;
        Ok(f.out)
    }
}

impl Flattener<'_> {
    fn run(&mut self) -> Result<()> {
        let mut stack =
            alloc::vec![Frame::Enter { id: self.pickle.root, component: None, depth: 0 }];
        let mut visits = 1u64;
        while let Some(frame) = stack.pop() {
            let (id, component, depth) = match frame {
                Frame::Exit => {
                    if let Some(c) = self.path.pop() {
                        self.path_bytes -= component_bytes(&c);
                    }
                    continue;
                }
                Frame::Enter { id, component, depth } => (id, component, depth),
            };
            if depth > MAX_PICKLE_DEPTH {
                return Err(Error::limit(
                    0,
                    "state-dict nesting depth",
                    depth as u64,
                    MAX_PICKLE_DEPTH as u64,
                ));
            }
            if let Some(c) = component {
                self.path_bytes += component_bytes(&c);
                self.path.push(c);
            }
            let pickle = self.pickle;
            let node = pickle.node(id);
            let children: Vec<(PathComponent, NodeId)> = match node {
                Node::Dict { items, ordered } => {
                    self.container(depth, ContainerKind::Dict { ordered: *ordered }, items.len())?;
                    self.keys(items)?
                }
                Node::List(v) | Node::Tuple(v) => {
                    let kind = if matches!(node, Node::List(_)) {
                        ContainerKind::List
                    } else {
                        ContainerKind::Tuple
                    };
                    self.container(depth, kind, v.len())?;
                    v.iter()
                        .enumerate()
                        .map(|(i, &c)| (PathComponent::Index(i as u64), c))
                        .collect()
                }
                leaf => {
                    self.leaf(leaf)?;
                    if depth > 0 {
                        stack.push(Frame::Exit);
                    }
                    continue;
                }
            };
            visits += children.len() as u64;
            if visits > MAX_STATE_DICT_VISITS {
                return Err(Error::limit(
                    0,
                    "state-dict values visited",
                    visits,
                    MAX_STATE_DICT_VISITS,
                ));
            }
            if depth > 0 {
                stack.push(Frame::Exit);
            }
            for (c, child) in children.into_iter().rev() {
                stack.push(Frame::Enter { id: child, component: Some(c), depth: depth + 1 });
            }
        }
        Ok(())
    }

    fn keys(&mut self, items: &[(NodeId, NodeId)]) -> Result<Vec<(PathComponent, NodeId)>> {
        let mut out = Vec::with_capacity(items.len());
        for &(k, v) in items {
            let c = match self.pickle.node(k) {
                Node::Str(s) => {
                    // Keys are copied at every visit of their dict.
                    self.copy(s.len() as u64)?;
                    PathComponent::Key(s.clone())
                }
                Node::Int(i) if *i >= 0 && *i <= i128::from(u64::MAX) => {
                    PathComponent::Index(*i as u64)
                }
                _ => {
                    return Err(corrupt(
                        &self.path,
                        "a dict key is not a string or a non-negative int",
                    ));
                }
            };
            out.push((c, v));
        }
        let mut sorted: Vec<&PathComponent> = out.iter().map(|(c, _)| c).collect();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(corrupt(&self.path, "a dict has a duplicate key"));
        }
        Ok(out)
    }

    fn leaf(&mut self, node: &Node) -> Result<()> {
        let value = match node {
            Node::None => Leaf::None,
            Node::Bool(b) => Leaf::Bool(*b),
            Node::Int(i) => Leaf::Int(*i),
            Node::Float(x) => Leaf::Float(*x),
            Node::Str(s) => {
                self.copy(s.len() as u64)?;
                Leaf::Str(s.clone())
            }
            Node::Bytes(b) => {
                self.copy(b.len() as u64)?;
                Leaf::Bytes(b.clone())
            }
            Node::Tensor(t) => {
                self.copy((t.shape.len() + t.stride.len()) as u64 * 8)?;
                Leaf::Tensor(self.tensor(t)?)
            }
            Node::Storage(_) => return Err(corrupt(&self.path, "a bare storage, not a tensor")),
            Node::Global(_) => return Err(corrupt(&self.path, "a bare global, not a value")),
            Node::Dict { .. } | Node::List(_) | Node::Tuple(_) => {
                return Err(corrupt(&self.path, "container"));
            }
        };
        let path = self.current_path("a leaf at the root of the state dict")?;
        self.out.entries.push(StateDictEntry { path, value });
        Ok(())
    }

    /// The path being visited, copied (and counted against the limits) for
    /// an entry or a container; `at_root` says what is wrong when it is
    /// empty.
    fn current_path(&mut self, at_root: &'static str) -> Result<TensorPath> {
        self.copy(self.path_bytes)?;
        self.components += self.path.len() as u64;
        if self.components > MAX_PATH_COMPONENTS {
            return Err(Error::limit(
                0,
                "state-dict path components",
                self.components,
                MAX_PATH_COMPONENTS,
            ));
        }
        TensorPath::from_components(self.path.clone()).map_err(|_| corrupt(&self.path, at_root))
    }

    /// Records a container below the root (its path is copied, as a
    /// leaf's is).
    fn container(&mut self, depth: usize, kind: ContainerKind, len: usize) -> Result<()> {
        if depth == 0 {
            return Ok(());
        }
        let path = self.current_path("a container at the root of the state dict")?;
        let entries_before = self.out.entries.len();
        self.out.containers.push(Container { path, kind, len, entries_before });
        Ok(())
    }

    fn copy(&mut self, bytes: u64) -> Result<()> {
        self.copied_bytes = self.copied_bytes.saturating_add(bytes);
        if self.copied_bytes > MAX_STATE_DICT_PATH_BYTES {
            return Err(Error::limit(
                0,
                "state-dict bytes copied",
                self.copied_bytes,
                MAX_STATE_DICT_PATH_BYTES,
            ));
        }
        Ok(())
    }

    fn storage(&mut self, s: &StorageRef) -> Result<usize> {
        if let Some(&i) = self.by_key.get(&s.key) {
            let known = &self.out.storages[i];
            if known.dtype != s.dtype || known.numel != s.numel {
                return Err(Error::CorruptCheckpoint {
                    key: s.key.clone(),
                    reason: "one storage key is pickled with two types or sizes",
                });
            }
            return Ok(i);
        }
        let byte_len = match s.dtype {
            Some(t) => s.numel.checked_mul(u64::from(t.size())),
            None => Some(s.numel),
        }
        .ok_or_else(|| Error::CorruptCheckpoint {
            key: s.key.clone(),
            reason: "storage size overflows",
        })?;
        self.copy((s.key.len() + s.location.len()) as u64)?;
        self.out.storages.push(StorageInfo {
            key: s.key.clone(),
            dtype: s.dtype,
            numel: s.numel,
            location: s.location.clone(),
            byte_len,
        });
        let i = self.out.storages.len() - 1;
        self.by_key.insert(s.key.clone(), i);
        Ok(i)
    }

    fn tensor(&mut self, t: &TensorNode) -> Result<TensorView> {
        let storage = self.storage(&t.storage)?;
        let view = TensorView {
            storage,
            dtype: t.dtype,
            storage_offset: t.storage_offset,
            shape: t.shape.clone(),
            stride: t.stride.clone(),
            requires_grad: t.requires_grad,
        };
        let byte_len = self.out.storages[storage].byte_len;
        let span =
            view.byte_span().ok_or_else(|| corrupt(&self.path, "tensor view size overflows"))?;
        if span.end > byte_len {
            return Err(corrupt(&self.path, "tensor view reaches past the end of its storage"));
        }
        Ok(view)
    }
}

/// Number of elements of `shape` (`None` on overflow).
pub fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
}

/// Whether `stride` (in elements) is the row-major stride of `shape`;
/// dimensions of size 1 may have any stride.
pub fn is_row_major(shape: &[u64], stride: &[u64]) -> bool {
    let mut expected = 1u64;
    for (&d, &s) in shape.iter().zip(stride).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::*;

    fn view(shape: &[u64], stride: &[u64], offset: u64) -> TensorView {
        TensorView {
            storage: 0,
            dtype: ElementType::I16,
            storage_offset: offset,
            shape: shape.to_vec(),
            stride: stride.to_vec(),
            requires_grad: false,
        }
    }

    fn elements(bytes: &[u8]) -> Vec<i16> {
        bytes.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]])).collect()
    }

    #[test]
    fn gather_reads_views_row_major() {
        let storage: Vec<u8> = (0i16..12).flat_map(i16::to_le_bytes).collect();
        let gathered = |v: &TensorView| {
            let span = v.byte_span().unwrap();
            let mut out = vec![0u8; v.numel().unwrap() as usize * 2];
            v.gather(&storage[span.start as usize..span.end as usize], &mut out).unwrap();
            elements(&out)
        };
        // A transposed 3x4 matrix, a column, a broadcast row, a scalar.
        assert_eq!(gathered(&view(&[4, 3], &[1, 4], 0)), [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
        assert_eq!(gathered(&view(&[3], &[4], 1)), [1, 5, 9]);
        assert_eq!(gathered(&view(&[2, 3], &[0, 1], 2)), [2, 3, 4, 2, 3, 4]);
        assert_eq!(gathered(&view(&[], &[], 7)), [7]);
        assert_eq!(gathered(&view(&[0, 3], &[3, 1], 0)), [] as [i16; 0]);
        // Wrong lengths are refused, never read past.
        let v = view(&[2, 2], &[2, 1], 0);
        assert!(v.gather(&storage[..6], &mut [0u8; 8]).is_none());
        assert!(v.gather(&storage[..8], &mut [0u8; 6]).is_none());
    }
}
