//! `NativeWriter`: an atomic, incremental tensorizer file writer.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tensorizer_core::crypto::Key;
use tensorizer_core::{Dtype, KdfParams, PathComponent, TensorPath, TensorSpec, TensorType, WriterOptions};
use tensorizer_native::writer::FileWriter;
use tensorizer_native::{WriteOptions, default_readers};

use crate::buffers::Held;
use crate::errors::{CryptographyError, core_to_py, to_py};

/// One path component from Python: a str key or an int index.
#[derive(FromPyObject)]
enum Component {
    Key(String),
    Index(u64),
}

/// (path components, tensor type, module index, dtype string, shape, is meta)
type SpecTuple = (Vec<Component>, u8, u16, String, Vec<u64>, bool);

/// A file being written; nothing appears at the target until `commit`.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub struct NativeWriter {
    inner: Mutex<Option<FileWriter>>,
    num_writers: usize,
}

fn spec_from(t: SpecTuple) -> PyResult<TensorSpec> {
    let (components, tensor_type, module_index, dtype, shape, meta) = t;
    let components = components
        .into_iter()
        .map(|c| match c {
            Component::Key(k) => PathComponent::Key(k),
            Component::Index(i) => PathComponent::Index(i),
        })
        .collect();
    let path = TensorPath::from_components(components).map_err(|e| core_to_py(&e, None))?;
    let tensor_type =
        TensorType::from_u8(tensor_type).ok_or_else(|| PyValueError::new_err("tensor type must be 0, 1 or 2"))?;
    let dtype = Dtype::parse(dtype.as_bytes(), 0).map_err(|e| core_to_py(&e, None))?;
    Ok(TensorSpec { path, tensor_type, module_index, dtype, shape, meta })
}

#[pymethods]
impl NativeWriter {
    /// Starts a file at `path`. `alignment` 1 with `metadata_len` 262144 is
    /// tensorizer's exact layout. `kdf` = (opslimit, memlimit, salt) records
    /// how `key` was derived from a passphrase.
    #[new]
    #[pyo3(signature = (path, *, alignment=64, metadata_len=None, key=None, kdf=None, num_writers=None))]
    fn new(
        path: PathBuf,
        alignment: u64,
        metadata_len: Option<u64>,
        key: Option<Vec<u8>>,
        kdf: Option<(u64, u64, Vec<u8>)>,
        num_writers: Option<usize>,
    ) -> PyResult<Self> {
        let key = key
            .map(|k| Key::from_slice(&k).map_err(|_| CryptographyError::new_err("a key must be exactly 32 bytes")))
            .transpose()?;
        let encryption =
            key.as_ref().map(|_| kdf.map(|(opslimit, memlimit, salt)| KdfParams { opslimit, memlimit, alg: 2, salt }));
        let layout = WriterOptions { alignment, metadata_len, encryption };
        let options = WriteOptions { layout, key, num_writers: 0 };
        let writer = FileWriter::open(&path, &options).map_err(to_py)?;
        Ok(Self { inner: Mutex::new(Some(writer)), num_writers: num_writers.unwrap_or_else(default_readers).max(1) })
    }

    /// Appends tensors: `specs[k]` describes `buffers[k]` (C-contiguous
    /// bytes; empty for meta tensors). Hashing, encryption and writing run
    /// with the GIL released.
    fn append(&self, py: Python<'_>, specs: Vec<SpecTuple>, buffers: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
        if specs.len() != buffers.len() {
            return Err(PyValueError::new_err("one buffer per tensor is required"));
        }
        let specs: Vec<TensorSpec> = specs.into_iter().map(spec_from).collect::<PyResult<_>>()?;
        let held = Held::acquire(&buffers, false)?;
        let slices = held.slices();
        let tensors: Vec<(TensorSpec, &[u8])> = specs.into_iter().zip(slices).collect();
        let mut guard = self.inner.lock().map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))?;
        let writer = guard.as_mut().ok_or_else(|| PyRuntimeError::new_err("the file is already closed"))?;
        let threads = self.num_writers;
        py.detach(|| writer.append(&tensors, threads)).map_err(to_py)
    }

    /// Data version chosen so far.
    fn version(&self) -> PyResult<u32> {
        self.with(|w| w.version())
    }

    /// Bytes of tensor data written so far.
    fn tensor_size(&self) -> PyResult<u64> {
        self.with(|w| w.tensor_size())
    }

    /// Finishes the file: index, header, fsync, rename over the target.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let writer = self.inner.lock().map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))?.take();
        match writer {
            Some(w) => py.detach(|| w.commit()).map_err(to_py),
            None => Ok(()),
        }
    }

    /// Drops the temporary file; the target is left untouched.
    fn abort(&self) -> PyResult<()> {
        self.inner.lock().map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))?.take();
        Ok(())
    }
}

impl NativeWriter {
    fn with<T>(&self, f: impl FnOnce(&FileWriter) -> T) -> PyResult<T> {
        let guard = self.inner.lock().map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))?;
        guard.as_ref().map(f).ok_or_else(|| PyRuntimeError::new_err("the file is already closed"))
    }
}
