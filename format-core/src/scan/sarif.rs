//! SARIF 2.1.0 output: one run, the whole rule table as the driver's
//! `rules`, one result per finding with its byte region. Hosts (the WASI
//! validator, `tzr scan`) print [`to_sarif`]'s value as they like.

use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Map, Value, json};

use super::{Finding, RULES};

/// The SARIF schema the output declares.
pub const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The SARIF version written.
pub const VERSION: &str = "2.1.0";

/// The tool that ran the scan.
#[derive(Debug, Clone, Copy)]
pub struct Tool<'a> {
    /// Its name (`tensorizer-validate`, `tzr`).
    pub name: &'a str,
    /// Its version.
    pub version: &'a str,
    /// Where to read about it and its rules, when the tool has a public
    /// page (SARIF's `informationUri`, left out when `None`).
    pub information_uri: Option<&'a str>,
}

/// The rule table as SARIF `reportingDescriptor`s.
pub fn rules() -> Vec<Value> {
    RULES
        .iter()
        .map(|r| {
            json!({
                "id": r.id.as_str(),
                "shortDescription": { "text": r.description },
                "fullDescription": { "text": r.description },
                "help": { "text": r.remediation },
                "defaultConfiguration": { "level": r.severity.as_str() },
                "properties": { "executesCode": r.executes_code },
            })
        })
        .collect()
}

fn result(f: &Finding, artifact_uri: &str) -> Value {
    let rule_index = RULES.iter().position(|r| r.id == f.rule).unwrap_or(0);
    let mut location = Map::new();
    location.insert("artifactLocation".into(), json!({ "uri": artifact_uri }));
    if let Some(offset) = f.offset {
        let mut region = Map::new();
        region.insert("byteOffset".into(), offset.into());
        if let Some(n) = f.length {
            region.insert("byteLength".into(), n.into());
        }
        location.insert("region".into(), Value::Object(region));
    }
    let mut out = json!({
        "ruleId": f.rule.as_str(),
        "ruleIndex": rule_index,
        "level": f.severity.as_str(),
        "message": { "text": f.message },
        "locations": [ { "physicalLocation": Value::Object(location) } ],
    });
    if let (true, Value::Object(o)) = (f.count > 1, &mut out) {
        o.insert("occurrenceCount".into(), f.count.into());
    }
    if let (Some(why), Value::Object(o)) = (&f.suppressed, &mut out) {
        let suppression =
            json!({ "kind": "external", "status": "accepted", "justification": &**why });
        o.insert("suppressions".into(), json!([suppression]));
    }
    if let (Some(t), Value::Object(o)) = (&f.tensor, &mut out) {
        o.insert("properties".into(), json!({ "tensor": t }));
    }
    out
}

/// The SARIF log for `findings` in the file at `artifact_uri` (a relative
/// path or a URI, as the user named the file).
pub fn to_sarif(tool: &Tool<'_>, artifact_uri: &str, findings: &[Finding]) -> Value {
    to_sarif_many(tool, &[(artifact_uri, Ok(findings))])
}

/// The SARIF log of a scan that could not be done: no results, and the
/// reason as a tool execution notification.
pub fn to_sarif_failure(tool: &Tool<'_>, artifact_uri: &str, message: &str) -> Value {
    to_sarif_many(tool, &[(artifact_uri, Err(message))])
}

/// One SARIF run over several files, each its artifact URI and its
/// findings or why it could not be scanned: one artifact per file, their
/// results in order, and one invocation, successful when every file was
/// scanned, with a notification per file that was not.
pub fn to_sarif_many(
    tool: &Tool<'_>,
    files: &[(&str, core::result::Result<&[Finding], &str>)],
) -> Value {
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for (uri, outcome) in files {
        match outcome {
            Ok(findings) => results.extend(findings.iter().map(|f| result(f, uri))),
            Err(message) => failures.push(json!({
                "level": "error",
                "message": { "text": message },
                "locations": [ { "physicalLocation": { "artifactLocation": { "uri": uri } } } ],
            })),
        }
    }
    let mut invocation = json!({ "executionSuccessful": failures.is_empty() });
    if !failures.is_empty() {
        invocation["toolExecutionNotifications"] = Value::Array(failures);
    }
    let artifacts: Vec<Value> =
        files.iter().map(|(uri, _)| json!({ "location": { "uri": uri } })).collect();
    let mut driver = json!({ "name": tool.name, "version": tool.version, "rules": rules() });
    if let (Some(uri), Some(d)) = (tool.information_uri, driver.as_object_mut()) {
        d.insert("informationUri".into(), Value::from(uri));
    }
    json!({
        "$schema": SCHEMA,
        "version": VERSION,
        "runs": [ {
            "tool": { "driver": driver },
            "artifacts": artifacts,
            "results": results,
            "invocations": [ invocation ],
        } ],
    })
}

/// Adds `notes` (findings about the tool's configuration, such as unused
/// suppressions) to `log`'s invocation as `toolConfigurationNotifications`
/// located at `config_uri`.
pub fn add_config_notes(log: &mut Value, config_uri: &str, notes: &[Finding]) {
    let notes: Vec<Value> = notes
        .iter()
        .map(|f| {
            json!({
                "level": f.severity.as_str(),
                "descriptor": { "id": f.rule.as_str() },
                "message": { "text": f.message },
                "locations": [ { "physicalLocation": { "artifactLocation": { "uri": config_uri } } } ],
            })
        })
        .collect();
    if !notes.is_empty() {
        log["runs"][0]["invocations"][0]["toolConfigurationNotifications"] = Value::Array(notes);
    }
}

/// A finding as the JSON reports write it: `rule`, `severity`,
/// `executes_code` (its rule's), `offset`, `length`, `tensor`, `message`,
/// `remediation`, `count`, `suppressed` (the reason, or null).
pub fn finding_json(f: &Finding) -> Value {
    json!({
        "rule": f.rule.as_str(),
        "severity": f.severity.as_str(),
        "executes_code": f.rule.executes_code(),
        "offset": f.offset,
        "length": f.length,
        "tensor": f.tensor,
        "message": f.message,
        "remediation": f.remediation,
        "count": f.count,
        "suppressed": f.suppressed.as_deref(),
    })
}

/// The JSON report of a scan that `tzr scan --json` prints and Python's
/// `tensorizer_rs.scan` returns: `file`, `format`, `valid` (no findings),
/// `tensors`, `file_bytes` and `findings` (each as [`finding_json`]);
/// `valid` when every finding is suppressed (or there is none).
pub fn scan_json(file: &str, scanned: &super::Scan) -> Value {
    json!({
        "file": file,
        "format": scanned.format.as_str(),
        "valid": scanned.is_valid(),
        "tensors": scanned.tensors,
        "file_bytes": scanned.file_len,
        "findings": scanned.findings.iter().map(finding_json).collect::<Vec<_>>(),
    })
}

/// The SARIF URI for a path as the user gave it: kept when it already
/// is a URI, else its characters outside RFC 3986's unreserved and `/`
/// set percent-encoded (a relative reference).
pub fn artifact_uri(path: &str) -> String {
    if path.split_once("://").is_some_and(|(s, _)| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    }) {
        return path.into();
    }
    let mut out = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&alloc::format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::RuleId;

    #[test]
    fn the_log_has_the_required_shape() {
        let f = Finding::new(RuleId::PklGlobal, Some(42), "global os.system").spanning(1);
        let tool = Tool { name: "t", version: "1", information_uri: None };
        let log = to_sarif(&tool, "dir/a b.pt", &[f]);
        assert_eq!(log["version"], "2.1.0");
        let run = &log["runs"][0];
        assert_eq!(run["tool"]["driver"]["rules"].as_array().unwrap().len(), RULES.len());
        let r = &run["results"][0];
        assert_eq!(r["ruleId"], "PKL-001");
        assert_eq!(r["level"], "error");
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        let exec: Vec<&str> = rules
            .iter()
            .filter(|d| d["properties"]["executesCode"] == true)
            .map(|d| d["id"].as_str().unwrap())
            .collect();
        assert_eq!(exec, ["GGUF-006", "PKL-001", "PKL-002", "PKL-006"]);
        assert_eq!(
            finding_json(&Finding::new(RuleId::PklComputedGlobal, None, ""))["executes_code"],
            true
        );
        assert_eq!(finding_json(&Finding::new(RuleId::PklInert, None, ""))["executes_code"], false);
        assert_eq!(
            run["tool"]["driver"]["rules"][r["ruleIndex"].as_u64().unwrap() as usize]["id"],
            "PKL-001"
        );
        let region = &r["locations"][0]["physicalLocation"]["region"];
        assert_eq!(
            (region["byteOffset"].as_u64(), region["byteLength"].as_u64()),
            (Some(42), Some(1))
        );
        assert_eq!(artifact_uri("dir/a b.pt"), "dir/a%20b.pt");
        assert_eq!(artifact_uri("s3://b/k"), "s3://b/k");
    }
}
