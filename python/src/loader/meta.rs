//! Meta tensors (data version 4): entries with a shape but no stored
//! bytes. The loader counts the zero-filled bytes they become against
//! `max_meta_bytes` before anything is allocated (the size is whatever the
//! file claims) and checks their headers; the allocator makes them in the
//! form `meta_tensors` names.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::Loader;
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

impl Loader {
    /// Counts the zero-filled bytes `metas` will take (`torch`: in the dtype
    /// they are handed out as, after `dtype=`; else as stored).
    pub(super) fn claim_meta(
        &self,
        py: Python<'_>,
        metas: &[Bound<'_, PyEntry>],
        torch: bool,
    ) -> PyResult<()> {
        let alloc = self.alloc.bind(py);
        let mut sized = Vec::with_capacity(metas.len());
        for e in metas {
            let size = if torch {
                alloc.call_method1("meta_nbytes", (e, py.None()))?.extract()?
            } else {
                e.get().nbytes
            };
            sized.push((e.clone(), size));
        }
        self.claim(py, &sized, "")
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
