//! `register_loaded`: `load_into_module`'s loaded tensors set on the
//! submodules their names point to.

use std::collections::HashMap;

use pyo3::exceptions::PyKeyError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use tensorizer_core::TensorType;

use crate::entry::PyEntry;
use crate::gc_pause::GcPause;

/// The submodule of `modules` (by dotted name) that entry `name` points to,
/// and the attribute it sets there (`"0.weight"`: module `"0"`, `weight`).
fn owner<'a, 'py>(
    modules: &Bound<'py, PyDict>,
    m: &Bound<'py, PyAny>,
    name: &'a str,
) -> PyResult<(&'a str, Bound<'py, PyAny>, &'a str)> {
    let (prefix, attr) = name.rsplit_once('.').unwrap_or(("", name));
    let Some(module) = modules.get_item(prefix)? else {
        let py = m.py();
        return Err(PyKeyError::new_err(format!(
            "Module {} for tensor {} not found in {}",
            PyString::new(py, prefix).repr()?,
            PyString::new(py, name).repr()?,
            m.get_type().name()?
        )));
    };
    Ok((prefix, module, attr))
}

/// Registers each of `entries` (loaded: `cache` holds them by index) on the
/// submodule of module `m` its name points to, through `registrar` (a
/// `_registrar._Registrar`), with the collector paused: PARAM entries as
/// parameters (stored straight into the module's parameter table when one
/// of that name is there and the registrar allows it), the rest as
/// persistent buffers, as tensorizer registers every loaded buffer, so that
/// `state_dict()` has the same keys after either library's load (spec §11,
/// "non-persistent buffers").
#[pyfunction]
pub(crate) fn register_loaded(
    py: Python<'_>,
    cache: &Bound<'_, PyDict>,
    m: &Bound<'_, PyAny>,
    entries: Vec<Bound<'_, PyEntry>>,
    registrar: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let _paused = GcPause::new(py)?;
    let modules = m.call_method0(intern!(py, "named_modules"))?;
    let modules = py.get_type::<PyDict>().call1((modules,))?.cast_into::<PyDict>()?;
    // Per module: its parameter table when a parameter there may simply be
    // replaced (`_Registrar.parameters_of`), else None.
    let mut tables: HashMap<String, Option<Bound<'_, PyAny>>> = HashMap::new();
    for e in &entries {
        let e = e.get();
        let name = e.name.bind(py).cast::<PyString>()?.to_str()?;
        let (prefix, module, attr) = owner(&modules, m, name)?;
        let module = &module;
        let attr = PyString::new(py, attr);
        let tensor = cache.as_any().get_item(e.index)?;
        if e.tensor_type.bind(py).extract::<u8>()? != TensorType::Param.as_u8() {
            registrar.call_method1(intern!(py, "buffer"), (module, attr, tensor))?;
            continue;
        }
        if !tables.contains_key(prefix) {
            let table = registrar.call_method1(intern!(py, "parameters_of"), (module,))?;
            tables.insert(prefix.to_string(), (!table.is_none()).then_some(table));
        }
        match tables.get(prefix).and_then(Option::as_ref) {
            Some(table) if table.contains(&attr)? => table.set_item(attr, tensor)?,
            _ => drop(registrar.call_method1(intern!(py, "parameter"), (module, attr, tensor))?),
        }
    }
    Ok(())
}
