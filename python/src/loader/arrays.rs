//! `read_numpy_arrays`' loads: new numpy arrays, no torch, nothing cached.

use pyo3::prelude::*;

use super::{Loader, copies, indices};
use crate::entry::PyEntry;
use crate::reader::NativeReader;

impl Loader {
    /// `entries` as new arrays of `dtypes`: meta ones as `meta_tensors`
    /// asks (counted against `max_meta_bytes`), the rest read in one call.
    pub(super) fn read_arrays<'py>(
        &self,
        py: Python<'py>,
        reader: &NativeReader,
        entries: &[Bound<'py, PyEntry>],
        dtypes: &[Bound<'py, PyAny>],
        verify: bool,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let metas: Vec<Bound<'py, PyEntry>> =
            entries.iter().filter(|e| e.get().is_meta).cloned().collect();
        if !metas.is_empty() {
            self.claim_meta(py, &metas, false)?;
            super::meta::check_headers(py, reader, &indices(&metas), verify)?;
        }
        let alloc = self.alloc.bind(py);
        let mut arrays = Vec::with_capacity(entries.len());
        let (mut stored, mut buffers) = (Vec::new(), Vec::new());
        for (e, dtype) in entries.iter().zip(dtypes) {
            let made = if e.get().is_meta { "meta_array" } else { "array" };
            let array = alloc.call_method1(made, (e, dtype))?;
            if !e.get().is_meta {
                stored.push(e.get().index);
                buffers.push(alloc.call_method1("byte_view", (&array,))?);
            }
            arrays.push(array);
        }
        if !stored.is_empty() {
            copies::load_into(py, reader, &stored, &buffers, verify)?;
        }
        Ok(arrays)
    }
}
