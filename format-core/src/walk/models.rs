//! Scanning what a command line names as models: every file once, and a
//! sharded checkpoint's index with the shards it names as one model
//! (spec §22.5). The host scans one file (`scan_file`, over whatever
//! sources it opens); this decides which files, and checks each index
//! against its folder ([`crate::scan::shards`]).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::{String, ToString as _};
use alloc::vec::Vec;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::scan::shards::{self, Shard, ShardIndex};
use crate::scan::{Format, Scan, sarif};

/// One file of a scan over many paths.
#[derive(Debug)]
pub struct Scanned {
    /// The path (or URI) as text.
    pub name: String,
    /// Its scan, or why it could not be done.
    pub outcome: Result<Scan, String>,
    /// The shard index this file is a shard of, when one named it.
    pub model: Option<String>,
    /// For a shard index: the paths of the shards it names that were found.
    pub shards: Vec<String>,
}

impl Scanned {
    fn new(name: String, outcome: Result<Scan, String>) -> Self {
        Self { name, outcome, model: None, shards: Vec::new() }
    }

    /// The file's JSON report: [`sarif::scan_json`]'s, or `{"file",
    /// "error"}` for a file that could not be scanned, plus `model` (the
    /// index of a shard) and `shards` (an index's shards) when it has them.
    pub fn json(&self) -> Value {
        let mut v = match &self.outcome {
            Ok(s) => sarif::scan_json(&self.name, s),
            Err(e) => json!({"file": self.name, "format": null, "valid": false, "tensors": 0,
                             "findings": [], "error": e}),
        };
        if let Some(model) = &self.model {
            v["model"] = model.as_str().into();
        }
        if self.outcome.as_ref().is_ok_and(|s| s.format == Format::ShardIndex) {
            v["shards"] = self.shards.clone().into();
        }
        v
    }
}

/// The report of a scan over many files: `{"files": [each file's
/// [`Scanned::json`]], "valid": every file scanned with no findings}`.
pub fn many_json(files: &[Scanned]) -> Value {
    let valid = files.iter().all(|f| f.outcome.as_ref().is_ok_and(Scan::is_valid));
    let reports: Vec<Value> = files.iter().map(Scanned::json).collect();
    json!({"files": reports, "valid": valid})
}

/// Scans every file `paths` name ([`super::expand`]) with `scan_file`,
/// each once. In a directory (or with `models_only`, anywhere), a file of
/// no format the scanner knows is not a model and is left out. Each shard
/// index's shards are scanned too (listed after the files, when no path
/// named them) and the index is checked against its folder: its findings
/// gain the shards missing, unnamed, or not holding what it maps to them.
pub fn scan_paths(
    paths: &[PathBuf],
    models_only: bool,
    scan_file: impl FnMut(&str) -> Result<Scan, String>,
) -> std::io::Result<Vec<Scanned>> {
    Ok(scan_listed(super::expand(paths)?, models_only, scan_file))
}

/// [`scan_paths`] over files already listed: for a host that lists more
/// than local folders (a store's prefix, its objects `in_dir`).
pub fn scan_listed(
    listed: Vec<super::Listed>,
    models_only: bool,
    mut scan_file: impl FnMut(&str) -> Result<Scan, String>,
) -> Vec<Scanned> {
    let mut files = Vec::new();
    for super::Listed { name, in_dir } in listed {
        let outcome = scan_file(&name);
        let unknown = outcome.as_ref().is_ok_and(|s| s.format == Format::Unknown);
        if !((in_dir || models_only) && unknown) {
            files.push(Scanned::new(name, outcome));
        }
    }
    let mut keys = None;
    for i in 0..files.len() {
        let index = match &files[i].outcome {
            Ok(Scan { shard_index: Some(index), .. }) => index.clone(),
            _ => continue,
        };
        let keys = keys.get_or_insert_with(|| Keys::of(&files));
        let findings = check_index(i, &index, &mut files, keys, &mut scan_file);
        if let Ok(s) = &mut files[i].outcome {
            s.add_findings(findings);
        }
    }
    files
}

/// A path as a key that two spellings of one local file share: its
/// canonical form, or where there is none (a URI, a missing file, WASI,
/// which cannot canonicalize) the path with `.` components and repeated
/// `/` dropped.
fn key(name: &str) -> PathBuf {
    std::fs::canonicalize(name).unwrap_or_else(|_| Path::new(name).components().collect())
}

/// The files scanned so far by [`key`], so that finding one costs a
/// lookup, not a pass over every file.
struct Keys(BTreeMap<PathBuf, usize>);

impl Keys {
    fn of(files: &[Scanned]) -> Self {
        Self(files.iter().enumerate().map(|(i, f)| (key(&f.name), i)).collect())
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.0.get(&key(name)).copied()
    }
}

fn is_uri(name: &str) -> bool {
    name.contains("://")
}

/// Finds (or scans) each shard the index at `files[at]` names, marks them
/// as its shards, and returns [`shards::check`]'s findings.
fn check_index(
    at: usize,
    index: &ShardIndex,
    files: &mut Vec<Scanned>,
    keys: &mut Keys,
    scan_file: &mut impl FnMut(&str) -> Result<Scan, String>,
) -> Vec<crate::scan::Finding> {
    let folder = Path::new(&files[at].name).parent().unwrap_or(Path::new("")).to_path_buf();
    let mut found = BTreeMap::new();
    let mut formats = BTreeSet::new();
    for shard in index.shards() {
        let path = folder.join(shard).to_string_lossy().into_owned();
        let pos = match keys.find(&path) {
            Some(p) => Some(p),
            None if is_uri(&path) || Path::new(&path).is_file() => {
                let outcome = scan_file(&path);
                files.push(Scanned::new(path.clone(), outcome));
                keys.0.insert(key(&path), files.len() - 1);
                Some(files.len() - 1)
            }
            None => None,
        };
        let state = match pos {
            None => Shard::Missing,
            Some(p) => {
                files[p].model = Some(files[at].name.clone());
                let shard_name = files[p].name.clone();
                files[at].shards.push(shard_name);
                let scanned = files[p].outcome.as_ref().ok();
                formats.extend(scanned.map(|s| s.format.as_str()));
                Shard::Present(scanned.and_then(Scan::tensor_names))
            }
        };
        found.insert(shard.to_string(), state);
    }
    let unnamed = unnamed_models(&folder, &files[at].name, index, &formats, files, keys, scan_file);
    shards::check(index, &found, &unnamed)
}

/// The files in `folder` (not below it) of one of the shards' `formats`
/// that the index does not name, by file name; none for a URI's folder.
fn unnamed_models(
    folder: &Path,
    index_name: &str,
    index: &ShardIndex,
    formats: &BTreeSet<&str>,
    files: &[Scanned],
    keys: &Keys,
    scan_file: &mut impl FnMut(&str) -> Result<Scan, String>,
) -> Vec<String> {
    if is_uri(index_name) || formats.is_empty() {
        return Vec::new();
    }
    let dir = if folder.as_os_str().is_empty() { Path::new(".") } else { folder };
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let named = index.shards();
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !named.contains(n.as_str()))
        .collect();
    names.sort();
    let index_key = key(index_name);
    names.retain(|n| {
        let path = folder.join(n).to_string_lossy().into_owned();
        if key(&path) == index_key {
            return false;
        }
        let format = match keys.find(&path) {
            Some(i) => files[i].outcome.as_ref().ok().map(|s| s.format),
            None => scan_file(&path).ok().map(|s| s.format),
        };
        format.is_some_and(|f| formats.contains(f.as_str()))
    });
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{RuleId, ScanOptions, scan};
    use crate::source::SliceSource;

    fn scan_local(name: &str) -> Result<Scan, String> {
        let bytes = std::fs::read(name).map_err(|e| e.to_string())?;
        let options = ScanOptions { name: Some(name), ..ScanOptions::default() };
        scan(&mut SliceSource::new(&bytes), &options).map_err(|e| e.to_string())
    }

    /// A safetensors file holding one U8 tensor per name.
    fn safetensors(names: &[&str]) -> Vec<u8> {
        let entries: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                alloc::format!(
                    "\"{n}\":{{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[{i},{}]}}",
                    i + 1
                )
            })
            .collect();
        let mut json = alloc::format!("{{{}}}", entries.join(",")).into_bytes();
        while json.len() % 8 != 0 {
            json.push(b' ');
        }
        let mut out = (json.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&json);
        out.extend(core::iter::repeat_n(0u8, names.len()));
        out
    }

    #[test]
    fn an_index_and_its_shards_are_one_model() {
        let dir = tempfile_dir("shards");
        let index =
            br#"{"metadata": {}, "weight_map": {"a": "m-1.safetensors", "b": "m-1.safetensors",
            "c": "m-2.safetensors", "d": "m-3.safetensors", "e": "../out.safetensors"}}"#;
        std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
        std::fs::write(dir.join("m-1.safetensors"), safetensors(&["a"])).unwrap();
        std::fs::write(dir.join("m-2.safetensors"), safetensors(&["c"])).unwrap();
        std::fs::write(dir.join("stale.safetensors"), safetensors(&["z"])).unwrap();
        std::fs::write(dir.join("README.md"), b"# a model").unwrap();

        // The directory: each file once, the shards marked as the index's.
        let files = scan_paths(core::slice::from_ref(&dir), false, scan_local).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.rsplit('/').next().unwrap()).collect();
        assert_eq!(
            names,
            [
                "m-1.safetensors",
                "m-2.safetensors",
                "model.safetensors.index.json",
                "stale.safetensors"
            ]
        );
        let index_report = files[2].json();
        let rules: Vec<&str> = index_report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["rule"].as_str().unwrap())
            .collect();
        assert_eq!(rules, ["IDX-003", "IDX-004", "IDX-005", "IDX-006"], "{index_report}");
        assert_eq!(index_report["format"], "shard-index");
        assert_eq!(index_report["shards"].as_array().unwrap().len(), 2);
        assert_eq!(files[0].json()["model"], index_report["file"]);
        assert!(files[3].model.is_none());

        // The index named alone brings its shards, scanned once each.
        let index_path = dir.join("model.safetensors.index.json");
        let files =
            scan_paths(&[index_path.clone(), dir.join("m-1.safetensors")], false, scan_local)
                .unwrap();
        assert_eq!(files.len(), 3, "{files:?}");
        let s = files[0].outcome.as_ref().unwrap();
        assert!(s.findings.iter().any(|f| f.rule == RuleId::IdxUnnamedShard));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(alloc::format!("tzr-models-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
