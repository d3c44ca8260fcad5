//! safetensors files written from Python (`tensorizer_rs.safetensors`'s
//! `save` and `save_file`): a thin wrapper over
//! `tensorizer_native::convert::safetensors`, which lays the file out as
//! safetensors' own writer does.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tensorizer_core::ElementType;
use tensorizer_native::convert::safetensors::{StoredTensor, safetensors_bytes, write_safetensors};

use crate::buffers::Held;
use crate::errors::to_py;

/// Adds this file's functions to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(write_safetensors_file, m)?)?;
    m.add_function(wrap_pyfunction!(safetensors_file_bytes, m)?)
}

/// `(name, torch dtype name, shape)` per tensor, as stored tensors.
fn stored(tensors: Vec<(String, String, Vec<u64>)>) -> PyResult<Vec<StoredTensor>> {
    tensors
        .into_iter()
        .map(|(name, dtype, shape)| {
            let element = ElementType::from_torch_name(&dtype).ok_or_else(|| {
                PyValueError::new_err(format!("tensor {name:?}: no stored dtype for torch.{dtype}"))
            })?;
            Ok(StoredTensor { name, element, shape })
        })
        .collect()
}

/// Writes a safetensors file of `tensors` (`(name, torch dtype name,
/// shape)`, their bytes in `buffers`) to `path` atomically, with the GIL
/// released.
#[pyfunction]
#[pyo3(signature = (path, tensors, buffers, metadata))]
fn write_safetensors_file(
    py: Python<'_>,
    path: PathBuf,
    tensors: Vec<(String, String, Vec<u64>)>,
    buffers: Vec<Bound<'_, PyAny>>,
    metadata: Vec<(String, String)>,
) -> PyResult<()> {
    let tensors = stored(tensors)?;
    let held = Held::acquire(&buffers, false)?;
    let data = held.slices();
    py.detach(|| write_safetensors(&path, &tensors, &data, &metadata)).map_err(to_py)
}

/// The bytes of a safetensors file of `tensors` (as for
/// `write_safetensors_file`).
#[pyfunction]
#[pyo3(signature = (tensors, buffers, metadata))]
fn safetensors_file_bytes<'py>(
    py: Python<'py>,
    tensors: Vec<(String, String, Vec<u64>)>,
    buffers: Vec<Bound<'py, PyAny>>,
    metadata: Vec<(String, String)>,
) -> PyResult<Bound<'py, PyBytes>> {
    let tensors = stored(tensors)?;
    let held = Held::acquire(&buffers, false)?;
    let data = held.slices();
    let bytes = py.detach(|| safetensors_bytes(&tensors, &data, &metadata)).map_err(to_py)?;
    Ok(PyBytes::new(py, &bytes))
}
