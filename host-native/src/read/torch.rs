//! `torch.save` zip checkpoints through the one reader: the state dict's
//! tensors become index entries over the bytes of their storages, as a
//! safetensors file's do (spec §16.10), so every load path (batches, pieces
//! on all reader threads, long reads from a store, the cold path around the
//! page cache, memory maps, the CUDA staging ring) reads them unchanged.
//! torch stores each storage uncompressed on a 64-byte boundary, so a
//! contiguous tensor is one range of the file.

use tensorizer_core::checkpoint::Leaf;
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::{Dtype, MetadataEntry, TensorType};

use crate::convert::checkpoint::CheckpointReader;
use crate::error::{Error, Result};
use crate::parallel::{default_readers, for_each};
use crate::source::RangeSource;

/// The bytes a checkpoint's tensors claim together may be at most this
/// many times the file's length. Tensors that share a storage load as
/// copies of their own, and tied weights name one storage two to four
/// times (T5's embedding: four names, 1.3–1.8× its file); more than this
/// is memory the file claims but does not hold.
const MAX_CLAIM_PER_FILE_BYTE: u64 = 4;

/// What to do with a checkpoint this reader does not load.
const INSTEAD: &str = "load it with torch.load(path, weights_only=True) or \
     tensorizer_rs.zipslicer.load(path), or convert it first: tzr convert FILE model.safetensors";

/// Reads the checkpoint in `source` (its directory, records and pickle;
/// each storage's local header) and returns the source with one index
/// entry per tensor, in `torch.load` order. A checkpoint holding anything
/// but tensors that each cover one run of their storage's bytes, little
/// endian, is refused with [`Error::Unsupported`] naming the first entry
/// that is not, and what loads it instead.
pub(super) fn open<S: RangeSource>(source: S) -> Result<(S, Vec<MetadataEntry>)> {
    let checkpoint = CheckpointReader::new(source)?;
    let entries = index(&checkpoint)?;
    Ok((checkpoint.into_source(), entries))
}

fn index<S: RangeSource>(checkpoint: &CheckpointReader<S>) -> Result<Vec<MetadataEntry>> {
    let refuse = |what: String| Error::Unsupported {
        location: checkpoint.source().name().to_string(),
        what: format!("{what}; {INSTEAD}"),
    };
    if checkpoint.byte_order() != ByteOrder::Little {
        return Err(refuse("its storages are big-endian".into()));
    }
    // Each storage's local header, read once: over a store each is a
    // request of its own, so there on all reader threads.
    let storages: Vec<usize> = (0..checkpoint.storages().len()).collect();
    let threads = if checkpoint.source().prefers_long_reads() { default_readers() } else { 1 };
    for_each(threads, storages, |s| checkpoint.storage_range(s).map(drop))?;
    let mut out = Vec::with_capacity(checkpoint.entries().len());
    for (i, entry) in checkpoint.entries().iter().enumerate() {
        let Leaf::Tensor(view) = &entry.value else {
            return Err(refuse(format!("{:?} is not a tensor", entry.path.to_string())));
        };
        let len = checkpoint.nbytes(i)?;
        let span = view
            .byte_span()
            // An empty tensor reads nothing, whatever its strides.
            .filter(|s| len == 0 || (view.is_contiguous() && s.end - s.start == len))
            .ok_or_else(|| {
                refuse(format!(
                    "tensor {:?} is not contiguous in its storage",
                    entry.path.to_string()
                ))
            })?;
        // Inside the storage (the core checks every view against it).
        let storage = checkpoint.storage_range(view.storage)?;
        let at = storage.start.checked_add(span.start).ok_or_else(|| {
            refuse(format!("tensor {:?} lies past the file", entry.path.to_string()))
        })?;
        out.push(MetadataEntry {
            path: entry.path.clone(),
            tensor_type: TensorType::StateDict,
            dtype: Dtype::from_element(view.dtype),
            shape: view.shape.clone(),
            header_offset: at,
            data_offset: at,
            data_length: len,
            long_dims: MetadataEntry::needs_long_dims(&view.shape),
        });
    }
    let claimed = out.iter().try_fold(0u64, |sum, e| sum.checked_add(e.data_length));
    let len = checkpoint.source().len();
    if claimed.is_none_or(|c| c > len.saturating_mul(MAX_CLAIM_PER_FILE_BYTE)) {
        return Err(refuse(format!(
            "its tensors share storages so often that they claim more than \
             {MAX_CLAIM_PER_FILE_BYTE}× the file's {len} bytes as copies"
        )));
    }
    Ok(out)
}
