//! Meta tensors (data version 4): entries with a shape but no stored
//! bytes. The loader counts the zero-filled bytes they become against
//! `max_meta_bytes` before anything is allocated (the size is whatever the
//! file claims), checks their headers, and decides each one's dtype (after
//! `dtype=`), size and form; the allocator only makes the zeros.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::Loader;
use super::target::Target;
use crate::entry::PyEntry;
use crate::errors::to_py;
use crate::load_options::MetaMode;
use crate::reader::NativeReader;

/// What the native load does for a meta tensor: parse its header (checked
/// against the index) and, with `verify`, check its hashes, which cover the
/// header alone. Also parses the headers of mapped tensors (not verified).
pub(super) fn check_headers(
    py: Python<'_>,
    reader: &NativeReader,
    indices: &[usize],
    verify: bool,
) -> PyResult<()> {
    if indices.is_empty() {
        return Ok(());
    }
    let inner = &reader.inner;
    if verify {
        py.detach(|| indices.iter().try_for_each(|&i| inner.verify_bytes(i, &[])))
    } else {
        py.detach(|| inner.records(indices).map(drop))
    }
    .map_err(to_py)
}

/// `n` with thousands separators, as Python's `{n:,}` writes it.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A meta tensor's torch dtype as handed out (after `dtype=`), its item
/// size, and whether it requires grad (as its stored dtype does).
pub(super) type MetaKind<'py> = (Bound<'py, PyAny>, u64, bool);

/// How the allocator makes zeros: the form `meta_tensors` names, with
/// `"zeros"` on the CPU as lazily zeroed pages (`"calloc"`: untouched
/// anonymous pages, committed only when written).
fn form(meta: MetaMode, target: Target) -> &'static str {
    match meta {
        MetaMode::Meta => "meta",
        MetaMode::Expand => "expand",
        MetaMode::Zeros if target == Target::Cpu => "calloc",
        MetaMode::Zeros => "zeros",
    }
}

impl Loader {
    /// The kind of meta entry `e` and the bytes its zeros take at `shape`
    /// (saturating: a claim that large is refused).
    pub(super) fn meta_kind<'py>(
        &self,
        py: Python<'py>,
        e: &PyEntry,
        shape: &[u64],
    ) -> PyResult<(MetaKind<'py>, u64)> {
        let kind = self.alloc.bind(py).call_method1("meta_kind", (e.dtype.bind(py),))?;
        let kind: MetaKind<'py> = kind.extract()?;
        let size = shape.iter().fold(kind.1, |n, &d| n.saturating_mul(d));
        Ok((kind, size))
    }

    /// Zeros of `kind` at `shape` (`size` bytes) on the load's device, in
    /// the form `meta_tensors` names; a `Parameter` unless `grad` is None.
    pub(super) fn zeros<'py>(
        &self,
        py: Python<'py>,
        kind: MetaKind<'py>,
        shape: Vec<u64>,
        size: u64,
        grad: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let resolved = self.resolved(py)?;
        let form = form(self.options.get().load.meta, resolved.target);
        let args = (form, kind.0, shape, resolved.device.bind(py), size, grad);
        self.alloc.bind(py).call_method1("zeros", args)
    }

    /// Counts the zero-filled bytes `metas` will take (`torch`: in the dtype
    /// they are handed out as, after `dtype=`; else as stored).
    pub(super) fn claim_meta(
        &self,
        py: Python<'_>,
        metas: &[Bound<'_, PyEntry>],
        torch: bool,
    ) -> PyResult<()> {
        let mut sized = Vec::with_capacity(metas.len());
        for e in metas {
            let size = if torch {
                self.meta_kind(py, e.get(), &e.get().shape.bind(py).extract::<Vec<u64>>()?)?.1
            } else {
                e.get().nbytes
            };
            sized.push((e.clone(), size));
        }
        self.claim(py, &sized, "")
    }

    /// Meta entry `e` as a tensor of its shape, in the form `meta_tensors`
    /// names (already claimed).
    pub(super) fn meta_tensor<'py>(
        &self,
        py: Python<'py>,
        e: &PyEntry,
    ) -> PyResult<Bound<'py, PyAny>> {
        let shape: Vec<u64> = e.shape.bind(py).extract()?;
        let (kind, size) = self.meta_kind(py, e, &shape)?;
        let grad = kind.2;
        self.zeros(py, kind, shape, size, Some(grad))
    }

    /// Counts `sized` (entry, bytes) against `max_meta_bytes`; raises,
    /// before anything is allocated, when the file's claims go past it.
    /// `what` names a part (a slice).
    pub(super) fn claim(
        &self,
        py: Python<'_>,
        sized: &[(Bound<'_, PyEntry>, u64)],
        what: &str,
    ) -> PyResult<()> {
        let options = &self.options.get().load;
        if options.meta != MetaMode::Zeros {
            return Ok(());
        }
        let mut state = self.state();
        let mut total = state.meta_claimed;
        for (e, size) in sized {
            total = total.saturating_add(*size);
            match options.max_meta_bytes {
                Some(limit) if total > limit => {
                    let e = e.get();
                    return Err(PyValueError::new_err(format!(
                        "{what}meta tensor {} (dtype {}, shape {}) would be materialized as {} zero \
                         bytes, {} bytes of meta tensors in all, more than max_meta_bytes={}. The \
                         file stores no data for it; pass meta_tensors='expand' (a read-only zero \
                         expanded to the shape, no memory), meta_tensors='meta' (a tensor on the \
                         meta device), or a larger max_meta_bytes (None for no bound)",
                        e.name.bind(py).repr()?,
                        e.dtype.bind(py).repr()?,
                        e.shape.bind(py).str()?,
                        grouped(*size),
                        grouped(total),
                        grouped(limit),
                    )));
                }
                _ => {}
            }
        }
        state.meta_claimed = total;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn grouped_writes_thousands_as_python_does() {
        assert_eq!(super::grouped(0), "0");
        assert_eq!(super::grouped(999), "999");
        assert_eq!(super::grouped(1000), "1,000");
        assert_eq!(super::grouped(4 << 30), "4,294,967,296");
    }
}
