//! Borrowing Python buffers (numpy arrays, bytes, memoryviews) as Rust byte
//! slices for the duration of one call with the GIL released.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;

/// Buffers held for one call. Holding the `PyBuffer`s keeps every exporter
/// from freeing or moving its memory until they are dropped (with the GIL).
pub(crate) struct Held {
    views: Vec<PyBuffer<u8>>,
}

impl Held {
    /// Acquires C-contiguous byte buffers; `writable` also demands that
    /// none is read-only and that no two overlap.
    pub(crate) fn acquire(objects: &[Bound<'_, PyAny>], writable: bool) -> PyResult<Self> {
        let mut views = Vec::with_capacity(objects.len());
        for (i, obj) in objects.iter().enumerate() {
            let view = PyBuffer::<u8>::get(obj).map_err(|e| {
                PyBufferError::new_err(format!("buffer {i} is not a contiguous uint8 buffer: {e}"))
            })?;
            if !view.is_c_contiguous() {
                return Err(PyBufferError::new_err(format!("buffer {i} is not C-contiguous")));
            }
            if writable && view.readonly() {
                return Err(PyBufferError::new_err(format!("buffer {i} is read-only")));
            }
            views.push(view);
        }
        if writable {
            let mut spans: Vec<(usize, usize)> = views
                .iter()
                .map(|v| (v.buf_ptr() as usize, v.len_bytes()))
                .filter(|s| s.1 > 0)
                .collect();
            spans.sort_unstable();
            if spans.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
                return Err(PyValueError::new_err("destination buffers overlap"));
            }
        }
        Ok(Self { views })
    }

    /// Mutable slices, one per buffer, in order.
    pub(crate) fn slices_mut(&mut self) -> Vec<&mut [u8]> {
        self.views
            .iter()
            .map(|v| {
                // SAFETY: `acquire(.., writable = true)` checked that each
                // buffer is writable, C-contiguous and disjoint from the
                // others, and `self` holds the views (so the memory stays
                // valid and pinned) for as long as the returned borrows of
                // `self` live. Python code racing on the same memory from
                // another thread sees torn values, never unsafety in Rust.
                #[allow(unsafe_code)]
                unsafe {
                    std::slice::from_raw_parts_mut(v.buf_ptr().cast::<u8>(), v.len_bytes())
                }
            })
            .collect()
    }

    /// Shared slices, one per buffer, in order.
    pub(crate) fn slices(&self) -> Vec<&[u8]> {
        self.views
            .iter()
            .map(|v| {
                // SAFETY: the views are C-contiguous and held by `self` for
                // the lifetime of the returned borrows.
                #[allow(unsafe_code)]
                unsafe {
                    std::slice::from_raw_parts(v.buf_ptr().cast::<u8>().cast_const(), v.len_bytes())
                }
            })
            .collect()
    }
}

/// Lends the one writable buffer `buffer` to `fill` with the GIL released:
/// what every "read into this array" method does.
pub(crate) fn fill_with(
    py: Python<'_>,
    buffer: Bound<'_, PyAny>,
    fill: impl FnOnce(&mut [u8]) -> tensorizer_native::Result<()> + Send,
) -> PyResult<()> {
    let mut held = Held::acquire(&[buffer], true)?;
    let mut slices = held.slices_mut();
    let out = slices.pop().ok_or_else(|| PyValueError::new_err("no buffer"))?;
    py.detach(|| fill(out)).map_err(crate::errors::to_py)
}
