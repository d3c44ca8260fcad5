//! `NativeWriter`: an atomic, incremental tensorizer file writer.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tensorizer_core::crypto::Key;
use tensorizer_core::{
    Dtype, KdfParams, PathComponent, TensorPath, TensorSpec, TensorType, Writer, WriterOptions,
};
use tensorizer_native::write::FileWriter;
use tensorizer_native::{WriteOptions, default_readers};

use crate::buffers::Held;
use crate::errors::{CryptographyError, core_to_py, to_py};

/// One path component from Python: a str key or an int index.
#[derive(FromPyObject)]
enum Component {
    Key(String),
    Index(u64),
}

/// One tensor to write, checked when made: its path, type, module index,
/// stored dtype string, shape, and whether it is a meta tensor (no data).
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub(crate) struct WriteSpec {
    spec: TensorSpec,
}

#[pymethods]
impl WriteSpec {
    #[new]
    #[pyo3(signature = (path, tensor_type, module_index, dtype, shape, meta=false))]
    fn new(
        path: Vec<Component>,
        tensor_type: u8,
        module_index: u16,
        dtype: &str,
        shape: Vec<u64>,
        meta: bool,
    ) -> PyResult<Self> {
        let components = path
            .into_iter()
            .map(|c| match c {
                Component::Key(k) => PathComponent::Key(k),
                Component::Index(i) => PathComponent::Index(i),
            })
            .collect();
        let path = TensorPath::from_components(components).map_err(|e| core_to_py(&e, None))?;
        let tensor_type = TensorType::from_u8(tensor_type)
            .ok_or_else(|| PyValueError::new_err("tensor type must be 0, 1 or 2"))?;
        let dtype = Dtype::parse(dtype.as_bytes(), 0).map_err(|e| core_to_py(&e, None))?;
        Ok(Self { spec: TensorSpec { path, tensor_type, module_index, dtype, shape, meta } })
    }
}

/// Where a writer is: waiting for its first tensors (when the index is
/// sized from them), writing, or done.
enum State {
    Pending(PathBuf, WriteOptions),
    Open(Box<FileWriter>),
    Closed,
}

/// A file being written; nothing appears at the target until `commit`.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub struct NativeWriter {
    state: Mutex<State>,
    num_writers: usize,
}

#[pymethods]
impl NativeWriter {
    /// Starts a file at `path`. `alignment` 1 with `metadata_len` 262144 is
    /// tensorizer's exact layout; without `metadata_len` the index is sized
    /// from the first `append` (`Writer::metadata_len_with_room`). `kdf` =
    /// (opslimit, memlimit, salt) records how `key` was derived from a
    /// passphrase.
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
            .map(|k| {
                Key::from_slice(&k)
                    .map_err(|_| CryptographyError::new_err("a key must be exactly 32 bytes"))
            })
            .transpose()?;
        let encryption = key.as_ref().map(|_| {
            kdf.map(|(opslimit, memlimit, salt)| KdfParams::argon2id(opslimit, memlimit, salt))
        });
        let layout = WriterOptions { alignment, metadata_len, encryption };
        let options = WriteOptions { layout, key, num_writers: 0 };
        let state = match metadata_len {
            Some(_) => State::Open(Box::new(FileWriter::open(&path, &options).map_err(to_py)?)),
            None => State::Pending(path, options),
        };
        Ok(Self {
            state: Mutex::new(state),
            num_writers: num_writers.unwrap_or_else(default_readers).max(1),
        })
    }

    /// Appends tensors: `specs[k]` describes `buffers[k]` (C-contiguous
    /// bytes; empty for meta tensors). Hashing, encryption and writing run
    /// with the GIL released.
    fn append(
        &self,
        py: Python<'_>,
        specs: Vec<PyRef<'_, WriteSpec>>,
        buffers: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        if specs.len() != buffers.len() {
            return Err(PyValueError::new_err("one buffer per tensor is required"));
        }
        let specs: Vec<TensorSpec> = specs.iter().map(|s| s.spec.clone()).collect();
        let held = Held::acquire(&buffers, false)?;
        let slices = held.slices();
        let mut guard = self.lock()?;
        if let State::Pending(path, options) = &*guard {
            let metadata_len =
                Writer::metadata_len_with_room(&specs).map_err(|e| core_to_py(&e, None))?;
            let mut options = options.clone();
            options.layout.metadata_len = Some(metadata_len);
            *guard = State::Open(Box::new(FileWriter::open(path, &options).map_err(to_py)?));
        }
        let State::Open(writer) = &mut *guard else {
            return Err(PyRuntimeError::new_err("the file is already closed"));
        };
        let tensors: Vec<(TensorSpec, &[u8])> = specs.into_iter().zip(slices).collect();
        let threads = self.num_writers;
        py.detach(|| writer.append(&tensors, threads)).map_err(to_py)
    }

    /// Data version chosen so far (1 before anything is written to an
    /// unencrypted file, 3 to an encrypted one).
    fn version(&self) -> PyResult<u32> {
        match &*self.lock()? {
            State::Open(w) => Ok(w.version()),
            State::Pending(_, options) => {
                Ok(if options.layout.encryption.is_some() { 3 } else { 1 })
            }
            State::Closed => Err(PyRuntimeError::new_err("the file is already closed")),
        }
    }

    /// Bytes of tensor data written so far.
    fn tensor_size(&self) -> PyResult<u64> {
        match &*self.lock()? {
            State::Open(w) => Ok(w.tensor_size()),
            State::Pending(..) => Ok(0),
            State::Closed => Err(PyRuntimeError::new_err("the file is already closed")),
        }
    }

    /// Finishes the file: index, header, fsync, rename over the target (a
    /// file that got no tensors gets tensorizer's 256 KiB index).
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let state = std::mem::replace(&mut *self.lock()?, State::Closed);
        let writer = match state {
            State::Open(w) => *w,
            State::Pending(path, options) => FileWriter::open(&path, &options).map_err(to_py)?,
            State::Closed => return Ok(()),
        };
        py.detach(|| writer.commit()).map_err(to_py)
    }

    /// Drops the temporary file; the target is left untouched.
    fn abort(&self) -> PyResult<()> {
        *self.lock()? = State::Closed;
        Ok(())
    }
}

impl NativeWriter {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))
    }
}
