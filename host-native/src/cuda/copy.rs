//! The CUDA [`CopyEngine`]: page-locked staging buffers, copies with
//! `cuMemcpyHtoDAsync` into device ranges the caller names, and one event
//! per buffer fill to recycle buffers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{CudaEvent, CudaStream};

use super::device::{self, Device, DeviceRange, PinnedBuffer, Stream};
use crate::error::{Error, Result};
use crate::staging::{Copy, CopyEngine};

/// Copies staged bytes to device memory.
///
/// Copies run on the caller's stream (torch's current stream), or on
/// streams of their own that first wait for everything already queued on
/// it, so memory torch just handed out is not written before earlier work
/// on it is done. [`crate::staging::load_staged`] returns only after
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
    pub fn new(device: &Device, origin: &Stream, dsts: Vec<DeviceRange>, extra_streams: usize) -> Result<Self> {
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
    type Buffer = PinnedBuffer;
    type Ticket = Arc<CudaEvent>;

    fn alloc(&self, len: usize) -> Result<PinnedBuffer> {
        self.device.alloc_pinned(len)
    }

    fn bytes_mut<'a>(&self, buffer: &'a mut PinnedBuffer) -> Result<&'a mut [u8]> {
        buffer.bytes_mut()
    }

    fn copy_async(&self, slot: usize, buffer: &PinnedBuffer, copies: &[Copy]) -> Result<Arc<CudaEvent>> {
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
