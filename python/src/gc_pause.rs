//! Pausing Python's cyclic garbage collector while a load or an index
//! builds tens of thousands of objects at once (each collection it would
//! trigger walks every object the process has, torch's included: about a
//! third of a 20,000-tensor load). Nothing built then forms a cycle.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;

/// The collector paused for as long as the guard lives (left alone when
/// it was off already).
pub(crate) struct GcPause<'py>(Option<Bound<'py, PyModule>>);

impl<'py> GcPause<'py> {
    pub(crate) fn new(py: Python<'py>) -> PyResult<Self> {
        let gc = py.import("gc")?;
        if !gc.call_method0("isenabled")?.is_truthy()? {
            return Ok(Self(None));
        }
        gc.call_method0("disable")?;
        Ok(Self(Some(gc)))
    }
}

impl Drop for GcPause<'_> {
    fn drop(&mut self) {
        if let Some(gc) = &self.0 {
            // Nothing to report if it fails: collection stays off, as the
            // user's code would have found it.
            let _ = gc.call_method0("enable");
        }
    }
}

/// `with gc_paused():` the collector paused inside, for Python code that
/// builds many objects at once (registering a module's tensors).
#[pyclass(module = "tensorizer_rs._native", name = "gc_paused")]
pub(crate) struct GcPaused {
    paused: AtomicBool,
}

#[pymethods]
impl GcPaused {
    #[new]
    fn new() -> Self {
        Self { paused: AtomicBool::new(false) }
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<()> {
        let gc = py.import("gc")?;
        if gc.call_method0("isenabled")?.is_truthy()? {
            gc.call_method0("disable")?;
            self.paused.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        if self.paused.swap(false, Ordering::Relaxed) {
            py.import("gc")?.call_method0("enable")?;
        }
        Ok(false)
    }
}
