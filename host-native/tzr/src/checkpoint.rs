//! `tzr inspect` and `verify` for torch.save checkpoints, recognised by
//! their first bytes (never by extension), and `tzr convert`'s output
//! formats.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};
use tensorizer_core::checkpoint::Leaf;
use tensorizer_core::{PathComponent, TensorPath};
use tensorizer_native::RangeSource;
use tensorizer_native::convert::checkpoint::{self, CheckpointReader, mismatch};

use crate::text::{human, printable};
use crate::{Failure, Outcome, progress};

pub(crate) type Source = Box<dyn RangeSource>;

/// Whether `source` starts like a torch checkpoint (zip or legacy).
pub(crate) fn is_checkpoint(source: &Source) -> Result<bool, Failure> {
    let mut head =
        vec![0u8; source.len().min(tensorizer_core::checkpoint::SNIFF_LEN as u64) as usize];
    source.read_exact_at(0, &mut head)?;
    Ok(checkpoint::looks_like_checkpoint(&head, source.len()).is_some())
}

fn path_json(path: &TensorPath) -> Vec<Value> {
    path.components()
        .into_iter()
        .map(|c| match c {
            PathComponent::Key(k) => Value::from(k),
            PathComponent::Index(i) => Value::from(i),
        })
        .collect()
}

#[derive(Serialize)]
struct Row {
    name: String,
    path: Vec<Value>,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dtype: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stride: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    storage: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    storage_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    contiguous: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requires_grad: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<Value>,
}

fn leaf_json(leaf: &Leaf) -> (&'static str, Value) {
    match leaf {
        Leaf::None => ("none", Value::Null),
        Leaf::Bool(b) => ("bool", Value::from(*b)),
        Leaf::Int(i) => {
            ("int", i64::try_from(*i).map_or_else(|_| Value::from(i.to_string()), Value::from))
        }
        Leaf::Float(x) => ("float", Value::from(*x)),
        Leaf::Str(s) => ("str", Value::from(s.clone())),
        Leaf::Bytes(b) => ("bytes", Value::from(hex::encode(b))),
        Leaf::Tensor(_) => ("tensor", Value::Null),
    }
}

pub(crate) fn inspect(file: &Path, source: Source, json_out: bool) -> Outcome {
    let reader = CheckpointReader::new(source)?;
    let storages = reader.storages();
    let mut rows = Vec::new();
    let mut data_bytes = 0u64;
    for (i, e) in reader.entries().iter().enumerate() {
        let name = e.path.to_string();
        let path = path_json(&e.path);
        rows.push(match &e.value {
            Leaf::Tensor(v) => {
                let bytes = v.numel().and_then(|n| n.checked_mul(u64::from(v.dtype.size())));
                data_bytes = data_bytes.saturating_add(bytes.unwrap_or(0));
                let _ = i;
                Row {
                    name,
                    path,
                    kind: "tensor",
                    dtype: Some(v.dtype.torch_name()),
                    shape: Some(v.shape.clone()),
                    stride: Some(v.stride.clone()),
                    storage: Some(storages[v.storage].key.clone()),
                    storage_offset: Some(v.storage_offset),
                    bytes,
                    contiguous: Some(v.is_contiguous()),
                    requires_grad: Some(v.requires_grad),
                    value: None,
                }
            }
            other => {
                let (kind, value) = leaf_json(other);
                Row {
                    name,
                    path,
                    kind,
                    dtype: None,
                    shape: None,
                    stride: None,
                    storage: None,
                    storage_offset: None,
                    bytes: None,
                    contiguous: None,
                    requires_grad: None,
                    value: Some(value),
                }
            }
        });
    }
    let tensors = rows.iter().filter(|r| r.kind == "tensor").count();
    let storage_bytes: u64 = storages.iter().map(|s| s.byte_len).sum();
    let order = match reader.byte_order() {
        tensorizer_core::dtype::ByteOrder::Big => "big",
        _ => "little",
    };
    if json_out {
        let report = json!({
            "file": file.display().to_string(),
            "format": "torch-checkpoint",
            "file_bytes": reader.source().len(),
            "archive": reader.archive().prefix,
            "version": reader.records().version,
            "byteorder": order,
            "entries": rows.len(),
            "tensor_count": tensors,
            "tensor_bytes": data_bytes,
            "storage_bytes": storage_bytes,
            "zip_entries": reader.directory().entries.len(),
            "storages": storages.iter().map(|s| json!({
                "key": s.key,
                "dtype": s.dtype.map(|d| d.torch_name()),
                "numel": s.numel,
                "bytes": s.byte_len,
                "location": s.location,
            })).collect::<Vec<_>>(),
            "tensors": rows,
        });
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
        return Ok(());
    }
    out!("{}", printable(&file.display().to_string()));
    out!(
        "  torch.save checkpoint (archive {:?}, version {}, {order}-endian), {} entries, {tensors} tensors, \
         {} storages ({}), {} file",
        printable(&reader.archive().prefix),
        reader.records().version.map_or_else(|| "?".into(), |v| v.to_string()),
        rows.len(),
        storages.len(),
        human(storage_bytes),
        human(reader.source().len()),
    );
    let names: Vec<String> = rows.iter().map(|r| printable(&r.name)).collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(4).clamp(4, 60);
    out!(
        "\n  {:>5}  {:<width$}  {:<16}  {:<20}  {:<20}  {:>8}  {:>10}  {:>10}",
        "#",
        "name",
        "dtype",
        "shape",
        "stride",
        "storage",
        "offset",
        "bytes"
    );
    for (i, (r, name)) in rows.iter().zip(&names).enumerate() {
        if r.kind == "tensor" {
            out!(
                "  {i:>5}  {name:<width$}  {:<16}  {:<20}  {:<20}  {:>8}  {:>10}  {:>10}",
                r.dtype.unwrap_or("?"),
                format!("{:?}", r.shape.as_deref().unwrap_or_default()),
                format!("{:?}", r.stride.as_deref().unwrap_or_default()),
                printable(r.storage.as_deref().unwrap_or("")),
                r.storage_offset.unwrap_or(0),
                r.bytes.map_or_else(|| "?".into(), human),
            );
        } else {
            let value = r.value.as_ref().map(Value::to_string).unwrap_or_default();
            out!("  {i:>5}  {name:<width$}  {:<16}  {}", r.kind, printable(&value));
        }
    }
    Ok(())
}

pub(crate) fn verify(file: &Path, source: Source, json_out: bool) -> Outcome {
    let reader = CheckpointReader::new(source)?;
    let total: u64 = reader.directory().entries.iter().map(|e| e.size).sum();
    let bar = progress::bytes(total, "verifying");
    let started = Instant::now();
    let checks = reader.verify(|d| bar.set_position(d))?;
    bar.finish_and_clear();
    let failures: Vec<_> = checks.iter().filter(|c| !c.ok()).collect();
    if json_out {
        let report = json!({
            "file": file.display().to_string(),
            "format": "torch-checkpoint",
            "ok": failures.is_empty(),
            "zip_entries": checks.len(),
            "verified": checks.len() - failures.len(),
            "data_bytes": total,
            "seconds": started.elapsed().as_secs_f64(),
            "failures": failures.iter().map(|c| json!({
                "entry": c.name,
                "expected_crc32": c.expected,
                "actual_crc32": c.actual,
            })).collect::<Vec<_>>(),
        });
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        for c in &failures {
            eprintln!("tzr: {}", mismatch(reader.source().name(), c));
        }
        if failures.is_empty() {
            out!(
                "{}: all {} zip entries match their CRC-32 ({} in {:.2} s)",
                printable(&file.display().to_string()),
                checks.len(),
                human(total),
                started.elapsed().as_secs_f64()
            );
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(Failure::Verification) }
}

/// The output format of a conversion.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Target {
    /// A tensorizer file.
    Tensorizer,
    /// A safetensors file.
    Safetensors,
}
