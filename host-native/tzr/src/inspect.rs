//! `tzr inspect`: the header, totals by dtype, and one row per tensor.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use tensorizer_core::totals::{Totals, top_module};
use tensorizer_core::{MetadataEntry, PathComponent, TensorPath};
use tensorizer_native::{Intent, ReadOptions, Reader, open_uri};

use crate::Outcome;
use crate::text::{human, printable};

/// Most top-level modules the text output lists (largest first).
const MAX_MODULES: usize = 50;

#[derive(Serialize)]
struct Report {
    file: String,
    file_bytes: u64,
    data_version: u32,
    encrypted: bool,
    versioned_headers: bool,
    tensor_count: usize,
    data_bytes: u64,
    metadata_index_bytes: u64,
    by_dtype: BTreeMap<String, DtypeTotal>,
    /// Tensors, parameters and bytes in all, by dtype and by top-level
    /// module ([`Totals::to_json`], as the browser inspector shows them).
    totals: serde_json::Value,
    tensors: Vec<Row>,
}

#[derive(Serialize, Default)]
struct DtypeTotal {
    tensors: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct Row {
    name: String,
    path: Vec<serde_json::Value>,
    tensor_type: String,
    dtype: String,
    dtype_string: String,
    shape: Vec<u64>,
    bytes: u64,
    data_length: u64,
    meta: bool,
    header_offset: u64,
    data_offset: u64,
}

fn row(e: &MetadataEntry) -> Row {
    let path = match &e.path {
        TensorPath::Plain(s) => vec![serde_json::Value::from(s.clone())],
        TensorPath::Structured(c) => c
            .iter()
            .map(|p| match p {
                PathComponent::Key(k) => serde_json::Value::from(k.clone()),
                PathComponent::Index(i) => serde_json::Value::from(*i),
            })
            .collect(),
    };
    Row {
        name: e.path.to_string(),
        path,
        tensor_type: e.tensor_type.to_string(),
        dtype: e.dtype.to_string(),
        dtype_string: e.dtype.as_str().to_string(),
        shape: e.shape.clone(),
        bytes: e.nbytes(),
        data_length: e.data_length,
        meta: e.is_meta(),
        header_offset: e.header_offset,
        data_offset: e.data_offset,
    }
}

pub(crate) fn run(file: &Path, json: bool) -> Outcome {
    // Only the header and index: a network source fetches no more than its first MiB.
    let source = open_uri(&file.to_string_lossy(), Intent::Peek)?;
    if crate::checkpoint::is_checkpoint(&source)? {
        return crate::checkpoint::inspect(file, source, json);
    }
    let reader = Reader::new(source, ReadOptions::default())?;
    let h = reader.header();
    let mut totals = Totals::new();
    for e in reader.entries() {
        totals.add(&top_module(&e.path), &e.dtype.to_string(), &e.shape, e.nbytes(), e.data_length);
    }
    let by_dtype =
        totals.by_dtype.iter().map(|(k, t)| (k.clone(), DtypeTotal { tensors: t.tensors, bytes: t.bytes })).collect();
    let report = Report {
        file: file.display().to_string(),
        file_bytes: tensorizer_native::RangeSource::len(reader.source()),
        data_version: h.version,
        encrypted: h.has_crypt_info(),
        versioned_headers: h.versioned_headers(),
        tensor_count: reader.entries().len(),
        data_bytes: h.tensor_size,
        metadata_index_bytes: h.metadata_len,
        by_dtype,
        totals: totals.to_json(),
        tensors: reader.entries().iter().map(row).collect(),
    };
    if json {
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
        return Ok(());
    }
    out!("{}", printable(&report.file));
    out!(
        "  data version {}{}{}, {} tensors, {} of data, {}-byte index, {} file",
        report.data_version,
        if report.encrypted { ", encrypted" } else { "" },
        if report.versioned_headers { ", long dimensions" } else { "" },
        report.tensor_count,
        human(report.data_bytes),
        report.metadata_index_bytes,
        human(report.file_bytes),
    );
    out!("\n  {:<18} {:>8} {:>16} {:>12}", "dtype", "tensors", "params", "bytes");
    for (dtype, t) in totals.by_dtype.iter().chain([(&"all".to_string(), &totals.all)]) {
        out!("  {dtype:<18} {:>8} {:>16} {:>12}", t.tensors, t.params, human(t.bytes));
    }
    out!("\n  {:<18} {:>8} {:>16} {:>12}", "module", "tensors", "params", "bytes");
    let mut modules: Vec<_> = totals.by_module.iter().collect();
    modules.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then_with(|| a.0.cmp(b.0)));
    for (module, t) in modules.iter().take(MAX_MODULES) {
        out!("  {:<18} {:>8} {:>16} {:>12}", printable(module), t.tensors, t.params, human(t.bytes));
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
    for (i, (r, name)) in report.tensors.iter().zip(&names).enumerate() {
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
