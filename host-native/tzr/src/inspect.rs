//! `tzr inspect`: the header, totals by dtype, and one row per tensor.

use std::path::Path;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;
use tensorizer_core::report::{self, HeaderSummary, Members, TensorRow};
use tensorizer_core::totals::Totals;
use tensorizer_native::{Intent, ReadOptions, Reader, open_uri};

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
