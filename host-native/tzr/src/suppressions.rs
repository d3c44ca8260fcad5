//! `.tzrscan.toml` (or `--ignore FILE`): the findings a repository
//! accepts, for `tzr scan` (spec §22.8). Each `[[ignore]]` table is one
//! entry with exactly `rule`, `path` (a glob) and `reason`:
//!
//! ```toml
//! [[ignore]]
//! rule = "PKL-007"
//! path = "legacy/*.pt"
//! reason = "whole nn.Module checkpoints from 2021, reviewed"
//! ```

use std::io::Read as _;
use std::path::{Path, PathBuf};

use tensorizer_core::scan::suppress::{MAX_SUPPRESSION_FILE_LEN, MAX_SUPPRESSIONS, Suppression};

/// The file read when `--ignore` names none (in the current directory).
pub(crate) const DEFAULT_FILE: &str = ".tzrscan.toml";

/// The suppression file in use and its entries.
pub(crate) struct Loaded {
    /// The file, as named.
    pub path: String,
    /// Its entries, in order.
    pub entries: Vec<Suppression>,
}

/// Reads `given`, or [`DEFAULT_FILE`] when it exists; `None` when neither
/// applies. A file that cannot be read or is not a valid suppression file
/// is an error (the scan must not run with half its suppressions).
pub(crate) fn load(given: Option<&Path>) -> Result<Option<Loaded>, String> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None if Path::new(DEFAULT_FILE).is_file() => PathBuf::from(DEFAULT_FILE),
        None => return Ok(None),
    };
    let name = path.to_string_lossy().into_owned();
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_SUPPRESSION_FILE_LEN + 1).read_to_string(&mut text))
        .map_err(|e| format!("{name}: {e}"))?;
    if text.len() as u64 > MAX_SUPPRESSION_FILE_LEN {
        return Err(format!("{name}: above the {MAX_SUPPRESSION_FILE_LEN}-byte limit"));
    }
    let entries = parse(&text).map_err(|e| format!("{name}: {e}"))?;
    Ok(Some(Loaded { path: name, entries }))
}

/// The entries of a suppression file's text.
pub(crate) fn parse(text: &str) -> Result<Vec<Suppression>, String> {
    let doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    if let Some(key) = doc.iter().map(|(k, _)| k).find(|k| *k != "ignore") {
        return Err(format!("unknown key {key:?} (only [[ignore]] tables)"));
    }
    let Some(item) = doc.get("ignore") else { return Ok(Vec::new()) };
    let tables = item.as_array_of_tables().ok_or("ignore must be [[ignore]] tables")?;
    if tables.len() > MAX_SUPPRESSIONS {
        return Err(format!("more than {MAX_SUPPRESSIONS} entries"));
    }
    tables
        .iter()
        .enumerate()
        .map(|(i, t)| entry(t).map_err(|e| format!("entry {}: {e}", i + 1)))
        .collect()
}

fn entry(table: &toml_edit::Table) -> Result<Suppression, String> {
    if let Some(key) =
        table.iter().map(|(k, _)| k).find(|k| !["rule", "path", "reason"].contains(k))
    {
        return Err(format!("unknown key {key:?} (rule, path and reason)"));
    }
    let field = |key: &str| {
        table
            .get(key)
            .and_then(toml_edit::Item::as_str)
            .ok_or_else(|| format!("{key} (a string) is required"))
    };
    Suppression::new(field("rule")?, field("path")?, field("reason")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_entries_each_with_a_rule_a_glob_and_a_reason() {
        let text =
            "[[ignore]]\nrule = \"PKL-007\"\npath = \"legacy/*.pt\"\nreason = \"reviewed\"\n";
        let entries = parse(text).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!((entries[0].path.as_str(), &*entries[0].reason), ("legacy/*.pt", "reviewed"));
        let missing = parse("[[ignore]]\nrule = \"PKL-007\"\npath = \"*\"\n").unwrap_err();
        assert_eq!(missing, "entry 1: reason (a string) is required");
        let extra =
            parse("[[ignore]]\nrule = \"PKL-007\"\npath = \"*\"\nreason = \"r\"\nuntil = 1\n");
        assert!(extra.unwrap_err().contains("unknown key \"until\""));
        assert!(parse("ignore = 1").unwrap_err().contains("[[ignore]]"));
        assert!(
            parse("[[ignore]]\nrule = \"X-1\"\npath = \"*\"\nreason = \"r\"")
                .unwrap_err()
                .contains("no rule")
        );
        assert!(parse("[x").unwrap_err().starts_with("not TOML"));
        assert!(parse("").unwrap().is_empty());
    }
}
