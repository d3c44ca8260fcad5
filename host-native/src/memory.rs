//! What kind of memory a load's CPU copies get: transparent huge pages or
//! ordinary 4 KiB pages (spec §23.4).
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

/// Whether this machine hands free memory back to a host: a virtio balloon
/// that negotiated free page reporting. Asked once per process.
pub fn host_reclaims_free_memory() -> bool {
    static ANSWER: OnceLock<bool> = OnceLock::new();
    *ANSWER.get_or_init(|| {
        let Ok(devices) = std::fs::read_dir(BALLOON_DEVICES) else { return false };
        devices.flatten().any(|d| {
            std::fs::read_to_string(d.path().join("features")).is_ok_and(|features| reports_free_pages(&features))
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
