//! `NativeReader`: a parsed file whose tensors load into caller buffers.

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};
use tensorizer_core::{KeySource, PathComponent, TensorPath};
use tensorizer_native::read::share::plan_shares;
use tensorizer_native::source::Counted;
use tensorizer_native::{
    Intent, Layout, Location, MemorySource, RangeSource, ReadOptions, Reader, default_readers,
    open_uri,
};

use crate::buffers::Held;
use crate::errors::{CryptographyError, to_py};
use crate::file_source::FileSource;
use crate::options::DeserializerOptions;

type Source = Box<dyn RangeSource>;

/// The host reader behind a `NativeReader`.
pub(crate) type Inner = Reader<Counted<Source>>;

/// One Redis key of a file: (name after `{prefix}:`, offset, length).
type RedisKey = (Vec<u8>, u64, u64);

/// A tensorizer file opened for reading.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub struct NativeReader {
    pub(crate) inner: Inner,
    pub(crate) origin: &'static str,
}

/// Where a source's bytes come from, for load receipts: the URI scheme
/// (`"file"` for a local path, as `Location::scheme` names them), or
/// `"stream"` for anything that is not a path or URI.
fn origin_of(name: &str) -> &'static str {
    Location::parse(name).map_or("stream", |l| l.scheme())
}

/// A folder, a store prefix or a shard index is many files: a reader
/// opens one, and the message names the call that loads them all.
fn refuse_sharded(uri: &str) -> PyResult<()> {
    if !tensorizer_native::shards::is_sharded(uri) {
        return Ok(());
    }
    Err(crate::errors::FormatError::new_err(format!(
        "{uri} is a sharded model (a folder, a store prefix or a shard index), and a \
         TensorDeserializer reads one file: load it with tensorizer_rs.load_state_dict({uri:?})"
    )))
}

pub(crate) fn key_source(
    key: Option<Vec<u8>>,
    passphrase: Option<Vec<u8>>,
) -> PyResult<Option<KeySource>> {
    match (key, passphrase) {
        (Some(k), _) => Key::from_slice(&k)
            .map(|k| Some(KeySource::Key(k)))
            .map_err(|_| CryptographyError::new_err("a key must be exactly 32 bytes")),
        (None, Some(p)) => {
            Ok(Some(KeySource::Passphrase(Passphrase::new(p), KdfLimits::default())))
        }
        (None, None) => Ok(None),
    }
}

pub(crate) fn path_to_py<'py>(py: Python<'py>, path: &TensorPath) -> PyResult<Bound<'py, PyTuple>> {
    let items: Vec<Bound<'py, PyAny>> = path
        .components()
        .into_iter()
        .map(|c| match c {
            PathComponent::Key(k) => pyo3::types::PyString::new(py, &k).into_any(),
            PathComponent::Index(i) => pyo3::types::PyInt::new(py, i).into_any(),
        })
        .collect();
    PyTuple::new(py, items)
}

impl NativeReader {
    /// Opens `source` and parses the header and index, with `options`
    /// (None: the defaults). `partial`: see `new`.
    pub(crate) fn open(
        py: Python<'_>,
        source: FileSource,
        options: Option<&DeserializerOptions>,
        partial: bool,
    ) -> PyResult<Self> {
        let (source, origin): (Source, _) = match source {
            FileSource::Opened(inner) => {
                let origin = origin_of(inner.name());
                (Box::new(inner), origin)
            }
            FileSource::Bytes(bytes, name) => (Box::new(MemorySource::new(bytes, name)), "stream"),
            FileSource::Path(path) => {
                let uri = path.to_string_lossy().into_owned();
                refuse_sharded(&uri)?;
                let intent = if partial { Intent::Peek } else { Intent::ReadAll };
                (py.detach(|| open_uri(&uri, intent)).map_err(to_py)?, origin_of(&uri))
            }
        };
        let options = match options {
            Some(o) => ReadOptions {
                num_readers: o.load.num_readers.unwrap_or_else(default_readers).max(1),
                verify_hash: o.load.verify_hash,
                key: key_source(o.key.clone(), o.passphrase.clone())?,
            },
            None => ReadOptions::default(),
        };
        let inner = py.detach(|| Reader::new(Counted::new(source), options)).map_err(to_py)?;
        Ok(Self { inner, origin })
    }
}

#[pymethods]
impl NativeReader {
    /// Opens a local path or URI (str), an opened `NativeSource`, or
    /// in-memory bytes, and parses the header and index, with `options`
    /// (readers, hash checks, the key or passphrase that decrypts; None:
    /// the defaults).
    /// `partial`: only part of a URI's object will be read (a share of a
    /// cooperative load), so its opening request asks for the header's
    /// prefix only, not for the whole object.
    #[new]
    #[pyo3(signature = (source, options=None, *, name=None, partial=false))]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        options: Option<PyRef<'_, DeserializerOptions>>,
        name: Option<String>,
        partial: bool,
    ) -> PyResult<Self> {
        let source = if let Ok(opened) = source.cast::<crate::source::NativeSource>() {
            FileSource::Opened(opened.get().inner.clone())
        } else if let Ok(bytes) = source.cast::<PyBytes>() {
            let name = name.unwrap_or_else(|| "<bytes>".into());
            FileSource::Bytes(bytes.as_bytes().to_vec(), name)
        } else {
            FileSource::Path(source.extract()?)
        };
        Self::open(py, source, options.as_deref(), partial)
    }

    /// Where the bytes come from: `"file"`, a URI scheme (`"http"`,
    /// `"https"`, `"s3"`, `"gs"`, `"az"`, `"redis"`, `"rediss"`, ...), or
    /// `"stream"` (bytes handed over from a Python file object).
    #[getter]
    fn origin(&self) -> &'static str {
        self.origin
    }

    /// The file's format: `"tensorizer"`, `"safetensors"` or `"torch"`.
    #[getter]
    fn format(&self) -> &'static str {
        match self.inner.layout() {
            Layout::Tensorizer(_) => "tensorizer",
            Layout::Safetensors { .. } => "safetensors",
            Layout::Torch => "torch",
        }
    }

    /// The file's data version (`None` for a safetensors file or a checkpoint).
    #[getter]
    fn version(&self) -> Option<u32> {
        self.inner.header().map(|h| h.version)
    }

    /// The header's feature flags (0 for a safetensors file).
    #[getter]
    fn flags(&self) -> u8 {
        self.inner.header().map_or(0, |h| h.flags)
    }

    /// Bytes of tensor data the file holds.
    #[getter]
    fn tensor_size(&self) -> u64 {
        self.inner.tensor_size()
    }

    /// Whether the file's tensors are encrypted.
    #[getter]
    fn encrypted(&self) -> bool {
        self.inner.is_encrypted()
    }

    /// A safetensors file's `__metadata__` (`None` for other formats).
    #[getter]
    fn safetensors_metadata(&self) -> Option<Vec<(String, String)>> {
        match self.inner.layout() {
            Layout::Tensorizer(_) | Layout::Torch => None,
            Layout::Safetensors { metadata, .. } => Some(metadata.clone()),
        }
    }

    /// Up to `n` raw bytes of the file at `offset` (fewer only at the end).
    fn read_range<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        n: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let source = self.inner.source();
        let n = n.min(usize::try_from(source.len().saturating_sub(offset)).unwrap_or(usize::MAX));
        let mut buf = vec![0u8; n];
        py.detach(|| source.read_exact_at(offset, &mut buf)).map_err(to_py)?;
        Ok(PyBytes::new(py, &buf))
    }

    /// The Redis layout's keys for this file under `prefix` (spec §12.1):
    /// `(full key name, offset, length)` in file order, computed by the
    /// native Redis store; and, first, the generation marker's key.
    fn redis_layout(&self, prefix: &str) -> PyResult<(String, Vec<RedisKey>)> {
        let keys =
            tensorizer_native::store::redis::key_layout(self.inner.source().name(), &self.inner)
                .map_err(to_py)?;
        let keys = keys.into_iter().map(|k| (k.name(prefix), k.offset, k.len)).collect();
        Ok((tensorizer_native::store::redis::generation_key(prefix), keys))
    }

    /// Stores the file through `client` (a `redis.Redis`: `set`, `exists`
    /// and, when it has one, `delete`) in tensorizer's Redis layout under
    /// `key_prefix` (`TensorDeserializer.to_redis`): the header key, then
    /// each tensor's header key and data key, a tensor whose header key
    /// exists skipped unless `force`.
    fn to_redis(
        &self,
        py: Python<'_>,
        client: &Bound<'_, PyAny>,
        key_prefix: &Bound<'_, PyAny>,
        force: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        // Any key_prefix is formatted into the keys, as tensorizer's f-strings do.
        let format = py.import(pyo3::intern!(py, "builtins"))?.getattr("format")?;
        let prefix: String = format.call1((key_prefix, ""))?.extract()?;
        let (generation, keys) = self.redis_layout(&prefix)?;
        // Key-by-key writes are not atomic: drop the generation marker of an
        // atomic write (spec §12.3) first, so that readers of the file being
        // replaced notice the change instead of mixing tensors.
        if client.hasattr("delete")? {
            client.call_method1("delete", (generation,))?;
        }
        let set = |(key, at, len): RedisKey| -> PyResult<()> {
            let n = usize::try_from(len).unwrap_or(usize::MAX);
            client.call_method1("set", (PyBytes::new(py, &key), self.read_range(py, at, n)?))?;
            Ok(())
        };
        let mut keys = keys.into_iter();
        if let Some(header) = keys.next() {
            set(header)?;
        }
        while let (Some(head), Some(data)) = (keys.next(), keys.next()) {
            // As tensorizer: `force` taken for its truth, once per tensor.
            let exists = || client.call_method1("exists", (PyBytes::new(py, &head.0),));
            if force.is_truthy()? || !exists()?.is_truthy()? {
                set(head)?;
                set(data)?;
            }
        }
        Ok(())
    }

    /// The file's length in bytes.
    fn size(&self) -> u64 {
        self.inner.source().len()
    }

    /// (bytes, requests) read from the source so far.
    fn bytes_read(&self) -> (u64, u64) {
        let s = self.inner.source();
        (s.bytes(), s.requests())
    }

    /// The file's name as given.
    fn name(&self) -> String {
        self.inner.source().name().to_string()
    }

    /// One typed `Entry` per tensor, in file order; `tensor_types[k]` is
    /// the Python value of stored tensor type `k`.
    fn entries<'py>(
        &self,
        py: Python<'py>,
        tensor_types: &Bound<'py, PyTuple>,
    ) -> PyResult<Vec<Bound<'py, crate::entry::PyEntry>>> {
        let _paused = crate::gc_pause::GcPause::new(py)?;
        crate::entry::build(py, self.inner.entries(), tensor_types)
    }

    /// Module index of each listed tensor (reads their headers).
    pub(crate) fn module_indices(&self, py: Python<'_>, indices: Vec<usize>) -> PyResult<Vec<u16>> {
        py.detach(|| {
            self.inner
                .records(&indices)
                .map(|records| records.iter().map(|r| r.header.module_index).collect())
        })
        .map_err(to_py)
    }

    /// Whether each listed tensor has anything to verify it by: stored
    /// hashes, or the MACs of encrypted data (reads their headers).
    fn vouched(&self, py: Python<'_>, indices: Vec<usize>) -> PyResult<Vec<bool>> {
        py.detach(|| {
            self.inner
                .records(&indices)
                .map(|records| records.iter().map(|r| r.vouched()).collect())
        })
        .map_err(to_py)
    }

    /// Checks `data` (tensor `i`'s bytes from memory, any buffer) against
    /// the hashes stored for it; raises `HashMismatchError` on a difference.
    pub(crate) fn verify_bytes(
        &self,
        py: Python<'_>,
        i: usize,
        data: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let held = Held::acquire(&[data], false)?;
        let slices = held.slices();
        let bytes: &[u8] = slices.first().copied().unwrap_or_default();
        py.detach(|| self.inner.verify_bytes(i, bytes)).map_err(to_py)
    }

    /// Loads tensors `indices[k]` into `buffers[k]` (writable, C-contiguous
    /// uint8 buffers of exactly each tensor's size) with the GIL released.
    #[pyo3(signature = (indices, buffers, verify_hash=None))]
    fn load_into(
        &self,
        py: Python<'_>,
        indices: Vec<usize>,
        buffers: Vec<Bound<'_, PyAny>>,
        verify_hash: Option<bool>,
    ) -> PyResult<()> {
        if indices.len() != buffers.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "one buffer per tensor index is required",
            ));
        }
        let verify = self.inner.options().verify(verify_hash);
        crate::loader::load_into(py, self, &indices, &buffers, verify)
    }

    /// What a rank of a cooperative load is about to load, as a SHA-256
    /// hex digest the ranks compare (spec §24): the file's size, the
    /// tensors `indices` with their places, dtypes and shapes, and the
    /// `device_type` they go to.
    pub(crate) fn selection_digest(
        &self,
        indices: Vec<usize>,
        device_type: &str,
    ) -> PyResult<String> {
        let entries = self.inner.entries();
        let mut hasher = tensorizer_core::hash::TensorHasher::new(b"", false, true);
        let file = (self.inner.source().len(), self.inner.tensor_size(), device_type);
        hasher.update(format!("{file:?}").as_bytes());
        for i in indices {
            let e = entries
                .get(i)
                .ok_or_else(|| PyIndexError::new_err(format!("no tensor number {i}")))?;
            let place = (i, e.header_offset, e.data_offset, e.data_length, &e.dtype, &e.shape);
            hasher.update(format!("{place:?}").as_bytes());
        }
        match hasher.finish().first() {
            Some(tensorizer_core::HashValue::Sha256(d)) => {
                Ok(tensorizer_core::fingerprint::to_hex(d))
            }
            _ => Err(pyo3::exceptions::PyRuntimeError::new_err("no SHA-256 computed")),
        }
    }

    /// Plans a cooperative load of tensors `indices` among `ranks` readers
    /// (`tensorizer_native::read::share`, spec §24): per rank, the stored
    /// tensors it reads, in file order; then the meta tensors every rank
    /// builds itself.
    fn plan_shares(
        &self,
        indices: Vec<usize>,
        ranks: usize,
    ) -> PyResult<(Vec<Vec<usize>>, Vec<usize>)> {
        if ranks == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "a load is shared among at least 1 rank",
            ));
        }
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.inner.entries().len()) {
            return Err(PyIndexError::new_err(format!("no tensor number {bad}")));
        }
        let plan = plan_shares(self.inner.entries(), &indices, ranks).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err("the tensors' total size overflows")
        })?;
        Ok((plan.shares, plan.local))
    }
}
