//! `tensorizer_rs.convert`: format conversion between torch checkpoints,
//! tensorizer files and safetensors files (a thin wrapper over
//! `tensorizer_native::convert`).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tensorizer_native::convert::{self, ConvertOptions, Converted, Format};
use tensorizer_native::{Error, WriteOptions};

use crate::errors::to_py;
use crate::source::NativeSource;

/// Adds this file's functions and classes to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(convert_file, m)?)?;
    Ok(())
}

/// What a conversion did.
#[pyclass(frozen, module = "tensorizer_rs._native")]
pub(crate) struct ConversionReport {
    /// The source's format: "torch", "tensorizer" or "safetensors".
    #[pyo3(get)]
    source_format: &'static str,
    /// The written format: "tensorizer" or "safetensors".
    #[pyo3(get)]
    target_format: &'static str,
    /// Tensors written.
    #[pyo3(get)]
    tensors: usize,
    /// Bytes of tensor data written.
    #[pyo3(get)]
    nbytes: u64,
    /// Entries of the source that were not tensors and were left out.
    #[pyo3(get)]
    skipped: Vec<String>,
    /// Whether nested names were flattened to dotted ones.
    #[pyo3(get)]
    flattened: bool,
}

/// A format's name in Python: "tensorizer", "safetensors" or "torch".
pub(crate) fn py_name(f: Format) -> &'static str {
    match f {
        Format::TorchCheckpoint => "torch",
        other => other.name(),
    }
}

fn format_named(name: &str) -> PyResult<Format> {
    match name {
        "tensorizer" => Ok(Format::Tensorizer),
        "safetensors" => Ok(Format::Safetensors),
        other => Err(PyValueError::new_err(format!(
            "to={other:?}: expected \"tensorizer\" or \"safetensors\""
        ))),
    }
}

/// Converts `src` (a path or URI, or an opened `NativeSource`) into a new
/// file at `dst`, written atomically, with the GIL released. The input
/// format is recognised by its first bytes; the output format is `to`
/// ("tensorizer" or "safetensors") or follows `dst`'s extension.
/// `progress(done, total)` is called now and then (with the GIL) and once
/// at the end; an exception from it, or Ctrl-C, stops the conversion and
/// propagates. `max_output_bytes` bounds the tensor data written (`None`:
/// `convert::default_max_output_bytes` of the input's size).
#[pyfunction]
#[pyo3(signature = (src, dst, *, to=None, tensorizer_layout=false, num_threads=None, progress=None, max_output_bytes=None))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments
fn convert_file(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    dst: PathBuf,
    to: Option<&str>,
    tensorizer_layout: bool,
    num_threads: Option<usize>,
    progress: Option<Py<PyAny>>,
    max_output_bytes: Option<u64>,
) -> PyResult<ConversionReport> {
    let layout = if tensorizer_layout {
        tensorizer_core::WriterOptions::tensorizer()
    } else {
        tensorizer_core::WriterOptions::default()
    };
    let options = ConvertOptions {
        to: to.map(format_named).transpose()?,
        write: WriteOptions { layout, key: None, num_writers: num_threads.unwrap_or(0) },
        key: None,
        max_output_bytes,
    };
    let opened = src.cast::<NativeSource>().ok().map(|s| s.get().inner.clone());
    let uri = match opened {
        Some(_) => String::new(),
        None => src.extract::<PathBuf>()?.to_string_lossy().into_owned(),
    };
    let mut raised: Option<PyErr> = None;
    let result: Result<Converted, Error> = py.detach(|| {
        // Called every 100 ms or so: Ctrl-C (KeyboardInterrupt) and an
        // exception from the callback both stop the conversion.
        let report = |done: u64, total: u64| -> Result<(), Error> {
            Python::attach(|py| {
                py.check_signals()?;
                match &progress {
                    Some(callback) => callback.call1(py, (done, total)).map(|_| ()),
                    None => Ok(()),
                }
            })
            .map_err(|e| {
                raised = Some(e);
                Error::Invalid("stopped by a Python exception".into())
            })
        };
        match opened {
            Some(source) => convert::convert_source(source, &dst, &options, report),
            None => convert::convert(&uri, &dst, &options, report),
        }
    });
    match result {
        Ok(c) => Ok(ConversionReport {
            source_format: py_name(c.from),
            target_format: py_name(c.to),
            tensors: c.tensors,
            nbytes: c.bytes,
            skipped: c.skipped,
            flattened: c.flattened,
        }),
        Err(e) => Err(raised.take().unwrap_or_else(|| to_py(e))),
    }
}
