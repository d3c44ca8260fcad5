//! The metadata index ("tensor index") and its entries: parse and emit side
//! by side.

use alloc::vec::Vec;

use super::cursor::{Cursor, Emit};
use super::file_header::FileHeader;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::layout::{
    MAX_TENSOR_HEADER_LEN, METADATA_OFFSET, METADATA_TAG_LONG, METADATA_TAG_SHORT,
    MIN_METADATA_ENTRY_LEN, ParseLimits, TENSOR_COUNT_OFFSET,
};
use crate::path::TensorPath;
use crate::registry;
use crate::tensor_type::TensorType;

/// One metadata index entry: where a tensor's header and data are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataEntry {
    /// The tensor's name.
    pub path: TensorPath,
    /// PARAM, BUFFER or STATE_DICT.
    pub tensor_type: TensorType,
    /// The dtype string.
    pub dtype: Dtype,
    /// The shape; an empty shape is a scalar.
    pub shape: Vec<u64>,
    /// Absolute offset of the tensor header.
    pub header_offset: u64,
    /// Absolute offset of the data (= header offset + header length).
    pub data_offset: u64,
    /// Bytes of data stored (0 for meta tensors).
    pub data_length: u64,
    /// Whether dimensions are stored as u64 (metadata tag 5, data version 5).
    pub long_dims: bool,
}

impl MetadataEntry {
    /// Length of the tensor header.
    pub fn header_len(&self) -> u64 {
        self.data_offset.saturating_sub(self.header_offset)
    }

    /// Bytes the tensor occupies in memory: item size × element count.
    pub fn nbytes(&self) -> u64 {
        // Checked when the entry was parsed or built.
        self.dtype.nbytes(&self.shape).unwrap_or(u64::MAX)
    }

    /// Whether this is a meta tensor: it has elements but no stored data.
    pub fn is_meta(&self) -> bool {
        self.data_length == 0 && self.nbytes() > 0
    }

    /// Absolute end of the data.
    pub fn data_end(&self) -> u64 {
        self.data_offset.saturating_add(self.data_length)
    }

    /// Whether a dimension needs the long (u64) layout.
    pub fn needs_long_dims(shape: &[u64]) -> bool {
        shape.iter().any(|&d| d > u64::from(u32::MAX))
    }

    fn parse(c: &mut Cursor<'_>, versioned: bool, max_depth: usize) -> Result<Self> {
        let long_dims = if versioned {
            let at = c.offset();
            match c.u32()? {
                METADATA_TAG_SHORT => false,
                METADATA_TAG_LONG => true,
                _ => return Err(Error::malformed(at, "unsupported metadata version tag")),
            }
        } else {
            false
        };
        let name_len = c.u16()?;
        let name_at = c.offset();
        let path = TensorPath::parse_limited(c.take(u64::from(name_len))?, name_at, max_depth)?;
        let type_at = c.offset();
        let tensor_type = TensorType::from_u8(c.u8()?)
            .ok_or_else(|| Error::malformed(type_at, "unknown tensor type"))?;
        let dtype_len = c.u8()?;
        let dtype_at = c.offset();
        let dtype = Dtype::parse(c.take(u64::from(dtype_len))?, dtype_at)?;
        let shape_at = c.offset();
        let shape = parse_shape(c, long_dims)?;
        let header_offset = c.u64()?;
        let data_offset = c.u64()?;
        let data_length = c.u64()?;
        let nbytes = dtype
            .nbytes(&shape)
            .ok_or_else(|| Error::malformed(shape_at, "tensor size overflows 64 bits"))?;
        if data_length != nbytes && data_length != 0 {
            return Err(Error::malformed(shape_at, "data length does not match dtype and shape"));
        }
        let Some(header_len) = data_offset.checked_sub(header_offset) else {
            return Err(Error::malformed(shape_at, "data offset precedes header offset"));
        };
        if header_len > MAX_TENSOR_HEADER_LEN {
            return Err(Error::limit(
                shape_at,
                "tensor header length",
                header_len,
                MAX_TENSOR_HEADER_LEN,
            ));
        }
        if header_len < 8 || data_offset.checked_add(data_length).is_none() {
            return Err(Error::malformed(shape_at, "impossible tensor offsets"));
        }
        Ok(Self {
            path,
            tensor_type,
            dtype,
            shape,
            header_offset,
            data_offset,
            data_length,
            long_dims,
        })
    }

    /// Appends the encoded entry (with a version tag when `versioned`).
    pub fn emit(&self, out: &mut Vec<u8>, versioned: bool) -> Result<()> {
        if versioned {
            out.put_u32(if self.long_dims { METADATA_TAG_LONG } else { METADATA_TAG_SHORT });
        }
        let name = self.path.to_bytes()?;
        out.put_u16(name.len() as u16);
        out.put(&name);
        out.put_u8(self.tensor_type.as_u8());
        out.put_u8(self.dtype.as_str().len() as u8);
        out.put(self.dtype.as_str().as_bytes());
        emit_shape(out, &self.shape, self.long_dims)?;
        out.put_u64(self.header_offset);
        out.put_u64(self.data_offset);
        out.put_u64(self.data_length);
        Ok(())
    }

    /// Encoded length of this entry.
    pub fn encoded_len(&self, versioned: bool) -> Result<u64> {
        let name = self.path.to_bytes()?.len() as u64;
        let dim = if self.long_dims { 8 } else { 4 };
        let tag = if versioned { 4 } else { 0 };
        Ok(tag
            + 2
            + name
            + 1
            + 1
            + self.dtype.as_str().len() as u64
            + 1
            + dim * self.shape.len() as u64
            + 24)
    }
}

pub(crate) fn parse_shape(c: &mut Cursor<'_>, long_dims: bool) -> Result<Vec<u64>> {
    let ndim = usize::from(c.u8()?);
    let width = if long_dims { 8 } else { 4 };
    // ndim ≤ 255, so this allocation is bounded by the format itself.
    let mut shape = Vec::with_capacity(ndim.min(c.remaining() / width));
    for _ in 0..ndim {
        shape.push(if long_dims { c.u64()? } else { u64::from(c.u32()?) });
    }
    Ok(shape)
}

pub(crate) fn emit_shape(out: &mut Vec<u8>, shape: &[u64], long_dims: bool) -> Result<()> {
    let ndim = u8::try_from(shape.len()).map_err(|_| Error::invalid("more than 255 dimensions"))?;
    out.put_u8(ndim);
    for &d in shape {
        if long_dims {
            out.put_u64(d);
        } else {
            let d =
                u32::try_from(d).map_err(|_| Error::invalid("dimension needs the long layout"))?;
            out.put_u32(d);
        }
    }
    Ok(())
}

/// The parsed metadata index: one entry per tensor, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// The entries, in the order they are stored.
    pub entries: Vec<MetadataEntry>,
}

impl Metadata {
    /// Parses the metadata index (the `header.metadata_len` bytes that
    /// follow the file header). Bytes after the last entry must be zero.
    ///
    /// Checks every entry's own consistency, that names do not conflict,
    /// and that tensors lie after the index, in order, without overlap.
    /// Applies the default [`ParseLimits`].
    pub fn parse(header: &FileHeader, bytes: &[u8]) -> Result<Self> {
        Self::parse_within(header, bytes, &ParseLimits::default())
    }

    /// [`Metadata::parse`] under caller-chosen limits on tensor count and
    /// path sizes.
    pub fn parse_within(header: &FileHeader, bytes: &[u8], limits: &ParseLimits) -> Result<Self> {
        if header.tensor_count > limits.max_tensors {
            return Err(Error::limit(
                TENSOR_COUNT_OFFSET,
                "tensor count",
                header.tensor_count,
                limits.max_tensors,
            ));
        }
        let expected = usize::try_from(header.metadata_len).unwrap_or(usize::MAX);
        if bytes.len() < expected {
            return Err(Error::truncated(
                METADATA_OFFSET + bytes.len() as u64,
                (expected - bytes.len()) as u64,
            ));
        }
        let bytes = &bytes[..expected];
        let mut c = Cursor::new(bytes, METADATA_OFFSET);
        let count = usize::try_from(header.tensor_count).unwrap_or(usize::MAX);
        // Reserve for what the bytes can hold, and no more than a page of
        // entries up front: growth is paid for by entries actually parsed.
        let mut entries =
            Vec::with_capacity(count.min(bytes.len() / MIN_METADATA_ENTRY_LEN).min(4096));
        let mut next_free = METADATA_OFFSET + header.metadata_len;
        let mut components = 0u64;
        for _ in 0..count {
            let at = c.offset();
            let entry =
                MetadataEntry::parse(&mut c, header.versioned_headers(), limits.max_path_depth)?;
            components = components.saturating_add(entry.path.depth() as u64);
            if components > limits.max_path_components {
                return Err(Error::limit(
                    at,
                    "tensor path components in the file",
                    components,
                    limits.max_path_components,
                ));
            }
            if entry.header_offset < next_free {
                return Err(Error::malformed(
                    at,
                    "tensor overlaps the index or the previous tensor",
                ));
            }
            next_free = entry.data_end();
            entries.push(entry);
        }
        registry::check_all(entries.iter().map(|e| &e.path))?;
        // Writers zero-fill the reservation: anything else is corruption.
        if let Some(pos) = first_non_zero(&bytes[c.position()..]) {
            return Err(Error::malformed(
                c.offset() + pos as u64,
                "non-zero bytes after the last index entry",
            ));
        }
        let total = entries.iter().try_fold(0u64, |acc, e| acc.checked_add(e.data_length));
        if total != Some(header.tensor_size) {
            return Err(Error::malformed(0x29, "tensor data total disagrees with the index"));
        }
        Ok(Self { entries })
    }

    /// Position of the tensor named `path`, if any (a linear scan; hosts
    /// keep their own map for repeated lookups).
    pub fn find(&self, path: &TensorPath) -> Option<usize> {
        self.entries.iter().position(|e| &e.path == path)
    }

    /// Checks that every tensor ends within a file of `file_len` bytes.
    pub fn check_file_len(&self, file_len: u64) -> Result<()> {
        match self.entries.last() {
            Some(last) if last.data_end() > file_len => {
                Err(Error::truncated(file_len, last.data_end() - file_len))
            }
            _ => Ok(()),
        }
    }

    /// Encodes `entries` into an index of exactly `capacity` bytes
    /// (zero-filled after the last entry).
    pub fn emit(entries: &[MetadataEntry], capacity: u64, out: &mut Vec<u8>) -> Result<()> {
        let versioned = entries.iter().any(|e| e.long_dims);
        let start = out.len();
        for e in entries {
            e.emit(out, versioned)?;
        }
        let used = (out.len() - start) as u64;
        if used > capacity {
            out.truncate(start);
            return Err(Error::MetadataOverflow { needed: used, capacity });
        }
        let capacity =
            usize::try_from(capacity).map_err(|_| Error::invalid("metadata too large"))?;
        out.resize(start + capacity, 0);
        Ok(())
    }

    /// Bytes the index needs for `entries`.
    pub fn needed_len(entries: &[MetadataEntry]) -> Result<u64> {
        let versioned = entries.iter().any(|e| e.long_dims);
        entries.iter().try_fold(0u64, |acc, e| Ok(acc + e.encoded_len(versioned)?))
    }
}
/// Position of the first non-zero byte of `bytes`. Block by block against a
/// zero block (`memcmp`): the reservation after the index is usually most
/// of its bytes, and every open of a file checks it.
fn first_non_zero(bytes: &[u8]) -> Option<usize> {
    const BLOCK: usize = 4096;
    static ZEROS: [u8; BLOCK] = [0; BLOCK];
    let (k, block) = bytes.chunks(BLOCK).enumerate().find(|(_, b)| *b != &ZEROS[..b.len()])?;
    block.iter().position(|&b| b != 0).map(|p| k * BLOCK + p)
}

#[cfg(test)]
mod tests {
    use super::first_non_zero;

    #[test]
    fn first_non_zero_finds_the_first_set_byte_in_any_block() {
        let mut bytes = alloc::vec![0u8; 3 * 4096 + 17];
        assert_eq!(first_non_zero(&bytes), None);
        assert_eq!(first_non_zero(&[]), None);
        for at in [0, 1, 4095, 4096, 8191, 3 * 4096 + 16] {
            bytes[at] = 0x80;
            assert_eq!(first_non_zero(&bytes), Some(at));
            bytes[at] = 0;
        }
    }
}
