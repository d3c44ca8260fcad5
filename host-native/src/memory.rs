//! What kind of memory a load's CPU copies get (transparent huge pages or
//! ordinary 4 KiB pages), which pages the GPU staging ring gets, and
//! faulting a destination in ahead of the kernel's copy into it (spec
//! §19.1, §23.4).
//!
//! Huge pages fault in 512 times fewer pieces and cost later code fewer TLB
//! misses, and a cold load (read around the page cache with `O_DIRECT`)
//! needs them to keep its requests large. But when the machine is a
//! virtual machine whose balloon reports free pages to its host, the host
//! takes free memory back, and the first touch of a fresh huge page then
//! waits for the host as well: a load through the page cache spent 0.34 to
//! 0.98 s on the same 1 GiB in huge pages there, and 0.35 to 0.44 s in
//! 4 KiB pages, which are zeroed and filled while they are in the cache.

use std::sync::OnceLock;

mod file_map;
mod region;

pub use self::file_map::PrivateMap;
pub use self::region::HugeRegion;

/// The balloon device's feature bit for free page reporting
/// (`VIRTIO_BALLOON_F_REPORTING`, virtio 1.2 §5.5.3).
const VIRTIO_BALLOON_F_REPORTING: usize = 5;

/// Where Linux lists the virtio balloon devices bound to their driver.
const BALLOON_DEVICES: &str = "/sys/bus/virtio/drivers/virtio_balloon";

/// Whether the CPU copies of a load get huge pages: always for a cold
/// load, and for one through the page cache unless the host takes free
/// memory back ([`host_reclaims_free_memory`]).
pub fn huge_pages_pay_off(reads_cold: bool) -> bool {
    reads_cold || !host_reclaims_free_memory()
}

/// Whether page-locked staging buffers (spec §19.1) get huge pages:
/// registering them with the GPU driver then costs half as much (6 against
/// 12 ms for 288 MiB on an H200 host, and 47 against 87 ms to fault them
/// in), unless the host takes free memory back.
pub fn staging_huge_pages() -> bool {
    !host_reclaims_free_memory()
}

/// One transparent huge page (x86-64, arm64 with 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Below this many bytes a destination is not faulted in ahead
/// ([`prefault`]): the call would cost more than it saves.
const PREFAULT_MIN: usize = 64 << 10;

/// Faults in the whole pages of `out` with one `MADV_POPULATE_WRITE`
/// before a read from the page cache or a socket copies into it: the
/// kernel then copies into present pages instead of taking one page fault
/// per 4 KiB in the middle of the copy. Warm first loads of 1 GiB here
/// (8 interleaved runs each): our file 357 → 302 ms, tensorizer's file
/// (its data at odd offsets, where mid-copy faults cost the most) 431 →
/// 307 ms. Changes no byte: present pages stay as they are, absent ones
/// are zero pages that the read then overwrites.
pub fn prefault(out: &mut [u8]) {
    const PAGE: usize = 4096;
    let start = out.as_ptr() as usize;
    if out.len() < PREFAULT_MIN {
        return;
    }
    let first = start.next_multiple_of(PAGE);
    let end = (start + out.len()) / PAGE * PAGE;
    if end > first {
        populate(first, end - first);
    }
}

/// Faults in `len` bytes from `first` (page-aligned), writable, with
/// `MADV_POPULATE_WRITE`; older kernels refuse it, harmlessly.
#[cfg(target_os = "linux")]
pub(crate) fn populate(first: usize, len: usize) {
    /// `MADV_POPULATE_WRITE` (Linux 5.14; older kernels refuse it, harmlessly).
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    // SAFETY: [first, first + len) lies inside a `&mut [u8]` the caller
    // holds, so it is mapped and writable; populating only faults pages in
    // (zero pages where none were, which is what an untouched anonymous
    // page reads as) and never changes a byte of a present one.
    #[allow(unsafe_code)]
    unsafe {
        libc::madvise(first as *mut libc::c_void, len, MADV_POPULATE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn populate(_: usize, _: usize) {}

/// Whether this machine hands free memory back to a host: a virtio balloon
/// that negotiated free page reporting. Asked once per process.
pub fn host_reclaims_free_memory() -> bool {
    static ANSWER: OnceLock<bool> = OnceLock::new();
    *ANSWER.get_or_init(|| {
        let Ok(devices) = std::fs::read_dir(BALLOON_DEVICES) else { return false };
        devices.flatten().any(|d| {
            std::fs::read_to_string(d.path().join("features"))
                .is_ok_and(|features| reports_free_pages(&features))
        })
    })
}

/// Whether a virtio device's `features` file (one `0`/`1` per feature bit,
/// bit 0 first) has free page reporting on.
fn reports_free_pages(features: &str) -> bool {
    features.as_bytes().get(VIRTIO_BALLOON_F_REPORTING) == Some(&b'1')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reporting_bit_is_read_from_the_features_file() {
        // A Firecracker balloon: stats, deflate on OOM, free page reporting.
        assert!(reports_free_pages("0110010100000000000000000000000010000000\n"));
        assert!(!reports_free_pages("0110000100000000000000000000000010000000\n"));
        assert!(!reports_free_pages("0110"));
        assert!(!reports_free_pages(""));
    }

    #[test]
    fn cold_loads_always_get_huge_pages() {
        assert!(huge_pages_pay_off(true));
        assert_eq!(huge_pages_pay_off(false), !host_reclaims_free_memory());
    }
}
