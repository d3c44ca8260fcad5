//! Argon2's working memory: zeroed by the allocator (fresh pages from
//! `calloc`'s mapping, so nothing is written twice) and, on Linux, advised
//! for transparent huge pages: a 256 MiB derivation then takes 128 page
//! faults instead of 65 536, and its random block references miss the TLB
//! far less. The only `unsafe` here is that `madvise` call.

/// `words` zeroed 64-bit words.
pub(super) fn zeroed(words: usize) -> Vec<u64> {
    let memory = vec![0u64; words];
    advise_huge(&memory);
    memory
}

#[cfg(target_os = "linux")]
fn advise_huge(memory: &[u64]) {
    const HUGE: usize = crate::memory::HUGE_PAGE;
    let start = memory.as_ptr() as usize;
    let end = start + std::mem::size_of_val(memory);
    let first = start.next_multiple_of(HUGE);
    if end <= first + HUGE {
        return;
    }
    let len = (end - first) / HUGE * HUGE;
    // SAFETY: [first, first + len) lies inside `memory`'s allocation, and
    // MADV_HUGEPAGE only changes how the kernel backs those pages, never
    // their contents or validity. A failure (THP disabled) is harmless.
    #[allow(unsafe_code)]
    unsafe {
        libc::madvise(first as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_: &[u64]) {}
