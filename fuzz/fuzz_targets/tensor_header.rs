#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::TensorHeader;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, header)) = data.split_first() else { return };
    if let Ok((h, layout)) = TensorHeader::parse(header, 1000, mode & 1 == 1, mode & 2 == 2) {
        assert_eq!(layout.len, header.len());
        let _ = layout.hashable(header);
        let _ = h.unpadded_len();
    }
});
