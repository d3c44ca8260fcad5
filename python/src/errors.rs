//! One place maps Rust errors to Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::{
    PyConnectionError, PyException, PyFileExistsError, PyFileNotFoundError, PyOSError,
    PyPermissionError, PyTimeoutError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use tensorizer_core::Sniffed;
use tensorizer_native::Error;
use tensorizer_native::error::{StoreErrorKind, tensor_prefix};

// The exceptions are named after the importable module that holds them
// (`tensorizer_rs._native`), so they pickle: worker processes (vLLM's, for
// one) send exceptions back to their parent by pickling them.

create_exception!(
    tensorizer_rs._native,
    FormatError,
    PyValueError,
    "The bytes are not a valid tensorizer file."
);
create_exception!(
    tensorizer_rs._native,
    HashMismatchError,
    PyException,
    "A tensor's data does not match its stored hash."
);
create_exception!(
    tensorizer_rs._native,
    CryptographyError,
    PyException,
    "Encryption or decryption failed, or the key does not fit the file."
);

create_exception!(
    tensorizer_rs._native,
    ObjectChangedError,
    PyOSError,
    "The remote object was replaced while it was being read (its ETag or Redis generation changed)."
);
create_exception!(
    tensorizer_rs._native,
    RangeNotSupportedError,
    PyOSError,
    "The server ignores HTTP Range requests, so the object cannot be read in parts."
);

/// `TruncatedError(FormatError, struct.error)`: tensorizer surfaces a short
/// file as `struct.error`, so code catching that keeps working.
static TRUNCATED: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `CheckpointUnpicklingError(FormatError, pickle.UnpicklingError)`: a
/// checkpoint's pickle refused (a forbidden global, an unsupported opcode,
/// a structure that is not a state dict), so code written for `torch.load`
/// or zipslicer, which catches `pickle.UnpicklingError`, keeps working.
static UNPICKLING: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A subclass of `FormatError` and of `module.attr`, made once.
fn format_error_also<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    also: (&str, &str),
    doc: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.get_or_try_init(py, || {
        let other = py.import(also.0)?.getattr(also.1)?;
        let bases = PyTuple::new(py, [py.get_type::<FormatError>().into_any(), other])?;
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", "tensorizer_rs._native")?;
        namespace.set_item("__doc__", doc)?;
        let made = py.get_type::<PyType>().call1((name, bases, namespace))?;
        Ok::<_, PyErr>(made.cast_into::<PyType>()?.unbind())
    })
    .map(|t| t.bind(py))
}

pub(crate) fn truncated_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    let doc = "The file ended before a complete structure was read.";
    format_error_also(py, &TRUNCATED, "TruncatedError", ("struct", "error"), doc)
}

pub(crate) fn unpickling_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    let doc = "A checkpoint's pickle was refused: it needs more than a state dict (nothing was executed).";
    format_error_also(
        py,
        &UNPICKLING,
        "CheckpointUnpicklingError",
        ("pickle", "UnpicklingError"),
        doc,
    )
}

fn made_err(
    msg: String,
    made: for<'py> fn(Python<'py>) -> PyResult<&'py Bound<'py, PyType>>,
) -> PyErr {
    Python::attach(|py| match made(py) {
        Ok(t) => PyErr::from_type(t.clone(), msg),
        Err(err) => err,
    })
}

/// Maps a format-core error, prefixed with `context` (file and tensor).
fn core_err(e: &tensorizer_core::Error, context: Option<&str>) -> PyErr {
    use tensorizer_core::Error as E;
    let msg = match context {
        Some(c) => format!("{c}: {e}"),
        None => e.to_string(),
    };
    match e {
        E::Truncated { .. } => made_err(msg, truncated_type),
        E::ForbiddenGlobal { .. } | E::UnsupportedOpcode { .. } | E::CorruptCheckpoint { .. } => {
            made_err(msg, unpickling_type)
        }
        E::HashMismatch { .. } => HashMismatchError::new_err(msg),
        E::Decryption | E::Encryption { .. } => CryptographyError::new_err(msg),
        E::InvalidArgument { .. }
        | E::MetadataOverflow { .. }
        | E::InvalidName { offset: 0, .. } => PyValueError::new_err(msg),
        _ => FormatError::new_err(msg),
    }
}

/// The Python exception for a store failure (all `OSError` subclasses).
fn store_to_py(kind: StoreErrorKind, msg: String) -> PyErr {
    match kind {
        StoreErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
        StoreErrorKind::PermissionDenied => PyPermissionError::new_err(msg),
        StoreErrorKind::AlreadyExists => PyFileExistsError::new_err(msg),
        StoreErrorKind::TimedOut => PyTimeoutError::new_err(msg),
        StoreErrorKind::RetriesExhausted => PyConnectionError::new_err(msg),
        StoreErrorKind::Changed => ObjectChangedError::new_err(msg),
        StoreErrorKind::RangeNotSupported => RangeNotSupportedError::new_err(msg),
        _ => PyOSError::new_err(msg),
    }
}

/// Sets `offset`, `tensor` and `location` on the exception (`None` where
/// the error has none), so a caller reads them instead of parsing the
/// message.
fn with_details(
    err: PyErr,
    offset: Option<u64>,
    tensor: Option<&str>,
    location: Option<&str>,
) -> PyErr {
    Python::attach(|py| {
        let value = err.value(py);
        // Setting an attribute on a fresh exception instance cannot fail in
        // practice; if it does, the exception still says everything.
        let _ = value.setattr("offset", offset);
        let _ = value.setattr("tensor", tensor);
        let _ = value.setattr("location", location);
    });
    err
}

/// The exception classes of this module, given `offset`, `tensor` and
/// `location` class attributes (`None`), so every instance has them even
/// when raised from Python code.
pub(crate) fn detail_defaults(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for class in [
        "FormatError",
        "HashMismatchError",
        "CryptographyError",
        "ObjectChangedError",
        "RangeNotSupportedError",
    ] {
        let class = m.getattr(class)?;
        for attr in ["offset", "tensor", "location"] {
            class.setattr(attr, m.py().None())?;
        }
    }
    Ok(())
}

/// Maps a core error (`context`, if any, prefixes the message).
pub(crate) fn core_to_py(e: &tensorizer_core::Error, context: Option<&str>) -> PyErr {
    with_details(core_err(e, context), e.offset(), e.tensor_name(), None)
}

/// Maps a host error.
pub(crate) fn to_py(e: Error) -> PyErr {
    let err = match &e {
        Error::Format { file, source } => core_err(source, Some(file)),
        Error::Tensor { file, tensor, source } => match tensor_prefix(tensor, source) {
            Some(prefix) => core_err(source, Some(&format!("{file}: {prefix}"))),
            None => core_err(source, Some(file)),
        },
        Error::OtherFormat { found, .. } => {
            FormatError::new_err(format!("{e}; {}", load_hint(*found)))
        }
        Error::UnknownFormat { .. } | Error::Safetensors { .. } => {
            FormatError::new_err(e.to_string())
        }
        Error::WrongKey { .. } => CryptographyError::new_err(e.to_string()),
        Error::Io { .. } | Error::Store { .. } | Error::File { .. } => match e.store_kind() {
            Some(kind) => store_to_py(kind, e.to_string()),
            None => PyOSError::new_err(e.to_string()),
        },
        _ => PyValueError::new_err(e.to_string()),
    };
    with_details(err, e.offset(), e.tensor_name(), e.location())
}

/// How Python code loads a file of another format than tensorizer's.
fn load_hint(found: Sniffed) -> &'static str {
    match found {
        Sniffed::Safetensors { .. } => {
            "load it with safetensors.torch.load_file(path), or convert it first: \
             tensorizer_rs.convert(path, \"model.tensors\")"
        }
        Sniffed::TorchZip => {
            "load it with torch.load(path, weights_only=True) or tensorizer_rs.zipslicer.load(path), or convert \
             it first: tensorizer_rs.convert(path, \"model.tensors\")"
        }
        Sniffed::LegacyTorch | Sniffed::Tensorizer => {
            "load it with torch.load(path, weights_only=True)"
        }
    }
}

/// A refused argument of the Python API: a value of the wrong type, or of
/// the right type but out of range (`TypeError` and `ValueError`, the
/// classes tensorizer raises for them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ArgError {
    Type(String),
    Value(String),
}

impl From<ArgError> for PyErr {
    fn from(e: ArgError) -> Self {
        match e {
            ArgError::Type(m) => pyo3::exceptions::PyTypeError::new_err(m),
            ArgError::Value(m) => PyValueError::new_err(m),
        }
    }
}
