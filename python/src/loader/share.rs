//! Cooperative loads (spec §24): each rank of a process group reads its
//! share of the tensors, the ranks agree (`_distributed.agree`), then they
//! exchange the tensors with the group's broadcasts. The share plan and the
//! exchange's order are decided here, the same on every rank; the
//! allocator only names the ranks and makes each broadcast.

use std::collections::HashMap;

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use tensorizer_native::read::share::plan_shares;

use super::target::Target;
use super::{Copies, Entries, Loader, indices, overflow};
use crate::entry::PyEntry;

impl Loader {
    /// Loads `todo` (none cached) into the cache cooperatively with the
    /// other ranks of `group`: reads this rank's share, agrees, then
    /// exchanges (on the CPU: one broadcast per arena of small tensors and
    /// per large tensor, laid out alike on every rank by the load plan; on
    /// a device: one broadcast per tensor, straight into its destination).
    pub(super) fn load_shared(
        &self,
        py: Python<'_>,
        todo: &[Bound<'_, PyEntry>],
        verify: bool,
        group: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let alloc = self.alloc.bind(py);
        let (rank, sources): (usize, Vec<i64>) =
            alloc.call_method1("ranks", (group,))?.extract()?;
        let reader = self.open_reader(py)?;
        let all = indices(todo);
        let plan = plan_shares(reader.get().inner.entries(), &all, sources.len().max(1));
        let plan = plan.ok_or_else(overflow)?;
        let by_index: HashMap<usize, &Bound<'_, PyEntry>> =
            todo.iter().map(|e| (e.get().index, e)).collect();
        let pick = |list: &[usize]| {
            let found = list.iter().map(|i| by_index.get(i).map(|e| (*e).clone()));
            found.collect::<Option<Entries<'_>>>().ok_or_else(|| PyIndexError::new_err("share"))
        };
        let shares = plan.shares.iter().map(|s| pick(s)).collect::<PyResult<Vec<_>>>()?;
        let target = self.resolved(py)?.target;
        let on_cpu = target == Target::Cpu;
        let mut mine = None;
        let read = (|| {
            let own = shares.get(rank).ok_or_else(|| PyIndexError::new_err(rank))?;
            if on_cpu {
                mine = Some(self.copies(py, own.clone(), true, verify)?);
            } else {
                self.load_now(py, own.clone(), verify)?;
            }
            self.load_now(py, pick(&plan.local)?, verify)
        })();
        let digest = reader.get().selection_digest(all, target.name())?;
        let failure = read.err();
        let distributed = py.import(pyo3::intern!(py, "tensorizer_rs._distributed"))?;
        let failed = failure.as_ref().map(|e| e.clone_ref(py).into_value(py));
        distributed.call_method1("agree", (group, digest, failed))?;
        if let Some(failure) = failure {
            return Err(failure);
        }
        for (r, share) in shares.iter().enumerate() {
            let src = (sources.len() > 1).then(|| (sources[r], group));
            if on_cpu {
                let copies = match mine.take() {
                    Some(own) if r == rank => own,
                    other => {
                        mine = other;
                        self.copies(py, share.clone(), false, verify)?
                    }
                };
                self.exchange_copies(py, &copies, src)?;
            } else if let Some(src) = src {
                self.exchange_tensors(py, share, r == rank, src)?;
            }
        }
        Ok(())
    }

    /// Broadcasts every non-empty buffer of `copies` from `src` (global
    /// rank and group; None in a group of one), then caches their tensors.
    fn exchange_copies(
        &self,
        py: Python<'_>,
        copies: &Copies,
        src: Option<(i64, &Bound<'_, PyAny>)>,
    ) -> PyResult<()> {
        if let Some((src, group)) = src {
            let alloc = self.alloc.bind(py);
            for raw in copies.buffers(py) {
                if raw.bind(py).len()? > 0 {
                    alloc.call_method1("broadcast", (raw, src, group))?;
                }
            }
        }
        self.adopt_copies(py, copies, false)
    }

    /// Broadcasts the device tensors of `share` from `src` (global rank and
    /// group): sent from the cache when `own`, else received into new
    /// tensors of the dtype `dtype=` gives them, then cached.
    fn exchange_tensors(
        &self,
        py: Python<'_>,
        share: &[Bound<'_, PyEntry>],
        own: bool,
        (src, group): (i64, &Bound<'_, PyAny>),
    ) -> PyResult<()> {
        let alloc = self.alloc.bind(py);
        let cache = self.cache.bind(py);
        let device = self.resolved(py)?.device.bind(py);
        for e in share {
            let e = e.get();
            let t = if own {
                cache.as_any().get_item(e.index)?
            } else {
                let shape: Vec<u64> = e.shape.bind(py).extract()?;
                let ((dtype, _, grad), size) = self.meta_kind(py, e, &shape)?;
                alloc.call_method1("zeros", ("zeros", dtype, shape, device, size, Some(grad)))?
            };
            if e.nbytes > 0 {
                alloc.call_method1("broadcast", (&t, src, group))?;
            }
            cache.set_item(e.index, t)?;
        }
        Ok(())
    }
}
