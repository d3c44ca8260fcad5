//! Whether a local file provably cannot change while it is mapped: what
//! `mmap="auto"` asks before it hands out views of a file instead of
//! copies (spec §23.6). A view of a file that changes shows the change, and
//! one that shrinks faults on access; so a map is made only where the
//! system itself forbids both.

use std::fs::File;
use std::os::unix::fs::MetadataExt;

/// Why a file cannot change under a map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frozen {
    /// The file has the immutable attribute (`chattr +i`): no process can
    /// write, truncate, rename or delete it until a privileged one clears
    /// the attribute.
    Immutable,
    /// fs-verity protects the file: its contents can never change.
    Verity,
    /// The file system's superblock is read-only (not merely the mount
    /// the file was opened through), and it is a local, disk-backed file
    /// system: no mount of it in this kernel can write it.
    ReadOnlyFileSystem,
}

impl Frozen {
    /// A word for messages and for Python.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Immutable => "immutable",
            Self::Verity => "fs-verity",
            Self::ReadOnlyFileSystem => "read-only file system",
        }
    }
}

/// File systems whose read-only superblock means the bytes cannot change
/// under this kernel: local, disk-backed ones (a network file system's
/// server, or the lower layers of an overlay, can change a file whatever
/// this mount says).
const LOCAL_FILE_SYSTEMS: &[&str] =
    &["ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "squashfs", "erofs", "iso9660", "udf"];

/// Why `file` cannot change, or `None` when nothing guarantees it.
pub fn frozen(file: &File) -> Option<Frozen> {
    attributes(file).or_else(|| read_only_file_system(file))
}

/// The immutable or fs-verity attribute, from `FS_IOC_GETFLAGS`.
fn attributes(file: &File) -> Option<Frozen> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        /// `_IOR('f', 1, long)`.
        const FS_IOC_GETFLAGS: libc::c_ulong = 0x8000_0000
            | ((std::mem::size_of::<libc::c_long>() as libc::c_ulong) << 16)
            | (0x66 << 8)
            | 1;
        const FS_IMMUTABLE_FL: libc::c_long = 0x10;
        const FS_VERITY_FL: libc::c_long = 0x0010_0000;
        let mut flags: libc::c_long = 0;
        // SAFETY: FS_IOC_GETFLAGS writes one `long` (the kernel writes an
        // int into it; the rest stays zero) through the pointer, which is
        // valid for the call; the descriptor is open for its duration.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::ioctl(file.as_raw_fd(), FS_IOC_GETFLAGS as _, &mut flags as *mut libc::c_long)
        };
        if rc != 0 {
            return None;
        }
        if flags & FS_VERITY_FL != 0 {
            Some(Frozen::Verity)
        } else if flags & FS_IMMUTABLE_FL != 0 {
            Some(Frozen::Immutable)
        } else {
            None
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// A read-only superblock of a local file system, from
/// `/proc/self/mountinfo` (every mount of one file system shares its
/// superblock options, so any line with the file's device number tells).
fn read_only_file_system(file: &File) -> Option<Frozen> {
    let dev = file.metadata().ok()?.dev();
    let (major, minor) =
        ((dev >> 8) & 0xfff | (dev >> 32) & !0xfff, dev & 0xff | (dev >> 12) & !0xff);
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo_says_frozen(&info, &format!("{major}:{minor}"))
}

/// The rule over mountinfo's text, for device `device` (`major:minor`).
fn mountinfo_says_frozen(info: &str, device: &str) -> Option<Frozen> {
    for line in info.lines() {
        let mut fields = line.split(' ');
        if fields.nth(2) != Some(device) {
            continue;
        }
        // After the optional fields: "-", the file system type, the source
        // and the superblock's options.
        let mut rest = line.split(" - ").nth(1)?.split(' ');
        let (fstype, _source, options) = (rest.next()?, rest.next()?, rest.next()?);
        let read_only = options.split(',').any(|o| o == "ro");
        return (read_only && LOCAL_FILE_SYSTEMS.contains(&fstype))
            .then_some(Frozen::ReadOnlyFileSystem);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 7:0 / /models ro,relatime shared:9 - ext4 /dev/loop0 ro
31 22 254:0 /srv /ro-bind ro,relatime shared:1 - ext4 /dev/vda rw
32 22 0:50 / /nfs ro,relatime - nfs4 server:/export ro
33 22 7:1 / /layer ro master:3 - squashfs /dev/loop1 ro";

    #[test]
    fn only_a_read_only_superblock_of_a_local_file_system_counts() {
        assert_eq!(mountinfo_says_frozen(INFO, "7:0"), Some(Frozen::ReadOnlyFileSystem));
        assert_eq!(mountinfo_says_frozen(INFO, "7:1"), Some(Frozen::ReadOnlyFileSystem));
        // A read-only bind mount of a writable file system: the file can
        // still change through another mount.
        assert_eq!(mountinfo_says_frozen(INFO, "254:0"), None);
        // The server of a network file system can change it.
        assert_eq!(mountinfo_says_frozen(INFO, "0:50"), None);
        assert_eq!(mountinfo_says_frozen(INFO, "9:9"), None);
    }

    #[test]
    fn an_ordinary_file_is_not_frozen() {
        let file = tempfile::tempfile().unwrap();
        assert_eq!(frozen(&file), None);
    }
}
