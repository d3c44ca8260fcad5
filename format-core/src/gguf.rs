//! GGUF headers (llama.cpp's model format, versions 2 and 3), header
//! only: the magic and version, the metadata key/value pairs and the
//! tensor infos, never the tensor data. Everything is little-endian:
//!
//! ```text
//! "GGUF" | version u32 | tensor_count u64 | kv_count u64
//! kv_count × (key: string, value_type u32, value)
//! tensor_count × (name: string, n_dims u32, dims u64 × n_dims, ggml_type u32, offset u64)
//! padding to general.alignment (default 32) | tensor data
//! ```
//!
//! A string is a u64 length and that many bytes; an array is an element
//! type u32, a count u64 and the elements. Every count and length is
//! bounded by a named limit ([`crate::layout`]) before anything is
//! reserved, and every size is computed with checked arithmetic. Large
//! arrays (a tokenizer's vocabulary) are walked and counted, not kept.

use alloc::string::String;
use alloc::vec::Vec;

use crate::ElementType;
use crate::codec::cursor::Cursor;
use crate::error::{Error, Result};
use crate::layout::{
    MAX_GGUF_ARRAY_DEPTH, MAX_GGUF_ARRAY_LEN, MAX_GGUF_DIMS, MAX_GGUF_HEADER_LEN, MAX_GGUF_KVS,
    MAX_GGUF_STRING_LEN, MAX_TENSORS,
};
use crate::source::RandomAccess;

/// The first four bytes of a GGUF file.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// The data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The smallest metadata pair: an empty key, a type and a one-byte value.
const MIN_KV_LEN: u64 = 8 + 4 + 1;

/// The smallest tensor info: an empty name, no dimensions, type, offset.
const MIN_TENSOR_INFO_LEN: u64 = 8 + 4 + 4 + 8;

/// A metadata value (arrays are summarised: element type and count).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An unsigned integer (UINT8, UINT16, UINT32, UINT64).
    Uint(u64),
    /// A signed integer (INT8, INT16, INT32, INT64).
    Int(i64),
    /// A float (FLOAT32, FLOAT64).
    Float(f64),
    /// A BOOL.
    Bool(bool),
    /// A STRING, decoded lossily.
    Str(String),
    /// An ARRAY: its element type and length.
    Array {
        /// The element value type (0 to 12).
        elem: u32,
        /// The element count.
        len: u64,
    },
}

/// One metadata key/value pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Kv {
    /// The key, decoded lossily.
    pub key: String,
    /// The value.
    pub value: Value,
    /// Absolute offset of the value (for a string, of its first byte).
    pub value_offset: u64,
}

/// One tensor info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The name, decoded lossily.
    pub name: String,
    /// Dimensions, innermost first (ggml's `ne`).
    pub dims: Vec<u64>,
    /// The ggml type id ([`ggml_type`]).
    pub ggml_type: u32,
    /// The data offset, relative to [`Header::data_start`].
    pub offset: u64,
    /// Absolute offset of this info record.
    pub info_offset: u64,
}

impl TensorInfo {
    /// The data's size in bytes, or `None` for an unknown type, a first
    /// dimension that is not a whole number of blocks, or an overflow.
    pub fn nbytes(&self) -> Option<u64> {
        let t = ggml_type(self.ggml_type)?;
        let first = *self.dims.first().unwrap_or(&1);
        if !first.is_multiple_of(t.block) {
            return None;
        }
        let rows = self.dims.iter().skip(1).try_fold(1u64, |n, &d| n.checked_mul(d))?;
        (first / t.block).checked_mul(t.type_size)?.checked_mul(rows)
    }
}

/// A parsed GGUF header.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The version (2 or 3).
    pub version: u32,
    /// The metadata, in file order.
    pub kvs: Vec<Kv>,
    /// The tensor infos, in file order.
    pub tensors: Vec<TensorInfo>,
    /// `general.alignment`, or [`DEFAULT_ALIGNMENT`].
    pub alignment: u64,
    /// Where the tensor infos end.
    pub infos_end: u64,
    /// Where the tensor data starts: `infos_end` rounded up to the
    /// alignment.
    pub data_start: u64,
}

impl Header {
    /// The value of `key`, when present.
    pub fn get(&self, key: &str) -> Option<&Kv> {
        self.kvs.iter().find(|kv| kv.key == key)
    }
}

/// A ggml tensor type: its name, elements per block and bytes per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// ggml's name (`F32`, `Q4_K`, ...).
    pub name: &'static str,
    /// Elements per block.
    pub block: u64,
    /// Bytes per block.
    pub type_size: u64,
}

impl GgmlType {
    /// The element type of an unquantized ggml type (one element per
    /// block, stored as torch stores it); `None` for a quantized one.
    pub fn element(self) -> Option<ElementType> {
        Some(match self.name {
            "F32" => ElementType::F32,
            "F16" => ElementType::F16,
            "BF16" => ElementType::BF16,
            "F64" => ElementType::F64,
            "I8" => ElementType::I8,
            "I16" => ElementType::I16,
            "I32" => ElementType::I32,
            "I64" => ElementType::I64,
            _ => return None,
        })
    }
}

/// The ggml types, by id (ids ggml removed are absent).
const GGML_TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

/// The ggml type with id `id`, if ggml defines it.
pub fn ggml_type(id: u32) -> Option<GgmlType> {
    GGML_TYPES.iter().find(|t| t.0 == id).map(|&(_, name, block, type_size)| GgmlType {
        name,
        block,
        type_size,
    })
}

/// Reads the header of the GGUF file in `src`, a growing prefix at a
/// time (1 MiB, then as [`grow`] says).
pub fn read<R: RandomAccess + ?Sized>(src: &mut R) -> Result<Header> {
    let file_len = src.len();
    let mut len = file_len.min(MAX_GGUF_HEADER_LEN).min(1 << 20);
    loop {
        let buf = crate::scan::read_vec(src, 0, len, "GGUF header")?;
        match parse(&buf) {
            Err(e) => len = grow(len, file_len, e)?,
            done => return done,
        }
    }
}

/// Where a header read as a growing prefix goes next, for every host
/// (synchronous [`read`], the browser's asynchronous reads): after [`parse`]
/// of the first `have` bytes of a `file_len`-byte file failed with
/// `error`, the length of the prefix to read and parse again (what the
/// parser needs, at least twice `have`, at most [`MAX_GGUF_HEADER_LEN`]
/// and the file), or the error to fail with: a header that runs past the
/// limit is [`Error::LimitExceeded`], one past the file or any other
/// failure is `error` itself.
pub fn grow(have: u64, file_len: u64, error: Error) -> Result<u64> {
    let cap = file_len.min(MAX_GGUF_HEADER_LEN);
    match error {
        Error::Truncated { offset, needed } if have < cap => {
            Ok(offset.saturating_add(needed).max(have.saturating_mul(2)).min(cap))
        }
        Error::Truncated { offset, .. } if have < file_len => Err(Error::LimitExceeded {
            offset,
            what: "GGUF header length",
            value: offset,
            limit: MAX_GGUF_HEADER_LEN,
        }),
        other => Err(other),
    }
}

/// Parses a GGUF header from `buf`, the file's first bytes; a header
/// that runs past `buf` is [`Error::Truncated`].
pub fn parse(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor::new(buf, 0);
    if &c.array::<4>()? != MAGIC {
        return Err(Error::Malformed { offset: 0, reason: "not a GGUF file" });
    }
    let version = c.u32()?;
    if !(2..=3).contains(&version) {
        return Err(Error::UnsupportedVersion { version });
    }
    let tensor_count = bounded(&mut c, "GGUF tensor count", MAX_TENSORS)?;
    let kv_count = bounded(&mut c, "GGUF metadata count", MAX_GGUF_KVS)?;
    // Reserved for what the bytes left can hold at the smallest record
    // size: a 24-byte file declaring a million pairs costs nothing.
    let mut kvs = reserve(kv_count.min(c.remaining() as u64 / MIN_KV_LEN), c.offset())?;
    for _ in 0..kv_count {
        kvs.push(kv(&mut c)?);
    }
    let fit = c.remaining() as u64 / MIN_TENSOR_INFO_LEN;
    let mut tensors = reserve(tensor_count.min(fit), c.offset())?;
    for _ in 0..tensor_count {
        tensors.push(tensor_info(&mut c)?);
    }
    let infos_end = c.offset();
    let alignment = match kvs.iter().find(|kv| kv.key == "general.alignment") {
        Some(Kv { value: Value::Uint(a), value_offset, .. }) => {
            if *a == 0 || !a.is_power_of_two() {
                let reason = "general.alignment is not a power of two";
                return Err(Error::Malformed { offset: *value_offset, reason });
            }
            *a
        }
        Some(kv) => {
            let reason = "general.alignment is not an unsigned integer";
            return Err(Error::Malformed { offset: kv.value_offset, reason });
        }
        None => DEFAULT_ALIGNMENT,
    };
    let data_start = infos_end
        .checked_next_multiple_of(alignment)
        .ok_or(Error::Malformed { offset: infos_end, reason: "data start overflows" })?;
    Ok(Header { version, kvs, tensors, alignment, infos_end, data_start })
}

fn bounded(c: &mut Cursor<'_>, what: &'static str, limit: u64) -> Result<u64> {
    let offset = c.offset();
    let value = c.u64()?;
    if value > limit {
        return Err(Error::LimitExceeded { offset, what, value, limit });
    }
    Ok(value)
}

fn reserve<T>(n: u64, offset: u64) -> Result<Vec<T>> {
    let mut v = Vec::new();
    let no_memory = || Error::OutOfMemory { offset, what: "GGUF header", bytes: n };
    v.try_reserve_exact(usize::try_from(n).map_err(|_| no_memory())?).map_err(|_| no_memory())?;
    Ok(v)
}

fn string<'a>(c: &mut Cursor<'a>) -> Result<&'a [u8]> {
    let len = bounded(c, "GGUF string length", MAX_GGUF_STRING_LEN)?;
    c.take(len)
}

fn kv(c: &mut Cursor<'_>) -> Result<Kv> {
    let key = String::from_utf8_lossy(string(c)?).into_owned();
    let type_offset = c.offset();
    let value_type = c.u32()?;
    let value_offset = c.offset();
    let value = value(c, value_type, type_offset, 0)?;
    let value_offset = if matches!(value, Value::Str(_)) { value_offset + 8 } else { value_offset };
    Ok(Kv { key, value, value_offset })
}

/// Reads one value of `value_type` (its type field at `type_offset`).
fn value(c: &mut Cursor<'_>, value_type: u32, type_offset: u64, depth: usize) -> Result<Value> {
    Ok(match value_type {
        0 => Value::Uint(c.u8()?.into()),
        1 => Value::Int(i64::from(c.u8()? as i8)),
        2 => Value::Uint(c.u16()?.into()),
        3 => Value::Int(i64::from(c.u16()? as i16)),
        4 => Value::Uint(c.u32()?.into()),
        5 => Value::Int(c.i32()?.into()),
        6 => Value::Float(f32::from_bits(c.u32()?).into()),
        7 => Value::Bool(c.u8()? != 0),
        8 => Value::Str(String::from_utf8_lossy(string(c)?).into_owned()),
        9 => array(c, depth)?,
        10 => Value::Uint(c.u64()?),
        11 => Value::Int(c.i64()?),
        12 => Value::Float(f64::from_bits(c.u64()?)),
        _ => {
            return Err(Error::Malformed {
                offset: type_offset,
                reason: "unknown GGUF value type",
            });
        }
    })
}

/// An array: walked element by element (strings and nested arrays have
/// their own lengths), kept as its type and count.
fn array(c: &mut Cursor<'_>, depth: usize) -> Result<Value> {
    if depth >= MAX_GGUF_ARRAY_DEPTH {
        let reason = "GGUF arrays nested too deep";
        return Err(Error::Malformed { offset: c.offset(), reason });
    }
    let type_offset = c.offset();
    let elem = c.u32()?;
    let len = bounded(c, "GGUF array length", MAX_GGUF_ARRAY_LEN)?;
    let fixed = match elem {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    };
    if let Some(width) = fixed {
        c.take(len.saturating_mul(width))?;
    } else {
        for _ in 0..len {
            value(c, elem, type_offset, depth + 1)?;
        }
    }
    Ok(Value::Array { elem, len })
}

fn tensor_info(c: &mut Cursor<'_>) -> Result<TensorInfo> {
    let info_offset = c.offset();
    let name = String::from_utf8_lossy(string(c)?).into_owned();
    let dims_offset = c.offset();
    let n_dims = c.u32()?;
    if u64::from(n_dims) > MAX_GGUF_DIMS {
        let (what, value, limit) = ("GGUF tensor dimensions", n_dims.into(), MAX_GGUF_DIMS);
        return Err(Error::LimitExceeded { offset: dims_offset, what, value, limit });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64()?);
    }
    let ggml_type = c.u32()?;
    let offset = c.u64()?;
    Ok(TensorInfo { name, dims, ggml_type, offset, info_offset })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::source::SliceSource;

    /// A GGUF file: `kvs` as (key, type, value bytes), `tensors` as
    /// (name, dims, type, offset), then `data` after alignment to 32.
    pub(crate) fn gguf(
        kvs: &[(&str, u32, Vec<u8>)],
        tensors: &[(&str, &[u64], u32, u64)],
        data: &[u8],
    ) -> Vec<u8> {
        let mut f = b"GGUF".to_vec();
        f.extend_from_slice(&3u32.to_le_bytes());
        f.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        f.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
        for (k, t, v) in kvs {
            f.extend_from_slice(&gstr(k));
            f.extend_from_slice(&t.to_le_bytes());
            f.extend_from_slice(v);
        }
        for (name, dims, t, off) in tensors {
            f.extend_from_slice(&gstr(name));
            f.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in *dims {
                f.extend_from_slice(&d.to_le_bytes());
            }
            f.extend_from_slice(&t.to_le_bytes());
            f.extend_from_slice(&off.to_le_bytes());
        }
        while !f.len().is_multiple_of(32) {
            f.push(0);
        }
        f.extend_from_slice(data);
        f
    }

    /// A GGUF string's bytes.
    pub(crate) fn gstr(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    fn vocab(n: usize) -> Vec<u8> {
        let mut v = 8u32.to_le_bytes().to_vec();
        v.extend_from_slice(&(n as u64).to_le_bytes());
        for i in 0..n {
            v.extend_from_slice(&gstr(&alloc::format!("tok{i}")));
        }
        v
    }

    #[test]
    fn a_header_parses_with_metadata_and_tensor_infos() {
        let kvs = [
            ("general.architecture", 8, gstr("llama")),
            ("llama.block_count", 4, 2u32.to_le_bytes().to_vec()),
            ("tokenizer.ggml.tokens", 9, vocab(3)),
            ("f", 6, 1.5f32.to_le_bytes().to_vec()),
        ];
        let tensors: [(&str, &[u64], u32, u64); 2] = [("a", &[4, 2], 0, 0), ("q", &[64], 8, 32)];
        let f = gguf(&kvs, &tensors, &[0; 32 + 68]);
        let h = read(&mut SliceSource::new(&f)).unwrap();
        assert_eq!((h.version, h.kvs.len(), h.tensors.len(), h.alignment), (3, 4, 2, 32));
        assert_eq!(h.get("general.architecture").unwrap().value, Value::Str("llama".into()));
        assert_eq!(h.kvs[2].value, Value::Array { elem: 8, len: 3 });
        assert_eq!(h.kvs[3].value, Value::Float(1.5));
        assert_eq!(h.data_start % 32, 0);
        assert_eq!(h.tensors[0].nbytes(), Some(32));
        assert_eq!(h.tensors[1].nbytes(), Some(68));
        assert_eq!(ggml_type(h.tensors[1].ggml_type).unwrap().name, "Q8_0");
        let name_at = h.kvs[0].value_offset as usize;
        assert_eq!(&f[name_at..name_at + 5], b"llama");
    }

    #[test]
    fn bad_headers_are_typed_errors_with_offsets() {
        assert!(matches!(parse(b"GGML\x03\0\0\0"), Err(Error::Malformed { offset: 0, .. })));
        assert_eq!(parse(b"GGUF\x01\0\0\0").unwrap_err(), Error::UnsupportedVersion { version: 1 });
        let f = gguf(&[], &[], &[]);
        let mut huge = f[..16].to_vec();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        huge.extend_from_slice(&0u64.to_le_bytes());
        assert!(matches!(parse(&huge), Err(Error::LimitExceeded { offset: 8, .. })));
        let f = gguf(&[("k", 8, gstr("value"))], &[], &[]);
        assert!(matches!(parse(&f[..40]), Err(Error::Truncated { offset: 37, .. })));
        let mut long = gguf(&[("k", 8, gstr("v"))], &[], &[]);
        long[37..45].copy_from_slice(&(MAX_GGUF_STRING_LEN + 1).to_le_bytes());
        assert!(matches!(parse(&long), Err(Error::LimitExceeded { offset: 37, .. })));
        let bad_type = gguf(&[("k", 13, Vec::new())], &[], &[]);
        assert!(matches!(parse(&bad_type), Err(Error::Malformed { offset: 33, .. })));
        let dims: [(&str, &[u64], u32, u64); 1] = [("t", &[1, 1, 1, 1, 1], 0, 0)];
        assert!(matches!(parse(&gguf(&[], &dims, &[])), Err(Error::LimitExceeded { .. })));
        let align = gguf(&[("general.alignment", 4, 3u32.to_le_bytes().to_vec())], &[], &[]);
        assert!(matches!(parse(&align), Err(Error::Malformed { .. })));
        let mut nested = 9u32.to_le_bytes().to_vec();
        for _ in 0..MAX_GGUF_ARRAY_DEPTH {
            nested.extend_from_slice(&1u64.to_le_bytes());
            nested.extend_from_slice(&9u32.to_le_bytes());
        }
        let deep = gguf(&[("k", 9, nested)], &[], &[]);
        assert!(matches!(parse(&deep), Err(Error::Malformed { .. } | Error::Truncated { .. })));
    }

    #[test]
    fn a_header_past_the_first_read_is_read_in_a_larger_prefix() {
        let big = "x".repeat(3 << 20);
        let f = gguf(&[("tokenizer.chat_template", 8, gstr(&big))], &[], &[]);
        let h = read(&mut SliceSource::new(&f)).unwrap();
        assert_eq!(h.kvs[0].value, Value::Str(big));
        let cut = &f[..f.len() - 40];
        assert!(matches!(read(&mut SliceSource::new(cut)), Err(Error::Truncated { .. })));
    }

    #[test]
    fn every_cut_and_flipped_byte_is_an_error_or_a_header() {
        let kvs = [("a", 8, gstr("x")), ("v", 9, vocab(4)), ("u", 10, 7u64.to_le_bytes().to_vec())];
        let tensors: [(&str, &[u64], u32, u64); 1] = [("t", &[4, 2], 0, 0)];
        let f = gguf(&kvs, &tensors, &[0; 32]);
        for n in 0..f.len() {
            let _ = parse(&f[..n]);
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut g = f.clone();
            for _ in 0..4 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let i = (seed >> 33) as usize % g.len();
                g[i] = (seed >> 17) as u8;
            }
            if let Ok(h) = parse(&g) {
                assert!(h.infos_end <= g.len() as u64 && h.data_start >= h.infos_end);
            }
        }
    }

    #[test]
    fn sizes_are_checked() {
        let t = |dims: &[u64], ty| TensorInfo {
            name: String::new(),
            dims: dims.into(),
            ggml_type: ty,
            offset: 0,
            info_offset: 0,
        };
        assert_eq!(t(&[33], 8).nbytes(), None);
        assert_eq!(t(&[u64::MAX, u64::MAX], 0).nbytes(), None);
        assert_eq!(t(&[4], 99).nbytes(), None);
        assert_eq!(t(&[], 0).nbytes(), Some(4));
        assert_eq!(t(&[256, 3], 12).nbytes(), Some(3 * 144));
    }
}
