//! Host copies of one load: tensors loaded alone in memory of their own,
//! and arenas of small ones, laid out as the load plan says, allocated by
//! the allocator and filled natively (one call for each kind, the GIL
//! released).

use std::collections::HashMap;

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use tensorizer_native::read::plan::{HUGE_PAGE_MIN, LoadPlan};

use crate::buffers::Held;
use crate::entry::PyEntry;
use crate::errors::to_py;
use crate::host_memory::HostMemory;
use crate::reader::NativeReader;

/// One arena: its memory (a `HostMemory`), its members, their offsets.
pub(crate) type Arena = (Py<PyAny>, Vec<Py<PyEntry>>, Vec<usize>);

/// Host copies of the tensors of one load plan.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub(crate) struct Copies {
    /// Tensors loaded alone, with their entries.
    pub(crate) large: Vec<(Py<PyEntry>, Py<PyAny>)>,
    /// The arenas of the small ones.
    pub(crate) arenas: Vec<Arena>,
    /// Whether the memory is advised for transparent huge pages (the load
    /// plan's choice, spec §23.4).
    #[pyo3(get)]
    huge_pages: bool,
}

#[pymethods]
impl Copies {
    /// Every buffer of these copies, in the same order on every rank of a
    /// cooperative load (spec §24): the arenas (uint8 numpy arrays), then
    /// the tensors loaded alone.
    pub(crate) fn buffers(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        let arenas = self.arenas.iter().map(|a| a.0.clone_ref(py));
        arenas.chain(self.large.iter().map(|l| l.1.clone_ref(py))).collect()
    }
}

fn overflow() -> PyErr {
    PyValueError::new_err("the tensors' total size overflows")
}

/// An uninitialised tensor for entry `e`, loaded alone: on the CPU and
/// from `HUGE_PAGE_MIN` bytes, over host memory of its own that starts
/// `lead` bytes in (`LoadPlan::large_leads`), advised for huge pages when
/// `huge`; otherwise (pinned, small, or stored in fewer bytes than it
/// holds) as the allocator makes any tensor.
fn staging<'py>(
    alloc: &Bound<'py, PyAny>,
    e: &Bound<'py, PyEntry>,
    pin: bool,
    lead: u64,
    huge: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let entry = e.get();
    if pin || entry.data_length < HUGE_PAGE_MIN || entry.data_length != entry.nbytes {
        return alloc.call_method1("empty", (e, pin));
    }
    let size = usize::try_from(entry.data_length).map_err(|_| overflow())?;
    let lead = usize::try_from(lead).map_err(|_| overflow())?;
    let memory = Bound::new(e.py(), HostMemory::new(size, huge, lead)?)?;
    alloc.call_method1("over", (e, memory))
}

/// Allocates the copies of `plan` (over `by_index`'s entries) through
/// `alloc`; `pin`: page-locked, for a move to the device.
pub(crate) fn allocate(
    py: Python<'_>,
    alloc: &Bound<'_, PyAny>,
    by_index: &HashMap<usize, Bound<'_, PyEntry>>,
    plan: &LoadPlan,
    pin: bool,
) -> PyResult<Copies> {
    let entry = |i: &usize| {
        by_index.get(i).map(|e| e.clone().unbind()).ok_or_else(|| PyIndexError::new_err(*i))
    };
    let mut large = Vec::with_capacity(plan.large.len());
    for (i, lead) in plan.large.iter().zip(&plan.large_leads) {
        let e = entry(i)?;
        let t = staging(alloc, e.bind(py), pin, *lead, plan.huge_pages)?;
        large.push((e, t.unbind()));
    }
    let mut arenas = Vec::with_capacity(plan.arenas.len());
    for a in &plan.arenas {
        let members = plan.small.get(a.first..a.end).ok_or_else(overflow)?;
        let members = members.iter().map(entry).collect::<PyResult<Vec<_>>>()?;
        let offsets = a.offsets.iter().map(|&o| usize::try_from(o).map_err(|_| overflow()));
        let offsets = offsets.collect::<PyResult<Vec<_>>>()?;
        let size = usize::try_from(a.size).map_err(|_| overflow())?;
        let raw = alloc.call_method1("arena", (size, plan.huge_pages))?;
        arenas.push((raw.unbind(), members, offsets));
    }
    Ok(Copies { large, arenas, huge_pages: plan.huge_pages })
}

/// Fills `copies` from `reader`: the tensors loaded alone in one native
/// call, then every arena in one more (so the reader threads never wait
/// for each other between arenas).
pub(crate) fn fill(
    py: Python<'_>,
    reader: &NativeReader,
    alloc: &Bound<'_, PyAny>,
    copies: &Copies,
    verify: bool,
) -> PyResult<()> {
    if !copies.large.is_empty() {
        let indices: Vec<usize> = copies.large.iter().map(|(e, _)| e.get().index).collect();
        let buffers = copies.large.iter().map(|(_, t)| alloc.call_method1("byte_view", (t,)));
        let buffers = buffers.collect::<PyResult<Vec<_>>>()?;
        load_into(py, reader, &indices, &buffers, verify)?;
    }
    if copies.arenas.is_empty() {
        return Ok(());
    }
    let indices: Vec<Vec<usize>> =
        copies.arenas.iter().map(|a| a.1.iter().map(|e| e.get().index).collect()).collect();
    let buffers: Vec<Bound<'_, PyAny>> =
        copies.arenas.iter().map(|a| a.0.bind(py).clone()).collect();
    let offsets: Vec<Vec<usize>> = copies.arenas.iter().map(|a| a.2.clone()).collect();
    crate::arenas::fill_arenas(py, &reader.inner, &indices, &buffers, &offsets, verify)
}

/// Loads tensors `indices[k]` into `buffers[k]` (writable uint8 buffers of
/// exactly each tensor's size) in one native call.
pub(crate) fn load_into(
    py: Python<'_>,
    reader: &NativeReader,
    indices: &[usize],
    buffers: &[Bound<'_, PyAny>],
    verify: bool,
) -> PyResult<()> {
    let mut held = Held::acquire(buffers, true)?;
    let jobs: Vec<(usize, &mut [u8])> = indices.iter().copied().zip(held.slices_mut()).collect();
    py.detach(|| reader.inner.load_many_with(jobs, verify)).map_err(to_py)
}
