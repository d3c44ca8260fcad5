//! Loading straight into torch CUDA tensors through the staging ring of
//! `tensorizer_native::staging`. Only with the crate feature `cuda`;
//! without it `cuda_available()` is `False` and `reader_load_cuda` raises.

use pyo3::prelude::*;

use crate::reader::NativeReader;

/// Adds this file's functions to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    m.add_function(wrap_pyfunction!(reader_load_cuda, m)?)?;
    Ok(())
}

/// Whether this build loads to CUDA natively and a CUDA driver and device
/// are present.
#[pyfunction]
fn cuda_available() -> bool {
    #[cfg(feature = "cuda")]
    {
        tensorizer_native::cuda::Device::count().is_ok_and(|n| n > 0)
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}

/// Loads tensors `indices[k]` of `reader` into `tensors[k]`: contiguous
/// CUDA tensors of one device, of exactly each tensor's size in bytes.
/// Copies are queued on torch's current stream of that device and have
/// completed on return.
#[pyfunction]
#[pyo3(signature = (reader, indices, tensors, verify_hash=None))]
fn reader_load_cuda(
    py: Python<'_>,
    reader: &NativeReader,
    indices: Vec<usize>,
    tensors: Vec<Bound<'_, PyAny>>,
    verify_hash: Option<bool>,
) -> PyResult<()> {
    #[cfg(feature = "cuda")]
    {
        native::load(py, reader, indices, tensors, verify_hash)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (py, reader, indices, tensors, verify_hash);
        Err(pyo3::exceptions::PyRuntimeError::new_err("tensorizer_rs was built without native CUDA loading"))
    }
}

#[cfg(feature = "cuda")]
mod native {
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;
    use tensorizer_native::cuda::{Device, DeviceRange, Stream, load_into};
    use tensorizer_native::staging::StagingOptions;

    use crate::errors::to_py;
    use crate::reader::NativeReader;

    pub(super) fn load(
        py: Python<'_>,
        reader: &NativeReader,
        indices: Vec<usize>,
        tensors: Vec<Bound<'_, PyAny>>,
        verify_hash: Option<bool>,
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
                return Err(PyValueError::new_err(format!("tensor {k} is not a contiguous CUDA tensor")));
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
            let dsts: Vec<DeviceRange> = spans.iter().map(|&(p, n)| DeviceRange::from_raw(p, n)).collect();
            (dsts, Stream::borrowed(&device, handle))
        };
        let inner = &reader.inner;
        let mut options = StagingOptions::for_reader(inner);
        options.verify_hash = verify_hash.unwrap_or(options.verify_hash);
        py.detach(|| load_into(&device, &stream, inner, &indices, dsts, &options, 0)).map_err(to_py)
    }
}
