#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::{Dtype, TensorPath};

// Names must survive decode → encode → decode unchanged.
fuzz_target!(|data: &[u8]| {
    if let Ok(path) = TensorPath::parse(data, 0)
        && let Ok(bytes) = path.to_bytes()
    {
        assert_eq!(TensorPath::parse(&bytes, 0).ok(), Some(path));
    }
    if let Ok(d) = Dtype::parse(data, 0) {
        assert_eq!(d.as_str().as_bytes(), data);
    }
});
