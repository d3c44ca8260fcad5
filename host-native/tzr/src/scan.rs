//! `tzr scan FILE|URI`: the core's model-file scanner (spec §22) over any
//! source `tzr` reads, with the WASI validator's exit statuses: 0 no
//! findings at or above `--fail-on` (default `error`), 1 such findings, 2
//! could not scan.

use std::path::PathBuf;

use tensorizer_core::scan::{Finding, ScanOptions, Severity, sarif, scan};
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
    format!(
        "{} {}{at}: {}\n    fix: {}",
        f.rule,
        f.severity,
        crate::text::printable(&f.message),
        f.remediation
    )
}

/// What scanning one file gave: the scan, or why it could not be done.
type Outcome = Result<tensorizer_core::Scan, String>;

fn scan_one(name: &str) -> Outcome {
    let source = open_uri(name, Intent::ReadAll).map_err(|e| e.to_string())?;
    let options = ScanOptions { name: Some(name), ..ScanOptions::default() };
    scan(&mut Positioned(source.as_ref()), &options).map_err(|e| e.to_string())
}

fn text_block(name: &str, outcome: &Outcome) -> String {
    let scanned = match outcome {
        Ok(s) => s,
        Err(e) => return format!("{name}\n  could not scan: {e}"),
    };
    let (format, tensors, len) = (scanned.format.as_str(), scanned.tensors, scanned.file_len);
    let mut s = format!("{name}\n  {format}, {tensors} tensors, {len} bytes");
    if scanned.findings.is_empty() {
        s.push_str("\n  no findings");
    }
    for f in &scanned.findings {
        s.push_str("\n  ");
        s.push_str(&finding_line(f));
    }
    s
}

fn failure_json(name: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"file": name, "format": null, "valid": false, "tensors": 0, "findings": [], "error": message})
}

/// The document printed for `files` (one file: that file's report, as
/// before; several: `{"files": [...], "valid": ...}` and one SARIF run).
fn document(files: &[(String, Outcome)], output: Output, many: bool) -> Option<String> {
    let tool =
        sarif::Tool { name: "tzr", version: env!("CARGO_PKG_VERSION"), information_uri: None };
    let json_of = |(name, o): &(String, Outcome)| match o {
        Ok(s) => sarif::scan_json(name, s),
        Err(e) => failure_json(name, e),
    };
    Some(match output {
        Output::Text => files.iter().map(|(n, o)| text_block(n, o)).collect::<Vec<_>>().join("\n"),
        Output::Json if !many => json_of(&files[0]).to_string(),
        Output::Json => {
            let valid = files.iter().all(|(_, o)| o.as_ref().is_ok_and(|s| s.findings.is_empty()));
            serde_json::json!({"files": files.iter().map(json_of).collect::<Vec<_>>(), "valid": valid}).to_string()
        }
        Output::Sarif => {
            let runs: Vec<(String, Result<&[Finding], &str>)> = files
                .iter()
                .map(|(n, o)| {
                    (
                        sarif::artifact_uri(n),
                        o.as_ref().map(|s| s.findings.as_slice()).map_err(String::as_str),
                    )
                })
                .collect();
            let refs: Vec<(&str, Result<&[Finding], &str>)> =
                runs.iter().map(|(u, r)| (u.as_str(), *r)).collect();
            sarif::to_sarif_many(&tool, &refs).to_string()
        }
    })
}

/// Scans every file `paths` name (directories recursively); returns the
/// worst exit status: 2 when a file could not be scanned, 1 when one has
/// a finding at or above `fail_on`, else 0. In a directory (or with
/// `models_only`, anywhere), a file whose bytes are no format the scanner
/// knows (only `FMT-001`) is not a model file and is left out.
pub(crate) fn run(paths: &[PathBuf], output: Output, fail_on: FailOn, models_only: bool) -> u8 {
    let listed = match tensorizer_core::walk::expand(paths) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tzr: cannot list the files to scan: {e}");
            return 2;
        }
    };
    let many = tensorizer_core::walk::is_many(paths, &listed);
    let mut files: Vec<(String, Outcome)> = Vec::new();
    for tensorizer_core::walk::Listed { name, in_dir } in listed {
        let outcome = scan_one(&name);
        let unknown =
            outcome.as_ref().is_ok_and(|s| s.format == tensorizer_core::scan::Format::Unknown);
        if !((in_dir || models_only) && unknown) {
            files.push((name, outcome));
        }
    }
    let mut status = 0u8;
    for (name, outcome) in &files {
        match outcome {
            Err(e) => {
                eprintln!("tzr: {name}: {e}");
                status = 2;
            }
            Ok(s) => {
                if let Some(first) = s.findings.iter().find(|f| fail_on.fails(f.severity)) {
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
    let text = if files.is_empty() { None } else { document(&files, output, many) };
    if let Some(text) = text {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return 141;
            }
            eprintln!("tzr: could not write the output: {e}");
            return 2;
        }
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
    fn tzr_sources_scan_through_the_core() {
        let s = scan_vector("v4_meta.tensors");
        assert!(s.findings.is_empty() && s.tensors == 5, "{:?}", s.findings);
        let s = scan_vector("torch/hostile_os_system.pt");
        assert!(s.findings.iter().any(|f| f.message.contains("posix.system")), "{:?}", s.findings);
    }
}
