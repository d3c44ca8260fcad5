//! What a file's tensors add up to, by dtype and by top-level module:
//! tensors, parameters (elements), in-memory bytes and stored bytes. Every
//! host's summary (`tzr inspect`, the browser inspector) is built here, so
//! they agree.

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};

use serde_json::{Map, Value, json};

use crate::path::{PathComponent, TensorPath};

/// Sums over a set of tensors. Every sum saturates: the counts come from
/// untrusted headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Total {
    /// Tensors.
    pub tensors: u64,
    /// Elements (torch's `numel`), meta tensors included.
    pub params: u64,
    /// In-memory bytes (item size × elements), meta tensors included.
    pub bytes: u64,
    /// Stored data bytes (a meta tensor stores none).
    pub data_bytes: u64,
}

impl Total {
    fn add(&mut self, params: u64, bytes: u64, data_bytes: u64) {
        self.tensors = self.tensors.saturating_add(1);
        self.params = self.params.saturating_add(params);
        self.bytes = self.bytes.saturating_add(bytes);
        self.data_bytes = self.data_bytes.saturating_add(data_bytes);
    }

    /// As JSON: `{tensors, params, bytes, data_bytes}`.
    pub fn to_json(&self) -> Value {
        json!({"tensors": self.tensors, "params": self.params, "bytes": self.bytes, "data_bytes": self.data_bytes})
    }
}

/// Totals over all tensors, per dtype and per top-level module.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Every tensor.
    pub all: Total,
    /// Per dtype, by the name the host shows.
    pub by_dtype: BTreeMap<String, Total>,
    /// Per top-level module ([`top_module`]).
    pub by_module: BTreeMap<String, Total>,
}

/// Elements of a tensor of `shape` (1 for a scalar), saturating.
pub fn numel(shape: &[u64]) -> u64 {
    shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).unwrap_or(u64::MAX)
}

/// The top-level module a tensor belongs to: the first component of its
/// path (a structured path's first key or index; a plain name's
/// [`top_module_of_name`]).
pub fn top_module(path: &TensorPath) -> Cow<'_, str> {
    match path {
        TensorPath::Plain(s) => Cow::Borrowed(top_module_of_name(s)),
        TensorPath::Structured(c) => match c.first() {
            Some(PathComponent::Key(k)) => Cow::Borrowed(k),
            Some(PathComponent::Index(i)) => Cow::Owned(i.to_string()),
            None => Cow::Borrowed(""),
        },
    }
}

/// The top-level module of a flat dotted name: its text up to the first
/// `.`, or the whole name when it has none.
pub fn top_module_of_name(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

impl Totals {
    /// No tensors yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one tensor: its top-level module ([`top_module`]), its dtype's
    /// shown name, its shape, its in-memory and stored bytes.
    pub fn add(&mut self, module: &str, dtype: &str, shape: &[u64], bytes: u64, data_bytes: u64) {
        let params = numel(shape);
        self.all.add(params, bytes, data_bytes);
        match self.by_dtype.get_mut(dtype) {
            Some(t) => t.add(params, bytes, data_bytes),
            None => {
                self.by_dtype.entry(dtype.to_string()).or_default().add(params, bytes, data_bytes)
            }
        }
        match self.by_module.get_mut(module) {
            Some(t) => t.add(params, bytes, data_bytes),
            None => {
                self.by_module.entry(module.to_string()).or_default().add(params, bytes, data_bytes)
            }
        }
    }

    /// As JSON: the overall [`Total`]'s fields, plus `by_dtype` and
    /// `by_module`, each an object of [`Total`]s sorted by name.
    pub fn to_json(&self) -> Value {
        let table = |m: &BTreeMap<String, Total>| {
            Value::Object(m.iter().map(|(k, t)| (k.clone(), t.to_json())).collect::<Map<_, _>>())
        };
        let mut out = self.all.to_json();
        if let Value::Object(o) = &mut out {
            o.insert("by_dtype".into(), table(&self.by_dtype));
            o.insert("by_module".into(), table(&self.by_module));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::*;

    #[test]
    fn sums_by_dtype_and_top_module() {
        let mut t = Totals::new();
        let structured = TensorPath::from_components(vec![
            PathComponent::Index(3),
            PathComponent::Key("b".into()),
        ]);
        let structured = structured.unwrap();
        for (path, dtype, shape, bytes, data) in [
            (TensorPath::from("model.layers.0.w"), "float32", &[2u64, 3][..], 24, 24),
            (TensorPath::from("model.norm"), "bfloat16", &[4], 8, 8),
            (TensorPath::from("lm_head"), "float32", &[], 4, 0),
            (structured, "float32", &[0, 5], 0, 0),
        ] {
            t.add(&top_module(&path), dtype, shape, bytes, data);
        }
        assert_eq!(t.all, Total { tensors: 4, params: 11, bytes: 36, data_bytes: 32 });
        assert_eq!(
            t.by_dtype["float32"],
            Total { tensors: 3, params: 7, bytes: 28, data_bytes: 24 }
        );
        assert_eq!(t.by_module["model"].params, 10);
        assert_eq!(t.by_module["lm_head"].params, 1);
        assert_eq!(t.by_module["3"].tensors, 1);
        let j = t.to_json();
        assert_eq!(j["params"], 11);
        assert_eq!(j["by_module"]["model"]["bytes"], 32);
        assert_eq!(numel(&[u64::MAX, 2]), u64::MAX);
    }
}
