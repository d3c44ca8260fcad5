//! Loading straight into torch CUDA tensors through the staging ring of
//! `tensorizer_native::device::staging`. Only with the crate feature `cuda` (on by
//! default); without it `cuda_available()` is `False` and
//! `reader_load_cuda` raises. `reader_load_staged` runs the same ring with
//! the host-memory stand-in engine, so machines without a GPU test the
//! path from Python (keys, hash checks, errors) all the same.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tensorizer_native::device::staging::{HostEngine, StagingOptions, load_staged};

use crate::buffers::Held;
use crate::errors::to_py;
use crate::reader::NativeReader;

/// Adds this file's functions to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    m.add_function(wrap_pyfunction!(reader_load_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(reader_load_staged, m)?)?;
    Ok(())
}

/// Longest pretended copy time `reader_load_staged` accepts.
const MAX_LATENCY_US: u64 = 1_000_000;

/// Loads tensors `indices[k]` of `reader` into `buffers[k]` (writable,
/// C-contiguous uint8 buffers of exactly each tensor's size) through the
/// staging ring with the host-memory copy engine: what `reader_load_cuda`
/// does, with host memory standing in for the device (for tests).
/// `buffer_len` and `buffers` size the ring (default: the reader's);
/// `copy_latency_us` makes every copy pretend to take that long. Returns
/// the staging buffers allocated and their bytes in all.
#[pyfunction]
#[pyo3(signature = (reader, indices, buffers, verify_hash=None, *, buffer_len=None, ring=None, copy_latency_us=0))]
#[allow(clippy::too_many_arguments)]
fn reader_load_staged(
    py: Python<'_>,
    reader: &NativeReader,
    indices: Vec<usize>,
    buffers: Vec<Bound<'_, PyAny>>,
    verify_hash: Option<bool>,
    buffer_len: Option<usize>,
    ring: Option<usize>,
    copy_latency_us: u64,
) -> PyResult<(usize, usize)> {
    if indices.len() != buffers.len() {
        return Err(PyValueError::new_err("one buffer per tensor index is required"));
    }
    if copy_latency_us > MAX_LATENCY_US {
        return Err(PyValueError::new_err(format!(
            "copy_latency_us must be at most {MAX_LATENCY_US}"
        )));
    }
    let mut held = Held::acquire(&buffers, true)?;
    let inner = &reader.inner;
    let options = ring_options(reader, verify_hash, buffer_len, ring);
    let mut slices = held.slices_mut();
    py.detach(|| {
        let sizes: Vec<u64> = slices.iter().map(|s| s.len() as u64).collect();
        for (&i, &n) in indices.iter().zip(&sizes) {
            let need = inner.entries().get(i).map_or(n, |e| e.nbytes());
            if need != n {
                return Err(tensorizer_native::Error::Invalid(format!(
                    "tensor number {i} needs a {need}-byte buffer, got {n}"
                )));
            }
        }
        let engine = HostEngine::new(&sizes)?.with_latency(Duration::from_micros(copy_latency_us));
        load_staged(inner, &indices, &engine, &options)?;
        let stats = (engine.buffers_allocated(), engine.buffer_bytes_allocated());
        for (dst, out) in slices.iter_mut().zip(engine.into_outputs()) {
            dst.copy_from_slice(&out);
        }
        Ok(stats)
    })
    .map_err(to_py)
}

/// The reader's staging ring with the call's overrides (None: the reader's).
fn ring_options(
    reader: &NativeReader,
    verify_hash: Option<bool>,
    buffer_len: Option<usize>,
    ring: Option<usize>,
) -> StagingOptions {
    let verify_hash = reader.inner.options().verify(verify_hash);
    let mut options = StagingOptions::for_load(&reader.inner, verify_hash);
    options.buffer_len = buffer_len.unwrap_or(options.buffer_len);
    options.buffers = ring.unwrap_or(options.buffers);
    options
}

/// Whether this build loads to CUDA natively and a CUDA driver and device
/// are present.
#[pyfunction]
fn cuda_available() -> bool {
    #[cfg(feature = "cuda")]
    {
        tensorizer_native::device::cuda::Device::count().is_ok_and(|n| n > 0)
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}

/// Most copy streams of our own a load may ask for (Python's
/// `TENSORIZER_RS_CUDA_STREAMS` check asks `_native.MAX_CUDA_STREAMS`).
pub(crate) const MAX_STREAMS: usize = 16;

/// Loads tensors `indices[k]` of `reader` into `tensors[k]`: contiguous
/// CUDA tensors of one device, of exactly each tensor's size in bytes
/// (torch tensors of their own, or disjoint views of one allocation).
/// Copies are queued on torch's current stream of that device (with
/// `streams` > 0: on that many streams of our own, ordered after the work
/// already queued on it) and have all completed on return. Decryption uses
/// the reader's key; `verify_hash` (default: the reader's setting) checks
/// every stored hash on the way. `buffer_len` and `ring` size the staging
/// ring (default: the reader's). Driver failures raise RuntimeError.
#[pyfunction]
#[pyo3(signature = (reader, indices, tensors, verify_hash=None, *, streams=0, buffer_len=None, ring=None))]
#[allow(clippy::too_many_arguments)]
fn reader_load_cuda(
    py: Python<'_>,
    reader: &NativeReader,
    indices: Vec<usize>,
    tensors: Vec<Bound<'_, PyAny>>,
    verify_hash: Option<bool>,
    streams: usize,
    buffer_len: Option<usize>,
    ring: Option<usize>,
) -> PyResult<()> {
    if streams > MAX_STREAMS {
        return Err(PyValueError::new_err(format!(
            "streams must be at most {MAX_STREAMS}, not {streams}"
        )));
    }
    #[cfg(feature = "cuda")]
    {
        let options = ring_options(reader, verify_hash, buffer_len, ring);
        native::load(py, reader, indices, tensors, &options, streams)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (py, reader, indices, tensors, verify_hash, streams, buffer_len, ring);
        Err(pyo3::exceptions::PyRuntimeError::new_err(
            "tensorizer_rs was built without native CUDA loading",
        ))
    }
}

#[cfg(feature = "cuda")]
mod native {
    use pyo3::exceptions::{PyRuntimeError, PyValueError};
    use pyo3::prelude::*;
    use tensorizer_native::Error;
    use tensorizer_native::device::cuda::{Device, DeviceRange, Stream, load_into};

    use super::StagingOptions;
    use crate::reader::NativeReader;

    /// Driver failures are RuntimeError (as torch's own CUDA errors);
    /// everything else maps as for CPU loads.
    fn to_py(e: Error) -> PyErr {
        match e {
            Error::Cuda(msg) => PyRuntimeError::new_err(msg),
            other => crate::errors::to_py(other),
        }
    }

    pub(super) fn load(
        py: Python<'_>,
        reader: &NativeReader,
        indices: Vec<usize>,
        tensors: Vec<Bound<'_, PyAny>>,
        options: &StagingOptions,
        streams: usize,
    ) -> PyResult<()> {
        if indices.len() != tensors.len() {
            return Err(PyValueError::new_err("one tensor per index is required"));
        }
        let mut ordinal: Option<usize> = None;
        let mut spans = Vec::with_capacity(tensors.len());
        for (k, t) in tensors.iter().enumerate() {
            let dev = t.getattr("device")?;
            let on_cuda = dev.getattr("type")?.extract::<String>()? == "cuda";
            let index: Option<usize> = dev.getattr("index")?.extract()?;
            if !on_cuda || !t.call_method0("is_contiguous")?.extract::<bool>()? {
                return Err(PyValueError::new_err(format!(
                    "tensor {k} is not a contiguous CUDA tensor"
                )));
            }
            let index = index.unwrap_or(0);
            if *ordinal.get_or_insert(index) != index {
                return Err(PyValueError::new_err("all tensors must be on one CUDA device"));
            }
            let ptr: u64 = t.call_method0("data_ptr")?.extract()?;
            let nbytes: u64 = t.getattr("nbytes")?.extract()?;
            spans.push((ptr, nbytes));
        }
        let Some(ordinal) = ordinal else { return Ok(()) };
        let mut sorted: Vec<(u64, u64)> = spans.iter().copied().filter(|s| s.1 > 0).collect();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
            return Err(PyValueError::new_err("destination tensors overlap"));
        }
        let handle: usize = py
            .import("torch")?
            .getattr("cuda")?
            .call_method1("current_stream", (ordinal,))?
            .getattr("cuda_stream")?
            .extract()?;
        let device = py.detach(|| Device::open(ordinal)).map_err(to_py)?;
        // SAFETY: each span is `data_ptr()` and `nbytes` of a contiguous
        // tensor on this CUDA device, checked above to be disjoint; the
        // tensors are referenced by `tensors` until this function returns,
        // and the load has finished every copy by then, so torch cannot
        // free or reuse the memory meanwhile. `handle` is torch's current
        // stream of this device, which torch never destroys. (Another
        // Python thread resizing a tensor in place during the call is the
        // hazard every torch extension leaves to its callers.)
        #[allow(unsafe_code)]
        let (dsts, stream) = unsafe {
            let dsts: Vec<DeviceRange> =
                spans.iter().map(|&(p, n)| DeviceRange::from_raw(p, n)).collect();
            (dsts, Stream::borrowed(&device, handle))
        };
        let inner = &reader.inner;
        py.detach(|| load_into(&device, &stream, inner, &indices, dsts, options, streams))
            .map_err(to_py)
    }
}
