//! Where a load's tensors go, read once from the `torch.device` the
//! allocator resolved: the only place the device's kind is looked at.

use pyo3::prelude::*;
use pyo3::types::PyString;
use tensorizer_native::read::plan::Destination;

/// The kind of a `torch.device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Cpu,
    Cuda,
    /// Any other device torch knows (`mps`, `xpu`, `meta`...): staged in
    /// CPU memory, then moved by torch.
    Other,
}

impl<'a, 'py> FromPyObject<'a, 'py> for Target {
    type Error = PyErr;

    /// From a `torch.device` (its `type`).
    fn extract(device: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let kind = device.getattr(pyo3::intern!(device.py(), "type"))?;
        let kind = kind.cast::<PyString>()?;
        Ok(match kind.to_str()? {
            "cpu" => Self::Cpu,
            "cuda" => Self::Cuda,
            _ => Self::Other,
        })
    }
}

impl Target {
    /// The load plan's destination: CUDA goes through the native staging
    /// ring when `staging` (the build has it, a driver is present and the
    /// environment does not turn it off).
    pub(crate) fn destination(self, staging: bool) -> Destination {
        match self {
            Self::Cpu => Destination::Cpu,
            Self::Cuda if staging => Destination::Staged,
            _ => Destination::Other,
        }
    }

    /// The kind's name, in what the ranks of a cooperative load compare
    /// (`NativeReader.selection_digest`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Other => "other",
        }
    }

    /// Whether host copies bound for this device are page-locked, so the
    /// move to the device can be asynchronous.
    pub(crate) fn pinned(self) -> bool {
        self == Self::Cuda
    }
}
