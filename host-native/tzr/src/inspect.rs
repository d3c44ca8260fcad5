//! `tzr inspect`: the header, totals by dtype, and one row per tensor.

use std::path::Path;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;
use tensorizer_core::report::{self, HeaderSummary, Members, TensorRow};
use tensorizer_core::totals::Totals;
use tensorizer_native::shards::{OpenedShards, ShardSummary};
use tensorizer_native::{Intent, ReadOptions, Reader, open_uri, shards};

use crate::text::{human, printable};
use crate::{Failure, Outcome};

/// Most top-level modules the text output lists (largest first).
const MAX_MODULES: usize = 50;

/// The `--json` document: the core's header summary and rows
/// ([`tensorizer_core::report`], the same the validator's report shows),
/// with the file's name and totals.
struct Report {
    file: String,
    header: HeaderSummary,
    totals: Totals,
    tensors: Vec<TensorRow>,
}

/// A JSON object whose members keep the order given.
struct Ordered(Members);

impl Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Report {
    fn json(&self) -> Ordered {
        let by_dtype = self.totals.by_dtype.iter().map(|(k, t)| (k.clone(), t.to_json())).collect();
        let mut members = vec![("file", Value::from(self.file.as_str()))];
        members.extend(self.header.members());
        members.push(("by_dtype", Value::Object(by_dtype)));
        members.push(("totals", self.totals.to_json()));
        let rows = self
            .tensors
            .iter()
            .map(|r| serde_json::to_value(Ordered(r.members())).unwrap_or_default());
        members.push(("tensors", Value::Array(rows.collect())));
        Ordered(members)
    }
}

pub(crate) fn run(file: &Path, json: bool) -> Outcome {
    let name = file.to_string_lossy();
    if shards::is_sharded(&name) {
        return model(&name, json);
    }
    // Only the header and index: a network source fetches no more than its first MiB.
    let source = open_uri(&file.to_string_lossy(), Intent::Peek)?;
    if crate::checkpoint::is_checkpoint(&source)? {
        return crate::checkpoint::inspect(file, source, json);
    }
    if crate::safetensors::is_safetensors(&source)? {
        return crate::safetensors::inspect(file, source, json);
    }
    if crate::gguf::is_gguf(&source)? {
        return crate::gguf::inspect(file, source, json);
    }
    let reader = Reader::new(source, ReadOptions::default())?;
    let entries = reader.entries();
    let file_bytes = tensorizer_native::RangeSource::len(reader.source());
    // safetensors files went to their own inspector above.
    let Some(header) = reader.header() else {
        return Err(Failure::Usage(format!("{}: not a tensorizer file", file.display())));
    };
    let report = Report {
        file: file.display().to_string(),
        header: HeaderSummary::of(header, entries.len(), file_bytes),
        totals: report::totals(entries),
        tensors: entries.iter().enumerate().map(|(i, e)| TensorRow::of(i, e)).collect(),
    };
    if json {
        out!("{}", serde_json::to_string_pretty(&report.json()).unwrap_or_default());
        return Ok(());
    }
    let (h, totals) = (&report.header, &report.totals);
    out!("{}", printable(&report.file));
    out!(
        "  data version {}{}{}, {} tensors, {} of data, {}-byte index, {} file",
        h.data_version,
        if h.encrypted { ", encrypted" } else { "" },
        if h.versioned_headers { ", long dimensions" } else { "" },
        h.tensor_count,
        human(h.data_bytes),
        h.metadata_index_bytes,
        human(h.file_bytes),
    );
    out!("\n  {:<18} {:>8} {:>16} {:>12}", "dtype", "tensors", "params", "bytes");
    for (dtype, t) in totals.by_dtype.iter().chain([(&"all".to_string(), &totals.all)]) {
        out!("  {dtype:<18} {:>8} {:>16} {:>12}", t.tensors, t.params, human(t.bytes));
    }
    out!("\n  {:<18} {:>8} {:>16} {:>12}", "module", "tensors", "params", "bytes");
    let mut modules: Vec<_> = totals.by_module.iter().collect();
    modules.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then_with(|| a.0.cmp(b.0)));
    for (module, t) in modules.iter().take(MAX_MODULES) {
        out!(
            "  {:<18} {:>8} {:>16} {:>12}",
            printable(module),
            t.tensors,
            t.params,
            human(t.bytes)
        );
    }
    if modules.len() > MAX_MODULES {
        out!("  ({} more modules; --json lists all)", modules.len() - MAX_MODULES);
    }
    let names: Vec<String> = report.tensors.iter().map(|r| printable(&r.name)).collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(4).clamp(4, 60);
    out!(
        "\n  {:>5}  {:<width$}  {:<10}  {:<16}  {:<20}  {:>10}  {:>12}  {:>12}",
        "#",
        "name",
        "type",
        "dtype",
        "shape",
        "bytes",
        "header@",
        "data@"
    );
    for (r, name) in report.tensors.iter().zip(&names) {
        let i = r.index;
        let shape = format!("{:?}", r.shape);
        let bytes = if r.meta { format!("meta {}", human(r.bytes)) } else { human(r.bytes) };
        out!(
            "  {i:>5}  {:<width$}  {:<10}  {:<16}  {:<20}  {bytes:>10}  {:>12}  {:>12}",
            name,
            r.tensor_type,
            r.dtype,
            shape,
            r.header_offset,
            r.data_offset
        );
    }
    Ok(())
}

/// Tensors and data bytes, totalled.
#[derive(Default, Clone, Copy)]
struct Count {
    tensors: u64,
    bytes: u64,
}

impl Count {
    fn add(&mut self, bytes: u64) {
        self.tensors += 1;
        self.bytes = self.bytes.saturating_add(bytes);
    }

    fn json(self) -> Value {
        serde_json::json!({"tensors": self.tensors, "bytes": self.bytes})
    }
}

/// A shard's tensors and data bytes.
fn shard_count(s: &ShardSummary) -> Count {
    let mut c = Count::default();
    s.tensors.iter().for_each(|t| c.add(t.bytes));
    c
}

/// `tzr inspect FOLDER` (or an index): the shards, each with its format,
/// tensors and bytes, the totals and the totals by dtype, the shards
/// checked against the index. Reads only headers and indexes.
fn model(location: &str, json: bool) -> Outcome {
    let opened = OpenedShards::open(location, None, false)?;
    let shards = opened.survey()?;
    let mut all = Count::default();
    let mut by_dtype: std::collections::BTreeMap<&str, Count> = Default::default();
    for t in shards.iter().flat_map(|s| &s.tensors) {
        all.add(t.bytes);
        by_dtype.entry(&t.dtype).or_default().add(t.bytes);
    }
    let file_bytes = shards.iter().fold(0u64, |sum, s| sum.saturating_add(s.file_bytes));
    if json {
        let rows: Vec<Value> = shards
            .iter()
            .map(|s| {
                let c = shard_count(s);
                serde_json::json!({"file": s.location, "format": s.format.name(),
                    "tensors": c.tensors, "data_bytes": c.bytes, "file_bytes": s.file_bytes})
            })
            .collect();
        let dtypes: serde_json::Map<String, Value> =
            by_dtype.iter().map(|(k, c)| ((*k).to_string(), c.json())).collect();
        let doc = serde_json::json!({
            "model": location, "index": opened.model.index, "shards": rows,
            "totals": {"shards": shards.len(), "tensors": all.tensors, "data_bytes": all.bytes,
                       "file_bytes": file_bytes},
            "by_dtype": dtypes,
        });
        out!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    out!("{}", printable(location));
    let index = opened.model.index.as_deref().map(|i| format!(", index {}", printable(i)));
    out!(
        "  {} shards{}, {} tensors, {} of data, {} in files",
        shards.len(),
        index.unwrap_or_default(),
        all.tensors,
        human(all.bytes),
        human(file_bytes)
    );
    out!("\n  {:<48} {:<12} {:>8} {:>12}", "shard", "format", "tensors", "bytes");
    for s in &shards {
        let c = shard_count(s);
        let shown = s.location.rsplit('/').next().unwrap_or(&s.location);
        out!(
            "  {:<48} {:<12} {:>8} {:>12}",
            printable(shown),
            s.format.name(),
            c.tensors,
            human(c.bytes)
        );
    }
    out!("\n  {:<18} {:>8} {:>12}", "dtype", "tensors", "bytes");
    for (dtype, c) in by_dtype.iter().chain([(&"all", &all)]) {
        out!("  {dtype:<18} {:>8} {:>12}", c.tensors, human(c.bytes));
    }
    Ok(())
}
