//! A [`RangeSource`] over one object of an `object_store` store.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::{block_on, store_error};
use crate::error::{Error, Result, StoreErrorKind};
use crate::source::{RangeSource, TransferLimits, check_range};

/// Times a read that fell below the minimum rate is re-requested for the
/// bytes still missing before it fails.
const SLOW_RETRIES: u32 = 3;

/// One object of a cloud store, read with ranged `GET`s pinned to the ETag
/// it had when opened (`If-Match`): a replaced object fails the read with
/// an [`Error::Store`] of kind `Changed` naming the object and the range,
/// instead of mixing two versions. `object_store` retries failed requests and resumes a broken
/// body for the bytes still missing; on top of that each read must keep
/// [`TransferLimits::min_rate`] over every window (else the rest is asked
/// again, a few times) and finish within [`TransferLimits::deadline`].
pub struct CloudSource {
    store: Arc<dyn ObjectStore>,
    path: Path,
    name: String,
    len: u64,
    etag: Option<String>,
    limits: TransferLimits,
}

impl CloudSource {
    /// Opens `path` in `store`: one `HEAD` for the length and the ETag.
    /// `name` is used in messages.
    pub fn open(store: Arc<dyn ObjectStore>, path: Path, name: String, limits: TransferLimits) -> Result<Self> {
        let head = {
            let (store, path) = (store.clone(), path.clone());
            async move { store.get_opts(&path, GetOptions { head: true, ..Default::default() }).await }
        };
        let meta = match limits.deadline {
            Some(d) => block_on(tokio::time::timeout(d, head))?.map_err(|_| deadline_error(&name, None, d))?,
            None => block_on(head)?,
        }
        .map_err(|e| store_error(&name, None, e))?
        .meta;
        Ok(Self { store, path, name, len: meta.size, etag: meta.e_tag, limits })
    }

    /// The object's ETag when it was opened, if the store gave one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// Fills `bufs` (consecutive) from `offset` with one ranged `GET` per
    /// attempt.
    async fn fill(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let mut done = 0u64; // bytes filled so far
        let mut slow = 0u32;
        while done < total {
            let start = offset + done;
            let options = GetOptions {
                range: Some(GetRange::Bounded(start..offset + total)),
                if_match: self.etag.clone(),
                ..Default::default()
            };
            let result = self.store.get_opts(&self.path, options).await;
            let result = result.map_err(|e| store_error(&self.name, Some((start, total - done)), e))?;
            let mut stream = result.into_stream();
            let window = self.limits.rate_window.max(Duration::from_millis(1));
            let (mut window_start, mut window_bytes) = (Instant::now(), 0u64);
            let mut too_slow = false;
            while let Some(chunk) = next_chunk(&mut stream, window, self.limits.min_rate).await {
                let chunk = match chunk {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => {
                        too_slow = true;
                        break;
                    }
                    Err(e) => {
                        return Err(store_error(&self.name, Some((offset + done, total - done)), e));
                    }
                };
                let n = chunk.len() as u64;
                if n > total - done {
                    return Err(self.fail(
                        start,
                        total - done,
                        io::ErrorKind::InvalidData,
                        "the store sent more bytes than asked",
                    ));
                }
                copy_into(bufs, done, &chunk);
                done += n;
                window_bytes += n;
                if window_start.elapsed() >= window {
                    let floor = self.limits.min_rate as f64 * window_start.elapsed().as_secs_f64();
                    if (window_bytes as f64) < floor {
                        too_slow = true;
                        break;
                    }
                    (window_start, window_bytes) = (Instant::now(), 0);
                }
            }
            if too_slow {
                slow += 1;
                if slow > SLOW_RETRIES {
                    let start = offset + done;
                    return Err(Error::store(
                        &self.name,
                        Some(start..offset + total),
                        StoreErrorKind::TimedOut,
                        format!(
                            "slower than {} bytes/s over {window:?}, {SLOW_RETRIES} times (TZR_MIN_RATE)",
                            self.limits.min_rate
                        ),
                    ));
                }
                continue;
            }
            if done < total {
                return Err(self.fail(
                    offset + done,
                    total - done,
                    io::ErrorKind::UnexpectedEof,
                    "the object ended early",
                ));
            }
        }
        Ok(())
    }

    fn fail(&self, offset: u64, len: u64, kind: io::ErrorKind, why: impl std::fmt::Display) -> Error {
        Error::Io {
            file: self.name.clone(),
            offset,
            source: io::Error::new(kind, format!("range {offset}-{}: {why}", offset + len.max(1) - 1)),
        }
    }

    fn read(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(&self.name, self.len, offset, total)?;
        if total == 0 {
            return Ok(());
        }
        match self.limits.deadline {
            Some(d) => block_on(tokio::time::timeout(d, self.fill(offset, bufs)))?
                .map_err(|_| deadline_error(&self.name, Some((offset, total as u64)), d))?,
            None => block_on(self.fill(offset, bufs))?,
        }
    }
}

/// The next chunk of `stream`; `Ok(None)` when nothing came for a whole
/// `window` while a minimum rate is set (a stall: ask again).
async fn next_chunk(
    stream: &mut futures_util::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    window: Duration,
    min_rate: u64,
) -> Option<object_store::Result<Option<bytes::Bytes>>> {
    if min_rate == 0 {
        return stream.next().await.map(|r| r.map(Some));
    }
    match tokio::time::timeout(window, stream.next()).await {
        Ok(next) => next.map(|r| r.map(Some)),
        Err(_) => Some(Ok(None)),
    }
}

/// Copies `chunk` into the concatenation of `bufs` at position `at`.
fn copy_into(bufs: &mut [&mut [u8]], mut at: u64, mut chunk: &[u8]) {
    for buf in bufs.iter_mut() {
        let len = buf.len() as u64;
        if at >= len {
            at -= len;
            continue;
        }
        let from = at as usize;
        let n = (buf.len() - from).min(chunk.len());
        buf[from..from + n].copy_from_slice(&chunk[..n]);
        chunk = &chunk[n..];
        at = 0;
        if chunk.is_empty() {
            break;
        }
    }
}

fn deadline_error(name: &str, range: Option<(u64, u64)>, deadline: Duration) -> Error {
    let range = range.map(|(start, len)| start..start.saturating_add(len.max(1)));
    Error::store(
        name,
        range,
        StoreErrorKind::TimedOut,
        format!("not done within the {deadline:?} deadline (TZR_DEADLINE)"),
    )
}

impl RangeSource for CloudSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read(offset, &mut [buf])
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn prefers_long_reads(&self) -> bool {
        true
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        self.read(offset, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::copy_into;

    #[test]
    fn chunks_land_across_buffers() {
        let (mut a, mut b, mut c) = ([0u8; 3], [0u8; 2], [0u8; 4]);
        let mut bufs: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut c];
        copy_into(&mut bufs, 0, &[1, 2]);
        copy_into(&mut bufs, 2, &[3, 4, 5, 6]);
        copy_into(&mut bufs, 6, &[7, 8, 9]);
        assert_eq!((a, b, c), ([1, 2, 3], [4, 5], [6, 7, 8, 9]));
    }
}
