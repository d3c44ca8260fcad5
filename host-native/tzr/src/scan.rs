//! `tzr scan FILE|URI`: the core's model-file scanner (spec §22) over any
//! source `tzr` reads, with the WASI validator's exit statuses: 0 no
//! findings at or above `--fail-on` (default `error`), 1 such findings, 2
//! could not scan.

use std::path::{Path, PathBuf};

use tensorizer_core::scan::{Finding, ScanOptions, Severity, sarif, scan};
use tensorizer_core::walk::{Scanned, Suppressions};

use tensorizer_native::source::Positioned;
use tensorizer_native::{Intent, open_uri};

/// How the findings are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    Text,
    Json,
    Sarif,
}

/// The least severity that fails a scan (`--fail-on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FailOn {
    Error,
    Warning,
    Note,
}

impl FailOn {
    /// Whether a finding of `severity` fails the scan.
    fn fails(self, severity: Severity) -> bool {
        let least = match self {
            Self::Error => Severity::Error,
            Self::Warning => Severity::Warning,
            Self::Note => Severity::Note,
        };
        severity <= least
    }
}

fn finding_line(f: &Finding) -> String {
    let at = f.offset.map_or_else(String::new, |o| format!(" at byte {o}"));
    let accepted = f
        .suppressed
        .as_ref()
        .map_or_else(String::new, |why| format!(" (suppressed: {})", crate::text::printable(why)));
    format!(
        "{} {}{at}{accepted}: {}\n    fix: {}",
        f.rule,
        f.severity,
        crate::text::printable(&f.message),
        f.remediation
    )
}

/// Scans one file: the scan, or why it could not be done.
fn scan_one(name: &str) -> Result<tensorizer_core::Scan, String> {
    let source = open_uri(name, Intent::ReadAll).map_err(|e| e.to_string())?;
    let options = ScanOptions { name: Some(name), ..ScanOptions::default() };
    scan(&mut Positioned(source.as_ref()), &options).map_err(|e| e.to_string())
}

fn text_block(file: &Scanned) -> String {
    let name = &file.name;
    let scanned = match &file.outcome {
        Ok(s) => s,
        Err(e) => return format!("{name}\n  could not scan: {e}"),
    };
    let (format, tensors, len) = (scanned.format.as_str(), scanned.tensors, scanned.file_len);
    let mut s = format!("{name}\n  {format}, {tensors} tensors, {len} bytes");
    if let Some(index) = &file.model {
        s.push_str(&format!("\n  a shard of {index}"));
    }
    if scanned.findings.is_empty() {
        s.push_str("\n  no findings");
    }
    for f in &scanned.findings {
        s.push_str("\n  ");
        s.push_str(&finding_line(f));
    }
    s
}

/// The suppression file in use and its notes (unused entries).
type Notes<'a> = Option<(&'a Suppressions, Vec<Finding>)>;

/// The document printed for `files` (one file: that file's report, as
/// before; several: `{"files": [...], "valid": ...}` and one SARIF run),
/// with the suppression file's notes: `suppressions` (`file`, `notes`) in
/// JSON, tool configuration notifications in SARIF, lines in text.
fn document(files: &[Scanned], output: Output, many: bool, notes: &Notes<'_>) -> String {
    let tool =
        sarif::Tool { name: "tzr", version: env!("CARGO_PKG_VERSION"), information_uri: None };
    let with_notes = |mut v: serde_json::Value| {
        if let Some((file, notes)) = notes {
            v["suppressions"] = file.notes_json(notes);
        }
        v.to_string()
    };
    match output {
        Output::Text => {
            let mut blocks: Vec<String> = files.iter().map(text_block).collect();
            if let Some((file, notes)) = notes.as_ref().filter(|(_, n)| !n.is_empty()) {
                let lines: Vec<String> = notes.iter().map(finding_line).collect();
                blocks.push(format!("{}\n  {}", file.path, lines.join("\n  ")));
            }
            blocks.join("\n")
        }
        Output::Json if !many => with_notes(files[0].json()),
        Output::Json => with_notes(tensorizer_core::walk::many_json(files)),
        Output::Sarif => {
            let runs: Vec<(String, Result<&[Finding], &str>)> = files
                .iter()
                .map(|f| {
                    (
                        sarif::artifact_uri(&f.name),
                        f.outcome.as_ref().map(|s| s.findings.as_slice()).map_err(String::as_str),
                    )
                })
                .collect();
            let refs: Vec<(&str, Result<&[Finding], &str>)> =
                runs.iter().map(|(u, r)| (u.as_str(), *r)).collect();
            let mut log = sarif::to_sarif_many(&tool, &refs);
            if let Some((file, notes)) = notes {
                sarif::add_config_notes(&mut log, &sarif::artifact_uri(&file.path), notes);
            }
            log.to_string()
        }
    }
}

/// Scans every file `paths` name (directories recursively, a store
/// prefix's objects, a shard index with its shards: `scan_listing`,
/// `walk::scan_listed`); returns the worst exit status: 2
/// when a file could not be scanned, 1 when one has a finding at or above
/// `fail_on`, else 0. In a directory (or with `models_only`, anywhere), a
/// file whose bytes are no format the scanner knows (only `FMT-001`) is
/// not a model file and is left out. Findings `suppressions` cover are
/// reported as suppressed and fail nothing; its unused entries are notes.
pub(crate) fn run(
    paths: &[PathBuf],
    output: Output,
    fail_on: FailOn,
    models_only: bool,
    suppressions: Option<&Suppressions>,
) -> u8 {
    let listed = match tensorizer_native::shards::scan_listing(paths) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tzr: cannot list the files to scan: {e}");
            return 2;
        }
    };
    let mut files = tensorizer_core::walk::scan_listed(listed, models_only, scan_one);
    let notes = suppressions.map(|s| (s, s.apply(&mut files)));
    let many = paths.len() != 1 || files.len() != 1 || Path::new(&files[0].name) != paths[0];
    let mut status = 0u8;
    for Scanned { name, outcome, .. } in &files {
        match outcome {
            Err(e) => {
                eprintln!("tzr: {name}: {e}");
                status = 2;
            }
            Ok(s) => {
                let fails = |f: &&Finding| f.suppressed.is_none() && fail_on.fails(f.severity);
                if let Some(first) = s.findings.iter().find(fails) {
                    let n = s.findings.len();
                    let first_message = crate::text::printable(&first.message);
                    let plural = if n == 1 { "" } else { "s" };
                    eprintln!(
                        "tzr: {name}: {n} finding{plural}; first: {} {first_message}",
                        first.rule
                    );
                    status = status.max(1);
                }
            }
        }
    }
    if let Some((file, notes)) = &notes {
        for n in notes.iter().filter(|n| fail_on.fails(n.severity)) {
            eprintln!("tzr: {}: {} {}", file.path, n.rule, n.message);
            status = status.max(1);
        }
    }
    if files.is_empty() {
        return status;
    }
    use std::io::Write as _;
    let text = document(&files, output, many, &notes);
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return 141;
        }
        eprintln!("tzr: could not write the output: {e}");
        return 2;
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_vector(path: &str) -> tensorizer_core::Scan {
        let path = format!("{}/../../tests/vectors/{path}", env!("CARGO_MANIFEST_DIR"));
        let source = open_uri(&path, Intent::ReadAll).unwrap();
        scan(
            &mut Positioned(source.as_ref()),
            &ScanOptions { name: Some(&path), ..ScanOptions::default() },
        )
        .unwrap()
    }

    #[test]
    fn fail_on_is_a_threshold() {
        assert!(FailOn::Error.fails(Severity::Error) && !FailOn::Error.fails(Severity::Warning));
        assert!(FailOn::Warning.fails(Severity::Warning) && !FailOn::Warning.fails(Severity::Note));
        assert!(FailOn::Note.fails(Severity::Note) && FailOn::Note.fails(Severity::Error));
    }

    #[test]
    fn a_shard_index_is_scanned_with_its_shards() {
        let dir = tempfile::tempdir().unwrap();
        let vectors = format!("{}/../../tests/vectors", env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(format!("{vectors}/torch/params.pt"), dir.path().join("a.bin")).unwrap();
        let index = r#"{"weight_map": {"w": "a.bin", "v": "b.bin"}}"#;
        std::fs::write(dir.path().join("pytorch_model.bin.index.json"), index).unwrap();
        let files = tensorizer_core::walk::scan_paths(
            &[dir.path().join("pytorch_model.bin.index.json")],
            false,
            scan_one,
        )
        .unwrap();
        let rules: Vec<&str> =
            files[0].outcome.as_ref().unwrap().findings.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(rules, ["IDX-003", "IDX-005"], "{files:?}");
        assert_eq!(files[1].model.as_deref(), Some(files[0].name.as_str()));
        let status = run(&[dir.path().to_path_buf()], Output::Json, FailOn::Error, false, None);
        assert_eq!(status, 1);
    }

    #[test]
    fn tzr_sources_scan_through_the_core() {
        let s = scan_vector("v4_meta.tensors");
        assert!(s.findings.is_empty() && s.tensors == 5, "{:?}", s.findings);
        let s = scan_vector("torch/hostile_os_system.pt");
        assert!(s.findings.iter().any(|f| f.message.contains("posix.system")), "{:?}", s.findings);
    }
}
