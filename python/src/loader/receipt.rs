//! `LoadReceipt`: what a deserializer has loaded, checked and read, taken
//! when `TensorDeserializer.receipt` is read (spec §18.7), from the
//! loader's book (`book.rs`). Immutable; tensorizer has no such record.

use std::collections::HashSet;

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyMappingProxy, PyString, PyTuple};

use super::book::Counts;
use crate::entry::PyEntry;

/// What a deserializer has done so far, taken when asked for.
///
/// Every name appears in ``expected``; each is in exactly one of
/// ``loaded``, ``skipped_by_filter``, ``failed`` and ``pending``, and each
/// loaded one in exactly one of ``verified`` and ``unverified``. Names keep
/// file order.
#[pyclass(module = "tensorizer_rs", name = "LoadReceipt", frozen)]
pub(crate) struct LoadReceipt {
    /// Every tensor the file holds, in file order.
    #[pyo3(get)]
    expected: Py<PyTuple>,
    /// Tensors loaded (handed out, or held to hand out) so far.
    #[pyo3(get)]
    loaded: Py<PyTuple>,
    /// Tensors the constructor's ``filter_func`` left out.
    #[pyo3(get)]
    skipped_by_filter: Py<PyTuple>,
    /// Loaded tensors checked against their stored hashes (or, encrypted,
    /// their MACs). A receipt taken after ``close()`` counts every tensor
    /// loaded with verification here unless an earlier receipt found its
    /// header stores no hashes (spec §18.7).
    #[pyo3(get)]
    verified: Py<PyTuple>,
    /// Loaded tensors nothing checked: verification was off, or the file
    /// stores no hash for them.
    #[pyo3(get)]
    unverified: Py<PyTuple>,
    /// Tensors a load attempted that raised and are still not loaded (a
    /// failing batch lists all its tensors; a lazy read retries its own
    /// tensor alone, so there the name is exact).
    #[pyo3(get)]
    failed: Py<PyTuple>,
    /// Tensors selected but not loaded yet (a lazy deserializer's unread
    /// ones).
    #[pyo3(get)]
    pending: Py<PyTuple>,
    /// Bytes read by source (see ``bytes_by_source``).
    sources: Vec<(&'static str, u64)>,
}

/// The six name lists of a receipt, in field order, and the pending ones.
fn sort_names<'py>(
    counts: &Counts,
    all: &[Bound<'py, PyEntry>],
    selected: &[Bound<'py, PyEntry>],
) -> [Vec<Bound<'py, PyAny>>; 7] {
    let set = |v: &[usize]| v.iter().copied().collect::<HashSet<usize>>();
    let (loaded, verified, failed) = (set(&counts.0), set(&counts.1), set(&counts.2));
    let chosen: HashSet<usize> = selected.iter().map(|e| e.get().index).collect();
    let mut lists: [Vec<Bound<'py, PyAny>>; 7] = Default::default();
    for e in all {
        let (i, name) = (e.get().index, e.get().name.bind(e.py()));
        let skipped = !chosen.contains(&i);
        let flags = [
            true,
            loaded.contains(&i),
            skipped,
            verified.contains(&i),
            loaded.contains(&i) && !verified.contains(&i),
            failed.contains(&i),
            !loaded.contains(&i) && !skipped && !failed.contains(&i),
        ];
        for (list, _) in lists.iter_mut().zip(flags).filter(|(_, keep)| *keep) {
            list.push(name.clone());
        }
    }
    lists
}

impl LoadReceipt {
    /// The receipt of a loader's `counts`: `all` every tensor of the file,
    /// `selected` those the filter kept.
    pub(crate) fn new(
        py: Python<'_>,
        counts: Counts,
        all: &[Bound<'_, PyEntry>],
        selected: &[Bound<'_, PyEntry>],
    ) -> PyResult<Self> {
        let mut tuples = Vec::with_capacity(7);
        for list in sort_names(&counts, all, selected) {
            tuples.push(PyTuple::new(py, list)?.unbind());
        }
        let [expected, loaded, skipped_by_filter, verified, unverified, failed, pending]: [_; 7] =
            tuples.try_into().map_err(|_| super::overflow())?;
        Ok(Self {
            expected,
            loaded,
            skipped_by_filter,
            verified,
            unverified,
            failed,
            pending,
            sources: counts.3,
        })
    }

    /// The name fields in field order, with their names.
    fn named(&self) -> [(&'static str, &Py<PyTuple>); 6] {
        [
            ("expected", &self.expected),
            ("loaded", &self.loaded),
            ("skipped_by_filter", &self.skipped_by_filter),
            ("verified", &self.verified),
            ("unverified", &self.unverified),
            ("failed", &self.failed),
        ]
    }

    fn sources_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (source, bytes) in &self.sources {
            out.set_item(source, bytes)?;
        }
        Ok(out)
    }
}

#[pymethods]
impl LoadReceipt {
    /// Bytes read, by where they came from: ``"file"``, a URI scheme
    /// (``"http"``, ``"https"``, ``"s3"``, ``"redis"``...), ``"stream"`` (a
    /// Python file object) -- everything the native reader read: index,
    /// headers, data and re-reads for verification -- and ``"mmap"``, the
    /// data of tensors handed out as views of a memory map.
    #[getter]
    fn bytes_by_source<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyMappingProxy>> {
        Ok(PyMappingProxy::new(py, self.sources_dict(py)?.as_mapping()))
    }

    /// Whether every selected tensor is loaded.
    #[getter]
    fn complete(&self, py: Python<'_>) -> bool {
        self.loaded.bind(py).len() + self.skipped_by_filter.bind(py).len()
            == self.expected.bind(py).len()
    }

    /// Bytes read from every source together.
    #[getter]
    fn total_bytes(&self) -> u64 {
        self.sources.iter().fold(0u64, |sum, (_, n)| sum.saturating_add(*n))
    }

    /// The receipt as plain JSON types: names as strings or lists of keys,
    /// counts as ints.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (field, names) in self.named() {
            let list = PyList::empty(py);
            for n in names.bind(py) {
                let n = if n.is_instance_of::<PyString>() {
                    n
                } else {
                    n.cast::<PyTuple>()?.to_list().into_any()
                };
                list.append(n)?;
            }
            out.set_item(field, list)?;
        }
        out.set_item("bytes_by_source", self.sources_dict(py)?)?;
        Ok(out)
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let Ok(other) = other.cast::<Self>() else {
            return Ok(py.NotImplemented());
        };
        let other = other.get();
        let mut same = self.sources == other.sources;
        for ((_, a), (_, b)) in self.named().into_iter().zip(other.named()) {
            same = same && a.bind(py).eq(b.bind(py))?;
        }
        match op {
            CompareOp::Eq => Ok(same.into_pyobject(py)?.to_owned().into_any().unbind()),
            CompareOp::Ne => Ok((!same).into_pyobject(py)?.to_owned().into_any().unbind()),
            _ => Ok(py.NotImplemented()),
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        let mut sources = self.sources.clone();
        sources.sort_unstable();
        let mut parts: Vec<Bound<'_, PyAny>> =
            self.named().iter().map(|(_, t)| t.bind(py).clone().into_any()).collect();
        parts.push(PyTuple::new(py, sources)?.into_any());
        PyTuple::new(py, parts)?.hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let counts: Vec<String> =
            self.named().iter().map(|(f, t)| format!("{f}={}", t.bind(py).len())).collect();
        let sources = self.sources_dict(py)?.repr()?;
        Ok(format!("LoadReceipt({}, bytes_by_source={sources})", counts.join(", ")))
    }
}
