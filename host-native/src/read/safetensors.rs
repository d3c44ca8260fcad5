//! safetensors files as the reader's input: the header read over any
//! [`RangeSource`] (two reads, parsed by the core,
//! [`tensorizer_core::safetensors`]) and its tensors as index entries
//! whose header is empty, so that every load path (batches, pieces, spans,
//! cold reads, slices, the staging ring) reads them as it reads a
//! tensorizer file's. A safetensors tensor has no hashes and no
//! encryption: [`tensorizer_core::TensorRecord::bare`].

use tensorizer_core::safetensors::{self as st, PREFIX_LEN, loader_refuses};
use tensorizer_core::scan::Finding;
use tensorizer_core::{Dtype, ElementType, MetadataEntry, TensorPath, TensorType};

use crate::error::{Error, Result};
use crate::source::RangeSource;

/// One tensor of a safetensors file: data at `start..end` of the data
/// section (after the header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsEntry {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub dtype: ElementType,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Where its data starts, relative to the data section.
    pub start: u64,
    /// Where its data ends, relative to the data section.
    pub end: u64,
}

/// A safetensors header, checked so that the tensors tile the data
/// section exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SafetensorsHeader {
    /// The tensors, in data order.
    pub entries: Vec<SafetensorsEntry>,
    /// Where the data section starts in the file.
    pub data_start: u64,
    /// `__metadata__`'s string values, in file order.
    pub metadata: Vec<(String, String)>,
}

impl SafetensorsHeader {
    /// Reads the header and parses it with the core's parser
    /// ([`tensorizer_core::safetensors::parse`]), refusing what a loader
    /// refuses ([`loader_refuses`]: the error names the rule's finding and
    /// its byte offset) and dtypes tensorizer cannot store.
    pub fn read<S: RangeSource + ?Sized>(source: &S) -> Result<Self> {
        let name = source.name();
        let len = source.len();
        let mut prefix = [0u8; PREFIX_LEN as usize];
        let prefix = &mut prefix[..len.min(PREFIX_LEN) as usize];
        source.read_exact_at(0, prefix)?;
        let n = st::header_len(prefix, len).map_err(|f| refused(name, &f))?;
        // The core bounds `n` by MAX_SAFETENSORS_HEADER and the file's length.
        let mut raw = vec![0u8; n as usize];
        source.read_exact_at(PREFIX_LEN, &mut raw)?;
        let header = st::parse(&raw, len);
        if let Some(f) = header.refusal(loader_refuses) {
            return Err(refused(name, f));
        }
        let mut entries = Vec::with_capacity(header.tensors.len());
        for t in header.tensors {
            entries.push(entry(name, t)?);
        }
        // By (start, end), as safetensors orders them: an empty tensor at
        // the offset where a full one starts comes first, whatever the
        // header's order. The parser has checked that they tile the data.
        entries.sort_by_key(|e| (e.start, e.end));
        Ok(Self { entries, data_start: PREFIX_LEN + n, metadata: header.metadata })
    }

    /// The tensors as index entries for the reader: absolute data offsets,
    /// headers of no bytes.
    pub fn index_entries(&self) -> Vec<MetadataEntry> {
        let at = |o: u64| self.data_start.saturating_add(o);
        self.entries
            .iter()
            .map(|e| MetadataEntry {
                path: TensorPath::Plain(e.name.clone()),
                tensor_type: TensorType::StateDict,
                dtype: Dtype::from_element(e.dtype),
                shape: e.shape.clone(),
                header_offset: at(e.start),
                data_offset: at(e.start),
                data_length: e.end - e.start,
                long_dims: MetadataEntry::needs_long_dims(&e.shape),
            })
            .collect()
    }
}

/// The error for a header the loader refuses.
fn refused(file: &str, f: &Finding) -> Error {
    let at = f.offset.map(|o| format!(" (byte {o}, {})", f.rule)).unwrap_or_default();
    Error::Safetensors {
        file: file.to_string(),
        offset: f.offset,
        tensor: None,
        reason: format!("{}{at}", f.message),
    }
}

/// A parsed header entry as a tensor tensorizer can hold.
fn entry(file: &str, t: st::TensorInfo) -> Result<SafetensorsEntry> {
    let Some((dtype, shape)) = st::from_safetensors(&t.dtype, &t.shape) else {
        let reason = if st::dtype(&t.dtype).and_then(|d| d.element).is_some() {
            format!(
                "tensor {:?}: dtype {} with shape {:?} does not pack into whole elements",
                t.name, t.dtype, t.shape
            )
        } else {
            format!("tensor {:?}: dtype {:?} has no tensorizer equivalent", t.name, t.dtype)
        };
        return Err(Error::Safetensors {
            file: file.to_string(),
            offset: None,
            tensor: Some(t.name),
            reason,
        });
    };
    let (start, end) = t.data_offsets;
    Ok(SafetensorsEntry { name: t.name, dtype, shape, start, end })
}
