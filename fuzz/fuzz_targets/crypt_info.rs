#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::CryptInfo;

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = CryptInfo::parse(data, 0) {
        let _ = info.kdf();
        let _ = info.cipher();
        let mut out = Vec::new();
        info.emit(&mut out);
        assert_eq!(out.len() as u64, info.encoded_len());
    }
});
