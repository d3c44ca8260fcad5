//! `Names`: the entries a deserializer selected, the tree of their names,
//! and where its readers are in file order.
//!
//! `TensorDeserializer` resolves keys and prefixes through it, folds its
//! subtrees into the mappings it returns, and asks it which entries a call
//! wants (a lazy read's window, the tensors `read_tensors` has not handed
//! out yet). Python builds no index of its own.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyNotImplementedError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::dict::BoundDictIterator;
use pyo3::types::{PyDict, PyInt, PyList, PyMappingProxy, PyString, PyTuple};

use crate::entry::PyEntry;
use crate::gc_pause::GcPause;

/// A lazy deserializer read in file order loads ahead in windows of at
/// most this many bytes (one native call each, not one per tensor).
pub(crate) const READ_AHEAD_BYTES: u64 = 16 << 20;
/// ... and at most this many tensors.
pub(crate) const READ_AHEAD_TENSORS: usize = 4096;

type Entries<'py> = Vec<Bound<'py, PyEntry>>;

/// Where reads in file order stand.
struct Cursor {
    /// Position (among the selected entries) after the last one handed out.
    next: usize,
    /// File index → position, built on first use (eager loads of plain
    /// names never need it).
    positions: Option<HashMap<usize, usize>>,
}

/// The selected entries of one deserializer and their name tree
/// (`_native.Names`).
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub(crate) struct Names {
    entries: Vec<Py<PyEntry>>,
    selected: Py<PyList>,
    structure: Py<PyDict>,
    plain: bool,
    cursor: Mutex<Cursor>,
}

/// How a subtree is folded into Python objects.
enum Form<'a, 'py> {
    /// Read-only mappings of loaded tensors (`d[key]`).
    View,
    /// Dicts, lists for int-keyed layers, leaving out what `filter` refuses
    /// and layers left empty by it (`tree()`).
    Tree(Option<&'a Bound<'py, PyAny>>),
}

fn keeps(filter: Option<&Bound<'_, PyAny>>, e: &Bound<'_, PyEntry>) -> PyResult<bool> {
    match filter {
        None => Ok(true),
        Some(f) => f.call1((e.get().name.bind(e.py()),))?.is_truthy(),
    }
}

/// The nested dicts of `selected`'s paths; plain (one-level, str) names
/// map straight to their entries.
fn build_tree<'py>(
    py: Python<'py>,
    selected: &[Bound<'py, PyEntry>],
) -> PyResult<(Bound<'py, PyDict>, bool)> {
    let tree = PyDict::new(py);
    let plain = selected.iter().all(|e| e.get().name.bind(py).is_exact_instance_of::<PyString>());
    if plain {
        // The core's path registry has already refused duplicates.
        for e in selected {
            tree.set_item(e.get().name.bind(py), e)?;
        }
        return Ok((tree, true));
    }
    for e in selected {
        let conflict = || -> PyResult<PyErr> {
            let name = e.get().name.bind(py).repr()?;
            Ok(PyValueError::new_err(format!("Conflicting tensor paths at {name}")))
        };
        let path = e.get().path.bind(py);
        let Some(last) = path.len().checked_sub(1) else {
            return Err(conflict()?);
        };
        let mut layer = tree.clone();
        for part in path.iter().take(last) {
            let child = match layer.get_item(&part)? {
                Some(child) => child,
                None => {
                    let fresh = PyDict::new(py);
                    layer.set_item(&part, &fresh)?;
                    fresh.into_any()
                }
            };
            layer = match child.cast_into::<PyDict>() {
                Ok(d) => d,
                Err(_) => return Err(conflict()?),
            };
        }
        layer.set_item(path.get_item(last)?, e)?;
    }
    Ok((tree, false))
}

/// The entries under `node` (an entry or a layer) in insertion order that
/// `filter` keeps; an explicit stack, as paths may be 1024 components deep.
fn leaves<'py>(
    node: &Bound<'py, PyAny>,
    filter: Option<&Bound<'py, PyAny>>,
) -> PyResult<Entries<'py>> {
    let mut out = Vec::new();
    if let Ok(e) = node.cast::<PyEntry>() {
        out.push(e.clone());
        return Ok(out);
    }
    let mut stack = vec![node.cast::<PyDict>()?.values().into_iter()];
    while let Some(top) = stack.last_mut() {
        let Some(child) = top.next() else {
            stack.pop();
            continue;
        };
        match child.cast_into::<PyEntry>() {
            Ok(e) if keeps(filter, &e)? => out.push(e),
            Ok(_) => {}
            Err(layer) => {
                stack.push(layer.into_inner().cast_into::<PyDict>()?.values().into_iter())
            }
        }
    }
    Ok(out)
}

/// A folded layer as `form` wants it; None: left out.
fn branch<'py>(
    out: Bound<'py, PyDict>,
    form: &Form<'_, 'py>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = out.py();
    let filter = match form {
        Form::View => return Ok(Some(PyMappingProxy::new(py, out.as_mapping()).into_any())),
        Form::Tree(filter) => filter,
    };
    if out.is_empty() {
        return Ok(if filter.is_some() { None } else { Some(out.into_any()) });
    }
    if !out.keys().iter().all(|k| k.is_instance_of::<PyInt>()) {
        return Ok(Some(out.into_any()));
    }
    let mut items: Vec<(i128, Bound<'py, PyAny>)> = Vec::with_capacity(out.len());
    for (k, v) in out.iter() {
        items.push((k.extract()?, v));
    }
    items.sort_by_key(|(k, _)| *k);
    Ok(Some(PyList::new(py, items.into_iter().map(|(_, v)| v))?.into_any()))
}

/// A folded entry: its loaded tensor, or None when `form` leaves it out.
fn leaf<'py>(
    e: &Bound<'py, PyEntry>,
    cache: &Bound<'py, PyDict>,
    form: &Form<'_, 'py>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Form::Tree(filter) = form
        && !keeps(*filter, e)?
    {
        return Ok(None);
    }
    Ok(Some(cache.as_any().get_item(e.get().index)?))
}

/// Rebuilds layer `root` bottom-up without recursion: each entry becomes
/// its loaded tensor, each layer what `branch` makes of it.
fn fold<'py>(
    root: &Bound<'py, PyDict>,
    cache: &Bound<'py, PyDict>,
    form: &Form<'_, 'py>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = root.py();
    // Per open layer: its key in the parent, its items, results so far.
    let mut stack: Vec<(Option<Bound<'py, PyAny>>, BoundDictIterator<'py>, Bound<'py, PyDict>)> =
        vec![(None, root.iter(), PyDict::new(py))];
    loop {
        let Some((_, items, out)) = stack.last_mut() else {
            return Ok(None);
        };
        if let Some((key, child)) = items.next() {
            match child.cast_into::<PyEntry>() {
                Ok(e) => {
                    if let Some(value) = leaf(&e, cache, form)? {
                        out.set_item(key, value)?;
                    }
                }
                Err(layer) => {
                    let layer = layer.into_inner().cast_into::<PyDict>()?;
                    stack.push((Some(key), layer.iter(), PyDict::new(py)));
                }
            }
            continue;
        }
        let Some((key, _, out)) = stack.pop() else { return Ok(None) };
        let value = branch(out, form)?;
        let (Some(parent), Some(key)) = (stack.last(), key) else { return Ok(value) };
        if let Some(value) = value {
            parent.2.set_item(key, value)?;
        }
    }
}

impl Names {
    fn cursor(&self) -> MutexGuard<'_, Cursor> {
        self.cursor.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the entry at file index `index` is among the selected ones.
    fn position(&self, index: usize) -> PyResult<usize> {
        let mut cursor = self.cursor();
        let positions = cursor.positions.get_or_insert_with(|| {
            self.entries.iter().enumerate().map(|(k, e)| (e.get().index, k)).collect()
        });
        let found = positions.get(&index).copied();
        found.ok_or_else(|| PyValueError::new_err(format!("tensor {index} is not selected")))
    }
}

/// `num_tensors` as tensorizer's `itertools.islice` takes it: -1 (all) or
/// a non-negative int; None: nothing wanted.
fn tensor_limit(num_tensors: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    if num_tensors.lt(-1)? {
        return Err(PyValueError::new_err("num_tensors must be -1 (all) or non-negative"));
    }
    if num_tensors.eq(0)? {
        return Ok(None);
    }
    if num_tensors.eq(-1)? {
        return Ok(Some(usize::MAX));
    }
    match num_tensors.extract::<usize>() {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.is_instance_of::<PyOverflowError>(num_tensors.py()) => Ok(Some(usize::MAX)),
        Err(_) => Err(PyValueError::new_err("num_tensors must be -1 (all) or a non-negative int")),
    }
}

#[pymethods]
impl Names {
    /// The entries of `entries` (file order) that `filter_func` keeps
    /// (None: all), and the tree of their names; `ValueError` when one
    /// path runs through another's tensor.
    #[new]
    #[pyo3(signature = (entries, filter_func=None))]
    fn new(
        py: Python<'_>,
        entries: Entries<'_>,
        filter_func: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let _paused = GcPause::new(py)?;
        let mut selected = Vec::with_capacity(entries.len());
        for e in entries {
            if keeps(filter_func.as_ref(), &e)? {
                selected.push(e);
            }
        }
        let (structure, plain) = build_tree(py, &selected)?;
        Ok(Self {
            selected: PyList::new(py, &selected)?.unbind(),
            entries: selected.into_iter().map(Bound::unbind).collect(),
            structure: structure.unbind(),
            plain,
            cursor: Mutex::new(Cursor { next: 0, positions: None }),
        })
    }

    /// The selected entries, in file order.
    #[getter]
    fn selected(&self, py: Python<'_>) -> Py<PyList> {
        self.selected.clone_ref(py)
    }

    /// Top-level keys to entries (plain names) or nested dicts of them.
    #[getter]
    fn structure(&self, py: Python<'_>) -> Py<PyDict> {
        self.structure.clone_ref(py)
    }

    /// Every tensor by name, from `cache` (by file index), when every name
    /// is plain; else None.
    fn flat<'py>(&self, cache: &Bound<'py, PyDict>) -> PyResult<Option<Bound<'py, PyDict>>> {
        if !self.plain {
            return Ok(None);
        }
        let py = cache.py();
        let out = PyDict::new(py);
        for e in &self.entries {
            let e = e.get();
            out.set_item(e.name.bind(py), cache.as_any().get_item(e.index)?)?;
        }
        Ok(Some(out))
    }

    /// The entry or layer at `path` (a sequence of keys; None: the root), or
    /// None. A single key is refused (`tree()`'s prefix is a path).
    #[pyo3(signature = (path=None))]
    fn node<'py>(
        &self,
        py: Python<'py>,
        path: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut node = self.structure.bind(py).clone().into_any();
        let Some(path) = path else { return Ok(Some(node)) };
        if path.is_instance_of::<PyString>() || path.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err("prefix must be a sequence of keys, e.g. ('model',)"));
        }
        for part in path.try_iter()? {
            let Ok(layer) = node.cast::<PyDict>() else { return Ok(None) };
            let Some(child) = layer.get_item(part?)? else { return Ok(None) };
            node = child;
        }
        Ok(Some(node))
    }

    /// The entries under `node` that `filter_func` keeps, in file order.
    #[pyo3(signature = (node, filter_func=None))]
    fn leaves<'py>(
        &self,
        node: &Bound<'py, PyAny>,
        filter_func: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Entries<'py>> {
        leaves(node, filter_func.as_ref())
    }

    /// Layer `node` with its tensors from `cache`, every layer a read-only
    /// mapping.
    fn view<'py>(
        &self,
        node: &Bound<'py, PyDict>,
        cache: &Bound<'py, PyDict>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        fold(node, cache, &Form::View)
    }

    /// Layer `node` as real dicts and lists (int-keyed layers become
    /// lists) of the tensors in `cache` that `filter_func` keeps; layers it
    /// leaves empty are left out (`{}` when nothing is left).
    #[pyo3(signature = (node, cache, filter_func=None))]
    fn tree<'py>(
        &self,
        node: &Bound<'py, PyDict>,
        cache: &Bound<'py, PyDict>,
        filter_func: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let folded = fold(node, cache, &Form::Tree(filter_func.as_ref()))?;
        Ok(folded.unwrap_or_else(|| PyDict::new(node.py()).into_any()))
    }

    /// What to load for a lazy read of `e`: `e` alone, or, when reads go
    /// in file order (`e` follows the last entry handed out), `e` and the
    /// next ones not in `cache`, up to `max_bytes` and
    /// `LAZY_READ_AHEAD_TENSORS` in all.
    pub(crate) fn read_ahead<'py>(
        &self,
        e: Bound<'py, PyEntry>,
        cache: &Bound<'py, PyDict>,
        max_bytes: u64,
    ) -> PyResult<Entries<'py>> {
        let py = e.py();
        let pos = self.position(e.get().index)?;
        if pos != self.cursor().next {
            return Ok(vec![e]);
        }
        let mut size = e.get().nbytes;
        let end = pos.saturating_add(READ_AHEAD_TENSORS).min(self.entries.len());
        let mut out = vec![e];
        for next in self.entries.get(pos + 1..end).unwrap_or_default() {
            size = size.saturating_add(next.get().nbytes);
            if size > max_bytes {
                break;
            }
            if !cache.contains(next.get().index)? {
                out.push(next.bind(py).clone());
            }
        }
        Ok(out)
    }

    /// `e` was handed out: reads in file order continue after it.
    fn handed_out(&self, e: &Bound<'_, PyEntry>) -> PyResult<()> {
        let pos = self.position(e.get().index)?;
        let mut cursor = self.cursor();
        cursor.next = cursor.next.max(pos + 1);
        Ok(())
    }

    /// The entry at `position` was handed out last (None: every one was).
    #[pyo3(signature = (position=None))]
    fn yielded(&self, position: Option<usize>) {
        self.cursor().next = position.map_or(self.entries.len(), |p| p.saturating_add(1));
    }

    /// The entries not handed out yet that `filter_func` keeps, at most
    /// `num_tensors` of them (-1: all), with their positions.
    #[pyo3(signature = (filter_func, num_tensors))]
    fn pending<'py>(
        &self,
        py: Python<'py>,
        filter_func: Option<Bound<'py, PyAny>>,
        num_tensors: &Bound<'py, PyAny>,
    ) -> PyResult<(Vec<usize>, Entries<'py>)> {
        let Some(limit) = tensor_limit(num_tensors)? else {
            return Ok((Vec::new(), Vec::new()));
        };
        let start = self.cursor().next;
        let (mut positions, mut out) = (Vec::new(), Vec::new());
        for (k, e) in self.entries.iter().enumerate().skip(start) {
            if out.len() >= limit {
                break;
            }
            let e = e.bind(py);
            if keeps(filter_func.as_ref(), e)? {
                positions.push(k);
                out.push(e.clone());
            }
        }
        Ok((positions, out))
    }

    /// The selected entries `filter_func` keeps, to load into a module:
    /// `NotImplementedError` for a state-dict entry or a structured name.
    #[pyo3(signature = (filter_func=None))]
    fn module_entries<'py>(
        &self,
        py: Python<'py>,
        filter_func: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Entries<'py>> {
        let types = py.import(pyo3::intern!(py, "tensorizer_rs._types"))?;
        let state_dict = types.getattr("TensorType")?.getattr("STATE_DICT")?;
        let mut out = Vec::new();
        for e in &self.entries {
            let e = e.bind(py);
            if !keeps(filter_func.as_ref(), e)? {
                continue;
            }
            if e.get().tensor_type.bind(py).eq(&state_dict)? {
                return Err(PyNotImplementedError::new_err(
                    "This was serialized with write_state_dict(); use the TensorDeserializer \
                     directly as a state_dict mapping instead.",
                ));
            }
            if !e.get().name.bind(py).is_instance_of::<PyString>() {
                return Err(PyNotImplementedError::new_err(
                    "Cannot load structured tensor paths into a module",
                ));
            }
            out.push(e.clone());
        }
        Ok(out)
    }

    /// What keeps `entries` (plain names) from setting exactly a module's
    /// state, as `load_state_dict(strict=True)` sees it: the `required`
    /// names (its state-dict keys) no entry sets, the entries naming none
    /// of the `known` tensors (every parameter and buffer, by name), and
    /// `(name, stored shape, module shape)` where shapes differ.
    #[staticmethod]
    #[allow(clippy::type_complexity)] // the three lists StrictLoadError takes
    fn strict_mismatches<'py>(
        entries: Entries<'py>,
        known: &Bound<'py, PyDict>,
        required: Vec<String>,
    ) -> PyResult<(Vec<String>, Vec<String>, Vec<(String, Bound<'py, PyTuple>, Bound<'py, PyTuple>)>)>
    {
        let py = known.py();
        let mut stored = Vec::with_capacity(entries.len());
        for e in &entries {
            stored.push((e.get().name.bind(py).str()?.to_string(), e.get().shape.bind(py)));
        }
        let names: HashSet<&str> = stored.iter().map(|(n, _)| n.as_str()).collect();
        let missing = required.into_iter().filter(|k| !names.contains(k.as_str())).collect();
        let (mut unexpected, mut mismatched) = (Vec::new(), Vec::new());
        for (name, shape) in stored {
            let Some(t) = known.get_item(&name)? else {
                unexpected.push(name);
                continue;
            };
            let expected =
                PyTuple::new(py, t.getattr("shape")?.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
            if !shape.eq(&expected)? {
                mismatched.push((name, shape.clone(), expected));
            }
        }
        Ok((missing, unexpected, mismatched))
    }

    /// `StrictLoadError`'s message, formatted as
    /// `torch.nn.Module.load_state_dict`'s: the `missing` and `unexpected`
    /// keys, then each `(name, stored shape, module shape)` that differs.
    #[staticmethod]
    fn strict_message(
        module_name: &str,
        missing: Vec<String>,
        unexpected: Vec<String>,
        sizes: Vec<(String, Bound<'_, PyAny>, Bound<'_, PyAny>)>,
    ) -> PyResult<String> {
        let quoted = |keys: &[String]| {
            keys.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(", ")
        };
        let mut errors = Vec::new();
        if !missing.is_empty() {
            errors.push(format!("Missing key(s) in state_dict: {}. ", quoted(&missing)));
        }
        if !unexpected.is_empty() {
            errors.push(format!("Unexpected key(s) in state_dict: {}. ", quoted(&unexpected)));
        }
        for (name, stored, expected) in sizes {
            let list = |shape: &Bound<'_, PyAny>| -> PyResult<String> {
                Ok(PyList::new(shape.py(), shape.try_iter()?.collect::<PyResult<Vec<_>>>()?)?
                    .str()?
                    .to_string())
            };
            errors.push(format!(
                "size mismatch for {name}: copying a param with shape {} from checkpoint, the \
                 shape in current model is {}.",
                list(&stored)?,
                list(&expected)?
            ));
        }
        Ok(format!("Error(s) in loading state_dict for {module_name}:\n\t{}", errors.join("\n\t")))
    }

    /// Bytes stored of the selected entries, of those in `cache` only when
    /// given.
    #[pyo3(signature = (cache=None))]
    fn data_bytes(&self, cache: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
        let mut total = 0u64;
        for e in &self.entries {
            let e = e.get();
            if cache.map_or(Ok(true), |c| c.contains(e.index))? {
                total = total.saturating_add(e.data_length);
            }
        }
        Ok(total)
    }
}
