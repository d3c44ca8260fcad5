//! Weight fingerprints (spec §21) of a tensorizer file, a safetensors file
//! or a `torch.save` checkpoint, local or remote: every tensor's
//! C-contiguous little-endian bytes streamed through SHA-256, the records
//! combined by [`tensorizer_core::fingerprint`].
//!
//! Tensors are hashed on a pool of threads (`num_threads`, by default one
//! per core), each taking the next tensor, largest first, and streaming it
//! piece by piece, as a conversion reads it ([`crate::convert`]): memory
//! is at most two pieces per thread (a big-endian tensor is swapped in a
//! copy), plus, for a checkpoint view that is not contiguous, the view
//! gathered whole (one such view at a time). One
//! tensor's SHA-256 runs on one thread, so a file of one huge tensor hashes
//! at one core's speed. Stored tensorizer hashes are not checked (`tzr
//! verify` does that); encrypted data is still authenticated as it is
//! decrypted.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tensorizer_core::checkpoint::Leaf;
use tensorizer_core::fingerprint::{DataHasher, Digest};
use tensorizer_core::{
    Dtype, Fingerprint, KeySource, TensorFingerprint, TensorPath, TensorSpec, TensorType,
};

use crate::convert::safetensors::swap_unit;
use crate::convert::{
    Format, Input, Item, Opened, PROGRESS_INTERVAL, check, check_shards, sniff, stream,
};
use crate::error::{Error, Result};
use crate::parallel::{default_readers, for_each_index};
use crate::source::Intent;
use crate::source::RangeSource;
use crate::store::open_uri;

/// How to fingerprint.
#[derive(Debug, Clone, Default)]
pub struct FingerprintOptions {
    /// The key or passphrase of an encrypted tensorizer input.
    pub key: Option<KeySource>,
    /// Threads hashing tensors; 0 = one per core, at most 16.
    pub num_threads: usize,
}

/// A file's fingerprint and what went into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprinted {
    /// The input's format.
    pub format: Format,
    /// The fingerprint, with one record per tensor.
    pub fingerprint: Fingerprint,
    /// Data bytes hashed.
    pub bytes: u64,
    /// Entries of a checkpoint that are not tensors (left out), by name.
    pub skipped: Vec<String>,
}

/// Fingerprints `src`, a local path or a URI (`http(s)://`, `s3://`,
/// `redis://`, ...); see [`fingerprint_source`]. A model stored as shards
/// (a folder, an `*.index.json` or a store prefix; see [`crate::shards`])
/// gives the fingerprint of the same tensors in one file.
pub fn fingerprint(
    src: &str,
    options: &FingerprintOptions,
    progress: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Fingerprinted> {
    if crate::shards::is_sharded(src) {
        let opened = crate::shards::OpenedShards::open(src, options.key.clone(), false)?;
        return opened.with_input(|input| fingerprint_input(input, options.num_threads, progress));
    }
    fingerprint_source(open_uri(src, Intent::ReadAll)?, options, progress)
}

/// Fingerprints whatever `source` holds, recognised by its first bytes as
/// [`crate::convert::sniff`] tells them. `progress` gets (data bytes
/// hashed, data bytes in all) now and then and once at the end; an error
/// from it stops the work.
pub fn fingerprint_source<S: RangeSource>(
    source: S,
    options: &FingerprintOptions,
    progress: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Fingerprinted> {
    let format = sniff(&source)?;
    if format == Format::Gguf {
        return fingerprint_gguf(&source, progress);
    }
    let opened = Opened::open_as(source, format, options.key.clone(), false)?;
    fingerprint_input(opened.input(), options.num_threads, progress)
}

/// Bytes of GGUF tensor data hashed per read.
const GGUF_PIECE: u64 = 1 << 20;

/// Fingerprints a GGUF file whose tensors all have unquantized types: a
/// ggml tensor is C-contiguous little-endian with its dimensions innermost
/// first, so its record is torch's with the dimensions reversed. A
/// quantized tensor has no torch dtype: the file cannot be fingerprinted.
fn fingerprint_gguf<S: RangeSource>(
    source: &S,
    mut progress: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Fingerprinted> {
    let src = source.name().to_string();
    let header = tensorizer_core::gguf::read(&mut crate::source::Positioned(source))
        .map_err(|e| Error::format(&src, e))?;
    let mut plan = Vec::with_capacity(header.tensors.len());
    for t in &header.tensors {
        let ty = tensorizer_core::gguf::ggml_type(t.ggml_type);
        let (Some(dtype), Some(len)) = (ty.and_then(|ty| ty.element()), t.nbytes()) else {
            let ty = ty.map_or_else(|| format!("type {}", t.ggml_type), |ty| ty.name.into());
            return Err(Error::Invalid(format!(
                "{src}: tensor {:?}: ggml {ty} has no torch dtype; a quantized GGUF file cannot be fingerprinted",
                t.name
            )));
        };
        let start = header
            .data_start
            .checked_add(t.offset)
            .filter(|s| s.checked_add(len).is_some_and(|end| end <= source.len()));
        let start = start.ok_or_else(|| {
            Error::Invalid(format!(
                "{src}: tensor {:?}: its data ends past the end of the file",
                t.name
            ))
        })?;
        plan.push((t, dtype, start, len));
    }
    let total = plan.iter().fold(0u64, |n, p| n.saturating_add(p.3));
    let (mut done, mut buf) = (0u64, Vec::new());
    let mut records = Vec::with_capacity(plan.len());
    for (t, dtype, start, len) in plan {
        let mut hasher = DataHasher::new();
        let mut at = 0;
        while at < len {
            let n = (len - at).min(GGUF_PIECE);
            buf.resize(n as usize, 0);
            source.read_exact_at(start + at, &mut buf)?;
            hasher.update(&buf);
            at += n;
        }
        done = done.saturating_add(len);
        progress(done, total)?;
        let shape = t.dims.iter().rev().copied().collect();
        records.push(TensorFingerprint {
            name: t.name.clone(),
            dtype,
            shape,
            data: Some(hasher.finish()),
        });
    }
    progress(done, total)?;
    let fingerprint = Fingerprint::new(records).map_err(|e| Error::format(&src, e))?;
    Ok(Fingerprinted { format: Format::Gguf, fingerprint, bytes: total, skipped: Vec::new() })
}

/// Fingerprints an opened input on `threads` threads (0 = one per core);
/// `progress` is as in [`fingerprint_source`].
pub fn fingerprint_input<S: RangeSource>(
    input: Input<'_, S>,
    threads: usize,
    mut progress: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Fingerprinted> {
    let src = input.name().to_string();
    let (items, skipped) = plan(&input)?;
    let total = items.iter().fold(0u64, |sum, t| sum.saturating_add(t.len));
    let threads = if threads == 0 { default_readers() } else { threads };
    let digests: Mutex<Vec<Option<Digest>>> = Mutex::new(vec![None; items.len()]);
    let done = AtomicU64::new(0);
    let gather = Mutex::new(());
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(items[k].len));
    let job = |k: usize, scratch: &mut Vec<u8>, stopped: &AtomicBool| {
        let k = order[k];
        if items[k].spec.meta {
            return Ok(());
        }
        let mut hasher = DataHasher::new();
        stream(&input, &items[k], false, &gather, scratch, &mut |piece| {
            check(stopped)?;
            hasher.update(piece);
            done.fetch_add(piece.len() as u64, Ordering::Relaxed);
            Ok(())
        })?;
        let digest = hasher.finish();
        digests.lock().map_err(|_| Error::Invalid("a hashing thread panicked".into()))?[k] =
            Some(digest);
        Ok(())
    };
    let mut report = |d: u64| progress(d, total);
    for_each_index(threads, items.len(), job, &done, PROGRESS_INTERVAL, &mut report)?;
    let digests =
        digests.into_inner().map_err(|_| Error::Invalid("a hashing thread panicked".into()))?;
    let mut records = Vec::with_capacity(items.len());
    for (item, data) in items.into_iter().zip(digests) {
        let dtype = item.spec.dtype.element().ok_or_else(|| no_torch_name(&src, &item.spec))?;
        records.push(TensorFingerprint {
            name: item.spec.path.dotted_name(),
            dtype,
            shape: item.spec.shape,
            data,
        });
    }
    let fingerprint = Fingerprint::new(records).map_err(|e| Error::format(&src, e))?;
    Ok(Fingerprinted { format: input.format(), fingerprint, bytes: total, skipped })
}

/// The tensors to hash, in the input's order, and the checkpoint entries
/// that are not tensors. Every tensor is streamed little-endian.
fn plan<S: RangeSource>(input: &Input<'_, S>) -> Result<(Vec<Item>, Vec<String>)> {
    let (items, skipped) = listing(input)?;
    let src = input.name();
    if let Some(t) = items.iter().find(|t| t.spec.dtype.element().is_none()) {
        return Err(no_torch_name(src, &t.spec));
    }
    Ok((items, skipped))
}

/// Every tensor of `input` as a fingerprint reads it (a sharded model's
/// checked against its index), and the checkpoint entries that are not
/// tensors.
pub(crate) fn listing<S: RangeSource>(input: &Input<'_, S>) -> Result<(Vec<Item>, Vec<String>)> {
    let (mut items, mut skipped) = (Vec::new(), Vec::new());
    collect(input, 0, &mut items, &mut skipped)?;
    check_shards(input, &items)?;
    Ok((items, skipped))
}

/// Appends `input`'s tensors to `items` (tagged as shard `shard`), and a
/// checkpoint's other entries to `skipped`.
fn collect<S: RangeSource>(
    input: &Input<'_, S>,
    shard: usize,
    items: &mut Vec<Item>,
    skipped: &mut Vec<String>,
) -> Result<()> {
    let spec = |path: TensorPath, dtype: Dtype, shape: Vec<u64>, meta: bool| TensorSpec {
        path,
        tensor_type: TensorType::StateDict,
        module_index: 0,
        dtype,
        shape,
        meta,
    };
    match input {
        Input::Checkpoint(reader) => {
            for (i, e) in reader.entries().iter().enumerate() {
                let Leaf::Tensor(view) = &e.value else {
                    skipped.push(e.path.dotted_name());
                    continue;
                };
                let s = spec(
                    e.path.clone(),
                    Dtype::from_element(view.dtype),
                    view.shape.clone(),
                    false,
                );
                items.push(Item { shard, index: i, spec: s, len: reader.nbytes(i)?, swap: None });
            }
        }
        Input::Tensorizer(reader) => {
            for (i, e) in reader.entries().iter().enumerate() {
                let s = spec(e.path.clone(), e.dtype.clone(), e.shape.clone(), e.is_meta());
                items.push(Item {
                    shard,
                    index: i,
                    spec: s,
                    len: e.data_length,
                    swap: swap_unit(&e.dtype),
                });
            }
        }
        Input::Safetensors(file) => {
            for (i, e) in file.entries().iter().enumerate() {
                let s = spec(
                    TensorPath::Plain(e.name.clone()),
                    Dtype::from_element(e.dtype),
                    e.shape.clone(),
                    false,
                );
                items.push(Item { shard, index: i, spec: s, len: e.end - e.start, swap: None });
            }
        }
        Input::Shards { shards, .. } => {
            for (s, input) in shards.iter().enumerate() {
                collect(input, s, items, skipped)?;
            }
        }
    }
    Ok(())
}

/// The error for a tensor whose (opaque) dtype names no torch type this
/// build knows: its record would have no dtype name.
fn no_torch_name(src: &str, spec: &TensorSpec) -> Error {
    Error::Invalid(format!(
        "{src}: tensor {:?}: dtype {} is not a torch dtype this build knows; it cannot be fingerprinted",
        spec.path.dotted_name(),
        spec.dtype
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gstr(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    /// A GGUF file of one tensor `w` of ggml type `ty`, dimensions `ne`
    /// (innermost first), holding `data`.
    fn gguf(ty: u32, ne: &[u64], data: &[u8]) -> Vec<u8> {
        let mut f = b"GGUF".to_vec();
        f.extend(3u32.to_le_bytes());
        f.extend(1u64.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        f.extend(gstr("w"));
        f.extend((ne.len() as u32).to_le_bytes());
        ne.iter().for_each(|d| f.extend(d.to_le_bytes()));
        f.extend(ty.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        f.resize(f.len().next_multiple_of(32), 0);
        f.extend_from_slice(data);
        f
    }

    fn of(dir: &std::path::Path, name: &str, bytes: &[u8]) -> Result<Fingerprinted> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        fingerprint(&path.to_string_lossy(), &FingerprintOptions::default(), |_, _| Ok(()))
    }

    #[test]
    fn an_unquantized_gguf_file_fingerprints_as_the_same_weights_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..8u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let from_gguf = of(dir.path(), "m.gguf", &gguf(0, &[4, 2], &data)).unwrap();
        let json = br#"{"w":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}}"#;
        let mut st = (json.len() as u64).to_le_bytes().to_vec();
        st.extend_from_slice(json);
        st.extend_from_slice(&data);
        let from_st = of(dir.path(), "m.safetensors", &st).unwrap();
        assert_eq!(from_gguf.format, Format::Gguf);
        assert_eq!(from_gguf.fingerprint.hex(), from_st.fingerprint.hex());
        let quantized = of(dir.path(), "q.gguf", &gguf(8, &[32], &[0; 34])).unwrap_err();
        assert!(quantized.to_string().contains("ggml Q8_0 has no torch dtype"), "{quantized}");
        let short = of(dir.path(), "s.gguf", &gguf(0, &[4, 2], &data[..16])).unwrap_err();
        assert!(short.to_string().contains("past the end"), "{short}");
    }
}
