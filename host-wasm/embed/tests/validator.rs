//! The real `tensorizer-validate.wasm` under the Rust host: every committed
//! vector, corrupted and truncated copies, and hostile files under tight
//! fuel, wall-clock and memory limits. Every run must end in a clear
//! [`Kind`], never a host panic.
//!
//! The module comes from `TZR_VALIDATOR_WASM` (host-wasm/test.sh sets it), or
//! is built here with cargo from the repository root.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tensorizer_validate_host::{Kind, Limits, Outcome, Request, Validator};

const MIB: usize = 1 << 20;
/// The file header is 73 bytes; the metadata index length is the u64 at 0x41.
const INDEX_LENGTH_AT: usize = 0x41;
/// Total tensor data bytes: the u64 at 0x29.
const DATA_TOTAL_AT: usize = 0x29;
const FLAT: &str = "v1_flat.tensors";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

fn vectors() -> PathBuf {
    root().join("tests/vectors")
}

/// `TZR_VALIDATOR_WASM`, or the wasm-release build, made once per test run.
fn wasm_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("TZR_VALIDATOR_WASM") {
            let path = PathBuf::from(path);
            assert!(path.is_file(), "TZR_VALIDATOR_WASM={} is not a file", path.display());
            return path;
        }
        let root = root();
        let target = root.join("target");
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(&root)
            .env_remove("CARGO_TARGET_DIR")
            .args([
                "build",
                "-p",
                "tensorizer-wasm",
                "--target",
                "wasm32-wasip1",
                "--bin",
                "tensorizer-validate",
            ])
            .args([
                "--config",
                "host-wasm/wasm-release.toml",
                "--profile",
                "wasm-release",
                "--target-dir",
            ])
            .arg(&target)
            .status()
            .expect("run cargo to build the validator");
        assert!(status.success(), "building tensorizer-validate.wasm failed ({status})");
        target.join("wasm32-wasip1/wasm-release/tensorizer-validate.wasm")
    })
}

/// One compiled module shared by every test (tests run on several threads).
fn validator() -> &'static Validator {
    static VALIDATOR: OnceLock<Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| Validator::from_file(wasm_path()).expect("compile the validator"))
}

fn manifest() -> &'static Value {
    static MANIFEST: OnceLock<Value> = OnceLock::new();
    MANIFEST.get_or_init(|| {
        let text = std::fs::read_to_string(vectors().join("manifest.json")).expect("manifest");
        serde_json::from_str(&text).expect("manifest JSON")
    })
}

fn vector(name: &str) -> &'static Value {
    manifest()["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["file"] == name)
        .expect("vector in manifest")
}

fn u64_of(value: &Value) -> u64 {
    value.as_u64().expect("an unsigned integer")
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tzr-embed-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> &Self {
        std::fs::write(self.0.join(name), bytes).unwrap();
        self
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(request: &Request, limits: &Limits) -> Outcome {
    validator().run(request, limits).expect("the host sets the run up")
}

/// Runs `args` on `data` written as `h.tensors` in a scratch directory.
fn hostile(data: &[u8], args: &[&str], limits: &Limits) -> Outcome {
    let scratch = Scratch::new();
    scratch.write("h.tensors", data);
    run(&Request::new(&scratch.0, "h.tensors").args(args.iter().copied()), limits)
}

fn one_line(outcome: &Outcome) -> &str {
    let lines: Vec<&str> = outcome.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line: {outcome:?}");
    lines[0]
}

/// Limits for hostile inputs (as host-wasm/tests/test_validator.py uses).
fn hostile_limits() -> Limits {
    Limits { memory_bytes: 64 * MIB, wall_clock: Duration::from_secs(30), ..Limits::default() }
}

// ---- every vector ----------------------------------------------------------

fn check_report(report: &Value, vector: &Value) {
    assert_eq!(report["report_version"], 4);
    assert_eq!(report["format"], "tensorizer");
    assert_eq!(report["file"], format!("/in/{}", vector["file"].as_str().unwrap()));
    assert_eq!(report["file_bytes"], vector["size"]);
    assert_eq!(report["tensor_count"], vector["tensor_count"]);
    assert_eq!(
        report["tensor_rows"].as_array().unwrap().len() as u64,
        u64_of(&vector["tensor_count"])
    );
    assert_eq!(report["data_bytes"], vector["tensor_data_bytes"]);
    assert!(report.get("error").is_none(), "{report}");
    // The embedding contract: `valid`, `format`, `tensors` (a count) and `findings`.
    assert_eq!(report["valid"], true, "{report}");
    assert_eq!(report["tensors"], vector["tensor_count"]);
    assert_eq!(report["findings"], serde_json::json!([]));
    assert_eq!(report["errors"], serde_json::json!([]));
}

#[test]
fn every_vector_inspects_valid() {
    let all = manifest()["vectors"].as_array().unwrap();
    assert!(all.len() >= 16);
    for vector in all {
        let name = vector["file"].as_str().unwrap();
        let outcome = validator().validate(&vectors(), name, &Limits::default()).unwrap();
        assert_eq!(
            (outcome.kind, outcome.exit_code),
            (Kind::Clean, Some(0)),
            "{name}: {outcome:?}"
        );
        assert_eq!(outcome.stderr, "");
        check_report(outcome.report_json.as_ref().expect("JSON on stdout"), vector);
        assert!(outcome.fuel_used > 0);
    }
}

#[test]
fn every_vector_verifies_valid() {
    let secrets = &manifest()["secrets"];
    let scratch = Scratch::new();
    scratch.write("test.key", secrets["key_hex"].as_str().unwrap().as_bytes());
    for vector in manifest()["vectors"].as_array().unwrap() {
        let name = vector["file"].as_str().unwrap();
        std::fs::copy(vectors().join(name), scratch.0.join(name)).unwrap();
        let mut request = Request::new(&scratch.0, name);
        let encryption = &vector["encryption"];
        request = if encryption.is_null() {
            request.args(["--verify", "--json"])
        } else if let Some(passphrase) = encryption["passphrase"].as_str() {
            request.args(["--verify", "--json", "--passphrase-env", "P"]).env("P", passphrase)
        } else {
            request.args(["--verify", "--json", "--key-file", "/in/test.key"])
        };
        let outcome = run(&request, &Limits::default());
        assert_eq!(
            (outcome.kind, outcome.exit_code),
            (Kind::Clean, Some(0)),
            "{name}: {outcome:?}"
        );
        let report = outcome.report_json.as_ref().expect("JSON on stdout");
        check_report(report, vector);
        assert_eq!(report["verification"]["ok"], true);
        assert_eq!(report["verification"]["failed"], 0);
        assert_eq!(report["verification"]["data_bytes_checked"], vector["tensor_data_bytes"]);
    }
}

// ---- corrupted and truncated copies ----------------------------------------

#[test]
fn flipped_data_byte_fails_verification() {
    let t = &vector(FLAT)["tensors"].as_array().unwrap().last().unwrap().clone();
    let mut data = std::fs::read(vectors().join(FLAT)).unwrap();
    data[usize::try_from(u64_of(&t["data_offset"])).unwrap() + 3] ^= 0x40;
    // The index and tensor headers are intact: the scan alone finds nothing.
    assert_eq!(hostile(&data, &["--json"], &hostile_limits()).kind, Kind::Clean);
    let outcome = hostile(&data, &["--verify", "--json"], &hostile_limits());
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::Findings, Some(1)), "{outcome:?}");
    assert!(one_line(&outcome).contains("TZR-007"), "{}", outcome.stderr);
    assert!(one_line(&outcome).contains("failed CRC32 verification"), "{}", outcome.stderr);
    let report = outcome.report_json.expect("the full report");
    assert_eq!(report["verification"]["ok"], false);
    assert_eq!(report["verification"]["failed"], 1);
}

#[test]
fn truncated_copies_are_findings() {
    let data = std::fs::read(vectors().join(FLAT)).unwrap();
    let tensors = vector(FLAT)["tensors"].as_array().unwrap();
    let first_header = usize::try_from(u64_of(&tensors[0]["header_offset"])).unwrap();
    let last = tensors.last().unwrap();
    let last_data =
        usize::try_from(u64_of(&last["data_offset"]) + u64_of(&last["data_length"]) / 2).unwrap();
    for cut in [0, 4, 40, 72, 73, 73 + 1000, first_header - 1, first_header + 10, last_data] {
        for verify in [false, true] {
            let args: &[&str] = if verify { &["--json", "--verify"] } else { &["--json"] };
            let outcome = hostile(&data[..cut], args, &hostile_limits());
            assert_eq!(
                (outcome.kind, outcome.exit_code),
                (Kind::Findings, Some(1)),
                "cut {cut}: {outcome:?}"
            );
            let doc = outcome.report_json.as_ref().expect("a report");
            let first = &doc["findings"][0];
            let want = if cut < 5 { "FMT-001" } else { "TZR-004" };
            assert_eq!(first["rule"], want, "cut {cut}: {doc}");
            assert!(
                first["offset"].is_u64() && first["remediation"].is_string(),
                "cut {cut}: {doc}"
            );
            assert!(one_line(&outcome).contains(want), "{}", outcome.stderr);
        }
    }
}

#[test]
fn not_a_model_file_is_a_finding() {
    let junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let outcome = hostile(&junk, &["--json"], &hostile_limits());
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::Findings, Some(1)), "{outcome:?}");
    assert!(one_line(&outcome).contains("FMT-001"));
}

#[test]
fn hostile_checkpoints_are_findings_and_sarif_lists_them() {
    let torch = vectors().join("torch");
    let outcome = run(&Request::new(&torch, "hostile_os_system.pt"), &Limits::default());
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::Findings, Some(1)), "{outcome:?}");
    let report = outcome.report_json.expect("a report");
    assert_eq!(report["format"], "torch-zip");
    let findings = report["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["rule"] == "PKL-001"
                && f["message"].as_str().unwrap().contains("posix.system"))
    );
    let outcome =
        run(&Request::new(&torch, "hostile_os_system.pt").args(["--sarif"]), &Limits::default());
    assert_eq!(outcome.exit_code, Some(1));
    let log = outcome.report_json.expect("a SARIF log");
    assert_eq!(log["version"], "2.1.0");
    assert_eq!(log["runs"][0]["results"].as_array().unwrap().len(), findings.len());
    let outcome = run(&Request::new(&torch, "params.pt"), &Limits::default());
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::Clean, Some(0)), "{outcome:?}");
}

#[test]
fn bad_option_is_a_usage_error() {
    let request = Request::new(vectors(), FLAT).args(["--no-such-option"]);
    let outcome = run(&request, &Limits::default());
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::CannotScan, Some(2)), "{outcome:?}");
}

#[test]
fn file_name_must_stay_in_the_preopen() {
    for name in ["../v1_flat.tensors", "a/b", "", ".."] {
        assert!(
            validator().run(&Request::new(vectors(), name), &Limits::default()).is_err(),
            "{name}"
        );
    }
}

// ---- hostile files under limits --------------------------------------------

/// v1_flat with a claimed metadata index of `index_bytes`, padded with zeros
/// so that the index lies within the file: the validator must hold the index
/// in memory to parse it.
fn big_index_file(index_bytes: usize) -> Vec<u8> {
    let mut data = std::fs::read(vectors().join(FLAT)).unwrap();
    data[INDEX_LENGTH_AT..INDEX_LENGTH_AT + 8].copy_from_slice(&(index_bytes as u64).to_le_bytes());
    data.resize(data.len().max(73 + index_bytes + 4096), 0);
    data
}

#[test]
fn big_index_under_a_small_memory_limit_is_a_memory_limit_result() {
    let data = big_index_file(24 * MIB);
    let tight = Limits { memory_bytes: 8 * MIB, ..hostile_limits() };
    let outcome = hostile(&data, &["--json"], &tight);
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::MemoryLimit, Some(2)), "{outcome:?}");
    let line = one_line(&outcome);
    assert!(line.contains("cannot allocate") && line.contains("raise the memory limit"), "{line}");
    assert!(outcome.report_json.expect("an error document")["error"]["message"].is_string());
    // With room for the index, the same file is judged on its content instead.
    let roomy = Limits { memory_bytes: 256 * MIB, ..hostile_limits() };
    let outcome = hostile(&data, &["--json"], &roomy);
    assert!(matches!(outcome.kind, Kind::Clean | Kind::Findings), "{outcome:?}");
}

#[test]
fn memory_limit_below_the_modules_own_memory_is_a_memory_limit_result() {
    let limits = Limits { memory_bytes: 64 << 10, ..Limits::default() };
    let outcome = validator().validate(&vectors(), FLAT, &limits).unwrap();
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::MemoryLimit, None), "{outcome:?}");
    assert!(outcome.trap.is_some());
}

#[test]
fn tiny_fuel_budget_runs_out() {
    let limits = Limits { fuel_base: 100_000, fuel_per_byte: 0, ..Limits::default() };
    let began = Instant::now();
    let request = Request::new(vectors(), FLAT).args(["--verify", "--json"]);
    let outcome = run(&request, &limits);
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::OutOfFuel, None), "{outcome:?}");
    assert_eq!(outcome.fuel_used, 100_000);
    assert!(outcome.trap.as_deref().unwrap().contains("fuel"), "{:?}", outcome.trap);
    assert!(began.elapsed() < Duration::from_secs(5));
}

/// v1_flat with its last tensor (float32 4x4) grown to 4 x `columns` of
/// zeros, the index and headers patched but the stored hashes left alone:
/// `--verify` must stream all of it before it finds the mismatch (exit 1).
fn grown_file(scratch: &Scratch, columns: u32) -> String {
    let v = vector(FLAT);
    let t = v["tensors"].as_array().unwrap().last().unwrap();
    assert_eq!(t["shape"], serde_json::json!([4, 4]));
    let (header_offset, data_offset, data_length) =
        (u64_of(&t["header_offset"]), u64_of(&t["data_offset"]), u64_of(&t["data_length"]));
    let payload = 16 * u64::from(columns);
    let mut data = std::fs::read(vectors().join(FLAT)).unwrap();
    let (ho, dof) =
        (usize::try_from(header_offset).unwrap(), usize::try_from(data_offset).unwrap());
    let offsets: Vec<u8> =
        [header_offset, data_offset, data_length].iter().flat_map(|x| x.to_le_bytes()).collect();
    let pos = 73 + data[73..ho].windows(24).position(|w| w == offsets).expect("index entry");
    let (old_dims, new_dims) = (dims(4, 4), dims(4, columns));
    assert_eq!(data[pos - 8..pos], old_dims);
    data[pos - 8..pos].copy_from_slice(&new_dims);
    data[pos + 16..pos + 24].copy_from_slice(&payload.to_le_bytes());
    let total = u64_of(&v["tensor_data_bytes"]) - data_length + payload;
    data[DATA_TOTAL_AT..DATA_TOTAL_AT + 8].copy_from_slice(&total.to_le_bytes());
    let header = &mut data[ho..dof];
    let at = header.windows(8).position(|w| w == old_dims).expect("dims in the tensor header");
    header[at..at + 8].copy_from_slice(&new_dims);
    let end = header.len();
    header[end - 8..].copy_from_slice(&payload.to_le_bytes());
    data.truncate(dof);
    let path = scratch.0.join("grown.tensors");
    std::fs::write(&path, &data).unwrap();
    // Zeros as a sparse tail: payload + 8 trailing bytes, as tensorizer writes.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(data_offset + payload + 8)
        .unwrap();
    "grown.tensors".to_owned()
}

fn dims(a: u32, b: u32) -> [u8; 8] {
    let mut out = [0; 8];
    out[..4].copy_from_slice(&a.to_le_bytes());
    out[4..].copy_from_slice(&b.to_le_bytes());
    out
}

#[test]
fn wall_clock_bound_stops_a_long_verification() {
    let scratch = Scratch::new();
    let name = grown_file(&scratch, 8 << 20); // 128 MiB of tensor data: seconds of hashing
    let request = Request::new(&scratch.0, &name).args(["--verify", "--json"]);
    let limits = Limits { wall_clock: Duration::from_millis(100), ..hostile_limits() };
    let outcome = run(&request, &limits);
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::Timeout, None), "{outcome:?}");
    assert!(outcome.trap.as_deref().unwrap().contains("interrupt"), "{:?}", outcome.trap);
    assert!(outcome.elapsed < Duration::from_secs(3), "{:?}", outcome.elapsed);
}

#[test]
fn grown_file_without_a_deadline_fails_its_hash() {
    // The control for the timeout test: given time, the same kind of file is
    // read to the end and fails verification (the work was real).
    let scratch = Scratch::new();
    let name = grown_file(&scratch, 1 << 20); // 16 MiB
    let request = Request::new(&scratch.0, &name).args(["--verify", "--json"]);
    let outcome = run(&request, &Limits { memory_bytes: 64 * MIB, ..Limits::default() });
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::Findings, Some(1)), "{outcome:?}");
    let report = outcome.report_json.expect("the full report");
    assert_eq!(report["verification"]["failed"], 1);
    assert!(u64_of(&report["verification"]["data_bytes_checked"]) >= 16 << 20);
}

// ---- the binary --------------------------------------------------------------

/// Starts the binary; each run compiles the module (seconds in a debug
/// build), so the cases below run side by side.
fn spawn_host(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tensorizer-validate-host"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the binary")
}

#[test]
fn binary_prints_the_report_and_exits_with_its_status() {
    let wasm = wasm_path().to_str().unwrap();
    let flat = vectors().join(FLAT);
    let flat = flat.to_str().unwrap();
    let scratch = Scratch::new();
    scratch.write("big-index.tensors", &big_index_file(24 * MIB));
    let big = scratch.0.join("big-index.tensors");
    let grown = scratch.0.join(grown_file(&scratch, 8 << 20));
    let memory = (8 * MIB).to_string();
    let cases: [(&[&str], i32, &str); 5] = [
        (&[wasm, flat, "--", "--verify", "--json"], 0, ""),
        (&["--fuel", "100000", wasm, flat], 10, "out of fuel after 100000 units"),
        (
            &["--memory", &memory, wasm, big.to_str().unwrap()],
            12,
            "memory limit of 8388608 bytes reached",
        ),
        (
            &["--timeout", "0.1", wasm, grown.to_str().unwrap(), "--", "--verify"],
            11,
            "wall-clock limit of 100ms",
        ),
        (&[wasm], 2, "expected MODULE.wasm and FILE"),
    ];
    let children: Vec<_> = cases.iter().map(|(args, ..)| spawn_host(args)).collect();
    for ((args, code, says), child) in cases.iter().zip(children) {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        if *code == 0 {
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(report["verification"]["ok"], true);
            assert_eq!(stderr, "");
        }
    }
}

// ---- hostile input, second round ---------------------------------------------

/// A data version 1 file of `n` float32 scalars `t0..`, each an 8-byte
/// header region and no data, laid end to end after the index.
fn many_tensors_file(n: usize) -> Vec<u8> {
    let mut index = Vec::new();
    let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    let index_len: usize = names.iter().map(|s| 2 + s.len() + 1 + 1 + 3 + 1 + 24).sum();
    let end = (73 + index_len) as u64;
    for (i, name) in names.iter().enumerate() {
        index.extend_from_slice(&(name.len() as u16).to_le_bytes());
        index.extend_from_slice(name.as_bytes());
        index.extend_from_slice(b"\x00\x03<f4\x00");
        let at = end + 8 * i as u64;
        for v in [at, at + 8, 0] {
            index.extend_from_slice(&v.to_le_bytes());
        }
    }
    let mut file = b"|TZR|".to_vec();
    file.extend_from_slice(&1u32.to_le_bytes());
    file.extend_from_slice(&[0; 32]);
    for v in [0u64, 0, n as u64, index_len as u64] {
        file.extend_from_slice(&v.to_le_bytes());
    }
    file.extend_from_slice(&index);
    file.resize(file.len() + 8 * n, 0);
    file
}

#[test]
fn an_index_of_2_20_tensors_is_a_memory_limit_result_not_a_crash() {
    let outcome = hostile(&many_tensors_file(1 << 20), &["--json"], &Limits::default());
    assert_eq!((outcome.kind, outcome.exit_code), (Kind::MemoryLimit, Some(2)), "{outcome:?}");
    assert!(one_line(&outcome).contains("cannot allocate"), "{outcome:?}");
}

#[test]
fn a_report_past_the_output_limit_is_not_a_success() {
    let limits = Limits { stdout_bytes: 100, ..Limits::default() };
    let outcome = run(&Request::new(vectors(), FLAT), &limits);
    assert_ne!(outcome.exit_code, Some(0), "{outcome:?}");
    assert_eq!(outcome.kind, Kind::CannotScan, "{outcome:?}");
    assert!(outcome.stderr.contains("cannot write the report"), "{outcome:?}");
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn fifos_are_refused_within_the_wall_clock() {
    let scratch = Scratch::new();
    mkfifo(&scratch.0.join("fifo.tensors"));
    mkfifo(&scratch.0.join("key"));
    std::fs::copy(vectors().join("v3_enc_key.tensors"), scratch.0.join("v.tensors")).unwrap();
    let limits = Limits { wall_clock: Duration::from_secs(2), ..Limits::default() };
    let requests = [
        Request::new(&scratch.0, "fifo.tensors"),
        Request::new(&scratch.0, "v.tensors").args(["--verify", "--key-file", "/in/key"]),
        Request::new(&scratch.0, "v.tensors").args(["--verify", "--key-file=/in/key"]),
        Request::new(&scratch.0, "v.tensors").args(["--verify", "--key-file", "/in/./key"]),
    ];
    for request in requests {
        let began = Instant::now();
        let result = validator().run(&request, &limits);
        assert!(began.elapsed() < Duration::from_secs(4), "{request:?} took {:?}", began.elapsed());
        let error = result.expect_err("a FIFO is refused");
        assert!(format!("{error:#}").contains("not a regular file"), "{request:?}: {error:#}");
    }
}

#[test]
fn torch_and_safetensors_reports_have_tensor_rows() {
    let torch = vectors().join("torch");
    let outcome = run(&Request::new(&torch, "params.pt").args(["--json"]), &Limits::default());
    assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
    let report = outcome.report_json.expect("a report");
    let rows = report["tensor_rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{report}");
    assert_eq!(rows.len() as u64, u64_of(&report["tensors"]));
    let counted: u64 =
        report["by_dtype"].as_object().unwrap().values().map(|t| u64_of(&t["tensors"])).sum();
    assert_eq!(counted, rows.len() as u64);
    let scratch = Scratch::new();
    let json = br#"{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}    "#;
    let mut st = (json.len() as u64).to_le_bytes().to_vec();
    st.extend_from_slice(json);
    st.extend_from_slice(&[0; 4]);
    scratch.write("m.safetensors", &st);
    let outcome =
        run(&Request::new(&scratch.0, "m.safetensors").args(["--json"]), &Limits::default());
    let report = outcome.report_json.expect("a report");
    assert_eq!(report["tensor_rows"][0]["dtype"], "float16", "{report}");
    assert_eq!(report["by_dtype"]["float16"]["data_bytes"], 4);
}

#[test]
fn many_files_give_one_document_and_the_worst_status() {
    // The host refuses anything but regular files under the preopen, so
    // directories are walked in the native tests (host-wasm/src/cli.rs).
    let scratch = Scratch::new();
    std::fs::copy(vectors().join("torch/hostile_os_system.pt"), scratch.0.join("x.bin")).unwrap();
    std::fs::copy(vectors().join("v1_flat.tensors"), scratch.0.join("flat")).unwrap();
    let outcome =
        run(&Request::new(&scratch.0, "flat").args(["--json", "/in/x.bin"]), &hostile_limits());
    assert_eq!(outcome.exit_code, Some(1), "{outcome:?}");
    let doc = outcome.report_json.expect("one document");
    let files: Vec<&str> =
        doc["files"].as_array().unwrap().iter().map(|f| f["file"].as_str().unwrap()).collect();
    assert_eq!(files, ["/in/x.bin", "/in/flat"]);
    assert_eq!(doc["valid"], false);
    let outcome =
        run(&Request::new(&scratch.0, "flat").args(["--sarif", "/in/flat"]), &Limits::default());
    assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
}
