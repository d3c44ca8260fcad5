//! Reading tensorizer files (and safetensors files, [`safetensors`]) from
//! any [`RangeSource`] with concurrent positioned reads straight into
//! caller-provided buffers.
//!
//! Small tensors are read in batches (one read covers many consecutive
//! headers and their data); large tensors are read in pieces of
//! [`PIECE_LEN`] bytes by all readers at once, decrypted piece by piece by
//! the thread that read it, and verified afterwards when asked to.

use std::collections::HashMap;
use std::sync::Mutex;

use tensorizer_core::crypto::{Key, KeyRing};
use tensorizer_core::layout::ParseLimits;
use tensorizer_core::read::Cipher;
use tensorizer_core::{FileHeader, KeySource, Metadata, MetadataEntry, TensorPath, TensorRecord};

use crate::error::{Error, Result};
use crate::parallel::{default_readers, for_each};
use crate::source::{LocalFile, RangeSource};

mod cold;
pub mod pack;
pub mod plan;
mod records;
pub mod safetensors;
pub mod share;
pub mod slice;
mod spans;
mod torch;
mod turns;
pub mod verify;

/// Bytes per parallel read of a large tensor (a multiple of the 2 MiB
/// encryption chunk, so each piece decrypts on its own).
pub const PIECE_LEN: usize = 8 << 20;

/// Tensors whose header and data together are at most this long are read
/// in batches.
const SMALL_TENSOR: u64 = 1 << 20;

/// Tensors with at least this much data are read straight into their
/// buffers rather than through a batch's scratch space: the second copy
/// (and the scratch's page faults) cost more than the extra header read.
const DIRECT_MIN: u64 = 64 << 10;

/// Longest span one batched read covers.
const BATCH_SPAN: u64 = 8 << 20;

/// One tensor to load: its index and the buffer of exactly its size.
type Job<'b> = (usize, &'b mut [u8]);

/// How to read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Concurrent readers (threads issuing positioned reads).
    pub num_readers: usize,
    /// Check every stored hash after reading (and decrypting).
    pub verify_hash: bool,
    /// The decryption key, required exactly for encrypted files.
    pub key: Option<KeySource>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self { num_readers: default_readers(), verify_hash: false, key: None }
    }
}

impl ReadOptions {
    /// Whether one load call checks hashes: see [`call_verifies`].
    pub fn verify(&self, call: Option<bool>) -> bool {
        call_verifies(call, self.verify_hash)
    }
}

/// Whether a load call checks hashes: its own `verify_hash` when it gives
/// one, else the one its reader (or deserializer) was opened with. The one
/// place this default is decided; every front end asks it.
pub fn call_verifies(call: Option<bool>, opened_with: bool) -> bool {
    call.unwrap_or(opened_with)
}

/// An open tensorizer or safetensors file ([`Layout`]): header and index
/// parsed, tensors read on demand.
pub struct Reader<S: RangeSource = LocalFile> {
    source: S,
    layout: Layout,
    metadata: Metadata,
    by_name: HashMap<TensorPath, usize>,
    options: ReadOptions,
    /// Passphrase-derived keys, shared by every reader thread. The lock is
    /// held while deriving, so a key is derived once however many threads
    /// want it.
    keys: Mutex<KeyRing>,
}

/// What a reader reads: the file's format and what its header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// A tensorizer file, with its file header.
    Tensorizer(FileHeader),
    /// A safetensors file: where its data starts, and its `__metadata__`
    /// (string values, in file order). Its tensors have no hashes and no
    /// encryption.
    Safetensors {
        /// Where the data section starts.
        data_start: u64,
        /// `__metadata__`'s string values, in file order.
        metadata: Vec<(String, String)>,
    },
    /// A `torch.save` zip checkpoint whose entries are all contiguous
    /// little-endian tensors (spec §16.10). Its tensors have no hashes and
    /// no encryption.
    Torch,
}

impl Reader<LocalFile> {
    /// Opens a local file.
    pub fn open(path: impl AsRef<std::path::Path>, options: ReadOptions) -> Result<Self> {
        Self::new(LocalFile::open(path)?, options)
    }
}

/// The most bytes [`Reader::wrong_key_or`] reads to tell a wrong key from
/// a damaged tensor.
pub const WRONG_KEY_PROBE_MAX: u64 = 64 << 20;

/// The error for a key given to read a file that is not encrypted.
fn key_for_plaintext(file: String) -> Error {
    Error::format(
        file,
        tensorizer_core::Error::Encryption {
            reason: "a key was given but the file is not encrypted",
        },
    )
}

/// The error for a file without the tensorizer magic: what else it is,
/// when its first bytes say ([`tensorizer_core::sniff_format`]).
fn not_tensorizer<S: RangeSource>(source: &S) -> Error {
    let file = source.name().to_string();
    let mut head =
        vec![0u8; source.len().min(tensorizer_core::checkpoint::SNIFF_LEN as u64) as usize];
    if let Err(e) = source.read_exact_at(0, &mut head) {
        return e;
    }
    match tensorizer_core::sniff_format(&head, source.len()) {
        Some(found) if found != tensorizer_core::Sniffed::Tensorizer => {
            Error::OtherFormat { file, found }
        }
        _ => Error::format(file, tensorizer_core::Error::NotTensorizer),
    }
}

impl<S: RangeSource> Reader<S> {
    /// Reads the file header and the metadata index (two reads), under the
    /// default [`ParseLimits`].
    pub fn new(source: S, options: ReadOptions) -> Result<Self> {
        Self::new_limited(source, options, &ParseLimits::default())
    }

    /// [`Reader::new`] for files beyond the default limits on tensor count
    /// and path sizes.
    pub fn new_limited(source: S, options: ReadOptions, limits: &ParseLimits) -> Result<Self> {
        let name = source.name().to_string();
        let fmt = |source| Error::format(name.clone(), source);
        let mut head = vec![0u8; FileHeader::LEN.min(source.len() as usize)];
        source.read_exact_at(0, &mut head)?;
        let header = match FileHeader::parse(&head) {
            Err(tensorizer_core::Error::NotTensorizer) => {
                return Self::other_format(source, options);
            }
            parsed => parsed.map_err(fmt)?,
        };
        let available = source.len().saturating_sub(FileHeader::LEN as u64);
        if header.metadata_len > available {
            return Err(fmt(tensorizer_core::Error::Truncated {
                offset: source.len(),
                needed: header.metadata_len - available,
            }));
        }
        let mut index = vec![0u8; header.metadata_len as usize];
        source.read_exact_at(FileHeader::LEN as u64, &mut index)?;
        let metadata = Metadata::parse_within(&header, &index, limits).map_err(fmt)?;
        metadata.check_file_len(source.len()).map_err(fmt)?;
        // A missing key is reported when an encrypted tensor is read, so
        // that an encrypted file can still be inspected without one.
        if !header.has_crypt_info() && options.key.is_some() {
            return Err(key_for_plaintext(name.clone()));
        }
        Ok(Self::assemble(source, Layout::Tensorizer(header), metadata, options))
    }

    /// A reader over a file without the tensorizer magic: a safetensors
    /// file, a `torch.save` zip checkpoint, or the error naming what else
    /// it is.
    fn other_format(source: S, options: ReadOptions) -> Result<Self> {
        let mut head =
            vec![0u8; source.len().min(tensorizer_core::checkpoint::SNIFF_LEN as u64) as usize];
        source.read_exact_at(0, &mut head)?;
        let sniffed = tensorizer_core::sniff_format(&head, source.len());
        let known = matches!(
            sniffed,
            Some(tensorizer_core::Sniffed::Safetensors { .. } | tensorizer_core::Sniffed::TorchZip)
        );
        if !known {
            return Err(not_tensorizer(&source));
        }
        if options.key.is_some() {
            return Err(key_for_plaintext(source.name().to_string()));
        }
        if sniffed == Some(tensorizer_core::Sniffed::TorchZip) {
            let (source, entries) = torch::open(source)?;
            return Ok(Self::assemble(source, Layout::Torch, Metadata { entries }, options));
        }
        let header = safetensors::SafetensorsHeader::read(&source)?;
        let metadata = Metadata { entries: header.index_entries() };
        let layout =
            Layout::Safetensors { data_start: header.data_start, metadata: header.metadata };
        Ok(Self::assemble(source, layout, metadata, options))
    }

    fn assemble(source: S, layout: Layout, metadata: Metadata, options: ReadOptions) -> Self {
        let by_name =
            metadata.entries.iter().enumerate().map(|(i, e)| (e.path.clone(), i)).collect();
        Self { source, layout, metadata, by_name, options, keys: Mutex::new(KeyRing::default()) }
    }

    /// The file's format and header.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The tensorizer file header; `None` for a safetensors file or a
    /// checkpoint.
    pub fn header(&self) -> Option<&FileHeader> {
        match &self.layout {
            Layout::Tensorizer(header) => Some(header),
            Layout::Safetensors { .. } | Layout::Torch => None,
        }
    }

    /// Bytes of tensor data the file holds (a tensorizer header's count).
    pub fn tensor_size(&self) -> u64 {
        match &self.layout {
            Layout::Tensorizer(header) => header.tensor_size,
            Layout::Safetensors { .. } | Layout::Torch => {
                self.metadata.entries.iter().map(|e| e.data_length).sum()
            }
        }
    }

    /// Parses tensor `entry`'s header bytes `raw` (none for a safetensors
    /// or checkpoint tensor) and checks them against its index entry.
    pub(crate) fn parse_record(&self, entry: &MetadataEntry, raw: &[u8]) -> Result<TensorRecord> {
        match &self.layout {
            Layout::Tensorizer(header) => {
                TensorRecord::parse(entry, raw, header).map_err(self.tensor_err(entry))
            }
            Layout::Safetensors { .. } | Layout::Torch => Ok(TensorRecord::bare(entry)),
        }
    }

    /// Every tensor's index entry, in file order.
    pub fn entries(&self) -> &[MetadataEntry] {
        &self.metadata.entries
    }

    /// Position of the tensor named `path`.
    pub fn index_of(&self, path: &TensorPath) -> Option<usize> {
        self.by_name.get(path).copied()
    }

    /// The byte source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Whether tensor data is encrypted (a key is needed to load it).
    pub fn is_encrypted(&self) -> bool {
        self.header().is_some_and(FileHeader::has_crypt_info)
    }

    /// The options this reader was opened with.
    pub fn options(&self) -> &ReadOptions {
        &self.options
    }

    fn entry(&self, i: usize) -> Result<&MetadataEntry> {
        self.metadata
            .entries
            .get(i)
            .ok_or_else(|| Error::Invalid(format!("{}: no tensor number {i}", self.source.name())))
    }

    fn tensor_err(
        &self,
        entry: &MetadataEntry,
    ) -> impl FnOnce(tensorizer_core::Error) -> Error + '_ {
        let tensor = entry.path.to_string();
        move |source| Error::tensor(self.source.name().to_string(), tensor, source)
    }

    /// Reads and parses tensor `i`'s header.
    pub fn record(&self, i: usize) -> Result<TensorRecord> {
        let entry = self.entry(i)?;
        let mut raw = vec![0u8; entry.header_len() as usize];
        self.source.read_exact_at(entry.header_offset, &mut raw)?;
        self.parse_record(entry, &raw)
    }

    /// The writer input that reproduces tensor `i` (reads its header for
    /// the module index).
    pub fn spec(&self, i: usize) -> Result<tensorizer_core::TensorSpec> {
        let entry = self.entry(i)?;
        let record = self.record(i)?;
        Ok(tensorizer_core::TensorSpec {
            path: entry.path.clone(),
            tensor_type: entry.tensor_type,
            module_index: record.header.module_index,
            dtype: entry.dtype.clone(),
            shape: entry.shape.clone(),
            meta: entry.is_meta(),
        })
    }

    /// The key for `record`, derived once per key-derivation setting.
    pub(crate) fn key_for(&self, record: &TensorRecord) -> Result<Option<Key>> {
        let Some(info) = &record.header.crypt_info else {
            return Ok(None);
        };
        let err = |e| Error::tensor(self.source.name(), record.header.path.to_string(), e);
        if record.cipher().map_err(err)?.is_none() {
            return Ok(None);
        }
        let Some(source) = &self.options.key else {
            return Err(err(tensorizer_core::Error::Encryption {
                reason: "the file is encrypted but no key or passphrase was given",
            }));
        };
        match source {
            KeySource::Key(k) => Ok(Some(k.clone())),
            KeySource::Passphrase(..) => {
                // A poisoned lock only means another reader panicked while
                // deriving; the ring itself is never left half-updated.
                let mut ring = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                Ok(Some(
                    source
                        .key_in_deriving(info, &mut ring, crate::kernels::kdf::derive)
                        .map_err(err)?,
                ))
            }
        }
    }

    /// Reads tensor `i` into `out`, which must be exactly its size in
    /// memory ([`MetadataEntry::nbytes`]; meta tensors are zero-filled).
    pub fn load_into(&self, i: usize, out: &mut [u8]) -> Result<()> {
        self.load_many(vec![(i, out)])
    }

    /// Whether a load of `bytes` from this reader's source would read around
    /// the page cache (spec §23.1): a local file, mostly not cached, and a
    /// load large enough.
    pub fn reads_cold(&self, bytes: u64) -> bool {
        !self.source.prefers_long_reads() && cold::worth_it(bytes) && self.source.is_cold()
    }

    /// [`plan::plan_load`] for this reader, with the kind of memory its CPU
    /// copies get ([`crate::memory::huge_pages_pay_off`]).
    pub fn plan_load(
        &self,
        indices: &[usize],
        destination: plan::Destination,
        mapped: bool,
    ) -> Option<plan::LoadPlan> {
        let mut plan = plan::plan_load(&self.metadata.entries, indices, destination, mapped)?;
        let entries = &self.metadata.entries;
        let copied: u64 =
            plan.small.iter().chain(&plan.large).map(|&i| entries[i].data_length).sum();
        plan.huge_pages = crate::memory::huge_pages_pay_off(self.reads_cold(copied));
        Some(plan)
    }

    /// Reads many tensors concurrently, each into its own buffer; hashes are
    /// checked when the reader was opened with `verify_hash`.
    pub fn load_many(&self, jobs: Vec<(usize, &mut [u8])>) -> Result<()> {
        self.load_many_with(jobs, self.options.verify_hash)
    }

    /// [`Reader::load_many`] with hash verification chosen per call. A
    /// tensor that fails to decrypt when another one does not decrypt
    /// either is reported as [`Error::WrongKey`] ([`Reader::wrong_key_or`]).
    pub fn load_many_with(&self, jobs: Vec<(usize, &mut [u8])>, verify: bool) -> Result<()> {
        self.load_jobs(jobs, verify).map_err(|e| self.wrong_key_or(e))
    }

    /// `e`, or [`Error::WrongKey`] when `e` is a failed decryption and
    /// another encrypted tensor (the smallest, if it holds at most
    /// [`WRONG_KEY_PROBE_MAX`] bytes) fails to decrypt as well: the
    /// authenticated encryption fails every tensor under a wrong key, while
    /// corruption fails the damaged ones only. A file of one encrypted
    /// tensor has no other to ask: its failure is a wrong key.
    pub fn wrong_key_or(&self, e: Error) -> Error {
        if !matches!(e.format_error(), Some(tensorizer_core::Error::Decryption)) {
            return e;
        }
        let failed = e.tensor_name().map(str::to_string);
        let probe = self
            .metadata
            .entries
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.data_length > 0 && failed.as_deref() != Some(t.path.to_string().as_str())
            })
            .min_by_key(|(_, t)| t.nbytes());
        let decrypts = match probe {
            None => false,
            Some((_, t)) if t.nbytes() > WRONG_KEY_PROBE_MAX => return e,
            Some((i, t)) => {
                let mut out = vec![0u8; t.nbytes() as usize];
                !matches!(
                    self.load_jobs(vec![(i, &mut out)], false)
                        .err()
                        .as_ref()
                        .and_then(Error::format_error),
                    Some(tensorizer_core::Error::Decryption)
                )
            }
        };
        if decrypts { e } else { Error::WrongKey { file: self.source.name().to_string() } }
    }

    fn load_jobs(&self, mut jobs: Vec<Job<'_>>, verify: bool) -> Result<()> {
        self.check_buffers(&jobs)?;
        jobs.sort_by_key(|(i, _)| *i);
        if self.reads_cold(jobs.iter().map(|(_, out)| out.len() as u64).sum()) {
            return self.load_cold(jobs, verify);
        }
        if self.source.prefers_long_reads() {
            return self.load_spans(jobs, verify);
        }
        let (batches, whole, mut large) = self.group_jobs(jobs);
        let records = self.read_small_and_headers(batches, whole, &large, verify)?;
        self.read_large(&mut large, &records, verify)?;
        self.verify_large(&large, &records, verify)
    }

    /// Refuses a job whose buffer is not exactly its tensor's size.
    fn check_buffers(&self, jobs: &[Job<'_>]) -> Result<()> {
        for (i, out) in jobs {
            let entry = self.entry(*i)?;
            if out.len() as u64 != entry.nbytes() {
                return Err(Error::Invalid(format!(
                    "{}: tensor {:?} needs a {}-byte buffer, got {}",
                    self.source.name(),
                    entry.path.to_string(),
                    entry.nbytes(),
                    out.len()
                )));
            }
        }
        Ok(())
    }

    /// `jobs` (in file order) as batches of small tensors read together,
    /// tensors read whole in one request each, and large tensors read
    /// piece by piece.
    #[allow(clippy::type_complexity)]
    fn group_jobs<'b>(
        &self,
        jobs: Vec<Job<'b>>,
    ) -> (Vec<Vec<Job<'b>>>, Vec<Job<'b>>, Vec<Job<'b>>) {
        let entries = &self.metadata.entries;
        let mut batches: Vec<Vec<Job<'b>>> = Vec::new();
        let (mut whole, mut large) = (Vec::new(), Vec::new());
        for (i, out) in jobs {
            let e = &entries[i];
            let span = e.header_len().saturating_add(e.data_length);
            if span > PIECE_LEN as u64 {
                large.push((i, out));
                continue;
            }
            if span > SMALL_TENSOR || e.data_length >= DIRECT_MIN {
                whole.push((i, out));
                continue;
            }
            // A batch reads everything between its members: it takes the
            // next tensor only across a gap read through as cheaply as
            // skipped (tensors read on their own, or not asked for, lie
            // in such gaps), and within BATCH_SPAN of its start.
            let fits = batches.last().is_some_and(|b| match (b.first(), b.last()) {
                (Some((first, _)), Some((last, _))) => {
                    let gap = e.header_offset.checked_sub(entries[*last].data_end());
                    gap.is_some_and(|g| g <= records::HEADER_GAP)
                        && e.data_end() - entries[*first].header_offset <= BATCH_SPAN
                }
                _ => false,
            });
            match batches.last_mut() {
                Some(b) if fits => b.push((i, out)),
                _ => batches.push(vec![(i, out)]),
            }
        }
        (batches, whole, large)
    }

    /// Phase 1: small tensors in batches, tensors of at most a piece (or
    /// with at least DIRECT_MIN of data) whole, straight into their
    /// buffers with no second pass, and the headers of `large` ones.
    fn read_small_and_headers(
        &self,
        batches: Vec<Vec<Job<'_>>>,
        whole: Vec<Job<'_>>,
        large: &[Job<'_>],
        verify: bool,
    ) -> Result<Vec<Option<TensorRecord>>> {
        enum Work<'a, 'b> {
            Batch(Vec<Job<'b>>),
            Whole(usize, &'b mut [u8]),
            Header(usize, &'a mut Option<TensorRecord>),
        }
        let mut records: Vec<Option<TensorRecord>> = vec![None; large.len()];
        let mut work: Vec<Work<'_, '_>> = batches.into_iter().map(Work::Batch).collect();
        work.extend(whole.into_iter().map(|(i, out)| Work::Whole(i, out)));
        work.extend(
            large.iter().zip(records.iter_mut()).map(|((i, _), slot)| Work::Header(*i, slot)),
        );
        for_each(self.options.num_readers, work, |w| match w {
            Work::Batch(members) => self.read_batch(members, verify),
            Work::Whole(i, out) => self.read_whole(i, out, verify),
            Work::Header(i, slot) => {
                *slot = Some(self.record(i)?);
                Ok(())
            }
        })?;
        Ok(records)
    }

    /// Phase 2: the data of `large` tensors (their `records` read in phase
    /// 1), piece by piece, decrypting as it lands; a tensor that is one
    /// piece is also verified right away, by the same thread while its data
    /// is still in cache. A single box larger than a piece (no known writer
    /// makes one) is opened whole once all its pieces are in.
    fn read_large(
        &self,
        large: &mut [Job<'_>],
        records: &[Option<TensorRecord>],
        verify: bool,
    ) -> Result<()> {
        let mut keys = Vec::with_capacity(large.len());
        for record in records.iter().flatten() {
            keys.push(self.key_for(record)?);
        }
        let mut pieces = Vec::new();
        for (((i, out), record), key) in large.iter_mut().zip(records).zip(&keys) {
            let Some(record) = record else { continue };
            let entry = &self.metadata.entries[*i];
            let cipher = record.cipher().map_err(self.tensor_err(entry))?;
            let check = (verify && verify_inline(out.len(), cipher.as_ref())).then_some(record);
            for (n, piece) in out.chunks_mut(PIECE_LEN).enumerate() {
                pieces.push((entry, cipher, key.as_ref(), check, n, piece));
            }
        }
        for_each(self.options.num_readers, pieces, |(entry, cipher, key, check, n, piece)| {
            let offset = (n * PIECE_LEN) as u64;
            crate::memory::prefault(piece);
            self.source.read_exact_at(entry.data_offset + offset, piece)?;
            if let (Some(cipher), Some(key)) = (cipher, key)
                && piecewise(&cipher)
            {
                decrypt_piece(&cipher, key, offset, piece).map_err(self.tensor_err(entry))?;
            }
            if let Some(record) = check {
                record
                    .verify_on(piece, crate::kernels::digest::kernel())
                    .map_err(self.tensor_err(entry))?;
            }
            Ok(())
        })?;
        for (((i, out), record), key) in large.iter_mut().zip(records).zip(&keys) {
            let entry = &self.metadata.entries[*i];
            let Some(record) = record else { continue };
            if let (Some(cipher), Some(key)) =
                (record.cipher().map_err(self.tensor_err(entry))?, key)
                && !piecewise(&cipher)
            {
                decrypt_piece(&cipher, key, 0, out).map_err(self.tensor_err(entry))?;
            }
        }
        Ok(())
    }

    /// Phase 3: with `verify`, the hashes of `large` tensors not verified
    /// in phase 2, one tensor per thread.
    fn verify_large(
        &self,
        large: &[Job<'_>],
        records: &[Option<TensorRecord>],
        verify: bool,
    ) -> Result<()> {
        if !verify {
            return Ok(());
        }
        let work: Vec<_> = large.iter().zip(records).collect();
        for_each(self.options.num_readers, work, |((i, out), record)| {
            let entry = &self.metadata.entries[*i];
            match record {
                Some(r) if !verify_inline(out.len(), r.cipher().ok().flatten().as_ref()) => r
                    .verify_on(out, crate::kernels::digest::kernel())
                    .map_err(self.tensor_err(entry)),
                _ => Ok(()),
            }
        })
    }

    /// Tensor `i` (header and data at most [`PIECE_LEN`]) read with one
    /// vectored read, its data straight into `out`, then completed.
    fn read_whole(&self, i: usize, out: &mut [u8], verify: bool) -> Result<()> {
        let entry = &self.metadata.entries[i];
        // At most PIECE_LEN (the caller checked), so it fits a usize.
        let mut header = vec![0u8; entry.header_len() as usize];
        if entry.is_meta() {
            self.source.read_exact_at(entry.header_offset, &mut header)?;
        } else {
            // `out` is exactly `nbytes`, which equals the stored data length.
            crate::memory::prefault(out);
            self.source
                .read_vectored_at(entry.header_offset, &mut [&mut header[..], &mut out[..]])?;
        }
        self.finish(entry, &header, out, verify)
    }

    /// One read covering consecutive small tensors, then per tensor: parse,
    /// copy data out, decrypt, verify.
    fn read_batch(&self, members: Vec<(usize, &mut [u8])>, verify: bool) -> Result<()> {
        let (Some((first, _)), Some((last, _))) = (members.first(), members.last()) else {
            return Ok(());
        };
        let start = self.metadata.entries[*first].header_offset;
        let end = self.metadata.entries[*last].data_end();
        let mut scratch = vec![0u8; (end - start) as usize];
        self.source.read_exact_at(start, &mut scratch)?;
        for (i, out) in members {
            let entry = &self.metadata.entries[i];
            let at = |o: u64| (o - start) as usize;
            if !entry.is_meta() {
                out.copy_from_slice(&scratch[at(entry.data_offset)..at(entry.data_end())]);
            }
            self.finish(
                entry,
                &scratch[at(entry.header_offset)..at(entry.data_offset)],
                out,
                verify,
            )?;
        }
        Ok(())
    }

    /// Completes a tensor whose header bytes are `raw` and whose stored data
    /// is already in `out`: parses the header, zero-fills a meta tensor,
    /// decrypts, and checks the hashes when `verify` is set.
    fn finish(
        &self,
        entry: &MetadataEntry,
        raw: &[u8],
        out: &mut [u8],
        verify: bool,
    ) -> Result<()> {
        let record = self.parse_record(entry, raw)?;
        if entry.is_meta() {
            out.fill(0);
            if verify {
                record.verify(&[]).map_err(self.tensor_err(entry))?;
            }
            return Ok(());
        }
        if let (Some(cipher), Some(key)) =
            (record.cipher().map_err(self.tensor_err(entry))?, self.key_for(&record)?)
        {
            decrypt_piece(&cipher, &key, 0, out).map_err(self.tensor_err(entry))?;
        }
        if verify {
            record
                .verify_on(out, crate::kernels::digest::kernel())
                .map_err(self.tensor_err(entry))?;
        }
        Ok(())
    }

    /// Streams tensor `i`'s plaintext through `f` in pieces of about
    /// `piece_len` bytes (memory stays bounded by one piece), then checks
    /// its hashes when `verify` is set. Meta tensors call `f` never.
    pub fn stream(
        &self,
        i: usize,
        piece_len: usize,
        verify: bool,
        mut f: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<TensorRecord> {
        let entry = self.entry(i)?;
        let record = self.record(i)?;
        let cipher = record.cipher().map_err(self.tensor_err(entry))?;
        let key = self.key_for(&record)?;
        let piece_len = match &cipher {
            Some(c) => (piece_len as u64).div_ceil(c.chunk_size).max(1) * c.chunk_size,
            None => piece_len.max(1) as u64,
        };
        let mut hasher = verify.then(|| record.hasher_on(crate::kernels::digest::kernel()));
        let mut buf = vec![0u8; piece_len.min(entry.data_length) as usize];
        let mut done = 0u64;
        while done < entry.data_length {
            let n = (entry.data_length - done).min(piece_len) as usize;
            let piece = &mut buf[..n];
            self.source.read_exact_at(entry.data_offset + done, piece)?;
            if let (Some(cipher), Some(key)) = (&cipher, &key) {
                decrypt_piece(cipher, key, done, piece).map_err(self.tensor_err(entry))?;
            }
            if let Some(h) = &mut hasher {
                h.update(piece);
            }
            f(piece)?;
            done += n as u64;
        }
        if let Some(h) = hasher {
            tensorizer_core::hash::verify(&record.header, &h.finish())
                .map_err(self.tensor_err(entry))?;
        }
        Ok(record)
    }
}

/// Whether a large tensor of `len` bytes is verified as its one piece
/// lands (it is read, and decrypted, whole by one thread).
fn verify_inline(len: usize, cipher: Option<&Cipher<'_>>) -> bool {
    len > 0 && len <= PIECE_LEN && cipher.is_none_or(piecewise)
}

/// Whether pieces of [`PIECE_LEN`] bytes hold whole encryption chunks.
fn piecewise(cipher: &Cipher<'_>) -> bool {
    (PIECE_LEN as u64).is_multiple_of(cipher.chunk_size)
}

/// Decrypts `piece`, which starts `offset` bytes into the data (a multiple
/// of the chunk size).
pub(crate) fn decrypt_piece(
    cipher: &Cipher<'_>,
    key: &Key,
    offset: u64,
    piece: &mut [u8],
) -> tensorizer_core::Result<()> {
    let first = (offset / cipher.chunk_size) as usize;
    let size = usize::try_from(cipher.chunk_size).unwrap_or(usize::MAX).max(1);
    let kernel = crate::kernels::cipher::kernel();
    for (n, chunk) in piece.chunks_mut(size).enumerate() {
        let index = first + n;
        let mac = cipher.macs.get(index).ok_or(tensorizer_core::Error::Decryption)?;
        tensorizer_core::crypto::open_chunk_on(
            key,
            cipher.nonce,
            index as u64,
            chunk,
            mac,
            kernel,
        )?;
    }
    Ok(())
}
