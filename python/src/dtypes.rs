//! dtype strings as the core reads and writes them, for the Python
//! package: which torch dtype a stored string means, and which string a
//! torch dtype is stored as. Python keeps no table of its own.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::{Dtype, ElementType};

/// torch's name (without `torch.`) of the dtype stored as `stored`.
#[pyfunction]
fn dtype_torch_name(stored: &str) -> PyResult<&'static str> {
    let dtype = Dtype::parse(stored.as_bytes(), 0).map_err(|_| {
        PyValueError::new_err(format!("dtype {stored:?} is not a valid stored dtype string"))
    })?;
    if dtype.byte_order() == ByteOrder::Big {
        return Err(PyValueError::new_err(format!(
            "dtype {stored:?} is big-endian and torch has no big-endian tensors: read it with \
             read_numpy_arrays(), or convert the file (`tzr convert` swaps the bytes)"
        )));
    }
    match (dtype.element(), dtype.torch_str()) {
        (Some(element), _) => Ok(element.torch_name()),
        (None, Some(torch)) => Err(PyValueError::new_err(format!(
            "unknown torch dtype {torch:?} in dtype string {stored:?}"
        ))),
        (None, None) => {
            Err(PyValueError::new_err(format!("dtype {stored:?} has no torch equivalent")))
        }
    }
}

/// The string tensorizer stores for the torch dtype named `name` (with or
/// without `torch.`), or `None` when the format has no entry for it.
#[pyfunction]
fn dtype_string_for(name: &str) -> Option<String> {
    ElementType::from_torch_name(name).map(|e| Dtype::from_element(e).as_str().to_owned())
}

/// safetensors' name for the torch dtype named `name` (with or without
/// `torch.`), from the core's table; `None` when safetensors has none.
#[pyfunction]
fn safetensors_dtype_name(name: &str) -> Option<&'static str> {
    ElementType::from_torch_name(name).and_then(tensorizer_core::safetensors::name_of)
}

/// Adds the dtype functions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dtype_torch_name, m)?)?;
    m.add_function(wrap_pyfunction!(safetensors_dtype_name, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_string_for, m)?)
}
