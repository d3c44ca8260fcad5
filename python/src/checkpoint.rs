//! `NativeCheckpoint`: a torch.save checkpoint opened with range reads
//! (thin wrapper over `tensorizer_native::checkpoint::CheckpointReader`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use tensorizer_core::checkpoint::Leaf;
use tensorizer_native::checkpoint::CheckpointReader;
use tensorizer_native::source::Counted;
use tensorizer_native::{Intent, MemorySource, RangeSource, open_uri};

use crate::buffers::fill_with;
use crate::errors::to_py;
use crate::reader::path_to_py;

/// A torch.save zip checkpoint: the state dict parsed at open (without
/// executing anything), tensors read on demand.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub struct NativeCheckpoint {
    pub(crate) inner: CheckpointReader<Counted<Arc<dyn RangeSource>>>,
}

#[pymethods]
impl NativeCheckpoint {
    /// Opens a local path or URI (str), an opened `NativeSource`, or
    /// in-memory bytes. `max_expanded_bytes` caps what one stride-0 view
    /// may expand to.
    #[new]
    #[pyo3(signature = (source, *, name=None, max_expanded_bytes=None))]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        name: Option<String>,
        max_expanded_bytes: Option<u64>,
    ) -> PyResult<Self> {
        let inner: Arc<dyn RangeSource> = if let Ok(opened) = source.cast::<crate::source::NativeSource>() {
            opened.get().inner.clone()
        } else if let Ok(bytes) = source.cast::<PyBytes>() {
            Arc::new(MemorySource::new(bytes.as_bytes().to_vec(), name.unwrap_or_else(|| "<bytes>".into())))
        } else {
            let path: std::path::PathBuf = source.extract()?;
            let uri = path.to_string_lossy().into_owned();
            // Peek: a checkpoint is read from its end first, so the opening
            // request must not go on into the whole file (range reads only).
            Arc::from(py.detach(|| open_uri(&uri, Intent::Peek)).map_err(to_py)?)
        };
        let counted = Counted::new(inner);
        let mut inner = py.detach(|| CheckpointReader::new(counted)).map_err(to_py)?;
        if let Some(cap) = max_expanded_bytes {
            inner.set_max_expanded_bytes(cap);
        }
        Ok(Self { inner })
    }

    /// One tuple per entry in `torch.load` order: (path components, kind,
    /// details). For a tensor, kind is "tensor" and details is (torch dtype
    /// name, shape, stride, storage offset, storage key, requires_grad,
    /// contiguous bytes); otherwise kind is "none", "bool", "int", "float",
    /// "str" or "bytes" and details is the value.
    fn entries<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let storages = self.inner.storages();
        self.inner
            .entries()
            .iter()
            .map(|e| {
                let path = path_to_py(py, &e.path)?;
                let (kind, details): (&str, Bound<'py, PyAny>) = match &e.value {
                    Leaf::Tensor(v) => {
                        let nbytes = v.numel().and_then(|n| n.checked_mul(u64::from(v.dtype.size())));
                        let t = (
                            v.dtype.torch_name(),
                            v.shape.clone(),
                            v.stride.clone(),
                            v.storage_offset,
                            storages[v.storage].key.clone(),
                            v.requires_grad,
                            nbytes,
                        )
                            .into_pyobject(py)?
                            .into_any();
                        ("tensor", t)
                    }
                    Leaf::None => ("none", py.None().into_bound(py)),
                    Leaf::Bool(b) => ("bool", b.into_pyobject(py)?.to_owned().into_any()),
                    Leaf::Int(i) => ("int", i.into_pyobject(py)?.into_any()),
                    Leaf::Float(x) => ("float", x.into_pyobject(py)?.into_any()),
                    Leaf::Str(s) => ("str", s.into_pyobject(py)?.into_any()),
                    Leaf::Bytes(b) => ("bytes", PyBytes::new(py, b).into_any()),
                };
                (path, kind, details).into_pyobject(py)
            })
            .collect()
    }

    /// Bytes entry `i` takes gathered contiguously (refused for a stride-0
    /// view expanding past `max_expanded_bytes`).
    fn nbytes(&self, i: usize) -> PyResult<u64> {
        self.inner.nbytes(i).map_err(to_py)
    }

    /// Reads entry `i` as contiguous little-endian bytes into `buffer` (a
    /// writable C-contiguous buffer of exactly `nbytes(i)` bytes), reading
    /// only the storage bytes its view spans, with the GIL released.
    fn read_into(&self, py: Python<'_>, i: usize, buffer: Bound<'_, PyAny>) -> PyResult<()> {
        fill_with(py, buffer, |out| self.inner.read_contiguous(i, out))
    }

    /// Entry `i`'s storage as (first byte in the file, byte length), checked
    /// against the storage's element count: for memory-mapped views.
    fn storage_span(&self, py: Python<'_>, i: usize) -> PyResult<(u64, u64)> {
        let storage = self.inner.tensor(i).map_err(to_py)?.storage;
        let range = py.detach(|| self.inner.storage_range(storage)).map_err(to_py)?;
        Ok((range.start, range.end - range.start))
    }

    /// Every zip entry's (name, size, CRC-32 recorded, CRC-32 of the data).
    fn verify(&self, py: Python<'_>) -> PyResult<Vec<(String, u64, u32, u32)>> {
        let checks = py.detach(|| self.inner.verify(|_| {})).map_err(to_py)?;
        Ok(checks.into_iter().map(|c| (c.name, c.size, c.expected, c.actual)).collect())
    }

    /// "little" or "big": how the storages are stored (reads are always
    /// little-endian).
    fn byte_order(&self) -> &'static str {
        match self.inner.byte_order() {
            tensorizer_core::dtype::ByteOrder::Big => "big",
            _ => "little",
        }
    }

    /// The archive's top-level folder.
    fn archive(&self) -> String {
        self.inner.archive().prefix.clone()
    }

    /// The file's length in bytes.
    fn size(&self) -> u64 {
        self.inner.source().len()
    }

    /// The file's name as given.
    fn name(&self) -> String {
        self.inner.source().name().to_string()
    }

    /// (bytes, requests) read from the source so far.
    fn bytes_read(&self) -> (u64, u64) {
        let s = self.inner.source();
        (s.bytes(), s.requests())
    }
}
