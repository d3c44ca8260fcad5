//! A model stored as several files (a Hugging Face folder): which files to
//! load, from a folder or a `*.index.json` (local or a URI), and the check
//! that the shards hold what the index says. The index is read by the
//! core's parser ([`tensorizer_core::scan::shards`], the scanner's too),
//! bounded by [`MAX_SHARD_INDEX_LEN`]; any of its findings refuses the load.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use tensorizer_core::layout::MAX_SHARD_INDEX_LEN;
use tensorizer_core::scan::shards::{self as core_shards, Shard, ShardIndex};
use tensorizer_core::scan::{Finding, Findings};

use crate::error::{Error, Result};
use crate::source::{Intent, RangeSource};
use crate::store::open_uri;

/// The index file names a folder is searched for, in order of preference.
const INDEX_SUFFIXES: [&str; 2] = [".safetensors.index.json", ".bin.index.json"];

/// The files of one model, and what its index maps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardedModel {
    /// The index the shards come from (`None`: a folder of safetensors
    /// files without one).
    pub index: Option<String>,
    /// Each shard's location (a path or a URI), each once, in name order.
    pub shards: Vec<String>,
    /// Tensor name to the shard location holding it (empty without an index).
    pub weight_map: BTreeMap<String, String>,
}

/// Whether `location` names a sharded model: a local folder, or a file or
/// URI whose name ends in `.index.json`.
pub fn is_sharded(location: &str) -> bool {
    location.ends_with(".index.json") || Path::new(location).is_dir()
}

/// The shards of the model at `location` (see [`is_sharded`]). A folder
/// with an index loads what the index names; one without loads its
/// `*.safetensors` files.
pub fn open_sharded(location: &str) -> Result<ShardedModel> {
    if location.ends_with(".index.json") {
        return from_index(location);
    }
    let dir = Path::new(location);
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::File { file: location.to_string(), source: e })?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    for suffix in INDEX_SUFFIXES {
        if let Some(index) = names.iter().find(|n| n.ends_with(suffix)) {
            return from_index(&dir.join(index).to_string_lossy());
        }
    }
    let shards: Vec<String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors"))
        .map(|n| dir.join(n).to_string_lossy().into_owned())
        .collect();
    if shards.is_empty() {
        return Err(Error::Invalid(format!(
            "{location}: no *.safetensors file and no *.index.json in this folder"
        )));
    }
    Ok(ShardedModel { index: None, shards, weight_map: BTreeMap::new() })
}

/// The model an index names, its shard paths joined to the index's folder.
fn from_index(index: &str) -> Result<ShardedModel> {
    let source = open_uri(index, Intent::ReadAll)?;
    let len = source.len();
    if len > MAX_SHARD_INDEX_LEN {
        return Err(Error::Invalid(format!(
            "{index}: a shard index of {len} bytes, above the {MAX_SHARD_INDEX_LEN}-byte limit"
        )));
    }
    // At most MAX_SHARD_INDEX_LEN: fits memory and usize.
    let mut bytes = vec![0u8; len as usize];
    source.read_exact_at(0, &mut bytes)?;
    let mut findings = Findings::default();
    let parsed = core_shards::parse(&bytes, &mut findings);
    refuse(index, &findings.finish())?;
    let parsed: ShardIndex = parsed.unwrap_or_default();
    let folder = index.rfind('/').map_or("", |i| &index[..=i]);
    let at = |shard: &str| format!("{folder}{shard}");
    let shards = parsed.shards().into_iter().map(at).collect();
    let weight_map = parsed.weight_map.iter().map(|(t, s)| (t.clone(), at(s))).collect();
    if !index.contains("://") {
        // A local index: a shard it names that is not there is refused
        // before any is loaded.
        let found: BTreeMap<String, Shard> = parsed
            .shards()
            .into_iter()
            .map(|s| {
                (
                    s.to_string(),
                    if Path::new(&at(s)).is_file() { Shard::Present(None) } else { Shard::Missing },
                )
            })
            .collect();
        refuse(index, &core_shards::check(&parsed, &found, &[]))?;
    }
    Ok(ShardedModel { index: Some(index.to_string()), shards, weight_map })
}

/// An error for the first of `findings`, if any.
fn refuse(index: &str, findings: &[Finding]) -> Result<()> {
    match findings.first() {
        Some(f) => {
            let tensor = f.tensor.as_deref().map(|t| format!("tensor {t:?}: ")).unwrap_or_default();
            Err(Error::Invalid(format!("{index}: {tensor}{} ({})", f.message, f.rule)))
        }
        None => Ok(()),
    }
}

impl ShardedModel {
    /// Checks the shards' tensors (`held`: location to the names it holds)
    /// against the index: every tensor the index maps is in its shard. A
    /// tensor held twice, by two shards, is refused with or without an index.
    pub fn check(&self, held: &BTreeMap<String, BTreeSet<String>>) -> Result<()> {
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (shard, names) in held {
            for name in names {
                if let Some(first) = seen.insert(name, shard) {
                    return Err(Error::Invalid(format!(
                        "tensor {name:?} is in two shards: {first} and {shard}"
                    )));
                }
            }
        }
        let Some(index) = &self.index else { return Ok(()) };
        let shown = ShardIndex { weight_map: self.weight_map.clone() };
        let found: BTreeMap<String, Shard> = self
            .shards
            .iter()
            .map(|s| {
                (s.clone(), held.get(s).map_or(Shard::Missing, |n| Shard::Present(Some(n.clone()))))
            })
            .collect();
        refuse(index, &core_shards::check(&shown, &found, &[]))
    }
}
