//! Partial tensor reads for `get_slice`: only the bytes (and, for encrypted
//! files, only the chunks) a slice covers. Thin wrappers over
//! `tensorizer_native::read::slice::plan` and the readers' `read_slice`.
//!
//! An index is a tuple of ints, `slice` objects (bounds within i64, step
//! ≥ 1), `...` and `None`, as `tensorizer_rs._slices` normalizes it.

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyEllipsis, PySlice, PyTuple};
use tensorizer_native::read::slice::plan::{Index, StridedView};

use crate::buffers::fill_with;
use crate::checkpoint::NativeCheckpoint;
use crate::errors::to_py;
use crate::reader::NativeReader;

/// Adds this file's functions and classes to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(slice_shape, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_slice_shape, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_read_slice, m)?)?;
    m.add_function(wrap_pyfunction!(reader_slice_shape, m)?)?;
    m.add_function(wrap_pyfunction!(reader_read_slice, m)?)?;
    m.add_function(wrap_pyfunction!(reader_read_range, m)?)?;
    m.add_function(wrap_pyfunction!(reader_verify_tensor, m)?)?;
    Ok(())
}

/// The index items of `key`.
fn parse_index(key: &Bound<'_, PyTuple>) -> PyResult<Vec<Index>> {
    key.iter()
        .map(|item| {
            if item.is_none() {
                Ok(Index::NewAxis)
            } else if item.is_instance_of::<PyEllipsis>() {
                Ok(Index::Ellipsis)
            } else if let Ok(s) = item.cast::<PySlice>() {
                let bound = |name: &str| s.getattr(name)?.extract::<Option<i64>>();
                let step = bound("step")?.unwrap_or(1);
                Ok(Index::Range { start: bound("start")?, stop: bound("stop")?, step })
            } else if let Ok(i) = item.extract::<i64>() {
                Ok(Index::At(i))
            } else {
                Err(PyTypeError::new_err(format!(
                    "slices take ints, slices, ... and None, not {}",
                    item.get_type().name()?
                )))
            }
        })
        .collect()
}

/// An index that does not fit the shape, as torch reports it.
fn index_err(e: tensorizer_native::Error) -> PyErr {
    match e {
        tensorizer_native::Error::Invalid(msg) => PyIndexError::new_err(msg),
        other => to_py(other),
    }
}

/// The shape of `tensor[key]` for a tensor of `shape`.
#[pyfunction]
fn slice_shape(shape: Vec<u64>, key: &Bound<'_, PyTuple>) -> PyResult<Vec<u64>> {
    let view = StridedView::contiguous(&shape).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(view.index(&parse_index(key)?).map_err(index_err)?.shape)
}

/// The shape of `entry i[key]` of a checkpoint (after the checks of a
/// whole read).
#[pyfunction]
fn checkpoint_slice_shape(
    ckpt: &Bound<'_, NativeCheckpoint>,
    i: usize,
    key: &Bound<'_, PyTuple>,
) -> PyResult<Vec<u64>> {
    let inner = &ckpt.get().inner;
    let view = inner.tensor(i).map_err(to_py)?;
    inner.nbytes(i).map_err(to_py)?;
    let whole = StridedView {
        shape: view.shape.clone(),
        stride: view.stride.clone(),
        offset: view.storage_offset,
    };
    Ok(whole.index(&parse_index(key)?).map_err(index_err)?.shape)
}

/// Reads `entry i[key]` of a checkpoint, contiguous and little-endian,
/// into `buffer` (writable, exactly the slice's bytes), reading only the
/// storage spans it covers, with the GIL released.
#[pyfunction]
fn checkpoint_read_slice(
    py: Python<'_>,
    ckpt: &Bound<'_, NativeCheckpoint>,
    i: usize,
    key: &Bound<'_, PyTuple>,
    buffer: Bound<'_, PyAny>,
) -> PyResult<()> {
    let index = parse_index(key)?;
    let inner = &ckpt.get().inner;
    fill_with(py, buffer, |out| inner.read_slice(i, &index, out))
}

/// The shape of `tensor i[key]` of a tensorizer file.
#[pyfunction]
fn reader_slice_shape(
    reader: &Bound<'_, NativeReader>,
    i: usize,
    key: &Bound<'_, PyTuple>,
) -> PyResult<Vec<u64>> {
    let entry = reader
        .get()
        .inner
        .entries()
        .get(i)
        .ok_or_else(|| PyIndexError::new_err(format!("no tensor number {i}")))?;
    slice_shape(entry.shape.clone(), key)
}

/// Reads `tensor i[key]` of a tensorizer file row-major into `buffer`
/// (writable, exactly the slice's bytes), reading only the bytes (or, when
/// encrypted, the chunks) it covers, with the GIL released. No hash is
/// checked; chunks read are authenticated.
#[pyfunction]
fn reader_read_slice(
    py: Python<'_>,
    reader: &Bound<'_, NativeReader>,
    i: usize,
    key: &Bound<'_, PyTuple>,
    buffer: Bound<'_, PyAny>,
) -> PyResult<()> {
    let index = parse_index(key)?;
    let inner = &reader.get().inner;
    fill_with(py, buffer, |out| inner.read_slice(i, &index, out))
}

/// Bytes `start..stop` of tensor `i`'s data (plaintext) of a tensorizer file.
#[pyfunction]
fn reader_read_range<'py>(
    py: Python<'py>,
    reader: &Bound<'py, NativeReader>,
    i: usize,
    start: u64,
    stop: u64,
) -> PyResult<Bound<'py, PyBytes>> {
    let len = usize::try_from(stop.saturating_sub(start))
        .map_err(|_| PyValueError::new_err("range too long"))?;
    let inner = &reader.get().inner;
    let entry = inner
        .entries()
        .get(i)
        .ok_or_else(|| PyIndexError::new_err(format!("no tensor number {i}")))?;
    if stop > entry.data_length {
        return Err(PyValueError::new_err(format!(
            "range {start}..{stop} is past the {} data bytes",
            entry.data_length
        )));
    }
    let mut buf = vec![0u8; len];
    py.detach(|| inner.read_tensor_range(i, start..stop, &mut buf)).map_err(to_py)?;
    Ok(PyBytes::new(py, &buf))
}

/// Checks tensor `i`'s stored hashes, streaming its data (memory bounded
/// by one piece); raises `HashMismatchError` on a mismatch.
#[pyfunction]
fn reader_verify_tensor(
    py: Python<'_>,
    reader: &Bound<'_, NativeReader>,
    i: usize,
) -> PyResult<()> {
    let inner = &reader.get().inner;
    py.detach(|| inner.verify_tensor(i)).map_err(to_py)
}
