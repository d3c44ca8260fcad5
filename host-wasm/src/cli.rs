//! The `tensorizer-validate` command line, parsed by hand (no clap: it
//! would double the module). [`run`] does everything but touch the
//! process, so it is tested natively and the WASI `main` stays three lines.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::Path;

use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};
use tensorizer_core::layout::ParseLimits;
use tensorizer_core::{KeySource, layout::KEY_LEN};

use tensorizer_core::scan::{Finding, Format, ScanOptions, sarif, suppress};
use tensorizer_core::walk::Suppressions;

use crate::error::{EXIT_CANNOT_SCAN, EXIT_OK, ErrorKind, ValidateError, one_line};
use crate::report::{ErrorReport, REPORT_VERSION, Report, Status};
use crate::source::{FileSource, RandomAccess};
use crate::validate::{Inspection, PIECE_LEN, exit_code, verify_all};

/// The program name used in messages.
pub const PROGRAM: &str = "tensorizer-validate";

/// Usage text for `--help`.
pub const USAGE: &str = "\
tensorizer-validate: scan a model file (tensorizer, safetensors, torch.save zip,
legacy torch or bare pickle) and report every finding

Usage:
  tensorizer-validate [--verify] [--json | --sarif] [--key-file PATH | --passphrase-env VAR]
                      [--ignore FILE] PATH...
  tensorizer-validate validate ...   (the same; `validate` is kept as an alias)
  tensorizer-validate --help | --version

Each PATH is a file or a directory (walked recursively; its files whose
bytes are no known format are left out). A sharded checkpoint's index
(*.index.json) is scanned with the shards it names as one model. With
more than one file, --json prints {files: [...], valid: ...}, --sarif one
run for all, and the exit status is the worst of any file.

The format is told from the bytes, never the name. Pickles (inside a
torch.save archive or bare) are walked without executing anything: every
global not on the state-dict allow-list and every call of one is a finding.
Structural anomalies of every format are findings, each with a stable rule
id, a severity, a byte offset and a remediation (spec/22-scanner.md).

Options:
  --verify              also stream every tensor of a tensorizer file through
                        decryption and its stored CRC32/SHA-256 hashes
  --key-file PATH       file holding the 32-byte key, raw or as 64 hex digits
  --passphrase-env VAR  read the passphrase from environment variable VAR
                        (a key is ignored for a file that is not encrypted)
  --json                print the report as one line of JSON
  --sarif               print the findings as one line of SARIF 2.1.0
  --ignore FILE         the suppression file (default: .tzrscan.toml in the
                        current directory, when there is one): findings it
                        accepts are still listed, marked, and fail nothing

Exit codes:
  0  the file was scanned: no findings (or only suppressed ones)
  1  the file was scanned: findings (hash or authentication failures included)
  2  the file could not be scanned (usage error, unreadable input or key,
     --verify on an encrypted file without a key, output that cannot be written)
";

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// Human-readable text.
    #[default]
    Text,
    /// `--json`.
    Json,
    /// `--sarif`.
    Sarif,
}

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
    /// `--json` or `--sarif`.
    pub output: Output,
    /// The files and directories, in the order given.
    pub paths: Vec<String>,
    /// `--ignore FILE`: the suppression file (else `.tzrscan.toml` in the
    /// current directory, when there is one).
    pub ignore: Option<String>,
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A scan (with or without the `validate` alias word).
    Validate(ValidateArgs),
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// Parses `args` (without the program name).
pub fn parse_args(args: &[String]) -> Result<Command, ValidateError> {
    let usage = |m: String| ValidateError::usage(format!("{m} (see --help)"));
    let mut it = args.iter().peekable();
    match it.peek().map(|a| a.as_str()) {
        Some("validate") => {
            it.next();
        }
        Some("-h" | "--help") => return Ok(Command::Help),
        Some("-V" | "--version") => return Ok(Command::Version),
        Some(_) => {}
        None => return Err(usage("no FILE given".into())),
    }
    let mut out = ValidateArgs::default();
    let mut paths = Vec::new();
    let mut options_done = false;
    while let Some(arg) = it.next() {
        if options_done || !arg.starts_with("--") || arg == "-" {
            paths.push(arg.clone());
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match name {
            "--" => options_done = true,
            "--verify" if inline.is_none() => out.verify = true,
            "--json" | "--sarif" if inline.is_none() => {
                let want = if name == "--json" { Output::Json } else { Output::Sarif };
                if out.output != Output::Text && out.output != want {
                    return Err(usage("give at most one of --json and --sarif".into()));
                }
                out.output = want;
            }
            "--help" => return Ok(Command::Help),
            "--ignore" => out.ignore = Some(value(name)?),
            "--key-file" | "--passphrase-env" => {
                if out.key != KeyArg::None {
                    return Err(usage(
                        "give at most one of --key-file and --passphrase-env".into(),
                    ));
                }
                let v = value(name)?;
                out.key = if name == "--key-file" {
                    KeyArg::KeyFile(v)
                } else {
                    KeyArg::PassphraseEnv(v)
                };
            }
            _ => return Err(usage(format!("unknown option {:?}", one_line(arg)))),
        }
    }
    if paths.is_empty() {
        return Err(usage("no FILE given".into()));
    }
    out.paths = paths;
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

fn key_source(
    arg: &KeyArg,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<KeySource>, ValidateError> {
    match arg {
        KeyArg::None => Ok(None),
        KeyArg::KeyFile(path) => {
            let fail = |m: String| {
                ValidateError::usage(format!("{}: cannot read key file: {m}", one_line(path)))
            };
            let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
            let mut raw = Vec::new();
            file.take(MAX_KEY_FILE + 1).read_to_end(&mut raw).map_err(|e| fail(e.to_string()))?;
            let key = parse_key(&raw).ok_or_else(|| {
                fail("a key file must hold exactly 32 bytes or 64 hex digits".into())
            })?;
            Ok(Some(KeySource::Key(key)))
        }
        KeyArg::PassphraseEnv(var) => {
            let value = env(var).ok_or_else(|| {
                ValidateError::usage(format!("environment variable {} is not set", one_line(var)))
            })?;
            if value.is_empty() {
                return Err(ValidateError::usage(format!(
                    "environment variable {} is empty",
                    one_line(var)
                )));
            }
            Ok(Some(KeySource::Passphrase(
                Passphrase::new(value.into_bytes()),
                KdfLimits::default(),
            )))
        }
    }
}

/// Runs the command line `args` (without the program name), writing the
/// report to `out` and a one-line error to `err`; returns the exit status
/// (0 no findings, 1 findings, 2 could not scan). `env` looks up
/// environment variables (for `--passphrase-env`).
pub fn run(
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
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
            let _ = writeln!(
                out,
                "{PROGRAM} {} (report version {REPORT_VERSION})",
                env!("CARGO_PKG_VERSION")
            );
            return EXIT_OK;
        }
        Command::Validate(a) => a,
    };
    let suppressions = match Suppressions::load(args.ignore.as_deref().map(Path::new)) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "{PROGRAM}: suppression file {}", one_line(&e));
            return EXIT_CANNOT_SCAN;
        }
    };
    let paths: Vec<std::path::PathBuf> = args.paths.iter().map(Into::into).collect();
    let mut files = match scan_all(&args, &paths, env) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(err, "{PROGRAM}: cannot list the files: {}", one_line(&e.to_string()));
            return EXIT_CANNOT_SCAN;
        }
    };
    let notes = suppressions.as_ref().map(|s| (s, suppress_all(s, &mut files)));
    let many = paths.len() != 1 || files.len() != 1 || Path::new(&files[0].0) != paths[0];
    if many {
        return print_many(args.output, &files, &notes, out, err);
    }
    let (name, result) = &files[0];
    print_one(args.output, name, result, &notes, out, err)
}

/// The suppression file in use and its notes (its unused entries).
type Notes<'a> = Option<(&'a Suppressions, Vec<Finding>)>;

/// Marks what the suppression entries cover in every report; returns the
/// notes for the entries that covered nothing. A note fails nothing: the
/// validator has no threshold, and `tzr scan`'s default fails on errors.
fn suppress_all(suppressions: &Suppressions, files: &mut [Outcome]) -> Vec<Finding> {
    let mut used = vec![0; suppressions.entries.len()];
    for report in files.iter_mut().filter_map(|(_, r)| r.as_mut().ok()) {
        report.suppress(&suppressions.entries, &mut used);
    }
    suppress::unused(&suppressions.entries, &used)
}

/// `doc` with the suppression file's notes added (`suppressions`, as
/// `tzr scan --json` adds them), as one line.
fn with_notes(mut doc: serde_json::Value, notes: &Notes<'_>) -> String {
    if let Some((file, notes)) = notes {
        doc["suppressions"] = file.notes_json(notes);
    }
    doc.to_string()
}

/// The SARIF log with the suppression file's notes as tool configuration
/// notifications.
fn sarif_with_notes(mut log: serde_json::Value, notes: &Notes<'_>) -> String {
    if let Some((file, notes)) = notes {
        sarif::add_config_notes(&mut log, &sarif::artifact_uri(&file.path), notes);
    }
    log.to_string()
}

/// The text form's block for the suppression file's notes, if any.
fn notes_text(notes: &Notes<'_>) -> String {
    let Some((file, notes)) = notes.as_ref().filter(|(_, n)| !n.is_empty()) else {
        return String::new();
    };
    let mut s = one_line(&file.path);
    for n in notes {
        let _ = write!(s, "\n  {} {}: {}", n.rule, n.severity, one_line(&n.message));
    }
    s + "\n"
}

/// One file's outcome: its report, or why it could not be scanned.
type Outcome = (String, Result<Report, ValidateError>);

/// Scans every file `paths` name with the core's walk
/// (`walk::scan_paths`, as `tzr scan` does): directories recursively,
/// files found there of no known format left out, a shard index with the
/// shards it names as one model (opened through the preopened
/// directories), each file once.
fn scan_all(
    args: &ValidateArgs,
    paths: &[std::path::PathBuf],
    env: &dyn Fn(&str) -> Option<String>,
) -> std::io::Result<Vec<Outcome>> {
    let mut reports = std::collections::BTreeMap::new();
    let scanned = tensorizer_core::walk::scan_paths(paths, false, |name| {
        let result = key_source(&args.key, env).and_then(|key| scan_file(name, args.verify, key));
        let (outcome, report) = match result {
            Ok((scan, report)) => (Ok(scan), Ok(report)),
            Err(e) => (Err(e.message.clone()), Err(e)),
        };
        reports.insert(name.to_string(), report);
        outcome
    })?;
    Ok(scanned.into_iter().map(|f| outcome(f, &mut reports)).collect())
}

/// The report of one file of [`scan_all`], with what the walk added: a
/// shard index's findings about its shards, `model` and `shards`.
fn outcome(
    file: tensorizer_core::walk::Scanned,
    reports: &mut std::collections::BTreeMap<String, Result<Report, ValidateError>>,
) -> Outcome {
    let result = reports.remove(&file.name).unwrap_or_else(|| {
        Err(ValidateError {
            kind: ErrorKind::Io,
            offset: None,
            message: "not scanned".into(),
            rule: None,
        })
    });
    let result = result.map(|mut report| {
        if let Some(scan) = file.outcome.as_ref().ok().filter(|s| s.format == Format::ShardIndex) {
            report = Report::from_scan(scan, &file.name);
            report.shards = Some(file.shards);
        }
        report.model = file.model;
        report
    });
    (file.name, result)
}

/// Prints one document for `files`; returns the worst exit status.
fn print_many(
    output: Output,
    files: &[Outcome],
    notes: &Notes<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let mut worst = EXIT_OK;
    for (name, result) in files {
        let code = match result {
            Ok(report) => {
                first_finding_line(err, name, report);
                exit_code(report)
            }
            Err(e) => {
                let _ = writeln!(err, "{PROGRAM}: {}: {e}", one_line(name));
                e.exit_code()
            }
        };
        worst = worst.max(code);
    }
    let text = match output {
        Output::Text => files
            .iter()
            .map(|(name, r)| match r {
                Ok(report) => text_report(report) + "\n",
                Err(e) => format!("{}\n  could not scan: {e}\n", one_line(name)),
            })
            .chain([notes_text(notes)])
            .collect::<String>(),
        Output::Json => {
            let docs: Vec<serde_json::Value> = files
                .iter()
                .map(|(name, r)| match r {
                    Ok(report) => serde_json::to_value(report).unwrap_or_default(),
                    Err(e) => serde_json::to_value(ErrorReport::new(name, e)).unwrap_or_default(),
                })
                .collect();
            with_notes(serde_json::json!({"files": docs, "valid": worst == EXIT_OK}), notes)
        }
        Output::Sarif => {
            let owned: Vec<(String, Result<Vec<Finding>, String>)> = files
                .iter()
                .map(|(name, r)| {
                    let found = r.as_ref().map(report_findings).map_err(|e| e.message.clone());
                    (sarif::artifact_uri(name), found)
                })
                .collect();
            let refs: Vec<(&str, Result<&[Finding], &str>)> = owned
                .iter()
                .map(|(u, r)| (u.as_str(), r.as_ref().map(Vec::as_slice).map_err(String::as_str)))
                .collect();
            sarif_with_notes(sarif::to_sarif_many(&tool(), &refs), notes)
        }
    };
    if let Err(e) = write_report(out, text.trim_end_matches('\n')) {
        let _ = writeln!(err, "{PROGRAM}: cannot write the report: {}", one_line(&e.to_string()));
        return EXIT_CANNOT_SCAN;
    }
    worst
}

/// The one-line summary on `err` of a report with findings that are not
/// suppressed.
fn first_finding_line(err: &mut dyn Write, name: &str, report: &Report) {
    if let Some(first) = report.findings.iter().find(|f| f.suppressed.is_none()) {
        let n = report.findings.len();
        let _ = writeln!(
            err,
            "{PROGRAM}: {}: {n} finding{}; first: {} {}",
            one_line(name),
            if n == 1 { "" } else { "s" },
            first.rule,
            first.message
        );
    }
}

/// Opens and scans one file (verifying with `verify`): the scan (for the
/// walk's shard checks) and the report.
fn scan_file(
    path: &str,
    verify: bool,
    key: Option<KeySource>,
) -> Result<(tensorizer_core::Scan, Report), ValidateError> {
    let mut src = FileSource::open(path).map_err(|e| ValidateError {
        kind: ErrorKind::Io,
        offset: None,
        message: one_line(&format!("cannot open: {e}")),
        rule: None,
    })?;
    validate_scan(&mut src, path, verify, key)
}

/// Prints one file's own document (the layout of a single FILE); returns
/// its exit status.
fn print_one(
    output: Output,
    path: &str,
    result: &Result<Report, ValidateError>,
    notes: &Notes<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let shown = one_line(path);
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "{PROGRAM}: {shown}: {e}");
            let doc = match output {
                Output::Text => None,
                Output::Json => {
                    Some(serde_json::to_string(&ErrorReport::new(path, e)).unwrap_or_default())
                }
                Output::Sarif => Some(
                    sarif::to_sarif_failure(&tool(), &sarif::artifact_uri(path), &e.message)
                        .to_string(),
                ),
            };
            if let Some(doc) = doc {
                let _ = writeln!(out, "{doc}");
            }
            return EXIT_CANNOT_SCAN;
        }
    };
    first_finding_line(err, path, report);
    let text = match output {
        Output::Json => with_notes(serde_json::to_value(report).unwrap_or_default(), notes),
        Output::Sarif => sarif_with_notes(sarif_log(report, path), notes),
        Output::Text => (text_report(report) + "\n" + &notes_text(notes)).trim_end().to_string(),
    };
    // A report cut short (stdout closed, a host's output limit) must not
    // pass for a complete one: exit 2, never 0.
    if let Err(e) = write_report(out, &text) {
        let _ = writeln!(
            err,
            "{PROGRAM}: {shown}: cannot write the report: {}",
            one_line(&e.to_string())
        );
        return EXIT_CANNOT_SCAN;
    }
    exit_code(report)
}

/// This program as SARIF's `tool.driver`.
pub fn tool() -> sarif::Tool<'static> {
    sarif::Tool { name: PROGRAM, version: env!("CARGO_PKG_VERSION"), information_uri: None }
}

/// The SARIF log of a report: its findings, verification failures included.
pub fn sarif_log(report: &Report, path: &str) -> serde_json::Value {
    sarif::to_sarif(&tool(), &sarif::artifact_uri(path), &report_findings(report))
}

/// A report's findings as the core's (for SARIF).
fn report_findings(report: &Report) -> Vec<Finding> {
    report.findings.iter().map(crate::report::FindingItem::to_finding).collect()
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

/// Scans (and with `verify`, verifies) `src`; the report's file name is
/// `name`. Errors mean the file could not be scanned (exit 2); problems of
/// the file are the report's findings (see [`exit_code`]).
pub fn validate<R: RandomAccess + ?Sized>(
    src: &mut R,
    name: &str,
    verify: bool,
    key: Option<KeySource>,
) -> Result<Report, ValidateError> {
    validate_scan(src, name, verify, key).map(|(_, report)| report)
}

/// [`validate`], also giving the core's scan (with the tensorizer index
/// it parsed).
fn validate_scan<R: RandomAccess + ?Sized>(
    src: &mut R,
    name: &str,
    verify: bool,
    key: Option<KeySource>,
) -> Result<(tensorizer_core::Scan, Report), ValidateError> {
    let options = ScanOptions { name: Some(name), limits: ParseLimits::default(), verify };
    let mut scan = tensorizer_core::scan(src, &options)?;
    // A key for a file that is not encrypted is not needed: it is ignored
    // (a flipped flag bit must give findings, not a usage error).
    let encrypted = scan.tensorizer.as_ref().is_some_and(|i| i.header.has_crypt_info());
    let key = key.filter(|_| encrypted);
    let Some(index) = scan.tensorizer.take() else {
        let report = Report::from_scan(&scan, name);
        return Ok((scan, report));
    };
    let inspection = Inspection::from_index(index, scan.file_len);
    let mut report = inspection.report(name).with_findings(&scan.findings);
    if verify {
        verify_all(src, &inspection, key, PIECE_LEN, &mut report)?;
    }
    scan.tensorizer = Some(inspection.into_index());
    Ok((scan, report))
}

/// The human-readable form of a report.
pub fn text_report(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", one_line(&r.file));
    match (r.data_version, r.metadata_index_bytes) {
        (Some(version), Some(index)) => {
            let _ = writeln!(
                s,
                "  tensorizer data version {version}{}{}, {} tensors, {} data bytes, {index}-byte index, {}-byte file",
                if r.encrypted == Some(true) { ", encrypted" } else { "" },
                if r.versioned_headers == Some(true) { ", long dimensions" } else { "" },
                r.tensor_count,
                r.data_bytes,
                r.file_bytes
            );
        }
        _ => {
            let _ = writeln!(
                s,
                "  {}, {} tensors, {}-byte file",
                r.format, r.tensor_count, r.file_bytes
            );
        }
    }
    if let Some(index) = &r.model {
        let _ = writeln!(s, "  a shard of {}", one_line(index));
    }
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
        let _ = writeln!(
            s,
            "  verify: {} verified, {} unverified, {} failed ({} data bytes checked)",
            v.verified, v.unverified, v.failed, v.data_bytes_checked
        );
    }
    if r.findings.is_empty() {
        let _ = writeln!(s, "  no findings");
    }
    for f in &r.findings {
        let at = f.offset.map_or_else(String::new, |o| format!(" at byte {o}"));
        let accepted = f
            .suppressed
            .as_ref()
            .map_or_else(String::new, |why| format!(" (suppressed: {})", one_line(why)));
        let _ = writeln!(s, "  {} {}{at}{accepted}: {}", f.rule, f.severity, f.message);
        let _ = writeln!(s, "      fix: {}", f.remediation);
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
        let want = ValidateArgs {
            verify: true,
            key: KeyArg::KeyFile("/k".into()),
            output: Output::Json,
            paths: vec!["/in/f".into()],
            ignore: None,
        };
        let c = parse_args(&args(&["--verify", "--key-file=/k", "--json", "/in/f"])).unwrap();
        assert_eq!(c, Command::Validate(want.clone()));
        // `validate` stays an alias.
        let c = parse_args(&args(&["validate", "--verify", "--key-file=/k", "--json", "/in/f"]))
            .unwrap();
        assert_eq!(c, Command::Validate(want));
        let c = parse_args(&args(&["--sarif", "f"])).unwrap();
        assert!(matches!(c, Command::Validate(ValidateArgs { output: Output::Sarif, .. })));
        let c = parse_args(&args(&["--ignore", "/in/x.toml", "f"])).unwrap();
        assert!(
            matches!(c, Command::Validate(ValidateArgs { ignore: Some(i), .. }) if i == "/in/x.toml")
        );
        let c = parse_args(&args(&["validate", "--passphrase-env", "P", "--", "--odd"])).unwrap();
        assert!(
            matches!(c, Command::Validate(ValidateArgs { paths, key: KeyArg::PassphraseEnv(v), .. })
            if paths == ["--odd"] && v == "P")
        );
        for bad in [
            &["validate"][..],
            &["--bogus", "f"],
            &["--key-file"],
            &["--key-file", "k", "--passphrase-env", "P", "f"],
            &["--json", "--sarif", "f"],
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
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "stdout is closed",
                ));
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
                let argv = if json { args(&["--json", &path]) } else { args(&[&path]) };
                let code = run(&argv, &|_| None, &mut Cramped { room }, &mut err);
                let err = String::from_utf8_lossy(&err);
                assert_eq!(code, 2, "json {json}, room {room}: {err}");
                assert!(err.contains("cannot write the report"), "{err}");
            }
        }
    }

    fn json_of(path: &str) -> (u8, serde_json::Value) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&args(&["--json", path]), &|_| None, &mut out, &mut err);
        (code, serde_json::from_slice(&out).unwrap())
    }

    #[test]
    fn torch_checkpoints_report_tensor_rows_and_totals() {
        let dir = format!("{}/../tests/vectors/torch", env!("CARGO_MANIFEST_DIR"));
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(format!("{dir}/manifest.json")).unwrap())
                .unwrap();
        for vector in manifest["vectors"].as_array().unwrap() {
            let path = format!("{dir}/{}", vector["file"].as_str().unwrap());
            let (code, v) = json_of(&path);
            assert_eq!(code, 0, "{path}: {v}");
            let want: Vec<_> = vector["entries"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["kind"] == "tensor")
                .collect();
            let rows = v["tensor_rows"].as_array().unwrap();
            assert_eq!(rows.len(), want.len(), "{path}");
            let bytes = std::fs::read(&path).unwrap();
            let checkpoint = tensorizer_core::checkpoint::Checkpoint::parse(&bytes).unwrap();
            let mut data_bytes = 0;
            let tensors =
                checkpoint.entries().iter().enumerate().filter(|(_, e)| {
                    matches!(e.value, tensorizer_core::checkpoint::Leaf::Tensor(_))
                });
            for ((i, _), (row, want)) in tensors.zip(rows.iter().zip(&want)) {
                assert_eq!(row["path"], want["path"], "{path}");
                assert_eq!((&row["dtype"], &row["shape"]), (&want["dtype"], &want["shape"]));
                // The row's data offset is where the checkpoint reader finds
                // the tensor's first byte.
                let (view, data) = checkpoint.tensor_bytes(i).unwrap();
                let at = row["data_offset"].as_u64().unwrap() as usize;
                let n = row["data_length"].as_u64().unwrap() as usize;
                assert_eq!(&bytes[at..at + n.min(data.len())], &data[..n.min(data.len())]);
                assert_eq!(
                    row["bytes"].as_u64(),
                    view.numel().map(|e| e * u64::from(view.dtype.size()))
                );
                data_bytes += n as u64;
            }
            let by_dtype = v["by_dtype"].as_object().unwrap();
            let counted: u64 = by_dtype.values().map(|t| t["tensors"].as_u64().unwrap()).sum();
            assert_eq!(counted, want.len() as u64, "{path}");
            assert_eq!(v["data_bytes"], data_bytes, "{path}");
        }
        // A checkpoint whose pickle calls a function has findings and no rows.
        let (code, v) = json_of(&format!("{dir}/hostile_os_system.pt"));
        assert_eq!(code, 1);
        assert_eq!(v["tensor_rows"], serde_json::json!([]));
    }

    #[test]
    fn safetensors_files_report_tensor_rows_and_totals() {
        let json = r#"{"m.a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"n.b":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}}"#;
        let json = format!("{json:<width$}", width = json.len().next_multiple_of(8));
        let mut st = (json.len() as u64).to_le_bytes().to_vec();
        st.extend_from_slice(json.as_bytes());
        st.extend_from_slice(&[0; 10]);
        let (code, v) = json_of(&scratch("rows.safetensors", &st));
        assert_eq!(code, 0, "{v}");
        let rows = v["tensor_rows"].as_array().unwrap();
        let start = 8 + json.len() as u64;
        let shown: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap(),
                    r["module"].as_str().unwrap(),
                    r["dtype"].as_str().unwrap(),
                    r["dtype_string"].as_str().unwrap(),
                    r["data_offset"].as_u64().unwrap(),
                    r["data_length"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("m.a", "m", "float32", "F32", start, 8),
                ("n.b", "n", "bfloat16", "BF16", start + 8, 2)
            ]
        );
        assert_eq!(v["by_dtype"]["float32"]["tensors"], 1);
        assert_eq!(v["by_dtype"]["bfloat16"]["data_bytes"], 2);
        assert_eq!(v["data_bytes"], 10);
    }

    #[test]
    fn many_paths_and_directories_give_one_document_and_the_worst_status() {
        let dir = format!("{}/../tests/vectors", env!("CARGO_MANIFEST_DIR"));
        let walked = std::env::temp_dir().join(format!("tzr-validate-many-{}", std::process::id()));
        std::fs::create_dir_all(walked.join("sub")).unwrap();
        std::fs::copy(format!("{dir}/torch/hostile_os_system.pt"), walked.join("sub/a.bin"))
            .unwrap();
        std::fs::copy(format!("{dir}/v1_flat.tensors"), walked.join("b.txt")).unwrap();
        std::fs::write(walked.join("README.md"), b"# not a model").unwrap();
        let walked = walked.to_string_lossy().into_owned();
        let flat = format!("{dir}/v1_flat.tensors");
        let run_on = |argv: &[&str]| {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = run(&args(argv), &|_| None, &mut out, &mut err);
            (code, String::from_utf8(out).unwrap())
        };
        // A directory: its model files by content, sorted; the README is left out.
        let (code, out) = run_on(&["--json", &walked]);
        assert_eq!(code, 1);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let names: Vec<_> = v["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["file"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, [format!("{walked}/b.txt"), format!("{walked}/sub/a.bin")]);
        assert_eq!(v["files"][1]["findings"][0]["rule"], "PKL-001");
        assert_eq!(v["valid"], false);
        // A file that cannot be opened makes the worst status 2; JSON still covers it.
        let (code, out) = run_on(&["--json", &flat, "/nonexistent/x.pt"]);
        assert_eq!(code, 2);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (v["files"][0]["valid"].as_bool(), v["files"][1]["format"].is_null()),
            (Some(true), true)
        );
        // Clean files only: 0; SARIF has one run with both artifacts.
        let (code, out) = run_on(&["--sarif", &flat, &format!("{dir}/v4_meta.tensors")]);
        assert_eq!(code, 0);
        let log: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(log["runs"].as_array().unwrap().len(), 1, "{log}");
        let (code, out) = run_on(&[&flat, &walked]);
        assert_eq!(code, 1);
        assert_eq!(out.matches("tensorizer data version").count(), 2, "{out}");
        std::fs::remove_dir_all(&walked).unwrap();
    }

    #[test]
    fn a_shard_index_is_one_model_with_its_shards_each_reported_once() {
        let dir = format!("{}/../tests/vectors", env!("CARGO_MANIFEST_DIR"));
        let model =
            std::env::temp_dir().join(format!("tzr-validate-shards-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&model);
        std::fs::create_dir_all(&model).unwrap();
        std::fs::copy(format!("{dir}/torch/params.pt"), model.join("a.bin")).unwrap();
        std::fs::copy(format!("{dir}/torch/params.pt"), model.join("stale.bin")).unwrap();
        let index = r#"{"weight_map": {"w": "a.bin", "v": "b.bin", "x": "../c.bin"}}"#;
        std::fs::write(model.join("pytorch_model.bin.index.json"), index).unwrap();
        let index = model.join("pytorch_model.bin.index.json").to_string_lossy().into_owned();
        let run_on = |argv: &[&str]| {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = run(&args(argv), &|_| None, &mut out, &mut err);
            (code, serde_json::from_slice::<serde_json::Value>(&out).unwrap())
        };
        let names = |v: &serde_json::Value| -> Vec<String> {
            let files = v["files"].as_array().unwrap();
            files
                .iter()
                .map(|f| f["file"].as_str().unwrap().rsplit('/').next().unwrap().into())
                .collect()
        };
        // Named alone, the index brings its shard; the directory lists each file once.
        for target in [index.clone(), model.to_string_lossy().into_owned()] {
            let (code, v) = run_on(&["--json", &target, &index]);
            assert_eq!(code, 1, "{v}");
            let files = v["files"].as_array().unwrap();
            let at = files.iter().position(|f| f["format"] == "shard-index").unwrap();
            let rules: Vec<&str> = files[at]["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["rule"].as_str().unwrap())
                .collect();
            assert_eq!(rules, ["IDX-003", "IDX-004", "IDX-005", "IDX-006"], "{v}");
            let a = files.iter().find(|f| f["file"].as_str().unwrap().ends_with("/a.bin")).unwrap();
            assert_eq!(
                (&a["model"], a["tensor_rows"].as_array().unwrap().is_empty()),
                (&files[at]["file"], false)
            );
            assert_eq!(files[at]["shards"].as_array().unwrap().len(), 1, "{v}");
            let mut listed = names(&v);
            let count = listed.len();
            listed.sort();
            listed.dedup();
            assert_eq!(listed.len(), count, "each file once: {v}");
        }
        let (_, v) = run_on(&["--json", &index]);
        assert_eq!(names(&v), ["pytorch_model.bin.index.json", "a.bin"]);
        std::fs::remove_dir_all(&model).unwrap();
    }

    #[test]
    fn suppressed_findings_are_marked_fail_nothing_and_unused_entries_are_notes() {
        let dir = format!("{}/../tests/vectors", env!("CARGO_MANIFEST_DIR"));
        let evil = format!("{dir}/torch/hostile_os_system.pt");
        let scratch =
            std::env::temp_dir().join(format!("tzr-validate-ignore-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        let ignore = scratch.join("ignore.toml");
        std::fs::write(
            &ignore,
            "[[ignore]]\nrule = \"PKL-001\"\npath = \"hostile_*.pt\"\nreason = \"a test payload\"\n\
             [[ignore]]\nrule = \"PKL-002\"\npath = \"**/torch/hostile_os_system.pt\"\nreason = \"same\"\n\
             [[ignore]]\nrule = \"ST-007\"\npath = \"*.safetensors\"\nreason = \"stale\"\n",
        )
        .unwrap();
        let ignore = ignore.to_string_lossy().into_owned();
        let run_on = |argv: &[&str]| {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = run(&args(argv), &|_| None, &mut out, &mut err);
            (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
        };
        let (code, out, _) = run_on(&["--json", "--ignore", &ignore, &evil]);
        assert_eq!(code, 0, "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["valid"], true);
        let findings = v["findings"].as_array().unwrap();
        assert!(
            !findings.is_empty() && findings.iter().all(|f| f["suppressed"].is_string()),
            "{v}"
        );
        let notes = v["suppressions"]["notes"].as_array().unwrap();
        assert_eq!((notes.len(), &notes[0]["rule"]), (1, &serde_json::json!("SUP-001")));
        let (code, out, _) = run_on(&["--sarif", "--ignore", &ignore, &evil, &evil]);
        let log: serde_json::Value = serde_json::from_str(&out).unwrap();
        let run0 = &log["runs"][0];
        assert_eq!(code, 0);
        assert_eq!(run0["results"][0]["suppressions"][0]["justification"], "a test payload");
        let config = &run0["invocations"][0]["toolConfigurationNotifications"];
        assert_eq!(config[0]["descriptor"]["id"], "SUP-001", "{log}");
        let (_, out, _) = run_on(&["--ignore", &ignore, &evil]);
        assert!(out.contains("(suppressed: a test payload)") && out.contains("SUP-001"), "{out}");
        // Without the file, the same scan fails; a bad file fails to run.
        assert_eq!(run_on(&[&evil]).0, 1);
        std::fs::write(scratch.join("bad.toml"), "[[ignore]]\nrule = \"PKL-001\"\n").unwrap();
        let bad = scratch.join("bad.toml").to_string_lossy().into_owned();
        let (code, _, err) = run_on(&["--ignore", &bad, &evil]);
        assert_eq!(code, EXIT_CANNOT_SCAN);
        assert!(err.contains("suppression file") && err.contains("required"), "{err}");
        std::fs::remove_dir_all(&scratch).unwrap();
    }

    #[test]
    fn runs_natively_on_a_vector() {
        let path = format!("{}/../tests/vectors/v4_meta.tensors", env!("CARGO_MANIFEST_DIR"));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code =
            run(&args(&["validate", "--verify", "--json", &path]), &|_| None, &mut out, &mut err);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["tensor_count"], 5);
        assert_eq!((v["format"].as_str(), v["valid"].as_bool()), (Some("tensorizer"), Some(true)));
        assert_eq!(v["findings"], serde_json::json!([]));
        assert_eq!(v["verification"]["ok"], true);
    }

    fn scratch(name: &str, bytes: &[u8]) -> String {
        let dir = std::env::temp_dir().join(format!("tzr-validate-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn exit_codes_follow_the_embedding_contract() {
        let run_on = |argv: &[&str]| {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = run(&args(argv), &|_| None, &mut out, &mut err);
            (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
        };
        // A pickle calling os.system, named .safetensors: findings (1).
        let evil = scratch("evil.safetensors", b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.");
        let (code, out, err) = run_on(&["--json", &evil]);
        assert_eq!(code, 1, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!((v["format"].as_str(), v["valid"].as_bool()), (Some("pickle"), Some(false)));
        let rules: Vec<&str> =
            v["findings"].as_array().unwrap().iter().map(|f| f["rule"].as_str().unwrap()).collect();
        assert_eq!(rules, ["FMT-002", "PKL-001", "PKL-002"]);
        assert!(v["findings"][1]["message"].as_str().unwrap().contains("os.system"));
        assert!(err.contains("3 findings; first: FMT-002"), "{err}");
        // The same as SARIF.
        let (code, out, _) = run_on(&["--sarif", &evil]);
        assert_eq!(code, 1);
        let log: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(log["version"], "2.1.0");
        assert_eq!(log["runs"][0]["results"].as_array().unwrap().len(), 3);
        assert_eq!(
            log["runs"][0]["results"][1]["locations"][0]["physicalLocation"]["region"]["byteOffset"],
            2
        );
        // A truncated tensorizer file: a finding with an offset (1), with
        // and without --verify.
        let flat = std::fs::read(format!(
            "{}/../tests/vectors/v1_flat.tensors",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let cut = scratch("cut.tensors", &flat[..flat.len() - 20]);
        for verify in [false, true] {
            let argv: &[&str] =
                if verify { &["--verify", "--json", &cut] } else { &["--json", &cut] };
            let (code, out, err) = run_on(argv);
            assert_eq!(code, 1, "{err}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["findings"][0]["rule"], "TZR-004", "{v}");
            assert_eq!(v["findings"].as_array().unwrap().len(), 1, "{v}");
        }
        // A flipped data byte is a hash finding with --verify only.
        let mut flipped = flat.clone();
        let at = flipped.len() - 12;
        flipped[at] ^= 1;
        let flipped = scratch("flipped.tensors", &flipped);
        assert_eq!(run_on(&[&flipped]).0, 0);
        let (code, out, _) = run_on(&["--verify", "--json", &flipped]);
        assert_eq!(code, 1);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["findings"][0]["rule"], "TZR-007", "{v}");
        // Could not scan (2): a missing file, as JSON and as SARIF.
        let (code, out, _) = run_on(&["--json", "/nonexistent/x.pt"]);
        assert_eq!(code, 2);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!((v["valid"].as_bool(), v["format"].is_null()), (Some(false), true));
        let (code, out, _) = run_on(&["--sarif", "/nonexistent/x.pt"]);
        assert_eq!(code, 2);
        let log: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(log["runs"][0]["invocations"][0]["executionSuccessful"], false);
        // A clean safetensors file (0).
        let json = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        let json = format!("{json:<width$}", width = json.len().next_multiple_of(8));
        let mut st = (json.len() as u64).to_le_bytes().to_vec();
        st.extend_from_slice(json.as_bytes());
        st.extend_from_slice(&[0; 4]);
        let st = scratch("ok.safetensors", &st);
        let (code, out, err) = run_on(&["--json", &st]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!((v["format"].as_str(), v["tensors"].as_u64()), (Some("safetensors"), Some(1)));
        assert_eq!(v["data_version"], serde_json::Value::Null);
        let (code, out, _) = run_on(&[&st]);
        assert_eq!(code, 0);
        assert!(out.contains("no findings"), "{out}");
    }
}
