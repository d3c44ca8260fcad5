//! Zero-copy access to the tensors of an unencrypted local file through a
//! read-only memory map.
//!
//! Every tensor's bytes can be borrowed from the map. Whether they can be
//! *viewed* as typed elements depends on alignment: files written by
//! tensorizer-rs align data to 64 bytes, files written by tensorizer do
//! not. [`MappedFile::aligned`] borrows when the data is aligned and
//! copies into a fresh buffer otherwise.
//!
//! As with any memory map, another process truncating the file while it is
//! mapped makes later accesses fault (SIGBUS). Use [`crate::Reader`] for
//! files that may change underneath.

use std::borrow::Cow;
use std::path::Path;

use tensorizer_core::{File, MetadataEntry, TensorPath, TensorRecord};

use crate::error::{Error, Result, io_err};

/// A memory-mapped, structurally validated tensorizer file.
pub struct MappedFile {
    map: memmap2::Mmap,
    name: String,
    header: tensorizer_core::FileHeader,
    entries: Vec<MetadataEntry>,
}

impl MappedFile {
    /// Maps `path` and parses its header and index.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let name = path.as_ref().display().to_string();
        let file = std::fs::File::open(path.as_ref()).map_err(io_err(&name, 0))?;
        // SAFETY: the map is read-only and private to this struct. The
        // remaining hazard, another process truncating the file, is
        // documented at module level.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(&name, 0))?;
        let parsed = File::parse(&map).map_err(|source| Error::format(name.clone(), source))?;
        if parsed.header.has_crypt_info() {
            return Err(Error::Invalid(format!(
                "{name}: encrypted files cannot be used through a memory map; open them with Reader and a key"
            )));
        }
        let header = parsed.header;
        let entries = parsed.metadata.entries;
        Ok(Self { map, name, header, entries })
    }

    /// The file header.
    pub fn header(&self) -> &tensorizer_core::FileHeader {
        &self.header
    }

    /// Every tensor's index entry.
    pub fn entries(&self) -> &[MetadataEntry] {
        &self.entries
    }

    /// Position of the tensor named `path`.
    pub fn index_of(&self, path: &TensorPath) -> Option<usize> {
        self.entries.iter().position(|e| &e.path == path)
    }

    /// The stored bytes of tensor `i`, borrowed from the map (empty for meta
    /// tensors). With `verify`, its hashes are checked first.
    pub fn bytes(&self, i: usize, verify: bool) -> Result<&[u8]> {
        let entry =
            self.entries.get(i).ok_or_else(|| Error::Invalid(format!("{}: no tensor number {i}", self.name)))?;
        let err = |source| Error::tensor(self.name.clone(), entry.path.to_string(), source);
        // Offsets were checked against the map's length when it was opened.
        let raw = &self.map[entry.header_offset as usize..entry.data_offset as usize];
        let data = &self.map[entry.data_offset as usize..entry.data_end() as usize];
        let record = TensorRecord::parse(entry, raw, &self.header).map_err(err)?;
        if verify {
            record.verify_with(data, crate::reader::digest::kernel()).map_err(err)?;
        }
        Ok(data)
    }

    /// Whether tensor `i`'s data starts at a multiple of `align` in memory.
    pub fn is_aligned(&self, i: usize, align: usize) -> bool {
        self.entries.get(i).is_some_and(|e| {
            let addr = self.map.as_ptr() as usize + e.data_offset as usize;
            align.is_power_of_two() && addr.is_multiple_of(align)
        })
    }

    /// Tensor `i`'s bytes aligned to at least its item size: borrowed when
    /// the file's layout allows, otherwise copied (the fallback for files
    /// written by tensorizer, whose data is unaligned).
    pub fn aligned(&self, i: usize, verify: bool) -> Result<Cow<'_, [u8]>> {
        let bytes = self.bytes(i, verify)?;
        let itemsize = self.entries[i].dtype.itemsize() as usize;
        let need = itemsize.next_power_of_two().min(16);
        if self.is_aligned(i, need) { Ok(Cow::Borrowed(bytes)) } else { Ok(Cow::Owned(bytes.to_vec())) }
    }
}
