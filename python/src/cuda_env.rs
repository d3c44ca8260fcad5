//! What the environment says about CUDA loads (spec §19), read at every
//! load: whether the native staging ring may be used, how a load's tensors
//! are allocated on the device, and how many copy streams of our own to
//! use. `_cuda.py` asks these; nothing else reads the variables.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::cuda::MAX_STREAMS;

/// Turns the native CUDA path off when `0`, `false`, `no` or `off`.
const ENV_NATIVE: &str = "TENSORIZER_RS_NATIVE_CUDA";
/// Where a load's device tensors live: one of [`ALLOC_MODES`].
const ENV_ALLOC: &str = "TENSORIZER_RS_CUDA_ALLOC";
/// Copy streams of our own (0: torch's current stream).
const ENV_STREAMS: &str = "TENSORIZER_RS_CUDA_STREAMS";
/// The allocation modes, the default first: an allocation per tensor, or
/// one allocation per load carved into views.
const ALLOC_MODES: [&str; 2] = ["per_tensor", "carved"];

/// Adds this file's names to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CUDA_ENV_NATIVE", ENV_NATIVE)?;
    m.add("CUDA_ENV_ALLOC", ENV_ALLOC)?;
    m.add("CUDA_ENV_STREAMS", ENV_STREAMS)?;
    m.add("CUDA_ALLOC_MODES", pyo3::types::PyTuple::new(m.py(), ALLOC_MODES)?)?;
    m.add_function(wrap_pyfunction!(cuda_env_allows, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_alloc_mode, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_copy_streams, m)?)
}

/// The variable's value, trimmed and lowercased (empty when unset).
fn read(name: &str) -> String {
    std::env::var(name).unwrap_or_default().trim().to_ascii_lowercase()
}

/// Whether the environment lets loads use the native staging ring.
#[pyfunction]
fn cuda_env_allows() -> bool {
    !matches!(read(ENV_NATIVE).as_str(), "0" | "false" | "no" | "off")
}

/// The allocation mode the environment asks for (the default when unset).
#[pyfunction]
fn cuda_alloc_mode() -> PyResult<&'static str> {
    let mode = read(ENV_ALLOC);
    if mode.is_empty() {
        return Ok(ALLOC_MODES[0]);
    }
    ALLOC_MODES.into_iter().find(|m| *m == mode).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{ENV_ALLOC}={mode:?}: use one of {}",
            ALLOC_MODES.join(", ")
        ))
    })
}

/// Copy streams of our own the environment asks for (0 when unset).
#[pyfunction]
fn cuda_copy_streams() -> PyResult<usize> {
    let raw = std::env::var(ENV_STREAMS).unwrap_or_default();
    let raw = raw.trim();
    let raw = if raw.is_empty() { "0" } else { raw };
    raw.parse::<usize>().ok().filter(|&n| n <= MAX_STREAMS).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{ENV_STREAMS}={raw:?}: use a whole number from 0 to {MAX_STREAMS}"
        ))
    })
}
