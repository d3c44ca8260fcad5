//! [`HugeRegion`]: fresh anonymous memory that starts at a huge-page
//! boundary and spans whole huge pages, so that every byte of it can be
//! backed by transparent huge pages (a region that starts or ends inside a
//! 2 MiB frame gets 4 KiB pages there, which fault about 3x slower). The
//! loader's large CPU copies and arenas live in one, and so do the GPU
//! staging ring's buffers before they are page-locked.

// This file owns one raw mapping; every unsafe block in it says why it holds.
#![allow(unsafe_code)]

use super::HUGE_PAGE;

/// `len` zeroed bytes from a [`HUGE_PAGE`] boundary, in a private
/// anonymous mapping of their own; unmapped when dropped.
pub struct HugeRegion {
    /// The whole mapping: one huge page longer than the bytes need, so
    /// that they can start on a boundary (the slack is never touched, so it
    /// costs address space, not memory).
    map: *mut libc::c_void,
    map_len: usize,
    /// The bytes handed out: `len` bytes from a boundary inside `map`.
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a `HugeRegion` owns its mapping exclusively and its bytes are
// reached only through `&self` / `&mut self` (or through raw pointers whose
// users uphold the aliasing rules themselves), so moving it to or sharing it
// with another thread is as safe as for a `Vec<u8>`.
unsafe impl Send for HugeRegion {}
// SAFETY: as above; `&self` gives only reads.
unsafe impl Sync for HugeRegion {}

impl HugeRegion {
    /// `len` fresh bytes (at least one page is mapped), advised for
    /// transparent huge pages when `huge` and against them otherwise (the
    /// load plan's choice, spec §23.4); `None` when the mapping fails or
    /// the length overflows.
    pub fn new(len: usize, huge: bool) -> Option<Self> {
        let map_len = len.max(1).checked_next_multiple_of(HUGE_PAGE)?.checked_add(HUGE_PAGE)?;
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choice touches no existing memory.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let skip = (map as usize).next_multiple_of(HUGE_PAGE) - map as usize;
        // SAFETY: `skip < HUGE_PAGE` and `skip + len < map_len`, so `ptr`
        // and the `len` bytes after it lie inside the mapping.
        let ptr = unsafe { map.cast::<u8>().add(skip) };
        let advice = if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        // SAFETY: advice on our own fresh mapping changes how the kernel
        // backs it, never its contents (zero); a refusal (a kernel without
        // transparent huge pages) leaves it as it was.
        unsafe { libc::madvise(ptr.cast(), len.max(1), advice) };
        Some(Self { map, map_len, ptr, len })
    }

    /// The first byte (a multiple of [`HUGE_PAGE`]).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr..ptr + len` is mapped, readable and writable, zeroed
        // or written since, and borrowed mutably through `self` only.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for HugeRegion {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing refers to it after this
        // (whoever lent the bytes out keeps the region alive meanwhile).
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_huge_page_boundary_and_is_zeroed_and_writable() {
        for (len, huge) in [(0, true), (1, false), (HUGE_PAGE + 3, true), (5 << 20, false)] {
            let mut r = HugeRegion::new(len, huge).expect("mapped");
            assert_eq!(r.as_ptr() as usize % HUGE_PAGE, 0);
            assert_eq!(r.len(), len);
            let bytes = r.as_mut_slice();
            assert!(bytes.iter().all(|&b| b == 0));
            if let Some(last) = bytes.last_mut() {
                *last = 7;
            }
        }
    }

    #[test]
    fn an_impossible_length_is_refused_not_mapped() {
        assert!(HugeRegion::new(usize::MAX - 1, true).is_none());
    }
}
