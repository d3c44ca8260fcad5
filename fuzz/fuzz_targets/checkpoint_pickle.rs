#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::checkpoint::{Pickle, StateDict};

// The pickle machine alone: any bytes as `data.pkl`, then the flattening
// and view checks over whatever it built.
fuzz_target!(|data: &[u8]| {
    if let Ok(pickle) = Pickle::parse(data, 0) {
        let _ = StateDict::from_pickle(&pickle);
    }
});
