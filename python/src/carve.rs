//! `carve`: the tensors of one loaded arena, made in one native loop.
//!
//! A load of many small tensors spends most of its time per tensor, not per
//! byte. This loop does what the Python one did — `torch.frombuffer` over
//! the tensor's piece of the arena (a storage of its own over exactly its
//! bytes), a `view` to its shape, a `Parameter` around it — without the
//! interpreter between the calls: each entry's fields are read straight
//! from the `Entry`, and the keyword arguments travel in one reused dict.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use tensorizer_native::read::pack::{DEVICE_VIEW_ALIGN, pack_aligned};

use crate::entry::PyEntry;

/// (torch dtype, item size, whether a float-like dtype) for one dtype string.
type Kind = (Py<PyAny>, u64, bool);

/// Tensors for `members` (entries already loaded into `buffer`, each at
/// `offsets[k]`): `make(parameter, view, grad)` over `frombuffer(buffer,
/// dtype=, count=, offset=)` viewed to the entry's shape, or over
/// `empty(shape, dtype=)` for an entry with no bytes. `kind_of(dtype)`
/// returns (torch dtype, item size, requires grad) and is asked once per
/// distinct dtype string.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the torch callables are passed in, not imported here
fn carve<'py>(
    py: Python<'py>,
    members: &Bound<'py, PyList>,
    buffer: &Bound<'py, PyAny>,
    offsets: Vec<usize>,
    kind_of: &Bound<'py, PyAny>,
    frombuffer: &Bound<'py, PyAny>,
    empty: &Bound<'py, PyAny>,
    make: &Bound<'py, PyAny>,
    parameter: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    if members.len() != offsets.len() {
        return Err(PyValueError::new_err("one offset per entry is required"));
    }
    let out = PyList::empty(py);
    let kwargs = PyDict::new(py);
    let (k_dtype, k_count, k_offset) = (
        PyString::intern(py, "dtype"),
        PyString::intern(py, "count"),
        PyString::intern(py, "offset"),
    );
    let view = PyString::intern(py, "view");
    // Entries share one string object per dtype: remember the last few by identity.
    let mut kinds: Vec<(Py<PyString>, Kind)> = Vec::new();
    for (member, offset) in members.iter().zip(offsets) {
        let entry = member.cast::<PyEntry>()?.get();
        let dtype_str = entry.dtype.bind(py);
        let kind = match kinds.iter().find(|(s, _)| s.is(dtype_str)) {
            Some((_, kind)) => kind,
            None => {
                let (dtype, itemsize, grad): (Py<PyAny>, u64, bool) =
                    kind_of.call1((dtype_str,))?.extract()?;
                if itemsize == 0 {
                    return Err(PyValueError::new_err(format!(
                        "dtype {dtype_str} has no item size"
                    )));
                }
                kinds.push((dtype_str.clone().unbind(), (dtype, itemsize, grad)));
                &kinds[kinds.len() - 1].1
            }
        };
        let (dtype, itemsize, grad) = (kind.0.bind(py), kind.1, kind.2);
        let shape = entry.shape.bind(py);
        kwargs.set_item(&k_dtype, dtype)?;
        let tensor = if entry.data_length == 0 {
            let _ = kwargs.del_item(&k_count);
            let _ = kwargs.del_item(&k_offset);
            empty.call((shape,), Some(&kwargs))?
        } else {
            kwargs.set_item(&k_count, entry.data_length / itemsize)?;
            kwargs.set_item(&k_offset, offset)?;
            let flat = frombuffer.call((buffer,), Some(&kwargs))?;
            if shape.len() == 1 { flat } else { flat.call_method1(&view, (shape,))? }
        };
        out.append(make.call1((parameter, tensor, grad))?)?;
    }
    Ok(out)
}

/// Adds `carve` to the module.
/// Where each of tensors of `sizes` bytes starts in one device allocation
/// (each `DEVICE_VIEW_ALIGN`-aligned), and the allocation's length.
#[pyfunction]
fn carve_offsets(sizes: Vec<u64>) -> PyResult<(Vec<u64>, u64)> {
    let packs = pack_aligned(sizes, DEVICE_VIEW_ALIGN, u64::MAX).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err("the tensors' total size overflows")
    })?;
    Ok(packs.into_iter().next().map_or((Vec::new(), 0), |p| (p.offsets, p.size)))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("DEVICE_VIEW_ALIGN", DEVICE_VIEW_ALIGN)?;
    m.add_function(wrap_pyfunction!(carve_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(carve, m)?)
}
