//! The CUDA [`CopyEngine`]: page-locked staging buffers, copies with
//! `cuMemcpyHtoDAsync` into device ranges the caller names, and one event
//! per buffer fill to recycle buffers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaEvent, CudaStream};

use super::device::{self, Device, DeviceRange, PinnedBuffer, Stream};
use crate::device::staging::{Copy, CopyEngine};
use crate::error::{Error, Result};

/// Most bytes of page-locked staging buffers kept for reuse between loads
/// (pinning memory costs far more than reusing it, and lazy loads come one
/// tensor at a time).
pub const POOL_MAX_BYTES: usize = 512 << 20;

/// Staging buffers of finished loads, with their device ordinals.
static POOL: Mutex<Vec<(usize, PinnedBuffer)>> = Mutex::new(Vec::new());

/// Frees the staging buffers kept for reuse.
pub fn release_staging_pool() {
    let freed = std::mem::take(&mut *POOL.lock().unwrap_or_else(|p| p.into_inner()));
    drop(freed);
}

/// A staging buffer that goes back to the pool when dropped.
pub struct StagingBuffer {
    inner: Option<PinnedBuffer>,
    ordinal: usize,
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        let Some(buffer) = self.inner.take() else { return };
        // Only a buffer with no copy in flight is kept.
        if buffer.settle().is_err() {
            return;
        }
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        let held: usize = pool.iter().map(|(_, b)| b.len()).sum();
        if held + buffer.len() <= POOL_MAX_BYTES {
            pool.push((self.ordinal, buffer));
        }
    }
}

impl StagingBuffer {
    fn get(&self) -> Result<&PinnedBuffer> {
        self.inner.as_ref().ok_or_else(|| Error::Invalid("staging buffer already released".into()))
    }
}

/// Copies staged bytes to device memory.
///
/// Copies run on the caller's stream (torch's current stream), or on
/// streams of their own that first wait for everything already queued on
/// it, so memory torch just handed out is not written before earlier work
/// on it is done. [`crate::device::staging::load_staged`] returns only after
/// every copy has completed.
pub struct CudaEngine {
    device: Device,
    streams: Vec<Arc<CudaStream>>,
    dsts: Vec<DeviceRange>,
    /// Whether a zeroing (which has no ticket) was queued.
    zeroed: AtomicBool,
}

impl CudaEngine {
    /// Copies into `dsts` (destination `j` receives the `j`-th tensor
    /// loaded) on `origin`, or, when `extra_streams` is above 0, on that
    /// many new streams ordered after the work already on `origin`.
    pub fn new(
        device: &Device,
        origin: &Stream,
        dsts: Vec<DeviceRange>,
        extra_streams: usize,
    ) -> Result<Self> {
        device.bind()?;
        let streams = if extra_streams == 0 {
            vec![origin.0.clone()]
        } else {
            let ready = device.record(&origin.0)?;
            (0..extra_streams)
                .map(|_| {
                    let s = device.new_stream()?;
                    device::guard("ordering the copy streams", || s.wait(&ready))?;
                    Ok(s)
                })
                .collect::<Result<_>>()?
        };
        Ok(Self { device: device.clone(), streams, dsts, zeroed: AtomicBool::new(false) })
    }

    fn dst(&self, j: usize) -> Result<&DeviceRange> {
        self.dsts.get(j).ok_or_else(|| Error::Invalid(format!("no device destination {j}")))
    }
}

impl CopyEngine for CudaEngine {
    type Buffer = StagingBuffer;
    type Ticket = Arc<CudaEvent>;

    fn alloc(&self, len: usize) -> Result<StagingBuffer> {
        let ordinal = self.device.ordinal();
        let reused = {
            let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
            let best = (0..pool.len())
                .filter(|&i| pool[i].0 == ordinal && pool[i].1.len() >= len)
                .min_by_key(|&i| pool[i].1.len());
            best.map(|i| pool.swap_remove(i).1)
        };
        let buffer = match reused {
            Some(b) => b,
            None => self.device.alloc_pinned(len, crate::memory::staging_huge_pages())?,
        };
        Ok(StagingBuffer { inner: Some(buffer), ordinal })
    }

    fn bytes_mut<'a>(&self, buffer: &'a mut StagingBuffer) -> Result<&'a mut [u8]> {
        match buffer.inner.as_mut() {
            Some(b) => b.bytes_mut(),
            None => Err(Error::Invalid("staging buffer already released".into())),
        }
    }

    fn copy_async(
        &self,
        slot: usize,
        buffer: &StagingBuffer,
        copies: &[Copy],
    ) -> Result<Arc<CudaEvent>> {
        let buffer = buffer.get()?;
        self.device.bind()?;
        let stream = &self.streams[slot % self.streams.len()];
        for c in copies {
            device::copy_htod(stream, buffer, c.src.clone(), self.dst(c.dst)?, c.dst_offset)?;
        }
        device::mark(&self.device, stream, buffer)
    }

    fn zero(&self, dst: usize, len: u64) -> Result<()> {
        self.device.bind()?;
        self.zeroed.store(true, Ordering::Relaxed);
        device::zero(&self.streams[0], self.dst(dst)?, len)
    }

    fn wait(&self, ticket: Arc<CudaEvent>) -> Result<()> {
        device::wait(&ticket)
    }
}

impl Drop for CudaEngine {
    fn drop(&mut self) {
        // Zeroing has no ticket: finish it before the destinations are
        // handed back (copies were all waited for by their tickets).
        if self.zeroed.load(Ordering::Relaxed) {
            let _ = device::guard("finishing the zeroing", || self.streams[0].synchronize());
        }
    }
}
