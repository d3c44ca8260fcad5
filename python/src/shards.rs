//! `tensorizer_rs.load_model_folder`'s native half: which files a sharded
//! model is, and the check of its shards against its index
//! (`tensorizer_native::shards`).

use std::collections::{BTreeMap, BTreeSet};

use pyo3::prelude::*;
use tensorizer_native::shards::{self, ShardedModel};

use crate::errors::to_py;

/// Adds this file's functions and classes to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeShards>()?;
    m.add("MAX_SHARDS_AT_ONCE", shards::MAX_SHARDS_AT_ONCE)?;
    m.add_function(wrap_pyfunction!(is_sharded, m)?)?;
    m.add_function(wrap_pyfunction!(open_sharded, m)?)
}

/// The files of one sharded model.
#[pyclass(frozen, module = "tensorizer_rs._native")]
pub(crate) struct NativeShards {
    inner: ShardedModel,
}

#[pymethods]
impl NativeShards {
    /// The index the shards come from, or `None`.
    #[getter]
    fn index(&self) -> Option<String> {
        self.inner.index.clone()
    }

    /// Each shard's location, once, in name order.
    #[getter]
    fn shards(&self) -> Vec<String> {
        self.inner.shards.clone()
    }

    /// `(shards at once, readers each)` for a load with `readers` reader
    /// threads in all (`None`: the default), one shard at a time when
    /// `cooperative` (`tensorizer_native::shards::parallel_loads`).
    #[pyo3(signature = (readers, cooperative))]
    fn parallel_loads(&self, readers: Option<usize>, cooperative: bool) -> (usize, usize) {
        shards::parallel_loads(self.inner.shards.len(), readers, cooperative)
    }

    /// Checks what the shards hold (location to tensor names) against the
    /// index; raises `ValueError` naming the first disagreement.
    fn check(&self, held: BTreeMap<String, BTreeSet<String>>) -> PyResult<()> {
        self.inner.check(&held).map_err(to_py)
    }
}

/// Whether `location` is a folder, a store prefix or an `*.index.json`.
#[pyfunction]
fn is_sharded(location: &str) -> bool {
    shards::is_sharded(location)
}

/// The shards of the model at `location`.
#[pyfunction]
fn open_sharded(py: Python<'_>, location: &str) -> PyResult<NativeShards> {
    let inner = py.detach(|| shards::open_sharded(location)).map_err(to_py)?;
    Ok(NativeShards { inner })
}
