#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::File;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = File::parse(data) {
        for i in 0..file.metadata.entries.len() {
            let _ = file.load(i, None);
        }
    }
});
