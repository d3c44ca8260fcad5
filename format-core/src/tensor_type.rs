//! The tensor type byte.

use core::fmt;

/// What a tensor was written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TensorType {
    /// A module parameter (`write_module`).
    Param = 0,
    /// A module buffer (`write_module`).
    Buffer = 1,
    /// A state-dict entry (`write_state_dict`).
    StateDict = 2,
}

impl TensorType {
    /// Decodes the stored byte.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Param),
            1 => Some(Self::Buffer),
            2 => Some(Self::StateDict),
            _ => None,
        }
    }

    /// The stored byte.
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Param => "PARAM",
            Self::Buffer => "BUFFER",
            Self::StateDict => "STATE_DICT",
        })
    }
}
