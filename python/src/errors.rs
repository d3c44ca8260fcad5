//! One place maps Rust errors to Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::{
    PyConnectionError, PyException, PyFileExistsError, PyFileNotFoundError, PyOSError, PyPermissionError,
    PyTimeoutError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use tensorizer_native::Error;
use tensorizer_native::error::StoreErrorKind;

// The exceptions are named after the importable module that holds them
// (`tensorizer_rs._native`), so they pickle: worker processes (vLLM's, for
// one) send exceptions back to their parent by pickling them.

create_exception!(tensorizer_rs._native, FormatError, PyValueError, "The bytes are not a valid tensorizer file.");
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

pub(crate) fn truncated_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    TRUNCATED
        .get_or_try_init(py, || {
            let struct_error = py.import("struct")?.getattr("error")?;
            let bases = PyTuple::new(py, [py.get_type::<FormatError>().into_any(), struct_error])?;
            let namespace = PyDict::new(py);
            namespace.set_item("__module__", "tensorizer_rs._native")?;
            namespace.set_item("__doc__", "The file ended before a complete structure was read.")?;
            let made = py.get_type::<PyType>().call1(("TruncatedError", bases, namespace))?;
            Ok::<_, PyErr>(made.cast_into::<PyType>()?.unbind())
        })
        .map(|t| t.bind(py))
}

/// Maps a format-core error, prefixed with `context` (file and tensor).
pub(crate) fn core_to_py(e: &tensorizer_core::Error, context: Option<&str>) -> PyErr {
    use tensorizer_core::Error as E;
    let msg = match context {
        Some(c) => format!("{c}: {e}"),
        None => e.to_string(),
    };
    match e {
        E::Truncated { .. } => Python::attach(|py| match truncated_type(py) {
            Ok(t) => PyErr::from_type(t.clone(), msg),
            Err(err) => err,
        }),
        E::HashMismatch { .. } => HashMismatchError::new_err(msg),
        E::Decryption | E::Encryption { .. } => CryptographyError::new_err(msg),
        E::InvalidArgument { .. } | E::MetadataOverflow { .. } | E::InvalidName { offset: 0, .. } => {
            PyValueError::new_err(msg)
        }
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

/// Maps a host error.
pub(crate) fn to_py(e: Error) -> PyErr {
    match &e {
        Error::Format { file, source } => core_to_py(source, Some(file)),
        Error::Tensor { file, tensor, source } => core_to_py(source, Some(&format!("{file}: tensor {tensor:?}"))),
        Error::Io { .. } | Error::Store { .. } => match e.store_kind() {
            Some(kind) => store_to_py(kind, e.to_string()),
            None => PyOSError::new_err(e.to_string()),
        },
        _ => PyValueError::new_err(e.to_string()),
    }
}
