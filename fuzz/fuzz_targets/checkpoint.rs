#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::checkpoint::Checkpoint;

fuzz_target!(|data: &[u8]| {
    if let Ok(ckpt) = Checkpoint::parse(data) {
        for i in 0..ckpt.entries().len() {
            let _ = ckpt.tensor_bytes(i);
        }
        for s in 0..ckpt.state_dict.storages.len() {
            let _ = ckpt.storage_bytes(s);
        }
    }
});
