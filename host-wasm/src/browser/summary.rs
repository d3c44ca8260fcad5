//! What the inspector page shows, as one serde structure for all three
//! formats: header fields, totals by dtype and one row per tensor.

use std::borrow::Cow;

use serde::Serialize;
use tensorizer_core::TensorPath;
use tensorizer_core::totals::Totals;

use crate::error::ValidateError;

/// Version of the summary layout the page reads.
pub const SUMMARY_VERSION: u32 = 1;

/// A file's header and index, ready to show.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// [`SUMMARY_VERSION`].
    pub summary_version: u32,
    /// `tensorizer`, `safetensors` or `torch`.
    pub format: &'static str,
    /// The name the page gave.
    pub file: String,
    /// The file's length.
    pub file_bytes: u64,
    /// Format-specific header fields, in display order: `[label, value]`.
    pub header: Vec<(String, serde_json::Value)>,
    /// Whether tensor data is encrypted (a key is needed to verify).
    pub encrypted: bool,
    /// Number of rows in [`Summary::tensors`].
    pub tensor_count: usize,
    /// Stored data bytes over all tensors.
    pub data_bytes: u64,
    /// Tensors, parameters and bytes in all, per dtype and per top-level
    /// module ([`to_json`] writes them as `totals`).
    #[serde(skip)]
    pub totals: Totals,
    /// One row per tensor, in file order. [`to_json`] writes them as
    /// columns.
    #[serde(skip)]
    pub tensors: Vec<Row>,
    /// What "Verify" checks for this format, or why it cannot.
    pub verify: &'static str,
    /// Reads made to open the file.
    pub reads: u64,
    /// Bytes read to open the file.
    pub bytes_read: u64,
}

/// Text shared by many rows (a dtype, a tensor type): cloning it is a
/// reference count, not an allocation.
pub type Shared = std::rc::Rc<str>;

/// One tensor.
#[derive(Debug, Clone)]
pub struct Row {
    /// Position in the file's index (the row's position in
    /// [`Summary::tensors`]).
    pub index: usize,
    /// The name as text (structured paths as `a.b[0]`).
    pub name: String,
    /// Path components, strings (keys) and integers (list indices), for
    /// structured paths; `None` for a plain name.
    pub path: Option<Vec<serde_json::Value>>,
    /// The dtype (torch's name for tensorizer and torch files,
    /// safetensors' own name for safetensors).
    pub dtype: Shared,
    /// The dtype exactly as the file stores it (tensorizer: numpy's
    /// `<f4`, ...).
    pub dtype_string: Shared,
    /// The shape.
    pub shape: Vec<u64>,
    /// In-memory size in bytes.
    pub bytes: u64,
    /// Absolute offset of the data, when known without further reads.
    pub data_offset: Option<u64>,
    /// Stored data bytes.
    pub data_length: u64,
    /// Format-specific detail: tensorizer's tensor type, torch's storage.
    pub kind: Shared,
    /// A meta tensor: elements but no stored data.
    pub meta: bool,
}

impl Row {
    /// The path components: the structured path, or the plain name alone.
    pub fn components(&self) -> Vec<serde_json::Value> {
        self.path.clone().unwrap_or_else(|| vec![serde_json::Value::from(self.name.clone())])
    }
}

/// The name of `p` as text and, for a structured path, its components as
/// JSON values ([`tensorizer_core::report::path_json`], as every report
/// gives them).
pub fn name_and_path(p: &TensorPath) -> (String, Option<Vec<serde_json::Value>>) {
    match p {
        TensorPath::Plain(s) => (s.clone(), None),
        TensorPath::Structured(_) => (p.to_string(), Some(tensorizer_core::report::path_json(p))),
    }
}

/// Totals over `rows`, by dtype (the name the row shows) and by top-level
/// module (`module` gives a row's: [`tensorizer_core::totals::top_module`]).
pub fn totals<'a>(rows: &'a [Row], module: impl Fn(&'a Row) -> Cow<'a, str>) -> Totals {
    let mut t = Totals::new();
    for r in rows {
        t.add(&module(r), &r.dtype, &r.shape, r.bytes, r.data_length);
    }
    t
}

/// A header field.
pub fn field(label: &str, value: impl Into<serde_json::Value>) -> (String, serde_json::Value) {
    (label.to_string(), value.into())
}

/// The one line the page shows for an error: the message, with the byte
/// offset appended when the message does not already name it.
pub fn error_line(e: &ValidateError) -> String {
    match e.offset {
        Some(at) if !e.message.contains(&format!("byte {at}")) => {
            format!("{} (at byte {at})", e.message)
        }
        _ => e.message.clone(),
    }
}

/// Appends `s` as a JSON string. Names are almost always plain text, so
/// they are copied at once; only strings with characters JSON must escape
/// go through serde_json.
fn push_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.extend_from_slice(serde_json::Value::from(s).to_string().as_bytes());
    } else {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    // Digits by hand: `write!` costs several times more per number, and a
    // large file's columns hold a few numbers per tensor.
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends a column: `"key":[item,item,...]`.
fn push_column<T>(
    out: &mut Vec<u8>,
    key: &str,
    rows: &[T],
    mut item: impl FnMut(&mut Vec<u8>, &T),
) {
    out.push(b',');
    push_str(out, key);
    out.extend_from_slice(b":[");
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item(out, r);
    }
    out.push(b']');
}

/// Distinct values of a text column and each row's index into them.
fn interned<'a>(rows: &'a [Row], get: impl Fn(&'a Row) -> &'a str) -> (Vec<&'a str>, Vec<usize>) {
    let mut values: Vec<&str> = Vec::new();
    let ids = rows
        .iter()
        .map(|r| {
            let v = get(r);
            values.iter().position(|&x| x == v).unwrap_or_else(|| {
                values.push(v);
                values.len() - 1
            })
        })
        .collect();
    (values, ids)
}

/// The summary as JSON text, rows as columns (much smaller and faster to
/// parse than one object per row for files with many tensors):
/// `"columns": {"name": [...], "path": [null | [...]], "dtype": [i],
/// "dtypes": [...], "dtype_string": [i], "dtype_strings": [...], "shape":
/// [[...]], "bytes": [...], "data_offset": [n | null], "data_length":
/// [...], "kind": [i], "kinds": [...], "meta": [0 | 1]}`. A `null` path
/// means the plain name.
pub fn to_json(s: &Summary) -> String {
    let mut head = serde_json::to_value(s).unwrap_or_default();
    if let serde_json::Value::Object(o) = &mut head {
        o.insert("totals".into(), s.totals.to_json());
    }
    let head = head.to_string();
    let rows = &s.tensors;
    let mut out: Vec<u8> = Vec::with_capacity(head.len() + rows.len() * 80 + 256);
    out.extend_from_slice(head.strip_suffix('}').unwrap_or("{").as_bytes());
    if out.len() > 1 {
        out.push(b',');
    }
    out.extend_from_slice(b"\"columns\":{\"count\":");
    push_u64(&mut out, rows.len() as u64);
    push_column(&mut out, "name", rows, |o, r| push_str(o, &r.name));
    push_column(&mut out, "path", rows, |o, r| match &r.path {
        None => o.extend_from_slice(b"null"),
        Some(p) => o.extend_from_slice(serde_json::Value::from(p.clone()).to_string().as_bytes()),
    });
    for (key, table, get) in [
        ("dtype", "dtypes", (|r: &Row| &*r.dtype) as fn(&Row) -> &str),
        ("dtype_string", "dtype_strings", |r: &Row| &*r.dtype_string),
        ("kind", "kinds", |r: &Row| &*r.kind),
    ] {
        let (values, ids) = interned(rows, get);
        push_column(&mut out, key, &ids, |o, &i| push_u64(o, i as u64));
        push_column(&mut out, table, &values, |o, v| push_str(o, v));
    }
    push_column(&mut out, "shape", rows, |o, r| {
        o.push(b'[');
        for (i, d) in r.shape.iter().enumerate() {
            if i > 0 {
                o.push(b',');
            }
            push_u64(o, *d);
        }
        o.push(b']');
    });
    push_column(&mut out, "bytes", rows, |o, r| push_u64(o, r.bytes));
    push_column(&mut out, "data_offset", rows, |o, r| match r.data_offset {
        Some(n) => push_u64(o, n),
        None => o.extend_from_slice(b"null"),
    });
    push_column(&mut out, "data_length", rows, |o, r| push_u64(o, r.data_length));
    push_column(&mut out, "meta", rows, |o, r| o.push(if r.meta { b'1' } else { b'0' }));
    out.extend_from_slice(b"}}");
    // Only whole UTF-8 strings and ASCII went in.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_round_trip_through_json() {
        let row = |i: usize, name: &str, path: Option<Vec<serde_json::Value>>| Row {
            index: i,
            name: name.to_string(),
            path,
            dtype: "float32".into(),
            dtype_string: "<f4".into(),
            shape: vec![2, 3],
            bytes: 24,
            data_offset: if i == 0 { Some(100) } else { None },
            data_length: 24,
            kind: "PARAM".into(),
            meta: i == 1,
        };
        let rows = vec![
            row(0, "a.b", None),
            row(1, "x[0]\"q\u{1}", Some(vec!["x".into(), 0.into(), "q\"\u{1}".into()])),
        ];
        let s = Summary {
            summary_version: SUMMARY_VERSION,
            format: "tensorizer",
            file: "f".into(),
            file_bytes: 1,
            header: vec![field("k", 1)],
            encrypted: false,
            tensor_count: 2,
            data_bytes: 48,
            totals: totals(&rows, |r| {
                Cow::Borrowed(tensorizer_core::totals::top_module_of_name(&r.name))
            }),
            tensors: rows,
            verify: "",
            reads: 1,
            bytes_read: 1,
        };
        let v: serde_json::Value = serde_json::from_str(&to_json(&s)).unwrap();
        let c = &v["columns"];
        assert_eq!(c["count"], 2);
        assert_eq!(c["name"][1], "x[0]\"q\u{1}");
        assert_eq!(c["path"][0], serde_json::Value::Null);
        assert_eq!(c["path"][1][1], 0);
        assert_eq!(c["dtypes"][c["dtype"][1].as_u64().unwrap() as usize], "float32");
        assert_eq!(c["shape"][0], serde_json::json!([2, 3]));
        assert_eq!(c["data_offset"], serde_json::json!([100, null]));
        let mut n = Vec::new();
        for x in [0, 7, 10, 12345, u64::MAX] {
            n.clear();
            push_u64(&mut n, x);
            assert_eq!(n, x.to_string().as_bytes());
        }
        assert_eq!(c["meta"], serde_json::json!([0, 1]));
        assert_eq!(v["format"], "tensorizer");
        assert_eq!(v["totals"]["params"], 12);
        assert_eq!(v["totals"]["by_dtype"]["float32"]["tensors"], 2);
        assert_eq!(v["totals"]["by_module"]["a"]["params"], 6);
        assert!(v.get("tensors").is_none());
    }
}
