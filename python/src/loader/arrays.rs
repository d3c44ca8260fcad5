//! `read_numpy_arrays`' loads: new numpy arrays, no torch, nothing cached.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::{Loader, copies, indices};
use crate::entry::PyEntry;
use crate::load_options::MetaMode;
use crate::reader::NativeReader;

/// Numpy dtypes of the entries that load, their opaque dtypes' torch
/// names, and the refusal of the first opaque one when raw data is not
/// allowed.
type Kinds<'py> = (Vec<Bound<'py, PyAny>>, Vec<Option<String>>, Option<Py<PyAny>>);

impl Loader {
    /// The numpy dtype of each of `entries` (the allocator's `numpy_kind`)
    /// up to the first opaque one unless `allow_raw` is true.
    pub(super) fn array_kinds<'py>(
        &self,
        py: Python<'py>,
        entries: &[Bound<'py, PyEntry>],
        allow_raw: &Bound<'py, PyAny>,
    ) -> PyResult<Kinds<'py>> {
        let alloc = self.alloc.bind(py);
        let (mut dtypes, mut opaque) = (Vec::new(), Vec::new());
        for e in entries {
            let kind = alloc.call_method1("numpy_kind", (e.get().dtype.bind(py),))?;
            let (np_dtype, torch_name): (Bound<'py, PyAny>, Option<String>) = kind.extract()?;
            // As tensorizer: `allow_raw` taken for its truth, at an opaque dtype.
            if let Some(torch) = &torch_name
                && !allow_raw.is_truthy()?
            {
                let np = np_dtype.getattr("str")?;
                let message = format!(
                    "{} has an opaque datatype: (Torch: {torch}, Numpy: {np}). Set \
                     `allow_raw_data=True` to return as a numpy array with a datatype of {np}",
                    e.get().name.bind(py).str()?
                );
                let refusal = PyValueError::new_err(message).into_value(py).into_any();
                return Ok((dtypes, opaque, Some(refusal)));
            }
            dtypes.push(np_dtype);
            opaque.push(torch_name);
        }
        Ok((dtypes, opaque, None))
    }

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
        // numpy has no meta device: "meta" is a read-only broadcast zero too.
        let expand = self.options.get().load.meta != MetaMode::Zeros;
        for (e, dtype) in entries.iter().zip(dtypes) {
            let array = if e.get().is_meta {
                alloc.call_method1("array_zeros", (dtype, e.get().shape.bind(py), expand))?
            } else {
                alloc.call_method1("array", (e, dtype))?
            };
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
