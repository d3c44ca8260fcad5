//! The allow-list: the only globals a state-dict pickle may name. Each is
//! interpreted by the pickle machine; none is imported or called.

use alloc::string::String;

use crate::dtype::ElementType;
use crate::error::{Error, Result};

/// An allow-listed global.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Global {
    /// `collections.OrderedDict`.
    OrderedDict,
    /// `torch.Size`.
    Size,
    /// `torch._utils._rebuild_tensor_v2`.
    RebuildTensorV2,
    /// `torch._utils._rebuild_tensor_v3` (explicit dtype).
    RebuildTensorV3,
    /// `torch._utils._rebuild_parameter`.
    RebuildParameter,
    /// `torch._utils._rebuild_parameter_with_state` (the state is ignored).
    RebuildParameterWithState,
    /// A typed legacy storage class such as `torch.FloatStorage`.
    Storage(ElementType),
    /// `torch.storage.UntypedStorage` (also `torch.UntypedStorage`).
    UntypedStorage,
    /// A dtype such as `torch.float8_e4m3fn`.
    Dtype(ElementType),
}

/// torch's legacy typed storage classes and their element types.
const STORAGES: &[(&str, ElementType)] = &[
    ("FloatStorage", ElementType::F32),
    ("DoubleStorage", ElementType::F64),
    ("HalfStorage", ElementType::F16),
    ("BFloat16Storage", ElementType::BF16),
    ("LongStorage", ElementType::I64),
    ("IntStorage", ElementType::I32),
    ("ShortStorage", ElementType::I16),
    ("CharStorage", ElementType::I8),
    ("ByteStorage", ElementType::U8),
    ("BoolStorage", ElementType::Bool),
    ("ComplexFloatStorage", ElementType::Complex64),
    ("ComplexDoubleStorage", ElementType::Complex128),
];

/// torch dtypes and storage classes that exist but have no element type
/// here: refused as unsupported dtypes rather than forbidden globals.
const UNSUPPORTED: &[&[u8]] = &[
    b"bcomplex32",
    b"qint8",
    b"quint8",
    b"qint32",
    b"quint4x2",
    b"quint2x4",
    b"QInt8Storage",
    b"QUInt8Storage",
    b"QInt32Storage",
    b"QUInt4x2Storage",
    b"QUInt2x4Storage",
];

/// Cuts and lossily decodes a name for an error message.
pub(super) fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes.get(..200).unwrap_or(bytes)).into_owned()
}

impl Global {
    /// Resolves `module.name` (the two lines of a GLOBAL opcode at `at`).
    pub fn resolve(at: u64, module: &[u8], name: &[u8]) -> Result<Self> {
        let found = match (module, name) {
            (b"collections", b"OrderedDict") => Some(Self::OrderedDict),
            (b"torch", b"Size") => Some(Self::Size),
            (b"torch._utils", b"_rebuild_tensor_v2") => Some(Self::RebuildTensorV2),
            (b"torch._utils", b"_rebuild_tensor_v3") => Some(Self::RebuildTensorV3),
            (b"torch._utils", b"_rebuild_parameter") => Some(Self::RebuildParameter),
            (b"torch._utils", b"_rebuild_parameter_with_state") => {
                Some(Self::RebuildParameterWithState)
            }
            (b"torch.storage" | b"torch", b"UntypedStorage") => Some(Self::UntypedStorage),
            (b"torch", n) => core::str::from_utf8(n).ok().and_then(|n| {
                if let Some(&(_, t)) = STORAGES.iter().find(|s| s.0 == n) {
                    return Some(Self::Storage(t));
                }
                // Only canonical dtype names, as torch pickles them.
                ElementType::from_torch_name(n).filter(|t| t.torch_name() == n).map(Self::Dtype)
            }),
            _ => None,
        };
        if found.is_none() && module == b"torch" && UNSUPPORTED.contains(&name) {
            return Err(Error::UnsupportedDtype {
                offset: at,
                dtype: alloc::format!("torch.{}", lossy(name)),
            });
        }
        found.ok_or_else(|| Error::ForbiddenGlobal {
            offset: at,
            module: lossy(module),
            name: lossy(name),
        })
    }
}
