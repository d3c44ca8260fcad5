//! safetensors files: dtype names, flat names, the header over any
//! [`RangeSource`] (read by [`crate::read::safetensors`]), and conversion to and from tensorizer files (streaming, through
//! [`crate::convert`]).

use tensorizer_core::{Dtype, ElementType, TensorPath};

use crate::error::{Error, Result};
use crate::source::RangeSource;

pub use crate::read::safetensors::{SafetensorsEntry, SafetensorsHeader};
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

/// A safetensors file opened over any [`RangeSource`] (two reads): its
/// header ([`SafetensorsHeader::read`]) and its byte source.
pub struct SafetensorsFile<S: RangeSource> {
    source: S,
    header: SafetensorsHeader,
}

impl<S: RangeSource> SafetensorsFile<S> {
    /// Reads and checks the header ([`SafetensorsHeader::read`]).
    pub fn new(source: S) -> Result<Self> {
        let header = SafetensorsHeader::read(&source)?;
        Ok(Self { source, header })
    }

    /// The tensors, in data order.
    pub fn entries(&self) -> &[SafetensorsEntry] {
        &self.header.entries
    }

    /// `__metadata__`'s string values, in file order.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.header.metadata
    }

    /// Where the data section starts in the file.
    pub fn data_start(&self) -> u64 {
        self.header.data_start
    }

    /// The byte source.
    pub fn source(&self) -> &S {
        &self.source
    }
}

/// One tensor to store in a safetensors file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTensor {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub element: ElementType,
    /// Its shape (in stored elements; packed types are unpacked in the
    /// header, [`tensorizer_core::safetensors::to_safetensors`]).
    pub shape: Vec<u64>,
}

/// The order safetensors' own writer stores `tensors` in: widest dtype
/// first (the reverse of [`tensorizer_core::safetensors::DTYPES`], which is
/// its `Dtype` enum's order, so that every tensor stays aligned to its
/// element size), then by name. Positions in `tensors`.
pub fn safetensors_order(tensors: &[StoredTensor]) -> Vec<usize> {
    let rank = |e: ElementType| {
        let table = tensorizer_core::safetensors::DTYPES;
        table.iter().position(|d| d.element == Some(e)).unwrap_or(table.len())
    };
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&tensors[a], &tensors[b]);
        rank(b.element).cmp(&rank(a.element)).then_with(|| a.name.cmp(&b.name))
    });
    order
}

/// A safetensors header for `tensors` stored back to back in the order
/// given: the JSON's length, then the JSON (`__metadata__` first when
/// `metadata` is not empty, then each tensor), padded with spaces to a
/// multiple of 8 bytes, as safetensors' writer lays it out. `src` names
/// the input in errors: a repeated name, a dtype or shape safetensors
/// cannot store.
pub fn safetensors_header(
    src: &str,
    tensors: &[StoredTensor],
    metadata: &[(String, String)],
) -> Result<Vec<u8>> {
    use std::fmt::Write as _;
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    let mut json = String::from("{");
    if !metadata.is_empty() {
        json.push_str("\"__metadata__\":{");
        for (i, (k, v)) in metadata.iter().enumerate() {
            let _ = write!(json, "{}{}:{}", if i > 0 { "," } else { "" }, quote(k), quote(v));
        }
        json.push('}');
    }
    let mut names = std::collections::HashSet::new();
    let mut offset = 0u64;
    for t in tensors {
        let fail = |why: &str| Error::Invalid(format!("{src}: tensor {:?}: {why}", t.name));
        if !names.insert(t.name.as_str()) {
            return Err(fail("two tensors have this name (after flattening)"));
        }
        let (dtype, shape) = tensorizer_core::safetensors::to_safetensors(t.element, &t.shape)
            .ok_or_else(|| fail("safetensors cannot store this dtype and shape"))?;
        let len = Dtype::from_element(t.element)
            .nbytes(&t.shape)
            .and_then(|n| offset.checked_add(n))
            .ok_or_else(|| fail("the tensor's size overflows"))?;
        let sep = if json.len() > 1 { "," } else { "" };
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        let _ = write!(
            json,
            "{sep}{}:{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{offset},{len}]}}",
            quote(&t.name),
            dims.join(",")
        );
        offset = len;
    }
    json.push('}');
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    Ok([&(json.len() as u64).to_le_bytes()[..], json.as_bytes()].concat())
}

/// `tensors` with their bytes `data` in safetensors' order
/// ([`safetensors_order`]) after their header: the file's header and the
/// data pieces to write after it, checked to be each tensor's size.
fn laid_out<'d>(
    src: &str,
    tensors: &[StoredTensor],
    data: &[&'d [u8]],
    metadata: &[(String, String)],
) -> Result<(Vec<u8>, Vec<&'d [u8]>)> {
    if tensors.len() != data.len() {
        return Err(Error::Invalid(format!("{src}: one buffer per tensor is required")));
    }
    let order = safetensors_order(tensors);
    let ordered: Vec<StoredTensor> = order.iter().map(|&i| tensors[i].clone()).collect();
    let header = safetensors_header(src, &ordered, metadata)?;
    for &i in &order {
        let t = &tensors[i];
        if Dtype::from_element(t.element).nbytes(&t.shape) != Some(data[i].len() as u64) {
            return Err(Error::Invalid(format!(
                "{src}: tensor {:?}: {} bytes given for shape {:?}",
                t.name,
                data[i].len(),
                t.shape
            )));
        }
    }
    Ok((header, order.iter().map(|&i| data[i]).collect()))
}

/// A safetensors file of `tensors` (their bytes in `data`) in memory, laid
/// out as safetensors' writer lays it out.
pub fn safetensors_bytes(
    tensors: &[StoredTensor],
    data: &[&[u8]],
    metadata: &[(String, String)],
) -> Result<Vec<u8>> {
    let (header, pieces) = laid_out("safetensors bytes", tensors, data, metadata)?;
    let total = pieces.iter().map(|p| p.len()).sum::<usize>() + header.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&header);
    pieces.iter().for_each(|p| out.extend_from_slice(p));
    Ok(out)
}

/// Writes [`safetensors_bytes`]'s layout to `path` atomically: a file
/// already there is replaced only once the new one is complete and durable.
pub fn write_safetensors(
    path: &std::path::Path,
    tensors: &[StoredTensor],
    data: &[&[u8]],
    metadata: &[(String, String)],
) -> Result<()> {
    use std::io::Write as _;
    let name = path.display().to_string();
    let (header, pieces) = laid_out(&name, tensors, data, metadata)?;
    let mut file = crate::write::atomic::AtomicFile::create(path)?;
    let mut out = std::io::BufWriter::with_capacity(8 << 20, file.file_mut());
    let mut at = 0u64;
    for piece in std::iter::once(&header[..]).chain(pieces) {
        out.write_all(piece).map_err(crate::error::io_err(&name, at))?;
        at += piece.len() as u64;
    }
    out.flush().map_err(crate::error::io_err(&name, at))?;
    drop(out);
    file.commit()
}
