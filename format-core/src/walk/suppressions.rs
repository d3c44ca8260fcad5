//! The suppression file as every front end finds and reads it (spec
//! §22.8): the one named, else `.tzrscan.toml` in the current directory
//! when there is one; parsed by [`crate::scan::suppress::parse`].

use alloc::string::{String, ToString as _};
use alloc::vec::Vec;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::Scanned;
use crate::scan::suppress::{
    self, DEFAULT_SUPPRESSION_FILE, MAX_SUPPRESSION_FILE_LEN, Suppression,
};
use crate::scan::{Finding, sarif};

/// The suppression file in use and its entries.
#[derive(Debug, Clone)]
pub struct Suppressions {
    /// The file, as named (or [`DEFAULT_SUPPRESSION_FILE`]).
    pub path: String,
    /// Its entries, in order.
    pub entries: Vec<Suppression>,
}

impl Suppressions {
    /// Reads `given`, or [`DEFAULT_SUPPRESSION_FILE`] when it exists; `None`
    /// when neither applies. A file that cannot be read or is not a valid
    /// suppression file is an error naming it: a scan must not run with
    /// half its suppressions.
    pub fn load(given: Option<&Path>) -> Result<Option<Self>, String> {
        let path = match given {
            Some(p) => p.to_path_buf(),
            None if Path::new(DEFAULT_SUPPRESSION_FILE).is_file() => {
                PathBuf::from(DEFAULT_SUPPRESSION_FILE)
            }
            None => return Ok(None),
        };
        let name = path.to_string_lossy().into_owned();
        let mut text = String::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_SUPPRESSION_FILE_LEN + 1).read_to_string(&mut text))
            .map_err(|e| alloc::format!("{name}: {e}"))?;
        let entries = suppress::parse(&text).map_err(|e| alloc::format!("{name}: {e}"))?;
        Ok(Some(Self { path: name, entries }))
    }

    /// Marks what the entries cover in every file (by its name as
    /// reported); returns the notes for the entries that covered nothing.
    pub fn apply(&self, files: &mut [Scanned]) -> Vec<Finding> {
        let mut used = alloc::vec![0; self.entries.len()];
        for f in files.iter_mut() {
            if let Ok(s) = &mut f.outcome {
                suppress::apply(&self.entries, &mut used, &f.name, &mut s.findings);
            }
        }
        suppress::unused(&self.entries, &used)
    }

    /// The JSON reports' `suppressions` member: `{"file", "notes"}`, each
    /// note as [`sarif::finding_json`].
    pub fn notes_json(&self, notes: &[Finding]) -> Value {
        let notes: Vec<Value> = notes.iter().map(sarif::finding_json).collect();
        json!({"file": self.path.to_string(), "notes": notes})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{Finding, Format, RuleId, Scan};

    #[test]
    fn a_named_file_is_read_and_its_unused_entries_are_notes() {
        let dir = std::env::temp_dir().join(alloc::format!("tzr-supp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ignore.toml");
        std::fs::write(
            &file,
            "[[ignore]]\nrule = \"PKL-007\"\npath = \"*.pt\"\nreason = \"reviewed\"\n\
             [[ignore]]\nrule = \"ST-009\"\npath = \"*\"\nreason = \"never\"\n",
        )
        .unwrap();
        let loaded = Suppressions::load(Some(&file)).unwrap().unwrap();
        let scan = Scan {
            format: Format::Pickle,
            tensors: 0,
            findings: alloc::vec![Finding::new(RuleId::PklInert, Some(3), "a module")],
            file_len: 9,
            tensorizer: None,
            safetensors: None,
            torch_rows: None,
            shard_index: None,
            gguf: None,
        };
        let mut files =
            [Scanned { name: "m/a.pt".into(), outcome: Ok(scan), model: None, shards: Vec::new() }];
        let notes = loaded.apply(&mut files);
        let s = files[0].outcome.as_ref().unwrap();
        assert!(s.is_valid() && s.findings[0].suppressed.as_deref() == Some("reviewed"));
        let doc = loaded.notes_json(&notes);
        assert_eq!(doc["notes"][0]["rule"], "SUP-001", "{doc}");
        assert_eq!(doc["file"], file.to_string_lossy().as_ref());
        std::fs::write(&file, "[[ignore]]\nrule = \"PKL-007\"\n").unwrap();
        let err = Suppressions::load(Some(&file)).unwrap_err();
        assert!(err.starts_with(&*file.to_string_lossy()) && err.contains("required"), "{err}");
        assert!(Suppressions::load(Some(&dir.join("missing.toml"))).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
