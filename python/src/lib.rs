//! `tensorizer_rs._native`: thin pyo3 glue over `tensorizer-native`.
//!
//! Everything here converts arguments, calls the Rust host with the GIL
//! released, and converts results and errors. The Python package around it
//! (`python/python/tensorizer_rs`) supplies tensorizer's API.

mod arenas;
mod buffers;
mod carve;
mod checkpoint;
mod cli;
mod convert;
mod cooperative;
mod cuda;
mod cuda_env;
mod dtypes;
mod entry;
mod errors;
mod file_source;
mod fingerprint;
mod gc_pause;
mod host_memory;
mod load_options;
mod loader;
mod names;
mod options;
mod reader;
mod register;
mod remote;
mod safetensors;
mod shards;
mod slices;
mod source;
mod writer;

use pyo3::prelude::*;

// Declared, though it is pyo3's default: nothing here relies on the GIL for
// safety (pyclass state is behind pyo3's borrow checks, shared caches are
// PyOnceLock, and native work already runs with the GIL released), so a
// free-threaded interpreter may import the module without re-enabling it.
#[pymodule(gil_used = false)]
mod _native {
    #[pymodule_export]
    use crate::checkpoint::{CheckpointEntry, NativeCheckpoint, ZipEntryCheck};
    #[pymodule_export]
    use crate::cli::tzr_main;
    #[pymodule_export]
    use crate::convert::ConversionReport;
    #[pymodule_export]
    use crate::cooperative::cooperative_verdict;
    #[pymodule_export]
    use crate::entry::PyEntry;
    #[pymodule_export]
    use crate::errors::{
        CryptographyError, FormatError, HashMismatchError, ObjectChangedError,
        RangeNotSupportedError,
    };
    #[pymodule_export]
    use crate::fingerprint::FingerprintReport;
    #[pymodule_export]
    use crate::gc_pause::GcPaused;
    #[pymodule_export]
    use crate::host_memory::HostMemory;
    #[pymodule_export]
    use crate::loader::{Copies, LoadReceipt, Loader, MmapFallbackWarning};
    #[pymodule_export]
    use crate::names::Names;
    #[pymodule_export]
    use crate::options::DeserializerOptions;
    #[pymodule_export]
    use crate::reader::NativeReader;
    #[pymodule_export]
    use crate::register::register_loaded;
    #[pymodule_export]
    use crate::remote::RemoteOptions;
    #[pymodule_export]
    use crate::source::{
        NativeSource, file_frozen, location_is_redis, location_scheme, s3_presign, s3cfg_values,
        upload,
    };
    #[pymodule_export]
    use crate::writer::{NativeWriter, WriteSpec};

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        // Debug assertions are on exactly in the dev profile (opt-level 1
        // for the workspace): benchmarks ask, and refuse such a build.
        m.add("OPTIMIZED", !cfg!(debug_assertions))?;
        m.add("DEFAULT_READERS", tensorizer_native::default_readers())?;
        m.add("ARENA_BYTES", tensorizer_native::read::plan::ARENA_BYTES)?;
        m.add("ARENA_ALIGN", tensorizer_native::read::plan::ARENA_ALIGN)?;
        m.add("HUGE_PAGE_MIN", tensorizer_native::read::plan::HUGE_PAGE_MIN)?;
        m.add("ALLOCATION_ALIGN", tensorizer_native::read::plan::ALLOCATION_ALIGN)?;
        m.add("HUGE_PAGE", tensorizer_native::memory::HUGE_PAGE)?;
        m.add("MAX_CUDA_STREAMS", crate::cuda::MAX_STREAMS)?;
        let uploaded =
            pyo3::types::PyTuple::new(m.py(), tensorizer_native::store::UPLOADED_SCHEMES)?;
        m.add("UPLOADED_SCHEMES", uploaded)?;
        m.add("TruncatedError", crate::errors::truncated_type(m.py())?)?;
        m.add("CheckpointUnpicklingError", crate::errors::unpickling_type(m.py())?)?;
        crate::errors::detail_defaults(m)?;
        crate::slices::register(m)?;
        crate::carve::register(m)?;
        crate::arenas::register(m)?;
        crate::convert::register(m)?;
        crate::safetensors::register(m)?;
        crate::shards::register(m)?;
        crate::fingerprint::register(m)?;
        crate::cuda::register(m)?;
        crate::cuda_env::register(m)?;
        crate::dtypes::register(m)?;
        m.add("LAZY_READ_AHEAD_BYTES", crate::names::READ_AHEAD_BYTES)?;
        m.add("LAZY_READ_AHEAD_TENSORS", crate::names::READ_AHEAD_TENSORS)?;
        Ok(())
    }

    /// Derives a 32-byte key from a passphrase with Argon2id exactly as
    /// libsodium's `crypto_pwhash` does (parallelism 1, version 1.3). Costs
    /// outside libsodium's ranges raise `ValueError`, as tensorizer's do.
    #[pyfunction]
    fn derive_key(
        py: Python<'_>,
        passphrase: Vec<u8>,
        opslimit: i128,
        memlimit: i128,
        salt: Vec<u8>,
    ) -> PyResult<Vec<u8>> {
        use tensorizer_core::layout::{
            MAX_KDF_MEMLIMIT, MAX_KDF_OPSLIMIT, MIN_KDF_MEMLIMIT, MIN_KDF_OPSLIMIT,
        };
        let in_range = |name: &str, v: i128, lo: u64, hi: u64| -> PyResult<u64> {
            u64::try_from(v).ok().filter(|v| (lo..=hi).contains(v)).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "{name} must be between {lo} and {hi}, not {v}"
                ))
            })
        };
        let opslimit = in_range("opslimit", opslimit, MIN_KDF_OPSLIMIT, MAX_KDF_OPSLIMIT)?;
        let memlimit = in_range("memlimit", memlimit, MIN_KDF_MEMLIMIT, MAX_KDF_MEMLIMIT)?;
        let params = tensorizer_core::KdfParams::argon2id(opslimit, memlimit, salt);
        let limits = tensorizer_core::crypto::KdfLimits {
            max_memlimit: u64::MAX,
            max_opslimit: u64::MAX,
            ..Default::default()
        };
        let key = py
            .detach(|| tensorizer_native::kernels::kdf::derive(&passphrase, &params, &limits))
            .map_err(|e| crate::errors::core_to_py(&e, None))?;
        Ok(key.expose_secret().to_vec())
    }

    /// Random bytes from the operating system.
    #[pyfunction]
    fn random_bytes(n: usize) -> PyResult<Vec<u8>> {
        let mut out = vec![0u8; n];
        for chunk in out.chunks_mut(32) {
            let b = tensorizer_native::write::random_bytes::<32>().map_err(crate::errors::to_py)?;
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        Ok(out)
    }
}
