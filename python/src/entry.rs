//! `Entry`: one tensor of a file's index, as a typed, read-only Python
//! object built in one native pass (no positional tuples to unpack, no
//! Python constructor per tensor).

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString, PyTuple};
use tensorizer_core::{MetadataEntry, PathComponent};

/// One tensor of a file's index: where it is, what it is, how big.
#[pyclass(module = "tensorizer_rs._native", name = "Entry", frozen, get_all)]
pub struct PyEntry {
    /// Position in the file's index.
    pub(crate) index: usize,
    /// Path components (str keys and int indices).
    pub(crate) path: Py<PyTuple>,
    /// tensorizer's public name: a lone str key as a plain str, else `path`.
    pub(crate) name: Py<PyAny>,
    /// The name exactly as stored.
    name_bytes: Py<PyBytes>,
    /// The `TensorType` member (PARAM, BUFFER or STATE_DICT).
    pub(crate) tensor_type: Py<PyAny>,
    /// The stored dtype string.
    pub(crate) dtype: Py<PyString>,
    /// The shape (a tuple of ints; empty for a scalar).
    pub(crate) shape: Py<PyTuple>,
    /// Bytes stored (0 for meta tensors).
    pub(crate) data_length: u64,
    /// Bytes in memory: item size × element count.
    pub(crate) nbytes: u64,
    /// Whether the tensor is a meta tensor (shape only, no data).
    pub(crate) is_meta: bool,
    /// Absolute offset of the tensor header.
    header_offset: u64,
    /// Absolute offset of the data.
    pub(crate) data_offset: u64,
}

/// Builds the entries of `entries` (file order), with `tensor_types[k]` as
/// the Python value of stored tensor type `k`.
pub(crate) fn build<'py>(
    py: Python<'py>,
    entries: &[MetadataEntry],
    tensor_types: &Bound<'py, PyTuple>,
) -> PyResult<Vec<Bound<'py, PyEntry>>> {
    // Few distinct dtype strings: one Python string each.
    let mut dtypes: HashMap<&str, Py<PyString>> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for (index, e) in entries.iter().enumerate() {
        let components = e.path.components();
        let items: Vec<Bound<'py, PyAny>> = components
            .iter()
            .map(|c| match c {
                PathComponent::Key(k) => PyString::new(py, k).into_any(),
                PathComponent::Index(i) => PyInt::new(py, *i).into_any(),
            })
            .collect();
        let name = match (components.as_slice(), items.first()) {
            ([PathComponent::Key(_)], Some(key)) => key.clone().unbind(),
            _ => PyTuple::new(py, &items)?.into_any().unbind(),
        };
        let path = PyTuple::new(py, items)?;
        let kind = usize::from(e.tensor_type.as_u8());
        let tensor_type = tensor_types
            .get_item(kind)
            .map_err(|_| {
                PyValueError::new_err(format!("tensor {index}: unknown tensor type {kind}"))
            })?
            .unbind();
        let dtype = dtypes
            .entry(e.dtype.as_str())
            .or_insert_with(|| PyString::new(py, e.dtype.as_str()).unbind());
        let entry = PyEntry {
            index,
            name,
            path: path.unbind(),
            name_bytes: PyBytes::new(py, &e.path.to_bytes().unwrap_or_default()).unbind(),
            tensor_type,
            dtype: dtype.clone_ref(py),
            shape: PyTuple::new(py, &e.shape)?.unbind(),
            data_length: e.data_length,
            nbytes: e.nbytes(),
            is_meta: e.is_meta(),
            header_offset: e.header_offset,
            data_offset: e.data_offset,
        };
        out.push(Bound::new(py, entry)?);
    }
    Ok(out)
}

#[pymethods]
impl PyEntry {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Entry(index={}, name={}, dtype={}, shape={})",
            self.index,
            self.name.bind(py).repr().map(|r| r.to_string()).unwrap_or_default(),
            self.dtype.bind(py),
            self.shape.bind(py).repr().map(|r| r.to_string()).unwrap_or_default(),
        )
    }
}
