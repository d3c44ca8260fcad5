//! `DeserializerOptions`: every reader option of `TensorDeserializer`,
//! decided once from its arguments and held by it. The rules are
//! `load_options.rs`'s; this only converts Python values for them and
//! keeps the objects only Python can use (device, dtype, filter).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString};

use crate::errors::ArgError;
use crate::load_options::{Int, LoadOptions, MmapArg, Raw, check_cooperative};

/// The reader options of one `TensorDeserializer`.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub struct DeserializerOptions {
    pub(crate) load: LoadOptions,
    /// `device` as given (torch resolves it: `_deserializer._resolve_device`).
    device: Py<PyAny>,
    /// `dtype`: a `torch.dtype` or None.
    dtype: Py<PyAny>,
    /// `filter_func`: a callable or None.
    filter_func: Py<PyAny>,
    /// The key or passphrase of `encryption` (None: no decryption asked).
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) passphrase: Option<Vec<u8>>,
    pub(crate) decrypts: bool,
}

/// A Python int as [`Int`].
fn int_of(value: &Bound<'_, PyAny>) -> PyResult<Int> {
    match value.extract::<i64>() {
        Ok(n) => Ok(Int::Fits(n)),
        Err(_) if value.lt(0)? => Ok(Int::TooSmall),
        Err(_) => Ok(Int::TooLarge),
    }
}

/// `value` if it is an int (bools included, as tensorizer's `isinstance`
/// checks take them), else the name of its type.
fn int_arg(value: &Bound<'_, PyAny>) -> PyResult<Result<Int, String>> {
    if value.is_instance_of::<PyInt>() {
        Ok(Ok(int_of(value)?))
    } else {
        Ok(Err(value.get_type().name()?.to_string()))
    }
}

/// Whether `dtype` is a `torch.dtype` (asked of its type, so that torch
/// need not be imported here).
fn is_torch_dtype(dtype: &Bound<'_, PyAny>) -> PyResult<bool> {
    let t = dtype.get_type();
    Ok(t.module()?.to_str()? == "torch" && t.name()?.to_str()? == "dtype")
}

#[pymethods]
impl DeserializerOptions {
    /// Decides the options from `TensorDeserializer`'s arguments (the same
    /// names; every one is passed), refusing a bad value with the error tensorizer
    /// raises for it. `cooperative`: a process group loads the file.
    /// `plaid_mode` and `plaid_mode_buffers` are accepted and have no
    /// effect, as in tensorizer 2.12.
    #[new]
    #[pyo3(signature = (
        *, device, filter_func, dtype, lazy_load, plaid_mode, plaid_mode_buffers, num_readers, verify_hash,
        encryption, mmap, meta_tensors, max_meta_bytes, cooperative=false,
    ))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn new(
        py: Python<'_>,
        device: Option<Py<PyAny>>,
        filter_func: Option<Py<PyAny>>,
        dtype: Option<Py<PyAny>>,
        lazy_load: &Bound<'_, PyAny>,
        plaid_mode: &Bound<'_, PyAny>,
        plaid_mode_buffers: &Bound<'_, PyAny>,
        num_readers: Option<&Bound<'_, PyAny>>,
        verify_hash: &Bound<'_, PyAny>,
        encryption: Option<&Bound<'_, PyAny>>,
        mmap: &Bound<'_, PyAny>,
        meta_tensors: &Bound<'_, PyAny>,
        max_meta_bytes: Option<&Bound<'_, PyAny>>,
        cooperative: bool,
    ) -> PyResult<Self> {
        let _ = (plaid_mode, plaid_mode_buffers);
        let lazy_load = lazy_load.is_truthy()?;
        check_cooperative(lazy_load, cooperative)?;
        let (key, passphrase) = key_args(encryption)?;
        let readers = num_readers.map(int_arg).transpose()?;
        check_dtype_and_filter(
            dtype.as_ref().map(|d| d.bind(py)),
            filter_func.as_ref().map(|f| f.bind(py)),
        )?;
        let meta_text = meta_tensors
            .cast::<PyString>()
            .ok()
            .map(|s| s.to_str().map(str::to_owned))
            .transpose()?;
        let meta_repr = meta_tensors.repr()?.to_string();
        let max_meta = match max_meta_bytes {
            None => None,
            Some(v) if v.is_instance_of::<PyInt>() => Some(Ok(int_of(v)?)),
            Some(_) => Some(Err(())),
        };
        let mmap_text =
            mmap.cast::<PyString>().ok().map(|s| s.to_str().map(str::to_owned)).transpose()?;
        let mmap_arg = match &mmap_text {
            Some(t) => MmapArg::Text(t),
            None => MmapArg::Truth(mmap.is_truthy()?),
        };
        let kinds = readers.as_ref().map(|r| r.as_ref().map(|i| *i).map_err(String::as_str));
        let raw = Raw {
            verify_hash: verify_hash.is_truthy()?,
            num_readers: kinds,
            lazy_load,
            cooperative,
            mmap: mmap_arg,
            meta_tensors: (meta_text.as_deref(), &meta_repr),
            max_meta_bytes: max_meta,
        };
        let load = LoadOptions::decide(raw)?;
        let none = || py.None();
        Ok(Self {
            load,
            device: device.unwrap_or_else(none),
            dtype: dtype.unwrap_or_else(none),
            filter_func: filter_func.unwrap_or_else(none),
            decrypts: encryption.is_some(),
            key,
            passphrase,
        })
    }

    /// Refuses `lazy_load` with a process group (before the group's
    /// agreement: every rank raises it alone).
    #[staticmethod]
    fn check_cooperative(lazy_load: &Bound<'_, PyAny>, cooperative: bool) -> PyResult<()> {
        Ok(check_cooperative(lazy_load.is_truthy()?, cooperative)?)
    }

    /// The constructor's `verify_hash`.
    #[getter]
    fn verify_hash(&self) -> bool {
        self.load.verify_hash
    }

    /// Whether a call with this `verify_hash` checks hashes: its truth, or
    /// the constructor's setting for None.
    #[pyo3(signature = (verify_hash=None))]
    fn verify(&self, verify_hash: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let call = verify_hash.filter(|v| !v.is_none()).map(|v| v.is_truthy()).transpose()?;
        Ok(self.load.verify(call))
    }

    #[getter]
    fn num_readers(&self) -> Option<usize> {
        self.load.num_readers
    }

    #[getter]
    fn lazy_load(&self) -> bool {
        self.load.lazy_load
    }

    /// `"off"`, `"on"` or `"auto"`.
    #[getter]
    pub(crate) fn mmap(&self) -> &'static str {
        self.load.mmap.name()
    }

    /// `"zeros"`, `"expand"` or `"meta"`.
    #[getter]
    pub(crate) fn meta_tensors(&self) -> &'static str {
        self.load.meta.name()
    }

    #[getter]
    pub(crate) fn max_meta_bytes(&self) -> Option<u64> {
        self.load.max_meta_bytes
    }

    #[getter]
    pub(crate) fn device(&self, py: Python<'_>) -> Py<PyAny> {
        self.device.clone_ref(py)
    }

    #[getter]
    pub(crate) fn dtype(&self, py: Python<'_>) -> Py<PyAny> {
        self.dtype.clone_ref(py)
    }

    #[getter]
    fn filter_func(&self, py: Python<'_>) -> Py<PyAny> {
        self.filter_func.clone_ref(py)
    }

    /// Whether `encryption` was given (a key or passphrase to decrypt with).
    #[getter]
    fn decrypts(&self) -> bool {
        self.decrypts
    }

    fn __repr__(&self) -> String {
        let o = &self.load;
        let truth = |b: bool| if b { "True" } else { "False" };
        let count = |n: Option<String>| n.unwrap_or_else(|| "None".into());
        format!(
            "DeserializerOptions(verify_hash={}, num_readers={}, lazy_load={}, mmap='{}', meta_tensors='{}', \
             max_meta_bytes={}, decrypts={})",
            truth(o.verify_hash),
            count(o.num_readers.map(|n| n.to_string())),
            truth(o.lazy_load),
            o.mmap.name(),
            o.meta.name(),
            count(o.max_meta_bytes.map(|n| n.to_string())),
            truth(self.decrypts)
        )
    }
}

/// A raw key and a passphrase, either or both absent.
type KeyArgs = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The key and passphrase of a `DecryptionParams` (`None`: neither).
fn key_args(encryption: Option<&Bound<'_, PyAny>>) -> PyResult<KeyArgs> {
    let Some(e) = encryption else { return Ok((None, None)) };
    let params = e.py().import("tensorizer_rs._crypt")?.getattr("DecryptionParams")?;
    if !e.is_instance(&params)? {
        return Err(
            ArgError::Type("encryption must be a DecryptionParams object or None".into()).into()
        );
    }
    let args = e.call_method0("native_args")?.cast_into::<PyDict>()?;
    let get = |name| -> PyResult<Option<Vec<u8>>> {
        match args.get_item(name)? {
            Some(v) if !v.is_none() => Ok(Some(v.extract()?)),
            _ => Ok(None),
        }
    };
    Ok((get("key")?, get("passphrase")?))
}

/// Refuses a `dtype` that is not a torch dtype and a `filter_func` that
/// cannot be called.
fn check_dtype_and_filter(
    dtype: Option<&Bound<'_, PyAny>>,
    filter_func: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    if let Some(d) = dtype
        && !is_torch_dtype(d)?
    {
        let kind = d.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "dtype must be a torch.dtype or None, not {kind}"
        )));
    }
    if let Some(f) = filter_func
        && !f.is_callable()
    {
        let kind = f.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "filter_func must be a callable that takes a tensor's name and returns whether to load it, or None, \
             not {kind}"
        )));
    }
    Ok(())
}
