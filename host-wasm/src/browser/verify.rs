//! "Verify": every tensor's data read in pieces through one read-ahead
//! window, decrypted when a key is given and hashed, with a result per
//! tensor and progress as it goes. Memory: the window, one piece and one
//! tensor header. For torch checkpoints, every zip entry's CRC-32.

use serde::Serialize;
use tensorizer_core::checkpoint::Leaf;
use tensorizer_core::hash::TensorHasher;
use tensorizer_core::{HashValue, KeySource};

use crate::error::{ErrorKind, ValidateError};
use crate::report::{Status, TensorVerification, VerifySummary};
use crate::validate::{Inspection, Keys, PIECE_LEN, TensorVerifier, zeroed};

use super::open::Opened;
use super::source::{AsyncSource, Window};
use super::torch;

/// Read-ahead window: small tensors (header and data) come from one read.
pub const WINDOW: usize = 4 << 20;

/// Where results go as they are found.
pub trait Events {
    /// Tensor `index` (a row of the summary) is done.
    fn tensor(&mut self, index: usize, result: &TensorVerification);
    /// `done` of `total` data bytes are checked.
    fn progress(&mut self, done: u64, total: u64);
}

/// Which part of a tensorizer file's tensors one of several parallel
/// verifiers takes: shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This verifier's share, `0..count`.
    pub index: usize,
    /// How many verifiers split the file.
    pub count: usize,
}

impl Shard {
    /// The whole file.
    pub const ALL: Self = Self { index: 0, count: 1 };
}

/// Splits tensors of these stored lengths among `count` verifiers, about
/// evenly by bytes (largest first, each to the least loaded): the shard
/// of every tensor. The same on every verifier, so they need not talk.
pub fn assign(lengths: &[u64], count: usize) -> Vec<usize> {
    let count = count.max(1);
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(lengths[i]), i));
    let mut load = vec![0u64; count];
    let mut out = vec![0; lengths.len()];
    for i in order {
        let (shard, _) = load.iter().enumerate().min_by_key(|&(k, &l)| (l, k)).unwrap_or((0, &0));
        out[i] = shard;
        // Headers cost a read too: count every tensor as at least 4 KiB.
        load[shard] = load[shard].saturating_add(lengths[i].max(4096));
    }
    out
}

/// Verifies every tensor of `opened` (for a tensorizer file, those of
/// `shard`), reading `src`.
pub async fn verify<S: AsyncSource>(
    src: S,
    opened: &Opened,
    key: Option<KeySource>,
    shard: Shard,
    events: &mut impl Events,
) -> Result<VerifySummary, ValidateError> {
    let mut summary = VerifySummary::default();
    match opened {
        Opened::Tensorizer(ins) => {
            verify_tensorizer(src, ins, key, shard, events, &mut summary).await?
        }
        Opened::Torch(index) => verify_torch(src, index, events, &mut summary).await?,
        Opened::Safetensors(s) | Opened::Gguf(s) => {
            let none =
                TensorVerification { status: Status::Unverified, checks: Vec::new(), error: None };
            for r in &s.tensors {
                events.tensor(r.index, &none);
                summary.unverified += 1;
            }
        }
    }
    summary.ok = summary.failed == 0;
    Ok(summary)
}

fn count(summary: &mut VerifySummary, v: &TensorVerification) {
    match v.status {
        Status::Verified => summary.verified += 1,
        Status::Unverified => summary.unverified += 1,
        Status::Failed => summary.failed += 1,
    }
}

fn failed(error: ValidateError) -> TensorVerification {
    TensorVerification { status: Status::Failed, checks: Vec::new(), error: Some(error) }
}

async fn verify_tensorizer<S: AsyncSource>(
    src: S,
    ins: &Inspection,
    key: Option<KeySource>,
    shard: Shard,
    events: &mut impl Events,
    summary: &mut VerifySummary,
) -> Result<(), ValidateError> {
    let entries = &ins.metadata.entries;
    let lengths: Vec<u64> = entries.iter().map(|e| e.data_length).collect();
    let mine: Vec<bool> =
        assign(&lengths, shard.count).into_iter().map(|s| s == shard.index).collect();
    if !ins.header.has_crypt_info() && key.is_some() {
        return Err(ValidateError::usage("a key was given but the file is not encrypted"));
    }
    if ins.header.has_crypt_info() && key.is_none() && entries.iter().any(|e| e.data_length > 0) {
        return Err(ValidateError::usage(
            "the file is encrypted: give a key file or passphrase to verify it",
        ));
    }
    let total = entries
        .iter()
        .zip(&mine)
        .filter(|(_, m)| **m)
        .map(|(e, _)| e.data_length)
        .fold(0u64, u64::saturating_add);
    let mut keys = key.map(Keys::new);
    let mut w = Window::new(src, WINDOW);
    let mut buf: Vec<u8> = Vec::new();
    for (i, entry) in entries.iter().enumerate().filter(|(i, _)| mine[*i]) {
        let raw = w.read_vec(entry.header_offset, entry.header_len(), "a tensor header").await?;
        let outcome = match TensorVerifier::new(ins, i, &raw, keys.as_mut(), PIECE_LEN) {
            Ok(mut v) => {
                let want = v.max_piece_len();
                if (buf.len() as u64) < want {
                    drop(std::mem::take(&mut buf));
                    buf = zeroed(want, entry.data_offset, "a data piece")?;
                }
                let mut failure = None;
                while let Some((at, n)) = v.next_piece() {
                    let piece = &mut buf[..n];
                    w.read_into(at, piece).await?;
                    summary.data_bytes_checked =
                        summary.data_bytes_checked.saturating_add(n as u64);
                    events.progress(summary.data_bytes_checked, total);
                    if let Err(e) = v.update(piece) {
                        failure = Some(e);
                        break;
                    }
                }
                match failure {
                    None => v.finish(),
                    Some(e) => failed(e),
                }
            }
            Err(e) if e.kind == ErrorKind::Usage || e.kind == ErrorKind::Io => return Err(e),
            Err(e) => failed(e),
        };
        count(summary, &outcome);
        events.tensor(i, &outcome);
    }
    Ok(())
}

async fn verify_torch<S: AsyncSource>(
    src: S,
    index: &torch::Index,
    events: &mut impl Events,
    summary: &mut VerifySummary,
) -> Result<(), ValidateError> {
    let entries = &index.directory.entries;
    let total = entries.iter().map(|e| e.size).fold(0u64, u64::saturating_add);
    let mut w = Window::new(src, WINDOW);
    let largest = entries.iter().map(|e| e.size).max().unwrap_or(0);
    let mut buf = zeroed((PIECE_LEN as u64).min(largest).max(1), 0, "a data piece")?;
    // One result per zip entry, then per tensor through its storage.
    let mut results: Vec<Option<ValidateError>> = Vec::with_capacity(entries.len());
    for entry in entries {
        let range = torch::data_range(&mut w.src, &[], entry).await?;
        let mut hasher = TensorHasher::new(&[], true, false);
        let mut at = range.start;
        while at < range.end {
            let n = ((range.end - at) as usize).min(buf.len());
            w.read_into(at, &mut buf[..n]).await?;
            hasher.update(&buf[..n]);
            at += n as u64;
            summary.data_bytes_checked = summary.data_bytes_checked.saturating_add(n as u64);
            events.progress(summary.data_bytes_checked, total);
        }
        let actual = match hasher.finish().first() {
            Some(HashValue::Crc32(c)) => *c,
            _ => 0,
        };
        results.push((actual != entry.crc32).then(|| {
            let mut e = ValidateError::from(tensorizer_core::Error::HashMismatch {
                tensor: entry.name.clone(),
                kind: tensorizer_core::HashKind::Crc32,
                expected: format!("{:08x}", entry.crc32),
                actual: format!("{actual:08x}"),
            });
            e.offset = Some(entry.header_offset);
            e
        }));
    }
    // data.pkl and the records describe every tensor: a mismatch there
    // fails them all.
    let shared = std::iter::once(index.archive.pickle)
        .chain(index.archive.records.iter().map(|&(_, i)| i))
        .find_map(|i| results[i].clone());
    let mut row = 0usize;
    for e in &index.state_dict.entries {
        let Leaf::Tensor(v) = &e.value else { continue };
        let own = results[index.storage_entries[v.storage]].clone();
        let outcome = match own.or_else(|| shared.clone()) {
            None => {
                TensorVerification { status: Status::Verified, checks: vec!["crc32"], error: None }
            }
            Some(err) => TensorVerification {
                status: Status::Failed,
                checks: vec!["crc32"],
                error: Some(err),
            },
        };
        count(summary, &outcome);
        events.tensor(row, &outcome);
        row += 1;
    }
    Ok(())
}

/// A tensor's stored hashes, read from its tensor header.
#[derive(Debug, Clone, Serialize)]
pub struct StoredHashes {
    /// The row.
    pub index: usize,
    /// The stored CRC-32, as 8 hex digits.
    pub crc32: Option<String>,
    /// The stored SHA-256, as 64 hex digits.
    pub sha256: Option<String>,
    /// Why the header could not be read, if it could not.
    pub error: Option<String>,
}

/// Gap between two tensor headers below which they are read together.
pub const HEADER_GAP: u64 = 64 << 10;

/// Most bytes one read of tensor headers takes in.
pub const HEADER_READ: u64 = 4 << 20;

/// Reads the stored hashes of tensors `from..from + count` (tensorizer
/// files only), coalescing headers that lie close together into one read.
pub async fn stored_hashes<S: AsyncSource>(
    src: &mut S,
    ins: &Inspection,
    from: usize,
    count: usize,
) -> Result<Vec<StoredHashes>, ValidateError> {
    let entries =
        ins.metadata.entries.get(from..from.saturating_add(count).min(ins.metadata.entries.len()));
    let entries = entries.unwrap_or_default();
    let mut out = Vec::with_capacity(entries.len());
    let mut i = 0;
    while i < entries.len() {
        let start = entries[i].header_offset;
        let mut end = start.saturating_add(entries[i].header_len());
        let mut j = i + 1;
        while let Some(e) = entries.get(j) {
            let e_end = e.header_offset.saturating_add(e.header_len());
            if e.header_offset < end
                || e.header_offset - end > HEADER_GAP
                || e_end - start > HEADER_READ
            {
                break;
            }
            end = e_end;
            j += 1;
        }
        let bytes = super::source::read_exact(src, start, end - start, "tensor headers").await?;
        for (k, e) in entries[i..j].iter().enumerate() {
            let s = (e.header_offset - start) as usize;
            let raw = &bytes[s..s + e.header_len() as usize];
            let row = from + i + k;
            out.push(match tensorizer_core::TensorRecord::parse(e, raw, &ins.header) {
                Ok(rec) => {
                    let mut h = StoredHashes { index: row, crc32: None, sha256: None, error: None };
                    for v in &rec.header.hashes {
                        match v {
                            HashValue::Crc32(c) => h.crc32 = Some(format!("{c:08x}")),
                            HashValue::Sha256(d) => {
                                h.sha256 = Some(d.iter().map(|b| format!("{b:02x}")).collect())
                            }
                        }
                    }
                    h
                }
                Err(err) => StoredHashes {
                    index: row,
                    crc32: None,
                    sha256: None,
                    error: Some(super::summary::error_line(&err.into())),
                },
            });
        }
        i = j;
    }
    Ok(out)
}
