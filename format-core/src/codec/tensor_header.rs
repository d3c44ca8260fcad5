//! The per-tensor header that precedes each tensor's data: parse and emit
//! side by side.

use alloc::vec::Vec;
use core::ops::Range;

use super::crypt_info::CryptInfo;
use super::cursor::{Cursor, Emit};
use super::metadata::{MetadataEntry, emit_shape, parse_shape};
use crate::dtype::Dtype;
use crate::error::{Error, HashKind, Result};
use crate::layout::MAX_TENSOR_HEADER_LEN;
use crate::path::TensorPath;
use crate::tensor_type::TensorType;

const HASH_CRC32: u8 = 0;
const HASH_SHA256: u8 = 1;

/// A stored hash value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashValue {
    /// zlib CRC-32 of the hashable header followed by the data.
    Crc32(u32),
    /// SHA-256 of the hashable header followed by the data.
    Sha256([u8; 32]),
}

impl HashValue {
    /// Which hash this is.
    pub fn kind(&self) -> HashKind {
        match self {
            Self::Crc32(_) => HashKind::Crc32,
            Self::Sha256(_) => HashKind::Sha256,
        }
    }

    fn value_len(&self) -> usize {
        match self {
            Self::Crc32(_) => 4,
            Self::Sha256(_) => 32,
        }
    }
}

/// Where the hash values and the crypt-info block sit inside an encoded
/// header (offsets relative to the header start).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderLayout {
    /// Byte range of each hash value, in stored order.
    pub hash_values: Vec<Range<usize>>,
    /// Byte range of the crypt-info block including its u64 length.
    pub crypt_info: Option<Range<usize>>,
    /// Byte range of the MACs of the encryption chunk, if any.
    pub macs: Option<Range<usize>>,
    /// Total header length.
    pub len: usize,
}

impl HeaderLayout {
    /// The bytes that are hashed: `raw` with hash values zeroed and the
    /// crypt-info block removed.
    pub fn hashable(&self, raw: &[u8]) -> Vec<u8> {
        let mut out = raw.to_vec();
        for r in &self.hash_values {
            if let Some(v) = out.get_mut(r.clone()) {
                v.fill(0);
            }
        }
        if let Some(r) = &self.crypt_info
            && r.end <= out.len()
        {
            out.drain(r.clone());
        }
        out
    }
}

/// A parsed tensor header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorHeader {
    /// Index of the owning module (0 for state dicts).
    pub module_index: u16,
    /// PARAM, BUFFER or STATE_DICT.
    pub tensor_type: TensorType,
    /// The tensor's name.
    pub path: TensorPath,
    /// The dtype string.
    pub dtype: Dtype,
    /// The shape.
    pub shape: Vec<u64>,
    /// Whether the shape is stored with u64 dimensions.
    pub long_dims: bool,
    /// Stored hashes, in stored order.
    pub hashes: Vec<HashValue>,
    /// The crypt-info block (files with crypt info only).
    pub crypt_info: Option<CryptInfo>,
    /// Unparsed bytes between the last field and the trailing data length
    /// (our alignment padding; tensorizer tolerates and hashes them).
    pub padding: u64,
    /// Bytes of data that follow the header.
    pub data_length: u64,
}

impl TensorHeader {
    /// Parses a complete header. `bytes` must be exactly the header (the
    /// metadata entry gives its length); `offset` is its absolute position.
    pub fn parse(
        bytes: &[u8],
        offset: u64,
        long_dims: bool,
        has_crypt_info: bool,
    ) -> Result<(Self, HeaderLayout)> {
        let total = bytes.len();
        let body_end = body_end(bytes, offset)?;
        let mut c = Cursor::new(&bytes[..body_end], offset);
        c.u64()?;
        let module_index = c.u16()?;
        let type_at = c.offset();
        let tensor_type = TensorType::from_u8(c.u8()?)
            .ok_or_else(|| Error::malformed(type_at, "unknown tensor type"))?;
        let name_len = c.u16()?;
        let name_at = c.offset();
        let path = TensorPath::parse(c.take(name_len.into())?, name_at)?;
        if matches!(path, TensorPath::Structured(_)) && tensor_type != TensorType::StateDict {
            return Err(Error::InvalidName {
                offset: name_at,
                reason: "structured path on a non-state-dict tensor",
            });
        }
        let dtype_len = c.u8()?;
        let dtype_at = c.offset();
        let dtype = Dtype::parse(c.take(dtype_len.into())?, dtype_at)?;
        let shape = parse_shape(&mut c, long_dims)?;

        let mut layout = HeaderLayout { len: total, ..HeaderLayout::default() };
        let hashes = parse_hashes(&mut c, offset, &mut layout)?;

        let crypt_info =
            if has_crypt_info { Some(parse_crypt_info(&mut c, &mut layout)?) } else { None };
        let padding = c.remaining() as u64;
        let tail_at = offset + body_end as u64;
        let mut tail = Cursor::new(&bytes[body_end..], tail_at);
        let data_length = u64::try_from(tail.i64()?)
            .map_err(|_| Error::malformed(tail_at, "negative data length"))?;
        let header = Self {
            module_index,
            tensor_type,
            path,
            dtype,
            shape,
            long_dims,
            hashes,
            crypt_info,
            padding,
            data_length,
        };
        Ok((header, layout))
    }

    /// Length of the encoded header without padding.
    pub fn unpadded_len(&self) -> Result<u64> {
        let name = self.path.to_bytes()?.len() as u64;
        let dims = self.shape.len() as u64 * if self.long_dims { 8 } else { 4 };
        let hashes: u64 = self.hashes.iter().map(|h| 2 + h.value_len() as u64).sum();
        let crypt = self.crypt_info.as_ref().map_or(0, CryptInfo::encoded_len);
        Ok(8 + 2
            + 1
            + 2
            + name
            + 1
            + self.dtype.as_str().len() as u64
            + 1
            + dims
            + 2
            + 1
            + hashes
            + crypt
            + 8)
    }

    /// Appends the encoded header and returns where its hash values and
    /// crypt info sit.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<HeaderLayout> {
        let start = out.len();
        let total = self.unpadded_len()? + self.padding;
        out.put_u64(total);
        out.put_u16(self.module_index);
        out.put_u8(self.tensor_type.as_u8());
        let name = self.path.to_bytes()?;
        out.put_u16(name.len() as u16);
        out.put(&name);
        let dtype = self.dtype.as_str().as_bytes();
        out.put_u8(u8::try_from(dtype.len()).map_err(|_| Error::invalid("dtype string too long"))?);
        out.put(dtype);
        emit_shape(out, &self.shape, self.long_dims)?;
        let mut layout = HeaderLayout::default();
        let block_len: usize = 1 + self.hashes.iter().map(|h| 2 + h.value_len()).sum::<usize>();
        out.put_u16(block_len as u16);
        out.put_u8(self.hashes.len() as u8);
        for h in &self.hashes {
            match h {
                HashValue::Crc32(v) => {
                    out.put(&[HASH_CRC32, 4]);
                    layout.hash_values.push(out.len() - start..out.len() - start + 4);
                    out.put(&v.to_le_bytes());
                }
                HashValue::Sha256(d) => {
                    out.put(&[HASH_SHA256, 32]);
                    layout.hash_values.push(out.len() - start..out.len() - start + 32);
                    out.put(d);
                }
            }
        }
        if let Some(info) = &self.crypt_info {
            let at = out.len() - start;
            info.emit(out);
            layout.crypt_info = Some(at..out.len() - start);
            layout.macs = mac_range(info, at);
        }
        let padding =
            usize::try_from(self.padding).map_err(|_| Error::invalid("padding too large"))?;
        out.resize(out.len() + padding, 0);
        out.put_u64(self.data_length);
        layout.len = out.len() - start;
        Ok(layout)
    }

    /// Checks the header against its metadata entry.
    pub fn check_against(&self, entry: &MetadataEntry) -> Result<()> {
        let offset = entry.header_offset;
        let mismatch = |field| Err(Error::HeaderMismatch { offset, field });
        if self.path != entry.path {
            return mismatch("name");
        }
        if self.dtype != entry.dtype {
            return mismatch("dtype");
        }
        if self.shape != entry.shape {
            return mismatch("shape");
        }
        if self.tensor_type != entry.tensor_type {
            return mismatch("tensor type");
        }
        if self.data_length != entry.data_length {
            return mismatch("data length");
        }
        Ok(())
    }
}

/// Range of the MAC array inside a crypt-info block emitted at `start`.
fn mac_range(info: &CryptInfo, start: usize) -> Option<Range<usize>> {
    let mut pos = start + 8 + 2;
    for chunk in &info.chunks {
        pos += 8;
        if let super::crypt_info::CryptChunk::Parallel { macs, .. } = chunk {
            let macs_at = pos + 2 + 8 + 24 + 8;
            return Some(macs_at..macs_at + 16 * macs.len());
        }
        pos += usize::try_from(chunk.encoded_len()).unwrap_or(usize::MAX / 2);
    }
    None
}

/// Where a header's body ends (before its trailing data length), once its
/// size field is checked against `bytes`, the whole header.
fn body_end(bytes: &[u8], offset: u64) -> Result<usize> {
    let total = bytes.len();
    if total as u64 > MAX_TENSOR_HEADER_LEN {
        return Err(Error::limit(
            offset,
            "tensor header length",
            total as u64,
            MAX_TENSOR_HEADER_LEN,
        ));
    }
    let size = Cursor::new(bytes, offset).u64()?;
    if size != total as u64 {
        return Err(Error::HeaderMismatch { offset, field: "header size" });
    }
    total
        .checked_sub(8)
        .filter(|&e| e >= 8)
        .ok_or_else(|| Error::malformed(offset, "tensor header too short"))
}

/// The hash block at `c` (a length-prefixed count of hashes), each value's
/// place recorded in `layout`; `offset` is the header's.
fn parse_hashes(
    c: &mut Cursor<'_>,
    offset: u64,
    layout: &mut HeaderLayout,
) -> Result<Vec<HashValue>> {
    let block_len = c.u16()?;
    let block_start = c.position();
    let block = c.take(block_len.into())?;
    let mut h = Cursor::new(block, offset + block_start as u64);
    let count = h.u8()?;
    let mut hashes = Vec::with_capacity(usize::from(count).min(block.len() / 2));
    for _ in 0..count {
        let at = h.offset();
        let kind = h.u8()?;
        let len = h.u8()?;
        let value_start = block_start + h.position();
        let value = h.take(len.into())?;
        let hash = match (kind, value.len()) {
            (HASH_CRC32, 4) => {
                HashValue::Crc32(u32::from_le_bytes([value[0], value[1], value[2], value[3]]))
            }
            (HASH_SHA256, 32) => {
                let mut d = [0u8; 32];
                d.copy_from_slice(value);
                HashValue::Sha256(d)
            }
            (HASH_CRC32 | HASH_SHA256, _) => {
                return Err(Error::malformed(at, "hash value has the wrong length"));
            }
            _ => return Err(Error::malformed(at, "unknown hash type")),
        };
        layout.hash_values.push(value_start..value_start + value.len());
        hashes.push(hash);
    }
    // Writers size the block exactly; leftover bytes mean a damaged count.
    if h.remaining() != 0 {
        return Err(Error::malformed(h.offset(), "hash block longer than its entries"));
    }
    Ok(hashes)
}

/// The crypt-info block at `c` (length-prefixed), its place and its MACs'
/// recorded in `layout`.
fn parse_crypt_info(c: &mut Cursor<'_>, layout: &mut HeaderLayout) -> Result<CryptInfo> {
    let start = c.position();
    let len = c.u64()?;
    let body_at = c.offset();
    let body = c.take(len)?;
    let info = CryptInfo::parse(body, body_at)?;
    layout.crypt_info = Some(start..c.position());
    layout.macs = mac_range(&info, start);
    Ok(info)
}
