//! `HostMemory`: CPU memory for loaded tensors, made natively and lent to
//! torch and numpy through the buffer protocol (`torch.frombuffer`,
//! `numpy.frombuffer`, `memoryview`), which keep it alive as long as any
//! tensor or array over it does.
//!
//! Large tensors and arenas of `HUGE_PAGE_MIN` bytes and more get a
//! [`HugeRegion`] of their own (huge pages when the load plan says so,
//! spec §23.4); smaller arenas come from the allocator (small loads must
//! not cost a mapping each: the kernel caps their number). Every piece
//! starts `ALLOCATION_ALIGN`-aligned, plus the caller's `lead` (the file
//! phase a cold load reads at, `LoadPlan::large_leads`). The private,
//! copy-on-write map of a file that `mmap=` hands out views of is lent
//! the same way ([`HostMemory::private_map`]).

use std::ffi::{c_int, c_void};

use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use tensorizer_native::memory::{HugeRegion, PrivateMap};
use tensorizer_native::read::plan::{ALLOCATION_ALIGN, HUGE_PAGE_MIN};

/// The first byte lent out.
struct Start(*mut u8);

// SAFETY: `Start` points into the memory of the same `HostMemory`, which
// owns it and outlives every use; the bytes are only reached through the
// buffer protocol, whose users (torch, numpy, our own fills with the
// buffers held) order their own accesses, as for any writable buffer.
#[allow(unsafe_code)]
unsafe impl Send for Start {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for Start {}

/// What owns the bytes of a [`HostMemory`] (held only to free them with it).
#[allow(dead_code)] // never read: dropping it frees the bytes
enum Owner {
    /// A region of their own.
    Region(HugeRegion),
    /// Zeroed allocator memory with room to align the start.
    Heap(Vec<u8>),
    /// A private map of a file.
    File(PrivateMap),
}

/// Writable CPU memory for one load's tensors (`_native.HostMemory`).
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub(crate) struct HostMemory {
    _owner: Owner,
    start: Start,
    len: usize,
}

impl HostMemory {
    /// A private, copy-on-write map of all of `file`, or `None` when it is
    /// empty.
    pub(crate) fn private_map(file: &std::fs::File) -> PyResult<Option<Self>> {
        let Some(map) = PrivateMap::new(file)? else { return Ok(None) };
        let (start, len) = (Start(map.as_ptr()), map.len());
        Ok(Some(Self { _owner: Owner::File(map), start, len }))
    }
}

#[pymethods]
impl HostMemory {
    /// `size` writable zeroed bytes starting `lead` bytes after an
    /// `ALLOCATION_ALIGN` boundary (a huge-page one from `HUGE_PAGE_MIN`
    /// bytes up, advised for huge pages when `huge`).
    #[new]
    #[pyo3(signature = (size, huge=true, lead=0))]
    pub(crate) fn new(size: usize, huge: bool, lead: usize) -> PyResult<Self> {
        let too_large = || PyValueError::new_err(format!("{size} bytes after {lead} do not fit"));
        let total = lead.checked_add(size).ok_or_else(too_large)?;
        let align = usize::try_from(ALLOCATION_ALIGN).map_err(|_| too_large())?;
        if size as u64 >= HUGE_PAGE_MIN {
            let mut region = HugeRegion::new(total, huge)
                .ok_or_else(|| PyMemoryError::new_err(format!("cannot map {total} bytes")))?;
            let base = region.as_mut_slice().as_mut_ptr();
            // `lead <= total`: the start lies inside the region.
            let start = Start(base.wrapping_add(lead));
            return Ok(Self { _owner: Owner::Region(region), start, len: size });
        }
        let mut heap = vec![0u8; total.checked_add(align).ok_or_else(too_large)?];
        let skip = heap.as_ptr().align_offset(align);
        let start = Start(heap.as_mut_ptr().wrapping_add(skip + lead));
        Ok(Self { _owner: Owner::Heap(heap), start, len: size })
    }

    /// The address of the first byte.
    #[getter]
    fn address(&self) -> usize {
        self.start.0 as usize
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// Lends the bytes as a writable, one-dimensional buffer of unsigned
    /// bytes.
    #[allow(unsafe_code)]
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let len = isize::try_from(this.len)?;
        // SAFETY: `view` is the buffer the interpreter asked us to fill;
        // `start..start + len` is memory `slf` owns, readable and writable,
        // and FillInfo takes a reference to `slf`, which keeps it alive
        // until the buffer is released.
        let filled = unsafe {
            pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                this.start.0.cast::<c_void>(),
                len,
                0,
                flags,
            )
        };
        if filled == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// Nothing to undo: the view holds a reference, no allocation.
    #[allow(unsafe_code)]
    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}
}
