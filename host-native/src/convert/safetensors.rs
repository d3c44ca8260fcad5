//! safetensors files: dtype names, flat names, reading the header over any
//! [`RangeSource`] (parsed by the core, [`tensorizer_core::safetensors`]),
//! and conversion to and from tensorizer files (streaming, through
//! [`crate::convert`]).

use tensorizer_core::safetensors::{self as st, PREFIX_LEN, loader_refuses};
use tensorizer_core::scan::Finding;
use tensorizer_core::{Dtype, ElementType, TensorPath};

use crate::error::{Error, Result};
use crate::source::RangeSource;

pub use tensorizer_core::layout::MAX_SAFETENSORS_HEADER;

/// safetensors' name for an element type, if it has one (the core's
/// table, [`tensorizer_core::safetensors::DTYPES`]).
pub fn safetensors_dtype(e: ElementType) -> Option<&'static str> {
    tensorizer_core::safetensors::name_of(e)
}

/// The flat name a structured path gets in safetensors: components joined
/// with dots, as in a torch state dict (`model.layers.0.weight`).
pub fn flat_name(path: &TensorPath) -> String {
    path.dotted_name()
}

/// Bytes that swap as one unit to turn `dtype`'s stored elements into
/// little-endian ones: none for little-endian and single-byte types, the
/// item size otherwise, and half of it for complex types (two floats).
pub fn swap_unit(dtype: &Dtype) -> Option<usize> {
    dtype.swap_unit()
}

/// Reverses the bytes of every `unit`-byte element of `data` in place.
pub fn swap_bytes(data: &mut [u8], unit: usize) {
    for element in data.chunks_exact_mut(unit) {
        element.reverse();
    }
}

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

/// A safetensors file opened over any [`RangeSource`] (two reads): its
/// header parsed and checked so that the tensors tile the data section
/// exactly, in data order.
pub struct SafetensorsFile<S: RangeSource> {
    source: S,
    data_start: u64,
    entries: Vec<SafetensorsEntry>,
}

impl<S: RangeSource> SafetensorsFile<S> {
    /// Reads the header and parses it with the core's parser
    /// ([`tensorizer_core::safetensors::parse`]), refusing what a loader
    /// refuses ([`loader_refuses`]: the error names the rule's finding and
    /// its byte offset) and dtypes tensorizer cannot store.
    pub fn new(source: S) -> Result<Self> {
        let name = source.name().to_string();
        let len = source.len();
        let bad = |tensor: &str, reason: String| Error::Safetensors {
            file: name.clone(),
            offset: None,
            tensor: Some(tensor.to_string()),
            reason,
        };
        let refused = |f: &Finding| {
            let at = f.offset.map(|o| format!(" (byte {o}, {})", f.rule)).unwrap_or_default();
            Error::Safetensors {
                file: name.clone(),
                offset: f.offset,
                tensor: None,
                reason: format!("{}{at}", f.message),
            }
        };
        let mut prefix = [0u8; PREFIX_LEN as usize];
        let prefix = &mut prefix[..len.min(PREFIX_LEN) as usize];
        source.read_exact_at(0, prefix)?;
        let n = st::header_len(prefix, len).map_err(|f| refused(&f))?;
        let mut raw = vec![0u8; n as usize];
        source.read_exact_at(PREFIX_LEN, &mut raw)?;
        let header = st::parse(&raw, len);
        if let Some(f) = header.refusal(loader_refuses) {
            return Err(refused(f));
        }
        let mut entries = Vec::with_capacity(header.tensors.len());
        for t in header.tensors {
            let Some((dtype, shape)) = st::from_safetensors(&t.dtype, &t.shape) else {
                let why = if st::dtype(&t.dtype).and_then(|d| d.element).is_some() {
                    format!(
                        "tensor {:?}: dtype {} with shape {:?} does not pack into whole elements",
                        t.name, t.dtype, t.shape
                    )
                } else {
                    format!("tensor {:?}: dtype {:?} has no tensorizer equivalent", t.name, t.dtype)
                };
                return Err(bad(&t.name, why));
            };
            let (start, end) = t.data_offsets;
            entries.push(SafetensorsEntry { name: t.name, dtype, shape, start, end });
        }
        // By (start, end), as safetensors orders them: an empty tensor at
        // the offset where a full one starts comes first, whatever the
        // header's order. The parser has checked that they tile the data.
        entries.sort_by_key(|e| (e.start, e.end));
        Ok(Self { source, data_start: PREFIX_LEN + n, entries })
    }

    /// The tensors, in data order.
    pub fn entries(&self) -> &[SafetensorsEntry] {
        &self.entries
    }

    /// Where the data section starts in the file.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// The byte source.
    pub fn source(&self) -> &S {
        &self.source
    }
}
