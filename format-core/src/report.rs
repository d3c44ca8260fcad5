//! What an inspector shows of a tensorizer file, once for every host
//! (`tzr inspect`, the WASI validator's JSON report, the browser
//! inspector): the header summary and one row per tensor. Plain structs;
//! [`TensorRow::members`] and [`HeaderSummary::members`] give the JSON
//! members in the order they are shown, so a host embeds them in its own
//! document (field names are the hosts' shared contract, see
//! host-wasm/README.md) without the core depending on serde's derive.
//! Totals by dtype and module are [`crate::totals`].

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::{Map, Value};

use crate::checkpoint::TensorView;
use crate::codec::file_header::FileHeader;
use crate::codec::metadata::MetadataEntry;
use crate::path::{PathComponent, TensorPath};
use crate::safetensors::TensorInfo;
use crate::totals::{Totals, top_module, top_module_of_name};

/// JSON members in the order they are shown.
pub type Members = Vec<(&'static str, Value)>;

/// The members as one JSON object (keys sorted: serde_json's map).
pub fn object(members: Members) -> Value {
    Value::Object(members.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>())
}

/// A path's components as JSON: strings (keys) and integers (indices); a
/// plain name is one string.
pub fn path_json(path: &TensorPath) -> Vec<Value> {
    match path {
        TensorPath::Plain(s) => alloc::vec![Value::from(s.as_str())],
        TensorPath::Structured(c) => c
            .iter()
            .map(|p| match p {
                PathComponent::Key(k) => Value::from(k.as_str()),
                PathComponent::Index(i) => Value::from(*i),
            })
            .collect(),
    }
}

/// One tensor, as its metadata index entry describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorRow {
    /// Position in the file (index order).
    pub index: usize,
    /// The name as text (structured paths as `a.b[0]`).
    pub name: String,
    /// The path components ([`path_json`]).
    pub path: Vec<Value>,
    /// The top-level module ([`top_module`]), as the totals group it.
    pub module: String,
    /// `PARAM`, `BUFFER` or `STATE_DICT`.
    pub tensor_type: String,
    /// torch's name for the dtype (`float32`, `bfloat16`, ...).
    pub dtype: String,
    /// The dtype string exactly as stored.
    pub dtype_string: String,
    /// The shape.
    pub shape: Vec<u64>,
    /// In-memory size: item size × elements.
    pub bytes: u64,
    /// Stored data bytes (0 for meta tensors).
    pub data_length: u64,
    /// Whether it is a meta tensor (elements but no stored data).
    pub meta: bool,
    /// Absolute offset of the tensor header.
    pub header_offset: u64,
    /// Absolute offset of the data.
    pub data_offset: u64,
}

impl TensorRow {
    /// The row for the `index`th metadata entry.
    pub fn of(index: usize, e: &MetadataEntry) -> Self {
        Self {
            index,
            name: e.path.to_string(),
            path: path_json(&e.path),
            module: top_module(&e.path).into_owned(),
            tensor_type: e.tensor_type.to_string(),
            dtype: e.dtype.to_string(),
            dtype_string: e.dtype.as_str().to_string(),
            shape: e.shape.clone(),
            bytes: e.nbytes(),
            data_length: e.data_length,
            meta: e.is_meta(),
            header_offset: e.header_offset,
            data_offset: e.data_offset,
        }
    }

    /// The row for the `index`th tensor of a safetensors header whose data
    /// area starts at `data_start`. A safetensors file holds a flat state
    /// dict: every row is a `STATE_DICT` tensor, its stored bytes are its
    /// in-memory bytes, and `header_offset` is where its name is written.
    pub fn of_safetensors(index: usize, t: &TensorInfo, data_start: u64) -> Self {
        let stored = t.data_offsets.1.saturating_sub(t.data_offsets.0);
        let element = crate::safetensors::dtype(&t.dtype).and_then(|d| d.element);
        Self {
            index,
            name: t.name.clone(),
            path: alloc::vec![Value::from(t.name.as_str())],
            module: top_module_of_name(&t.name).to_string(),
            tensor_type: String::from("STATE_DICT"),
            dtype: element.map_or_else(|| t.dtype.clone(), |e| e.torch_name().to_string()),
            dtype_string: t.dtype.clone(),
            shape: t.shape.clone(),
            bytes: stored,
            data_length: stored,
            meta: false,
            header_offset: t.offset,
            data_offset: data_start.saturating_add(t.data_offsets.0),
        }
    }

    /// The row for the `index`th tensor of a `torch.save` zip checkpoint:
    /// `path` as the state dict names it, `view` of a storage whose zip
    /// entry has its local header at `local` and its data at `data_start`.
    /// `data_length` is the storage bytes the view spans; `bytes` its
    /// elements times the item size (more than `data_length` for an
    /// expanded view).
    pub fn of_torch(
        index: usize,
        path: &TensorPath,
        view: &TensorView,
        local: u64,
        data_start: u64,
    ) -> Self {
        let size = u64::from(view.dtype.size());
        let times = |n: Option<u64>| n.and_then(|n| n.checked_mul(size)).unwrap_or(u64::MAX);
        let skip = view.storage_offset.saturating_mul(size);
        Self {
            index,
            name: path.to_string(),
            path: path_json(path),
            module: top_module(path).into_owned(),
            tensor_type: String::from("STATE_DICT"),
            dtype: view.dtype.torch_name().to_string(),
            dtype_string: view.dtype.torch_name().to_string(),
            shape: view.shape.clone(),
            bytes: times(view.numel()),
            data_length: times(view.extent()),
            meta: false,
            header_offset: local,
            data_offset: data_start.saturating_add(skip),
        }
    }

    /// The JSON members, in the order shown.
    pub fn members(&self) -> Members {
        alloc::vec![
            ("index", Value::from(self.index)),
            ("name", Value::from(self.name.as_str())),
            ("path", Value::from(self.path.clone())),
            ("module", Value::from(self.module.as_str())),
            ("tensor_type", Value::from(self.tensor_type.as_str())),
            ("dtype", Value::from(self.dtype.as_str())),
            ("dtype_string", Value::from(self.dtype_string.as_str())),
            ("shape", Value::from(self.shape.clone())),
            ("bytes", Value::from(self.bytes)),
            ("data_length", Value::from(self.data_length)),
            ("meta", Value::from(self.meta)),
            ("header_offset", Value::from(self.header_offset)),
            ("data_offset", Value::from(self.data_offset)),
        ]
    }
}

/// A tensorizer file's header, summarized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderSummary {
    /// File length in bytes.
    pub file_bytes: u64,
    /// Data version, 1 to 5.
    pub data_version: u32,
    /// The feature-flag byte (bit 0 encrypted, bit 1 versioned headers).
    pub feature_flags: u8,
    /// Whether tensor headers carry crypt info (data is encrypted).
    pub encrypted: bool,
    /// Whether metadata entries carry a version tag (u64 dimensions).
    pub versioned_headers: bool,
    /// Tensors in the metadata index.
    pub tensor_count: u64,
    /// Stored data bytes over all tensors (the header's total; meta
    /// tensors count 0).
    pub data_bytes: u64,
    /// Length of the metadata index.
    pub metadata_index_bytes: u64,
}

impl HeaderSummary {
    /// The summary of header `h` of a `file_len`-byte file whose index
    /// lists `tensor_count` tensors.
    pub fn of(h: &FileHeader, tensor_count: usize, file_len: u64) -> Self {
        Self {
            file_bytes: file_len,
            data_version: h.version,
            feature_flags: h.flags,
            encrypted: h.has_crypt_info(),
            versioned_headers: h.versioned_headers(),
            tensor_count: tensor_count as u64,
            data_bytes: h.tensor_size,
            metadata_index_bytes: h.metadata_len,
        }
    }

    /// The JSON members, in the order shown.
    pub fn members(&self) -> Members {
        alloc::vec![
            ("file_bytes", Value::from(self.file_bytes)),
            ("data_version", Value::from(self.data_version)),
            ("feature_flags", Value::from(self.feature_flags)),
            ("encrypted", Value::from(self.encrypted)),
            ("versioned_headers", Value::from(self.versioned_headers)),
            ("tensor_count", Value::from(self.tensor_count)),
            ("data_bytes", Value::from(self.data_bytes)),
            ("metadata_index_bytes", Value::from(self.metadata_index_bytes)),
        ]
    }
}

/// The totals of a metadata index's tensors, by dtype (torch's name) and
/// by top-level module.
pub fn totals(entries: &[MetadataEntry]) -> Totals {
    let mut totals = Totals::new();
    for e in entries {
        totals.add(&top_module(&e.path), &e.dtype.to_string(), &e.shape, e.nbytes(), e.data_length);
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dtype, ElementType, TensorType};

    #[test]
    fn a_row_shows_what_its_entry_says() {
        let path = TensorPath::Structured(alloc::vec![
            PathComponent::Key("enc".into()),
            PathComponent::Index(0)
        ]);
        let e = MetadataEntry {
            path,
            tensor_type: TensorType::Param,
            dtype: Dtype::from_element(ElementType::F32),
            shape: alloc::vec![2, 3],
            data_length: 24,
            header_offset: 100,
            data_offset: 180,
            long_dims: false,
        };
        let r = TensorRow::of(4, &e);
        assert_eq!((r.module.as_str(), r.bytes, r.meta), ("enc", 24, false));
        let m = r.members();
        assert_eq!(m[0], ("index", Value::from(4)));
        assert_eq!(m[2], ("path", serde_json::json!(["enc", 0])));
        let o = object(m);
        assert_eq!(o["dtype"], "float32");
        assert_eq!(o["dtype_string"], "<f4");
        assert_eq!(totals(&[e]).by_module["enc"].params, 6);
    }
}
