//! Loading tensors straight into CUDA device memory through the staging
//! ring of [`crate::device::staging`]: page-locked host buffers, asynchronous
//! host-to-device copies, events to recycle buffers.
//!
//! The driver is loaded at run time (cudarc's dynamic loading), so this
//! builds without a CUDA toolkit and, without a driver, every entry point
//! returns [`crate::Error::Cuda`].

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use crate::device::staging::{StagingOptions, load_staged};
use crate::error::{Error, Result};
use crate::read::Reader;
use crate::read::pack::{DEVICE_VIEW_ALIGN, pack_aligned};
use crate::source::RangeSource;

mod copy;
mod device;

pub use copy::{CudaEngine, POOL_MAX_BYTES, StagingBuffer, release_staging_pool};
pub use device::{Device, DeviceRange, PinnedBuffer, Stream, driver_present};

/// Loads `tensors` of `reader` into `dsts` (one device range per tensor,
/// exactly its [`tensorizer_core::MetadataEntry::nbytes`]), copying on
/// `stream` (plus `extra_streams` streams of our own ordered after it).
/// Every copy has completed when this returns.
pub fn load_into<S: RangeSource>(
    device: &Device,
    stream: &Stream,
    reader: &Reader<S>,
    tensors: &[usize],
    dsts: Vec<DeviceRange>,
    options: &StagingOptions,
    extra_streams: usize,
) -> Result<()> {
    if dsts.len() != tensors.len() {
        return Err(Error::Invalid(format!(
            "{} tensors but {} device destinations",
            tensors.len(),
            dsts.len()
        )));
    }
    for (dst, &i) in dsts.iter().zip(tensors) {
        let need = reader.entries().get(i).map_or(0, |e| e.nbytes());
        if dst.len() != need {
            return Err(Error::Invalid(format!(
                "{}: tensor number {i} needs {need} bytes of device memory, got {}",
                reader.source().name(),
                dst.len()
            )));
        }
    }
    let engine = CudaEngine::new(device, stream, dsts, extra_streams)?;
    load_staged(reader, tensors, &engine, options)
}

/// Tensors loaded into one device allocation.
pub struct DeviceTensors {
    stream: Arc<CudaStream>,
    memory: CudaSlice<u8>,
    views: Vec<(u64, u64)>,
}

impl DeviceTensors {
    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.views.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// Copies tensor `j` (in load order) back to host memory.
    pub fn to_host(&self, j: usize) -> Result<Vec<u8>> {
        let &(start, len) =
            self.views.get(j).ok_or_else(|| Error::Invalid(format!("no loaded tensor {j}")))?;
        let (start, len) = (start as usize, len as usize);
        if len == 0 {
            return Ok(Vec::new());
        }
        device::guard("copying to the host", || {
            self.stream.clone_dtoh(&self.memory.slice(start..start + len))
        })
    }
}

/// Loads `tensors` of `reader` into one new device allocation carved into
/// 256-byte-aligned views.
pub fn load_to_device<S: RangeSource>(
    device: &Device,
    reader: &Reader<S>,
    tensors: &[usize],
    options: &StagingOptions,
) -> Result<DeviceTensors> {
    let mut lens = Vec::with_capacity(tensors.len());
    for &i in tensors {
        let e = reader.entries().get(i).ok_or_else(|| {
            Error::Invalid(format!("{}: no tensor number {i}", reader.source().name()))
        })?;
        lens.push(e.nbytes());
    }
    let overflow = || Error::Invalid("the tensors' total size overflows".into());
    let pack =
        pack_aligned(lens.iter().copied(), DEVICE_VIEW_ALIGN, u64::MAX).ok_or_else(overflow)?;
    let (offsets, total) = pack.first().map_or((&[][..], 0), |p| (&p.offsets[..], p.size));
    let views: Vec<(u64, u64)> = offsets.iter().copied().zip(lens).collect();
    let len = usize::try_from(total)
        .map_err(|_| Error::Invalid(format!("{total} bytes do not fit in memory")))?;
    let stream = device.default_stream();
    let memory = device.alloc_zeros(&stream, len)?;
    let dsts = views
        .iter()
        .map(|&(start, n)| DeviceRange::of_slice(&memory, &stream, start, n))
        .collect::<Result<Vec<_>>>()?;
    load_into(device, &Stream(stream.clone()), reader, tensors, dsts, options, 0)?;
    Ok(DeviceTensors { stream, memory, views })
}
