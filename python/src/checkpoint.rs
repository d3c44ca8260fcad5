//! `NativeCheckpoint`: a torch.save checkpoint opened with range reads
//! (thin wrapper over `tensorizer_native::convert::checkpoint::CheckpointReader`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use tensorizer_core::checkpoint::{ContainerKind, Leaf};
use tensorizer_native::convert::checkpoint::CheckpointReader;
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

/// One entry of a checkpoint's state dict, in `torch.load` order.
#[pyclass(module = "tensorizer_rs._native", frozen, get_all)]
pub(crate) struct CheckpointEntry {
    /// Position in `torch.load` order.
    index: usize,
    /// Path components (str keys, int indices) from the root.
    path: Py<PyTuple>,
    /// "tensor", "none", "bool", "int", "float", "str" or "bytes".
    kind: &'static str,
    /// The value of a non-tensor entry (`None` for a tensor).
    value: Py<PyAny>,
    /// A tensor's torch dtype name (e.g. "bfloat16").
    dtype: Option<&'static str>,
    /// A tensor's shape.
    shape: Vec<u64>,
    /// A tensor's stride, in elements.
    stride: Vec<u64>,
    /// Where a tensor starts in its storage, in elements.
    storage_offset: u64,
    /// The archive key of a tensor's storage.
    storage_key: String,
    /// Whether the tensor was saved requiring grad.
    requires_grad: bool,
    /// Bytes of a tensor's data gathered contiguously (`None` on overflow
    /// or for a non-tensor).
    nbytes: Option<u64>,
}

/// One zip entry's CRC-32 check.
#[pyclass(module = "tensorizer_rs._native", frozen, get_all)]
pub(crate) struct ZipEntryCheck {
    /// The zip entry's name.
    name: String,
    /// Its size in bytes.
    size: u64,
    /// The CRC-32 the archive records.
    expected: u32,
    /// The CRC-32 of its data.
    actual: u32,
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
        let inner: Arc<dyn RangeSource> =
            if let Ok(opened) = source.cast::<crate::source::NativeSource>() {
                opened.get().inner.clone()
            } else if let Ok(bytes) = source.cast::<PyBytes>() {
                Arc::new(MemorySource::new(
                    bytes.as_bytes().to_vec(),
                    name.unwrap_or_else(|| "<bytes>".into()),
                ))
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

    /// Every entry in `torch.load` order, as typed [`CheckpointEntry`]s.
    fn entries<'py>(&self, py: Python<'py>) -> PyResult<Vec<CheckpointEntry>> {
        let storages = self.inner.storages();
        self.inner
            .entries()
            .iter()
            .enumerate()
            .map(|(index, e)| {
                let path = path_to_py(py, &e.path)?.unbind();
                let mut entry = CheckpointEntry {
                    index,
                    path,
                    kind: "tensor",
                    value: py.None(),
                    dtype: None,
                    shape: Vec::new(),
                    stride: Vec::new(),
                    storage_offset: 0,
                    storage_key: String::new(),
                    requires_grad: false,
                    nbytes: None,
                };
                let (kind, value): (&'static str, Bound<'py, PyAny>) = match &e.value {
                    Leaf::Tensor(v) => {
                        entry.dtype = Some(v.dtype.torch_name());
                        entry.shape = v.shape.clone();
                        entry.stride = v.stride.clone();
                        entry.storage_offset = v.storage_offset;
                        entry.storage_key = storages[v.storage].key.clone();
                        entry.requires_grad = v.requires_grad;
                        entry.nbytes =
                            v.numel().and_then(|n| n.checked_mul(u64::from(v.dtype.size())));
                        ("tensor", py.None().into_bound(py))
                    }
                    Leaf::None => ("none", py.None().into_bound(py)),
                    Leaf::Bool(b) => ("bool", b.into_pyobject(py)?.to_owned().into_any()),
                    Leaf::Int(i) => ("int", i.into_pyobject(py)?.into_any()),
                    Leaf::Float(x) => ("float", x.into_pyobject(py)?.into_any()),
                    Leaf::Str(s) => ("str", s.into_pyobject(py)?.into_any()),
                    Leaf::Bytes(b) => ("bytes", PyBytes::new(py, b).into_any()),
                };
                entry.kind = kind;
                entry.value = value.unbind();
                Ok(entry)
            })
            .collect()
    }

    /// Every container below the root, depth first, each before what it
    /// holds: `(path, kind, len, entries_before)` with kind "dict",
    /// "ordered_dict", "list" or "tuple" and `entries_before` the number of
    /// entries before it (to rebuild values that hold no tensor exactly,
    /// in order).
    #[allow(clippy::type_complexity)]
    fn containers<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(Bound<'py, PyTuple>, &'static str, usize, usize)>> {
        self.inner
            .state_dict()
            .containers
            .iter()
            .map(|c| {
                let kind = match c.kind {
                    ContainerKind::Dict { ordered: false } => "dict",
                    ContainerKind::Dict { ordered: true } => "ordered_dict",
                    ContainerKind::List => "list",
                    ContainerKind::Tuple => "tuple",
                };
                Ok((path_to_py(py, &c.path)?, kind, c.len, c.entries_before))
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

    /// Every zip entry's CRC-32 check.
    fn verify(&self, py: Python<'_>) -> PyResult<Vec<ZipEntryCheck>> {
        let checks = py.detach(|| self.inner.verify(|_| {})).map_err(to_py)?;
        Ok(checks
            .into_iter()
            .map(|c| ZipEntryCheck {
                name: c.name,
                size: c.size,
                expected: c.expected,
                actual: c.actual,
            })
            .collect())
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
