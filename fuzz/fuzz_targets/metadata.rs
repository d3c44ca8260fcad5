#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::{FileHeader, Metadata};

// The first byte picks the header shape; the rest is the index.
fuzz_target!(|data: &[u8]| {
    let Some((&mode, index)) = data.split_first() else { return };
    let header = FileHeader {
        version: if mode & 1 == 1 { 5 } else { 1 },
        flags: if mode & 1 == 1 { 2 } else { 0 },
        tensor_size: 0,
        tensor_count: u64::from(mode >> 1),
        metadata_len: index.len() as u64,
    };
    let _ = Metadata::parse(&header, index);
});
