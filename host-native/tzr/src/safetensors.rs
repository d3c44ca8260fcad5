//! `tzr inspect` and `verify` for safetensors files, recognised by their
//! first bytes (never by extension).

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use tensorizer_core::safetensors::{self as st, PREFIX_LEN, summary_refuses};
use tensorizer_core::{Sniffed, sniff_format};
use tensorizer_native::convert::safetensors::SafetensorsFile;
use tensorizer_native::{Error, RangeSource};

use crate::text::{human, printable};
use crate::{Failure, Outcome};

pub(crate) type Source = Box<dyn RangeSource>;

/// Whether `source` starts like a safetensors file.
pub(crate) fn is_safetensors(source: &Source) -> Result<bool, Failure> {
    let mut head =
        vec![0u8; source.len().min(tensorizer_core::checkpoint::SNIFF_LEN as u64) as usize];
    source.read_exact_at(0, &mut head)?;
    Ok(matches!(sniff_format(&head, source.len()), Some(Sniffed::Safetensors { .. })))
}

/// Reads and parses the header as an inspector does: anomalies that
/// leave every entry readable are listed, not refused.
fn header(file: &Path, source: &Source) -> Result<st::Header, Failure> {
    let invalid = |f: &tensorizer_core::scan::Finding| {
        let at = f.offset.map(|o| format!(" (byte {o}, {})", f.rule)).unwrap_or_default();
        Failure::Error(Error::Invalid(format!(
            "{}: not a valid safetensors file: {}{at}",
            file.display(),
            f.message
        )))
    };
    let mut prefix = [0u8; PREFIX_LEN as usize];
    source.read_exact_at(0, &mut prefix)?;
    let n = st::header_len(&prefix, source.len()).map_err(|f| invalid(&f))?;
    let mut raw =
        vec![0u8; usize::try_from(n).map_err(|_| Error::Invalid("header too long".into()))?];
    source.read_exact_at(PREFIX_LEN, &mut raw)?;
    let header = st::parse(&raw, source.len());
    match header.refusal(summary_refuses) {
        Some(f) => Err(invalid(f)),
        None => Ok(header),
    }
}

fn data_bytes(header: &st::Header) -> u64 {
    header.tensors.iter().map(|t| t.data_offsets.1.saturating_sub(t.data_offsets.0)).sum()
}

pub(crate) fn inspect(file: &Path, source: Source, json_out: bool) -> Outcome {
    let header = header(file, &source)?;
    let name = file.display().to_string();
    if json_out {
        let rows: Vec<Value> = header
            .tensors
            .iter()
            .map(|t| {
                json!({"name": t.name, "dtype": t.dtype, "shape": t.shape,
                       "bytes": t.data_offsets.1.saturating_sub(t.data_offsets.0),
                       "data_offsets": [t.data_offsets.0, t.data_offsets.1], "offset": t.offset})
            })
            .collect();
        let metadata: serde_json::Map<String, Value> =
            header.metadata.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        let findings: Vec<Value> = header
            .findings
            .iter()
            .map(|f| json!({"rule": f.rule.to_string(), "message": f.message}))
            .collect();
        let report = json!({
            "file": name, "format": "safetensors", "header_bytes": header.header_len,
            "data_start": header.data_start(), "data_bytes": data_bytes(&header), "file_bytes": source.len(),
            "tensor_count": header.tensors.len(), "metadata": metadata, "tensors": rows, "findings": findings,
        });
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
        return Ok(());
    }
    out!("{}", printable(&name));
    out!(
        "  safetensors, {} tensors, {} of data, {}-byte header, {} file",
        header.tensors.len(),
        human(data_bytes(&header)),
        header.header_len,
        human(source.len())
    );
    for (k, v) in &header.metadata {
        out!("  metadata {}: {}", printable(k), printable(v));
    }
    for f in &header.findings {
        out!("  note: {} {}", f.rule, printable(&f.message));
    }
    for t in &header.tensors {
        let bytes = t.data_offsets.1.saturating_sub(t.data_offsets.0);
        out!(
            "  {:<48} {:<6} {:<20} {:>10}",
            printable(&t.name),
            t.dtype,
            format!("{:?}", t.shape),
            human(bytes)
        );
    }
    Ok(())
}

/// safetensors stores no hashes: what can be checked is the header and
/// that the tensors tile the data section, as a loader requires.
pub(crate) fn verify(file: &Path, source: Source, json_out: bool) -> Outcome {
    let started = Instant::now();
    let opened = SafetensorsFile::new(source)?;
    let entries = opened.entries();
    let bytes: u64 = entries.iter().map(|e| e.end - e.start).sum();
    let note = "safetensors stores no checksums: the header and every tensor's offsets were checked, not the data";
    if json_out {
        let report = json!({
            "file": file.display().to_string(), "format": "safetensors", "ok": true,
            "tensors": entries.len(), "verified": 0,
            "no_hashes": entries.iter().map(|e| &e.name).collect::<Vec<_>>(),
            "data_bytes": bytes, "seconds": started.elapsed().as_secs_f64(), "failures": [], "note": note,
        });
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        out!(
            "{}: {} tensors ({}) well formed; {note}",
            printable(&file.display().to_string()),
            entries.len(),
            human(bytes)
        );
    }
    Ok(())
}
