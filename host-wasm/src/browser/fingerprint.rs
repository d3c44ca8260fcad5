//! "Fingerprint" and "Compare": every tensor's data read in pieces through
//! the read-ahead window and hashed as `tzr fingerprint` hashes it (spec
//! §21): the core encodes and combines the records
//! ([`tensorizer_core::fingerprint`]), swaps big-endian elements as it
//! hashes ([`DataHasher::swapping`]) and gathers strided checkpoint views
//! ([`tensorizer_core::checkpoint::TensorView::gather`]); this module only
//! reads. Encrypted tensorizer data is decrypted (and authenticated) first.

use serde_json::Value;
use tensorizer_core::checkpoint::Leaf;
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::fingerprint::{DataHasher, fingerprint_json};
use tensorizer_core::{ElementType, Fingerprint, KeySource, TensorFingerprint};

use crate::error::ValidateError;
use crate::validate::{Keys, PIECE_LEN, TensorVerifier, zeroed};

use super::open::Opened;
use super::source::{AsyncSource, Window};
use super::verify::WINDOW;

/// A file's fingerprint and what went into it.
#[derive(Debug, Clone)]
pub struct Fingerprinted {
    /// The fingerprint, with one record per tensor.
    pub fingerprint: Fingerprint,
    /// Data bytes hashed.
    pub bytes: u64,
    /// Checkpoint entries that are not tensors (left out), by name.
    pub skipped: Vec<String>,
}

impl Fingerprinted {
    /// As `tzr fingerprint --json` writes it, less the file's name and the
    /// time: [`fingerprint_json`] plus `format`, `data_bytes` and `skipped`.
    pub fn to_json(&self, format: &str) -> Value {
        let mut v = fingerprint_json(&self.fingerprint);
        if let Value::Object(o) = &mut v {
            o.insert("format".into(), format.into());
            o.insert("data_bytes".into(), self.bytes.into());
            o.insert("skipped".into(), self.skipped.clone().into());
        }
        v
    }
}

/// Reads and hashes, with progress in data bytes.
struct Hashing<'p, S, P> {
    w: Window<S>,
    buf: Vec<u8>,
    done: u64,
    total: u64,
    progress: &'p mut P,
}

impl<S: AsyncSource, P: FnMut(u64, u64)> Hashing<'_, S, P> {
    /// Feeds `len` bytes at `at` to `hasher`, a piece at a time.
    async fn range(
        &mut self,
        at: u64,
        len: u64,
        hasher: &mut DataHasher,
    ) -> Result<(), ValidateError> {
        let piece = (PIECE_LEN as u64).min(len).max(1);
        if (self.buf.len() as u64) < piece {
            drop(std::mem::take(&mut self.buf));
            self.buf = zeroed(piece, at, "a data piece")?;
        }
        let mut off = 0u64;
        while off < len {
            let n = (len - off).min(piece) as usize;
            let p = &mut self.buf[..n];
            self.w.read_into(at + off, p).await?;
            hasher.update(p);
            off += n as u64;
            self.tick(n as u64);
        }
        Ok(())
    }

    fn tick(&mut self, n: u64) {
        self.done = self.done.saturating_add(n);
        (self.progress)(self.done, self.total);
    }
}

fn no_torch_name(name: &str, dtype: &str) -> ValidateError {
    ValidateError::invalid(
        None,
        format!(
            "tensor {name:?}: dtype {dtype} is not a torch dtype this build knows; it cannot be fingerprinted"
        ),
    )
}

fn hasher_for(element: ElementType, big_endian: bool) -> DataHasher {
    if big_endian { DataHasher::swapping(element.swap_unit()) } else { DataHasher::new() }
}

/// Fingerprints `opened`, reading its data from `src`; `key` decrypts an
/// encrypted tensorizer file. `progress` gets (data bytes hashed, in all).
pub async fn fingerprint<S: AsyncSource>(
    src: S,
    opened: &Opened,
    key: Option<KeySource>,
    progress: &mut impl FnMut(u64, u64),
) -> Result<Fingerprinted, ValidateError> {
    let mut h =
        Hashing { w: Window::new(src, WINDOW), buf: Vec::new(), done: 0, total: 0, progress };
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    // Data bytes as tzr counts them: each tensor's, tied views once each.
    let mut bytes = 0u64;
    match opened {
        Opened::Tensorizer(ins) => {
            let entries = &ins.metadata.entries;
            h.total = entries.iter().map(|e| e.data_length).fold(0, u64::saturating_add);
            if !ins.header.has_crypt_info() && key.is_some() {
                return Err(ValidateError::usage("a key was given but the file is not encrypted"));
            }
            let mut keys = key.map(Keys::new);
            for (i, e) in entries.iter().enumerate() {
                let name = e.path.dotted_name();
                let element =
                    e.dtype.element().ok_or_else(|| no_torch_name(&name, e.dtype.as_str()))?;
                bytes = bytes.saturating_add(e.data_length);
                let data = if e.is_meta() {
                    None
                } else {
                    let raw =
                        h.w.read_vec(e.header_offset, e.header_len(), "a tensor header").await?;
                    // The verifier decrypts each piece in place; its own
                    // hash checks are not consulted (tzr verify does that).
                    let mut v = TensorVerifier::new(ins, i, &raw, keys.as_mut(), PIECE_LEN)?;
                    let mut hasher =
                        e.dtype.swap_unit().map_or_else(DataHasher::new, DataHasher::swapping);
                    let mut piece =
                        zeroed(v.max_piece_len().max(1), e.data_offset, "a data piece")?;
                    while let Some((at, n)) = v.next_piece() {
                        let p = &mut piece[..n];
                        h.w.read_into(at, p).await?;
                        v.update(p)?;
                        hasher.update(p);
                        h.tick(n as u64);
                    }
                    Some(hasher.finish())
                };
                records.push(TensorFingerprint {
                    name,
                    dtype: element,
                    shape: e.shape.clone(),
                    data,
                });
            }
        }
        Opened::Safetensors(s) => {
            h.total = s.data_bytes;
            for r in &s.tensors {
                // The torch shape: a packed dtype's header counts its values
                // (F4 [.., 2k] is float4_e2m1fn_x2 [.., k]), as tzr reads it.
                let (element, shape) =
                    tensorizer_core::safetensors::from_safetensors(&r.dtype, &r.shape)
                        .ok_or_else(|| no_torch_name(&r.name, &r.dtype))?;
                bytes = bytes.saturating_add(r.data_length);
                let mut hasher = DataHasher::new();
                let at = r
                    .data_offset
                    .ok_or_else(|| ValidateError::usage("a safetensors row without an offset"))?;
                h.range(at, r.data_length, &mut hasher).await?;
                records.push(TensorFingerprint {
                    name: r.name.clone(),
                    dtype: element,
                    shape,
                    data: Some(hasher.finish()),
                });
            }
        }
        Opened::Gguf(_) => {
            return Err(ValidateError::usage(
                "the page reads a GGUF file's header only: its fingerprint is tzr fingerprint's",
            ));
        }
        Opened::Torch(index) => {
            let big = index.records.storage_byte_order() == ByteOrder::Big;
            let sd = &index.state_dict;
            // What will be read: a contiguous view's bytes, or the span a
            // strided view is gathered from.
            h.total = sd
                .entries
                .iter()
                .filter_map(|e| match &e.value {
                    Leaf::Tensor(v) => v.byte_span().map(|s| s.end - s.start),
                    _ => None,
                })
                .fold(0, u64::saturating_add);
            let mut ranges = vec![None; sd.storages.len()];
            for e in &sd.entries {
                let name = e.path.dotted_name();
                let Leaf::Tensor(view) = &e.value else {
                    skipped.push(name);
                    continue;
                };
                let bad =
                    |why: &str| ValidateError::invalid(None, format!("tensor {name:?}: {why}"));
                let storage = match ranges[view.storage].clone() {
                    Some(r) => r,
                    None => {
                        let entry = &index.directory.entries[index.storage_entries[view.storage]];
                        let r = super::torch::data_range(&mut h.w.src, &[], entry).await?;
                        ranges[view.storage] = Some(r.clone());
                        r
                    }
                };
                let span = view.byte_span().ok_or_else(|| bad("the view's size overflows"))?;
                if span.end > storage.end - storage.start {
                    return Err(bad("the view reaches past its storage"));
                }
                let item = u64::from(view.dtype.size());
                let len = view
                    .numel()
                    .and_then(|n| n.checked_mul(item))
                    .ok_or_else(|| bad("the size overflows"))?;
                bytes = bytes.saturating_add(len);
                let mut hasher = hasher_for(view.dtype, big);
                let at = storage.start + span.start;
                if view.is_contiguous() && span.end - span.start == len {
                    h.range(at, len, &mut hasher).await?;
                } else {
                    // A strided or expanded view: gathered whole.
                    let data =
                        h.w.read_vec(at, span.end - span.start, "a tensor view's storage").await?;
                    let mut out = zeroed(len, at, "a gathered tensor view")?;
                    view.gather(&data, &mut out)
                        .ok_or_else(|| bad("the view does not fit its storage"))?;
                    hasher.update(&out);
                    h.tick(data.len() as u64);
                }
                records.push(TensorFingerprint {
                    name,
                    dtype: view.dtype,
                    shape: view.shape.clone(),
                    data: Some(hasher.finish()),
                });
            }
        }
    }
    let fingerprint = Fingerprint::new(records)?;
    Ok(Fingerprinted { fingerprint, bytes, skipped })
}
