//! `tzr inspect` for GGUF files (llama.cpp's format), recognised by their
//! first bytes: the header only (`tensorizer_core::gguf`), never the data.

use std::path::Path;

use serde_json::{Value, json};
use tensorizer_core::gguf::{self, Header, ggml_type};
use tensorizer_native::source::Positioned;

use crate::Outcome;
use crate::safetensors::Source;
use crate::text::{human, printable};

/// Longest metadata value the text output shows (`--json` shows all).
const MAX_SHOWN_VALUE: usize = 80;

/// Whether `source` starts with GGUF's magic.
pub(crate) fn is_gguf(source: &Source) -> Result<bool, crate::Failure> {
    if source.len() < 4 {
        return Ok(false);
    }
    let mut head = [0u8; 4];
    source.read_exact_at(0, &mut head)?;
    Ok(&head == gguf::MAGIC)
}

/// Reads the header; a header that does not parse fails with its offset.
pub(crate) fn header(file: &Path, source: &Source) -> Result<Header, crate::Failure> {
    gguf::read(&mut Positioned(source.as_ref())).map_err(|e| {
        let what = format!("{}: not a valid GGUF file: {e}", file.display());
        crate::Failure::Error(tensorizer_native::Error::Invalid(what))
    })
}

/// A metadata value as JSON: an array as its element type and length.
fn value_json(v: &gguf::Value) -> Value {
    match v {
        gguf::Value::Uint(n) => (*n).into(),
        gguf::Value::Int(n) => (*n).into(),
        gguf::Value::Float(x) => (*x).into(),
        gguf::Value::Bool(b) => (*b).into(),
        gguf::Value::Str(s) => s.as_str().into(),
        gguf::Value::Array { elem, len } => json!({"array_of": elem, "len": len}),
    }
}

fn type_name(id: u32) -> String {
    ggml_type(id).map_or_else(|| format!("type {id}"), |t| t.name.into())
}

pub(crate) fn inspect(file: &Path, source: Source, json_out: bool) -> Outcome {
    let h = header(file, &source)?;
    let name = file.display().to_string();
    let data_bytes: u64 = h.tensors.iter().filter_map(|t| t.nbytes()).sum();
    if json_out {
        let metadata: serde_json::Map<String, Value> =
            h.kvs.iter().map(|kv| (kv.key.clone(), value_json(&kv.value))).collect();
        let rows: Vec<Value> = h
            .tensors
            .iter()
            .map(|t| {
                json!({"name": t.name, "type": type_name(t.ggml_type), "shape": t.dims,
                       "bytes": t.nbytes(), "data_offset": h.data_start.saturating_add(t.offset)})
            })
            .collect();
        let report = json!({
            "file": name, "format": "gguf", "version": h.version, "alignment": h.alignment,
            "data_start": h.data_start, "data_bytes": data_bytes, "file_bytes": source.len(),
            "tensor_count": h.tensors.len(), "metadata": metadata, "tensors": rows,
        });
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
        return Ok(());
    }
    out!("{}", printable(&name));
    out!(
        "  GGUF v{}, {} tensors, {} of data, {}-byte header, {} file",
        h.version,
        h.tensors.len(),
        human(data_bytes),
        h.data_start,
        human(source.len())
    );
    for kv in &h.kvs {
        let mut shown = printable(&value_json(&kv.value).to_string());
        if shown.chars().count() > MAX_SHOWN_VALUE {
            shown = shown.chars().take(MAX_SHOWN_VALUE).collect::<String>() + "…";
        }
        out!("  metadata {}: {shown}", printable(&kv.key));
    }
    for t in &h.tensors {
        let bytes = t.nbytes().map_or_else(|| "?".into(), human);
        out!(
            "  {:<48} {:<8} {:<24} {:>10}",
            printable(&t.name),
            type_name(t.ggml_type),
            format!("{:?}", t.dims),
            bytes
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF file: one string pair and one F32 tensor of 4 elements.
    fn small_gguf() -> Vec<u8> {
        let gstr = |s: &str| {
            let mut v = (s.len() as u64).to_le_bytes().to_vec();
            v.extend_from_slice(s.as_bytes());
            v
        };
        let mut f = b"GGUF".to_vec();
        for n in
            [3u32.to_le_bytes().to_vec(), 1u64.to_le_bytes().to_vec(), 1u64.to_le_bytes().to_vec()]
        {
            f.extend_from_slice(&n);
        }
        f.extend(gstr("general.architecture"));
        f.extend(8u32.to_le_bytes());
        f.extend(gstr("llama"));
        f.extend(gstr("w"));
        f.extend(1u32.to_le_bytes());
        f.extend(4u64.to_le_bytes());
        f.extend(0u32.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        while !f.len().is_multiple_of(32) {
            f.push(0);
        }
        f.extend([0u8; 16]);
        f
    }

    #[test]
    fn a_gguf_header_is_inspected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, small_gguf()).unwrap();
        let source =
            tensorizer_native::open_uri(&path.to_string_lossy(), tensorizer_native::Intent::Peek)
                .unwrap();
        assert!(is_gguf(&source).ok() == Some(true));
        let Ok(h) = header(&path, &source) else { panic!("the header did not parse") };
        assert_eq!((h.tensors.len(), h.tensors[0].nbytes()), (1, Some(16)));
        assert_eq!(value_json(&h.kvs[0].value), "llama");
        assert!(inspect(&path, source, true).is_ok());
        std::fs::write(&path, &small_gguf()[..40]).unwrap();
        let source =
            tensorizer_native::open_uri(&path.to_string_lossy(), tensorizer_native::Intent::Peek)
                .unwrap();
        let err = header(&path, &source).err().unwrap();
        assert!(matches!(err, crate::Failure::Error(_)));
    }
}
