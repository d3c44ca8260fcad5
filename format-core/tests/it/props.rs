//! Property tests: any tensor set written and parsed back is unchanged;
//! any bytes given to the parser return without panicking.

use proptest::prelude::*;
use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};
use tensorizer_core::dtype::all_element_types;
use tensorizer_core::write::{WriterOptions, to_vec};
use tensorizer_core::{
    Dtype, File, KdfParams, KeySource, PathComponent, TensorPath, TensorSpec, TensorType,
};

fn path_strategy() -> impl Strategy<Value = TensorPath> {
    let key = "[a-zA-Z_\u{e9}\u{4e2d}\"\\\\ .\t-]{1,12}";
    prop_oneof![
        key.prop_filter("plain names may not start with 0x1E", |s: &String| !s
            .starts_with('\u{1e}'))
            .prop_map(TensorPath::Plain),
        prop::collection::vec(
            prop_oneof![
                key.prop_map(PathComponent::Key),
                (0u64..1000).prop_map(PathComponent::Index)
            ],
            2..5
        )
        .prop_map(TensorPath::Structured),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    specs: Vec<TensorSpec>,
    data: Vec<Vec<u8>>,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let elements = all_element_types();
    let tensor = (
        path_strategy(),
        prop::sample::select(elements),
        prop::collection::vec(0u64..5, 0..4),
        any::<bool>(),
        any::<u8>(),
        0u16..4,
    );
    prop::collection::vec(tensor, 0..8).prop_map(|items| {
        let mut specs: Vec<TensorSpec> = Vec::new();
        let mut data = Vec::new();
        for (n, (path, element, shape, meta, fill, module)) in items.into_iter().enumerate() {
            // Make paths unique and non-conflicting by prefixing the position.
            let path = match path {
                TensorPath::Plain(s) => TensorPath::Plain(format!("t{n}.{s}")),
                TensorPath::Structured(mut c) => {
                    c.insert(0, PathComponent::Key(format!("s{n}")));
                    TensorPath::Structured(c)
                }
            };
            let tensor_type = match (&path, module) {
                (TensorPath::Structured(_), _) | (_, 0) => TensorType::StateDict,
                (_, 1) => TensorType::Param,
                _ => TensorType::Buffer,
            };
            let dtype = Dtype::from_element(element);
            let spec = TensorSpec { path, tensor_type, module_index: module, dtype, shape, meta };
            let len = spec.data_length().unwrap() as usize;
            data.push((0..len).map(|i| fill.wrapping_add(i as u8)).collect());
            specs.push(spec);
        }
        Case { specs, data }
    })
}

fn cheap_kdf() -> KdfParams {
    KdfParams { opslimit: 1, memlimit: 8192, alg: 2, salt: vec![7; 16] }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn write_then_parse_is_identity(case in case_strategy(), alignment in prop::sample::select(vec![1u64, 64, 4096]), mode in 0u8..3) {
        let mut options = WriterOptions { alignment, ..WriterOptions::default() };
        let (key, source) = match mode {
            0 => (None, None),
            1 => {
                let k = Key::from_bytes([3; 32]);
                options.encryption = Some(None);
                (Some(k.clone()), Some(KeySource::Key(k)))
            }
            _ => {
                let pass = Passphrase::new(b"correct horse".to_vec());
                let k = Key::derive(pass.expose_secret(), &cheap_kdf(), &KdfLimits::default()).unwrap();
                options.encryption = Some(Some(cheap_kdf()));
                (Some(k), Some(KeySource::Passphrase(pass, KdfLimits::default())))
            }
        };
        let refs: Vec<&[u8]> = case.data.iter().map(Vec::as_slice).collect();
        let mut counter = 0u8;
        let bytes = to_vec(&case.specs, &refs, &options, key.as_ref(), || { counter += 1; [counter; 24] }).unwrap();
        let file = File::parse(&bytes).unwrap();
        prop_assert_eq!(file.metadata.entries.len(), case.specs.len());
        for (i, (entry, spec)) in file.metadata.entries.iter().zip(&case.specs).enumerate() {
            prop_assert_eq!(&entry.path, &spec.path);
            prop_assert_eq!(&entry.dtype, &spec.dtype);
            prop_assert_eq!(&entry.shape, &spec.shape);
            prop_assert_eq!(entry.tensor_type, spec.tensor_type);
            let (record, _) = file.tensor(i).unwrap();
            prop_assert_eq!(record.header.module_index, spec.module_index);
            if entry.data_length > 0 {
                prop_assert_eq!(entry.data_offset % alignment, 0);
            }
            prop_assert_eq!(&file.load(i, source.as_ref()).unwrap(), &case.data[i]);
        }
        let expected_version = if case.specs.iter().any(|s| s.meta) { 4 }
            else if mode > 0 { 3 }
            else if case.specs.iter().any(|s| s.dtype.is_opaque()) { 2 }
            else { 1 };
        prop_assert_eq!(file.header.version, expected_version);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut input = b"|TZR|".to_vec();
        input.extend_from_slice(&bytes);
        let _ = File::parse(&bytes);
        if let Ok(file) = File::parse(&input) {
            for i in 0..file.metadata.entries.len() {
                let _ = file.load(i, None);
            }
        }
    }

    #[test]
    fn mutated_files_never_panic(case in case_strategy(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let refs: Vec<&[u8]> = case.data.iter().map(Vec::as_slice).collect();
        let options = WriterOptions { metadata_len: Some(512), ..WriterOptions::default() };
        let Ok(mut bytes) = to_vec(&case.specs, &refs, &options, None, || [0; 24]) else { return Ok(()); };
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if let Ok(file) = File::parse(&bytes) {
            for i in 0..file.metadata.entries.len() {
                let _ = file.load(i, None);
            }
        }
    }
}
