//! dtype strings: numpy's `dtype.str` (`"<f4"`, `"|b1"`), optionally followed
//! by a NUL and a torch dtype name for types numpy lacks (`"<V2\0torch.bfloat16"`).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::error::{Error, Result};
use crate::layout::MAX_DTYPE_LEN;

/// The separator between the numpy part and the torch part of an opaque dtype.
pub const OPAQUE_SEPARATOR: char = '\0';

/// Byte-order character of a numpy dtype string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// `<`
    Little,
    /// `>`
    Big,
    /// `|`: single-byte types.
    NotApplicable,
}

/// The element types tensorizer writes, named after torch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum ElementType {
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    F32,
    F64,
    Complex64,
    Complex128,
    BF16,
    Complex32,
    F8E5M2,
    F8E4M3FN,
    F8E5M2FNUZ,
    F8E4M3FNUZ,
    F8E8M0FNU,
    F4E2M1FNx2,
    Bits8,
    Bits16,
    Bits1x8,
    Bits2x4,
    Bits4x2,
    UInt1,
    UInt2,
    UInt3,
    UInt4,
    UInt5,
    UInt6,
    UInt7,
    Int1,
    Int2,
    Int3,
    Int4,
    Int5,
    Int6,
    Int7,
}

/// Element types stored with a plain numpy dtype string: (type, kind, size).
const NUMPY_TYPES: &[(ElementType, u8, u32)] = &[
    (ElementType::Bool, b'b', 1),
    (ElementType::U8, b'u', 1),
    (ElementType::I8, b'i', 1),
    (ElementType::U16, b'u', 2),
    (ElementType::I16, b'i', 2),
    (ElementType::U32, b'u', 4),
    (ElementType::I32, b'i', 4),
    (ElementType::U64, b'u', 8),
    (ElementType::I64, b'i', 8),
    (ElementType::F16, b'f', 2),
    (ElementType::F32, b'f', 4),
    (ElementType::F64, b'f', 8),
    (ElementType::Complex64, b'c', 8),
    (ElementType::Complex128, b'c', 16),
];

/// Element types numpy lacks, stored as `V<size>` plus the torch name.
const OPAQUE_TYPES: &[(ElementType, &str, u32)] = &[
    (ElementType::BF16, "bfloat16", 2),
    (ElementType::Complex32, "complex32", 4),
    (ElementType::F8E5M2, "float8_e5m2", 1),
    (ElementType::F8E4M3FN, "float8_e4m3fn", 1),
    (ElementType::F8E5M2FNUZ, "float8_e5m2fnuz", 1),
    (ElementType::F8E4M3FNUZ, "float8_e4m3fnuz", 1),
    (ElementType::F8E8M0FNU, "float8_e8m0fnu", 1),
    (ElementType::F4E2M1FNx2, "float4_e2m1fn_x2", 1),
    (ElementType::Bits8, "bits8", 1),
    (ElementType::Bits16, "bits16", 2),
    (ElementType::Bits1x8, "bits1x8", 1),
    (ElementType::Bits2x4, "bits2x4", 1),
    (ElementType::Bits4x2, "bits4x2", 1),
    (ElementType::UInt1, "uint1", 1),
    (ElementType::UInt2, "uint2", 1),
    (ElementType::UInt3, "uint3", 1),
    (ElementType::UInt4, "uint4", 1),
    (ElementType::UInt5, "uint5", 1),
    (ElementType::UInt6, "uint6", 1),
    (ElementType::UInt7, "uint7", 1),
    (ElementType::Int1, "int1", 1),
    (ElementType::Int2, "int2", 1),
    (ElementType::Int3, "int3", 1),
    (ElementType::Int4, "int4", 1),
    (ElementType::Int5, "int5", 1),
    (ElementType::Int6, "int6", 1),
    (ElementType::Int7, "int7", 1),
];

impl ElementType {
    /// Size of one element in bytes as stored (sub-byte types take a byte).
    pub fn size(self) -> u32 {
        if let Some(&(_, _, size)) = NUMPY_TYPES.iter().find(|e| e.0 == self) {
            return size;
        }
        OPAQUE_TYPES.iter().find(|e| e.0 == self).map_or(1, |e| e.2)
    }

    /// torch's name without the `torch.` prefix, e.g. `"bfloat16"`.
    pub fn torch_name(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::U8 => "uint8",
            Self::I8 => "int8",
            Self::U16 => "uint16",
            Self::I16 => "int16",
            Self::U32 => "uint32",
            Self::I32 => "int32",
            Self::U64 => "uint64",
            Self::I64 => "int64",
            Self::F16 => "float16",
            Self::F32 => "float32",
            Self::F64 => "float64",
            Self::Complex64 => "complex64",
            Self::Complex128 => "complex128",
            other => OPAQUE_TYPES.iter().find(|e| e.0 == other).map_or("?", |e| e.1),
        }
    }

    /// Bytes that reverse as one unit to turn a big-endian element into a
    /// little-endian one: the item size, half of it for complex types (two
    /// floats); 1 means nothing to swap.
    pub fn swap_unit(self) -> usize {
        let size = self.size() as usize;
        match self {
            Self::Complex32 | Self::Complex64 | Self::Complex128 => size / 2,
            _ => size,
        }
    }

    /// Whether tensorizer stores this type with an opaque (`V`) dtype string.
    pub fn is_opaque(self) -> bool {
        OPAQUE_TYPES.iter().any(|e| e.0 == self)
    }

    /// Looks a type up by torch's name (with or without `torch.`).
    pub fn from_torch_name(name: &str) -> Option<Self> {
        let name = name.strip_prefix("torch.").unwrap_or(name);
        if let Some(&(t, _, _)) = NUMPY_TYPES.iter().find(|e| e.0.torch_name() == name) {
            return Some(t);
        }
        let alias = match name {
            "half" => Some(Self::F16),
            "float" => Some(Self::F32),
            "double" => Some(Self::F64),
            "short" => Some(Self::I16),
            "int" => Some(Self::I32),
            "long" => Some(Self::I64),
            "chalf" => Some(Self::Complex32),
            "cfloat" => Some(Self::Complex64),
            "cdouble" => Some(Self::Complex128),
            _ => None,
        };
        alias.or_else(|| OPAQUE_TYPES.iter().find(|e| e.1 == name).map(|e| e.0))
    }
}

/// A dtype string exactly as stored, with its decoded meaning.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Dtype {
    text: String,
    order: ByteOrder,
    kind: u8,
    itemsize: u32,
    torch_start: Option<usize>,
    element: Option<ElementType>,
}

impl Dtype {
    /// The string tensorizer writes for `element` on a little-endian host.
    pub fn from_element(element: ElementType) -> Self {
        let size = element.size();
        let order = if size == 1 { '|' } else { '<' };
        let text = if let Some(&(_, kind, _)) = NUMPY_TYPES.iter().find(|e| e.0 == element) {
            alloc::format!("{order}{}{size}", kind as char)
        } else {
            alloc::format!("{order}V{size}{OPAQUE_SEPARATOR}torch.{}", element.torch_name())
        };
        // Every string built above is valid by construction.
        Self::parse(text.as_bytes(), 0).unwrap_or_else(|_| unreachable_dtype())
    }

    /// Parses a stored dtype string. `offset` is used in errors only.
    pub fn parse(bytes: &[u8], offset: u64) -> Result<Self> {
        let unsupported = || Error::UnsupportedDtype {
            offset,
            dtype: String::from_utf8_lossy(bytes).into_owned(),
        };
        if bytes.is_empty() || bytes.len() > MAX_DTYPE_LEN {
            return Err(unsupported());
        }
        let text = core::str::from_utf8(bytes).map_err(|_| unsupported())?;
        let mut parts = text.split(OPAQUE_SEPARATOR);
        let numpy = parts.next().unwrap_or_default();
        let torch = parts.next();
        if parts.next().is_some() {
            return Err(unsupported());
        }
        let (order, rest) = match numpy.as_bytes().first() {
            Some(b'<') => (ByteOrder::Little, &numpy[1..]),
            Some(b'>') => (ByteOrder::Big, &numpy[1..]),
            Some(b'|') => (ByteOrder::NotApplicable, &numpy[1..]),
            _ => return Err(unsupported()),
        };
        let (kind, digits) = match rest.as_bytes().first() {
            Some(&k) if k.is_ascii_alphabetic() => (k, &rest[1..]),
            _ => return Err(unsupported()),
        };
        if digits.is_empty()
            || digits.starts_with('0')
            || digits.len() > 5
            || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(unsupported());
        }
        let itemsize: u32 = digits.parse().map_err(|_| unsupported())?;
        let valid_size = match kind {
            b'b' => itemsize == 1,
            b'i' | b'u' => matches!(itemsize, 1 | 2 | 4 | 8),
            b'f' => matches!(itemsize, 2 | 4 | 8),
            b'c' => matches!(itemsize, 8 | 16),
            b'V' => (1..=u32::from(u16::MAX)).contains(&itemsize),
            _ => false,
        };
        // `|` is only for single-byte types; single-byte types ignore order.
        let order = match (order, itemsize) {
            (_, 1) => ByteOrder::NotApplicable,
            (ByteOrder::NotApplicable, _) => return Err(unsupported()),
            (o, _) => o,
        };
        // An opaque type is exactly a void type with a torch name.
        if !valid_size || (kind == b'V') != torch.is_some() {
            return Err(unsupported());
        }
        let element = match torch {
            Some(name) => {
                let name = name
                    .strip_prefix("torch.")
                    .filter(|n| !n.is_empty() && !n.starts_with("torch."))
                    .ok_or_else(unsupported)?;
                match ElementType::from_torch_name(name) {
                    Some(t) if t.size() != itemsize => return Err(unsupported()),
                    found => found,
                }
            }
            None => NUMPY_TYPES.iter().find(|e| e.1 == kind && e.2 == itemsize).map(|e| e.0),
        };
        // An unknown torch name keeps no element type, only a size.
        Ok(Self {
            torch_start: torch.map(|_| numpy.len() + 1),
            text: text.to_string(),
            order,
            kind,
            itemsize,
            element,
        })
    }

    /// The exact stored string.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The numpy part, before any NUL separator (e.g. `"<V2"`).
    pub fn numpy_str(&self) -> &str {
        match self.torch_start {
            Some(start) => &self.text[..start - 1],
            None => &self.text,
        }
    }

    /// The torch part after the separator (e.g. `"torch.bfloat16"`), if any.
    pub fn torch_str(&self) -> Option<&str> {
        self.torch_start.map(|start| &self.text[start..])
    }

    /// Whether this is an opaque dtype (it carries a torch name).
    pub fn is_opaque(&self) -> bool {
        self.torch_start.is_some()
    }

    /// Size of one element in bytes.
    pub fn itemsize(&self) -> u32 {
        self.itemsize
    }

    /// Byte order of the stored elements.
    pub fn byte_order(&self) -> ByteOrder {
        self.order
    }

    /// numpy's kind character (`b`, `i`, `u`, `f`, `c` or `V`).
    pub fn kind(&self) -> char {
        self.kind as char
    }

    /// The decoded element type, when it is one torch knows.
    pub fn element(&self) -> Option<ElementType> {
        self.element
    }

    /// Bytes that reverse as one unit to turn a stored element into a
    /// little-endian one: `None` for little-endian and single-byte types,
    /// else the item size (half of it for complex types: two floats).
    pub fn swap_unit(&self) -> Option<usize> {
        if self.order != ByteOrder::Big || self.itemsize < 2 {
            return None;
        }
        let unit = if self.kind == b'c' { self.itemsize / 2 } else { self.itemsize };
        Some(unit as usize)
    }

    /// Bytes of a tensor of `shape`, or `None` on overflow.
    pub fn nbytes(&self, shape: &[u64]) -> Option<u64> {
        shape.iter().try_fold(u64::from(self.itemsize), |acc, &d| acc.checked_mul(d))
    }
}

#[cold]
fn unreachable_dtype() -> Dtype {
    Dtype {
        text: String::from("|u1"),
        order: ByteOrder::NotApplicable,
        kind: b'u',
        itemsize: 1,
        torch_start: None,
        element: Some(ElementType::U8),
    }
}

impl fmt::Debug for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl fmt::Display for Dtype {
    /// torch's name for the type (`float32`), with ` (big-endian)` after
    /// it when the stored bytes are big-endian.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.element, self.torch_str()) {
            (Some(e), _) => write!(f, "{}", e.torch_name())?,
            (None, Some(t)) => f.write_str(t.strip_prefix("torch.").unwrap_or(t))?,
            (None, None) => return f.write_str(self.numpy_str()),
        }
        if self.order == ByteOrder::Big { f.write_str(" (big-endian)") } else { Ok(()) }
    }
}

/// Every element type, for tests and tools.
pub fn all_element_types() -> Vec<ElementType> {
    NUMPY_TYPES.iter().map(|e| e.0).chain(OPAQUE_TYPES.iter().map(|e| e.0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_match_tensorizer() {
        let cases = [
            (ElementType::F32, "<f4"),
            (ElementType::Bool, "|b1"),
            (ElementType::U8, "|u1"),
            (ElementType::I8, "|i1"),
            (ElementType::Complex128, "<c16"),
            (ElementType::BF16, "<V2\0torch.bfloat16"),
            (ElementType::Complex32, "<V4\0torch.complex32"),
            (ElementType::F8E4M3FN, "|V1\0torch.float8_e4m3fn"),
        ];
        for (e, s) in cases {
            let d = Dtype::from_element(e);
            assert_eq!(d.as_str(), s);
            assert_eq!(Dtype::parse(s.as_bytes(), 0).unwrap().element(), Some(e));
        }
    }

    #[test]
    fn every_element_round_trips() {
        for e in all_element_types() {
            let d = Dtype::from_element(e);
            assert_eq!(d.element(), Some(e), "{e:?}");
            assert_eq!(d.itemsize(), e.size());
            assert_eq!(d.is_opaque(), e.is_opaque());
        }
    }

    #[test]
    fn display_names_the_byte_order() {
        assert_eq!(Dtype::parse(b"<f4", 0).unwrap().to_string(), "float32");
        assert_eq!(Dtype::parse(b">f4", 0).unwrap().to_string(), "float32 (big-endian)");
        assert_eq!(Dtype::parse(b"|u1", 0).unwrap().to_string(), "uint8");
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "<",
            "<f",
            "<f3",
            "<S4",
            "<V2\0x\0y",
            "<f4\0torch.bfloat16",
            "<V2\0bfloat16",
            "\u{e9}",
            "<\u{e9}",
            "=f4",
            "f4",
            "|f4",
            "<V2",
        ] {
            assert!(Dtype::parse(bad.as_bytes(), 9).is_err(), "{bad:?}");
        }
        assert_eq!(Dtype::parse(b">f8", 0).unwrap().byte_order(), ByteOrder::Big);
        assert_eq!(Dtype::parse(b"<V2\0torch.mystery", 0).unwrap().element(), None);
    }
}
