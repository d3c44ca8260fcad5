//! What we write, we read: every writer path (the native writer, whole and
//! incremental, and every conversion: safetensors, torch checkpoint and
//! tensorizer to tensorizer, tensorizer to safetensors) either produces a
//! file our readers open under their default limits with the same tensors,
//! or refuses before writing anything, saying which limit or rule.
//!
//! Inputs are generated: tensor counts, names (unicode, control
//! characters, structured paths, names past the 65,535-byte limit), every
//! element type (float8, complex, bool, ...), shapes (0-dim, zero-size,
//! dimensions of 2^32 and more, which need data version 5), meta tensors,
//! encryption (none, a raw key, a passphrase), and both index layouts
//! (sized to fit, and tensorizer's fixed 256 KiB). Our writer always stores
//! hashes: CRC-32 and SHA-256, or SHA-256 and the MACs when encrypted.

use std::path::Path;

use proptest::prelude::*;
use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};
use tensorizer_core::dtype::all_element_types;
use tensorizer_core::{
    Dtype, ElementType, KdfParams, KeySource, PathComponent, TensorPath, TensorSpec, TensorType,
};
use tensorizer_core::{MetadataEntry, WriterOptions};
use tensorizer_native::convert::safetensors::{SafetensorsFile, flat_name};
use tensorizer_native::convert::{ConvertOptions, Format, convert_source};
use tensorizer_native::{
    FileWriter, LocalFile, MemorySource, RangeSource as _, ReadOptions, Reader, WriteOptions,
    write_file,
};

use crate::checkpoint::zip_of;

/// One generated tensor.
#[derive(Debug, Clone)]
struct Gen {
    path: TensorPath,
    element: ElementType,
    shape: Vec<u64>,
    meta: bool,
    module: u16,
    fill: u8,
}

/// A plain name: short names from a mixed alphabet (unicode, control
/// characters, quotes, 0x1E) or a long run of one character, up to past
/// the 65,535-byte limit.
fn plain_name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-zA-Z0-9_.\u{e9}\u{4e2d}\u{1F600}\u{1b}\u{1e}\u{202e}\"\\\\ \t-]{0,12}",
        1 => (0usize..3, 250usize..70_000).prop_map(|(c, n)| ["x", "\u{e9}", "\u{4e2d}"][c].repeat(n / (c + 1))),
    ]
}

fn path() -> impl Strategy<Value = TensorPath> {
    let key = "[a-z\u{e9}.\"]{0,6}";
    prop_oneof![
        3 => plain_name().prop_map(TensorPath::Plain),
        1 => prop::collection::vec(
            prop_oneof![key.prop_map(PathComponent::Key), (0u64..4).prop_map(PathComponent::Index)],
            1..4
        )
        .prop_map(TensorPath::Structured),
    ]
}

/// Shapes: small ones (0-dim and zero-size included), and zero-size ones
/// with a dimension of 2^32 or more (data version 5).
fn shape() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        6 => prop::collection::vec(0u64..4, 0..4),
        1 => (0u64..3, 0usize..2).prop_map(|(k, at)| {
            let mut s = vec![0, 3];
            s.insert(at, (1 << 32) + k);
            s
        }),
    ]
}

fn tensors() -> impl Strategy<Value = Vec<Gen>> {
    let one = (
        path(),
        prop::sample::select(all_element_types()),
        shape(),
        prop::bool::weighted(0.15),
        0u16..3,
        any::<u8>(),
    );
    prop::collection::vec(one, 0..6).prop_map(|items| {
        let mut names = std::collections::HashSet::new();
        items
            .into_iter()
            .enumerate()
            .map(|(n, (path, element, shape, meta, module, fill))| {
                // Distinct names (plain ones as generated, empty included,
                // unless repeated); structured ones under their own first key.
                let path = match path {
                    TensorPath::Plain(s) if names.insert(s.clone()) => TensorPath::Plain(s),
                    TensorPath::Plain(s) => TensorPath::Plain(format!("{s}#{n}")),
                    TensorPath::Structured(mut c) => {
                        c.insert(0, PathComponent::Key(format!("s{n}")));
                        TensorPath::Structured(c)
                    }
                };
                Gen { path, element, shape, meta, module, fill }
            })
            .collect()
    })
}

impl Gen {
    fn spec(&self) -> TensorSpec {
        let tensor_type = match (&self.path, self.module) {
            (TensorPath::Structured(_), _) | (_, 0) => TensorType::StateDict,
            (_, 1) => TensorType::Param,
            _ => TensorType::Buffer,
        };
        let module_index = if tensor_type == TensorType::StateDict { 0 } else { self.module };
        TensorSpec {
            path: self.path.clone(),
            tensor_type,
            module_index,
            dtype: Dtype::from_element(self.element),
            shape: self.shape.clone(),
            meta: self.meta,
        }
    }

    fn data(&self) -> Vec<u8> {
        let len = self.spec().data_length().expect("small shapes");
        (0..len).map(|i| self.fill.wrapping_add(i as u8)).collect()
    }

    /// The flat name of a checkpoint or safetensors input.
    fn flat(&self) -> String {
        flat_name(&self.path)
    }
}

/// How a tensorizer output is encrypted.
#[derive(Debug, Clone, Copy)]
enum Crypt {
    None,
    Key,
    Passphrase,
}

fn cheap_kdf() -> KdfParams {
    KdfParams { opslimit: 1, memlimit: 8192, alg: 2, salt: vec![7; 16] }
}

const PASSPHRASE: &[u8] = b"correct horse";

/// The write options and the matching read key.
fn options(crypt: Crypt, tensorizer_layout: bool) -> (WriteOptions, Option<KeySource>) {
    let layout =
        if tensorizer_layout { WriterOptions::tensorizer() } else { WriterOptions::default() };
    let mut w = WriteOptions { layout, key: None, num_writers: 2 };
    let read = match crypt {
        Crypt::None => None,
        Crypt::Key => {
            let k = Key::from_bytes([3; 32]);
            w.layout.encryption = Some(None);
            w.key = Some(k.clone());
            Some(KeySource::Key(k))
        }
        Crypt::Passphrase => {
            let pass = Passphrase::new(PASSPHRASE.to_vec());
            w.key = Some(
                Key::derive(pass.expose_secret(), &cheap_kdf(), &KdfLimits::default()).unwrap(),
            );
            w.layout.encryption = Some(Some(cheap_kdf()));
            Some(KeySource::Passphrase(pass, KdfLimits::default()))
        }
    };
    (w, read)
}

/// A tensor as a reader sees it: name (flat for safetensors), spec, data
/// (none for meta tensors, whose size is only a claim).
type Seen = (String, TensorSpec, Option<Vec<u8>>);

/// Opens a tensorizer file under the default limits, verifying every hash.
fn read_tensorizer(path: &Path, key: Option<KeySource>) -> (u32, Vec<Seen>) {
    let reader =
        Reader::open(path, ReadOptions { num_readers: 2, verify_hash: true, key }).unwrap();
    let seen = (0..reader.entries().len())
        .map(|i| {
            let spec = reader.spec(i).unwrap();
            let e: &MetadataEntry = &reader.entries()[i];
            let data = (!e.is_meta()).then(|| {
                let mut out = vec![0; e.nbytes() as usize];
                reader.load_into(i, &mut out).unwrap();
                out
            });
            (e.path.to_string(), spec, data)
        })
        .collect();
    (reader.header().expect("a tensorizer file").version, seen)
}

fn read_safetensors(path: &Path) -> Vec<Seen> {
    let file = SafetensorsFile::new(LocalFile::open(path).unwrap()).unwrap();
    file.entries()
        .iter()
        .map(|e| {
            let mut out = vec![0; (e.end - e.start) as usize];
            file.source().read_exact_at(file.data_start() + e.start, &mut out).unwrap();
            let spec = TensorSpec::state_dict(
                TensorPath::Plain(e.name.clone()),
                Dtype::from_element(e.dtype),
                e.shape.clone(),
            );
            (e.name.clone(), spec, Some(out))
        })
        .collect()
}

/// The data version our writer picks for these tensors.
fn expected_version(specs: &[TensorSpec], encrypted: bool) -> u32 {
    if specs.iter().any(|s| MetadataEntry::needs_long_dims(&s.shape)) {
        5
    } else if specs.iter().any(|s| s.meta) {
        4
    } else if encrypted {
        3
    } else if specs.iter().any(|s| s.dtype.is_opaque()) {
        2
    } else {
        1
    }
}

/// What a refusal may say: each names the limit or rule it applies.
const REASONS: &[&str] = &[
    "empty tensor name",
    "a plain name may not start with 0x1E",
    "name longer than 65535 bytes",
    "a structured path needs an index or two components",
    "conflict",
    "metadata",
    "safetensors has no dtype for",
    "safetensors cannot store a 0-dimensional",
    "meta tensors (no data) cannot be stored in safetensors",
    "two tensors have this name (after flattening)",
];

/// Checks a refusal: it names a known reason, and nothing was left in `dir`
/// (no target, no temporary file).
fn refused(err: &tensorizer_native::Error, dir: &Path) -> std::result::Result<(), TestCaseError> {
    let msg = err.to_string();
    prop_assert!(REASONS.iter().any(|r| msg.contains(r)), "unexpected refusal: {}", msg);
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    prop_assert!(left.is_empty(), "a refused write left {:?} behind ({})", left, msg);
    Ok(())
}

/// Compares what a reader saw with what was written, by name.
fn same(
    seen: &[Seen],
    want: &[(String, TensorSpec, Vec<u8>)],
    exact_spec: bool,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(seen.len(), want.len());
    for (name, spec, data) in want {
        let got = seen.iter().find(|s| &s.0 == name);
        prop_assert!(got.is_some(), "{:?} is missing", name);
        let (_, got_spec, got_data) = got.unwrap();
        if exact_spec {
            prop_assert_eq!(got_spec, spec);
        } else {
            prop_assert_eq!(&got_spec.dtype, &spec.dtype);
            prop_assert_eq!(&got_spec.shape, &spec.shape);
        }
        if !spec.meta {
            prop_assert_eq!(got_data.as_deref(), Some(data.as_slice()), "{:?}", name);
        }
    }
    Ok(())
}

/// The native writer, whole (`write_file`) or incremental (`FileWriter::open` + `append`).
fn native(
    tensors: &[Gen],
    crypt: Crypt,
    tensorizer_layout: bool,
    incremental: bool,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("out.tensors");
    let (w, key) = options(crypt, tensorizer_layout);
    let specs: Vec<TensorSpec> = tensors.iter().map(Gen::spec).collect();
    let data: Vec<Vec<u8>> = tensors.iter().map(Gen::data).collect();
    let pairs: Vec<(TensorSpec, &[u8])> =
        specs.iter().cloned().zip(data.iter().map(Vec::as_slice)).collect();
    let written = if incremental {
        FileWriter::open(&dst, &w).and_then(|mut f| {
            f.append(&pairs, 2)?;
            f.commit()
        })
    } else {
        write_file(&dst, &pairs, &w)
    };
    if let Err(e) = written {
        return refused(&e, dir.path());
    }
    let (version, seen) = read_tensorizer(&dst, key);
    prop_assert_eq!(version, expected_version(&specs, !matches!(crypt, Crypt::None)));
    // A zero-size meta tensor stores what a zero-size tensor stores: the
    // file cannot tell them apart, and reads it back as a plain one.
    let stored = |s: &TensorSpec| TensorSpec {
        meta: s.meta && s.dtype.nbytes(&s.shape) != Some(0),
        ..s.clone()
    };
    let want: Vec<_> =
        specs.iter().zip(data).map(|(s, d)| (s.path.to_string(), stored(s), d)).collect();
    same(&seen, &want, true)?;

    // The same file converted to tensorizer (re-encrypted or not) and to safetensors.
    let bytes = std::fs::read(&dst).unwrap();
    let (_, read_key) = options(crypt, tensorizer_layout);
    for (to, crypt_out) in [
        (Format::Tensorizer, Crypt::Passphrase),
        (Format::Tensorizer, Crypt::None),
        (Format::Safetensors, Crypt::None),
    ] {
        let out = tempfile::tempdir().unwrap();
        let name = if to == Format::Safetensors { "out.safetensors" } else { "out.tensors" };
        let target = out.path().join(name);
        let (write, key) = options(crypt_out, false);
        let opts =
            ConvertOptions { to: Some(to), write, key: read_key.clone(), max_output_bytes: None };
        match convert_source(
            MemorySource::new(bytes.clone(), "in.tensors"),
            &target,
            &opts,
            |_, _| Ok(()),
        ) {
            Err(e) => refused(&e, out.path())?,
            Ok(_) if to == Format::Tensorizer => {
                let (version, seen) = read_tensorizer(&target, key);
                let stored: Vec<TensorSpec> = want.iter().map(|w| w.1.clone()).collect();
                prop_assert_eq!(
                    version,
                    expected_version(&stored, !matches!(crypt_out, Crypt::None))
                );
                same(&seen, &want, true)?;
            }
            Ok(_) => {
                let flat: Vec<_> = want
                    .iter()
                    .map(|(_, s, d)| (flat_name(&s.path), s.clone(), d.clone()))
                    .collect();
                same(&read_safetensors(&target), &flat, false)?;
            }
        }
    }
    Ok(())
}

/// A safetensors file of `tensors` (meta flags ignored; tensors
/// safetensors cannot store are left out), padded as the library pads.
fn safetensors_bytes(tensors: &[Gen]) -> (Vec<u8>, Vec<Gen>) {
    let mut header = serde_json::Map::new();
    let mut kept = Vec::new();
    let mut data = Vec::new();
    for t in tensors {
        let Some((dtype, shape)) =
            tensorizer_core::safetensors::to_safetensors(t.element, &t.shape)
        else {
            continue;
        };
        let t = Gen { meta: false, ..t.clone() };
        let d = t.data();
        let at = data.len() as u64;
        header.insert(
            t.flat(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [at, at + d.len() as u64]}),
        );
        data.extend_from_slice(&d);
        kept.push(t);
    }
    let mut json = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    ([&(json.len() as u64).to_le_bytes()[..], &json, &data].concat(), kept)
}

/// torch's legacy storage class for an element type, if it has one.
fn storage_class(e: ElementType) -> Option<&'static str> {
    Some(match e {
        ElementType::F32 => "FloatStorage",
        ElementType::F64 => "DoubleStorage",
        ElementType::F16 => "HalfStorage",
        ElementType::BF16 => "BFloat16Storage",
        ElementType::I64 => "LongStorage",
        ElementType::I32 => "IntStorage",
        ElementType::I16 => "ShortStorage",
        ElementType::I8 => "CharStorage",
        ElementType::U8 => "ByteStorage",
        ElementType::Bool => "BoolStorage",
        ElementType::Complex64 => "ComplexFloatStorage",
        ElementType::Complex128 => "ComplexDoubleStorage",
        _ => return None,
    })
}

fn pickle_str(p: &mut Vec<u8>, s: &str) {
    p.push(b'X');
    p.extend_from_slice(&(s.len() as u32).to_le_bytes());
    p.extend_from_slice(s.as_bytes());
}

fn pickle_int(p: &mut Vec<u8>, v: u64) {
    match i32::try_from(v) {
        Ok(small) => {
            p.push(b'J');
            p.extend_from_slice(&small.to_le_bytes());
        }
        Err(_) => {
            p.extend_from_slice(&[0x8a, 8]);
            p.extend_from_slice(&v.to_le_bytes());
        }
    }
}

fn pickle_tuple(p: &mut Vec<u8>, items: &[u64]) {
    p.push(b'(');
    for &v in items {
        pickle_int(p, v);
    }
    p.push(b't');
}

/// A `torch.save` zip of `{name: tensor}` as torch writes it (typed
/// storages, `_rebuild_tensor_v2`, contiguous strides); element types
/// without a storage class are left out.
fn checkpoint_bytes(tensors: &[Gen]) -> (Vec<u8>, Vec<Gen>) {
    let mut p = vec![0x80, 2, b'}', b'('];
    let mut entries = Vec::new();
    let mut kept = Vec::new();
    for t in tensors {
        let Some(class) = storage_class(t.element) else { continue };
        let t = Gen { meta: false, ..t.clone() };
        let key = kept.len().to_string();
        let numel: u64 = t.shape.iter().product();
        let mut stride = vec![1u64; t.shape.len()];
        for i in (0..t.shape.len().saturating_sub(1)).rev() {
            stride[i] = stride[i + 1] * t.shape[i + 1].max(1);
        }
        pickle_str(&mut p, &t.flat());
        p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n((");
        pickle_str(&mut p, "storage");
        p.extend_from_slice(format!("ctorch\n{class}\n").as_bytes());
        pickle_str(&mut p, &key);
        pickle_str(&mut p, "cpu");
        pickle_int(&mut p, numel);
        p.extend_from_slice(b"tQK\x00");
        pickle_tuple(&mut p, &t.shape);
        pickle_tuple(&mut p, &stride);
        p.extend_from_slice(b"\x89ccollections\nOrderedDict\n)RtR");
        entries.push((format!("ck/data/{key}"), t.data()));
        kept.push(t);
    }
    p.extend_from_slice(b"u.");
    entries.insert(0, ("ck/data.pkl".into(), p));
    entries.push(("ck/byteorder".into(), b"little".to_vec()));
    entries.push(("ck/version".into(), b"3\n".to_vec()));
    (zip_of(&entries), kept)
}

/// A conversion to tensorizer of an input holding `kept`, read back by flat name.
fn to_tensorizer(
    input: Vec<u8>,
    name: &str,
    kept: &[Gen],
    crypt: Crypt,
    tensorizer_layout: bool,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("out.tensors");
    let (write, key) = options(crypt, tensorizer_layout);
    let opts =
        ConvertOptions { to: Some(Format::Tensorizer), write, key: None, max_output_bytes: None };
    let converted = match convert_source(MemorySource::new(input, name), &dst, &opts, |_, _| Ok(()))
    {
        Err(e) => return refused(&e, dir.path()),
        Ok(c) => c,
    };
    prop_assert_eq!(converted.tensors, kept.len());
    let (version, seen) = read_tensorizer(&dst, key);
    let specs: Vec<TensorSpec> = kept
        .iter()
        .map(|t| {
            TensorSpec::state_dict(
                TensorPath::Plain(t.flat()),
                Dtype::from_element(t.element),
                t.shape.clone(),
            )
        })
        .collect();
    prop_assert_eq!(version, expected_version(&specs, !matches!(crypt, Crypt::None)));
    let seen: Vec<Seen> = seen.into_iter().map(|(_, s, d)| (flat_name(&s.path), s, d)).collect();
    let want: Vec<_> = specs.into_iter().zip(kept).map(|(s, t)| (t.flat(), s, t.data())).collect();
    same(&seen, &want, false)
}

fn crypt() -> impl Strategy<Value = Crypt> {
    prop_oneof![Just(Crypt::None), Just(Crypt::Key), Just(Crypt::Passphrase)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_native_writer_writes_what_the_reader_reads(
        tensors in tensors(), crypt in crypt(), tensorizer_layout in any::<bool>(), incremental in any::<bool>()
    ) {
        native(&tensors, crypt, tensorizer_layout, incremental)?;
    }

    #[test]
    fn safetensors_convert_to_what_the_reader_reads(tensors in tensors(), crypt in crypt(), tensorizer_layout in any::<bool>()) {
        let (bytes, kept) = safetensors_bytes(&tensors);
        to_tensorizer(bytes, "in.safetensors", &kept, crypt, tensorizer_layout)?;
    }

    #[test]
    fn checkpoints_convert_to_what_the_reader_reads(tensors in tensors(), crypt in crypt(), tensorizer_layout in any::<bool>()) {
        let (bytes, kept) = checkpoint_bytes(&tensors);
        to_tensorizer(bytes, "in.pt", &kept, crypt, tensorizer_layout)?;
    }
}
