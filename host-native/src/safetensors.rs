//! Conversion between tensorizer files and safetensors files, streaming:
//! memory stays bounded by one piece of one tensor.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde_json::{Value, json};
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::{Dtype, ElementType, PathComponent, TensorPath, TensorSpec, TensorType};

use crate::atomic::AtomicFile;
use crate::error::{Error, Result, io_err};
use crate::reader::Reader;
use crate::source::RangeSource;
use crate::writer::{FileWriter, WriteOptions};

/// Largest safetensors JSON header accepted (safetensors' own limit).
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// Bytes copied per step while converting.
const STEP: usize = 8 << 20;

/// safetensors' name for an element type, if it has one.
pub fn safetensors_dtype(e: ElementType) -> Option<&'static str> {
    Some(match e {
        ElementType::Bool => "BOOL",
        ElementType::U8 => "U8",
        ElementType::I8 => "I8",
        ElementType::U16 => "U16",
        ElementType::I16 => "I16",
        ElementType::U32 => "U32",
        ElementType::I32 => "I32",
        ElementType::U64 => "U64",
        ElementType::I64 => "I64",
        ElementType::F16 => "F16",
        ElementType::BF16 => "BF16",
        ElementType::F32 => "F32",
        ElementType::F64 => "F64",
        ElementType::Complex64 => "C64",
        ElementType::F8E5M2 => "F8_E5M2",
        ElementType::F8E4M3FN => "F8_E4M3",
        ElementType::F8E8M0FNU => "F8_E8M0",
        _ => return None,
    })
}

fn element_from_safetensors(name: &str) -> Option<ElementType> {
    crate::safetensors::ALL.iter().copied().find(|&e| safetensors_dtype(e) == Some(name))
}

const ALL: &[ElementType] = &[
    ElementType::Bool,
    ElementType::U8,
    ElementType::I8,
    ElementType::U16,
    ElementType::I16,
    ElementType::U32,
    ElementType::I32,
    ElementType::U64,
    ElementType::I64,
    ElementType::F16,
    ElementType::BF16,
    ElementType::F32,
    ElementType::F64,
    ElementType::Complex64,
    ElementType::F8E5M2,
    ElementType::F8E4M3FN,
    ElementType::F8E8M0FNU,
];

/// The flat name a structured path gets in safetensors: components joined
/// with dots, as in a torch state dict (`model.layers.0.weight`).
pub fn flat_name(path: &TensorPath) -> String {
    match path {
        TensorPath::Plain(s) => s.clone(),
        TensorPath::Structured(c) => c
            .iter()
            .map(|p| match p {
                PathComponent::Key(k) => k.clone(),
                PathComponent::Index(i) => i.to_string(),
            })
            .collect::<Vec<_>>()
            .join("."),
    }
}

/// Bytes that swap as one unit to turn `dtype`'s stored elements into
/// little-endian ones: none for little-endian and single-byte types, the
/// item size otherwise, and half of it for complex types (two floats).
pub fn swap_unit(dtype: &Dtype) -> Option<usize> {
    if dtype.byte_order() != ByteOrder::Big || dtype.itemsize() < 2 {
        return None;
    }
    let unit = if dtype.kind() == 'c' { dtype.itemsize() / 2 } else { dtype.itemsize() };
    Some(unit as usize)
}

/// Reverses the bytes of every `unit`-byte element of `data` in place.
pub fn swap_bytes(data: &mut [u8], unit: usize) {
    for element in data.chunks_exact_mut(unit) {
        element.reverse();
    }
}

/// Converts a tensorizer file to safetensors, verifying every hash on the
/// way. Big-endian tensors are byte-swapped (safetensors is little-endian).
/// `progress` is called with the bytes done so far.
pub fn to_safetensors<S: RangeSource>(reader: &Reader<S>, out: &Path, mut progress: impl FnMut(u64)) -> Result<()> {
    let src = reader.source().name().to_string();
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0u64;
    let mut names = HashSet::new();
    for e in reader.entries() {
        let name = flat_name(&e.path);
        let fail = |why: &str| Error::Invalid(format!("{src}: tensor {name:?}: {why}"));
        if e.is_meta() {
            return Err(fail("meta tensors (no data) cannot be stored in safetensors"));
        }
        let Some(dtype) = e.dtype.element().and_then(safetensors_dtype) else {
            return Err(fail(&format!("safetensors has no dtype for {}", e.dtype)));
        };
        if !names.insert(name.clone()) {
            return Err(fail("two tensors flatten to this name"));
        }
        header
            .insert(name, json!({"dtype": dtype, "shape": e.shape, "data_offsets": [offset, offset + e.data_length]}));
        offset += e.data_length;
    }
    let mut json = serde_json::to_vec(&Value::Object(header)).map_err(|e| Error::Invalid(e.to_string()))?;
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let tmp = AtomicFile::create(out)?;
    let name = tmp.name().to_string();
    {
        let mut w = BufWriter::with_capacity(STEP, tmp.file());
        w.write_all(&(json.len() as u64).to_le_bytes()).map_err(io_err(&name, 0))?;
        w.write_all(&json).map_err(io_err(&name, 8))?;
        let mut done = 0u64;
        let mut swapped = Vec::new();
        for (i, e) in reader.entries().iter().enumerate() {
            let unit = swap_unit(&e.dtype);
            // STEP is a multiple of every item size, so pieces hold whole elements.
            reader.stream(i, STEP, true, |piece| {
                let bytes = match unit {
                    Some(unit) => {
                        swapped.clear();
                        swapped.extend_from_slice(piece);
                        swap_bytes(&mut swapped, unit);
                        &swapped[..]
                    }
                    None => piece,
                };
                w.write_all(bytes).map_err(io_err(&name, done))?;
                done += piece.len() as u64;
                progress(done);
                Ok(())
            })?;
        }
        w.flush().map_err(io_err(&name, 0))?;
    }
    tmp.commit()
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

/// A parsed safetensors header: (name, dtype, shape, start, end) in data order.
type Entries = Vec<(String, ElementType, Vec<u64>, u64, u64)>;

fn read_safetensors_header(file: &File, name: &str, len: u64) -> Result<(u64, Entries)> {
    let bad = |why: String| Error::Invalid(format!("{name}: not a valid safetensors file: {why}"));
    let mut n = [0u8; 8];
    file.read_exact_at(&mut n, 0).map_err(|_| bad("shorter than 8 bytes".into()))?;
    let n = u64::from_le_bytes(n);
    if n > MAX_SAFETENSORS_HEADER || n.checked_add(8).is_none_or(|end| end > len) {
        return Err(bad(format!("header length {n} is impossible for a {len}-byte file")));
    }
    let mut raw = vec![0u8; n as usize];
    file.read_exact_at(&mut raw, 8).map_err(io_err(name, 8))?;
    let header = header_entries(&raw).map_err(|e| bad(format!("header JSON: {e}")))?;
    let data_start = 8 + n;
    let mut entries = Entries::new();
    for (key, v) in header {
        if key == "__metadata__" {
            continue;
        }
        let dtype = v["dtype"].as_str().and_then(element_from_safetensors);
        let shape: Option<Vec<u64>> = v["shape"].as_array().and_then(|a| a.iter().map(Value::as_u64).collect());
        let offsets: Option<Vec<u64>> =
            v["data_offsets"].as_array().and_then(|a| a.iter().map(Value::as_u64).collect());
        let (Some(dtype), Some(shape), Some([start, end])) =
            (dtype, shape, offsets.as_deref().and_then(|o| <[u64; 2]>::try_from(o).ok()))
        else {
            return Err(bad(format!("tensor {key:?} has a missing or unsupported dtype, shape or data_offsets")));
        };
        let nbytes = Dtype::from_element(dtype).nbytes(&shape);
        if end < start || nbytes != Some(end - start) {
            return Err(bad(format!("tensor {key:?}: data_offsets do not match dtype and shape")));
        }
        entries.push((key, dtype, shape, start, end));
    }
    entries.sort_by_key(|e| e.3);
    let mut expect = 0;
    for e in &entries {
        if e.3 != expect {
            return Err(bad(format!("tensor {:?} does not start where the previous one ends", e.0)));
        }
        expect = e.4;
    }
    if data_start + expect != len {
        return Err(bad(format!("data covers {expect} bytes but the file holds {}", len - data_start)));
    }
    Ok((data_start, entries))
}

/// Converts a safetensors file to a tensorizer file, streaming.
pub fn from_safetensors(input: &Path, out: &Path, options: &WriteOptions, mut progress: impl FnMut(u64)) -> Result<()> {
    let name = input.display().to_string();
    let file = File::open(input).map_err(io_err(&name, 0))?;
    let len = file.metadata().map_err(io_err(&name, 0))?.len();
    let (data_start, entries) = read_safetensors_header(&file, &name, len)?;
    let specs: Vec<TensorSpec> = entries
        .iter()
        .map(|(n, e, shape, _, _)| TensorSpec {
            path: TensorPath::Plain(n.clone()),
            tensor_type: TensorType::StateDict,
            module_index: 0,
            dtype: Dtype::from_element(*e),
            shape: shape.clone(),
            meta: false,
        })
        .collect();
    let writer = FileWriter::create(out, &specs, options)?;
    let mut buf = vec![0u8; STEP];
    let mut done = 0u64;
    for (i, (_, _, _, start, end)) in entries.iter().enumerate() {
        let mut sink = writer.tensor(i)?;
        let mut at = *start;
        while at < *end {
            let n = ((end - at) as usize).min(STEP);
            file.read_exact_at(&mut buf[..n], data_start + at).map_err(io_err(&name, data_start + at))?;
            sink.write(&buf[..n])?;
            at += n as u64;
            done += n as u64;
            progress(done);
        }
        sink.finish()?;
    }
    writer.commit()
}
