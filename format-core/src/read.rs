//! Reading tensors: what a host does with a tensor header and its data
//! bytes once it has fetched them (decrypt, verify), plus [`File`], a
//! zero-copy view of a whole file already in memory.

use alloc::vec::Vec;

use crate::codec::crypt_info::{CryptChunk, CryptInfo};
use crate::codec::file_header::FileHeader;
use crate::codec::metadata::{Metadata, MetadataEntry};
use crate::codec::tensor_header::{HeaderLayout, TensorHeader};
use crate::crypto::{KdfLimits, Key, KeyRing, Passphrase, chunk_count, open_chunk};
use crate::error::{Error, Result};
use crate::hash::{BlockKernel, TensorHasher, verify};
use crate::layout::{MAC_LEN, NONCE_LEN};

/// Where a decryption key comes from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// A raw 32-byte key (any key-derivation chunk is ignored).
    Key(Key),
    /// A passphrase, derived per the file's key-derivation chunk.
    Passphrase(Passphrase, KdfLimits),
}

impl KeySource {
    /// The key for a tensor with this crypt info. Hosts should cache derived
    /// keys by [`crate::KdfParams`]: every tensor of a file shares them.
    pub fn key_for(&self, info: &CryptInfo) -> Result<Key> {
        match self {
            Self::Key(k) => Ok(k.clone()),
            Self::Passphrase(p, limits) => Key::derive(p.expose_secret(), info.kdf()?, limits),
        }
    }

    /// The key for a tensor with this crypt info, derived through `ring`:
    /// once per distinct setting, within the file's budget.
    pub fn key_in(&self, info: &CryptInfo, ring: &mut KeyRing) -> Result<Key> {
        self.key_in_deriving(info, ring, Key::derive)
    }

    /// [`KeySource::key_in`] deriving with `derive` (a host's Argon2id).
    pub fn key_in_deriving(
        &self,
        info: &CryptInfo,
        ring: &mut KeyRing,
        derive: crate::crypto::DeriveFn,
    ) -> Result<Key> {
        match self {
            Self::Key(k) => Ok(k.clone()),
            Self::Passphrase(p, limits) => {
                ring.key_deriving(p.expose_secret(), info.kdf()?, limits, derive)
            }
        }
    }
}

/// How one tensor's data is encrypted: `macs.len()` chunks of `chunk_size`
/// bytes (the last shorter), chunk `i` with nonce `nonce + i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cipher<'h> {
    /// Plaintext bytes per chunk.
    pub chunk_size: u64,
    /// Nonce of chunk 0.
    pub nonce: &'h [u8; NONCE_LEN],
    /// One tag per chunk.
    pub macs: &'h [[u8; MAC_LEN]],
}

impl Cipher<'_> {
    /// Decrypts chunk `index` of the data in place; `chunk` must be exactly
    /// that chunk's bytes.
    pub fn open(&self, key: &Key, index: usize, chunk: &mut [u8]) -> Result<()> {
        let mac = self.macs.get(index).ok_or(Error::Decryption)?;
        open_chunk(key, self.nonce, index as u64, chunk, mac)
    }

    /// Decrypts all of `data` in place, chunk by chunk.
    pub fn open_all(&self, key: &Key, data: &mut [u8]) -> Result<()> {
        let size = usize::try_from(self.chunk_size).unwrap_or(usize::MAX);
        for (i, chunk) in data.chunks_mut(size.max(1)).enumerate() {
            self.open(key, i, chunk)?;
        }
        Ok(())
    }
}

/// A parsed tensor header with what is needed to decrypt and verify it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorRecord {
    /// The parsed header.
    pub header: TensorHeader,
    /// Where its parts sit.
    pub layout: HeaderLayout,
    /// The hashable form of the header.
    pub hashable_header: Vec<u8>,
}

impl TensorRecord {
    /// Parses the raw header of `entry` (exactly `entry.header_len()` bytes)
    /// and checks it against the entry.
    pub fn parse(entry: &MetadataEntry, raw_header: &[u8], file: &FileHeader) -> Result<Self> {
        let (header, layout) = TensorHeader::parse(
            raw_header,
            entry.header_offset,
            entry.long_dims,
            file.has_crypt_info(),
        )?;
        header.check_against(entry)?;
        let hashable_header = layout.hashable(raw_header);
        Ok(Self { header, layout, hashable_header })
    }

    /// How the data is encrypted, or `None` if it is stored in plain text.
    ///
    /// Fails when the tensor has data and the file is encrypted but the
    /// tensor is not, or the MAC count does not match the data length.
    pub fn cipher(&self) -> Result<Option<Cipher<'_>>> {
        let len = self.header.data_length;
        let Some(info) = &self.header.crypt_info else {
            return Ok(None);
        };
        let at = self.layout.crypt_info.as_ref().map_or(0, |r| r.start as u64);
        match info.cipher()? {
            None if len > 0 => {
                Err(Error::Encryption { reason: "tensor is not encrypted in an encrypted file" })
            }
            None => Ok(None),
            Some(CryptChunk::Parallel { chunk_size, nonce, macs }) => {
                let chunk_size = if macs.len() == 1 { len.max(1) } else { *chunk_size };
                if macs.len() as u64 != chunk_count(len, chunk_size)
                    && !(macs.len() == 1 && len == 0)
                {
                    return Err(Error::malformed(at, "MAC count does not match the data length"));
                }
                Ok(Some(Cipher { chunk_size, nonce, macs }))
            }
            Some(CryptChunk::Sequential { nonce, mac }) => {
                Ok(Some(Cipher { chunk_size: len.max(1), nonce, macs: core::slice::from_ref(mac) }))
            }
            Some(CryptChunk::KeyDerivation(_)) => Err(Error::malformed(at, "no encryption chunk")),
        }
    }

    /// Whether anything vouches for the tensor's contents when it is read
    /// with verification: a stored hash, or the MACs of encrypted data. A
    /// tensor with neither is read but not verified.
    pub fn vouched(&self) -> bool {
        !self.header.hashes.is_empty()
            || (self.header.data_length > 0 && matches!(self.cipher(), Ok(Some(_))))
    }

    /// The record of a tensor stored without a header of its own (a
    /// safetensors tensor): `entry`'s name, dtype and shape, no hashes, no
    /// encryption. Verifying it always passes; there is nothing to decrypt.
    pub fn bare(entry: &MetadataEntry) -> Self {
        let header = TensorHeader {
            module_index: 0,
            tensor_type: entry.tensor_type,
            path: entry.path.clone(),
            dtype: entry.dtype.clone(),
            shape: entry.shape.clone(),
            long_dims: entry.long_dims,
            hashes: Vec::new(),
            crypt_info: None,
            padding: 0,
            data_length: entry.data_length,
        };
        Self { header, layout: HeaderLayout::default(), hashable_header: Vec::new() }
    }

    /// Starts hash verification; feed it the plaintext.
    pub fn hasher(&self) -> TensorHasher {
        TensorHasher::for_header(&self.header, &self.hashable_header)
    }

    /// Decrypts `data` in place when the tensor is encrypted. `key` must
    /// be given exactly when the file has crypt info.
    pub fn decrypt(&self, key: Option<&KeySource>, data: &mut [u8]) -> Result<()> {
        if data.len() as u64 != self.header.data_length {
            return Err(Error::invalid("data buffer length differs from the stored data length"));
        }
        let Some(cipher) = self.cipher()? else {
            return Ok(());
        };
        if data.is_empty() {
            return Ok(());
        }
        let Some(source) = key else {
            return Err(Error::Encryption {
                reason: "the tensor is encrypted but no key was given",
            });
        };
        let info = self.header.crypt_info.as_ref().ok_or(Error::Decryption)?;
        cipher.open_all(&source.key_for(info)?, data)
    }

    /// [`TensorRecord::hasher`] computing both hashes through `kernel`
    /// when the tensor stores both.
    pub fn hasher_on(&self, kernel: Option<BlockKernel>) -> TensorHasher {
        TensorHasher::for_header_on(&self.header, &self.hashable_header, kernel)
    }

    /// Verifies the stored hashes over plaintext `data`.
    pub fn verify(&self, data: &[u8]) -> Result<()> {
        self.verify_on(data, None)
    }

    /// [`TensorRecord::verify`] through an optional [`BlockKernel`].
    pub fn verify_on(&self, data: &[u8], kernel: Option<BlockKernel>) -> Result<()> {
        let mut h = self.hasher_on(kernel);
        h.update(data);
        verify(&self.header, &h.finish())
    }
}

/// A whole file in memory, parsed structurally (no hashing, no decryption).
#[derive(Debug, Clone)]
pub struct File<'data> {
    bytes: &'data [u8],
    /// The file header.
    pub header: FileHeader,
    /// The metadata index.
    pub metadata: Metadata,
}

impl<'data> File<'data> {
    /// Parses the file header and index and checks every tensor fits.
    pub fn parse(bytes: &'data [u8]) -> Result<Self> {
        let header = FileHeader::parse(bytes)?;
        let range = header.metadata_range();
        let index = bytes.get(range.start as usize..).unwrap_or_default();
        let metadata = Metadata::parse(&header, index)?;
        metadata.check_file_len(bytes.len() as u64)?;
        Ok(Self { bytes, header, metadata })
    }

    /// Parses tensor `i`'s header and returns it with its raw data bytes.
    pub fn tensor(&self, i: usize) -> Result<(TensorRecord, &'data [u8])> {
        let entry =
            self.metadata.entries.get(i).ok_or(Error::invalid("tensor index out of range"))?;
        // Entries were checked to lie inside the buffer by `parse`.
        let raw = self
            .bytes
            .get(entry.header_offset as usize..entry.data_offset as usize)
            .ok_or(Error::truncated(entry.header_offset, entry.header_len()))?;
        let data = self
            .bytes
            .get(entry.data_offset as usize..entry.data_end() as usize)
            .ok_or(Error::truncated(entry.data_offset, entry.data_length))?;
        Ok((TensorRecord::parse(entry, raw, &self.header)?, data))
    }

    /// Loads every tensor (see [`File::load`]), deriving a passphrase key
    /// once per distinct key-derivation setting rather than per tensor, and
    /// within the file's derivation budget.
    pub fn load_all(&self, key: Option<&KeySource>) -> Result<Vec<Vec<u8>>> {
        let mut ring = KeyRing::default();
        let mut out = Vec::with_capacity(self.metadata.entries.len());
        for i in 0..self.metadata.entries.len() {
            let derived = match key {
                Some(source @ KeySource::Passphrase(..)) => {
                    let (record, _) = self.tensor(i)?;
                    match record.header.crypt_info.as_ref() {
                        Some(info) if info.kdf().is_ok() => {
                            Some(KeySource::Key(source.key_in(info, &mut ring)?))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            out.push(self.load(i, derived.as_ref().or(key))?);
        }
        Ok(out)
    }

    /// Decrypts (when needed) and verifies tensor `i`, returning its stored
    /// plaintext bytes (empty for meta tensors).
    pub fn load(&self, i: usize, key: Option<&KeySource>) -> Result<Vec<u8>> {
        if self.header.has_crypt_info() && key.is_none() {
            return Err(Error::Encryption { reason: "the file is encrypted but no key was given" });
        }
        if !self.header.has_crypt_info() && key.is_some() {
            return Err(Error::Encryption {
                reason: "a key was given but the file is not encrypted",
            });
        }
        let (record, data) = self.tensor(i)?;
        let mut data = data.to_vec();
        record.decrypt(key, &mut data)?;
        record.verify(&data)?;
        Ok(data)
    }
}
