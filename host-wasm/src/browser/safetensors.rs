//! safetensors headers, summarized: the core parses them
//! ([`tensorizer_core::safetensors::parse`]) and this module refuses what
//! cannot be shown tensor by tensor ([`summary_refuses`]) and turns the
//! entries into rows. Only the header is read.

use std::borrow::Cow;

use serde_json::Value;
use tensorizer_core::safetensors::{self as st, summary_refuses};
use tensorizer_core::totals::top_module_of_name;

use crate::error::ValidateError;

use super::summary::{Row, Summary, field, totals};

/// Bytes before the JSON: its length as a little-endian u64.
pub use tensorizer_core::safetensors::PREFIX_LEN;

/// Parses the JSON header (`json`, found at byte 8 of a file of
/// `file_len` bytes) into a summary. What the core's parser finds that
/// stops a tensor from being shown (a header that is not JSON, an entry
/// without dtype, shape or offsets, an unknown dtype, a range that is
/// reversed, past the end or not its shape's size) is the error, with the
/// finding's byte offset and rule; overlaps, gaps and repeated names are
/// left to the findings view.
pub fn summarize(json: &[u8], file: &str, file_len: u64) -> Result<Summary, ValidateError> {
    let header_end = PREFIX_LEN + json.len() as u64;
    let header = st::parse(json, file_len);
    if let Some(f) = header.refusal(summary_refuses) {
        let at = f.offset.unwrap_or(PREFIX_LEN);
        let mut e =
            ValidateError::invalid(Some(at), format!("malformed at byte {at}: {}", f.message));
        e.rule = Some(f.rule);
        return Err(e);
    }
    let data_len = file_len.saturating_sub(header_end);
    let mut rows: Vec<Row> = header
        .tensors
        .into_iter()
        .map(|t| {
            let (begin, end) = t.data_offsets;
            let dtype: std::rc::Rc<str> = t.dtype.into();
            Row {
                index: 0,
                name: t.name,
                path: None,
                dtype: dtype.clone(),
                dtype_string: dtype,
                shape: t.shape,
                bytes: end - begin,
                data_offset: Some(header_end + begin),
                data_length: end - begin,
                kind: "".into(),
                meta: false,
            }
        })
        .collect();
    // File order: by data offset (then name, for empty tensors).
    rows.sort_by(|a, b| (a.data_offset, &a.name).cmp(&(b.data_offset, &b.name)));
    for (i, r) in rows.iter_mut().enumerate() {
        r.index = i;
    }
    let mut fields = vec![field("header bytes", json.len() as u64), field("data bytes", data_len)];
    for (k, v) in header.metadata {
        fields.push((format!("{}.{k}", st::METADATA_KEY), Value::String(v)));
    }
    Ok(Summary {
        summary_version: super::summary::SUMMARY_VERSION,
        format: "safetensors",
        file: file.to_string(),
        file_bytes: file_len,
        header: fields,
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
        assert!(e.message.contains("end past the 8 bytes of data"), "{e}");
        assert_eq!(e.rule, Some(tensorizer_core::scan::RuleId::StPastEnd));
        let e = summarize(b"{\"a\": [1,", "x", 100).unwrap_err();
        assert_eq!(e.offset, Some(14), "{e:?}");
        let head = |n: u64| [&n.to_le_bytes()[..], b"{"].concat();
        assert!(tensorizer_core::sniff::safetensors_header_len(&head(u64::MAX), 100).is_none());
        assert!(tensorizer_core::sniff::safetensors_header_len(&head(50), 20).is_none());
    }
}
