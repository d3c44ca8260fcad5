//! Reads that bypass the page cache, for cold loads of local files.
//!
//! A model file that is not in the page cache yet (a serving pod's first
//! load) reads fastest with many block-aligned `O_DIRECT` requests in
//! flight at once, straight into the destination memory: no page-cache
//! pages to allocate and fill, no copy out of them, and the device's queue
//! kept full (spec §23 has the measurements). A file whose pages are
//! mostly cached reads faster through the cache, so the choice is made per
//! load from the file's cache state ([`mostly_uncached`]).

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};

/// Offsets, lengths and addresses of direct reads are multiples of this:
/// the largest logical block size of the devices such files live on.
pub const DIRECT_BLOCK: u64 = 4096;

/// A load reads around the page cache when fewer than this fraction
/// (1/`COLD_SHARE`) of the file's pages are cached: reading the uncached
/// rest through the cache would then cost more than reading everything
/// directly (buffered cold reads run at about 0.7 of direct ones here,
/// cached pages at about 3 times).
const COLD_SHARE: u64 = 4;

/// cachestat(2)'s number: one number on every architecture, as for all
/// system calls added since Linux 5.1.
#[cfg(target_os = "linux")]
const SYS_CACHESTAT: libc::c_long = 451;

/// Set to `0`, loads always read through the page cache (a file system
/// whose `O_DIRECT` misbehaves; A/B measurements).
pub const COLD_READS_VAR: &str = "TENSORIZER_RS_COLD_READS";

/// Whether [`COLD_READS_VAR`] allows reads around the cache (read once).
pub(crate) fn allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var(COLD_READS_VAR).map_or(true, |v| v.trim() != "0"))
}

/// A second descriptor of an open file, opened with `O_DIRECT`.
#[derive(Debug)]
pub(crate) struct DirectFile {
    file: File,
}

impl DirectFile {
    /// Opens the file behind `file` again with `O_DIRECT` (through
    /// `/proc/self/fd`, so it is the same file even if its path has since
    /// been replaced). `None` where the system or file system does not
    /// allow it (tmpfs, no procfs).
    pub(crate) fn reopen(file: &File) -> Option<Self> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let direct = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
                .ok()?;
            let (a, b) = (file.metadata().ok()?, direct.metadata().ok()?);
            (a.dev() == b.dev() && a.ino() == b.ino()).then_some(Self { file: direct })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = file;
            None
        }
    }

    /// Reads at `offset` into `buf` (both, and `buf`'s address, multiples
    /// of [`DIRECT_BLOCK`]) until it is full or the file ends; returns the
    /// bytes read.
    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
}

/// The read-ahead hint's piece where the device's window cannot be found
/// ([`hint_window`]): the largest request is 1280 KiB by default, so a
/// piece of 1 MiB is read whole on common devices.
const READ_AHEAD_PIECE: u64 = 1 << 20;

/// Bounds on [`hint_window`]'s answer.
const HINT_WINDOW_MIN: u64 = 128 << 10;
const HINT_WINDOW_MAX: u64 = 64 << 20;

/// The most one read-ahead hint on `file` is read for: the kernel reads at
/// most the larger of the device's read-ahead window (`read_ahead_kb`) and
/// its largest request (`max_sectors_kb`) per hint
/// (`force_page_cache_readahead`) and drops the rest silently. Read from
/// the file's block device in sysfs (its partition's disk for a
/// partition); [`READ_AHEAD_PIECE`] where there is none (network and
/// stacked file systems).
fn hint_window(file: &File) -> u64 {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = file.metadata() else { return READ_AHEAD_PIECE };
        let dev = meta.dev();
        let dir = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
        let kib = |name: &str| -> Option<u64> {
            let read = |p: String| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok();
            read(format!("{dir}/queue/{name}")).or_else(|| read(format!("{dir}/../queue/{name}")))
        };
        match (kib("read_ahead_kb"), kib("max_sectors_kb")) {
            (None, None) => READ_AHEAD_PIECE,
            (a, b) => a
                .unwrap_or(0)
                .max(b.unwrap_or(0))
                .saturating_mul(1024)
                .clamp(HINT_WINDOW_MIN, HINT_WINDOW_MAX),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        READ_AHEAD_PIECE
    }
}

/// Asks the kernel to read the byte ranges `spans` (offset, length) of
/// `file` into the page cache now, in the background
/// (`POSIX_FADV_WILLNEED`, in pieces of the device's window: `hint_window`):
/// views of a memory map about to be touched then find their pages read in
/// long requests, not one fault's read-ahead window at a time. Nothing is
/// asked when every page from the first span to the end of the last is
/// cached already (a warm file: walking its pages costs about 4.5 ms per
/// GiB for nothing). Only a hint: a refusal changes nothing.
pub fn read_ahead(file: &File, spans: &[(u64, u64)]) {
    let start = spans.iter().map(|s| s.0).min().unwrap_or(0);
    let end = spans.iter().map(|s| s.0.saturating_add(s.1)).max().unwrap_or(0);
    let range = end.saturating_sub(start);
    if range == 0 || cached_pages(file, start, range).is_some_and(|(c, all)| c >= all) {
        return;
    }
    let window = hint_window(file);
    for &(offset, len) in spans {
        let end = offset.saturating_add(len);
        let mut at = offset;
        while at < end {
            let piece = window.min(end - at);
            will_need(file, at, piece);
            at += piece;
        }
    }
}

/// One `POSIX_FADV_WILLNEED` hint for `len` bytes from `offset`.
fn will_need(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else { return };
        // SAFETY: posix_fadvise(2) only reads its integer arguments; the
        // descriptor is open for the call's duration.
        #[allow(unsafe_code)]
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Whether fewer than 1/[`COLD_SHARE`] of the pages of `file` (`len`
/// bytes) are in the page cache. `false` where the kernel cannot say.
pub(crate) fn mostly_uncached(file: &File, len: u64) -> bool {
    cached_pages(file, 0, len).is_some_and(|(cached, all)| cached.saturating_mul(COLD_SHARE) < all)
}

/// How many of the pages of `file` from `offset` for `len` bytes are in the
/// page cache, and how many pages that is, asked with `cachestat(2)`
/// (Linux 6.5+). `None` where the kernel cannot say.
fn cached_pages(file: &File, offset: u64, len: u64) -> Option<(u64, u64)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct Stat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        let range = Range { off: offset, len };
        let mut stat = Stat::default();
        // SAFETY: cachestat(2) reads `range` and writes one `struct
        // cachestat` (five u64s, the layout above) into `stat`; both live
        // across the call, and the descriptor is open for its duration.
        // sysconf only reads a constant.
        #[allow(unsafe_code)]
        let (rc, page) = unsafe {
            let rc = libc::syscall(
                SYS_CACHESTAT,
                file.as_raw_fd(),
                &range as *const Range,
                &mut stat as *mut Stat,
                0u32,
            );
            (rc, libc::sysconf(libc::_SC_PAGESIZE))
        };
        let page = u64::try_from(page).unwrap_or(DIRECT_BLOCK).max(1);
        // Whole pages touched by the range (cachestat counts those).
        let pages = (offset % page).saturating_add(len).div_ceil(page);
        (rc == 0).then_some((stat.nr_cache, pages))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drops the file's clean pages from the page cache (no root needed).
    fn evict(file: &File) {
        use std::os::fd::AsRawFd;
        file.sync_all().unwrap();
        // SAFETY: posix_fadvise(2) only reads its integer arguments.
        #[allow(unsafe_code)]
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    }

    #[test]
    fn read_ahead_brings_every_piece_of_a_long_span_into_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let window = hint_window(&File::open(&path).unwrap());
        // Two and a half windows: more than the kernel reads for one hint.
        let span = window * 5 / 2;
        std::fs::write(&path, vec![7u8; (span + window) as usize]).unwrap();
        let file = File::open(&path).unwrap();
        evict(&file);
        let Some((before, all)) = cached_pages(&file, 0, span) else { return };
        if before == all {
            return; // a file system that keeps every page (tmpfs)
        }
        read_ahead(&file, &[(0, span)]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while cached_pages(&file, 0, span).unwrap().0 < all {
            assert!(std::time::Instant::now() < deadline, "not read ahead in 10 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
