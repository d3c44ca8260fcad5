//! `Loader`: one open file's loads, carried out natively.
//!
//! `TensorDeserializer` (Python) chooses which entries a call wants and the
//! call's `verify_hash`; the loader owns everything a load changes (the
//! tensors loaded, those loaded unchecked, the meta-tensor budget, the
//! receipt's counts) and carries out host-native's load plan
//! (`read::plan`): meta tensors, views of a memory map, the CUDA staging
//! ring, large tensors loaded alone and arenas of small ones. It decides;
//! every torch call goes through one Python object, the allocator
//! (`_loader.TorchAllocator`), which only makes tensors.

mod arrays;
mod book;
mod copies;
mod meta;
mod receipt;
mod share;
mod target;

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyRuntimeError, PyUserWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString};
use tensorizer_native::RangeSource;
use tensorizer_native::read::plan::{Destination, LoadPlan};

use self::book::Book;
pub(crate) use self::copies::{Copies, load_into};
pub(crate) use self::receipt::LoadReceipt;
use self::target::Target;
use crate::entry::PyEntry;
use crate::errors::to_py;
use crate::file_source::FileSource;
use crate::host_memory::HostMemory;
use crate::load_options::Mmap;
use crate::names::Names;
use crate::options::DeserializerOptions;
use crate::reader::NativeReader;

pyo3::create_exception!(
    tensorizer_rs._native,
    MmapFallbackWarning,
    PyUserWarning,
    "`mmap=True` could not map some tensors and copied them instead (the message says how many \
     and why). Given once per deserializer; `mmap=\"auto\"` copies silently."
);

type Entries<'py> = Vec<Bound<'py, PyEntry>>;

/// A tensor's name and whether the module's tensor of that name matches.
type Checked = (Py<PyAny>, bool);

/// What `read_numpy_arrays` yields from: module indices, arrays, opaque
/// dtypes' torch names, and the refusal to raise after them.
type Arrays<'py> = (Vec<u16>, Vec<Bound<'py, PyAny>>, Vec<Option<String>>, Option<Py<PyAny>>);

/// What a load changes, behind one lock held only for bookkeeping (never
/// across a Python call or a read).
struct State {
    /// None once closed.
    reader: Option<Py<NativeReader>>,
    /// The private memory map `mmap=` hands out views of, or None.
    map: Option<Py<PyAny>>,
    /// Indices loaded without checking their hashes.
    unverified: HashSet<usize>,
    book: Book,
    /// Zero-filled meta bytes handed out so far.
    meta_claimed: u64,
    /// `MmapFallbackWarning` given (once per loader).
    mmap_warned: bool,
}

/// The device a load goes to: the `torch.device`, its kind, and whether
/// CUDA goes through the native staging ring.
struct Resolved {
    device: Py<PyAny>,
    target: Target,
    staging: bool,
}

/// One open file's loads (`_native.Loader`).
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub(crate) struct Loader {
    options: Py<DeserializerOptions>,
    alloc: Py<PyAny>,
    /// Loaded tensors by file index.
    cache: Py<PyDict>,
    device: PyOnceLock<Resolved>,
    state: Mutex<State>,
}

fn indices(entries: &[Bound<'_, PyEntry>]) -> Vec<usize> {
    entries.iter().map(|e| e.get().index).collect()
}

fn overflow() -> PyErr {
    PyValueError::new_err("the tensors' total size overflows")
}

/// The tensor of a module's `tensors` that entry `e` names (its path
/// joined with dots; a leading dot dropped when only that matches).
fn module_tensor<'py>(
    tensors: &Bound<'py, PyDict>,
    e: &PyEntry,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = tensors.py();
    let name = e.name.bind(py);
    let name: String = if name.is_instance_of::<PyString>() {
        name.extract()?
    } else {
        let parts: Vec<String> =
            name.try_iter()?.map(|p| p?.str().map(|s| s.to_string())).collect::<PyResult<_>>()?;
        parts.join(".")
    };
    match tensors.get_item(&name)? {
        Some(t) => Ok(Some(t)),
        None => tensors.get_item(name.trim_start_matches('.')),
    }
}

/// The private, copy-on-write memory map `mmap=` hands out views of, or
/// None: only of a local, unencrypted, non-empty file, and with `"auto"`
/// only of one that provably cannot change (spec §23.6), asked of the file
/// the reader opened, so that a path replaced since cannot mislead it.
fn private_map(py: Python<'_>, reader: &NativeReader, mmap: Mmap) -> PyResult<Option<Py<PyAny>>> {
    let Some(file) = reader.inner.source().local_file() else { return Ok(None) };
    let frozen = || tensorizer_native::source::frozen(file).is_some();
    if mmap == Mmap::Off || reader.inner.is_encrypted() || (mmap == Mmap::Auto && !frozen()) {
        return Ok(None);
    }
    let map = HostMemory::private_map(file)?;
    map.map(|m| Ok(Bound::new(py, m)?.into_any().unbind())).transpose()
}

impl Loader {
    /// Whether tensor `t` has `e`'s dtype and shape and bytes that match
    /// its stored hashes.
    fn matches(&self, reader: &NativeReader, e: &PyEntry, t: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = t.py();
        let alloc = self.alloc.bind(py);
        let (dtype, shape): (String, Bound<'_, PyAny>) =
            alloc.call_method1("describe", (t,))?.extract()?;
        if dtype != e.dtype.bind(py).to_str()? || !shape.eq(e.shape.bind(py))? {
            return Ok(false);
        }
        let data = if e.is_meta {
            pyo3::types::PyBytes::new(py, b"").into_any()
        } else {
            alloc.call_method1("host_bytes", (t,))?
        };
        match reader.verify_bytes(py, e.index, data) {
            Ok(()) => Ok(true),
            Err(err) if err.is_instance_of::<crate::errors::HashMismatchError>(py) => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open_reader(&self, py: Python<'_>) -> PyResult<Py<NativeReader>> {
        let state = self.state();
        let reader = state.reader.as_ref().map(|r| r.clone_ref(py));
        reader.ok_or_else(|| PyRuntimeError::new_err("the deserializer is closed"))
    }

    /// The device, resolved by the allocator on first use (a numpy-only
    /// load never imports torch), and its kind read once.
    fn resolved(&self, py: Python<'_>) -> PyResult<&Resolved> {
        self.device.get_or_try_init(py, || {
            let alloc = self.alloc.bind(py);
            let device = alloc.call_method1("device", (self.options.get().device(py),))?;
            let target: Target = device.extract()?;
            let staging =
                target == Target::Cuda && alloc.call_method0("native_cuda")?.is_truthy()?;
            Ok::<_, PyErr>(Resolved { device: device.unbind(), target, staging })
        })
    }

    /// The entries of `entries` not loaded yet.
    fn uncached<'py>(
        &self,
        py: Python<'py>,
        entries: &[Bound<'py, PyEntry>],
    ) -> PyResult<Entries<'py>> {
        let cache = self.cache.bind(py);
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            if !cache.contains(e.get().index)? {
                out.push(e.clone());
            }
        }
        Ok(out)
    }

    /// Checks the stored hashes of `entries` loaded earlier without
    /// checking, reading their bytes from the file again (one tensor at a
    /// time); raises `HashMismatchError` naming the first that fails.
    fn verify_loaded(&self, py: Python<'_>, entries: &[Bound<'_, PyEntry>]) -> PyResult<()> {
        let stale: Vec<&PyEntry> = {
            let state = self.state();
            entries
                .iter()
                .map(|e| e.get())
                .filter(|e| state.unverified.contains(&e.index))
                .collect()
        };
        if stale.is_empty() {
            return Ok(());
        }
        let reader = self.open_reader(py)?;
        let reader = reader.get();
        let metas: Vec<usize> = stale.iter().filter(|e| e.is_meta).map(|e| e.index).collect();
        meta::check_headers(py, reader, &metas, true)?;
        for e in stale.iter().filter(|e| !e.is_meta) {
            let len = usize::try_from(e.nbytes).map_err(|_| overflow())?;
            let mut scratch = vec![0u8; len];
            let jobs = vec![(e.index, scratch.as_mut_slice())];
            py.detach(|| reader.inner.load_many_with(jobs, true)).map_err(to_py)?;
            self.state().unverified.remove(&e.index);
        }
        let mut state = self.state();
        for &i in &metas {
            state.unverified.remove(&i);
        }
        let all: Vec<usize> = stale.iter().map(|e| e.index).collect();
        state.book.loaded(&all, true);
        Ok(())
    }

    /// Loads `entries` not cached yet, as the load plan says each goes (a
    /// share of a cooperative load; nothing is counted).
    fn load_now(&self, py: Python<'_>, entries: Entries<'_>, verify: bool) -> PyResult<()> {
        let todo = self.uncached(py, &entries)?;
        if todo.is_empty() { Ok(()) } else { self.load_plan(py, &todo, verify) }
    }

    /// Loads `todo` (none cached) as the native load plan says each goes.
    fn load_plan(&self, py: Python<'_>, todo: &[Bound<'_, PyEntry>], verify: bool) -> PyResult<()> {
        let reader_py = self.open_reader(py)?;
        let reader = reader_py.get();
        let resolved = self.resolved(py)?;
        let (mapped, warn) = {
            let state = self.state();
            let on = self.options.get().load.mmap == Mmap::On;
            (state.map.is_some() && !verify, on && !state.mmap_warned)
        };
        let destination = resolved.target.destination(resolved.staging);
        let plan = reader.inner.plan_load(&indices(todo), destination, mapped);
        let plan = plan.ok_or_else(overflow)?;
        if warn {
            self.warn_copied(py, reader, todo, &plan, resolved, verify)?;
        }
        let by_index: HashMap<usize, Bound<'_, PyEntry>> =
            todo.iter().map(|e| (e.get().index, e.clone())).collect();
        let pick =
            |list: &[usize]| list.iter().map(|i| by_index[i].clone()).collect::<Entries<'_>>();
        let metas = pick(&plan.meta);
        if !metas.is_empty() {
            self.claim_meta(py, &metas, true)?;
            meta::check_headers(py, reader, &plan.meta, verify)?;
        }
        if !plan.mapped.is_empty() {
            self.load_mapped(py, reader, &pick(&plan.mapped))?;
        }
        if !plan.staged.is_empty() {
            self.load_staged(py, &reader_py, &pick(&plan.staged), resolved, verify)?;
        }
        let alloc = self.alloc.bind(py);
        let pin = resolved.target.pinned();
        let copies = copies::allocate(py, alloc, &by_index, &plan, pin)?;
        copies::fill(py, reader, alloc, &copies, verify)?;
        self.adopt_copies(py, &copies, pin)?;
        let device = resolved.device.bind(py);
        let cache = self.cache.bind(py);
        for e in &metas {
            cache.set_item(e.get().index, self.meta_tensor(py, e.get())?)?;
        }
        if pin && !plan.large.is_empty() {
            alloc.call_method1("synchronize", (device,))?;
        }
        Ok(())
    }

    /// Native staging ring: pinned buffers, async copies into tensors the
    /// allocator made on the device, decrypted and verified on the way
    /// (spec §19).
    fn load_staged(
        &self,
        py: Python<'_>,
        reader: &Py<NativeReader>,
        staged: &[Bound<'_, PyEntry>],
        resolved: &Resolved,
        verify: bool,
    ) -> PyResult<()> {
        let alloc = self.alloc.bind(py);
        let args = (reader, PyList::new(py, staged)?, &resolved.device, verify);
        let made = alloc.call_method1("cuda", args)?;
        let cache = self.cache.bind(py);
        for (e, t) in staged.iter().zip(made.try_iter()?) {
            cache.set_item(e.get().index, alloc.call_method1("adopt", (t?, py.None(), false))?)?;
        }
        Ok(())
    }

    /// Caches `mapped` as zero-copy views of the private map (those the
    /// load plan found aligned to their element size).
    fn load_mapped(
        &self,
        py: Python<'_>,
        reader: &NativeReader,
        mapped: &[Bound<'_, PyEntry>],
    ) -> PyResult<()> {
        let map = self.state().map.as_ref().map(|m| m.clone_ref(py));
        let map = map.ok_or_else(|| PyRuntimeError::new_err("the deserializer is closed"))?;
        // Parse each header once: the index and the headers must agree.
        meta::check_headers(py, reader, &indices(mapped), false)?;
        let bytes = mapped.iter().map(|e| e.get().data_length).sum();
        self.state().book.mapped(bytes);
        // Read ahead now what the caller is about to touch: through faults
        // alone, a cold file comes in one read-ahead window at a time.
        if let Some(file) = reader.inner.source().local_file() {
            let spans: Vec<(u64, u64)> =
                mapped.iter().map(|e| (e.get().data_offset, e.get().data_length)).collect();
            py.detach(|| tensorizer_native::source::read_ahead(file, &spans));
        }
        let offsets: Vec<u64> = mapped.iter().map(|e| e.get().data_offset).collect();
        let alloc = self.alloc.bind(py);
        let made = alloc.call_method1("carve", (PyList::new(py, mapped)?, map, offsets))?;
        self.adopt_carved(py, mapped.iter().map(|e| e.get().index), &made)
    }

    /// Caches the tensors of `copies`: moved to the device and cast to
    /// `dtype=` as asked; `pin`: the copies are page-locked.
    fn adopt_copies(&self, py: Python<'_>, copies: &Copies, pin: bool) -> PyResult<()> {
        let alloc = self.alloc.bind(py);
        let resolved = self.resolved(py)?;
        let device =
            if resolved.target == Target::Cpu { py.None() } else { resolved.device.clone_ref(py) };
        let cache = self.cache.bind(py);
        for (e, t) in &copies.large {
            cache.set_item(e.get().index, alloc.call_method1("adopt", (t, &device, pin))?)?;
        }
        // Each packed tensor gets a storage of its own over its piece of
        // the arena, as if allocated alone; one native loop per arena makes
        // them (carve.rs), then any cast follows.
        for (raw, members, offsets) in &copies.arenas {
            let made = alloc.call_method1("carve", (PyList::new(py, members)?, raw, offsets))?;
            self.adopt_carved(py, members.iter().map(|e| e.get().index), &made)?;
        }
        Ok(())
    }

    /// Caches tensors carved on the CPU, cast as `dtype=` asks.
    fn adopt_carved(
        &self,
        py: Python<'_>,
        indices: impl Iterator<Item = usize>,
        made: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let cache = self.cache.bind(py);
        let cast = !self.options.get().dtype(py).is_none(py);
        let alloc = self.alloc.bind(py);
        for (i, t) in indices.zip(made.try_iter()?) {
            let t = t?;
            let t = if cast { alloc.call_method1("recast", (t,))? } else { t };
            cache.set_item(i, t)?;
        }
        Ok(())
    }

    /// Warns (once per loader) that `mmap=True` copied tensors the load
    /// `plan` could not map, and why.
    fn warn_copied(
        &self,
        py: Python<'_>,
        reader: &NativeReader,
        todo: &[Bound<'_, PyEntry>],
        plan: &LoadPlan,
        resolved: &Resolved,
        verify: bool,
    ) -> PyResult<()> {
        let skipped: HashSet<usize> = plan.mapped.iter().chain(&plan.meta).copied().collect();
        let copied: Vec<&PyEntry> = todo
            .iter()
            .map(|e| e.get())
            .filter(|e| !skipped.contains(&e.index) && e.data_length > 0)
            .collect();
        if copied.is_empty() {
            return Ok(());
        }
        let no_map = self.state().map.is_none();
        self.state().mmap_warned = true;
        let why = if reader.inner.is_encrypted() {
            "the file is encrypted (decrypted data cannot be a view of the file)".to_string()
        } else if no_map {
            "the file is not a local, non-empty file that can be memory-mapped".to_string()
        } else if verify {
            "verify_hash=True reads every byte from the file to check it".to_string()
        } else if resolved.target != Target::Cpu {
            let device = resolved.device.bind(py).str()?;
            format!("the tensors go to {device}, and only CPU tensors can be views of the map")
        } else {
            "their data is not aligned to their element size in the file (files written with \
             layout=\"tensorizer\" can have such offsets; the default layout aligns them)"
                .to_string()
        };
        let nbytes: u64 = copied.iter().map(|e| e.data_length).sum();
        let message = format!(
            "mmap=True: {} of {} tensors ({nbytes} bytes) were copied, not mapped: {why}",
            copied.len(),
            todo.len()
        );
        let message =
            std::ffi::CString::new(message).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let category = py.get_type::<MmapFallbackWarning>();
        PyErr::warn(py, &category, &message, 2)
    }
}

#[pymethods]
impl Loader {
    /// The loads of `file_obj` (what `TensorDeserializer` reads), opened
    /// with `options`, through `alloc` (the allocator); an encrypted file
    /// needs `encryption=`. `partial`: only
    /// part of a URI's object will be read (a cooperative load's share, a
    /// sharded load's shards), so it is opened without asking for all of
    /// it.
    #[new]
    #[pyo3(signature = (file_obj, options, alloc, partial=false))]
    fn new(
        py: Python<'_>,
        file_obj: FileSource,
        options: Py<DeserializerOptions>,
        alloc: Py<PyAny>,
        partial: bool,
    ) -> PyResult<Self> {
        let reader = NativeReader::open(py, file_obj, Some(options.get()), partial)?;
        if reader.inner.is_encrypted() && !options.get().decrypts {
            return Err(crate::errors::CryptographyError::new_err(
                "Tensor is encrypted, but decryption was not requested",
            ));
        }
        let map = private_map(py, &reader, options.get().load.mmap)?;
        let book = Book::new(reader.origin);
        let state = State {
            reader: Some(Py::new(py, reader)?),
            map,
            unverified: HashSet::new(),
            book,
            meta_claimed: 0,
            mmap_warned: false,
        };
        Ok(Self {
            options,
            alloc,
            cache: PyDict::new(py).unbind(),
            device: PyOnceLock::new(),
            state: Mutex::new(state),
        })
    }

    /// The native reader (None once closed).
    #[getter]
    fn reader(&self, py: Python<'_>) -> Option<Py<NativeReader>> {
        self.state().reader.as_ref().map(|r| r.clone_ref(py))
    }

    /// Loaded tensors by file index.
    #[getter]
    fn cache(&self, py: Python<'_>) -> Py<PyDict> {
        self.cache.clone_ref(py)
    }

    /// The private memory map `mmap=` hands out views of, or None.
    #[getter]
    fn map(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.state().map.as_ref().map(|m| m.clone_ref(py))
    }

    /// The `torch.device` tensors go to.
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.resolved(py)?.device.clone_ref(py))
    }

    /// The open reader; `RuntimeError` once closed.
    fn check_open(&self, py: Python<'_>) -> PyResult<Py<NativeReader>> {
        self.open_reader(py)
    }

    /// Drops the reader and the map. Tensors already handed out keep the
    /// mapping alive through their buffer references.
    fn close(&self) {
        let mut state = self.state();
        if let Some(reader) = state.reader.take() {
            state.book.closing(reader.get());
        }
        state.map = None;
    }

    /// Loads every entry of `entries` not yet cached, in one parallel
    /// native call; with a process `group`, cooperatively with its other
    /// ranks (a collective call: `share.rs`). With
    /// `verify`, entries loaded earlier without it are checked too
    /// (tensorizer checks nothing for tensors it already holds).
    #[pyo3(signature = (entries, verify, group=None))]
    fn load(
        slf: &Bound<'_, Self>,
        entries: Entries<'_>,
        verify: bool,
        group: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let _paused = crate::gc_pause::GcPause::new(py)?;
        if verify {
            this.verify_loaded(py, &entries)?;
        }
        let todo = this.uncached(py, &entries)?;
        let done = indices(&todo);
        let outcome = match group {
            // Collective: every rank takes part, even one with nothing new.
            Some(group) => this.load_shared(py, &todo, verify, &group),
            None if todo.is_empty() => Ok(()),
            None => this.load_plan(py, &todo, verify),
        };
        let mut state = this.state();
        if let Err(e) = outcome {
            state.book.failed(&done);
            return Err(e);
        }
        state.book.loaded(&done, verify);
        if !verify {
            state.unverified.extend(done);
        }
        Ok(())
    }

    /// The tensor of entry `e`, loaded first when it is not yet: for a lazy
    /// deserializer with the window its `names` choose (`Names.read_ahead`,
    /// at most `max_bytes`). A window that fails is forgotten and `e` loaded
    /// alone: a bad tensor further on fails only when it is itself asked
    /// for.
    fn read<'py>(
        slf: &Bound<'py, Self>,
        e: Bound<'py, PyEntry>,
        names: &Bound<'py, Names>,
        max_bytes: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        let cache = this.cache.bind(slf.py());
        let index = e.get().index;
        if let Some(t) = cache.get_item(index)? {
            return Ok(t);
        }
        let load = &this.options.get().load;
        let batch = match load.lazy_load {
            true => names.get().read_ahead(e.clone(), cache, max_bytes)?,
            false => vec![e.clone()],
        };
        let alone = batch.len() == 1;
        match Self::load(slf, batch.clone(), load.verify(None), None) {
            Err(err) if alone => return Err(err),
            Err(_) => {
                this.forget_failed(batch);
                Self::load(slf, vec![e], load.verify(None), None)?;
            }
            Ok(()) => {}
        }
        cache.as_any().get_item(index)
    }

    /// Host copies of `entries` laid out as a CPU load plans them (the same
    /// on every rank), read from the file when `fill`.
    fn copies(
        &self,
        py: Python<'_>,
        entries: Entries<'_>,
        fill: bool,
        verify: bool,
    ) -> PyResult<Copies> {
        let reader = self.open_reader(py)?;
        let reader = reader.get();
        let plan = reader.inner.plan_load(&indices(&entries), Destination::Cpu, false);
        let plan = plan.ok_or_else(overflow)?;
        let by_index = entries.iter().map(|e| (e.get().index, e.clone())).collect();
        let alloc = self.alloc.bind(py);
        let copies = copies::allocate(py, alloc, &by_index, &plan, false)?;
        if fill {
            copies::fill(py, reader, alloc, &copies, verify)?;
        }
        Ok(copies)
    }

    /// The dtype a tensor stored as `stored` becomes under `dtype=`, or
    /// None to keep it.
    fn cast_to<'py>(
        &self,
        py: Python<'py>,
        stored: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.alloc.bind(py).call_method1("cast_target", (stored,))
    }

    /// `entries` as new numpy arrays (no torch; `read_numpy_arrays`, which
    /// needs `device` None or the CPU), with their module indices: meta ones
    /// as `meta_tensors` asks, the rest read in one native call, not cached.
    /// As tensorizer, unless `allow_raw`, only those before the first opaque
    /// dtype load, and the `ValueError` refusing it comes back to be raised
    /// after them. Also each array's torch dtype name when its dtype is
    /// opaque (viewed as a same-sized int).
    fn load_arrays<'py>(
        &self,
        py: Python<'py>,
        entries: Entries<'py>,
        allow_raw: &Bound<'py, PyAny>,
        verify: bool,
    ) -> PyResult<Arrays<'py>> {
        let device = self.options.get().device(py).into_bound(py);
        if !device.is_none() && device.str()?.to_str()? != "cpu" {
            return Err(PyRuntimeError::new_err("read_numpy_arrays requires device='cpu'"));
        }
        if entries.is_empty() {
            return Ok(Default::default());
        }
        let reader = self.open_reader(py)?;
        let (dtypes, opaque, refusal) = self.array_kinds(py, &entries, allow_raw)?;
        let entries = entries.get(..dtypes.len()).unwrap_or_default();
        if let (true, Some(refusal)) = (entries.is_empty(), &refusal) {
            return Err(PyErr::from_value(refusal.bind(py).clone()));
        }
        let all = indices(entries);
        let outcome = self.read_arrays(py, reader.get(), entries, &dtypes, verify);
        match &outcome {
            Ok(_) => self.state().book.loaded(&all, verify),
            Err(_) => self.state().book.failed(&all),
        }
        let arrays = outcome?;
        Ok((reader.get().module_indices(py, all)?, arrays, opaque, refusal))
    }

    /// A slice of meta entry `e` (`get_slice`), of `shape`, in the form
    /// `meta_tensors` names, counted against `max_meta_bytes`.
    fn meta_slice<'py>(
        &self,
        py: Python<'py>,
        e: Bound<'py, PyEntry>,
        shape: Vec<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reader = self.open_reader(py)?;
        let verify = self.options.get().load.verify(None);
        let (kind, size) = self.meta_kind(py, e.get(), &shape)?;
        let what = format!("a slice {} of ", PyList::new(py, &shape)?.str()?);
        self.claim(py, &[(e.clone(), size)], &what)?;
        meta::check_headers(py, reader.get(), &[e.get().index], verify)?;
        self.zeros(py, kind, shape, size, None)
    }

    /// The receipt of the loads so far: `all` every entry of the file,
    /// `selected` those the filter kept.
    fn receipt(
        &self,
        py: Python<'_>,
        all: Entries<'_>,
        selected: Entries<'_>,
    ) -> PyResult<LoadReceipt> {
        let reader = self.reader(py);
        let reader = reader.as_ref().map(|r| r.get());
        let counts = self.state().book.counts(reader).map_err(to_py)?;
        LoadReceipt::new(py, counts, &all, &selected)
    }

    /// `verify_module`'s verdict: whether all match, and `(name, ok)` for
    /// each of `selected`: whether `tensors` (by dotted name) holds a tensor
    /// of its dtype and shape whose bytes match the stored hashes (nothing
    /// is read from the file).
    fn verify_module(
        &self,
        py: Python<'_>,
        selected: Entries<'_>,
        tensors: &Bound<'_, PyDict>,
    ) -> PyResult<(bool, Vec<Checked>)> {
        let reader = self.open_reader(py)?;
        let mut out = Vec::with_capacity(selected.len());
        for e in &selected {
            let ok = match module_tensor(tensors, e.get())? {
                Some(t) => self.matches(reader.get(), e.get(), &t)?,
                None => false,
            };
            out.push((e.get().name.clone_ref(py), ok));
        }
        Ok((out.iter().all(|(_, ok)| *ok), out))
    }

    /// A failed batch is retried one tensor at a time: only those that fail
    /// on their own stay failed.
    fn forget_failed(&self, entries: Entries<'_>) {
        self.state().book.forget_failed(&indices(&entries));
    }
}
