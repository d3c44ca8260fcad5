//! The fixed 73-byte file header: parse and emit side by side.

use alloc::vec::Vec;

use super::cursor::{Cursor, Emit};
use crate::error::{Error, Result};
use crate::layout::{
    FILE_HEADER_LEN, FLAG_ENCRYPTED, FLAG_VERSIONED_HEADERS, MAGIC, MAX_METADATA_LEN,
    METADATA_OFFSET, MIN_METADATA_ENTRY_LEN,
};

/// Highest data version this crate reads and writes.
pub const MAX_VERSION: u32 = 5;

/// The file header: everything before the metadata index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Data version, 1 to 5.
    pub version: u32,
    /// Feature flags (only bits 0 and 1 exist). Stored on disk only from
    /// data version 4; earlier versions write zero bytes.
    pub flags: u8,
    /// Sum of all tensors' data lengths (meta tensors count 0).
    pub tensor_size: u64,
    /// Number of metadata entries.
    pub tensor_count: u64,
    /// Length of the metadata index in bytes.
    pub metadata_len: u64,
}

impl FileHeader {
    /// Length of the encoded header.
    pub const LEN: usize = FILE_HEADER_LEN;

    /// Parses the first [`FileHeader::LEN`] bytes of a file.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let mut c = Cursor::new(bytes, 0);
        // Fewer than five bytes cannot be a tensorizer file, whatever they are.
        if bytes.get(..MAGIC.len()) != Some(&MAGIC[..]) {
            return Err(Error::NotTensorizer);
        }
        c.array::<5>()?;
        let version = c.u32()?;
        if !(1..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion { version });
        }
        let flag_bytes: [u8; 32] = c.array()?;
        let tensor_size = c.u64()?;
        let pad_offset = c.offset();
        if c.u64()? != 0 {
            return Err(Error::malformed(pad_offset, "reserved header field is not zero"));
        }
        let count_offset = c.offset();
        let tensor_count = c.u64()?;
        let len_offset = c.offset();
        let metadata_len = c.u64()?;

        let low = u64::from_le_bytes(flag_bytes[..8].try_into().unwrap_or_default());
        let known = FLAG_ENCRYPTED | FLAG_VERSIONED_HEADERS;
        let flags = flag_bytes[0];
        if flag_bytes[1..].iter().any(|&b| b != 0) || flags & !known != 0 {
            return Err(Error::UnsupportedFlags { flags: low, version });
        }
        // Writers store flags only from version 4 on, and versioned headers
        // only in version 5: anything else is corruption.
        if (flags != 0 && version < 4) || (flags & FLAG_VERSIONED_HEADERS != 0 && version < 5) {
            return Err(Error::UnsupportedFlags { flags: low, version });
        }
        if metadata_len > MAX_METADATA_LEN {
            return Err(Error::limit(
                len_offset,
                "metadata index length",
                metadata_len,
                MAX_METADATA_LEN,
            ));
        }
        let max_count = metadata_len / MIN_METADATA_ENTRY_LEN as u64;
        if tensor_count > max_count {
            return Err(Error::malformed(
                count_offset,
                "tensor count does not fit in the metadata index",
            ));
        }
        Ok(Self { version, flags, tensor_size, tensor_count, metadata_len })
    }

    /// Appends the encoded header (exactly [`FileHeader::LEN`] bytes).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put(&MAGIC);
        out.put_u32(self.version);
        let mut flags = [0u8; 32];
        if self.version >= 4 {
            flags[0] = self.flags;
        }
        out.put(&flags);
        out.put_u64(self.tensor_size);
        out.put_u64(0);
        out.put_u64(self.tensor_count);
        out.put_u64(self.metadata_len);
    }

    /// Whether every tensor header carries a crypt-info block.
    pub fn has_crypt_info(&self) -> bool {
        self.version == 3 || (self.version >= 4 && self.flags & FLAG_ENCRYPTED != 0)
    }

    /// Whether every metadata entry starts with a u32 version tag.
    pub fn versioned_headers(&self) -> bool {
        self.version >= 5 && self.flags & FLAG_VERSIONED_HEADERS != 0
    }

    /// Absolute byte range of the metadata index.
    pub fn metadata_range(&self) -> core::ops::Range<u64> {
        METADATA_OFFSET..METADATA_OFFSET.saturating_add(self.metadata_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FileHeader {
        FileHeader { version: 4, flags: 1, tensor_size: 48, tensor_count: 2, metadata_len: 262144 }
    }

    #[test]
    fn round_trip() {
        let mut out = Vec::new();
        sample().emit(&mut out);
        assert_eq!(out.len(), FileHeader::LEN);
        assert_eq!(FileHeader::parse(&out).unwrap(), sample());
        assert!(sample().has_crypt_info());
    }

    #[test]
    fn rejects_bad_headers() {
        let mut out = Vec::new();
        sample().emit(&mut out);
        assert_eq!(FileHeader::parse(b"|TZX|"), Err(Error::NotTensorizer));
        assert_eq!(FileHeader::parse(&out[..3]), Err(Error::NotTensorizer));
        assert!(matches!(FileHeader::parse(&out[..40]), Err(Error::Truncated { .. })));
        let mut v = out.clone();
        v[5] = 6;
        assert_eq!(FileHeader::parse(&v), Err(Error::UnsupportedVersion { version: 6 }));
        let mut v = out.clone();
        v[9] = 2; // versioned headers at version 4
        assert!(matches!(FileHeader::parse(&v), Err(Error::UnsupportedFlags { .. })));
        let mut v = out.clone();
        v[40] = 1;
        assert!(matches!(FileHeader::parse(&v), Err(Error::UnsupportedFlags { .. })));
        let mut v = out;
        v[0x39..0x41].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(FileHeader::parse(&v), Err(Error::Malformed { offset: 0x39, .. })));
    }
}
