//! `FileSource`: what `TensorDeserializer` reads (its `file_obj`), taken
//! apart once: a path or URI, a `RemoteStream` (its native source, or the
//! window of it from the stream's position to its `end`), or a binary file
//! object (re-opened by name when it is a local file read from its start,
//! else read whole). The refusals are tensorizer's (`_args`).

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString};
use tensorizer_native::RangeSource;

use crate::source::NativeSource;

/// Why a file object cannot be read.
const NOT_BINARY: &str = "file_obj must be readable and in binary mode (mode=\"rb\")";

/// Why `bytes`, an `int`, or an `os.PathLike` whose `__fspath__` gives
/// bytes is not read (tensorizer fails on each with a `TypeError` too).
const NOT_A_PATH: &str = "file_obj must be a path or a binary file object";

/// Something a reader opens.
pub(crate) enum FileSource {
    /// A local path or a URI.
    Path(PathBuf),
    /// An opened source.
    Opened(Arc<dyn RangeSource>),
    /// A stream's bytes, and its name for messages.
    Bytes(Vec<u8>, String),
}

/// The exception `_args.<made_by>(arg)` makes (one place for each refusal).
fn args_error<'py>(py: Python<'py>, made_by: &str, arg: impl IntoPyObject<'py>) -> PyErr {
    let made = py.import(intern!(py, "tensorizer_rs._args")).and_then(|m| m.getattr(made_by));
    match made.and_then(|f| f.call1((arg,))) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// A `RemoteStream`'s source, as tensorizer reads a stream: from its
/// position up to its `end`.
fn remote_stream(obj: &Bound<'_, PyAny>) -> PyResult<FileSource> {
    let py = obj.py();
    let begin: u64 = obj.call_method0(intern!(py, "tell"))?.extract()?;
    let end: Option<u64> = obj.getattr(intern!(py, "end"))?.extract()?;
    let source = obj.getattr(intern!(py, "native_source"))?;
    let source = source.cast::<NativeSource>()?.get();
    if begin == 0 && end.is_none() {
        return Ok(FileSource::Opened(source.inner.clone()));
    }
    Ok(FileSource::Opened(source.window(begin, end)?.inner))
}

/// A readable binary file object: its local file by name when it is read
/// from the start, else its bytes.
fn file_object(obj: &Bound<'_, PyAny>) -> PyResult<FileSource> {
    let py = obj.py();
    let name = obj.getattr_opt(intern!(py, "name"))?.filter(|n| !n.is_none());
    if let Some(name) = name.as_ref().filter(|n| n.is_instance_of::<PyString>()) {
        let path: PathBuf = name.extract()?;
        if path.is_file()
            && (!obj.hasattr(intern!(py, "tell"))?
                || obj.call_method0(intern!(py, "tell"))?.eq(0)?)
        {
            return Ok(FileSource::Path(path));
        }
    }
    let data = obj.call_method0(intern!(py, "read"))?;
    let data = py.get_type::<PyBytes>().call1((data,))?;
    let name = match name {
        Some(n) => n.str()?.to_string(),
        None => "<stream>".to_string(),
    };
    Ok(FileSource::Bytes(data.cast::<PyBytes>()?.as_bytes().to_vec(), name))
}

impl<'a, 'py> FromPyObject<'a, 'py> for FileSource {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        let obj = obj.to_owned();
        if obj.is_instance_of::<PyString>() || obj.hasattr(intern!(py, "__fspath__"))? {
            let path =
                py.import(intern!(py, "os"))?.call_method1(intern!(py, "fspath"), (&obj,))?;
            if !path.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(NOT_A_PATH));
            }
            let path: PathBuf = path.extract()?;
            if path.as_os_str().is_empty() {
                // `open("")` raises FileNotFoundError; tensorizer opens it.
                return Err(args_error(py, "file_not_found", path));
            }
            return Ok(Self::Path(path));
        }
        let stream_io = py.import(intern!(py, "tensorizer_rs.stream_io"))?;
        if obj.is_instance(&stream_io.getattr(intern!(py, "RemoteStream"))?)? {
            return remote_stream(&obj);
        }
        if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(NOT_A_PATH));
        }
        if !obj.hasattr(intern!(py, "read"))? {
            return Err(args_error(py, "not_a_file", &obj));
        }
        let text = py.import(intern!(py, "io"))?.getattr(intern!(py, "TextIOBase"))?;
        let readable = intern!(py, "readable");
        if obj.is_instance(&text)?
            || (obj.hasattr(readable)? && !obj.call_method0(readable)?.is_truthy()?)
        {
            return Err(PyValueError::new_err(NOT_BINARY));
        }
        file_object(&obj)
    }
}
