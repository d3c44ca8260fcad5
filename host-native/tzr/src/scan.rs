//! `tzr scan FILE|URI`: the core's model-file scanner (spec §22) over any
//! source `tzr` reads, with the WASI validator's exit statuses: 0 no
//! findings at or above `--fail-on` (default `error`), 1 such findings, 2
//! could not scan.

use std::path::Path;
use std::process::ExitCode;

use tensorizer_core::scan::{Finding, ScanOptions, Severity, sarif, scan};
use tensorizer_native::source::Positioned;
use tensorizer_native::{Intent, open_uri};

/// Where the rules are described (SARIF's `informationUri`).
const INFORMATION_URI: &str = "https://example.invalid/tensorizer-rs/spec/22-scanner.md";

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
    format!("{} {}{at}: {}\n    fix: {}", f.rule, f.severity, crate::text::printable(&f.message), f.remediation)
}

/// Scans `file`; returns the exit status.
pub(crate) fn run(file: &Path, output: Output, fail_on: FailOn) -> ExitCode {
    let name = file.to_string_lossy();
    let cannot_scan = |message: String| {
        eprintln!("tzr: {name}: {message}");
        let tool = sarif::Tool { name: "tzr", version: env!("CARGO_PKG_VERSION"), information_uri: INFORMATION_URI };
        let doc = match output {
            Output::Text => None,
            Output::Json => Some(serde_json::json!({"file": name, "format": null, "valid": false, "tensors": 0,
                                                    "findings": [], "error": message})),
            Output::Sarif => Some(sarif::to_sarif_failure(&tool, &sarif::artifact_uri(&name), &message)),
        };
        if let Some(doc) = doc {
            // The failure is already on stderr; a report that cannot be
            // written changes nothing about the exit status.
            use std::io::Write as _;
            let _ = writeln!(std::io::stdout().lock(), "{doc}");
        }
        ExitCode::from(2)
    };
    let source = match open_uri(&name, Intent::ReadAll) {
        Ok(s) => s,
        Err(e) => return cannot_scan(e.to_string()),
    };
    let options = ScanOptions { name: Some(&name), ..ScanOptions::default() };
    let scanned = match scan(&mut Positioned(source.as_ref()), &options) {
        Ok(s) => s,
        Err(e) => return cannot_scan(e.to_string()),
    };
    let tool = sarif::Tool { name: "tzr", version: env!("CARGO_PKG_VERSION"), information_uri: INFORMATION_URI };
    let text = match output {
        Output::Sarif => sarif::to_sarif(&tool, &sarif::artifact_uri(&name), &scanned.findings).to_string(),
        Output::Json => sarif::scan_json(&name, &scanned).to_string(),
        Output::Text => {
            let mut s = format!(
                "{name}\n  {}, {} tensors, {} bytes",
                scanned.format.as_str(),
                scanned.tensors,
                scanned.file_len
            );
            if scanned.findings.is_empty() {
                s.push_str("\n  no findings");
            }
            for f in &scanned.findings {
                s.push_str("\n  ");
                s.push_str(&finding_line(f));
            }
            s
        }
    };
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return ExitCode::from(141);
        }
        eprintln!("tzr: could not write the output: {e}");
        return ExitCode::from(2);
    }
    if let Some(first) = scanned.findings.iter().find(|f| fail_on.fails(f.severity)) {
        let n = scanned.findings.len();
        let first_message = crate::text::printable(&first.message);
        eprintln!("tzr: {name}: {n} finding{}; first: {} {first_message}", if n == 1 { "" } else { "s" }, first.rule);
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_vector(path: &str) -> tensorizer_core::Scan {
        let path = format!("{}/../../tests/vectors/{path}", env!("CARGO_MANIFEST_DIR"));
        let source = open_uri(&path, Intent::ReadAll).unwrap();
        scan(&mut Positioned(source.as_ref()), &ScanOptions { name: Some(&path), ..ScanOptions::default() }).unwrap()
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
