//! `tzr fingerprint` and `tzr diff`: one digest for the weights in a
//! tensorizer, safetensors or torch.save file (spec §21), and the tensors
//! that differ between two files.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};
use tensorizer_core::TensorFingerprint;
use tensorizer_core::fingerprint::{Change, Difference, diff, diff_json, fingerprint_json};
use tensorizer_core::walk::Listed;
use tensorizer_native::convert::fingerprint::{self, FingerprintOptions, Fingerprinted};
use tensorizer_native::{Intent, open_uri, shards};

use crate::keys::KeyArgs;
use crate::text::{human, printable};
use crate::{Failure, Outcome, progress};

/// Fingerprints `file`, with a progress bar on a terminal.
fn compute(
    file: &Path,
    key: &KeyArgs,
    num_threads: Option<usize>,
) -> Result<Fingerprinted, Failure> {
    let name = file.to_string_lossy();
    let options =
        FingerprintOptions { key: key.for_reading()?, num_threads: num_threads.unwrap_or(0) };
    let bar = progress::bytes(0, "fingerprinting");
    let report = |done, total| {
        bar.set_length(total);
        bar.set_position(done);
        Ok(())
    };
    if shards::is_sharded(&name) {
        // One model: its shards' tensors, as one file would hold them.
        let done = fingerprint::fingerprint(&name, &options, report);
        bar.finish_and_clear();
        return Ok(done?);
    }
    let source = open_uri(&name, Intent::ReadAll)?;
    if !key.given() && is_encrypted_tensorizer(&source)? {
        return Err(Failure::Usage(format!(
            "{}: the file is encrypted; give --key-file, --passphrase-env VAR or --passphrase",
            file.display()
        )));
    }
    let done = fingerprint::fingerprint_source(source, &options, report);
    bar.finish_and_clear();
    Ok(done?)
}

/// The models `paths` name, each to fingerprint as one: a sharded model
/// (an `*.index.json`, or a folder holding shards at its top:
/// [`shards::is_model_folder`]) as one entry; other folders walked, their
/// files each one model ([`tensorizer_core::walk::expand`]).
pub(crate) fn list(paths: &[PathBuf]) -> std::io::Result<Vec<Listed>> {
    let mut out = Vec::new();
    for p in paths {
        let name = p.to_string_lossy();
        if name.ends_with(".index.json") || shards::is_model_folder(&name) {
            out.push(Listed { name: name.into_owned(), in_dir: false });
        } else {
            out.extend(tensorizer_core::walk::expand(std::slice::from_ref(p))?);
        }
    }
    Ok(out)
}

/// Whether `source` is a tensorizer file with encrypted tensors (read from
/// its header and index only).
fn is_encrypted_tensorizer(source: &crate::checkpoint::Source) -> Result<bool, Failure> {
    let format = tensorizer_native::convert::sniff(source)?;
    if format != tensorizer_native::convert::Format::Tensorizer {
        return Ok(false);
    }
    let mut head = vec![0u8; source.len().min(tensorizer_core::FileHeader::LEN as u64) as usize];
    source.read_exact_at(0, &mut head)?;
    Ok(tensorizer_core::FileHeader::parse(&head).is_ok_and(|h| h.has_crypt_info()))
}

/// `tzr fingerprint FILE`: `HEX  FILE`, as `sha256sum` prints, or JSON
/// with every record.
pub(crate) fn run(
    file: &Path,
    key: &KeyArgs,
    json_out: bool,
    num_threads: Option<usize>,
) -> Outcome {
    let started = Instant::now();
    let done = compute(file, key, num_threads)?;
    for name in &done.skipped {
        eprintln!("tzr: note: left out {:?}: not a tensor", printable(name));
    }
    let fp = &done.fingerprint;
    if json_out {
        let report = report_json(file, &done, started);
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        out!("{}  {}", fp.hex(), printable(&file.display().to_string()));
    }
    Ok(())
}

/// One file's JSON report: the fingerprint's records and where they came
/// from.
fn report_json(file: &Path, done: &Fingerprinted, started: Instant) -> Value {
    let mut report = fingerprint_json(&done.fingerprint);
    if let Value::Object(o) = &mut report {
        o.insert("file".into(), file.display().to_string().into());
        o.insert("format".into(), done.format.name().into());
        o.insert("data_bytes".into(), done.bytes.into());
        o.insert("seconds".into(), started.elapsed().as_secs_f64().into());
        o.insert("skipped".into(), json!(done.skipped));
    }
    report
}

/// Whether a file found in a directory holds a format `tzr fingerprint`
/// reads, told from its bytes (a file that cannot be opened counts as one:
/// its failure is reported).
fn is_model(name: &str) -> bool {
    open_uri(name, Intent::ReadAll).map_or(true, |s| tensorizer_native::convert::sniff(&s).is_ok())
}

/// `tzr fingerprint PATH...` over many files (directories walked, their
/// files chosen by content): `HEX  FILE` per file, or one JSON document
/// `{"files": [...], "ok": ...}` covering every file, a failure as
/// `{"file", "ok": false, "error", "exit_code"}`. Returns the worst exit
/// status of any file.
pub(crate) fn run_many(
    listed: &[tensorizer_core::walk::Listed],
    key: &KeyArgs,
    json_out: bool,
    num_threads: Option<usize>,
) -> u8 {
    let (mut worst, mut reports) = (0u8, Vec::new());
    for l in listed.iter().filter(|l| !l.in_dir || is_model(&l.name)) {
        let started = Instant::now();
        let file = Path::new(&l.name);
        match compute(file, key, num_threads) {
            Ok(done) if json_out => reports.push(report_json(file, &done, started)),
            Ok(done) => {
                if let Err(e) =
                    write_line(&format!("{}  {}", done.fingerprint.hex(), printable(&l.name)))
                {
                    return crate::output_failed(&e, 3);
                }
            }
            Err(failure) => {
                let code = failure.exit_code();
                worst = worst.max(code);
                let message = failure.message().unwrap_or_default();
                eprintln!("tzr: {}: {}", printable(&l.name), printable(&message));
                reports.push(
                    json!({"file": l.name, "ok": false, "error": message, "exit_code": code}),
                );
            }
        }
    }
    if json_out {
        let doc = json!({"files": reports, "ok": worst == 0});
        if let Err(e) = write_line(&serde_json::to_string_pretty(&doc).unwrap_or_default()) {
            return crate::output_failed(&e, 3);
        }
    }
    worst
}

fn write_line(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush())
}

/// `dtype [shape]`, e.g. `float32 [384, 384]`.
fn describe(t: &TensorFingerprint) -> String {
    format!("{} {:?}", t.dtype_name(), t.shape)
}

/// What a [`Change::Changed`] line says after the name.
fn what_changed(a: &TensorFingerprint, b: &TensorFingerprint, d: Difference) -> String {
    let mut parts = Vec::new();
    if d.dtype {
        parts.push(format!("dtype {} -> {}", a.dtype_name(), b.dtype_name()));
    }
    if d.shape {
        parts.push(format!("shape {:?} -> {:?}", a.shape, b.shape));
    }
    if d.data && !d.dtype && !d.shape {
        parts.push(match (a.data, b.data) {
            (Some(_), Some(_)) => "data".to_string(),
            (None, _) => "data (was a meta tensor)".to_string(),
            (_, None) => "data (now a meta tensor)".to_string(),
        });
    }
    parts.join(", ")
}

fn change_line(c: &Change<'_>) -> String {
    match *c {
        Change::Added(t) => format!("added    {}  {}", printable(&t.name), describe(t)),
        Change::Removed(t) => format!("removed  {}  {}", printable(&t.name), describe(t)),
        Change::Renamed { from, to } => {
            format!(
                "renamed  {} -> {}  {}",
                printable(&from.name),
                printable(&to.name),
                describe(to)
            )
        }
        Change::Changed { a, b, difference } => {
            format!("changed  {}  {}", printable(&a.name), what_changed(a, b, difference))
        }
    }
}

/// `tzr diff A B`: one line per tensor added, removed, renamed or changed,
/// or JSON. `Ok(true)` when the fingerprints are equal.
pub(crate) fn diff_files(
    a: &Path,
    b: &Path,
    key: &KeyArgs,
    json_out: bool,
    num_threads: Option<usize>,
) -> Result<bool, Failure> {
    let fa = compute(a, key, num_threads)?;
    let fb = compute(b, key, num_threads)?;
    let changes = diff(&fa.fingerprint, &fb.fingerprint);
    let mut report = diff_json(&fa.fingerprint, &fb.fingerprint);
    let count = |kind: &str| report[kind].as_u64().unwrap_or(0);
    if json_out {
        if let Value::Object(o) = &mut report {
            o.insert("a".into(), a.display().to_string().into());
            o.insert("b".into(), b.display().to_string().into());
        }
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
        return Ok(changes.is_empty());
    }
    for c in &changes {
        out!("{}", change_line(c));
    }
    let (pa, pb) = (printable(&a.display().to_string()), printable(&b.display().to_string()));
    if changes.is_empty() {
        out!(
            "{pa} and {pb} hold the same {} tensors ({}): fingerprint {}",
            fa.fingerprint.tensors().len(),
            human(fa.bytes),
            fa.fingerprint.hex()
        );
    } else {
        out!(
            "{pa} and {pb} differ: {} added, {} removed, {} renamed, {} changed",
            count("added"),
            count("removed"),
            count("renamed"),
            count("changed")
        );
    }
    Ok(changes.is_empty())
}
