#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::layout::{MAGIC, MAX_SAFETENSORS_HEADER};
use tensorizer_core::{Sniffed, sniff_format};

// The format sniffer: the first 8 bytes give a claimed file length, the
// rest is the file's head. Whatever it says must hold of the bytes.
fuzz_target!(|data: &[u8]| {
    let (len, head) = data.split_at(data.len().min(8));
    let mut claimed = [0u8; 8];
    claimed[..len.len()].copy_from_slice(len);
    for file_len in [u64::from_le_bytes(claimed), head.len() as u64, u64::MAX] {
        let sniffed = sniff_format(head, file_len);
        assert_eq!(sniffed, sniff_format(head, file_len));
        match sniffed {
            Some(Sniffed::Tensorizer) => assert!(head.starts_with(&MAGIC)),
            Some(Sniffed::Safetensors { header_len }) => {
                assert!((2..=MAX_SAFETENSORS_HEADER).contains(&header_len));
                assert!(header_len + 8 <= file_len);
                assert_eq!(head[..8], header_len.to_le_bytes());
                assert_eq!(head[8], b'{');
            }
            Some(Sniffed::TorchZip | Sniffed::LegacyTorch) | None => {
                assert!(!head.starts_with(&MAGIC))
            }
        }
    }
});
