//! GGUF headers (llama.cpp's format), summarized: the header only, read
//! as a growing prefix ([`tensorizer_core::gguf::grow`], as `tzr inspect`
//! reads it) and parsed by the core; never the tensor data.

use std::borrow::Cow;

use serde_json::Value;
use tensorizer_core::gguf::{self, Header, ggml_type};
use tensorizer_core::totals::top_module_of_name;

use crate::error::ValidateError;

use super::source::{AsyncSource, read_exact};
use super::summary::{Row, Summary, field, totals};

/// Reads the rest of the header after `head` (the file's first bytes, from
/// offset 0) as far as the parser needs, and summarizes it.
pub async fn open<S: AsyncSource>(src: &mut S, head: Vec<u8>) -> Result<Summary, ValidateError> {
    let file_len = src.len();
    let mut buf = head;
    let header = loop {
        match gguf::parse(&buf) {
            Ok(h) => break h,
            Err(e) => {
                let have = buf.len() as u64;
                let want = gguf::grow(have, file_len, e)?;
                let more = read_exact(src, have, want - have, "the GGUF header").await?;
                buf.extend_from_slice(&more);
            }
        }
    };
    Ok(summarize(&header, file_len))
}

/// A metadata value as the page shows it: an array as its length and
/// element type (the header holds no more of it).
fn value(v: &gguf::Value) -> Value {
    match v {
        gguf::Value::Uint(n) => (*n).into(),
        gguf::Value::Int(n) => (*n).into(),
        gguf::Value::Float(x) => (*x).into(),
        gguf::Value::Bool(b) => (*b).into(),
        gguf::Value::Str(s) => s.as_str().into(),
        gguf::Value::Array { elem, len } => format!("array of {len} (value type {elem})").into(),
    }
}

/// The summary of a parsed header: the version, alignment and header
/// length, then every metadata pair in file order; one row per tensor
/// info, in file order, its dtype the ggml type's name.
pub fn summarize(h: &Header, file_len: u64) -> Summary {
    let rows: Vec<Row> = h
        .tensors
        .iter()
        .enumerate()
        .map(|(index, t)| {
            let dtype: std::rc::Rc<str> = ggml_type(t.ggml_type)
                .map_or_else(|| format!("type {}", t.ggml_type), |g| g.name.to_string())
                .into();
            let bytes = t.nbytes().unwrap_or(0);
            Row {
                index,
                name: t.name.clone(),
                path: None,
                dtype: dtype.clone(),
                dtype_string: dtype,
                shape: t.dims.clone(),
                bytes,
                data_offset: h.data_start.checked_add(t.offset),
                data_length: bytes,
                kind: "".into(),
                meta: false,
            }
        })
        .collect();
    let mut fields = vec![
        field("GGUF version", h.version),
        field("alignment", h.alignment),
        field("header bytes", h.data_start),
    ];
    fields.extend(h.kvs.iter().map(|kv| (kv.key.clone(), value(&kv.value))));
    Summary {
        summary_version: super::summary::SUMMARY_VERSION,
        format: "gguf",
        file: String::new(),
        file_bytes: file_len,
        header: fields,
        encrypted: false,
        tensor_count: rows.len(),
        data_bytes: rows.iter().map(|r| r.data_length).fold(0, u64::saturating_add),
        totals: totals(&rows, |r| Cow::Borrowed(top_module_of_name(&r.name))),
        tensors: rows,
        verify: "GGUF stores no checksums: nothing to verify beyond the header checks",
        reads: 0,
        bytes_read: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::source::block_on_ready;
    use super::super::{MemSource, inspect};

    fn gstr(s: &str) -> Vec<u8> {
        [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat()
    }

    /// Bytes of the data area: far more than the header.
    const DATA: usize = 1 << 20;

    /// A GGUF v3 file: a long string value (so its header outgrows the
    /// first read), two F32 tensors and a Q8_0 one, then the data area.
    fn file(template_len: usize) -> Vec<u8> {
        let mut f = b"GGUF".to_vec();
        f.extend_from_slice(&3u32.to_le_bytes());
        f.extend_from_slice(&3u64.to_le_bytes());
        f.extend_from_slice(&2u64.to_le_bytes());
        f.extend_from_slice(&gstr("general.architecture"));
        f.extend_from_slice(&8u32.to_le_bytes());
        f.extend_from_slice(&gstr("llama"));
        f.extend_from_slice(&gstr("tokenizer.chat_template"));
        f.extend_from_slice(&8u32.to_le_bytes());
        f.extend_from_slice(&gstr(&"x".repeat(template_len)));
        for (name, dims, ty, off) in [
            ("token_embd.weight", &[4u64, 2][..], 0u32, 0u64),
            ("blk.0.attn_q.weight", &[32][..], 8, 32),
            ("output_norm.weight", &[4][..], 0, 96),
        ] {
            f.extend_from_slice(&gstr(name));
            f.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| f.extend_from_slice(&d.to_le_bytes()));
            f.extend_from_slice(&ty.to_le_bytes());
            f.extend_from_slice(&off.to_le_bytes());
        }
        f.resize(f.len().next_multiple_of(32) + DATA, 0);
        f
    }

    #[test]
    fn a_gguf_header_opens_with_its_metadata_and_tensor_rows_reading_the_header_only() {
        let bytes = file(200_000);
        let len = bytes.len() as u64;
        let s = block_on_ready(inspect(MemSource(bytes), "m.gguf")).unwrap().unwrap();
        assert_eq!((s.format, s.tensor_count, s.file_bytes), ("gguf", 3, len));
        let names: Vec<&str> = s.tensors.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"]);
        let types: Vec<&str> = s.tensors.iter().map(|r| &*r.dtype).collect();
        assert_eq!(types, ["F32", "Q8_0", "F32"]);
        assert_eq!(s.tensors[1].bytes, 34);
        let data_start = len - DATA as u64;
        assert_eq!(s.tensors[2].data_offset, Some(data_start + 96));
        assert_eq!(s.data_bytes, 32 + 34 + 16);
        assert!(s.header.iter().any(|(k, v)| k == "general.architecture" && v == "llama"));
        // The first 64 KiB, then what the parser asks for, at least
        // doubling: at most twice the header, never the whole data area.
        assert!(s.reads <= 3, "{} reads", s.reads);
        assert!(s.bytes_read <= 2 * data_start, "{} of {len}", s.bytes_read);
    }

    #[test]
    fn a_truncated_gguf_header_is_one_error_with_its_offset() {
        let mut bytes = file(10);
        bytes.truncate(60);
        let e = block_on_ready(inspect(MemSource(bytes), "m.gguf")).unwrap().unwrap_err();
        assert!(e.offset.is_some_and(|o| o >= 24), "{e:?}");
    }
}
