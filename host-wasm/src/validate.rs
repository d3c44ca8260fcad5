//! Validation as plain Rust over [`RandomAccess`]: [`inspect`] reads the
//! file header and the metadata index with two small reads; [`verify_all`]
//! streams every tensor through decryption and the CRC32/SHA-256 hasher in
//! pieces of at most [`PIECE_LEN`] bytes (more only when one encryption
//! chunk is longer, up to [`MAX_CHUNK_LEN`]).
//!
//! The steps are public for front ends whose reads are asynchronous (a
//! browser reading a `Blob`): [`parse_header`], then [`parse_index`], then per
//! tensor [`TensorVerifier::new`] over its header bytes, and
//! [`TensorVerifier::next_piece`] / [`TensorVerifier::update`] until it is
//! done, then [`TensorVerifier::finish`]. Nothing here allocates a size the
//! file merely claims: every buffer is either bounded by a constant or by
//! bytes the source really has, and is reserved fallibly.

use tensorizer_core::Error::Decryption;
use tensorizer_core::crypto::{Key, KeyRing};
use tensorizer_core::hash::TensorHasher;
use tensorizer_core::layout::ParseLimits;
use tensorizer_core::read::Cipher;
use tensorizer_core::{
    FileHeader, HashValue, KdfParams, KeySource, Metadata, MetadataEntry, TensorRecord,
};

use crate::error::{ErrorKind, ValidateError};
use crate::report::{
    REPORT_VERSION, Report, Status, TensorVerification, VerifySummary, dtype_totals, row,
};
use crate::source::RandomAccess;

/// Bytes read, decrypted and hashed at a time (a multiple of tensorizer's
/// 2 MiB encryption chunk).
pub const PIECE_LEN: usize = 8 << 20;

/// Longest encryption chunk the validator opens. A chunk's MAC covers all
/// of it, so it is decrypted whole: a file with one box over a larger
/// tensor (no known writer makes one) is refused rather than buffered.
pub const MAX_CHUNK_LEN: u64 = 64 << 20;

/// A parsed file header and metadata index.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The file header.
    pub header: FileHeader,
    /// The metadata index.
    pub metadata: Metadata,
    /// The source's length.
    pub file_len: u64,
}

/// How many bytes to read, from offset 0, for [`parse_header`].
pub fn header_read_len(file_len: u64) -> usize {
    usize::try_from(file_len.min(FileHeader::LEN as u64)).unwrap_or(FileHeader::LEN)
}

/// Parses the file header (the first bytes of a source of `file_len`
/// bytes) and checks that the metadata index it declares is really there,
/// so the caller can allocate and read `header.metadata_len` bytes at
/// [`tensorizer_core::layout::METADATA_OFFSET`].
pub fn parse_header(head: &[u8], file_len: u64) -> Result<FileHeader, ValidateError> {
    let header = FileHeader::parse(head)?;
    let available = file_len.saturating_sub(FileHeader::LEN as u64);
    if header.metadata_len > available {
        return Err(tensorizer_core::Error::Truncated {
            offset: file_len,
            needed: header.metadata_len - available,
        }
        .into());
    }
    Ok(header)
}

/// Parses the metadata index and checks every tensor lies inside the file.
pub fn parse_index(
    header: FileHeader,
    index: &[u8],
    file_len: u64,
    limits: &ParseLimits,
) -> Result<Inspection, ValidateError> {
    let metadata = Metadata::parse_within(&header, index, limits)?;
    metadata.check_file_len(file_len)?;
    Ok(Inspection { header, metadata, file_len })
}

use tensorizer_core::scan::tensorizer::tensor_rule;
pub use tensorizer_core::scan::tensorizer::{
    MEMORY_PER_INDEX_BYTE, MEMORY_PER_TENSOR, MEMORY_PER_VERIFIED_TENSOR, reserve_for_index,
};

/// Reads and parses the file header and the metadata index: two reads.
pub fn inspect<R: RandomAccess + ?Sized>(
    src: &mut R,
    limits: &ParseLimits,
) -> Result<Inspection, ValidateError> {
    inspect_for(src, limits, false)
}

/// [`inspect`], first making sure of the memory the index and its report
/// take ([`reserve_for_index`]; more with `verify`).
pub fn inspect_for<R: RandomAccess + ?Sized>(
    src: &mut R,
    limits: &ParseLimits,
    verify: bool,
) -> Result<Inspection, ValidateError> {
    let file_len = src.len();
    let mut head = [0u8; FileHeader::LEN];
    let head = &mut head[..header_read_len(file_len)];
    src.read_exact_at(0, head)?;
    let header = parse_header(head, file_len)?;
    if header.tensor_count <= limits.max_tensors {
        reserve_for_index(&header, verify)?;
    }
    let at = tensorizer_core::layout::METADATA_OFFSET;
    let mut index = zeroed(header.metadata_len, at, "the metadata index")?;
    src.read_exact_at(at, &mut index)?;
    parse_index(header, &index, file_len, limits)
}

/// A zero-filled buffer of `len` bytes, or an error naming `what` when the
/// memory cannot be had (instead of aborting).
pub fn zeroed(len: u64, offset: u64, what: &str) -> Result<Vec<u8>, ValidateError> {
    let no_memory = || ValidateError::no_memory(offset, what, len);
    let n = usize::try_from(len).map_err(|_| no_memory())?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| no_memory())?;
    v.resize(n, 0);
    Ok(v)
}

impl Inspection {
    /// The inspection a core scan's tensorizer index gives.
    pub fn from_index(index: tensorizer_core::scan::tensorizer::Index, file_len: u64) -> Self {
        Self { header: index.header, metadata: index.metadata, file_len }
    }

    /// The header and index back, for the scan they came from (a shard
    /// index checks its map against the tensor names).
    pub fn into_index(self) -> tensorizer_core::scan::tensorizer::Index {
        tensorizer_core::scan::tensorizer::Index { header: self.header, metadata: self.metadata }
    }

    /// The report for this file, without verification.
    pub fn report(&self, file: &str) -> Report {
        let entries = &self.metadata.entries;
        let by_dtype = dtype_totals(&tensorizer_core::report::totals(entries));
        let h =
            tensorizer_core::report::HeaderSummary::of(&self.header, entries.len(), self.file_len);
        Report {
            report_version: REPORT_VERSION,
            file: file.to_string(),
            format: tensorizer_core::Format::Tensorizer.as_str(),
            file_bytes: h.file_bytes,
            data_version: Some(h.data_version),
            feature_flags: Some(h.feature_flags),
            encrypted: Some(h.encrypted),
            versioned_headers: Some(h.versioned_headers),
            valid: true,
            tensors: h.tensor_count,
            findings: Vec::new(),
            errors: Vec::new(),
            tensor_count: h.tensor_count,
            data_bytes: h.data_bytes,
            metadata_index_bytes: Some(h.metadata_index_bytes),
            by_dtype,
            tensor_rows: entries.iter().enumerate().map(|(i, e)| row(i, e)).collect(),
            verification: None,
            model: None,
            shards: None,
        }
    }
}

/// Keys for one file: raw, or derived from a passphrase once per
/// key-derivation setting within the core's budget ([`KeyRing`]).
#[derive(Debug)]
pub struct Keys {
    source: KeySource,
    ring: KeyRing,
    probed: Vec<KdfParams>,
}

impl Keys {
    /// Keys from `source`.
    pub fn new(source: KeySource) -> Self {
        Self { source, ring: KeyRing::default(), probed: Vec::new() }
    }

    fn key_for(&mut self, record: &TensorRecord, at: u64) -> Result<Key, ValidateError> {
        let info = record.header.crypt_info.as_ref().ok_or(tensorizer_core::Error::Decryption)?;
        if let KeySource::Passphrase(_, limits) = &self.source
            && let Ok(params) = info.kdf()
            && params.memlimit <= limits.max_memlimit
            && !self.probed.contains(params)
        {
            // Argon2 allocates its memory infallibly: make sure it is there
            // first (wasm memory, once grown, stays for the real allocation).
            drop(zeroed(params.memlimit.saturating_add(64 << 10), at, "key derivation")?);
            self.probed.push(params.clone());
        }
        Ok(self.source.key_in(info, &mut self.ring)?)
    }
}

/// Streams one tensor's data through decryption and its hasher.
pub struct TensorVerifier<'a> {
    entry: &'a MetadataEntry,
    record: TensorRecord,
    key: Option<Key>,
    piece_len: u64,
    hasher: Option<TensorHasher>,
    done: u64,
}

impl std::fmt::Debug for TensorVerifier<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorVerifier")
            .field("tensor", &self.entry.path)
            .field("piece_len", &self.piece_len)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<'a> TensorVerifier<'a> {
    /// Parses tensor `i`'s header (`raw_header`, exactly
    /// `entry.header_len()` bytes read at `entry.header_offset`) and gets
    /// its key. `piece_len` is the caller's preferred piece size.
    pub fn new(
        inspection: &'a Inspection,
        i: usize,
        raw_header: &[u8],
        keys: Option<&mut Keys>,
        piece_len: usize,
    ) -> Result<Self, ValidateError> {
        let entry = inspection
            .metadata
            .entries
            .get(i)
            .ok_or_else(|| ValidateError::usage(format!("no tensor number {i}")))?;
        let in_tensor = |e| tensor_error(entry, e);
        let ruled =
            |e: tensorizer_core::Error,
             rule: fn(&tensorizer_core::Error) -> tensorizer_core::RuleId| {
                let r = rule(&e);
                let mut v = ValidateError::from(e);
                v.rule = Some(r);
                in_tensor(v)
            };
        let record = TensorRecord::parse(entry, raw_header, &inspection.header)
            .map_err(|e| ruled(e, tensor_rule))?;
        let cipher = record.cipher().map_err(|e| ruled(e, tensor_rule))?;
        let piece = (piece_len.max(1)) as u64;
        let (key, piece_len) = match (&cipher, keys) {
            (Some(c), _) if entry.data_length > 0 && c.chunk_size > MAX_CHUNK_LEN => {
                let mut e = ValidateError::invalid(
                    Some(entry.header_offset),
                    format!(
                        "an encryption chunk of {} bytes is above the validator's limit of {MAX_CHUNK_LEN}",
                        c.chunk_size
                    ),
                );
                e.rule = Some(tensorizer_core::RuleId::TzrEncryption);
                return Err(in_tensor(e));
            }
            (Some(c), Some(keys)) if entry.data_length > 0 => {
                let key = keys.key_for(&record, entry.header_offset).map_err(in_tensor)?;
                (Some(key), piece.div_ceil(c.chunk_size).max(1).saturating_mul(c.chunk_size))
            }
            (Some(_), None) if entry.data_length > 0 => {
                return Err(ValidateError::usage(
                    "the file is encrypted: a key or passphrase is needed to verify it",
                ));
            }
            _ => (None, piece),
        };
        let hasher = Some(record.hasher());
        Ok(Self { entry, record, key, piece_len, hasher, done: 0 })
    }

    /// The next piece to read: its absolute offset and length, or `None`
    /// once every data byte has been fed.
    pub fn next_piece(&self) -> Option<(u64, usize)> {
        let left = self.entry.data_length.checked_sub(self.done).filter(|&n| n > 0)?;
        let at = self.entry.data_offset.checked_add(self.done)?;
        Some((at, usize::try_from(left.min(self.piece_len)).ok()?))
    }

    /// The largest piece this tensor will ask for.
    pub fn max_piece_len(&self) -> u64 {
        self.piece_len.min(self.entry.data_length)
    }

    /// Decrypts (in place) and hashes the piece [`Self::next_piece`] named.
    pub fn update(&mut self, piece: &mut [u8]) -> Result<(), ValidateError> {
        let expected = self.next_piece().map(|(_, n)| n);
        if expected != Some(piece.len()) {
            return Err(ValidateError::usage("the piece does not match next_piece()"));
        }
        if let Some(key) = &self.key {
            let cipher = self.record.cipher().map_err(|e| tensor_error(self.entry, e.into()))?;
            if let Some(cipher) = cipher {
                decrypt_piece(&cipher, key, self.done, piece).map_err(|(chunk_at, e)| {
                    let mut err = tensor_error(self.entry, e.into());
                    err.offset = self.entry.data_offset.checked_add(chunk_at);
                    err
                })?;
            }
        }
        if let Some(h) = &mut self.hasher {
            h.update(piece);
        }
        self.done = self.done.saturating_add(piece.len() as u64);
        Ok(())
    }

    /// Checks the stored hashes once every piece was fed.
    pub fn finish(mut self) -> TensorVerification {
        let mut checks = Vec::new();
        for h in &self.record.header.hashes {
            let name = match h {
                HashValue::Crc32(_) => "crc32",
                HashValue::Sha256(_) => "sha256",
            };
            if !checks.contains(&name) {
                checks.push(name);
            }
        }
        if self.key.is_some() {
            checks.push("mac");
        }
        let failed = |error| TensorVerification {
            status: Status::Failed,
            checks: checks.clone(),
            error: Some(error),
        };
        if self.next_piece().is_some() {
            return failed(ValidateError::usage("finish() before every piece was fed"));
        }
        let computed = self.hasher.take().map(TensorHasher::finish).unwrap_or_default();
        if let Err(e) = tensorizer_core::hash::verify(&self.record.header, &computed) {
            // The core's hash-mismatch message already names the tensor.
            let mut err = ValidateError::from(e);
            err.offset = Some(self.entry.header_offset);
            return failed(err);
        }
        let status = if checks.is_empty() { Status::Unverified } else { Status::Verified };
        TensorVerification { status, checks, error: None }
    }
}

/// `e`, with the tensor's name in front of the message.
fn tensor_error(entry: &MetadataEntry, mut e: ValidateError) -> ValidateError {
    if e.kind != ErrorKind::Usage {
        e.message =
            crate::error::one_line(&format!("tensor {:?}: {}", entry.path.to_string(), e.message));
    }
    e
}

/// Decrypts `piece`, which starts `offset` bytes into the data (a multiple
/// of the chunk size). On failure, says where the failing chunk starts.
fn decrypt_piece(
    cipher: &Cipher<'_>,
    key: &Key,
    offset: u64,
    piece: &mut [u8],
) -> Result<(), (u64, tensorizer_core::Error)> {
    let first =
        usize::try_from(offset / cipher.chunk_size.max(1)).map_err(|_| (offset, Decryption))?;
    let size = usize::try_from(cipher.chunk_size).unwrap_or(usize::MAX).max(1);
    for (n, chunk) in piece.chunks_mut(size).enumerate() {
        let index = first.checked_add(n).ok_or((offset, Decryption))?;
        cipher
            .open(key, index, chunk)
            .map_err(|e| (offset.saturating_add((n * size) as u64), e))?;
    }
    Ok(())
}

/// Verifies every tensor of `inspection`, filling in `report` (each row's
/// `verification` and the summary). Content failures are recorded per
/// tensor; a failed read, a missing key or memory that cannot be had ends
/// the run with an error. Memory: one piece buffer plus one tensor header
/// at a time.
pub fn verify_all<R: RandomAccess + ?Sized>(
    src: &mut R,
    inspection: &Inspection,
    key: Option<KeySource>,
    piece_len: usize,
    report: &mut Report,
) -> Result<VerifySummary, ValidateError> {
    if !inspection.header.has_crypt_info() && key.is_some() {
        return Err(ValidateError::invalid(None, "a key was given but the file is not encrypted"));
    }
    let needs_key = inspection.metadata.entries.iter().any(|e| e.data_length > 0);
    if inspection.header.has_crypt_info() && key.is_none() && needs_key {
        return Err(ValidateError::usage(
            "the file is encrypted: give a key or passphrase to verify it",
        ));
    }
    let mut keys = key.map(Keys::new);
    let mut buf: Vec<u8> = Vec::new();
    let mut summary = VerifySummary::default();
    for (i, entry) in inspection.metadata.entries.iter().enumerate() {
        let file_len = inspection.file_len;
        if entry.data_end() > file_len {
            // The scan reported it (TZR-004); nothing past the end is read.
            let e = tensorizer_core::Error::Truncated {
                offset: entry.header_offset.min(file_len),
                needed: entry.data_end() - file_len,
            };
            let outcome = TensorVerification {
                status: Status::Failed,
                checks: Vec::new(),
                error: Some(e.into()),
            };
            summary.failed += 1;
            if let Some(r) = report.tensor_rows.get_mut(i) {
                r.verification = Some(outcome);
            }
            continue;
        }
        let mut raw = zeroed(entry.header_len(), entry.header_offset, "a tensor header")?;
        src.read_exact_at(entry.header_offset, &mut raw)?;
        let outcome = match TensorVerifier::new(inspection, i, &raw, keys.as_mut(), piece_len) {
            Ok(mut v) => {
                let want = usize::try_from(v.max_piece_len()).unwrap_or(usize::MAX);
                if buf.len() < want {
                    drop(std::mem::take(&mut buf)); // free the old piece first
                    buf = zeroed(want as u64, entry.data_offset, "a data piece")?;
                }
                let mut failure = None;
                while let Some((at, n)) = v.next_piece() {
                    let piece = buf
                        .get_mut(..n)
                        .ok_or_else(|| ValidateError::no_memory(at, "a data piece", n as u64))?;
                    src.read_exact_at(at, piece)?;
                    summary.data_bytes_checked =
                        summary.data_bytes_checked.saturating_add(n as u64);
                    if let Err(e) = v.update(piece) {
                        failure = Some(e);
                        break;
                    }
                }
                match failure {
                    None => v.finish(),
                    Some(e) => TensorVerification {
                        status: Status::Failed,
                        checks: Vec::new(),
                        error: Some(e),
                    },
                }
            }
            Err(e) if e.kind == ErrorKind::Usage || e.kind == ErrorKind::Io => return Err(e),
            Err(e) => {
                TensorVerification { status: Status::Failed, checks: Vec::new(), error: Some(e) }
            }
        };
        match outcome.status {
            Status::Verified => summary.verified += 1,
            Status::Unverified => summary.unverified += 1,
            Status::Failed => summary.failed += 1,
        }
        if let Some(r) = report.tensor_rows.get_mut(i) {
            r.verification = Some(outcome);
        }
    }
    summary.ok = summary.failed == 0;
    report.verification = Some(summary.clone());
    report.conclude();
    Ok(summary)
}

/// The exit status a finished run deserves: 0 without findings, 1 with.
pub fn exit_code(report: &Report) -> u8 {
    if report.valid { crate::error::EXIT_OK } else { crate::error::EXIT_FINDINGS }
}

/// The first failure of a finished run, if any.
pub fn first_failure(report: &Report) -> Option<&ValidateError> {
    report.tensor_rows.iter().filter_map(|t| t.verification.as_ref()?.error.as_ref()).next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SliceSource;
    use tensorizer_core::crypto::Key;

    fn vector(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/../tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    fn run(bytes: &[u8], key: Option<KeySource>, piece: usize) -> Result<Report, ValidateError> {
        let mut src = SliceSource::new(bytes);
        let inspection = inspect(&mut src, &ParseLimits::default())?;
        let mut report = inspection.report("x");
        verify_all(&mut src, &inspection, key, piece, &mut report)?;
        Ok(report)
    }

    fn test_key() -> KeySource {
        KeySource::Key(Key::from_bytes(core::array::from_fn(|i| i as u8)))
    }

    #[test]
    fn plain_and_encrypted_vectors_verify_with_small_pieces() {
        let r = run(&vector("v1_flat.tensors"), None, 7).unwrap();
        assert_eq!(exit_code(&r), 0);
        assert_eq!(r.verification.as_ref().unwrap().verified, 15);
        // 4096 is below the 2 MiB chunk: pieces round up to whole chunks.
        let r = run(&vector("v3_enc_key.tensors"), Some(test_key()), 4096).unwrap();
        let s = r.verification.as_ref().unwrap();
        assert_eq!((s.verified, s.failed), (5, 0));
        assert!(
            r.tensor_rows.iter().all(|t| t.verification.as_ref().unwrap().checks.contains(&"mac"))
        );
    }

    #[test]
    fn flipped_bytes_fail_verification() {
        let mut bytes = vector("v3_enc_key.tensors");
        let last = bytes.len() - 100;
        bytes[last] ^= 1;
        let r = run(&bytes, Some(test_key()), PIECE_LEN).unwrap();
        assert_eq!(exit_code(&r), 1);
        let err = first_failure(&r).unwrap();
        assert_eq!(err.kind, ErrorKind::Verification);
        assert!(err.offset.is_some());
    }

    #[test]
    fn missing_key_is_a_usage_error() {
        let e = run(&vector("v3_enc_key.tensors"), None, PIECE_LEN).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn random_corruption_never_panics() {
        // xorshift: deterministic, no dependency.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (name, key) in [("v1_flat.tensors", None), ("v5_enc_long.tensors", Some(test_key()))] {
            let original = vector(name);
            let len = original.len() as u64;
            for _ in 0..400 {
                let mut bytes = original.clone();
                for _ in 0..1 + next() % 4 {
                    // The file header, the first index entries, or the tensors.
                    let at = match next() % 3 {
                        0 => next() % 73,
                        1 => 73 + next() % 512,
                        _ => len - 1 - next() % 1024,
                    };
                    bytes[at as usize] = next() as u8;
                }
                if next() % 4 == 0 {
                    bytes.truncate((next() % len) as usize);
                }
                match run(&bytes, key.clone(), 1 + (next() % 64) as usize) {
                    Ok(r) => assert!([0, 1].contains(&exit_code(&r))),
                    Err(e) => assert!([1, 2].contains(&e.exit_code()), "{e}"),
                }
                // Through the scanner, every problem of the file is a finding.
                let mut src = SliceSource::new(&bytes);
                match crate::cli::validate(&mut src, "x.tensors", true, key.clone()) {
                    Ok(r) => assert!([0, 1].contains(&exit_code(&r))),
                    Err(e) => assert_eq!(e.exit_code(), 2, "{e}"),
                }
            }
        }
    }

    #[test]
    fn truncation_is_a_finding_with_offset() {
        let bytes = vector("v1_flat.tensors");
        // The last 8 bytes are the end marker, which readers do not need.
        for cut in [0, 3, 40, 73, 1000, bytes.len() - 9] {
            let e = run(&bytes[..cut], None, PIECE_LEN).unwrap_err();
            assert_eq!(e.exit_code(), 1, "cut {cut}: {e}");
            let mut src = SliceSource::new(&bytes[..cut]);
            let r = crate::cli::validate(&mut src, "x", true, None).unwrap();
            assert_eq!(exit_code(&r), 1, "cut {cut}");
            assert!(r.findings[0].offset.is_some(), "cut {cut}: {:?}", r.findings);
        }
    }
}
