//! What the pickle machine does with the allow-listed globals: `REDUCE`
//! (and `NEWOBJ`) on them, `BUILD` on an `OrderedDict`, and `BINPERSID`.
//! Only argument shapes are checked and plain values built; nothing runs.

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::globals::Global;
use super::pickle::{Machine, Node, NodeId, StorageRef, TensorNode};
use crate::error::{Error, Result};
use crate::layout::MAX_NDIM;

/// Most arguments any allow-listed call takes.
const MAX_CALL_ARGS: usize = 8;

impl Machine<'_> {
    fn items(&self, at: u64, id: NodeId, what: &'static str) -> Result<&[NodeId]> {
        match self.node(id) {
            Node::Tuple(v) | Node::List(v) => Ok(v),
            _ => Err(Error::malformed(at, what)),
        }
    }

    fn uint(&self, at: u64, id: NodeId, what: &'static str) -> Result<u64> {
        match self.node(id) {
            Node::Int(v) => u64::try_from(*v).map_err(|_| Error::malformed(at, what)),
            _ => Err(Error::malformed(at, what)),
        }
    }

    fn dims(&self, at: u64, id: NodeId, what: &'static str) -> Result<Vec<u64>> {
        let items = self.items(at, id, what)?;
        if items.len() > MAX_NDIM {
            return Err(Error::limit(at, "tensor dimensions", items.len() as u64, MAX_NDIM as u64));
        }
        items.iter().map(|&d| self.uint(at, d, what)).collect()
    }

    fn flag(&self, at: u64, id: NodeId) -> Result<bool> {
        match self.node(id) {
            Node::Bool(b) => Ok(*b),
            Node::Int(v @ 0..=1) => Ok(*v == 1),
            _ => Err(Error::malformed(at, "requires_grad is not a bool")),
        }
    }

    /// REDUCE / NEWOBJ on an allow-listed global.
    pub(super) fn call(&mut self, at: u64, callable: NodeId, args: NodeId) -> Result<Node> {
        let Node::Global(g) = self.node(callable) else {
            return Err(Error::malformed(at, "REDUCE on something that is not a global"));
        };
        let g = *g;
        let args = self.items(at, args, "REDUCE arguments are not a tuple")?;
        // Copy the arguments only once their count is known to be small: a
        // memoized huge tuple may be passed any number of times.
        if args.len() > MAX_CALL_ARGS {
            return Err(Error::malformed(at, "too many arguments for a state-dict call"));
        }
        let args = args.to_vec();
        match g {
            Global::OrderedDict if args.is_empty() => {
                Ok(Node::Dict { ordered: true, items: Vec::new() })
            }
            Global::OrderedDict => Err(Error::malformed(at, "OrderedDict called with arguments")),
            Global::Size => match args.as_slice() {
                [dims] => {
                    let dims = self.items(at, *dims, "torch.Size argument is not a tuple")?;
                    if dims.len() > MAX_NDIM {
                        return Err(Error::limit(
                            at,
                            "tensor dimensions",
                            dims.len() as u64,
                            MAX_NDIM as u64,
                        ));
                    }
                    Ok(Node::Tuple(dims.to_vec()))
                }
                _ => Err(Error::malformed(at, "torch.Size takes one tuple")),
            },
            Global::RebuildTensorV2 | Global::RebuildTensorV3 => self.rebuild_tensor(at, g, &args),
            Global::RebuildParameter | Global::RebuildParameterWithState => {
                let n = if g == Global::RebuildParameter { 3 } else { 4 };
                if args.len() != n {
                    return Err(Error::malformed(
                        at,
                        "wrong argument count for _rebuild_parameter",
                    ));
                }
                let Node::Tensor(t) = self.node(args[0]) else {
                    return Err(Error::malformed(
                        at,
                        "_rebuild_parameter of something that is not a tensor",
                    ));
                };
                let mut t = t.clone();
                t.requires_grad = self.flag(at, args[1])?;
                Ok(Node::Tensor(t))
            }
            Global::Storage(_) | Global::UntypedStorage | Global::Dtype(_) => {
                Err(Error::malformed(at, "a storage type or dtype is called"))
            }
        }
    }

    fn rebuild_tensor(&self, at: u64, g: Global, args: &[NodeId]) -> Result<Node> {
        let v3 = g == Global::RebuildTensorV3;
        let (min, max) = if v3 { (7, 8) } else { (6, 7) };
        if args.len() < min || args.len() > max {
            return Err(Error::malformed(at, "wrong argument count for _rebuild_tensor"));
        }
        let Node::Storage(storage) = self.node(args[0]) else {
            return Err(Error::malformed(at, "_rebuild_tensor of something that is not a storage"));
        };
        let storage_offset = self.uint(at, args[1], "storage offset is not a non-negative int")?;
        let shape = self.dims(at, args[2], "tensor size is not a tuple of non-negative ints")?;
        let stride = self.dims(at, args[3], "tensor stride is not a tuple of non-negative ints")?;
        if shape.len() != stride.len() {
            return Err(Error::malformed(at, "tensor size and stride differ in length"));
        }
        let requires_grad = self.flag(at, args[4])?;
        let dtype = if v3 {
            let Node::Global(Global::Dtype(d)) = self.node(args[6]) else {
                return Err(Error::malformed(at, "_rebuild_tensor_v3 dtype is not a torch dtype"));
            };
            if storage.dtype.is_some_and(|s| s != *d) {
                return Err(Error::malformed(
                    at,
                    "_rebuild_tensor_v3 dtype differs from its typed storage",
                ));
            }
            *d
        } else {
            storage.dtype.ok_or(Error::malformed(at, "_rebuild_tensor_v2 on an untyped storage"))?
        };
        Ok(Node::Tensor(Box::new(TensorNode {
            storage: (**storage).clone(),
            dtype,
            storage_offset,
            shape,
            stride,
            requires_grad,
        })))
    }

    /// BUILD: only the instance-dict state of an `OrderedDict` (torch's
    /// `_metadata` attribute), which is ignored.
    pub(super) fn build(&self, at: u64, target: NodeId, state: NodeId) -> Result<()> {
        match (self.node(target), self.node(state)) {
            (Node::Dict { ordered: true, .. }, Node::Dict { .. } | Node::None | Node::Tuple(_)) => {
                Ok(())
            }
            _ => Err(Error::malformed(at, "BUILD on something other than an OrderedDict")),
        }
    }

    /// BINPERSID: `('storage', storage_type, key, location, numel)`.
    pub(super) fn persistent(&self, at: u64, pid: NodeId) -> Result<StorageRef> {
        let bad = |reason| Error::malformed(at, reason);
        let Node::Tuple(items) = self.node(pid) else {
            return Err(bad("persistent id is not a tuple"));
        };
        let [tag, ty, key, location, numel] = items.as_slice() else {
            return Err(bad("persistent id is not a 5-tuple"));
        };
        if !matches!(self.node(*tag), Node::Str(s) if s == "storage") {
            return Err(bad("persistent id is not a 'storage' reference"));
        }
        let dtype = match self.node(*ty) {
            Node::Global(Global::Storage(d)) => Some(*d),
            Node::Global(Global::UntypedStorage) => None,
            _ => return Err(bad("persistent id storage type is not a torch storage class")),
        };
        let (Node::Str(key), Node::Str(location)) = (self.node(*key), self.node(*location)) else {
            return Err(bad("persistent id key or location is not a string"));
        };
        let numel = self.uint(at, *numel, "persistent id numel is not a non-negative int")?;
        Ok(StorageRef { dtype, key: key.clone(), location: location.clone(), numel })
    }
}
