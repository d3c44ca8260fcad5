//! Whole-file verification: every tensor decrypted (when encrypted) and
//! checked against its stored hashes, in parallel, with memory bounded by
//! one piece per reader.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::parallel::for_each;
use crate::read::{PIECE_LEN, Reader};
use crate::source::RangeSource;

/// The outcome for one tensor.
#[derive(Debug)]
pub struct TensorCheck {
    /// Position in the file.
    pub index: usize,
    /// The tensor's name.
    pub name: String,
    /// `None` when every hash matched (or there was nothing to check).
    pub error: Option<Error>,
    /// Whether anything vouched for the data: a stored hash, or the MACs
    /// of encrypted data. A tensor with neither is read but not verified.
    pub checked: bool,
}

/// Verifies every tensor; failures are collected, not fatal. `progress`
/// receives the running total of data bytes checked.
pub fn verify_all<S: RangeSource>(
    reader: &Reader<S>,
    progress: impl Fn(u64) + Sync,
) -> Result<Vec<TensorCheck>> {
    let done = AtomicU64::new(0);
    let results = Mutex::new(Vec::with_capacity(reader.entries().len()));
    let threads = reader.options().num_readers;
    for_each(threads, (0..reader.entries().len()).collect(), |i| {
        let outcome = reader.stream(i, PIECE_LEN, true, |piece| {
            progress(done.fetch_add(piece.len() as u64, Ordering::Relaxed) + piece.len() as u64);
            Ok(())
        });
        let (error, checked) = match outcome {
            Ok(record) => (None, record.vouched()),
            // I/O failures end the run; content failures are reported per tensor.
            Err(e @ Error::Io { .. }) => return Err(e),
            Err(e) => (Some(e), true),
        };
        let name = reader.entries()[i].path.to_string();
        if let Ok(mut r) = results.lock() {
            r.push(TensorCheck { index: i, name, error, checked });
        }
        Ok(())
    })?;
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|r| r.index);
    if none_decrypts(&results) {
        return Err(Error::WrongKey { file: reader.source().name().to_string() });
    }
    Ok(results)
}

/// Whether some tensor failed to decrypt and every other one failed too
/// or held no data (a wrong key or passphrase: reported once, not once
/// per tensor).
fn none_decrypts(results: &[TensorCheck]) -> bool {
    let failed = |r: &TensorCheck| {
        matches!(
            r.error.as_ref().and_then(Error::format_error),
            Some(tensorizer_core::Error::Decryption)
        )
    };
    results.iter().any(failed) && results.iter().all(|r| failed(r) || !r.checked)
}
