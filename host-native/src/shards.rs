//! A model stored as several files (a Hugging Face folder): which files to
//! load, from a folder or a `*.index.json` (local or a URI), and the check
//! that the shards hold what the index says. The index is read by the
//! core's parser ([`tensorizer_core::scan::shards`], the scanner's too),
//! bounded by [`MAX_SHARD_INDEX_LEN`]; any of its findings refuses the load.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use tensorizer_core::layout::MAX_SHARD_INDEX_LEN;
use tensorizer_core::scan::shards::{self as core_shards, Shard, ShardIndex};
use tensorizer_core::scan::{Finding, Findings};

use tensorizer_core::KeySource;
use tensorizer_core::walk::{self, Listed};

use crate::convert::fingerprint::listing;
use crate::convert::{Format, Input, Opened};
use crate::error::{Error, Result};
use crate::source::{Intent, RangeSource};
use crate::store::open_uri;

/// A shard as opened: any source [`open_uri`] gives.
pub type ShardSource = Box<dyn RangeSource>;

/// The index file names a folder is searched for, in order of preference.
const INDEX_SUFFIXES: [&str; 2] = [".safetensors.index.json", ".bin.index.json"];

/// The files of one model, and what its index maps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardedModel {
    /// Where the model was found, as given: a folder, an index or a store
    /// prefix.
    pub location: String,
    /// The index the shards come from (`None`: a folder of safetensors
    /// files without one).
    pub index: Option<String>,
    /// Each shard's location (a path or a URI), each once, in name order.
    pub shards: Vec<String>,
    /// Tensor name to the shard location holding it (empty without an index).
    pub weight_map: BTreeMap<String, String>,
}

/// Whether `location` is a local folder holding a model at its top: a
/// shard index or a `*.safetensors` file. (A command that walks folders
/// file by file takes such a folder as one model.)
pub fn is_model_folder(location: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(location) else { return false };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .any(|n| n.ends_with(".safetensors") || INDEX_SUFFIXES.iter().any(|s| n.ends_with(s)))
}

/// Whether `location` names a sharded model: a local folder, a file or
/// URI whose name ends in `.index.json`, or a store prefix (a URI ending
/// in `/`).
pub fn is_sharded(location: &str) -> bool {
    location.ends_with(".index.json") || is_prefix_uri(location) || Path::new(location).is_dir()
}

/// Whether `location` is a URI ending in `/`: a prefix of a store's
/// objects (an HTTP one is refused when opened: HTTP cannot list).
fn is_prefix_uri(location: &str) -> bool {
    location.contains("://") && location.ends_with('/') && !location.starts_with("redis")
}

/// What a scan of `paths` reads (`tzr scan`, Python's `scan`), each file
/// once: a local path as the core lists it ([`walk::expand`]: a folder's
/// files recursively), and a store prefix (a URI ending in `/`) as the
/// objects directly under it, listed as a folder's files are (one of no
/// known format is left out, not reported).
pub fn scan_listing(paths: &[PathBuf]) -> Result<Vec<Listed>> {
    let mut out = Vec::new();
    for path in paths {
        let text = path.to_string_lossy();
        if is_prefix_uri(&text) {
            let objects = crate::store::list_prefix(&text)?;
            out.extend(objects.into_iter().map(|name| Listed { name, in_dir: true }));
        } else {
            let listed = walk::expand(core::slice::from_ref(path))
                .map_err(|e| Error::File { file: text.into_owned(), source: e })?;
            out.extend(listed);
        }
    }
    let mut seen = BTreeSet::new();
    out.retain(|l| seen.insert(l.name.clone()));
    Ok(out)
}

/// The shards of the model at `location` (see [`is_sharded`]). A folder
/// or store prefix with an index loads what the index names; one without
/// loads its `*.safetensors` files. A prefix is listed one level deep
/// ([`crate::store::list_prefix`]).
pub fn open_sharded(location: &str) -> Result<ShardedModel> {
    if location.ends_with(".index.json") {
        return from_index(location);
    }
    let mut found: Vec<String> = if is_prefix_uri(location) {
        crate::store::list_prefix(location)?
    } else {
        let dir = Path::new(location);
        std::fs::read_dir(dir)
            .map_err(|e| Error::File { file: location.to_string(), source: e })?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .map(|n| dir.join(n).to_string_lossy().into_owned())
            .collect()
    };
    found.sort();
    for suffix in INDEX_SUFFIXES {
        if let Some(index) = found.iter().find(|n| n.ends_with(suffix)) {
            let model = from_index(index)?;
            return Ok(ShardedModel { location: location.to_string(), ..model });
        }
    }
    let shards: Vec<String> = found.into_iter().filter(|n| n.ends_with(".safetensors")).collect();
    if shards.is_empty() {
        let what = if is_prefix_uri(location) { "under this prefix" } else { "in this folder" };
        return Err(Error::Invalid(format!(
            "{location}: no *.safetensors file and no *.index.json {what}"
        )));
    }
    Ok(ShardedModel {
        location: location.to_string(),
        index: None,
        shards,
        weight_map: BTreeMap::new(),
    })
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
    Ok(ShardedModel {
        location: index.to_string(),
        index: Some(index.to_string()),
        shards,
        weight_map,
    })
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

/// Most shards of one model loaded at once. The reader threads are split
/// evenly among them, so a folder loads on no more threads than one file
/// does, and cold reads share the process's one device queue, oldest load
/// first (`read::turns`): what runs at once is the next shard's opening,
/// allocation and faulting in of fresh memory beside this one's reads, and
/// its reads start as this one's drain (spec §26.5).
pub const MAX_SHARDS_AT_ONCE: usize = 4;

/// How a load of `shards` shards with `readers` reader threads in all
/// (`None`: [`crate::default_readers`]) runs: `(shards at once, readers
/// each)`. A cooperative load takes one shard at a time: its collectives
/// must come in the same order on every rank.
pub fn parallel_loads(shards: usize, readers: Option<usize>, cooperative: bool) -> (usize, usize) {
    let readers = readers.unwrap_or_else(crate::default_readers).max(1);
    let at_once = if cooperative { 1 } else { MAX_SHARDS_AT_ONCE.min(shards).min(readers).max(1) };
    (at_once, (readers / at_once).max(1))
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

/// A sharded model with every shard opened (headers and indexes read, no
/// tensor data): one input for conversion and fingerprints
/// ([`crate::convert::Input::Shards`]).
pub struct OpenedShards {
    /// The files, and what the index maps.
    pub model: ShardedModel,
    files: Vec<Opened<ShardSource>>,
}

impl OpenedShards {
    /// Opens the model at `location` ([`open_sharded`]) and each shard, as
    /// its first bytes say; `key` decrypts encrypted tensorizer shards,
    /// whose stored hashes are checked as they stream when `verify` is set.
    pub fn open(location: &str, key: Option<KeySource>, verify: bool) -> Result<Self> {
        let model = open_sharded(location)?;
        if model.shards.is_empty() {
            return Err(Error::Invalid(format!("{location}: the index names no shard")));
        }
        let files = model
            .shards
            .iter()
            .map(|shard| Opened::open(open_uri(shard, Intent::Peek)?, key.clone(), verify))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { model, files })
    }

    /// Calls `f` with the shards as one input, in the model's order.
    pub fn with_input<R>(&self, f: impl FnOnce(Input<'_, ShardSource>) -> R) -> R {
        let shards: Vec<Input<'_, ShardSource>> = self.files.iter().map(Opened::input).collect();
        f(Input::Shards { model: &self.model, shards: &shards })
    }
}

/// One shard as its header lists it (no tensor data read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSummary {
    /// The shard's location.
    pub location: String,
    /// Its format.
    pub format: Format,
    /// Its length in bytes.
    pub file_bytes: u64,
    /// Its tensors, in file order.
    pub tensors: Vec<TensorSummary>,
}

/// One tensor of a [`ShardSummary`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSummary {
    /// The flat dotted name.
    pub name: String,
    /// The dtype (torch's name, or the stored one where torch has none).
    pub dtype: String,
    /// The shape.
    pub shape: Vec<u64>,
    /// Data bytes.
    pub bytes: u64,
}

impl OpenedShards {
    /// Each shard's tensors, the shards checked against the index (as a
    /// conversion checks them).
    pub fn survey(&self) -> Result<Vec<ShardSummary>> {
        let (items, _) = self.with_input(|input| listing(&input))?;
        let mut out: Vec<ShardSummary> = self
            .files
            .iter()
            .zip(&self.model.shards)
            .map(|(f, location)| {
                let input = f.input();
                ShardSummary {
                    location: location.clone(),
                    format: input.format(),
                    file_bytes: input.len(),
                    tensors: Vec::new(),
                }
            })
            .collect();
        for t in items {
            let Some(shard) = out.get_mut(t.shard) else { continue };
            let dtype = t
                .spec
                .dtype
                .element()
                .map_or_else(|| t.spec.dtype.to_string(), |e| e.torch_name().to_string());
            shard.tensors.push(TensorSummary {
                name: t.spec.path.dotted_name(),
                dtype,
                shape: t.spec.shape,
                bytes: t.len,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_at_once_never_use_more_readers_than_one_file() {
        assert_eq!(parallel_loads(8, Some(8), false), (4, 2));
        assert_eq!(parallel_loads(8, Some(16), false), (4, 4));
        assert_eq!(parallel_loads(2, Some(8), false), (2, 4));
        assert_eq!(parallel_loads(8, Some(3), false), (3, 1));
        assert_eq!(parallel_loads(4, Some(2), false), (2, 1));
        assert_eq!(parallel_loads(8, Some(0), false), (1, 1));
        assert_eq!(parallel_loads(0, Some(4), false), (1, 4));
        assert_eq!(parallel_loads(8, Some(8), true), (1, 8));
        let (at_once, each) = parallel_loads(5, None, false);
        assert!(at_once * each <= crate::default_readers().max(1));
    }
}
