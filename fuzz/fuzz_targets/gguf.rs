#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::gguf::{self, Value};
use tensorizer_core::layout::{MAX_GGUF_DIMS, MAX_GGUF_KVS, MAX_TENSORS};
use tensorizer_core::source::SliceSource;

// The GGUF header parser: any bytes (with the magic forced, so every run
// reaches the counts) give a header or a typed error, never a panic, and
// a header's parts are within the limits and inside the bytes read. The
// two entry points are compared by their Debug text: a float value may be
// NaN, which `==` never equals.
fuzz_target!(|data: &[u8]| {
    let mut file = b"GGUF".to_vec();
    file.extend_from_slice(data);
    let parsed = gguf::parse(&file);
    let read = gguf::read(&mut SliceSource::new(&file));
    assert_eq!(format!("{parsed:?}"), format!("{read:?}"));
    let Ok(header) = parsed else { return };
    assert!(header.kvs.len() as u64 <= MAX_GGUF_KVS);
    assert!(header.tensors.len() as u64 <= MAX_TENSORS);
    assert!(header.infos_end <= file.len() as u64);
    assert!(header.data_start >= header.infos_end && header.alignment.is_power_of_two());
    for kv in &header.kvs {
        assert!(kv.value_offset <= file.len() as u64);
        if let Value::Str(s) = &kv.value {
            assert!(s.len() <= 3 * file.len());
        }
    }
    for t in &header.tensors {
        assert!(t.dims.len() as u64 <= MAX_GGUF_DIMS);
        let _ = t.nbytes();
    }
});
