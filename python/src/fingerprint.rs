//! `tensorizer_rs.fingerprint` and `fingerprint_tensors`: weight
//! fingerprints (spec §21), a thin wrapper over
//! `tensorizer_native::convert::fingerprint`.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tensorizer_core::fingerprint::to_hex;
use tensorizer_core::walk::{Scanned, Suppressions};
use tensorizer_native::convert::fingerprint::{self, FingerprintOptions, Fingerprinted};

use crate::errors::to_py;
use crate::reader::key_source;
use crate::source::NativeSource;

/// Adds this file's functions and classes to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fingerprint_file, m)?)?;
    m.add_function(wrap_pyfunction!(scan_file, m)?)?;
    m.add_function(wrap_pyfunction!(scan_paths, m)?)?;
    Ok(())
}

/// Scans `path` (a local path or URI) with the core's model-file scanner
/// (spec §22), with the GIL released; returns the JSON report `tzr scan
/// --json` prints, with the suppression file `ignore` (or `.tzrscan.toml`
/// in the current directory) applied. Nothing in the file is executed.
#[pyfunction]
#[pyo3(signature = (path, ignore=None))]
fn scan_file(py: Python<'_>, path: String, ignore: Option<PathBuf>) -> PyResult<String> {
    let suppressions = load_suppressions(ignore)?;
    let scanned = py.detach(|| scan_native(&path)).map_err(crate::errors::to_py)?;
    let mut files = [Scanned { name: path, outcome: Ok(scanned), model: None, shards: Vec::new() }];
    Ok(document(&mut files, true, suppressions.as_ref()))
}

/// The suppression file `ignore`, else `.tzrscan.toml` in the current
/// directory when there is one, as `tzr scan` reads it; a file that cannot
/// be read or is not a suppression file raises `ValueError`.
fn load_suppressions(ignore: Option<PathBuf>) -> PyResult<Option<Suppressions>> {
    Suppressions::load(ignore.as_deref())
        .map_err(|e| PyValueError::new_err(format!("suppression file {e}")))
}

/// The JSON text of `files` (`one`: the first file's report, else the
/// `{"files", "valid"}` document) with `suppressions` applied and its
/// notes as `suppressions`, as `tzr scan --json` prints it.
fn document(files: &mut [Scanned], one: bool, suppressions: Option<&Suppressions>) -> String {
    let notes = suppressions.map(|s| (s, s.apply(files)));
    let mut doc = if one { files[0].json() } else { tensorizer_core::walk::many_json(files) };
    if let Some((s, notes)) = notes {
        doc["suppressions"] = s.notes_json(&notes);
    }
    doc.to_string()
}

fn scan_native(path: &str) -> Result<tensorizer_core::Scan, tensorizer_native::Error> {
    let source = tensorizer_native::open_uri(path, tensorizer_native::Intent::ReadAll)?;
    let options = tensorizer_core::scan::ScanOptions { name: Some(path), ..Default::default() };
    let mut positioned = tensorizer_native::source::Positioned(source.as_ref());
    tensorizer_core::scan::scan(&mut positioned, &options)
        .map_err(|e| tensorizer_native::Error::Invalid(format!("{path}: {e}")))
}

/// Scans every file `paths` name as `tzr scan` does
/// (`shards::scan_listing`, `walk::scan_listed`: directories walked, a
/// store prefix's objects listed, a shard index with its shards, files of
/// no known format found in a directory or prefix left out); returns
/// `{"files": [...], "valid": ...}` as JSON, with the suppression file
/// applied as in [`scan_file`]. The first file that could not be listed
/// or read raises its error.
#[pyfunction]
#[pyo3(signature = (paths, ignore=None))]
fn scan_paths(py: Python<'_>, paths: Vec<PathBuf>, ignore: Option<PathBuf>) -> PyResult<String> {
    let suppressions = load_suppressions(ignore)?;
    let files = py.detach(|| {
        let mut first_error = None;
        let listed = tensorizer_native::shards::scan_listing(&paths)?;
        let files = tensorizer_core::walk::scan_listed(listed, false, |name| {
            scan_native(name).map_err(|e| {
                let text = e.to_string();
                first_error.get_or_insert(e);
                text
            })
        });
        first_error.map_or(Ok(files), Err)
    });
    let mut files = files.map_err(crate::errors::to_py)?;
    Ok(document(&mut files, false, suppressions.as_ref()))
}

/// A file's fingerprint and its records.
#[pyclass(frozen, module = "tensorizer_rs._native")]
pub(crate) struct FingerprintReport {
    /// The fingerprint: 64 lowercase hex digits.
    #[pyo3(get)]
    fingerprint: String,
    /// The source's format: "torch", "tensorizer", "safetensors" or "gguf".
    #[pyo3(get)]
    source_format: &'static str,
    /// Bytes of tensor data hashed.
    #[pyo3(get)]
    nbytes: u64,
    /// Checkpoint entries that are not tensors (left out).
    #[pyo3(get)]
    skipped: Vec<String>,
    /// One (name, dtype, shape, sha256 hex or None for a meta tensor) per
    /// tensor, in name order.
    #[pyo3(get)]
    tensors: Vec<(String, &'static str, Vec<u64>, Option<String>)>,
}

impl From<Fingerprinted> for FingerprintReport {
    fn from(done: Fingerprinted) -> Self {
        let tensors = done
            .fingerprint
            .tensors()
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.dtype_name(),
                    t.shape.clone(),
                    t.data.as_ref().map(|d| to_hex(d)),
                )
            })
            .collect();
        Self {
            fingerprint: done.fingerprint.hex(),
            source_format: crate::convert::py_name(done.format),
            nbytes: done.bytes,
            skipped: done.skipped,
            tensors,
        }
    }
}

/// Fingerprints `src` (a path or URI, or an opened `NativeSource`) with
/// the GIL released; `key` (32 bytes) or `passphrase` decrypt an encrypted
/// tensorizer file.
#[pyfunction]
#[pyo3(signature = (src, *, key=None, passphrase=None, num_threads=None))]
fn fingerprint_file(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    key: Option<Vec<u8>>,
    passphrase: Option<Vec<u8>>,
    num_threads: Option<usize>,
) -> PyResult<FingerprintReport> {
    let options = FingerprintOptions {
        key: key_source(key, passphrase)?,
        num_threads: num_threads.unwrap_or(0),
    };
    let opened = src.cast::<NativeSource>().ok().map(|s| s.get().inner.clone());
    let uri = match opened {
        Some(_) => String::new(),
        None => src.extract::<PathBuf>()?.to_string_lossy().into_owned(),
    };
    let mut raised: Option<PyErr> = None;
    let done = py.detach(|| {
        // Called every 100 ms or so: Ctrl-C (KeyboardInterrupt) stops the work.
        let check = |_: u64, _: u64| {
            Python::attach(|py| py.check_signals()).map_err(|e| {
                raised = Some(e);
                tensorizer_native::Error::Invalid("stopped by a Python exception".into())
            })
        };
        match opened {
            Some(source) => fingerprint::fingerprint_source(source, &options, check),
            None => fingerprint::fingerprint(&uri, &options, check),
        }
    });
    done.map(FingerprintReport::from).map_err(|e| raised.take().unwrap_or_else(|| to_py(e)))
}
