//! Hostile metadata: names deep enough to overflow a recursive walk, path
//! sets large enough to exhaust memory, and key-derivation settings that
//! would buy minutes of Argon2. Every case must end quickly in a typed error
//! (or a correct result), on a small stack, within a memory bound.
//!
//! Its own test binary, because it installs a counting allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};
use tensorizer_core::layout::{MAX_PATH_COMPONENTS, MAX_PATH_DEPTH, MAX_TENSORS, ParseLimits};
use tensorizer_core::{
    Dtype, ElementType, Error, File, FileHeader, KdfParams, KeySource, Metadata, PathComponent,
    TensorPath, TensorSpec, WriterOptions, write,
};

// ---- a per-thread counting allocator ---------------------------------------

struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn account(delta: i64) {
    // `try_with`: the thread's slots may be gone while it exits.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: forwards every call to the system allocator unchanged; the
// bookkeeping touches only const-initialised thread-locals (no allocation).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        account(layout.size() as i64);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        account(-(layout.size() as i64));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        account(new_size as i64 - layout.size() as i64);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A regression must fail the test, not hang CI.
const HANG: Duration = Duration::from_secs(60);

/// Runs `f` on a fresh thread with a `stack`-byte stack and returns its
/// result with the most heap it held at once beyond what it started with,
/// failing if it takes longer than [`HANG`].
fn bounded<T: Send + 'static>(
    stack: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, u64, Duration) {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::Builder::new()
        .stack_size(stack)
        .spawn(move || {
            let base = LIVE.with(Cell::get);
            PEAK.with(|p| p.set(base));
            let start = Instant::now();
            let out = f();
            let took = start.elapsed();
            let peak = PEAK.with(Cell::get) - base;
            let _ = tx.send((out, peak.max(0) as u64, took));
        })
        .unwrap();
    match rx.recv_timeout(HANG) {
        Ok(result) => result,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("still running after {HANG:?}"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let _ = worker.join();
            panic!("the parse thread panicked or overflowed its stack")
        }
    }
}

// ---- building hostile files ------------------------------------------------

/// A valid file with one f32 scalar per name, where each name is written
/// as an equally long plain placeholder and then replaced byte for byte
/// (index and tensor header): the writer refuses what a hostile file may
/// hold, and equal lengths keep every offset right.
fn file_with_names(names: &[Vec<u8>]) -> Vec<u8> {
    let placeholders: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{i:08}{}", "x".repeat(n.len() - 8)))
        .collect();
    let f32 = Dtype::from_element(ElementType::F32);
    let specs: Vec<_> = placeholders
        .iter()
        .map(|p| TensorSpec::state_dict(p.as_str(), f32.clone(), vec![]))
        .collect();
    let data = vec![&[0u8, 0, 0x80, 0x3f][..]; names.len()];
    let mut bytes =
        write::to_vec(&specs, &data, &WriterOptions::default(), None, || [0; 24]).unwrap();
    // Names appear in order in the index, then in order in the headers:
    // two forward scans find them all in linear time.
    let headers_start = FileHeader::LEN + FileHeader::parse(&bytes).unwrap().metadata_len as usize;
    let mut in_index = FileHeader::LEN;
    let mut in_headers = headers_start;
    for (placeholder, name) in placeholders.iter().zip(names) {
        let p = placeholder.as_bytes();
        for at in [&mut in_index, &mut in_headers] {
            let pos =
                *at + bytes[*at..].windows(p.len()).position(|w| w == p).expect("placeholder");
            bytes[pos..pos + p.len()].copy_from_slice(name);
            *at = pos + p.len();
        }
    }
    assert!(in_index <= headers_start);
    bytes
}

/// `0x1E` + the compact JSON array of `components` (indices).
fn structured(components: impl IntoIterator<Item = u64>) -> Vec<u8> {
    let parts: Vec<String> = components.into_iter().map(|c| c.to_string()).collect();
    format!("\u{1e}[{}]", parts.join(",")).into_bytes()
}

fn parse_index(bytes: &[u8], limits: &ParseLimits) -> Result<Metadata, Error> {
    let header = FileHeader::parse(bytes)?;
    Metadata::parse_within(&header, &bytes[FileHeader::LEN..], limits)
}

// ---- path depth --------------------------------------------------------------

#[test]
fn a_32000_component_name_is_refused_on_a_small_stack() {
    let bytes = file_with_names(&[structured(std::iter::repeat_n(0, 32_000))]);
    let (result, _, took) =
        bounded(128 << 10, move || parse_index(&bytes, &ParseLimits::default()).map(|_| ()));
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { value: 32_000, limit, .. } if limit == MAX_PATH_DEPTH as u64)
    );
    assert!(err.to_string().contains("tensor path depth is 32000"), "{err}");
    assert!(took < Duration::from_secs(2));
}

#[test]
fn raising_the_depth_limit_still_never_recurses() {
    let names = vec![
        structured(std::iter::repeat_n(0, 32_000)),
        structured(std::iter::repeat_n(1, 32_000)),
    ];
    let bytes = file_with_names(&names);
    let limits = ParseLimits { max_path_depth: 40_000, ..ParseLimits::default() };
    // Parse, register, and drop everything on a 128 KiB stack.
    let (result, _, _) =
        bounded(128 << 10, move || parse_index(&bytes, &limits).map(|m| m.entries.len()));
    assert_eq!(result.unwrap(), 2);
}

#[test]
fn names_at_the_depth_limit_load() {
    // Our writer accepts exactly the depths our reader does.
    let f32 = Dtype::from_element(ElementType::F32);
    let specs: Vec<_> = [
        vec![PathComponent::Index(0); MAX_PATH_DEPTH],
        vec![PathComponent::Index(1); MAX_PATH_DEPTH],
    ]
    .into_iter()
    .map(|c| TensorSpec::state_dict(TensorPath::from_components(c).unwrap(), f32.clone(), vec![]))
    .collect();
    let data = [&[0u8; 4][..], &[0u8; 4][..]];
    let bytes = write::to_vec(&specs, &data, &WriterOptions::default(), None, || [0; 24]).unwrap();
    let (result, _, _) =
        bounded(128 << 10, move || File::parse(&bytes).and_then(|f| f.load_all(None)));
    assert_eq!(result.unwrap().len(), 2);
}

// ---- path trees ------------------------------------------------------------

/// `count` paths of `depth` components that share no prefix, then a copy
/// of the first: the conflict is only found at the very end.
fn wide_and_deep(count: u64, depth: usize) -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = (0..count)
        .map(|i| structured(std::iter::once(i).chain(std::iter::repeat_n(0, depth - 1))))
        .collect();
    names.push(names[0].clone());
    names
}

#[test]
fn a_conflict_after_a_million_components_costs_memory_in_proportion() {
    let names = wide_and_deep(1000, 1000);
    let bytes = file_with_names(&names);
    let file_len = bytes.len() as u64;
    let (result, peak, took) =
        bounded(256 << 10, move || parse_index(&bytes, &ParseLimits::default()).map(|_| ()));
    assert!(matches!(result, Err(Error::ConflictingPaths { .. })), "{result:?}");
    // ~1M components: the paths themselves take 24 bytes each, the
    // registry ~60; a tree of maps took ~600.
    let components = 1001 * 1000;
    assert!(
        peak < 128 * components,
        "peak {peak} bytes for {components} components ({file_len}-byte file)"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn more_components_than_the_limit_are_refused_before_the_registry_grows() {
    let count = MAX_PATH_COMPONENTS / 1000 + 1;
    let names = wide_and_deep(count, 1000);
    let bytes = file_with_names(&names);
    let (result, _, took) =
        bounded(256 << 10, move || parse_index(&bytes, &ParseLimits::default()).map(|_| ()));
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { what: "tensor path components in the file", .. }),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(10));
}

#[test]
fn more_tensors_than_the_limit_are_refused_up_front() {
    let count = MAX_TENSORS + 1;
    let header = FileHeader {
        version: 1,
        flags: 0,
        tensor_size: 0,
        tensor_count: count,
        metadata_len: count * 40,
    };
    let err = Metadata::parse_within(&header, &[], &ParseLimits::default()).unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { offset: 0x39, what: "tensor count", .. }),
        "{err:?}"
    );
}

// ---- key derivation budget -----------------------------------------------

const PASS: &[u8] = b"correct horse";

/// One tensor encrypted under a key derived with its own salt.
fn encrypted_single(i: u8) -> Vec<u8> {
    let kdf = KdfParams { opslimit: 1, memlimit: 8192, alg: 2, salt: vec![i; 16] };
    let key = Key::derive(PASS, &kdf, &KdfLimits::default()).unwrap();
    let options = WriterOptions { encryption: Some(Some(kdf)), ..WriterOptions::tensorizer() };
    let spec = TensorSpec::state_dict(
        format!("t{i:02}").as_str(),
        Dtype::from_element(ElementType::F32),
        vec![2],
    );
    let mut nonce = [i; 24];
    write::to_vec(&[spec], &[&[i; 8]], &options, Some(&key), || {
        nonce[0] = nonce[0].wrapping_add(1);
        nonce
    })
    .unwrap()
}

/// Splices single-tensor files into one file whose tensors each carry
/// their own salt (no writer produces that; a hostile file may).
fn splice(parts: &[Vec<u8>]) -> Vec<u8> {
    let files: Vec<File<'_>> = parts.iter().map(|p| File::parse(p).unwrap()).collect();
    let first = files[0].header;
    let mut entries = Vec::new();
    let mut records = Vec::new();
    let metadata_len = first.metadata_len;
    let mut next = FileHeader::LEN as u64 + metadata_len;
    for (file, bytes) in files.iter().zip(parts) {
        let mut e = file.metadata.entries[0].clone();
        let record = &bytes[e.header_offset as usize..e.data_end() as usize];
        let header_len = e.header_len();
        e.header_offset = next;
        e.data_offset = next + header_len;
        next += record.len() as u64;
        records.extend_from_slice(record);
        entries.push(e);
    }
    let header = FileHeader {
        tensor_count: entries.len() as u64,
        tensor_size: entries.iter().map(|e| e.data_length).sum(),
        ..first
    };
    let mut out = Vec::new();
    header.emit(&mut out);
    Metadata::emit(&entries, metadata_len, &mut out).unwrap();
    out.extend_from_slice(&records);
    out.extend_from_slice(&[0; 8]);
    out
}

#[test]
fn sixteen_salts_exhaust_the_per_file_derivation_budget() {
    let parts: Vec<_> = (0..16).map(encrypted_single).collect();
    let bytes = splice(&parts);
    let file = File::parse(&bytes).unwrap();
    let default = KeySource::Passphrase(Passphrase::new(PASS), KdfLimits::default());
    let err = file.load_all(Some(&default)).unwrap_err();
    assert!(err.to_string().contains("max_derivations"), "{err}");
    // A caller who expects such a file raises the budget.
    let generous = KeySource::Passphrase(
        Passphrase::new(PASS),
        KdfLimits { max_derivations: 16, ..KdfLimits::default() },
    );
    let all = file.load_all(Some(&generous)).unwrap();
    assert_eq!(all.len(), 16);
    assert_eq!(all[5], vec![5; 8]);
}

#[test]
fn work_is_budgeted_across_salts() {
    let parts: Vec<_> = (0..3).map(encrypted_single).collect();
    let bytes = splice(&parts);
    let file = File::parse(&bytes).unwrap();
    // Each derivation is 8 KiB × 1 pass of work: 20 admits two.
    let tight = KeySource::Passphrase(
        Passphrase::new(PASS),
        KdfLimits { max_work: 20, ..KdfLimits::default() },
    );
    let err = file.load_all(Some(&tight)).unwrap_err();
    assert!(err.to_string().contains("max_work"), "{err}");
}

// ---- every named limit, exceeded by one -------------------------------------

/// A refusal is typed and names the limit: a `LimitExceeded` for `what`
/// with the value one past `limit`.
fn exceeded(err: &Error, what: &str, limit: u64) {
    let ok = matches!(err, Error::LimitExceeded { what: w, value, limit: l, .. }
        if w.contains(what) && *l == limit && *value == limit + 1);
    assert!(ok, "{what}: {err:?}");
}

/// Runs `parse` on a small stack and checks that it refused without
/// holding more than `heap` bytes at once (never the claimed size).
fn refused_within<T: Send + 'static>(
    heap: u64,
    parse: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Error {
    let (result, peak, _) = bounded(256 << 10, parse);
    let err = result.err().expect("the limit was not applied");
    assert!(peak <= heap, "held {peak} bytes refusing: {err:?}");
    err
}

/// One small valid file, for patching fields of.
fn small_file() -> Vec<u8> {
    let spec = TensorSpec::state_dict("t", Dtype::from_element(ElementType::F32), vec![2]);
    write::to_vec(&[spec], &[&[0u8; 8]], &WriterOptions::tensorizer(), None, || [0; 24]).unwrap()
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn every_file_limit_exceeded_by_one_is_refused_before_allocating() {
    use tensorizer_core::layout::{MAX_METADATA_LEN, MAX_TENSOR_HEADER_LEN, MIN_CRYPT_CHUNK_SIZE};
    const SMALL: u64 = 1 << 20;
    // The metadata index length (file header offset 65).
    let mut bytes = small_file();
    put_u64(&mut bytes, 65, MAX_METADATA_LEN + 1);
    let err = refused_within(SMALL, move || File::parse(&bytes).map(|_| ()));
    exceeded(&err, "metadata index length", MAX_METADATA_LEN);
    // The tensor count (offset 0x39), with an index long enough to claim it.
    let mut bytes = small_file();
    put_u64(&mut bytes, 0x39, MAX_TENSORS + 1);
    put_u64(&mut bytes, 65, (MAX_TENSORS + 1) * 32);
    let err = refused_within(SMALL, move || File::parse(&bytes).map(|_| ()));
    exceeded(&err, "tensor count", MAX_TENSORS);
    // A tensor header one byte longer than the limit (its data offset moved).
    let bytes = small_file();
    let file = File::parse(&bytes).unwrap();
    let e = &file.metadata.entries[0];
    let offsets = [e.header_offset.to_le_bytes(), e.data_offset.to_le_bytes()].concat();
    let at = bytes.windows(16).position(|w| w == offsets).unwrap() + 8;
    let mut bytes = bytes.clone();
    put_u64(&mut bytes, at, e.header_offset + MAX_TENSOR_HEADER_LEN + 1);
    let err = refused_within(SMALL, move || File::parse(&bytes).map(|_| ()));
    exceeded(&err, "tensor header length", MAX_TENSOR_HEADER_LEN);
    // The data version (MAX_VERSION + 1).
    let mut bytes = small_file();
    bytes[5..9].copy_from_slice(&(tensorizer_core::MAX_VERSION + 1).to_le_bytes());
    let err = refused_within(SMALL, move || File::parse(&bytes).map(|_| ()));
    assert_eq!(err, Error::UnsupportedVersion { version: tensorizer_core::MAX_VERSION + 1 });
    // One path one component deeper than the limit.
    let bytes = file_with_names(&[structured(0..=MAX_PATH_DEPTH as u64)]);
    let err = refused_within(SMALL, move || File::parse(&bytes).map(|_| ()));
    exceeded(&err, "tensor path depth", MAX_PATH_DEPTH as u64);
    // One component more than the file's limit: 2,097 names of 1,000 and one of 153.
    let deep = |i: u64, depth: u64| {
        structured(std::iter::once(i).chain(std::iter::repeat_n(0, depth as usize - 1)))
    };
    let count = MAX_PATH_COMPONENTS / 1000;
    let mut names: Vec<Vec<u8>> = (0..count).map(|i| deep(i, 1000)).collect();
    names.push(deep(count, MAX_PATH_COMPONENTS % 1000 + 1));
    let bytes = file_with_names(&names);
    let err =
        refused_within(64 << 20, move || parse_index(&bytes, &ParseLimits::default()).map(|_| ()));
    exceeded(&err, "tensor path components in the file", MAX_PATH_COMPONENTS);
    // An encryption chunk one quantum below the smallest accepted.
    let info = tensorizer_core::CryptInfo {
        chunks: vec![tensorizer_core::CryptChunk::Parallel {
            chunk_size: MIN_CRYPT_CHUNK_SIZE - 64,
            nonce: [0; 24],
            macs: vec![[0; 16]],
        }],
    };
    let mut raw = Vec::new();
    info.emit(&mut raw);
    let err = tensorizer_core::CryptInfo::parse(&raw[8..], 8).unwrap_err();
    assert!(
        matches!(err, Error::Malformed { reason: "invalid encryption chunk size", .. }),
        "{err:?}"
    );
}

#[test]
fn every_key_derivation_limit_exceeded_by_one_is_refused_before_argon2() {
    use tensorizer_core::crypto::{KeyRing, MAX_KDF_SALT_LEN, MIN_KDF_SALT_LEN};
    use tensorizer_core::layout::{
        DEFAULT_MAX_KDF_DERIVATIONS, DEFAULT_MAX_KDF_MEMLIMIT, DEFAULT_MAX_KDF_OPSLIMIT,
        DEFAULT_MAX_KDF_WORK, MAX_KDF_MEMLIMIT, MAX_KDF_OPSLIMIT, MIN_KDF_MEMLIMIT,
        MIN_KDF_OPSLIMIT,
    };
    let params = |opslimit, memlimit, salt_len| KdfParams {
        opslimit,
        memlimit,
        alg: 2,
        salt: vec![1; salt_len],
    };
    let raised =
        KdfLimits { max_memlimit: u64::MAX, max_opslimit: u64::MAX, ..KdfLimits::default() };
    let cases = [
        (
            "DEFAULT_MAX_KDF_MEMLIMIT + 1",
            params(1, DEFAULT_MAX_KDF_MEMLIMIT + 1, 16),
            KdfLimits::default(),
        ),
        (
            "DEFAULT_MAX_KDF_OPSLIMIT + 1",
            params(DEFAULT_MAX_KDF_OPSLIMIT + 1, 8192, 16),
            KdfLimits::default(),
        ),
        ("MAX_KDF_MEMLIMIT + 1", params(1, MAX_KDF_MEMLIMIT + 1, 16), raised),
        ("MAX_KDF_OPSLIMIT + 1", params(MAX_KDF_OPSLIMIT + 1, 8192, 16), raised),
        ("MIN_KDF_MEMLIMIT - 1", params(1, MIN_KDF_MEMLIMIT - 1, 16), KdfLimits::default()),
        ("MIN_KDF_OPSLIMIT - 1", params(MIN_KDF_OPSLIMIT - 1, 8192, 16), KdfLimits::default()),
        ("MIN_KDF_SALT_LEN - 1", params(1, 8192, MIN_KDF_SALT_LEN - 1), KdfLimits::default()),
        ("MAX_KDF_SALT_LEN + 1", params(1, 8192, MAX_KDF_SALT_LEN + 1), KdfLimits::default()),
    ];
    for (what, p, limits) in cases {
        let err = refused_within(1 << 20, move || Key::derive(PASS, &p, &limits).map(|_| ()));
        assert!(matches!(err, Error::Encryption { .. }), "{what}: {err:?}");
    }
    // Per file: one derivation past the count, and past the work (the
    // smallest step of work, 8 KiB × 1 pass) with a derivation that does
    // no work, so that only the budget is tested.
    fn no_work(_: &[u8], _: &KdfParams, _: &KdfLimits) -> tensorizer_core::Result<Key> {
        Ok(Key::from_bytes([0; 32]))
    }
    let mut ring = KeyRing::default();
    let salted = |b: u8| KdfParams { salt: vec![b; 16], ..params(1, 8192, 16) };
    for b in 0..DEFAULT_MAX_KDF_DERIVATIONS as u8 {
        ring.key_deriving(PASS, &salted(b), &KdfLimits::default(), no_work).unwrap();
    }
    let err = ring.key_deriving(PASS, &salted(0xff), &KdfLimits::default(), no_work).unwrap_err();
    assert!(err.to_string().contains("max_derivations"), "{err}");
    let mut ring = KeyRing::default();
    let at_cap = |b: u8| KdfParams {
        salt: vec![b; 16],
        ..params(DEFAULT_MAX_KDF_OPSLIMIT, DEFAULT_MAX_KDF_MEMLIMIT, 16)
    };
    for b in 0..2 {
        ring.key_deriving(PASS, &at_cap(b), &KdfLimits::default(), no_work).unwrap();
    }
    assert_eq!(
        2 * (DEFAULT_MAX_KDF_MEMLIMIT / 1024) * DEFAULT_MAX_KDF_OPSLIMIT,
        DEFAULT_MAX_KDF_WORK
    );
    let err =
        ring.key_deriving(PASS, &params(1, 8192, 16), &KdfLimits::default(), no_work).unwrap_err();
    assert!(err.to_string().contains("max_work"), "{err}");
}
