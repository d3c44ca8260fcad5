//! A [`CopyEngine`] into host memory: the stand-in for a GPU in tests and
//! on machines without one. It can pretend each copy takes a while, and
//! it counts what a device engine would care about: buffers allocated,
//! waits that blocked, and buffers touched while a copy out of them was
//! still "in flight" (which must never happen).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Copy, CopyEngine};
use crate::error::{Error, Result};

/// Alignment of [`HostBuffer`]s: a page, as page-locked memory is, so
/// reads around the page cache go straight in.
const ALIGN: usize = 4096;

/// A staging buffer of [`HostEngine`].
#[derive(Debug)]
pub struct HostBuffer {
    /// `len` bytes from `at` are the buffer (`at` puts them on a page).
    bytes: Vec<u8>,
    at: usize,
    len: usize,
    /// When the copies out of it complete; `None` when none are pending.
    busy_until: Arc<Mutex<Option<Instant>>>,
}

/// Completion of the copies out of one [`HostBuffer`].
#[derive(Debug)]
pub struct HostTicket {
    busy_until: Arc<Mutex<Option<Instant>>>,
    until: Instant,
}

/// Copies into one `Vec<u8>` per destination.
#[derive(Debug)]
pub struct HostEngine {
    outputs: Vec<Mutex<Vec<u8>>>,
    latency: Duration,
    buffers: AtomicUsize,
    buffer_bytes: AtomicUsize,
    blocked_waits: AtomicUsize,
    violations: AtomicUsize,
}

impl HostEngine {
    /// Destinations of `sizes` bytes each, zero-initialised; copies
    /// complete at once.
    pub fn new(sizes: &[u64]) -> Result<Self> {
        let outputs = sizes
            .iter()
            .map(|&n| {
                usize::try_from(n).map(|n| Mutex::new(vec![0u8; n])).map_err(|_| {
                    Error::Invalid(format!("a {n}-byte destination does not fit in memory"))
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            outputs,
            latency: Duration::ZERO,
            buffers: AtomicUsize::new(0),
            buffer_bytes: AtomicUsize::new(0),
            blocked_waits: AtomicUsize::new(0),
            violations: AtomicUsize::new(0),
        })
    }

    /// Makes every batch of copies take `latency` to complete (the bytes
    /// land at once; the buffer stays busy until then).
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// The destinations' bytes.
    pub fn into_outputs(self) -> Vec<Vec<u8>> {
        self.outputs
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect()
    }

    /// Staging buffers allocated so far.
    pub fn buffers_allocated(&self) -> usize {
        self.buffers.load(Ordering::Relaxed)
    }

    /// Bytes of staging buffers allocated so far.
    pub fn buffer_bytes_allocated(&self) -> usize {
        self.buffer_bytes.load(Ordering::Relaxed)
    }

    /// Waits that had to block because the copies were not done yet.
    pub fn blocked_waits(&self) -> usize {
        self.blocked_waits.load(Ordering::Relaxed)
    }

    /// Times a buffer was handed out for writing while a copy out of it
    /// was still in flight (a device engine would copy corrupt bytes).
    pub fn violations(&self) -> usize {
        self.violations.load(Ordering::Relaxed)
    }
}

impl CopyEngine for HostEngine {
    type Buffer = HostBuffer;
    type Ticket = HostTicket;

    fn alloc(&self, len: usize) -> Result<HostBuffer> {
        self.buffers.fetch_add(1, Ordering::Relaxed);
        self.buffer_bytes.fetch_add(len, Ordering::Relaxed);
        let bytes = vec![0u8; len + ALIGN];
        let at = bytes.as_ptr().align_offset(ALIGN);
        Ok(HostBuffer { bytes, at, len, busy_until: Arc::new(Mutex::new(None)) })
    }

    fn bytes_mut<'a>(&self, buffer: &'a mut HostBuffer) -> Result<&'a mut [u8]> {
        let busy = buffer.busy_until.lock().map(|b| *b).unwrap_or(None);
        if busy.is_some_and(|t| t > Instant::now()) {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        Ok(&mut buffer.bytes[buffer.at..buffer.at + buffer.len])
    }

    fn copy_async(&self, _slot: usize, buffer: &HostBuffer, copies: &[Copy]) -> Result<HostTicket> {
        for c in copies {
            let src =
                buffer.bytes[buffer.at..buffer.at + buffer.len].get(c.src.clone()).ok_or_else(
                    || Error::Invalid(format!("copy source {:?} outside the buffer", c.src)),
                )?;
            let out = self
                .outputs
                .get(c.dst)
                .ok_or_else(|| Error::Invalid(format!("no destination {}", c.dst)))?;
            let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
            let start = usize::try_from(c.dst_offset).unwrap_or(usize::MAX);
            let room = start.checked_add(src.len()).and_then(|end| out.get_mut(start..end));
            room.ok_or_else(|| {
                Error::Invalid(format!(
                    "copy of {} bytes past the end of destination {}",
                    src.len(),
                    c.dst
                ))
            })?
            .copy_from_slice(src);
        }
        let until = Instant::now() + self.latency;
        if let Ok(mut b) = buffer.busy_until.lock() {
            *b = Some(until);
        }
        Ok(HostTicket { busy_until: buffer.busy_until.clone(), until })
    }

    fn zero(&self, dst: usize, len: u64) -> Result<()> {
        let out =
            self.outputs.get(dst).ok_or_else(|| Error::Invalid(format!("no destination {dst}")))?;
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        out.get_mut(..len)
            .ok_or_else(|| Error::Invalid(format!("zeroing past the end of destination {dst}")))?
            .fill(0);
        Ok(())
    }

    fn wait(&self, ticket: HostTicket) -> Result<()> {
        let now = Instant::now();
        if ticket.until > now {
            self.blocked_waits.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(ticket.until - now);
        }
        if let Ok(mut b) = ticket.busy_until.lock()
            && *b == Some(ticket.until)
        {
            *b = None;
        }
        Ok(())
    }
}
