//! The sans-IO writer: turns a sequence of tensor descriptions into the
//! exact bytes of headers, metadata index and file header, and tells the
//! host where each piece goes. The host writes the data, feeds it through
//! [`PlannedTensor::hasher`], encrypts it with [`crate::crypto::seal_chunk`],
//! and patches the results into the header before writing it.
//!
//! It chooses the data version and feature flags as tensorizer does: start
//! at 1 (3 when encrypting); an opaque dtype raises it to 2, a meta tensor
//! to 4, a dimension ≥ 2³² to 5.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use crate::codec::crypt_info::{CryptChunk, CryptInfo, KdfParams};
use crate::codec::file_header::FileHeader;
use crate::codec::metadata::{Metadata, MetadataEntry};
use crate::codec::tensor_header::{HashValue, HeaderLayout, TensorHeader};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::hash::{BlockKernel, TensorHasher};
use crate::layout::{
    CRYPT_CHUNK_SIZE, DEFAULT_ALIGNMENT, END_MARKER_LEN, FLAG_ENCRYPTED, FLAG_VERSIONED_HEADERS,
    MAC_LEN, MAX_ALIGNMENT, MAX_NDIM, MAX_PATH_COMPONENTS, MAX_TENSORS, METADATA_OFFSET,
    MIN_KDF_MEMLIMIT, NONCE_LEN, PWHASH_ALG_ARGON2ID13, SALT_LEN, TENSOR_COUNT_OFFSET,
    TENSORIZER_METADATA_LEN,
};
use crate::path::TensorPath;
use crate::registry::PathRegistry;
use crate::tensor_type::TensorType;

/// How a file is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterOptions {
    /// Data start alignment in bytes (1 = none, tensorizer's layout).
    pub alignment: u64,
    /// Size of the metadata reservation. `None` sizes it as
    /// max(256 KiB, needed) from the tensors given to [`Writer::plan`].
    pub metadata_len: Option<u64>,
    /// Encrypt tensor data; `Some(kdf)` also records how the key was
    /// derived from a passphrase.
    pub encryption: Option<Option<KdfParams>>,
}

impl Default for WriterOptions {
    /// tensorizer-rs's layout: 64-byte aligned data, index sized to fit.
    fn default() -> Self {
        Self { alignment: DEFAULT_ALIGNMENT, metadata_len: None, encryption: None }
    }
}

impl WriterOptions {
    /// Exactly tensorizer's layout: no alignment, a 256 KiB index, and a
    /// "metadata overflow" error when it does not fit. Byte-identical to
    /// tensorizer for unencrypted input.
    pub fn tensorizer() -> Self {
        Self { alignment: 1, metadata_len: Some(TENSORIZER_METADATA_LEN), encryption: None }
    }
}

/// One tensor to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Its name.
    pub path: TensorPath,
    /// PARAM, BUFFER or STATE_DICT.
    pub tensor_type: TensorType,
    /// Owning module index (0 for state dicts).
    pub module_index: u16,
    /// dtype string.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<u64>,
    /// A meta tensor: shape and dtype only, no data.
    pub meta: bool,
}

impl TensorSpec {
    /// A state-dict entry.
    pub fn state_dict(path: impl Into<TensorPath>, dtype: Dtype, shape: Vec<u64>) -> Self {
        Self {
            path: path.into(),
            tensor_type: TensorType::StateDict,
            module_index: 0,
            dtype,
            shape,
            meta: false,
        }
    }

    /// Bytes of data this tensor stores (0 for meta tensors).
    pub fn data_length(&self) -> Result<u64> {
        if self.meta {
            return Ok(0);
        }
        self.dtype.nbytes(&self.shape).ok_or(Error::invalid("tensor size overflows 64 bits"))
    }

    fn long_dims(&self) -> bool {
        MetadataEntry::needs_long_dims(&self.shape)
    }

    fn entry(&self, header_offset: u64, data_offset: u64) -> Result<MetadataEntry> {
        Ok(MetadataEntry {
            path: self.path.clone(),
            tensor_type: self.tensor_type,
            dtype: self.dtype.clone(),
            shape: self.shape.clone(),
            header_offset,
            data_offset,
            data_length: self.data_length()?,
            long_dims: self.long_dims(),
        })
    }
}

/// A tensor placed in the file: its header bytes (hashes and MACs still
/// zero) and where header and data go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTensor {
    /// Absolute offset of the header.
    pub header_offset: u64,
    /// The header bytes.
    pub header: Vec<u8>,
    /// Where hashes and crypt info sit in `header`.
    pub layout: HeaderLayout,
    /// Absolute offset of the data.
    pub data_offset: u64,
    /// Bytes of data to write.
    pub data_length: u64,
    /// The initial nonce, when the data is encrypted.
    pub nonce: Option<[u8; NONCE_LEN]>,
    /// Encryption chunk size.
    pub chunk_size: u64,
    crc32: bool,
}

impl PlannedTensor {
    /// A hasher primed with this header; feed it the plaintext data.
    pub fn hasher(&self) -> TensorHasher {
        self.hasher_on(None)
    }

    /// [`PlannedTensor::hasher`] through an optional [`BlockKernel`].
    pub fn hasher_on(&self, kernel: Option<BlockKernel>) -> TensorHasher {
        TensorHasher::with_kernel(&self.layout.hashable(&self.header), self.crc32, true, kernel)
    }

    /// Writes the finished hash values into the header.
    pub fn set_hashes(&mut self, hashes: &[HashValue]) -> Result<()> {
        if hashes.len() != self.layout.hash_values.len() {
            return Err(Error::invalid("wrong number of hash values"));
        }
        for (value, range) in hashes.iter().zip(&self.layout.hash_values) {
            let slot = &mut self.header[range.clone()];
            match value {
                HashValue::Crc32(c) if slot.len() == 4 => slot.copy_from_slice(&c.to_le_bytes()),
                HashValue::Sha256(d) if slot.len() == 32 => slot.copy_from_slice(d),
                _ => return Err(Error::invalid("hash values in the wrong order")),
            }
        }
        Ok(())
    }

    /// Number of encryption chunks (and MACs) for this tensor's data.
    pub fn chunk_count(&self) -> u64 {
        match self.nonce {
            Some(_) => crate::crypto::chunk_count(self.data_length, self.chunk_size),
            None => 0,
        }
    }

    /// Writes the MACs of the encrypted chunks into the header.
    pub fn set_macs(&mut self, macs: &[[u8; MAC_LEN]]) -> Result<()> {
        let Some(range) = self.layout.macs.clone() else {
            return Err(Error::invalid("tensor is not encrypted"));
        };
        if macs.len() * MAC_LEN != range.len() {
            return Err(Error::invalid("wrong number of MACs"));
        }
        for (slot, mac) in self.header[range].chunks_exact_mut(MAC_LEN).zip(macs) {
            slot.copy_from_slice(mac);
        }
        Ok(())
    }
}

/// The bytes that complete a file once every tensor is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The file header (goes at offset 0).
    pub file_header: FileHeader,
    /// Encoded file header, 73 bytes.
    pub header_bytes: Vec<u8>,
    /// The metadata index (goes at offset 73), zero-filled to its reserved length.
    pub metadata: Vec<u8>,
    /// Offset of the 8-byte zero end marker.
    pub end_marker_offset: u64,
    /// Total file length.
    pub file_len: u64,
}

/// The incremental writer. Tensors are laid out contiguously, in the
/// order they are added.
#[derive(Default)]
pub struct Writer {
    alignment: u64,
    kdf: Option<KdfParams>,
    encrypted: bool,
    version: u32,
    flags: u8,
    metadata_len: u64,
    entries: Vec<MetadataEntry>,
    registry: PathRegistry,
    next_offset: u64,
    tensor_size: u64,
    index_bytes: u64,
    /// Path components of the tensors added (a plain name counts one).
    components: u64,
    versioned: bool,
    used_nonces: BTreeSet<[u8; NONCE_LEN]>,
}

/// Refuses a file of `count` tensors when a reader would refuse it (more
/// than [`MAX_TENSORS`]): what we write, we read. [`Writer::plan`] and
/// [`Writer::add`] apply it; callers that know their tensors before
/// writing anything (the converter) call it first.
pub fn check_tensor_count(count: u64) -> Result<()> {
    if count > MAX_TENSORS {
        return Err(Error::limit(
            TENSOR_COUNT_OFFSET,
            "tensor count (MAX_TENSORS, the most a reader accepts)",
            count,
            MAX_TENSORS,
        ));
    }
    Ok(())
}

/// Refuses names whose components add up past what a reader accepts
/// ([`MAX_PATH_COMPONENTS`]; a plain name counts one).
fn check_path_components(components: u64) -> Result<()> {
    if components > MAX_PATH_COMPONENTS {
        return Err(Error::limit(
            TENSOR_COUNT_OFFSET,
            "tensor path components in the file (MAX_PATH_COMPONENTS, the most a reader accepts)",
            components,
            MAX_PATH_COMPONENTS,
        ));
    }
    Ok(())
}

/// Room [`Writer::metadata_len_with_room`] leaves for tensors appended
/// later: (numerator, denominator) of the needed length.
pub const INDEX_ROOM: (u64, u64) = (3, 2);

/// [`Writer::metadata_len_with_room`] reserves the index in whole pages of
/// this many bytes.
pub const INDEX_PAGE: u64 = 4096;

impl Writer {
    /// Sizes the metadata index for `specs` under `options`: the fixed
    /// length if one is set, else max(256 KiB, what the entries need).
    pub fn metadata_len_for(specs: &[TensorSpec], options: &WriterOptions) -> Result<u64> {
        if let Some(len) = options.metadata_len {
            return Ok(len);
        }
        let entries = specs.iter().map(|s| s.entry(0, 0)).collect::<Result<Vec<_>>>()?;
        Ok(Metadata::needed_len(&entries)?.max(TENSORIZER_METADATA_LEN))
    }

    /// Sizes the index of a file that starts with `specs` and may grow:
    /// [`INDEX_ROOM`] times what their entries need, in whole
    /// [`INDEX_PAGE`]s, and at least tensorizer's 256 KiB.
    pub fn metadata_len_with_room(specs: &[TensorSpec]) -> Result<u64> {
        let entries = specs.iter().map(|s| s.entry(0, 0)).collect::<Result<Vec<_>>>()?;
        let too_large = || Error::invalid("metadata index too large");
        let room =
            Metadata::needed_len(&entries)?.checked_mul(INDEX_ROOM.0).ok_or_else(too_large)?
                / INDEX_ROOM.1;
        let pages = room.div_ceil(INDEX_PAGE).checked_mul(INDEX_PAGE).ok_or_else(too_large)?;
        Ok(pages.max(TENSORIZER_METADATA_LEN))
    }

    /// Starts a file whose index reserves `options.metadata_len` bytes.
    /// When that is unset a streaming writer cannot know the tensors to
    /// come, so it reserves tensorizer's 256 KiB; use [`Writer::plan`] to
    /// size the index for a known list of tensors.
    pub fn new(options: &WriterOptions) -> Result<Self> {
        if !options.alignment.is_power_of_two() || options.alignment > MAX_ALIGNMENT {
            return Err(Error::invalid("alignment must be a power of two up to 2 MiB"));
        }
        if let Some(Some(k)) = &options.encryption
            && (k.salt.len() != SALT_LEN
                || k.alg != PWHASH_ALG_ARGON2ID13
                || k.memlimit < MIN_KDF_MEMLIMIT
                || k.opslimit == 0)
        {
            return Err(Error::invalid("invalid key-derivation parameters"));
        }
        let metadata_len = options.metadata_len.unwrap_or(TENSORIZER_METADATA_LEN);
        let encrypted = options.encryption.is_some();
        Ok(Self {
            alignment: options.alignment,
            kdf: options.encryption.clone().flatten(),
            encrypted,
            version: if encrypted { 3 } else { 1 },
            flags: if encrypted { FLAG_ENCRYPTED } else { 0 },
            metadata_len,
            next_offset: METADATA_OFFSET
                .checked_add(metadata_len)
                .ok_or(Error::invalid("metadata length too large"))?,
            ..Self::default()
        })
    }

    /// A writer whose index is sized for `specs` (see [`WriterOptions`]).
    /// Refuses, before sizing anything, more tensors (or path components)
    /// than a reader accepts.
    pub fn plan(specs: &[TensorSpec], options: &WriterOptions) -> Result<Self> {
        check_tensor_count(specs.len() as u64)?;
        check_path_components(
            specs.iter().fold(0u64, |n, s| n.saturating_add(s.path.depth() as u64)),
        )?;
        let metadata_len = Self::metadata_len_for(specs, options)?;
        Self::new(&WriterOptions { metadata_len: Some(metadata_len), ..options.clone() })
    }

    /// Places the next tensor. Encrypted files need a fresh random
    /// `nonce` for every tensor that has data.
    pub fn add(
        &mut self,
        spec: &TensorSpec,
        nonce: Option<[u8; NONCE_LEN]>,
    ) -> Result<PlannedTensor> {
        check_tensor_count(self.entries.len() as u64 + 1)?;
        let components = self.components.saturating_add(spec.path.depth() as u64);
        check_path_components(components)?;
        spec.path.to_bytes()?;
        if spec.shape.len() > MAX_NDIM {
            return Err(Error::invalid("more than 255 dimensions"));
        }
        if let Some(e) = spec.dtype.element()
            && Dtype::from_element(e) != spec.dtype
        {
            return Err(Error::invalid("dtype string is not the form tensorizer writes"));
        }
        if matches!(spec.path, TensorPath::Structured(_))
            && spec.tensor_type != TensorType::StateDict
        {
            return Err(Error::invalid("structured paths are only allowed for STATE_DICT tensors"));
        }
        let data_length = spec.data_length()?;
        let long_dims = spec.long_dims();
        let encrypt_data = self.encrypted && data_length > 0;
        let nonce = match (encrypt_data, nonce) {
            (true, Some(n)) => Some(n),
            (true, None) => return Err(Error::invalid("an encrypted tensor needs a nonce")),
            (false, _) => None,
        };
        // Index capacity, including tags should this tensor turn them on.
        let versioned = long_dims || self.versioned;
        let mut needed = spec.entry(0, 0)?.encoded_len(versioned)?;
        needed += self.index_bytes;
        if versioned && !self.versioned {
            needed += 4 * self.entries.len() as u64;
        }
        if needed > self.metadata_len {
            return Err(Error::MetadataOverflow { needed, capacity: self.metadata_len });
        }

        let crypt_info = self.encrypted.then(|| {
            let mut info = CryptInfo::default();
            if let Some(n) = nonce {
                if let Some(kdf) = &self.kdf {
                    info.chunks.push(CryptChunk::KeyDerivation(kdf.clone()));
                }
                let count = crate::crypto::chunk_count(data_length, CRYPT_CHUNK_SIZE) as usize;
                info.chunks.push(CryptChunk::Parallel {
                    chunk_size: CRYPT_CHUNK_SIZE,
                    nonce: n,
                    macs: alloc::vec![[0u8; MAC_LEN]; count],
                });
            }
            info
        });
        let mut hashes = Vec::with_capacity(2);
        if !encrypt_data {
            hashes.push(HashValue::Crc32(0));
        }
        hashes.push(HashValue::Sha256([0; 32]));
        let mut header = TensorHeader {
            module_index: spec.module_index,
            tensor_type: spec.tensor_type,
            path: spec.path.clone(),
            dtype: spec.dtype.clone(),
            shape: spec.shape.clone(),
            long_dims,
            hashes,
            crypt_info,
            padding: 0,
            data_length,
        };
        let header_offset = self.next_offset;
        let unpadded = header.unpadded_len()?;
        let too_large = || Error::invalid("file larger than 2^64 bytes");
        if self.alignment > 1 && data_length > 0 {
            let end = header_offset.checked_add(unpadded).ok_or_else(too_large)?;
            header.padding = (self.alignment - end % self.alignment) % self.alignment;
        }
        let mut bytes = Vec::new();
        let layout = header.emit(&mut bytes)?;
        let data_offset = header_offset.checked_add(bytes.len() as u64).ok_or_else(too_large)?;
        let data_end = data_offset
            .checked_add(data_length)
            .filter(|e| e.checked_add(END_MARKER_LEN).is_some())
            .ok_or_else(too_large)?;
        // Every fallible step is done: commit the name and the nonces.
        if let Some(n) = nonce {
            let chunks = crate::crypto::chunk_count(data_length, CRYPT_CHUNK_SIZE);
            let fresh =
                (0..chunks).all(|i| !self.used_nonces.contains(&crate::crypto::chunk_nonce(&n, i)));
            if !fresh {
                return Err(Error::invalid("illegal nonce reuse"));
            }
            self.registry.insert(&spec.path)?;
            self.used_nonces.extend((0..chunks).map(|i| crate::crypto::chunk_nonce(&n, i)));
        } else {
            self.registry.insert(&spec.path)?;
        }

        if spec.dtype.is_opaque() {
            self.version = self.version.max(2);
        }
        if spec.meta {
            self.version = self.version.max(4);
        }
        if long_dims {
            self.version = 5;
            self.flags |= FLAG_VERSIONED_HEADERS;
        }
        self.index_bytes = needed;
        self.components = components;
        self.versioned = versioned;
        self.entries.push(spec.entry(header_offset, data_offset)?);
        self.next_offset = data_end;
        self.tensor_size += data_length;
        Ok(PlannedTensor {
            header_offset,
            header: bytes,
            layout,
            data_offset,
            data_length,
            nonce,
            chunk_size: CRYPT_CHUNK_SIZE,
            crc32: !encrypt_data,
        })
    }

    /// The data version chosen so far.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The file header for the tensors added so far.
    pub fn file_header(&self) -> FileHeader {
        FileHeader {
            version: self.version,
            flags: self.flags,
            tensor_size: self.tensor_size,
            tensor_count: self.entries.len() as u64,
            metadata_len: self.metadata_len,
        }
    }

    /// Produces the file header, the index and the end-marker position.
    pub fn finish(&self) -> Result<Finished> {
        let file_header = self.file_header();
        let mut header_bytes = Vec::with_capacity(FileHeader::LEN);
        file_header.emit(&mut header_bytes);
        let mut metadata = Vec::new();
        Metadata::emit(&self.entries, self.metadata_len, &mut metadata)?;
        Ok(Finished {
            file_header,
            header_bytes,
            metadata,
            end_marker_offset: self.next_offset,
            file_len: self.next_offset + END_MARKER_LEN,
        })
    }
}

/// Writes a whole file into memory: `data[i]` is the plaintext of
/// `specs[i]` (empty for meta tensors). For encrypted files, `key` and a
/// source of fresh nonces are required.
pub fn to_vec(
    specs: &[TensorSpec],
    data: &[&[u8]],
    options: &WriterOptions,
    key: Option<&crate::crypto::Key>,
    mut next_nonce: impl FnMut() -> [u8; NONCE_LEN],
) -> Result<Vec<u8>> {
    if specs.len() != data.len() {
        return Err(Error::invalid("one data buffer per tensor is required"));
    }
    if options.encryption.is_some() != key.is_some() {
        return Err(Error::invalid("a key is required exactly when encrypting"));
    }
    let mut w = Writer::plan(specs, options)?;
    let mut out =
        alloc::vec![0u8; usize::try_from(w.next_offset).map_err(|_| Error::invalid("too large"))?];
    for (spec, plain) in specs.iter().zip(data) {
        let nonce = key.map(|_| next_nonce());
        let mut t = w.add(spec, nonce)?;
        if plain.len() as u64 != t.data_length {
            return Err(Error::invalid("data buffer length does not match dtype and shape"));
        }
        let mut hasher = t.hasher();
        hasher.update(plain);
        t.set_hashes(&hasher.finish())?;
        let mut body = plain.to_vec();
        if let (Some(key), Some(n)) = (key, t.nonce) {
            let chunk = usize::try_from(t.chunk_size).unwrap_or(usize::MAX);
            let macs: Vec<_> = body
                .chunks_mut(chunk)
                .enumerate()
                .map(|(i, c)| crate::crypto::seal_chunk(key, &n, i as u64, c))
                .collect();
            t.set_macs(&macs)?;
        }
        out.extend_from_slice(&t.header);
        out.extend_from_slice(&body);
    }
    let fin = w.finish()?;
    out[..FileHeader::LEN].copy_from_slice(&fin.header_bytes);
    out[FileHeader::LEN..FileHeader::LEN + fin.metadata.len()].copy_from_slice(&fin.metadata);
    out.extend_from_slice(&[0u8; END_MARKER_LEN as usize]);
    Ok(out)
}
