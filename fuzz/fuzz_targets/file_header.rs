#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::FileHeader;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = FileHeader::parse(data) {
        let mut out = Vec::new();
        h.emit(&mut out);
        assert_eq!(FileHeader::parse(&out), Ok(h));
    }
});
