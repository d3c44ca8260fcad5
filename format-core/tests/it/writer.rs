//! Writer-side guards: what the writer refuses, and that a refusal leaves
//! it usable.

use tensorizer_core::write::{Writer, WriterOptions};
use tensorizer_core::{Dtype, ElementType, Error, KdfParams, TensorSpec};

fn f32_spec(name: &str, shape: Vec<u64>) -> TensorSpec {
    TensorSpec::state_dict(name, Dtype::from_element(ElementType::F32), shape)
}

#[test]
fn nonce_reuse_is_refused() {
    let options = WriterOptions { encryption: Some(None), ..WriterOptions::default() };
    let mut w = Writer::new(&options).unwrap();
    w.add(&f32_spec("a", vec![4]), Some([0; 24])).unwrap();
    assert!(w.add(&f32_spec("b", vec![4]), Some([0; 24])).is_err());
    // Overlapping counter ranges: a 3-chunk tensor at n, then one at n + 1.
    let mut w = Writer::new(&options).unwrap();
    w.add(&f32_spec("big", vec![3 << 19]), Some([5; 24])).unwrap();
    let mut next = [5; 24];
    next[0] = 6;
    assert!(w.add(&f32_spec("c", vec![4]), Some(next)).is_err());
    // A refused tensor does not claim its name.
    w.add(&f32_spec("c", vec![4]), Some([9; 24])).unwrap();
}

#[test]
fn refusals_do_not_poison_the_writer() {
    let mut w = Writer::new(&WriterOptions::default()).unwrap();
    assert!(w.add(&f32_spec("x", vec![1; 256]), None).is_err());
    assert!(w.add(&f32_spec("x", vec![u64::MAX / 4]), None).is_err());
    w.add(&f32_spec("x", vec![2]), None).unwrap();
    assert!(matches!(w.add(&f32_spec("x", vec![2]), None), Err(Error::ConflictingPaths { .. })));
}

#[test]
fn bad_kdf_and_dtypes_are_refused() {
    let bad_salt = KdfParams { opslimit: 1, memlimit: 8192, alg: 2, salt: vec![0; 32] };
    assert!(
        Writer::new(&WriterOptions {
            encryption: Some(Some(bad_salt)),
            ..WriterOptions::default()
        })
        .is_err()
    );
    let mut w = Writer::new(&WriterOptions::default()).unwrap();
    let odd = TensorSpec::state_dict("o", Dtype::parse(b"<u1", 0).unwrap(), vec![1]);
    assert!(w.add(&odd, None).is_err());
    let unknown =
        TensorSpec::state_dict("u", Dtype::parse(b"<V2\0torch.future16", 0).unwrap(), vec![1]);
    w.add(&unknown, None).unwrap();
}

#[test]
fn tensorizer_layout_overflows_like_tensorizer() {
    let mut w = Writer::new(&WriterOptions::tensorizer()).unwrap();
    let name = "n".repeat(60_000);
    for i in 0..4 {
        w.add(&f32_spec(&format!("{i}{name}"), vec![1]), None).unwrap();
    }
    assert!(matches!(
        w.add(&f32_spec(&format!("4{name}"), vec![1]), None),
        Err(Error::MetadataOverflow { .. })
    ));
    // The default layout sizes the index to fit instead.
    let specs: Vec<_> = (0..5).map(|i| f32_spec(&format!("{i}{name}"), vec![1])).collect();
    let mut w = Writer::plan(&specs, &WriterOptions::default()).unwrap();
    for s in &specs {
        w.add(s, None).unwrap();
    }
    assert!(w.finish().unwrap().metadata.len() > 262_144);
}

#[test]
fn the_writer_refuses_more_tensors_than_a_reader_accepts() {
    use tensorizer_core::layout::MAX_TENSORS;
    let n = MAX_TENSORS as usize + 1;
    let specs: Vec<TensorSpec> = (0..n).map(|i| f32_spec(&format!("t{i}"), vec![0])).collect();
    // Planned: refused before any byte is placed, naming the limit.
    let Err(err) = Writer::plan(&specs, &WriterOptions::default()) else {
        panic!("planning 2^20 + 1 tensors")
    };
    assert!(
        matches!(err, Error::LimitExceeded { value, limit: MAX_TENSORS, .. } if value == n as u64),
        "{err}"
    );
    assert!(err.to_string().contains("MAX_TENSORS"), "{err}");
    // Streamed: the tensor past the limit is refused.
    let options = WriterOptions { metadata_len: Some(64 << 20), ..WriterOptions::default() };
    let mut w = Writer::new(&options).unwrap();
    for s in &specs[..n - 1] {
        w.add(s, None).unwrap();
    }
    let Err(err) = w.add(&specs[n - 1], None) else { panic!("tensor 2^20 + 1 is accepted") };
    assert!(matches!(err, Error::LimitExceeded { limit: MAX_TENSORS, .. }), "{err}");
}
