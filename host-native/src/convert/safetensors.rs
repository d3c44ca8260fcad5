//! safetensors files: dtype names, flat names, reading the header over any
//! [`RangeSource`], and conversion to and from tensorizer files (streaming,
//! through [`crate::convert`]).

use std::collections::HashSet;

use serde_json::Value;
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

/// The members of a safetensors JSON header in file order, refusing a
/// repeated key (a plain map would keep one silently).
fn header_entries(raw: &[u8]) -> serde_json::Result<Vec<(String, Value)>> {
    struct Members(Vec<(String, Value)>);
    impl<'de> serde::Deserialize<'de> for Members {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Members;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Members, A::Error> {
                    let mut seen = HashSet::new();
                    let mut out = Vec::new();
                    while let Some((key, value)) = map.next_entry::<String, Value>()? {
                        if !seen.insert(key.clone()) {
                            return Err(serde::de::Error::custom(format!("duplicate tensor name {key:?}")));
                        }
                        out.push((key, value));
                    }
                    Ok(Members(out))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    serde_json::from_slice::<Members>(raw).map(|m| m.0)
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
    /// Reads and checks the header.
    pub fn new(source: S) -> Result<Self> {
        let name = source.name().to_string();
        let len = source.len();
        let bad = |why: String| Error::Invalid(format!("{name}: not a valid safetensors file: {why}"));
        if len < 8 {
            return Err(bad("shorter than 8 bytes".into()));
        }
        let mut n = [0u8; 8];
        source.read_exact_at(0, &mut n)?;
        let n = u64::from_le_bytes(n);
        if n > MAX_SAFETENSORS_HEADER {
            return Err(bad(format!("header length {n} is over MAX_SAFETENSORS_HEADER ({MAX_SAFETENSORS_HEADER})")));
        }
        if n.checked_add(8).is_none_or(|end| end > len) {
            return Err(bad(format!("header length {n} is impossible for a {len}-byte file")));
        }
        let mut raw = vec![0u8; n as usize];
        source.read_exact_at(8, &mut raw)?;
        let header = header_entries(&raw).map_err(|e| bad(format!("header JSON: {e}")))?;
        let data_start = 8 + n;
        let mut entries = Vec::new();
        for (key, v) in header {
            if key == "__metadata__" {
                continue;
            }
            let name = v["dtype"].as_str();
            let shape: Option<Vec<u64>> = v["shape"].as_array().and_then(|a| a.iter().map(Value::as_u64).collect());
            let offsets: Option<Vec<u64>> =
                v["data_offsets"].as_array().and_then(|a| a.iter().map(Value::as_u64).collect());
            let (Some(name), Some(shape), Some([start, end])) =
                (name, shape, offsets.as_deref().and_then(|o| <[u64; 2]>::try_from(o).ok()))
            else {
                return Err(bad(format!("tensor {key:?} has a missing dtype, shape or data_offsets")));
            };
            let Some((dtype, shape)) = tensorizer_core::safetensors::from_safetensors(name, &shape) else {
                let why = if tensorizer_core::safetensors::dtype(name).and_then(|d| d.element).is_some() {
                    format!("tensor {key:?}: dtype {name} with shape {shape:?} does not pack into whole elements")
                } else {
                    format!("tensor {key:?}: dtype {name:?} has no tensorizer equivalent")
                };
                return Err(bad(why));
            };
            let nbytes = Dtype::from_element(dtype).nbytes(&shape);
            if end < start || nbytes != Some(end - start) {
                return Err(bad(format!("tensor {key:?}: data_offsets do not match dtype and shape")));
            }
            entries.push(SafetensorsEntry { name: key, dtype, shape, start, end });
        }
        // By (start, end), as safetensors orders them: an empty tensor at
        // the offset where a full one starts comes first, whatever the
        // header's order.
        entries.sort_by_key(|e| (e.start, e.end));
        let mut expect = 0;
        for e in &entries {
            if e.start != expect {
                return Err(bad(format!("tensor {:?} does not start where the previous one ends", e.name)));
            }
            expect = e.end;
        }
        if data_start + expect != len {
            return Err(bad(format!("data covers {expect} bytes but the file holds {}", len - data_start)));
        }
        Ok(Self { source, data_start, entries })
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
