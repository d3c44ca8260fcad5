//! Tensor names: a plain UTF-8 string, or a structured path (mapping keys and
//! sequence indices) stored as `0x1E` followed by a compact JSON array.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::{self, Write as _};

use crate::error::{Error, Result};
use crate::layout::{MAX_NAME_LEN, MAX_PATH_DEPTH};

/// ASCII record separator: the first byte of a structured path.
pub const STRUCTURED_PREFIX: u8 = 0x1e;

/// One step of a structured path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathComponent {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(u64),
}

/// A tensor's name. One string component is always [`TensorPath::Plain`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TensorPath {
    /// A single string, stored as its UTF-8 bytes.
    Plain(String),
    /// Anything else, stored as `0x1E` + JSON. Never a single key.
    Structured(Vec<PathComponent>),
}

impl TensorPath {
    /// Builds a path from components, normalising a lone key to `Plain`.
    pub fn from_components(mut components: Vec<PathComponent>) -> Result<Self> {
        match components.as_slice() {
            [] => Err(Error::InvalidName { offset: 0, reason: "empty tensor path" }),
            [PathComponent::Key(_)] => match components.pop() {
                Some(PathComponent::Key(k)) => Ok(Self::Plain(k)),
                _ => Err(Error::InvalidName { offset: 0, reason: "empty tensor path" }),
            },
            _ => Ok(Self::Structured(components)),
        }
    }

    /// The flat dotted name: a plain name as it is; a structured path's
    /// components joined with `.`, indices in decimal (`["layers", 0, "w"]`
    /// is `layers.0.w`). safetensors outputs and fingerprints use it.
    pub fn dotted_name(&self) -> String {
        match self {
            Self::Plain(s) => s.clone(),
            Self::Structured(components) => {
                let mut out = String::new();
                for (i, c) in components.iter().enumerate() {
                    if i > 0 {
                        out.push('.');
                    }
                    match c {
                        PathComponent::Key(k) => out.push_str(k),
                        PathComponent::Index(n) => {
                            let _ = write!(out, "{n}");
                        }
                    }
                }
                out
            }
        }
    }

    /// The components of this path (a plain name is one key).
    pub fn components(&self) -> Vec<PathComponent> {
        match self {
            Self::Plain(s) => alloc::vec![PathComponent::Key(s.clone())],
            Self::Structured(c) => c.clone(),
        }
    }

    /// The number of components (1 for a plain name).
    pub fn depth(&self) -> usize {
        match self {
            Self::Plain(_) => 1,
            Self::Structured(c) => c.len(),
        }
    }

    /// Decodes stored name bytes exactly as tensorizer does, refusing paths
    /// deeper than [`MAX_PATH_DEPTH`].
    pub fn parse(bytes: &[u8], offset: u64) -> Result<Self> {
        Self::parse_limited(bytes, offset, MAX_PATH_DEPTH)
    }

    /// [`TensorPath::parse`] with a caller-chosen depth limit.
    pub fn parse_limited(bytes: &[u8], offset: u64, max_depth: usize) -> Result<Self> {
        let bad = |reason| Error::InvalidName { offset, reason };
        match bytes.first() {
            None => Err(bad("empty tensor name")),
            Some(&STRUCTURED_PREFIX) => {
                let json = &bytes[1..];
                if json.len() < 2 || json[0] != b'[' || json[json.len() - 1] != b']' {
                    return Err(bad("structured path is not a JSON array"));
                }
                if json.iter().any(|&b| b == b'\n' || b == b'\r') {
                    return Err(bad("structured path contains a line break"));
                }
                let value: serde_json::Value = serde_json::from_slice(json)
                    .map_err(|_| bad("structured path is not valid JSON"))?;
                let serde_json::Value::Array(items) = value else {
                    return Err(bad("structured path is not a JSON array"));
                };
                if items.is_empty() {
                    return Err(bad("structured path is empty"));
                }
                if items.len() > max_depth {
                    return Err(Error::limit(
                        offset,
                        "tensor path depth",
                        items.len() as u64,
                        max_depth as u64,
                    ));
                }
                let mut components = Vec::with_capacity(items.len());
                for item in items {
                    components.push(match item {
                        serde_json::Value::String(s) => PathComponent::Key(s),
                        serde_json::Value::Number(n) => match n.as_u64() {
                            Some(i) => PathComponent::Index(i),
                            None => return Err(bad("path index is not a non-negative integer")),
                        },
                        _ => return Err(bad("path component is not a string or an index")),
                    });
                }
                Self::from_components(components).map_err(|_| bad("structured path is empty"))
            }
            Some(_) => match core::str::from_utf8(bytes) {
                Ok(s) => Ok(Self::Plain(s.to_string())),
                Err(_) => Err(bad("name is not valid UTF-8")),
            },
        }
    }

    /// The stored bytes: UTF-8 for plain names, `0x1E` + compact ASCII JSON
    /// (as Python's `json.dumps(..., ensure_ascii=True, separators=(",", ":"))`).
    ///
    /// Rejects what could not be read back: empty names, plain names that
    /// start with `0x1E`, and names longer than 65535 bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let bad = |reason| Error::InvalidName { offset: 0, reason };
        let bytes = match self {
            Self::Plain(s) if s.is_empty() => return Err(bad("empty tensor name")),
            Self::Plain(s) if s.as_bytes()[0] == STRUCTURED_PREFIX => {
                return Err(bad("a plain name may not start with 0x1E"));
            }
            Self::Plain(s) => s.as_bytes().to_vec(),
            Self::Structured(c)
                if c.len() < 2 && !matches!(c.as_slice(), [PathComponent::Index(_)]) =>
            {
                return Err(bad("a structured path needs an index or two components"));
            }
            Self::Structured(c) if c.len() > MAX_PATH_DEPTH => {
                return Err(bad("path deeper than 1024 components (readers refuse it)"));
            }
            Self::Structured(components) => {
                let mut out = String::from("\u{1e}[");
                for (i, c) in components.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    match c {
                        PathComponent::Index(n) => {
                            let _ = write!(out, "{n}");
                        }
                        PathComponent::Key(k) => push_json_string(&mut out, k),
                    }
                }
                out.push(']');
                out.into_bytes()
            }
        };
        if bytes.len() > MAX_NAME_LEN {
            return Err(bad("name longer than 65535 bytes"));
        }
        Ok(bytes)
    }
}

/// Appends `s` as a JSON string the way Python's `json` module does with
/// `ensure_ascii=True`.
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(ch),
            _ => {
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

impl fmt::Display for TensorPath {
    /// Plain names as they are; structured paths as dotted/indexed text,
    /// e.g. `model.layers[0].w`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plain(s) => f.write_str(s),
            Self::Structured(components) => {
                for (i, c) in components.iter().enumerate() {
                    match c {
                        PathComponent::Index(n) => write!(f, "[{n}]")?,
                        PathComponent::Key(k) if i == 0 => f.write_str(k)?,
                        PathComponent::Key(k) => write!(f, ".{k}")?,
                    }
                }
                Ok(())
            }
        }
    }
}

impl From<&str> for TensorPath {
    fn from(s: &str) -> Self {
        Self::Plain(s.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::PathComponent::{Index, Key};
    use super::*;

    fn key(s: &str) -> PathComponent {
        Key(s.to_string())
    }

    #[test]
    fn dotted_names_join_components() {
        let p = TensorPath::from_components(alloc::vec![
            Key("layers".into()),
            Index(10),
            Key("w.x".into())
        ])
        .unwrap();
        assert_eq!(p.dotted_name(), "layers.10.w.x");
        assert_eq!(TensorPath::from("a.b").dotted_name(), "a.b");
    }

    #[test]
    fn structured_matches_python_json() {
        let p = TensorPath::Structured(alloc::vec![key("model"), key("layer"), Index(0), key("w")]);
        assert_eq!(p.to_bytes().unwrap(), b"\x1e[\"model\",\"layer\",0,\"w\"]");
        let q =
            TensorPath::Structured(alloc::vec![key("q\"\\\n\t\u{7f}\u{e9}\u{1f600}"), Index(7)]);
        assert_eq!(
            q.to_bytes().unwrap(),
            b"\x1e[\"q\\\"\\\\\\n\\t\\u007f\\u00e9\\ud83d\\ude00\",7]".to_vec()
        );
        assert_eq!(TensorPath::parse(&q.to_bytes().unwrap(), 0).unwrap(), q);
    }

    #[test]
    fn decoding_rules() {
        assert_eq!(TensorPath::parse(b"a.b", 0).unwrap(), TensorPath::Plain("a.b".into()));
        assert_eq!(TensorPath::parse(b"\x1e[\"x\"]", 0).unwrap(), TensorPath::Plain("x".into()));
        assert_eq!(
            TensorPath::parse(b"\x1e[3]", 0).unwrap(),
            TensorPath::Structured(alloc::vec![Index(3)])
        );
        for bad in [
            &b""[..],
            b"\x1eabc",
            b"\x1e[]",
            b"\x1e[true]",
            b"\x1e[-1]",
            b"\x1e[1.5]",
            b"\x1e[{}]",
            b"\x1e[\n1]",
            b"\xff",
        ] {
            assert!(TensorPath::parse(bad, 5).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn depth_is_limited() {
        let at_limit = TensorPath::Structured(alloc::vec![Index(0); MAX_PATH_DEPTH]);
        let bytes = at_limit.to_bytes().unwrap();
        assert_eq!(TensorPath::parse(&bytes, 0).unwrap(), at_limit);
        let over = TensorPath::Structured(alloc::vec![Index(0); MAX_PATH_DEPTH + 1]);
        assert!(over.to_bytes().is_err());
        let mut raw = bytes.clone();
        raw.pop();
        raw.extend_from_slice(b",0]");
        let err = TensorPath::parse(&raw, 9).unwrap_err();
        assert!(
            matches!(err, Error::LimitExceeded { offset: 9, value: 1025, limit: 1024, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("path depth"));
        assert!(TensorPath::parse_limited(&raw, 9, 2000).is_ok());
    }

    #[test]
    fn writer_rejects_unreadable_names() {
        assert!(TensorPath::Plain(String::new()).to_bytes().is_err());
        assert!(TensorPath::Plain("\u{1e}x".into()).to_bytes().is_err());
        assert!(TensorPath::Structured(alloc::vec![key("a")]).to_bytes().is_err());
    }
}
