//! [`PrivateMap`]: a private, copy-on-write mapping of a whole file, whose
//! pages tensors can be views of (`mmap=True`, spec §23.6). Writing to it
//! never reaches the file; another program rewriting the file in place
//! still shows through pages not written yet, and truncating it makes the
//! next access past the new end fault (SIGBUS).

// This file owns one raw mapping; every unsafe block in it says why it holds.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Every byte of a file, mapped private and writable; unmapped when
/// dropped.
pub struct PrivateMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a `PrivateMap` owns its mapping exclusively, and its bytes are
// reached only through raw pointers whose users uphold the aliasing rules
// themselves, so moving or sharing it across threads is as safe as for a
// `Vec<u8>`.
unsafe impl Send for PrivateMap {}
// SAFETY: as above.
unsafe impl Sync for PrivateMap {}

impl PrivateMap {
    /// Maps `file` as long as it is now; `None` for an empty file (a
    /// mapping cannot be empty).
    pub fn new(file: &File) -> io::Result<Option<Self>> {
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        // SAFETY: a fresh private mapping at an address of the kernel's
        // choice touches no existing memory; the descriptor is open for
        // the call, and the mapping outlives neither its own drop nor
        // needs the descriptor afterwards.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Some(Self { ptr: map.cast(), len }))
    }

    /// The first byte (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// How many bytes (the file's length when mapped).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an empty file is not mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PrivateMap {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing refers to it after this
        // (whoever lent the bytes out keeps the map alive meanwhile).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn maps_the_file_and_writes_never_reach_it() {
        let dir = std::env::temp_dir().join(format!("tzr-private-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("f");
        std::fs::File::create(&path).and_then(|mut f| f.write_all(b"abc")).expect("written");
        let file = File::open(&path).expect("opened");
        let map = PrivateMap::new(&file).expect("mapped").expect("not empty");
        assert_eq!(map.len(), 3);
        // SAFETY: three mapped, writable bytes, ours alone.
        let bytes = unsafe { std::slice::from_raw_parts_mut(map.as_ptr(), map.len()) };
        assert_eq!(bytes, b"abc");
        bytes[0] = b'z';
        drop(map);
        assert_eq!(std::fs::read(&path).expect("read"), b"abc");
        std::fs::File::create(&path).expect("emptied");
        assert!(PrivateMap::new(&File::open(&path).expect("opened")).expect("no error").is_none());
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
