//! safetensors files, once for every host: the dtype table and a
//! permissive header parser that flags every anomaly as a [`Finding`].
//!
//! A file is an 8-byte little-endian header length, that many bytes of
//! JSON (an object mapping each tensor name to its `dtype`, `shape` and
//! `data_offsets` relative to the data area, plus an optional
//! `__metadata__` object of strings), then the data area. [`parse`] reads
//! what safetensors' loaders read and reports what they would refuse or
//! silently ignore: a header over [`MAX_SAFETENSORS_HEADER`], overlapping,
//! reversed or out-of-file ranges, gaps, trailing bytes, misalignment,
//! unknown dtypes, sizes that disagree with shapes, a bad `__metadata__`,
//! repeated names.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde_json::Value;

use crate::dtype::ElementType;
use crate::error::Result;
pub use crate::layout::MAX_SAFETENSORS_HEADER;
use crate::scan::buffer::read_vec;
use crate::scan::finding::{Finding, Findings};
use crate::scan::rules::{RuleId, Severity};
pub use crate::sniff::SAFETENSORS_PREFIX_LEN as PREFIX_LEN;
use crate::source::RandomAccess;

/// The header length safetensors' writer pads to (so data starts aligned).
pub const HEADER_ALIGNMENT: u64 = 8;

/// The key of the free-form string map in the header.
pub const METADATA_KEY: &str = "__metadata__";

/// Deepest JSON nesting walked in the header (a tensor entry needs 3).
pub const MAX_JSON_DEPTH: usize = 64;

/// One dtype safetensors defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtypeInfo {
    /// safetensors' name (`F32`, `F8_E8M0`, ...).
    pub name: &'static str,
    /// Bits per element.
    pub bits: u32,
    /// The element type it stores, when this crate has one with the same
    /// bytes. For a sub-byte dtype (`F4`) that is the packed type holding
    /// several of its elements in one byte (`float4_e2m1fn_x2`, two), and
    /// shapes differ in their last dimension: see [`to_safetensors`].
    pub element: Option<ElementType>,
}

impl DtypeInfo {
    /// How many of this dtype's elements one stored element of
    /// [`element`](Self::element) holds (2 for `F4`, else 1).
    pub fn per_element(&self) -> u64 {
        self.element.map_or(1, |e| (u64::from(e.size()) * 8 / u64::from(self.bits.max(1))).max(1))
    }
}

const fn d(name: &'static str, bits: u32, element: Option<ElementType>) -> DtypeInfo {
    DtypeInfo { name, bits, element }
}

/// Every dtype safetensors (0.8) defines.
pub const DTYPES: &[DtypeInfo] = &[
    d("BOOL", 8, Some(ElementType::Bool)),
    d("F4", 4, Some(ElementType::F4E2M1FNx2)),
    d("F6_E2M3", 6, None),
    d("F6_E3M2", 6, None),
    d("U8", 8, Some(ElementType::U8)),
    d("I8", 8, Some(ElementType::I8)),
    d("F8_E5M2", 8, Some(ElementType::F8E5M2)),
    d("F8_E4M3", 8, Some(ElementType::F8E4M3FN)),
    d("F8_E8M0", 8, Some(ElementType::F8E8M0FNU)),
    d("F8_E4M3FNUZ", 8, Some(ElementType::F8E4M3FNUZ)),
    d("F8_E5M2FNUZ", 8, Some(ElementType::F8E5M2FNUZ)),
    d("I16", 16, Some(ElementType::I16)),
    d("U16", 16, Some(ElementType::U16)),
    d("F16", 16, Some(ElementType::F16)),
    d("BF16", 16, Some(ElementType::BF16)),
    d("I32", 32, Some(ElementType::I32)),
    d("U32", 32, Some(ElementType::U32)),
    d("F32", 32, Some(ElementType::F32)),
    d("C64", 64, Some(ElementType::Complex64)),
    d("F64", 64, Some(ElementType::F64)),
    d("I64", 64, Some(ElementType::I64)),
    d("U64", 64, Some(ElementType::U64)),
];

/// The dtype safetensors calls `name`.
pub fn dtype(name: &str) -> Option<&'static DtypeInfo> {
    DTYPES.iter().find(|d| d.name == name)
}

/// safetensors' name for an element type, if it has one.
pub fn name_of(element: ElementType) -> Option<&'static str> {
    DTYPES.iter().find(|d| d.element == Some(element)).map(|d| d.name)
}

/// How safetensors stores a tensor of `element` and `shape`: its dtype
/// name and the shape its header records. A packed sub-byte type counts
/// the values in its last dimension, as safetensors' own writer does
/// (`float4_e2m1fn_x2` `[2, 3]` is `F4` `[2, 6]`). `None` when safetensors
/// has no dtype for `element`, or the shape cannot be unpacked (a packed
/// scalar).
pub fn to_safetensors(element: ElementType, shape: &[u64]) -> Option<(&'static str, Vec<u64>)> {
    let info = DTYPES.iter().find(|d| d.element == Some(element))?;
    let mut shape = shape.to_vec();
    let per = info.per_element();
    if per > 1 {
        let last = shape.last_mut()?;
        *last = last.checked_mul(per)?;
    }
    Some((info.name, shape))
}

/// The element type and shape a safetensors tensor of dtype `name` and
/// header shape `shape` is stored as (the inverse of [`to_safetensors`]).
/// `None` when this crate has no element type for `name`, or a packed
/// dtype's last dimension does not divide into whole stored elements.
pub fn from_safetensors(name: &str, shape: &[u64]) -> Option<(ElementType, Vec<u64>)> {
    let info = dtype(name)?;
    let element = info.element?;
    let mut shape = shape.to_vec();
    let per = info.per_element();
    if per > 1 {
        let last = shape.last_mut()?;
        if !last.is_multiple_of(per) {
            return None;
        }
        *last /= per;
    }
    Some((element, shape))
}

/// One tensor entry of the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The name.
    pub name: String,
    /// The dtype as written (perhaps one safetensors does not define).
    pub dtype: String,
    /// The shape.
    pub shape: Vec<u64>,
    /// `[begin, end)` relative to the data area.
    pub data_offsets: (u64, u64),
    /// Absolute offset of the entry's name in the file.
    pub offset: u64,
}

/// A parsed header: the entries that parsed, in file order, the
/// metadata, and every anomaly.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// The JSON length (the first 8 bytes).
    pub header_len: u64,
    /// Entries with a dtype, shape and data offsets, in file order.
    pub tensors: Vec<TensorInfo>,
    /// `__metadata__`'s string values, in file order.
    pub metadata: Vec<(String, String)>,
    /// Every anomaly, unsorted.
    pub findings: Vec<Finding>,
}

impl Header {
    /// Absolute offset of the data area.
    pub fn data_start(&self) -> u64 {
        PREFIX_LEN + self.header_len
    }

    /// The first finding (by offset, then rule) whose rule `refuses`
    /// holds: what a host that reads the header with that policy reports
    /// instead of the entries. `None` when it may use them.
    pub fn refusal(&self, refuses: fn(RuleId) -> bool) -> Option<&Finding> {
        self.findings.iter().filter(|f| refuses(f.rule)).min_by_key(|f| (f.offset, f.rule))
    }
}

/// What a loader refuses (safetensors' own `deserialize`, and our
/// converter): every error-severity rule, plus bytes no tensor covers
/// (gaps and trailing bytes). A misaligned header or tensor and a
/// `__metadata__` of non-strings are tolerated.
pub fn loader_refuses(rule: RuleId) -> bool {
    rule.severity() == Severity::Error || matches!(rule, RuleId::StGap | RuleId::StTrailing)
}

/// What stops a header from being summarized tensor by tensor (an
/// inspector's policy): a header that is not JSON, an entry without a
/// dtype, shape or offsets, a dtype without a size, a range that is
/// reversed, past the end of the file or not the size its shape gives.
/// Overlaps, gaps, repeated names and the rest are shown, not refused.
pub fn summary_refuses(rule: RuleId) -> bool {
    matches!(
        rule,
        RuleId::StHeaderLimit
            | RuleId::StHeaderJson
            | RuleId::StEntry
            | RuleId::StUnknownDtype
            | RuleId::StReversed
            | RuleId::StPastEnd
            | RuleId::StSizeMismatch
    )
}

/// The header length a file of `file_len` bytes starting with `prefix`
/// declares (its first [`PREFIX_LEN`] bytes), or the [`RuleId::StHeaderLimit`]
/// finding that refuses it: a file too short to hold the length, a length
/// over [`MAX_SAFETENSORS_HEADER`] or past the end of the file (boxed: a
/// finding is large beside a length).
pub fn header_len(prefix: &[u8], file_len: u64) -> core::result::Result<u64, Box<Finding>> {
    let Some(n) = prefix.get(..PREFIX_LEN as usize).and_then(|b| <[u8; 8]>::try_from(b).ok())
    else {
        let m = format!(
            "the file is {file_len} bytes long, shorter than the {PREFIX_LEN}-byte header length"
        );
        return Err(Box::new(Finding::new(RuleId::StHeaderLimit, Some(0), m).spanning(file_len)));
    };
    let n = u64::from_le_bytes(n);
    let why = if n > MAX_SAFETENSORS_HEADER {
        format!("above the limit of {MAX_SAFETENSORS_HEADER}")
    } else if PREFIX_LEN.checked_add(n).is_none_or(|end| end > file_len) {
        format!("beyond the end of the {file_len}-byte file")
    } else {
        return Ok(n);
    };
    let m = format!("the header length {n} is {why}");
    Err(Box::new(Finding::new(RuleId::StHeaderLimit, Some(0), m).spanning(PREFIX_LEN)))
}

/// One top-level member of the JSON object: the key's and the value's
/// byte ranges within the JSON.
struct Member {
    key: (usize, usize),
    value: (usize, usize),
}

fn ws(json: &[u8], mut p: usize) -> usize {
    while json.get(p).is_some_and(|b| b" \t\r\n".contains(b)) {
        p += 1;
    }
    p
}

/// The end (one past the closing quote) of the string starting at `p`.
fn string_end(json: &[u8], p: usize) -> Option<usize> {
    if json.get(p) != Some(&b'"') {
        return None;
    }
    let mut i = p + 1;
    loop {
        match json.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The end of the value starting at `p` (not validated: serde does that).
fn value_end(json: &[u8], p: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = p;
    loop {
        match *json.get(i)? {
            b'"' => {
                i = string_end(json, i)?;
                if depth == 0 {
                    return Some(i);
                }
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return None;
                }
            }
            b'}' | b']' if depth == 0 => return Some(i),
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b',' if depth == 0 => return Some(i),
            _ => {}
        }
        i += 1;
    }
}

/// Splits the top-level object into members, or says at which byte it
/// stops being one.
fn members(json: &[u8]) -> core::result::Result<Vec<Member>, (usize, &'static str)> {
    let mut p = ws(json, 0);
    if json.get(p) != Some(&b'{') {
        return Err((p, "the header is not a JSON object"));
    }
    p = ws(json, p + 1);
    let mut out = Vec::new();
    if json.get(p) == Some(&b'}') {
        p += 1;
    } else {
        loop {
            let k_end = string_end(json, p).ok_or((p, "expected a quoted key"))?;
            let colon = ws(json, k_end);
            if json.get(colon) != Some(&b':') {
                return Err((colon, "expected ':' after a key"));
            }
            let v = ws(json, colon + 1);
            let v_end = value_end(json, v).filter(|&e| e > v).ok_or((v, "expected a value"))?;
            out.push(Member { key: (p, k_end), value: (v, v_end) });
            let next = ws(json, v_end);
            match json.get(next) {
                Some(b',') => p = ws(json, next + 1),
                Some(b'}') => {
                    p = next + 1;
                    break;
                }
                _ => return Err((next, "expected ',' or '}' after a value")),
            }
        }
    }
    let end = ws(json, p);
    if end != json.len() {
        return Err((end, "bytes after the header's closing brace"));
    }
    Ok(out)
}

/// Parses the JSON header of a file of `file_len` bytes whose first 8
/// bytes declared `json.len()`. Never fails: what it cannot read is a
/// finding, and the entries that did parse are returned.
pub fn parse(json: &[u8], file_len: u64) -> Header {
    let mut h = Header { header_len: json.len() as u64, ..Header::default() };
    let at = |p: usize| PREFIX_LEN + p as u64;
    if let Err(e) = core::str::from_utf8(json) {
        let m = format!("the header is not UTF-8 (byte {} of it)", e.valid_up_to());
        h.findings.push(Finding::new(RuleId::StHeaderJson, Some(at(e.valid_up_to())), m));
        return h;
    }
    let members = match members(json) {
        Ok(m) => m,
        Err((p, why)) => {
            h.findings.push(Finding::new(
                RuleId::StHeaderJson,
                Some(at(p)),
                format!("{why} (header byte {p})"),
            ));
            return h;
        }
    };
    if !h.header_len.is_multiple_of(HEADER_ALIGNMENT) {
        let m = format!(
            "the header is {} bytes long, not a multiple of {HEADER_ALIGNMENT}: data starts unaligned",
            h.header_len
        );
        h.findings.push(Finding::new(RuleId::StMisaligned, Some(0), m).spanning(PREFIX_LEN));
    }
    let mut names: Vec<(String, u64)> = Vec::new();
    for m in &members {
        let Ok(name) = serde_json::from_slice::<String>(&json[m.key.0..m.key.1]) else {
            h.findings.push(Finding::new(
                RuleId::StHeaderJson,
                Some(at(m.key.0)),
                "a key is not a valid JSON string",
            ));
            continue;
        };
        let value: Value = match serde_json::from_slice(&json[m.value.0..m.value.1]) {
            Ok(v) => v,
            Err(e) => {
                let msg = format!("the value of {name:?} is not valid JSON ({e})");
                h.findings.push(Finding::new(RuleId::StHeaderJson, Some(at(m.value.0)), msg));
                continue;
            }
        };
        names.push((name.clone(), at(m.key.0)));
        if name == METADATA_KEY {
            metadata(&mut h, &value, at(m.key.0));
        } else {
            entry(&mut h, name, &value, at(m.key.0));
        }
    }
    names.sort();
    for w in names.windows(2) {
        if w[0].0 == w[1].0 {
            let m = format!("{:?} appears more than once in the header", w[1].0);
            h.findings
                .push(Finding::new(RuleId::StDuplicate, Some(w[1].1), m).in_tensor(w[1].0.clone()));
        }
    }
    ranges(&mut h, file_len);
    h
}

fn metadata(h: &mut Header, v: &Value, at: u64) {
    let bad = |h: &mut Header, why: &str| {
        h.findings.push(Finding::new(RuleId::StMetadata, Some(at), format!("__metadata__ {why}")));
    };
    let Value::Object(map) = v else {
        return bad(h, "is not an object");
    };
    for (k, v) in map {
        match v {
            Value::String(s) => h.metadata.push((k.clone(), s.clone())),
            _ => bad(h, &format!("value {k:?} is not a string")),
        }
    }
}

fn entry(h: &mut Header, name: String, v: &Value, at: u64) {
    let bad = |h: &mut Header, why: &str| {
        let f = Finding::new(RuleId::StEntry, Some(at), format!("tensor {name:?}: {why}"))
            .in_tensor(name.clone());
        h.findings.push(f);
    };
    let Value::Object(o) = v else {
        return bad(h, "the entry is not an object");
    };
    let Some(dtype) = o.get("dtype").and_then(Value::as_str) else {
        return bad(h, "no dtype string");
    };
    let Some(shape) = o
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
    else {
        return bad(h, "shape is not a list of non-negative integers");
    };
    let offsets =
        o.get("data_offsets").and_then(Value::as_array).and_then(|a| match a.as_slice() {
            [b, e] => Some((b.as_u64()?, e.as_u64()?)),
            _ => None,
        });
    let Some((begin, end)) = offsets else {
        return bad(h, "data_offsets is not a pair of non-negative integers");
    };
    h.tensors.push(TensorInfo {
        name,
        dtype: dtype.into(),
        shape,
        data_offsets: (begin, end),
        offset: at,
    });
}

fn ranges(h: &mut Header, file_len: u64) {
    let data_start = h.data_start();
    let data_len = file_len.saturating_sub(data_start);
    let mut spans: Vec<(u64, u64, usize)> = Vec::new();
    let mut found = Vec::new();
    for (i, t) in h.tensors.iter().enumerate() {
        if check_tensor(t, data_len, &mut found) {
            spans.push((t.data_offsets.0, t.data_offsets.1, i));
        }
    }
    spans.sort();
    check_layout(h, &spans, data_len, &mut found);
    h.findings.extend(found);
}

/// The findings of one tensor's dtype, size, alignment and bounds; false
/// when its offsets are reversed (it then has no span to place).
fn check_tensor(t: &TensorInfo, data_len: u64, found: &mut Vec<Finding>) -> bool {
    let mut push = |rule, msg: String| {
        found.push(
            Finding::new(rule, Some(t.offset), format!("tensor {:?}: {msg}", t.name))
                .in_tensor(t.name.clone()),
        );
    };
    let (begin, end) = t.data_offsets;
    let info = dtype(&t.dtype);
    if info.is_none() {
        push(RuleId::StUnknownDtype, format!("dtype {:?} is not one safetensors defines", t.dtype));
    }
    if begin > end {
        push(RuleId::StReversed, format!("data_offsets [{begin}, {end}] are reversed"));
        return false;
    }
    if let Some(info) = info {
        let bits = t.shape.iter().try_fold(u64::from(info.bits), |a, &d| a.checked_mul(d));
        let want = bits.filter(|b| b % 8 == 0).map(|b| b / 8);
        if want != Some(end - begin) {
            let want = want.map_or_else(|| "no whole number of".into(), |w| format!("{w}"));
            let msg = format!(
                "{} bytes of data, but dtype {} and shape {:?} take {want} bytes",
                end - begin,
                t.dtype,
                t.shape
            );
            push(RuleId::StSizeMismatch, msg);
        }
        let item = u64::from(info.bits / 8).max(1);
        if !begin.is_multiple_of(item) {
            push(
                RuleId::StMisaligned,
                format!("data starts at {begin}, not a multiple of its {item}-byte elements"),
            );
        }
    }
    if end > data_len {
        let msg = format!(
            "data_offsets [{begin}, {end}] end past the {data_len} bytes of data the file holds"
        );
        push(RuleId::StPastEnd, msg);
    }
    true
}

/// The findings of the tensors' spans (sorted) together: overlaps, gaps
/// and bytes after the last tensor.
fn check_layout(h: &Header, spans: &[(u64, u64, usize)], data_len: u64, found: &mut Vec<Finding>) {
    let data_start = h.data_start();
    let mut reach = 0u64;
    let mut last: Option<usize> = None;
    for &(begin, end, i) in spans {
        let t = &h.tensors[i];
        if begin < reach && begin < end {
            let other = last.map(|j| h.tensors[j].name.as_str()).unwrap_or_default();
            let msg =
                format!("tensor {:?}: data [{begin}, {end}) overlaps tensor {other:?}'s", t.name);
            found.push(
                Finding::new(RuleId::StOverlap, Some(data_start.saturating_add(begin)), msg)
                    .spanning(reach - begin)
                    .in_tensor(t.name.clone()),
            );
        } else if begin > reach && begin <= data_len {
            let msg =
                format!("{} bytes before tensor {:?} belong to no tensor", begin - reach, t.name);
            found.push(
                Finding::new(RuleId::StGap, Some(data_start.saturating_add(reach)), msg)
                    .spanning(begin - reach),
            );
        }
        if end.min(data_len) > reach {
            reach = end.min(data_len);
            last = Some(i);
        }
    }
    if reach < data_len {
        let n = data_len - reach;
        let msg = format!("{n} bytes follow the last tensor's data");
        found.push(
            Finding::new(RuleId::StTrailing, Some(data_start.saturating_add(reach)), msg)
                .spanning(n),
        );
    }
}

/// Scans a safetensors file whose first 8 bytes declared `header_len`:
/// `None` when the header is over the limit or past the end of the file.
pub fn scan<R: RandomAccess + ?Sized>(
    src: &mut R,
    header_len: u64,
    findings: &mut Findings,
) -> Result<Option<Header>> {
    let len = src.len();
    if let Err(f) = self::header_len(&header_len.to_le_bytes(), len) {
        findings.push(*f);
        return Ok(None);
    }
    let json = read_vec(src, PREFIX_LEN, header_len, "the safetensors header")?;
    let mut h = parse(&json, len);
    findings.extend(core::mem::take(&mut h.findings));
    Ok(Some(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str, data: usize) -> Vec<u8> {
        let mut out = (json.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(json.as_bytes());
        out.resize(out.len() + data, 0);
        out
    }

    fn rules(json: &str, data: usize) -> Vec<RuleId> {
        let f = file(json, data);
        let mut v: Vec<RuleId> =
            parse(&f[8..8 + json.len()], f.len() as u64).findings.iter().map(|f| f.rule).collect();
        v.sort();
        v
    }

    #[test]
    fn a_clean_header_has_no_findings() {
        let json = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F8_E8M0","shape":[8],"data_offsets":[8,16]}}"#;
        let padded = format!("{json:<width$}", width = json.len().next_multiple_of(8));
        assert_eq!(rules(&padded, 16), []);
        let h = parse(padded.as_bytes(), 8 + padded.len() as u64 + 16);
        assert_eq!(h.tensors.len(), 2);
        assert_eq!(h.metadata, [("format".into(), "pt".into())]);
        assert_eq!(h.tensors[1].offset, 8 + json.find("\"b\"").unwrap() as u64);
    }

    #[test]
    fn each_anomaly_is_flagged() {
        let t = |body: &str| format!("{{{body}}}{}", " ".repeat(7 - (body.len() + 2 + 7) % 8));
        assert_eq!(rules(&t(r#""a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#), 4), []);
        assert_eq!(
            rules(&t(r#""a":{"dtype":"X9","shape":[1],"data_offsets":[0,4]}"#), 4),
            [RuleId::StUnknownDtype]
        );
        assert_eq!(
            rules(&t(r#""a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}"#), 4),
            [RuleId::StSizeMismatch]
        );
        assert_eq!(
            rules(&t(r#""a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}"#), 4),
            [RuleId::StReversed, RuleId::StTrailing]
        );
        assert_eq!(
            rules(&t(r#""a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#), 2),
            [RuleId::StPastEnd]
        );
        assert_eq!(
            rules(&t(r#""a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#), 6),
            [RuleId::StTrailing]
        );
        assert_eq!(
            rules(&t(r#""a":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}"#), 3),
            [RuleId::StGap]
        );
        assert_eq!(
            rules(&t(r#""a":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}"#), 6),
            [RuleId::StGap, RuleId::StMisaligned]
        );
        assert_eq!(
            rules(
                &t(
                    r#""a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}"#
                ),
                4
            ),
            [RuleId::StOverlap]
        );
        assert_eq!(
            rules(
                &t(
                    r#""a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}"#
                ),
                2
            ),
            [RuleId::StDuplicate]
        );
        assert_eq!(rules(&t(r#""__metadata__":{"a":1}"#), 0), [RuleId::StMetadata]);
        assert_eq!(
            rules(&t(r#""a":{"dtype":"F32","shape":"x","data_offsets":[0,4]}"#), 4),
            [RuleId::StEntry, RuleId::StTrailing]
        );
        assert_eq!(rules(&t(r#""a":[}"#), 0), [RuleId::StHeaderJson]);
        assert_eq!(rules("[1]     ", 0), [RuleId::StHeaderJson]);
        assert_eq!(rules("{}", 0), [RuleId::StMisaligned]);
        let huge = t(
            r#""a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}"#,
        );
        assert_eq!(rules(&huge, 0), [RuleId::StPastEnd]);
    }

    #[test]
    fn the_header_length_is_checked_once() {
        assert_eq!(header_len(&8u64.to_le_bytes(), 16), Ok(8));
        for (prefix, len, why) in [
            (&[1u8, 0][..], 2, "shorter than"),
            (&9u64.to_le_bytes()[..], 16, "beyond the end of the 16-byte file"),
            (&u64::MAX.to_le_bytes()[..], u64::MAX, "above the limit"),
        ] {
            let f = header_len(prefix, len).unwrap_err();
            assert_eq!((f.rule, f.offset), (RuleId::StHeaderLimit, Some(0)));
            assert!(f.message.contains(why), "{}", f.message);
        }
    }

    #[test]
    fn each_policy_refuses_its_rules_first_by_offset() {
        let header = |json: &str, data: usize| {
            let f = file(json, data);
            parse(&f[8..8 + json.len()], f.len() as u64)
        };
        // A gap (and a misaligned header): a loader refuses, a summary shows.
        let h = header(r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#, 2);
        assert_eq!(h.refusal(loader_refuses).map(|f| f.rule), Some(RuleId::StGap));
        assert!(h.refusal(summary_refuses).is_none());
        // The unknown dtype comes first in the file, before the gap's data.
        let h = header(r#"{"b":{"dtype":"X9","shape":[1],"data_offsets":[1,2]}}"#, 2);
        assert_eq!(h.refusal(loader_refuses).map(|f| f.rule), Some(RuleId::StUnknownDtype));
        assert_eq!(h.refusal(summary_refuses).map(|f| f.rule), Some(RuleId::StUnknownDtype));
        let h = header(r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#, 2);
        assert_eq!(h.findings.iter().map(|f| f.rule).collect::<Vec<_>>(), [RuleId::StMisaligned]);
        assert!(h.refusal(loader_refuses).is_none() && h.refusal(summary_refuses).is_none());
    }

    #[test]
    fn the_dtype_table_names_e8m0_as_safetensors_does() {
        assert_eq!(name_of(ElementType::F8E8M0FNU), Some("F8_E8M0"));
        assert_eq!(dtype("F4").map(|d| d.bits), Some(4));
        assert!(dtype("E8M0").is_none());
    }

    #[test]
    fn packed_float4_counts_values_in_the_last_dimension() {
        let x2 = ElementType::F4E2M1FNx2;
        assert_eq!(to_safetensors(x2, &[2, 3]), Some(("F4", alloc::vec![2, 6])));
        assert_eq!(to_safetensors(x2, &[]), None);
        assert_eq!(from_safetensors("F4", &[2, 6]), Some((x2, alloc::vec![2, 3])));
        assert_eq!(from_safetensors("F4", &[2, 5]), None);
        assert_eq!(from_safetensors("F4", &[]), None);
        assert_eq!(to_safetensors(ElementType::F32, &[]), Some(("F32", alloc::vec![])));
        assert_eq!(to_safetensors(ElementType::Complex128, &[1]), None);
        assert_eq!(from_safetensors("F6_E2M3", &[4]), None);
        for d in DTYPES.iter().filter(|d| d.element.is_some()) {
            assert_eq!(name_of(d.element.unwrap()), Some(d.name));
        }
    }
}
