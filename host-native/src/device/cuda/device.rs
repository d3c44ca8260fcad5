//! The only module with `unsafe` code for CUDA: finding the driver,
//! page-locked staging buffers, borrowed streams, device ranges and the
//! raw asynchronous copies. Everything it exports is safe to call; each
//! `unsafe` block states why it is sound.
//!
//! cudarc panics (rather than returning an error) when `libcuda` cannot be
//! loaded or a symbol is missing, so the driver is looked for first and
//! every driver call runs under [`guard`], which turns a panic into
//! [`Error::Cuda`]: no panic reaches a caller (or Python).
#![allow(unsafe_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUdeviceptr, CUevent_flags, CUstream};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DriverError, PinnedHostSlice, result,
};

use crate::error::{Error, Result};
use crate::memory::HugeRegion;

/// Runs a driver call, mapping its error and any panic to [`Error::Cuda`].
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::Cuda(format!("{what}: {e}"))),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("the CUDA driver library panicked");
            Err(Error::Cuda(format!("{what}: {msg}")))
        }
    }
}

/// Whether the CUDA driver library (`libcuda.so`) can be loaded.
pub fn driver_present() -> bool {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by
    // its usual names and drops the handle; loading libcuda runs no
    // initialisation that could break this process's invariants. A panic
    // inside it is caught.
    catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false)
}

const NO_DRIVER: &str = "no CUDA driver: libcuda.so could not be loaded (install the NVIDIA driver, \
                         or set LD_LIBRARY_PATH to its directory, or load to the CPU)";

/// A CUDA device, through its primary context (the one PyTorch uses, so
/// pointers from torch are valid in it).
#[derive(Debug, Clone)]
pub struct Device {
    ctx: Arc<CudaContext>,
}

impl Device {
    /// Opens device `ordinal`; an error (never a panic) when there is no
    /// driver or no such device.
    pub fn open(ordinal: usize) -> Result<Self> {
        if !driver_present() {
            return Err(Error::Cuda(NO_DRIVER.into()));
        }
        let count = Self::count()?;
        if ordinal >= count {
            return Err(Error::Cuda(format!("no CUDA device {ordinal}: {count} present")));
        }
        let ctx = guard("opening the CUDA device", || CudaContext::new(ordinal))?;
        Ok(Self { ctx })
    }

    /// Number of CUDA devices (0 without a driver).
    pub fn count() -> Result<usize> {
        if !driver_present() {
            return Ok(0);
        }
        let n = guard("counting CUDA devices", || {
            result::init()?;
            CudaContext::device_count()
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    pub(crate) fn bind(&self) -> Result<()> {
        guard("binding the CUDA context", || self.ctx.bind_to_thread())
    }

    /// The context's default stream.
    pub(crate) fn default_stream(&self) -> Arc<CudaStream> {
        self.ctx.default_stream()
    }

    /// A new non-blocking stream.
    pub(crate) fn new_stream(&self) -> Result<Arc<CudaStream>> {
        guard("creating a CUDA stream", || self.ctx.new_stream())
    }

    /// An event recorded on `stream` now, that a host thread waits for
    /// without spinning.
    pub(crate) fn record(&self, stream: &CudaStream) -> Result<CudaEvent> {
        let flags = CUevent_flags::CU_EVENT_BLOCKING_SYNC;
        guard("recording a CUDA event", || stream.record_event(Some(flags)))
    }

    /// `len` bytes of page-locked host memory, zeroed, in huge pages where
    /// the caller asks for them ([`crate::memory::staging_huge_pages`]).
    ///
    /// Fresh anonymous memory registered with `cuMemHostRegister` rather
    /// than `cuMemHostAlloc`: on an H200 host, 288 MiB took 250 ms from
    /// `cuMemHostAlloc` and 53 ms mapped in huge pages, faulted in and
    /// registered (99 ms in 4 KiB pages). Where registering fails, the
    /// driver's allocation.
    pub(crate) fn alloc_pinned(&self, len: usize, huge: bool) -> Result<PinnedBuffer> {
        let registered = if REGISTER_REFUSED.load(Ordering::Relaxed) {
            None
        } else {
            Registered::new(&self.ctx, len, huge)
        };
        let memory = match registered {
            Some(r) => HostMemory::Registered(r),
            None => HostMemory::Driver(self.alloc_driver_pinned(len)?),
        };
        Ok(PinnedBuffer { memory, pending: Mutex::new(None) })
    }

    fn alloc_driver_pinned(&self, len: usize) -> Result<PinnedHostSlice<u8>> {
        // Flags 0: page-locked but not write-combined, so the CPU can read
        // it quickly for hashing and decryption.
        // SAFETY: the memory is uninitialised after this call, and is
        // zeroed below before any slice of it is formed.
        let mut slice = guard("allocating pinned host memory", || unsafe {
            self.ctx.alloc_pinned_with_flags::<u8>(len, 0)
        })?;
        let ptr = guard("allocating pinned host memory", || slice.as_mut_ptr())?;
        // SAFETY: `ptr` points to `len` writable bytes owned by `slice`,
        // and no copy from them is in flight yet.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(slice)
    }

    /// Allocates `len` zeroed bytes of device memory on `stream`.
    pub(crate) fn alloc_zeros(
        &self,
        stream: &Arc<CudaStream>,
        len: usize,
    ) -> Result<CudaSlice<u8>> {
        guard("allocating device memory", || stream.alloc_zeros::<u8>(len.max(1)))
    }
}

/// Set once the driver refused to register memory: later buffers of the
/// process go straight to `cuMemHostAlloc` instead of mapping and faulting
/// in memory only to have it refused again.
static REGISTER_REFUSED: AtomicBool = AtomicBool::new(false);

/// Anonymous memory of our own mapping, page-locked with
/// `cuMemHostRegister`; unregistered and unmapped when dropped.
struct Registered {
    ctx: Arc<CudaContext>,
    /// Whether the driver registered the range (and must unregister it
    /// before the mapping may go).
    registered: bool,
    /// Dropped (unmapped) by `drop` unless the driver may still hold it.
    region: std::mem::ManuallyDrop<HugeRegion>,
}

impl Registered {
    /// `len` fresh zeroed bytes, registered with the driver; `None` when
    /// mapping or registering fails (the caller then asks the driver).
    fn new(ctx: &Arc<CudaContext>, len: usize, huge: bool) -> Option<Self> {
        let region = HugeRegion::new(len.max(1), huge)?;
        let (ptr, len) = (region.as_ptr(), region.len());
        // SAFETY: advice on our own fresh mapping changes how the kernel
        // backs it, never its contents. MADV_DONTFORK: a child process must
        // not share these pages copy-on-write, or a kernel before 5.9 could
        // leave the device reading the old pages after this process writes
        // new ones.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_DONTFORK) };
        crate::memory::populate(ptr as usize, len.next_multiple_of(4096));
        let mut this = Self {
            ctx: ctx.clone(),
            registered: false,
            region: std::mem::ManuallyDrop::new(region),
        };
        let registered = guard("registering host memory", || {
            ctx.bind_to_thread()?;
            // SAFETY: `ptr..ptr + len` is memory of this process that stays
            // mapped until `drop` unregisters it first.
            unsafe { cudarc::driver::sys::cuMemHostRegister_v2(ptr.cast(), len, 0) }.result()
        });
        this.registered = registered.is_ok();
        if !this.registered {
            REGISTER_REFUSED.store(true, Ordering::Relaxed);
        }
        // (On failure `this` drops and only unmaps.)
        this.registered.then_some(this)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if self.registered {
            let ptr = self.region.as_ptr();
            let unregistered = guard("unregistering host memory", || {
                self.ctx.bind_to_thread()?;
                // SAFETY: the range was registered by `new` and no copy out
                // of it is in flight (`PinnedBuffer` settles before its
                // memory drops).
                unsafe { cudarc::driver::sys::cuMemHostUnregister(ptr.cast()) }.result()
            });
            if unregistered.is_err() {
                // The driver may still treat the range as pinned: leave it
                // mapped (leaked) rather than let a later mapping at the
                // same address inherit that.
                return;
            }
        }
        // SAFETY: dropped once, here, and never used after.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.region) };
    }
}

/// Where a staging buffer's page-locked bytes come from.
enum HostMemory {
    Registered(Registered),
    Driver(PinnedHostSlice<u8>),
}

/// Page-locked host memory used as a staging buffer. It remembers the
/// event of the last copy out of it, and waits for it before handing out
/// its bytes again or being freed, so it is never written or freed while
/// the GPU reads it.
pub struct PinnedBuffer {
    memory: HostMemory,
    pending: Mutex<Option<Arc<CudaEvent>>>,
}

impl PinnedBuffer {
    /// Waits for the last copy out of the buffer, if any.
    pub(crate) fn settle(&self) -> Result<()> {
        let event = self.pending.lock().map(|mut p| p.take()).unwrap_or(None);
        match event {
            Some(e) => guard("waiting for a copy", || e.synchronize()),
            None => Ok(()),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match &self.memory {
            HostMemory::Registered(r) => r.region.len(),
            HostMemory::Driver(s) => s.len(),
        }
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, once every copy out of them has finished.
    pub(crate) fn bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.settle()?;
        match &mut self.memory {
            // SAFETY: `ptr..ptr + len` is mapped, initialised (zeroed by
            // the kernel, then only written through slices) and owned by
            // this buffer, borrowed mutably here; no copy reads it (settled).
            HostMemory::Registered(r) => {
                Ok(unsafe { std::slice::from_raw_parts_mut(r.region.as_ptr(), r.region.len()) })
            }
            HostMemory::Driver(s) => guard("mapping pinned memory", || s.as_mut_slice()),
        }
    }

    /// The bytes, for copies out of them.
    fn bytes(&self) -> Result<&[u8]> {
        match &self.memory {
            // SAFETY: as in `bytes_mut`, borrowed shared here.
            HostMemory::Registered(r) => {
                Ok(unsafe { std::slice::from_raw_parts(r.region.as_ptr(), r.region.len()) })
            }
            HostMemory::Driver(s) => guard("mapping pinned memory", || s.as_slice()),
        }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // An error here means the context is broken; the memory is freed
        // by cudarc either way.
        let _ = self.settle();
    }
}

/// `len` bytes of device memory at `ptr` that this process may write.
#[derive(Debug, Clone, Copy)]
pub struct DeviceRange {
    ptr: CUdeviceptr,
    len: u64,
}

impl DeviceRange {
    /// A range of device memory owned elsewhere (a torch tensor's storage).
    ///
    /// # Safety
    /// `ptr..ptr + len` must be device memory of the context of the device
    /// it is used with, writable, and not freed or used by anyone else
    /// until the load that writes it has returned.
    pub unsafe fn from_raw(ptr: u64, len: u64) -> Self {
        Self { ptr, len }
    }

    /// A view of memory we allocated.
    pub(crate) fn of_slice(
        slice: &CudaSlice<u8>,
        stream: &CudaStream,
        start: u64,
        len: u64,
    ) -> Result<Self> {
        let total = slice.len() as u64;
        if start.checked_add(len).is_none_or(|end| end > total) {
            return Err(Error::Invalid(format!(
                "device view {start}+{len} outside a {total}-byte allocation"
            )));
        }
        let (base, _sync) = slice.device_ptr(stream);
        Ok(Self { ptr: base + start, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn at(&self, offset: u64, n: usize) -> Result<CUdeviceptr> {
        match offset.checked_add(n as u64) {
            Some(end) if end <= self.len => Ok(self.ptr + offset),
            _ => Err(Error::Invalid(format!(
                "copy of {n} bytes at {offset} past a {}-byte device range",
                self.len
            ))),
        }
    }
}

/// A stream to queue copies on.
#[derive(Clone)]
pub struct Stream(pub(crate) Arc<CudaStream>);

impl Stream {
    /// The device's default (legacy) stream.
    pub fn default_for(device: &Device) -> Self {
        Self(device.ctx.default_stream())
    }

    /// A stream created elsewhere, by its `CUstream` handle (for torch:
    /// `torch.cuda.current_stream(device).cuda_stream`).
    ///
    /// # Safety
    /// `handle` must be a live stream of `device`'s primary context that
    /// outlives the returned value.
    pub unsafe fn borrowed(device: &Device, handle: usize) -> Self {
        // SAFETY: the caller guarantees the handle is a live stream of
        // this context that outlives the wrapper, which never destroys it.
        Self(unsafe { device.ctx.wrap_borrowed_stream(handle as CUstream) })
    }
}

/// Starts copying bytes `src` of `buffer` to `dst` at `offset`
/// on `stream`. The device must be bound to the calling thread, and
/// [`mark`] called after the last copy out of `buffer`.
pub(crate) fn copy_htod(
    stream: &CudaStream,
    buffer: &PinnedBuffer,
    src: std::ops::Range<usize>,
    dst: &DeviceRange,
    offset: u64,
) -> Result<()> {
    let bytes = buffer.bytes()?;
    let src = bytes
        .get(src.clone())
        .ok_or_else(|| Error::Invalid(format!("copy source {src:?} outside the buffer")))?;
    let to = dst.at(offset, src.len())?;
    // SAFETY: `to..to + src.len()` lies inside `dst` (checked above), which
    // its creator vouched for; `src` is page-locked memory that stays
    // allocated and unwritten until the event recorded after this copy
    // completes (`PinnedBuffer` waits for it before `bytes_mut` and drop).
    guard("copying to the device", || unsafe {
        result::memcpy_htod_async(to, src, stream.cu_stream())
    })
}

/// Records the event that marks every copy queued so far on `stream` out
/// of `buffer`.
pub(crate) fn mark(
    device: &Device,
    stream: &CudaStream,
    buffer: &PinnedBuffer,
) -> Result<Arc<CudaEvent>> {
    let event = Arc::new(device.record(stream)?);
    if let Ok(mut p) = buffer.pending.lock() {
        *p = Some(event.clone());
    }
    Ok(event)
}

/// Starts zeroing `len` bytes of `dst` on `stream`.
pub(crate) fn zero(stream: &CudaStream, dst: &DeviceRange, len: u64) -> Result<()> {
    let n = usize::try_from(len).map_err(|_| Error::Invalid(format!("cannot zero {len} bytes")))?;
    let to = dst.at(0, n)?;
    // SAFETY: `to..to + n` lies inside `dst` (checked above).
    guard("zeroing device memory", || unsafe {
        result::memset_d8_async(to, 0, n, stream.cu_stream())
    })
}

/// Waits on the host for `event`.
pub(crate) fn wait(event: &CudaEvent) -> Result<()> {
    guard("waiting for a copy", || event.synchronize())
}
