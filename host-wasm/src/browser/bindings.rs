//! The wasm-bindgen exports the page and its worker call. Each takes the
//! file as a `Blob` (a `File` from a picker or a drop) or as a read
//! function `(offset, length) => Promise<Uint8Array>` (the page's Range
//! fetches), plus its length, and returns JSON text. Failures reject with
//! one line of text that names the byte offset.

use js_sys::{Function, Promise, Uint8Array};
use tensorizer_core::crypto::{KdfLimits, Passphrase};
use tensorizer_core::fingerprint::{diff_json, fingerprint_from_json};
use tensorizer_core::layout::ParseLimits;
use tensorizer_core::{KeySource, RandomAccess};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::error::ValidateError;
use crate::report::TensorVerification;
use crate::source::ReadError;

use super::open::{Opened, open};
use super::source::AsyncSource;
use super::summary::error_line;
use super::verify::{Events, Shard, stored_hashes as read_hashes, verify as verify_all};

/// JavaScript's largest exact integer (2^53 - 1): the longest file a
/// `number` length can name.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

enum Inner {
    Blob(web_sys::Blob),
    Read(Function),
}

/// A `Blob` or a read function, as an [`AsyncSource`].
struct JsSource {
    inner: Inner,
    len: u64,
}

fn message(v: &JsValue) -> String {
    if let Some(e) = v.dyn_ref::<js_sys::Error>() {
        return String::from(e.message());
    }
    v.as_string().unwrap_or_else(|| "the read failed".to_string())
}

fn reject(e: &ValidateError) -> JsValue {
    JsValue::from_str(&error_line(e))
}

impl JsSource {
    fn new(source: JsValue, len: f64) -> Result<Self, JsValue> {
        if !((0.0..=MAX_SAFE_INTEGER).contains(&len) && len.fract() == 0.0) {
            return Err(JsValue::from_str("the file length must be a whole number of bytes"));
        }
        let inner =
            match source.dyn_into::<web_sys::Blob>() {
                Ok(b) => Inner::Blob(b),
                Err(v) => Inner::Read(v.dyn_into::<Function>().map_err(|_| {
                    JsValue::from_str("the source must be a Blob or a read function")
                })?),
            };
        Ok(Self { inner, len: len as u64 })
    }
}

impl AsyncSource for JsSource {
    fn len(&self) -> u64 {
        self.len
    }

    async fn read(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        let fail = |v: JsValue| ReadError { offset, message: message(&v) };
        let end = offset.saturating_add(len as u64) as f64;
        let promise = match &self.inner {
            Inner::Blob(b) => {
                b.slice_with_f64_and_f64(offset as f64, end).map_err(fail)?.array_buffer()
            }
            Inner::Read(f) => {
                let v = f.call2(
                    &JsValue::NULL,
                    &JsValue::from_f64(offset as f64),
                    &JsValue::from_f64(len as f64),
                );
                Promise::resolve(&v.map_err(fail)?)
            }
        };
        let value = JsFuture::from(promise).await.map_err(fail)?;
        let bytes = Uint8Array::new(&value);
        let n = bytes.length() as usize;
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| ReadError {
            offset,
            message: format!("cannot allocate {n} bytes for the read"),
        })?;
        out.resize(n, 0);
        bytes.copy_to(&mut out);
        Ok(out)
    }
}

/// The crate's version.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Reads the header and index of `source` (`len` bytes, shown as `name`)
/// and returns the summary as JSON text, its rows as columns
/// ([`super::summary::to_json`]).
#[wasm_bindgen]
pub async fn inspect(source: JsValue, len: f64, name: String) -> Result<String, JsValue> {
    let src = JsSource::new(source, len)?;
    let summary = super::inspect(src, &name).await.map_err(|e| reject(&e))?;
    Ok(super::summary::to_json(&summary))
}

/// The stored CRC-32 and SHA-256 of tensors `from..from + count` of a
/// tensorizer file, read from their tensor headers (nearby headers in one
/// read), as a JSON array.
#[wasm_bindgen(js_name = storedHashes)]
pub async fn stored_hashes(
    source: JsValue,
    len: f64,
    from: u32,
    count: u32,
) -> Result<String, JsValue> {
    let mut src = JsSource::new(source, len)?;
    let opened = open(&mut src, &ParseLimits::default()).await.map_err(|e| reject(&e))?;
    let Opened::Tensorizer(ins) = opened else {
        return Ok("[]".to_string());
    };
    let rows =
        read_hashes(&mut src, &ins, from as usize, count as usize).await.map_err(|e| reject(&e))?;
    serde_json::to_string(&rows).map_err(|e| JsValue::from_str(&e.to_string()))
}

/// A key file's bytes or a passphrase as a key source.
fn key_source(
    key: Option<Vec<u8>>,
    passphrase: Option<String>,
) -> Result<Option<KeySource>, JsValue> {
    Ok(match (key, passphrase) {
        (Some(raw), _) => Some(KeySource::Key(crate::cli::parse_key(&raw).ok_or_else(|| {
            JsValue::from_str(
                "the key file must hold the 32-byte key: 32 raw bytes or 64 hex digits",
            )
        })?)),
        (None, Some(p)) if !p.is_empty() => {
            Some(KeySource::Passphrase(Passphrase::new(p.into_bytes()), KdfLimits::default()))
        }
        _ => None,
    })
}

/// A synchronous read function `(offset, length) => Uint8Array` (a Web
/// Worker's `FileReaderSync` or synchronous Range request) as the core's
/// [`RandomAccess`].
struct SyncSource {
    read: Function,
    len: u64,
}

impl RandomAccess for SyncSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(
        &mut self,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), tensorizer_core::ReadError> {
        let fail = |message: String| tensorizer_core::ReadError { offset, message };
        let v = self
            .read
            .call2(
                &JsValue::NULL,
                &JsValue::from_f64(offset as f64),
                &JsValue::from_f64(buf.len() as f64),
            )
            .map_err(|e| fail(message(&e)))?;
        let bytes = v
            .dyn_into::<Uint8Array>()
            .map_err(|_| fail("the read function returned no Uint8Array".into()))?;
        if bytes.length() as usize != buf.len() {
            return Err(fail(format!("asked for {} bytes, got {}", buf.len(), bytes.length())));
        }
        bytes.copy_to(buf);
        Ok(())
    }
}

/// Scans the file (`len` bytes, named `name`) with the core's scanner,
/// reading through `read(offset, length) => Uint8Array`, synchronous (run
/// it in a Web Worker). Returns the report `tzr scan --json` prints
/// ([`super::findings::scan_report`]) as JSON text.
#[wasm_bindgen]
pub fn scan(read: Function, len: f64, name: String) -> Result<String, JsValue> {
    if !((0.0..=MAX_SAFE_INTEGER).contains(&len) && len.fract() == 0.0) {
        return Err(JsValue::from_str("the file length must be a whole number of bytes"));
    }
    let src = SyncSource { read, len: len as u64 };
    let report = super::findings::scan_report(src, &name).map_err(|e| reject(&e))?;
    Ok(report.to_string())
}

/// Fingerprints the file (spec §21; the digest `tzr fingerprint` prints):
/// every tensor's data is read and hashed. `key` or `passphrase` decrypt
/// an encrypted tensorizer file; `on_progress(done, total)` gets the data
/// bytes hashed. Resolves to `tzr fingerprint --json`'s report (less the
/// file name and time) as JSON text.
#[wasm_bindgen]
pub async fn fingerprint(
    source: JsValue,
    len: f64,
    key: Option<Vec<u8>>,
    passphrase: Option<String>,
    on_progress: Function,
) -> Result<String, JsValue> {
    let key = key_source(key, passphrase)?;
    let mut src = JsSource::new(source, len)?;
    let opened = open(&mut src, &ParseLimits::default()).await.map_err(|e| reject(&e))?;
    let format = opened.format();
    let mut progress = |done: u64, total: u64| {
        let _ = on_progress.call2(
            &JsValue::NULL,
            &JsValue::from_f64(done as f64),
            &JsValue::from_f64(total as f64),
        );
    };
    let done = super::fingerprint::fingerprint(src, &opened, key, &mut progress)
        .await
        .map_err(|e| reject(&e))?;
    Ok(done.to_json(format).to_string())
}

/// Compares two fingerprints (the JSON [`fingerprint`] resolved to, each
/// recombined from its records): what `tzr diff --json` reports, less
/// the file names.
#[wasm_bindgen]
pub fn diff(a: &str, b: &str) -> Result<String, JsValue> {
    let parse = |text: &str, which: &str| {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| JsValue::from_str(&e.to_string()))?;
        match fingerprint_from_json(&v) {
            Some(Ok(fp)) => Ok(fp),
            Some(Err(e)) => Err(JsValue::from_str(&format!("fingerprint {which}: {e}"))),
            None => {
                Err(JsValue::from_str(&format!("fingerprint {which} is not a fingerprint's JSON")))
            }
        }
    };
    let (a, b) = (parse(a, "a")?, parse(b, "b")?);
    Ok(diff_json(&a, &b).to_string())
}

struct JsEvents {
    on_tensor: Function,
    on_progress: Function,
}

impl Events for JsEvents {
    fn tensor(&mut self, index: usize, result: &TensorVerification) {
        let mut v = serde_json::to_value(result).unwrap_or_default();
        if let (Some(e), Some(obj)) = (&result.error, v.as_object_mut()) {
            obj.insert("line".into(), error_line(e).into());
        }
        // A throwing callback must not stop the run.
        let _ = self.on_tensor.call2(
            &JsValue::NULL,
            &JsValue::from_f64(index as f64),
            &JsValue::from_str(&v.to_string()),
        );
    }

    fn progress(&mut self, done: u64, total: u64) {
        let _ = self.on_progress.call2(
            &JsValue::NULL,
            &JsValue::from_f64(done as f64),
            &JsValue::from_f64(total as f64),
        );
    }
}

/// Verifies every tensor: `key` is a key file's bytes (32 raw bytes or 64
/// hex digits) or `passphrase` a passphrase, for encrypted files.
/// `on_tensor(index, json)` gets each tensor's result as it is found and
/// `on_progress(done, total)` the data bytes checked. Resolves to the
/// summary `{ok, verified, unverified, failed, data_bytes_checked}` as JSON.
/// Several workers can split a tensorizer file: each passes its `shard`
/// (`0..shards`) and checks its share of the tensors (torch and
/// safetensors files are not split: shard 0 checks all, the others none).
#[wasm_bindgen]
#[allow(clippy::too_many_arguments)]
pub async fn verify(
    source: JsValue,
    len: f64,
    key: Option<Vec<u8>>,
    passphrase: Option<String>,
    on_tensor: Function,
    on_progress: Function,
    shard: u32,
    shards: u32,
) -> Result<String, JsValue> {
    let key = key_source(key, passphrase)?;
    let mut src = JsSource::new(source, len)?;
    let opened = open(&mut src, &ParseLimits::default()).await.map_err(|e| reject(&e))?;
    let mut events = JsEvents { on_tensor, on_progress };
    let shard = Shard { index: shard as usize, count: shards.max(1) as usize };
    if !matches!(opened, Opened::Tensorizer(_)) && shard.index > 0 {
        return Ok(serde_json::to_string(&crate::report::VerifySummary {
            ok: true,
            ..Default::default()
        })
        .unwrap_or_default());
    }
    let summary =
        verify_all(src, &opened, key, shard, &mut events).await.map_err(|e| reject(&e))?;
    serde_json::to_string(&summary).map_err(|e| JsValue::from_str(&e.to_string()))
}
