//! The `tensorizer-validate` command line, parsed by hand (no clap: it
//! would double the module). [`run`] does everything but touch the
//! process, so it is tested natively and the WASI `main` stays three lines.

use std::fmt::Write as _;
use std::io::{Read, Write};

use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};
use tensorizer_core::layout::ParseLimits;
use tensorizer_core::{KeySource, layout::KEY_LEN};

use crate::error::{EXIT_INVALID, EXIT_OK, ErrorKind, ValidateError, one_line};
use crate::report::{ErrorReport, REPORT_VERSION, Report, Status};
use crate::source::{FileSource, RandomAccess};
use crate::validate::{PIECE_LEN, exit_code, first_failure, inspect_for, verify_all};

/// The program name used in messages.
pub const PROGRAM: &str = "tensorizer-validate";

/// Usage text for `--help`.
pub const USAGE: &str = "\
tensorizer-validate: check a tensorizer (.tensors) file

Usage:
  tensorizer-validate validate [--verify] [--key-file PATH | --passphrase-env VAR] [--json] PATH
  tensorizer-validate --help | --version

Reads the file header and metadata index (two small reads) and reports the
version, flags, encryption, tensor count, totals by dtype and every tensor.

Options:
  --verify              also stream every tensor's data through decryption and
                        its stored CRC32/SHA-256 hashes (8 MiB at a time)
  --key-file PATH       file holding the 32-byte key, raw or as 64 hex digits
  --passphrase-env VAR  read the passphrase from environment variable VAR
  --json                print the report as one line of JSON

Exit codes:
  0  success
  1  verification failed: a hash did not match, or decryption failed
  2  usage error (bad arguments, or --verify on an encrypted file without a key)
  3  the input is not a valid tensorizer file, or reading it failed
";

/// Where the key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeyArg {
    /// No key.
    #[default]
    None,
    /// `--key-file PATH`.
    KeyFile(String),
    /// `--passphrase-env VAR`.
    PassphraseEnv(String),
}

/// Arguments of `validate`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValidateArgs {
    /// `--verify`.
    pub verify: bool,
    /// The key option.
    pub key: KeyArg,
    /// `--json`.
    pub json: bool,
    /// The file.
    pub path: String,
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `validate ...`.
    Validate(ValidateArgs),
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// Parses `args` (without the program name).
pub fn parse_args(args: &[String]) -> Result<Command, ValidateError> {
    let usage = |m: String| ValidateError::usage(format!("{m} (see --help)"));
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("validate") => {}
        Some("-h" | "--help" | "help") => return Ok(Command::Help),
        Some("-V" | "--version") => return Ok(Command::Version),
        Some(other) => return Err(usage(format!("unknown command {other:?}: the command is `validate`"))),
        None => return Err(usage("no command given".into())),
    }
    let mut out = ValidateArgs::default();
    let mut path = None;
    let mut options_done = false;
    while let Some(arg) = it.next() {
        if options_done || !arg.starts_with("--") || arg == "-" {
            if path.replace(arg.clone()).is_some() {
                return Err(usage("more than one PATH given".into()));
            }
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = |name: &str| {
            inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match name {
            "--" => options_done = true,
            "--verify" if inline.is_none() => out.verify = true,
            "--json" if inline.is_none() => out.json = true,
            "--help" => return Ok(Command::Help),
            "--key-file" | "--passphrase-env" => {
                if out.key != KeyArg::None {
                    return Err(usage("give at most one of --key-file and --passphrase-env".into()));
                }
                let v = value(name)?;
                out.key = if name == "--key-file" { KeyArg::KeyFile(v) } else { KeyArg::PassphraseEnv(v) };
            }
            _ => return Err(usage(format!("unknown option {:?}", one_line(arg)))),
        }
    }
    out.path = path.ok_or_else(|| usage("no PATH given".into()))?;
    Ok(Command::Validate(out))
}

/// Longest key file read (a key is 32 bytes, or 64 hex digits plus
/// whitespace).
const MAX_KEY_FILE: u64 = 4096;

/// Parses key-file contents: exactly 32 raw bytes, or 64 hex digits
/// (surrounding whitespace ignored).
pub fn parse_key(raw: &[u8]) -> Option<Key> {
    let text = std::str::from_utf8(raw).map(str::trim).unwrap_or("");
    if text.len() == 2 * KEY_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        let digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        let mut key = [0u8; KEY_LEN];
        for (k, pair) in key.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
            *k = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        return Some(Key::from_bytes(key));
    }
    Key::from_slice(raw).ok()
}

fn key_source(arg: &KeyArg, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<KeySource>, ValidateError> {
    match arg {
        KeyArg::None => Ok(None),
        KeyArg::KeyFile(path) => {
            let fail = |m: String| ValidateError::usage(format!("{}: cannot read key file: {m}", one_line(path)));
            let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
            let mut raw = Vec::new();
            file.take(MAX_KEY_FILE + 1).read_to_end(&mut raw).map_err(|e| fail(e.to_string()))?;
            let key =
                parse_key(&raw).ok_or_else(|| fail("a key file must hold exactly 32 bytes or 64 hex digits".into()))?;
            Ok(Some(KeySource::Key(key)))
        }
        KeyArg::PassphraseEnv(var) => {
            let value = env(var)
                .ok_or_else(|| ValidateError::usage(format!("environment variable {} is not set", one_line(var))))?;
            if value.is_empty() {
                return Err(ValidateError::usage(format!("environment variable {} is empty", one_line(var))));
            }
            Ok(Some(KeySource::Passphrase(Passphrase::new(value.into_bytes()), KdfLimits::default())))
        }
    }
}

/// Runs the command line `args` (without the program name), writing the
/// report to `out` and a one-line error to `err`; returns the exit status.
/// `env` looks up environment variables (for `--passphrase-env`).
pub fn run(args: &[String], env: &dyn Fn(&str) -> Option<String>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let command = match parse_args(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(err, "{PROGRAM}: {e}");
            return e.exit_code();
        }
    };
    let args = match command {
        Command::Help => {
            let _ = out.write_all(USAGE.as_bytes());
            return EXIT_OK;
        }
        Command::Version => {
            let _ = writeln!(out, "{PROGRAM} {} (report version {REPORT_VERSION})", env!("CARGO_PKG_VERSION"));
            return EXIT_OK;
        }
        Command::Validate(a) => a,
    };
    let shown = one_line(&args.path);
    let fail = |e: ValidateError, out: &mut dyn Write, err: &mut dyn Write| {
        let _ = writeln!(err, "{PROGRAM}: {shown}: {e}");
        if args.json {
            let doc = ErrorReport::new(&args.path, &e);
            let _ = writeln!(out, "{}", serde_json::to_string(&doc).unwrap_or_default());
        }
        e.exit_code()
    };
    let key = match key_source(&args.key, env) {
        Ok(k) => k,
        Err(e) => return fail(e, out, err),
    };
    let mut src = match FileSource::open(&args.path) {
        Ok(s) => s,
        Err(e) => {
            let e =
                ValidateError { kind: ErrorKind::Io, offset: None, message: one_line(&format!("cannot open: {e}")) };
            return fail(e, out, err);
        }
    };
    match validate(&mut src, &args.path, args.verify, key) {
        Ok(report) => {
            let code = exit_code(&report);
            if let Some(e) = first_failure(&report) {
                let failed = report.verification.as_ref().map_or(0, |s| s.failed);
                let _ =
                    writeln!(err, "{PROGRAM}: {shown}: {failed} of {} tensors failed; first: {e}", report.tensor_count);
            }
            let text =
                if args.json { serde_json::to_string(&report).unwrap_or_default() } else { text_report(&report) };
            // A report cut short (stdout closed, a host's output limit) must
            // not pass for a complete one: exit 3, never 0.
            if let Err(e) = write_report(out, &text) {
                let _ = writeln!(err, "{PROGRAM}: {shown}: cannot write the report: {}", one_line(&e.to_string()));
                return EXIT_INVALID;
            }
            code
        }
        Err(e) => fail(e, out, err),
    }
}

/// Bytes of the report written at a time: hosts may refuse one very large
/// write (wasmtime refuses a buffer over 128 MiB with ENOMEM).
const REPORT_PIECE: usize = 1 << 20;

/// Writes `text` and a newline in pieces of 1 MiB, then flushes;
/// an error means the report did not reach `out` whole.
pub fn write_report(out: &mut dyn Write, text: &str) -> std::io::Result<()> {
    for piece in text.as_bytes().chunks(REPORT_PIECE) {
        out.write_all(piece)?;
    }
    out.write_all(b"\n")?;
    out.flush()
}

/// Inspects (and with `verify`, verifies) `src`; the report's file name is
/// `name`. Errors that stop the run are returned; per-tensor failures are
/// in the report (see [`exit_code`]).
pub fn validate<R: RandomAccess + ?Sized>(
    src: &mut R,
    name: &str,
    verify: bool,
    key: Option<KeySource>,
) -> Result<Report, ValidateError> {
    let inspection = inspect_for(src, &ParseLimits::default(), verify)?;
    let mut report = inspection.report(name);
    if verify {
        verify_all(src, &inspection, key, PIECE_LEN, &mut report)?;
    } else if key.is_some() && !inspection.header.has_crypt_info() {
        return Err(ValidateError::invalid(None, "a key was given but the file is not encrypted"));
    }
    Ok(report)
}

/// The human-readable form of a report.
pub fn text_report(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", one_line(&r.file));
    let _ = writeln!(
        s,
        "  data version {}{}{}, {} tensors, {} data bytes, {}-byte index, {}-byte file",
        r.data_version,
        if r.encrypted { ", encrypted" } else { "" },
        if r.versioned_headers { ", long dimensions" } else { "" },
        r.tensor_count,
        r.data_bytes,
        r.metadata_index_bytes,
        r.file_bytes
    );
    for (dtype, t) in &r.by_dtype {
        let _ = writeln!(s, "  {dtype:<18} {:>6} tensors {:>14} bytes", t.tensors, t.bytes);
    }
    for t in &r.tensor_rows {
        let status = match t.verification.as_ref().map(|v| v.status) {
            None => "",
            Some(Status::Verified) => "  verified",
            Some(Status::Unverified) => "  UNVERIFIED (no hashes)",
            Some(Status::Failed) => "  FAILED",
        };
        let meta = if t.meta { " meta" } else { "" };
        let _ = writeln!(
            s,
            "  {:>5}  {}  {} {:?}  {} bytes{meta}  header@{} data@{}{status}",
            t.index,
            one_line(&t.name),
            t.dtype,
            t.shape,
            t.bytes,
            t.header_offset,
            t.data_offset
        );
    }
    if let Some(v) = &r.verification {
        let _ = write!(
            s,
            "  verify: {} verified, {} unverified, {} failed ({} data bytes checked)",
            v.verified, v.unverified, v.failed, v.data_bytes_checked
        );
    }
    s.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn parses_the_contract() {
        let c = parse_args(&args(&["validate", "--verify", "--key-file=/k", "--json", "/in/f"])).unwrap();
        let want = ValidateArgs { verify: true, key: KeyArg::KeyFile("/k".into()), json: true, path: "/in/f".into() };
        assert_eq!(c, Command::Validate(want));
        let c = parse_args(&args(&["validate", "--passphrase-env", "P", "--", "--odd"])).unwrap();
        assert!(matches!(c, Command::Validate(ValidateArgs { path, key: KeyArg::PassphraseEnv(v), .. })
            if path == "--odd" && v == "P"));
        for bad in [
            &["validate"][..],
            &["validate", "--bogus", "f"],
            &["validate", "a", "b"],
            &["validate", "--key-file"],
            &["validate", "--key-file", "k", "--passphrase-env", "P", "f"],
            &["check", "f"],
            &[],
        ] {
            assert_eq!(parse_args(&args(bad)).unwrap_err().exit_code(), 2, "{bad:?}");
        }
        assert_eq!(parse_args(&args(&["--help"])).unwrap(), Command::Help);
    }

    #[test]
    fn key_files_are_raw_or_hex() {
        let hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
        let want: [u8; 32] = core::array::from_fn(|i| i as u8);
        assert_eq!(parse_key(hex.as_bytes()).unwrap().expose_secret(), &want);
        assert_eq!(parse_key(&want).unwrap().expose_secret(), &want);
        assert!(parse_key(b"short").is_none());
    }

    /// Output that takes `room` bytes, then fails (a closed pipe, a full
    /// disk, a host's output limit).
    struct Cramped {
        room: usize,
    }

    impl Write for Cramped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout is closed"));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_report_that_cannot_be_written_whole_is_a_failure() {
        let path = format!("{}/../tests/vectors/v4_meta.tensors", env!("CARGO_MANIFEST_DIR"));
        for json in [true, false] {
            for room in [0, 10] {
                let mut err = Vec::new();
                let argv = if json { args(&["validate", "--json", &path]) } else { args(&["validate", &path]) };
                let code = run(&argv, &|_| None, &mut Cramped { room }, &mut err);
                let err = String::from_utf8_lossy(&err);
                assert_eq!(code, 3, "json {json}, room {room}: {err}");
                assert!(err.contains("cannot write the report"), "{err}");
            }
        }
    }

    #[test]
    fn runs_natively_on_a_vector() {
        let path = format!("{}/../tests/vectors/v4_meta.tensors", env!("CARGO_MANIFEST_DIR"));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&args(&["validate", "--verify", "--json", &path]), &|_| None, &mut out, &mut err);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["tensor_count"], 5);
        assert_eq!(v["verification"]["ok"], true);
    }
}
