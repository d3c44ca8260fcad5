//! safetensors headers: an 8-byte little-endian length, then that many
//! bytes of JSON naming each tensor's dtype, shape and data range. Only the
//! header is read; every range is checked against the file.

use std::borrow::Cow;

use serde_json::Value;
use tensorizer_core::totals::top_module_of_name;

use crate::error::ValidateError;

use super::summary::{Row, Summary, field, totals};

/// Bytes before the JSON: its length as a little-endian u64.
pub use tensorizer_core::sniff::SAFETENSORS_PREFIX_LEN as PREFIX_LEN;

/// Element size in bits for safetensors' dtype names (the core's table).
fn dtype_bits(name: &str) -> Option<u64> {
    tensorizer_core::safetensors::dtype(name).map(|d| u64::from(d.bits))
}

/// Parses the JSON header (`json`, found at byte 8 of a file of
/// `file_len` bytes) into a summary. Data ranges must lie in the data
/// area and match each tensor's dtype and shape.
pub fn summarize(json: &[u8], file: &str, file_len: u64) -> Result<Summary, ValidateError> {
    let header_end = PREFIX_LEN + json.len() as u64;
    let root: Value = serde_json::from_slice(json).map_err(|e| {
        let at = PREFIX_LEN.saturating_add(json_offset(json, e.line(), e.column()));
        ValidateError::invalid(
            Some(at),
            format!("malformed at byte {at}: the safetensors header is not valid JSON ({e})"),
        )
    })?;
    let Value::Object(map) = root else {
        return Err(ValidateError::invalid(
            Some(PREFIX_LEN),
            "malformed at byte 8: the safetensors header is not a JSON object",
        ));
    };
    let data_len = file_len - header_end;
    let mut rows = Vec::new();
    let mut metadata = serde_json::Map::new();
    for (name, v) in &map {
        if name == "__metadata__" {
            if let Value::Object(m) = v {
                metadata = m.clone();
            }
            continue;
        }
        let bad = |why: String| {
            ValidateError::invalid(
                Some(PREFIX_LEN),
                format!("malformed safetensors header at byte 8: tensor {name:?}: {why}"),
            )
        };
        let dtype = v.get("dtype").and_then(Value::as_str).ok_or_else(|| bad("no dtype".into()))?;
        let bits = dtype_bits(dtype).ok_or_else(|| bad(format!("unknown dtype {dtype:?}")))?;
        let shape = v
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no shape".into()))?
            .iter()
            .map(Value::as_u64)
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| bad("shape is not a list of non-negative integers".into()))?;
        let offsets = v
            .get("data_offsets")
            .and_then(Value::as_array)
            .and_then(|a| Some((a.first()?.as_u64()?, a.get(1)?.as_u64()?)).filter(|_| a.len() == 2))
            .ok_or_else(|| bad("data_offsets is not a pair of integers".into()))?;
        let (begin, end) = offsets;
        if begin > end || end > data_len {
            return Err(bad(format!(
                "data_offsets [{begin}, {end}] lie outside the {data_len} data bytes (the file may be truncated)"
            )));
        }
        let numel =
            shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or_else(|| bad("shape overflows".into()))?;
        let bytes = numel.checked_mul(bits).map(|b| b.div_ceil(8)).ok_or_else(|| bad("size overflows".into()))?;
        if bytes != end - begin {
            return Err(bad(format!(
                "{bytes} bytes for dtype {dtype} and shape {shape:?}, but data_offsets span {}",
                end - begin
            )));
        }
        rows.push(Row {
            index: 0,
            name: name.clone(),
            path: None,
            dtype: dtype.into(),
            dtype_string: dtype.into(),
            shape,
            bytes,
            data_offset: Some(header_end + begin),
            data_length: bytes,
            kind: "".into(),
            meta: false,
        });
    }
    // File order: by data offset (the JSON object's order is not kept).
    rows.sort_by(|a, b| (a.data_offset, &a.name).cmp(&(b.data_offset, &b.name)));
    for (i, r) in rows.iter_mut().enumerate() {
        r.index = i;
    }
    let mut header = vec![field("header bytes", json.len() as u64), field("data bytes", data_len)];
    for (k, v) in metadata {
        let shown = match v {
            Value::String(s) => Value::String(s),
            other => Value::String(other.to_string()),
        };
        header.push((format!("__metadata__.{k}"), shown));
    }
    Ok(Summary {
        summary_version: super::summary::SUMMARY_VERSION,
        format: "safetensors",
        file: file.to_string(),
        file_bytes: file_len,
        header,
        encrypted: false,
        tensor_count: rows.len(),
        data_bytes: rows.iter().map(|r| r.data_length).sum(),
        totals: totals(&rows, |r| Cow::Borrowed(top_module_of_name(&r.name))),
        tensors: rows,
        verify: "safetensors stores no checksums: nothing to verify beyond the header checks",
        reads: 0,
        bytes_read: 0,
    })
}

/// serde_json's 1-based line and column as a byte offset into `json`.
fn json_offset(json: &[u8], line: usize, column: usize) -> u64 {
    let mut at = 0usize;
    for _ in 1..line {
        match json[at..].iter().position(|&b| b == b'\n') {
            Some(p) => at += p + 1,
            None => break,
        }
    }
    (at + column.saturating_sub(1)).min(json.len()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str, data: usize) -> Vec<u8> {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v.resize(v.len() + data, 0);
        v
    }

    #[test]
    fn reads_a_header() {
        let j = r#"{"b":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}"#;
        let f = file(j, 24);
        assert!(tensorizer_core::sniff::safetensors_header_len(&f, f.len() as u64).is_some());
        let s = summarize(&f[8..8 + j.len()], "x", f.len() as u64).unwrap();
        assert_eq!(s.tensors.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(s.tensors[1].data_offset, Some(8 + j.len() as u64 + 8));
        assert_eq!(s.totals.by_dtype["F32"].bytes, 16);
        assert_eq!(s.totals.by_dtype["BF16"].params, 4);
        assert_eq!(s.totals.all.params, 8);
        assert!(s.header.iter().any(|(k, v)| k == "__metadata__.format" && v == "pt"));
    }

    #[test]
    fn refuses_bad_ranges_and_json() {
        let j = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        let f = file(j, 8);
        let e = summarize(&f[8..8 + j.len()], "x", f.len() as u64).unwrap_err();
        assert!(e.message.contains("outside"), "{e}");
        let e = summarize(b"{\"a\": [1,", "x", 100).unwrap_err();
        assert!(matches!(e.offset, Some(16..=17)), "{e:?}");
        let head = |n: u64| [&n.to_le_bytes()[..], b"{"].concat();
        assert!(tensorizer_core::sniff::safetensors_header_len(&head(u64::MAX), 100).is_none());
        assert!(tensorizer_core::sniff::safetensors_header_len(&head(50), 20).is_none());
    }
}
