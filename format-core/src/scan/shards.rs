//! Sharded checkpoint indexes (`model.safetensors.index.json`,
//! `pytorch_model.bin.index.json`): a JSON object whose `weight_map` maps
//! each tensor name to the shard file holding it, relative to the index's
//! folder. A loader opens every shard the map names, so the index and its
//! shards are one model: [`scan`] reads the index itself (its JSON, and
//! shard paths that leave the folder), and [`check`] compares it with the
//! shards a host found beside it (missing shards, shards the index does
//! not name, tensors a shard does not hold). The host does the file
//! system work; `crate::walk` does it for local paths.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde_json::Value;

use super::{Finding, Findings, RuleId, shown};
use crate::error::Result;
use crate::layout::MAX_SHARD_INDEX_LEN;
use crate::source::RandomAccess;

/// What a shard index maps: tensor name to shard path (as written), in
/// name order, leaving out paths that leave the index's folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardIndex {
    /// Tensor name to shard path.
    pub weight_map: BTreeMap<String, String>,
}

impl ShardIndex {
    /// The shard paths the index names, each once, sorted.
    pub fn shards(&self) -> BTreeSet<&str> {
        self.weight_map.values().map(String::as_str).collect()
    }
}

/// Whether a file's first bytes look like a shard index: a JSON object
/// (after white space) that names `weight_map` in `head`.
pub fn sniff(head: &[u8]) -> bool {
    let text = head.trim_ascii_start();
    text.starts_with(b"{") && text.windows(12).any(|w| w == b"\"weight_map\"")
}

/// Reads the index in `src` (whole: at most [`MAX_SHARD_INDEX_LEN`]
/// bytes). Its problems are findings; `None` when it could not be read as
/// an index.
pub fn scan<R: RandomAccess + ?Sized>(
    src: &mut R,
    findings: &mut Findings,
) -> Result<Option<ShardIndex>> {
    let len = src.len();
    if len > MAX_SHARD_INDEX_LEN {
        let message = format!(
            "the shard index is {len} bytes, above the {MAX_SHARD_INDEX_LEN}-byte limit; its shards were not checked"
        );
        findings.push(Finding::new(RuleId::IdxLimit, Some(0), message));
        return Ok(None);
    }
    let bytes = super::read_vec(src, 0, len, "shard index")?;
    Ok(parse(&bytes, findings))
}

/// Parses an index's bytes (see [`scan`]).
pub fn parse(bytes: &[u8], findings: &mut Findings) -> Option<ShardIndex> {
    let malformed = |findings: &mut Findings, why: String| {
        findings.push(Finding::new(RuleId::IdxMalformed, Some(0), why));
        None
    };
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return malformed(findings, format!("the shard index is not JSON: {e}")),
    };
    let Some(map) = value.get("weight_map").and_then(Value::as_object) else {
        return malformed(findings, "the shard index has no weight_map object".into());
    };
    let mut index = ShardIndex::default();
    let mut escaping = BTreeSet::new();
    for (tensor, shard) in map {
        let Some(shard) = shard.as_str() else {
            let why = format!("tensor {} maps to a value that is not a file name", shown(tensor));
            findings.push(Finding::new(RuleId::IdxMalformed, Some(0), why).in_tensor(tensor));
            continue;
        };
        if leaves_folder(shard) {
            escaping.insert(shard);
        } else {
            index.weight_map.insert(tensor.clone(), shard.into());
        }
    }
    for shard in escaping {
        let why = format!("shard path {} leaves the index's folder", shown(shard));
        findings.push(Finding::new(RuleId::IdxPathEscape, Some(0), why));
    }
    Some(index)
}

/// Whether a shard path names a file outside the index's folder: empty,
/// absolute (`/`, `\`, a drive letter), or with a `..` component. A loader
/// joins it to the folder as it is, so any of these reads elsewhere.
pub fn leaves_folder(path: &str) -> bool {
    let b = path.as_bytes();
    path.is_empty()
        || b[0] == b'/'
        || b[0] == b'\\'
        || (b.len() >= 2 && b[1] == b':')
        || path.split(['/', '\\']).any(|c| c == "..")
}

/// What a host found of one shard the index names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shard {
    /// No such file beside the index.
    Missing,
    /// The file, with the tensor names it holds when its format lists them
    /// (`None`: not known, e.g. a checkpoint that did not parse).
    Present(Option<BTreeSet<String>>),
}

/// The findings of comparing `index` with what was found beside it: each
/// shard it names (`shards`, by path as written) and the model files in
/// its folder it does not name (`unnamed`). Sorted as a scan's are.
pub fn check(
    index: &ShardIndex,
    shards: &BTreeMap<String, Shard>,
    unnamed: &[String],
) -> Vec<Finding> {
    let mut findings = Findings::default();
    for shard in index.shards() {
        if matches!(shards.get(shard), Some(Shard::Missing) | None) {
            let why = format!("shard {} named by the index is not in its folder", shown(shard));
            findings.push(Finding::new(RuleId::IdxMissingShard, None, why));
        }
    }
    for name in unnamed {
        let why = format!("{} in the index's folder is not named by the index", shown(name));
        findings.push(Finding::new(RuleId::IdxUnnamedShard, None, why));
    }
    for (tensor, shard) in &index.weight_map {
        if let Some(Shard::Present(Some(held))) = shards.get(shard.as_str())
            && !held.contains(tensor)
        {
            let why = format!("the index maps it to {}, which does not hold it", shown(shard));
            findings.push_lazy(RuleId::IdxTensorNotInShard, || {
                Finding::new(RuleId::IdxTensorNotInShard, None, why).in_tensor(tensor)
            });
        }
    }
    findings.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(findings: &[Finding]) -> Vec<RuleId> {
        findings.iter().map(|f| f.rule).collect()
    }

    #[test]
    fn an_index_is_sniffed_parsed_and_its_escaping_paths_found() {
        let json = br#"{"metadata": {"total_size": 8},
            "weight_map": {"a": "m-1.safetensors", "b": "../x.safetensors", "c": "/etc/passwd",
                           "d": "m-1.safetensors", "e": "C:\\w.bin", "f": 3}}"#;
        assert!(sniff(json) && !sniff(b"[\"weight_map\"]") && !sniff(b"{\"a\": 1}"));
        let mut findings = Findings::default();
        let index = parse(json, &mut findings).unwrap();
        assert_eq!(index.shards().into_iter().collect::<Vec<_>>(), ["m-1.safetensors"]);
        let found = findings.finish();
        assert_eq!(
            rules(&found),
            [
                RuleId::IdxMalformed,
                RuleId::IdxPathEscape,
                RuleId::IdxPathEscape,
                RuleId::IdxPathEscape
            ]
        );
        assert!(found.iter().any(|f| f.message.contains("\"../x.safetensors\"")), "{found:?}");
        let mut findings = Findings::default();
        assert_eq!(parse(b"{\"weight_map\": [1]}", &mut findings), None);
        assert_eq!(parse(b"{\"weight_map\"", &mut findings), None);
        assert_eq!(rules(&findings.finish()), [RuleId::IdxMalformed, RuleId::IdxMalformed]);
        for ok in ["a.bin", "sub/a..b.bin", "..a"] {
            assert!(!leaves_folder(ok), "{ok}");
        }
        for bad in ["", "../a", "a/../../b", "/a", "\\a", "a\\..\\b", "D:a"] {
            assert!(leaves_folder(bad), "{bad}");
        }
    }

    #[test]
    fn an_index_larger_than_the_limit_is_a_finding() {
        struct Huge;
        impl RandomAccess for Huge {
            fn len(&self) -> u64 {
                MAX_SHARD_INDEX_LEN + 1
            }
            fn read_exact_at(
                &mut self,
                _: u64,
                _: &mut [u8],
            ) -> core::result::Result<(), crate::source::ReadError> {
                unreachable!("a file over the limit is not read")
            }
        }
        let mut findings = Findings::default();
        assert_eq!(scan(&mut Huge, &mut findings).unwrap(), None);
        assert_eq!(rules(&findings.finish()), [RuleId::IdxLimit]);
    }

    #[test]
    fn shards_are_compared_with_what_the_host_found() {
        let mut findings = Findings::default();
        let json = br#"{"weight_map": {"a": "s1", "b": "s1", "c": "s2", "d": "s3"}}"#;
        let index = parse(json, &mut findings).unwrap();
        let held =
            |names: &[&str]| Shard::Present(Some(names.iter().map(|n| (*n).into()).collect()));
        let shards = BTreeMap::from([
            ("s1".into(), held(&["a"])),
            ("s2".into(), Shard::Missing),
            ("s3".into(), Shard::Present(None)),
        ]);
        let found = check(&index, &shards, &["s4".into()]);
        assert_eq!(
            rules(&found),
            [RuleId::IdxMissingShard, RuleId::IdxUnnamedShard, RuleId::IdxTensorNotInShard]
        );
        assert_eq!(found[2].tensor.as_deref(), Some("b"));
        let shards = BTreeMap::from([
            ("s1".into(), held(&["a", "b"])),
            ("s2".into(), held(&["c", "x"])),
            ("s3".into(), held(&["d"])),
        ]);
        assert!(check(&index, &shards, &[]).is_empty());
    }
}
