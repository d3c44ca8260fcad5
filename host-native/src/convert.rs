//! Format conversion: torch.save checkpoints, tensorizer files and
//! safetensors files in (local paths or URIs, read with range reads),
//! tensorizer or safetensors files out, written atomically (an existing
//! file at the target is replaced only by a complete conversion).
//!
//! Tensors are converted on a small pool of threads (`num_writers`, by
//! default one per core), each taking the next tensor, largest first, and
//! streaming it through piece by piece: read one piece ([`LOCAL_PIECE`]
//! from a local file, [`REMOTE_PIECE`] from the network), hash it (CRC-32
//! and SHA-256 for a tensorizer output, as tensorizer writes) and write it
//! at its place in the output, fixed before any data moves. SHA-256 cannot
//! be split within a tensor, so the pool works on several tensors at once;
//! the output bytes do not depend on the threads or the order.
//!
//! Memory is bounded by the largest tensor, never the file: each thread
//! holds at most two pieces (a big-endian tensorizer tensor going to
//! safetensors is swapped in a copy), and a checkpoint view that is not
//! contiguous (a transpose, a column of a wider storage) is gathered whole,
//! one such view at a time across the pool. In all: `2 × threads × piece`
//! plus, for the largest gathered view, its storage span and its gathered
//! copy.

pub mod checkpoint;
pub mod fingerprint;
pub mod safetensors;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tensorizer_core::checkpoint::{Leaf, SNIFF_LEN};
use tensorizer_core::dtype::ByteOrder;
use tensorizer_core::layout::MAX_TENSORS;
use tensorizer_core::safetensors::to_safetensors;
use tensorizer_core::write::check_tensor_count;
use tensorizer_core::{
    Dtype, KeySource, Sniffed, TensorPath, TensorSpec, TensorType, sniff_format,
};

use crate::convert::checkpoint::CheckpointReader;
use crate::convert::safetensors::{
    SafetensorsFile, StoredTensor, flat_name, safetensors_dtype, swap_bytes,
};
use crate::error::{Error, Result, io_err};
use crate::parallel::{default_readers, for_each_index};
use crate::read::{ReadOptions, Reader};
use crate::shards::ShardedModel;
use crate::source::Intent;
use crate::source::LocalFile;
use crate::source::RangeSource;
use crate::store::open_uri;
use crate::write::atomic::AtomicFile;
use crate::write::{FileWriter, WriteOptions};

/// Bytes per piece streamed from a local source: small enough to stay in
/// cache between the read, the hashes and the write.
pub const LOCAL_PIECE: usize = 1 << 20;

/// Bytes per piece (one range request) streamed from a network source.
pub const REMOTE_PIECE: usize = 16 << 20;

/// Longest wait between two progress reports.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// By default a conversion writes at most this many times its input's
/// bytes of tensor data (or [`DEFAULT_MIN_OUTPUT_BOUND`], if larger): a
/// checkpoint of a few KB may hold stride-0 (expanded) or overlapping views
/// that are written out whole. Raise with
/// [`ConvertOptions::max_output_bytes`].
pub const DEFAULT_MAX_OUTPUT_GROWTH: u64 = 4;

/// The default bound on a conversion's output data never goes below this
/// (see [`DEFAULT_MAX_OUTPUT_GROWTH`]).
pub const DEFAULT_MIN_OUTPUT_BOUND: u64 = 1 << 30;

/// The default bound on the tensor data converting an input of
/// `input_len` bytes may write: max([`DEFAULT_MIN_OUTPUT_BOUND`],
/// [`DEFAULT_MAX_OUTPUT_GROWTH`] × `input_len`).
pub fn default_max_output_bytes(input_len: u64) -> u64 {
    DEFAULT_MAX_OUTPUT_GROWTH.saturating_mul(input_len).max(DEFAULT_MIN_OUTPUT_BOUND)
}

/// A file format conversion reads or writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// A tensorizer file (`.tensors`).
    #[default]
    Tensorizer,
    /// A safetensors file (`.safetensors`).
    Safetensors,
    /// A `torch.save` zip checkpoint (`.pt`, `.pth`, `.bin`); input only.
    TorchCheckpoint,
    /// A GGUF file (llama.cpp's); read for fingerprints only (its
    /// quantized types have no dtype in the other formats).
    Gguf,
}

impl Format {
    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tensorizer => "tensorizer",
            Self::Safetensors => "safetensors",
            Self::TorchCheckpoint => "torch checkpoint",
            Self::Gguf => "gguf",
        }
    }

    /// The format a conversion writes to `path`: the one its extension
    /// names (`.tensors`, `.safetensors`), or `to` where the extension names
    /// none. Refused: a `to` that contradicts the extension, no way to tell,
    /// and torch.save checkpoints (`.pt`, `.pth`, `.bin`, `.ckpt`, or
    /// `to`), which nothing here writes. The one rule for every front end
    /// (`tzr convert`, `tensorizer_rs.convert`).
    pub fn for_output(path: &Path, to: Option<Self>) -> Result<Self> {
        let shown = path.display();
        let implied = output_extension(path);
        let refuse = |what: String| Err(Error::Invalid(format!("{shown}: {what}")));
        match (to, implied) {
            (Some(Self::TorchCheckpoint), _) | (None, Some(Self::TorchCheckpoint)) => refuse(
                format!("{CANNOT_WRITE_CHECKPOINTS}; name the output .tensors or .safetensors"),
            ),
            (Some(Self::Gguf), _) | (None, Some(Self::Gguf)) => {
                refuse("tensorizer-rs cannot write GGUF files".into())
            }
            (Some(to), Some(implied)) if to != implied => refuse(format!(
                "the output format {} contradicts the name, which says {}",
                to.name(),
                implied.name()
            )),
            (Some(to), _) => Ok(to),
            (None, Some(implied)) => Ok(implied),
            (None, None) => refuse(
                "cannot tell the output format from the name: end it in .tensors or .safetensors, \
                 or name the format (--to, to=)"
                    .into(),
            ),
        }
    }

    /// Recognises an input of `file_len` bytes by its first bytes (up to
    /// [`SNIFF_LEN`]), as [`tensorizer_core::sniff`] tells them: a torch
    /// checkpoint (zip or legacy), a tensorizer file, or a safetensors file
    /// (a plausible header length followed by `{`, asked before the weaker
    /// legacy-pickle test). When the bytes say none of these, a
    /// `.safetensors` name means safetensors and anything else tensorizer,
    /// whose reader then says what is wrong.
    pub fn sniff(head: &[u8], file_len: u64, name: &str) -> Self {
        if head.starts_with(tensorizer_core::gguf::MAGIC) {
            return Self::Gguf;
        }
        match sniff_format(head, file_len) {
            Some(Sniffed::TorchZip | Sniffed::LegacyTorch) => Self::TorchCheckpoint,
            Some(Sniffed::Tensorizer) => Self::Tensorizer,
            Some(Sniffed::Safetensors { .. }) => Self::Safetensors,
            None if has_safetensors_extension(name) => Self::Safetensors,
            None => Self::Tensorizer,
        }
    }
}

/// Why a conversion to a torch.save checkpoint is refused.
pub const CANNOT_WRITE_CHECKPOINTS: &str = "tensorizer-rs cannot write torch.save checkpoints";

/// The format an output path's extension names, if any.
fn output_extension(path: &Path) -> Option<Format> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "tensors" => Some(Format::Tensorizer),
        "safetensors" => Some(Format::Safetensors),
        "pt" | "pth" | "bin" | "ckpt" => Some(Format::TorchCheckpoint),
        _ => None,
    }
}

fn has_safetensors_extension(name: &str) -> bool {
    let name = name.split(['?', '#']).next().unwrap_or(name);
    name.rsplit_once('.').is_some_and(|(_, ext)| ext.eq_ignore_ascii_case("safetensors"))
}

/// How to convert.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// The output format; `None`: from the output's extension (the rule is
    /// [`Format::for_output`]).
    pub to: Option<Format>,
    /// A tensorizer output's layout and encryption, and the threads
    /// converting (`num_writers`; 0 = one per core, at most 16).
    pub write: WriteOptions,
    /// The key or passphrase of an encrypted tensorizer input.
    pub key: Option<KeySource>,
    /// Most bytes of tensor data the conversion may write; more is refused
    /// before anything is written. `None`: [`default_max_output_bytes`] of
    /// the input's length; `Some(u64::MAX)`: no bound.
    pub max_output_bytes: Option<u64>,
}

/// What a conversion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Converted {
    /// The input's format.
    pub from: Format,
    /// The output's format.
    pub to: Format,
    /// Tensors written (tied weights count once per name).
    pub tensors: usize,
    /// Data bytes written.
    pub bytes: u64,
    /// Non-tensor entries of a checkpoint skipped, by name.
    pub skipped: Vec<String>,
    /// Whether nested checkpoint paths had to be written as flat dotted
    /// names (their keys mix strings and ints at one level, which
    /// tensorizer refuses).
    pub flattened: bool,
}

/// An opened conversion input.
pub enum Input<'a, S: RangeSource> {
    /// A torch.save checkpoint: every tensor entry, gathered contiguous and
    /// little-endian.
    Checkpoint(&'a CheckpointReader<S>),
    /// A tensorizer file: every tensor, its hashes verified as it streams.
    Tensorizer(&'a Reader<S>),
    /// A safetensors file.
    Safetensors(&'a SafetensorsFile<S>),
    /// A model stored as several files ([`crate::shards`]): each shard's
    /// tensors, shard after shard, checked against the model's index
    /// before any data moves.
    Shards {
        /// Which files the model is, and what its index maps.
        model: &'a ShardedModel,
        /// Each of `model.shards`, opened, in the same order (none of
        /// them `Shards`).
        shards: &'a [Self],
    },
}

impl<S: RangeSource> Input<'_, S> {
    /// The input's format (a sharded model's: its first shard's).
    pub(crate) fn format(&self) -> Format {
        match self {
            Self::Checkpoint(_) => Format::TorchCheckpoint,
            Self::Tensorizer(_) => Format::Tensorizer,
            Self::Safetensors(_) => Format::Safetensors,
            Self::Shards { shards, .. } => shards.first().map_or(Format::Safetensors, Self::format),
        }
    }

    /// The input's name for messages: a file's, or a sharded model's
    /// location (its folder or index).
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Checkpoint(r) => r.source().name(),
            Self::Tensorizer(r) => r.source().name(),
            Self::Safetensors(f) => f.source().name(),
            Self::Shards { model, .. } => &model.location,
        }
    }

    /// The input's bytes (a sharded model's: every shard's).
    pub(crate) fn len(&self) -> u64 {
        match self {
            Self::Checkpoint(r) => r.source().len(),
            Self::Tensorizer(r) => r.source().len(),
            Self::Safetensors(f) => f.source().len(),
            Self::Shards { shards, .. } => {
                shards.iter().fold(0u64, |sum, s| sum.saturating_add(s.len()))
            }
        }
    }

    /// Whether any file of the input is a torch.save checkpoint.
    fn has_checkpoint(&self) -> bool {
        match self {
            Self::Checkpoint(_) => true,
            Self::Shards { shards, .. } => shards.iter().any(Self::has_checkpoint),
            _ => false,
        }
    }

    /// Bytes per piece read from the source (a sharded model's shards
    /// are streamed each by its own rule).
    fn piece(&self) -> usize {
        let long = match self {
            Self::Checkpoint(r) => r.source().prefers_long_reads(),
            Self::Tensorizer(r) => r.source().prefers_long_reads(),
            Self::Safetensors(f) => f.source().prefers_long_reads(),
            Self::Shards { .. } => false,
        };
        if long { REMOTE_PIECE } else { LOCAL_PIECE }
    }
}

/// A conversion or fingerprint input, opened and owned: what [`Input`]
/// borrows.
pub enum Opened<S: RangeSource> {
    /// A torch.save checkpoint.
    Checkpoint(CheckpointReader<S>),
    /// A tensorizer file.
    Tensorizer(Reader<S>),
    /// A safetensors file.
    Safetensors(SafetensorsFile<S>),
}

impl<S: RangeSource> Opened<S> {
    /// Opens `source` as its first bytes say ([`sniff`]); a tensorizer
    /// file's stored hashes are checked as it streams when `verify` is set.
    /// GGUF files are refused (see [`Format::Gguf`]).
    pub fn open(source: S, key: Option<KeySource>, verify: bool) -> Result<Self> {
        let format = sniff(&source)?;
        Self::open_as(source, format, key, verify)
    }

    /// [`Opened::open`] for a source already told to hold `format`.
    pub fn open_as(
        source: S,
        format: Format,
        key: Option<KeySource>,
        verify: bool,
    ) -> Result<Self> {
        match format {
            Format::TorchCheckpoint => Ok(Self::Checkpoint(CheckpointReader::new(source)?)),
            Format::Tensorizer => {
                let read = ReadOptions { num_readers: 1, verify_hash: verify, key };
                Ok(Self::Tensorizer(Reader::new(source, read)?))
            }
            Format::Safetensors => Ok(Self::Safetensors(SafetensorsFile::new(source)?)),
            Format::Gguf => Err(Error::Invalid(format!(
                "{}: GGUF files cannot be converted (their quantized types have no dtype in the other formats)",
                source.name()
            ))),
        }
    }

    /// The opened file as an input.
    pub fn input(&self) -> Input<'_, S> {
        match self {
            Self::Checkpoint(r) => Input::Checkpoint(r),
            Self::Tensorizer(r) => Input::Tensorizer(r),
            Self::Safetensors(f) => Input::Safetensors(f),
        }
    }
}

/// One tensor to write: where it comes from (an entry index of the input)
/// and what it becomes.
pub(crate) struct Item {
    /// The shard of an [`Input::Shards`] the tensor is in (0 otherwise).
    pub(crate) shard: usize,
    pub(crate) index: usize,
    pub(crate) spec: TensorSpec,
    pub(crate) len: u64,
    /// Bytes per unit to reverse: a big-endian tensorizer tensor going to
    /// safetensors (checkpoints are always gathered little-endian).
    pub(crate) swap: Option<usize>,
}

/// Reads the first bytes of `source` and tells its format ([`Format::sniff`]);
/// bytes of no format read here (and no `.safetensors` name) are refused.
pub fn sniff<S: RangeSource + ?Sized>(source: &S) -> Result<Format> {
    let mut head = vec![0u8; source.len().min(SNIFF_LEN as u64) as usize];
    source.read_exact_at(0, &mut head)?;
    let name = source.name();
    match sniff_format(&head, source.len()) {
        None if head.starts_with(tensorizer_core::gguf::MAGIC) => Ok(Format::Gguf),
        None if !has_safetensors_extension(name) => {
            Err(Error::UnknownFormat { file: name.to_string() })
        }
        _ => Ok(Format::sniff(&head, source.len(), name)),
    }
}

/// Converts `src` (a local path or a URI: `http(s)://`, `s3://`,
/// `redis://`) into a new file at `dst`; see [`convert_source`]. A model
/// stored as shards (a folder, an `*.index.json` or a store prefix; see
/// [`crate::shards`]) becomes one file.
pub fn convert(
    src: &str,
    dst: &Path,
    options: &ConvertOptions,
    progress: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Converted> {
    if crate::shards::is_sharded(src) {
        let to = Format::for_output(dst, options.to)?;
        let opened = crate::shards::OpenedShards::open(src, options.key.clone(), true)?;
        let (write_options, bound) = (&options.write, options.max_output_bytes);
        return opened
            .with_input(|input| write_bounded(input, dst, to, write_options, bound, progress));
    }
    // Checkpoints are read from the end first: no whole-file opening request.
    convert_source(open_uri(src, Intent::Peek)?, dst, options, progress)
}

/// Converts whatever `source` holds (recognised by [`sniff`]) into the
/// format `options.to` names (or `dst`'s extension implies), written
/// atomically at `dst`. `progress` gets (data bytes done, data bytes in
/// all) now and then and once at the end; an error from it stops the
/// conversion (and leaves `dst` as it was).
pub fn convert_source<S: RangeSource>(
    source: S,
    dst: &Path,
    options: &ConvertOptions,
    progress: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Converted> {
    let to = Format::for_output(dst, options.to)?;
    let opened = Opened::open(source, options.key.clone(), true)?;
    write_bounded(opened.input(), dst, to, &options.write, options.max_output_bytes, progress)
}

/// Writes every tensor of `input` to a new `to` file at `dst`, atomically,
/// on `options.num_writers` threads (0 = one per core). `progress` is as in
/// [`convert_source`]. A tensorizer output gets each tensor as a
/// state-dict tensor (a tensorizer input keeps its tensor types, module
/// indices and byte order); a safetensors output gets flat dotted names,
/// little-endian data, and refuses meta tensors and dtypes it cannot name.
/// The data written is bounded by [`default_max_output_bytes`] of the
/// input's length ([`write_bounded`] takes another bound).
pub fn write<S: RangeSource>(
    input: Input<'_, S>,
    dst: &Path,
    to: Format,
    options: &WriteOptions,
    progress: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Converted> {
    write_bounded(input, dst, to, options, None, progress)
}

/// [`write()`], refusing before anything is written a conversion whose
/// tensor data would exceed `max_output_bytes` (`None`:
/// [`default_max_output_bytes`] of the input's length).
pub fn write_bounded<S: RangeSource>(
    input: Input<'_, S>,
    dst: &Path,
    to: Format,
    options: &WriteOptions,
    max_output_bytes: Option<u64>,
    mut progress: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Converted> {
    let mut converted = Converted { from: input.format(), to, ..Converted::default() };
    let items = plan(&input, to, options, &mut converted)?;
    let src = input.name();
    let total = items.iter().fold(0u64, |sum, t| sum.saturating_add(t.len));
    check_output_bound(src, input.len(), total, max_output_bytes)?;
    let threads = if options.num_writers == 0 { default_readers() } else { options.num_writers };
    let done = AtomicU64::new(0);
    // Non-contiguous views are gathered one at a time (see the module docs).
    let gather = Mutex::new(());
    let mut report = |d: u64| progress(d, total);
    // Largest first, so that no thread is left with a big tensor at the
    // end while the others idle (the output does not depend on the order).
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(items[k].len));
    match to {
        Format::Tensorizer => {
            let specs: Vec<TensorSpec> = items.iter().map(|t| t.spec.clone()).collect();
            let writer = FileWriter::create(dst, &specs, options)?;
            let job = |k: usize, scratch: &mut Vec<u8>, stopped: &AtomicBool| {
                let k = order[k];
                let mut sink = writer.tensor(k)?;
                stream(&input, &items[k], true, &gather, scratch, &mut |piece| {
                    check(stopped)?;
                    sink.write(piece)?;
                    done.fetch_add(piece.len() as u64, Ordering::Relaxed);
                    Ok(())
                })?;
                sink.finish()
            };
            for_each_index(threads, items.len(), job, &done, PROGRESS_INTERVAL, &mut report)?;
            writer.commit()?;
        }
        Format::Safetensors => {
            let header = safetensors_header(src, &items)?;
            let tmp = AtomicFile::create(dst)?;
            let name = tmp.name().to_string();
            let file = tmp.file();
            let data_start = header.len() as u64;
            file.write_all_at(&header, 0).map_err(io_err(&name, 0))?;
            let offsets: Vec<u64> = items
                .iter()
                .scan(data_start, |at, t| {
                    let here = *at;
                    *at += t.len;
                    Some(here)
                })
                .collect();
            let job = |k: usize, scratch: &mut Vec<u8>, stopped: &AtomicBool| {
                let k = order[k];
                let mut at = offsets[k];
                stream(&input, &items[k], true, &gather, scratch, &mut |piece| {
                    check(stopped)?;
                    file.write_all_at(piece, at).map_err(io_err(&name, at))?;
                    crate::write::start_writeback(file, at, piece.len());
                    at += piece.len() as u64;
                    done.fetch_add(piece.len() as u64, Ordering::Relaxed);
                    Ok(())
                })
            };
            for_each_index(threads, items.len(), job, &done, PROGRESS_INTERVAL, &mut report)?;
            tmp.commit()?;
        }
        Format::TorchCheckpoint => {
            return Err(Error::Invalid("torch checkpoints cannot be written".into()));
        }
        Format::Gguf => return Err(Error::Invalid("GGUF files cannot be written".into())),
    }
    converted.tensors = items.len();
    converted.bytes = total;
    Ok(converted)
}

/// Refuses to write `total` data bytes from an input of `input_len` bytes
/// past the bound (see [`ConvertOptions::max_output_bytes`]).
/// Writes every tensor of a checkpoint to a tensorizer file (atomically,
/// through [`crate::write::FileWriter`]), each as a state-dict tensor
/// under its path, gathered contiguous and little-endian, hashing on
/// `options.num_writers` threads (see [`crate::convert`]). Non-tensor
/// entries are skipped (listed in the result); tied weights are written
/// once per name. Memory stays bounded by the largest tensor.
pub fn checkpoint_to_tensorizer<S: RangeSource>(
    reader: &CheckpointReader<S>,
    out: &Path,
    options: &WriteOptions,
    mut progress: impl FnMut(u64),
) -> Result<Converted> {
    let input = Input::Checkpoint(reader);
    write(input, out, Format::Tensorizer, options, |done, _| {
        progress(done);
        Ok(())
    })
}

/// Writes every tensor of a checkpoint to a safetensors file (atomically),
/// under its flat name (path components joined with dots). A dtype
/// safetensors cannot name, or two entries flattening to one name, is an
/// error; non-tensor entries are skipped as in [`checkpoint_to_tensorizer`].
pub fn checkpoint_to_safetensors<S: RangeSource>(
    reader: &CheckpointReader<S>,
    out: &Path,
    mut progress: impl FnMut(u64),
) -> Result<Converted> {
    let input = Input::Checkpoint(reader);
    let options = WriteOptions::default();
    write(input, out, Format::Safetensors, &options, |done, _| {
        progress(done);
        Ok(())
    })
}

/// Converts a tensorizer file to safetensors, verifying every hash on the
/// way, on several threads (see [`crate::convert`]). Big-endian tensors are
/// byte-swapped (safetensors is little-endian). `progress` is called with
/// the bytes done so far.
pub fn tensorizer_to_safetensors<S: RangeSource>(
    reader: &Reader<S>,
    out: &Path,
    mut progress: impl FnMut(u64),
) -> Result<()> {
    let input = Input::Tensorizer(reader);
    let options = WriteOptions::default();
    write(input, out, Format::Safetensors, &options, |done, _| {
        progress(done);
        Ok(())
    })
    .map(|_| ())
}

/// Converts a safetensors file to a tensorizer file, streaming, hashing on
/// several threads (see [`crate::convert`]).
pub fn safetensors_to_tensorizer(
    input: &Path,
    out: &Path,
    options: &WriteOptions,
    mut progress: impl FnMut(u64),
) -> Result<()> {
    let file = SafetensorsFile::new(LocalFile::open(input)?)?;
    let input = Input::Safetensors(&file);
    write(input, out, Format::Tensorizer, options, |done, _| {
        progress(done);
        Ok(())
    })
    .map(|_| ())
}

fn check_output_bound(
    src: &str,
    input_len: u64,
    total: u64,
    max_output_bytes: Option<u64>,
) -> Result<()> {
    let bound = max_output_bytes.unwrap_or_else(|| default_max_output_bytes(input_len));
    if total <= bound {
        return Ok(());
    }
    let why = match max_output_bytes {
        Some(_) => String::new(),
        None => format!(
            " (by default the larger of DEFAULT_MIN_OUTPUT_BOUND = {DEFAULT_MIN_OUTPUT_BOUND} and \
             DEFAULT_MAX_OUTPUT_GROWTH = {DEFAULT_MAX_OUTPUT_GROWTH} × the input's {input_len} bytes)"
        ),
    };
    Err(Error::Invalid(format!(
        "{src}: the conversion would write {total} bytes of tensor data, more than max_output_bytes = \
         {bound}{why}; stride-0 (expanded) and overlapping views are written out whole. Nothing was written; \
         to allow it, raise max_output_bytes (tzr convert --max-output-bytes, Python \
         convert(max_output_bytes=...))"
    )))
}

/// Gives up on a tensor once the conversion has failed elsewhere (or its
/// progress callback stopped it).
pub(crate) fn check(stopped: &AtomicBool) -> Result<()> {
    if stopped.load(Ordering::Acquire) {
        return Err(Error::Invalid("conversion stopped".into()));
    }
    Ok(())
}

/// The tensors to write, in output order.
fn plan<S: RangeSource>(
    input: &Input<'_, S>,
    to: Format,
    options: &WriteOptions,
    converted: &mut Converted,
) -> Result<Vec<Item>> {
    let src = input.name();
    if to == Format::TorchCheckpoint {
        return Err(Error::Invalid(format!(
            "{src}: writing torch checkpoints is not supported; convert to tensorizer (.tensors) or safetensors \
             (.safetensors)"
        )));
    }
    let mut items = Vec::new();
    collect(input, to, converted, 0, &mut items)?;
    check_shards(input, &items)?;
    match to {
        Format::Tensorizer => fit_tensorizer(input, options, converted, &mut items)?,
        Format::Safetensors => items.iter().try_for_each(|t| fits_safetensors(src, t))?,
        Format::TorchCheckpoint | Format::Gguf => {}
    }
    Ok(items)
}

/// Refuses more tensors than a tensorizer file may hold (what we write, we
/// read: before anything is written), and flattens a checkpoint's
/// structured paths where tensorizer cannot hold them.
fn fit_tensorizer<S: RangeSource>(
    input: &Input<'_, S>,
    options: &WriteOptions,
    converted: &mut Converted,
    items: &mut [Item],
) -> Result<()> {
    check_tensor_count(items.len() as u64).map_err(|_| {
        Error::Invalid(format!(
            "{}: {} tensors, more than a tensorizer file may hold (MAX_TENSORS = {MAX_TENSORS}; readers \
             refuse more); nothing was written",
            input.name(),
            items.len()
        ))
    })?;
    // Structured checkpoint paths are kept when tensorizer can hold them; a
    // state dict mixing string and int keys at one level gets flat dotted
    // names.
    if input.has_checkpoint() && !paths_fit(items, options) {
        for t in items.iter_mut() {
            t.spec.path = TensorPath::Plain(flat_name(&t.spec.path));
        }
        converted.flattened = true;
    }
    Ok(())
}

/// Refuses a tensor safetensors cannot store: a meta tensor, a dtype it
/// lacks, or a 0-dimensional packed dtype.
fn fits_safetensors(src: &str, t: &Item) -> Result<()> {
    let name = flat_name(&t.spec.path);
    let fail = |why: String| Error::Invalid(format!("{src}: tensor {name:?}: {why}"));
    if t.spec.meta {
        return Err(fail("meta tensors (no data) cannot be stored in safetensors".into()));
    }
    let element = t.spec.dtype.element();
    if element.and_then(|e| to_safetensors(e, &t.spec.shape)).is_some() {
        return Ok(());
    }
    let dtype =
        element.map_or_else(|| format!("{:?}", t.spec.dtype.as_str()), |e| e.torch_name().into());
    let why = if element.and_then(safetensors_dtype).is_some() {
        format!("safetensors cannot store a 0-dimensional {dtype} (it counts packed values)")
    } else {
        format!("safetensors has no dtype for {dtype}")
    };
    Err(fail(format!("{why}; convert to tensorizer (.tensors) instead")))
}

/// Checks a sharded model's shards, as `items` lists their tensors,
/// against its index ([`ShardedModel::check`]), before any data moves.
pub(crate) fn check_shards<S: RangeSource>(input: &Input<'_, S>, items: &[Item]) -> Result<()> {
    let Input::Shards { model, .. } = input else { return Ok(()) };
    let mut held: BTreeMap<String, BTreeSet<String>> =
        model.shards.iter().map(|s| (s.clone(), BTreeSet::new())).collect();
    for t in items {
        if let Some(names) = model.shards.get(t.shard).and_then(|s| held.get_mut(s)) {
            names.insert(t.spec.path.dotted_name());
        }
    }
    model.check(&held)
}

/// Appends `input`'s tensors to `items` as `to` stores them (tagged as
/// shard `shard`); a checkpoint's other entries go to `converted.skipped`.
fn collect<S: RangeSource>(
    input: &Input<'_, S>,
    to: Format,
    converted: &mut Converted,
    shard: usize,
    items: &mut Vec<Item>,
) -> Result<()> {
    match input {
        Input::Checkpoint(reader) => {
            for (i, e) in reader.entries().iter().enumerate() {
                let Leaf::Tensor(view) = &e.value else {
                    converted.skipped.push(e.path.to_string());
                    continue;
                };
                let len = reader.nbytes(i)?;
                let spec = TensorSpec {
                    path: e.path.clone(),
                    tensor_type: TensorType::StateDict,
                    module_index: 0,
                    dtype: Dtype::from_element(view.dtype),
                    shape: view.shape.clone(),
                    meta: false,
                };
                items.push(Item { shard, index: i, spec, len, swap: None });
            }
        }
        Input::Tensorizer(reader) => {
            for (i, e) in reader.entries().iter().enumerate() {
                let spec = if to == Format::Tensorizer {
                    reader.spec(i)?
                } else {
                    TensorSpec {
                        path: e.path.clone(),
                        tensor_type: e.tensor_type,
                        module_index: 0,
                        dtype: e.dtype.clone(),
                        shape: e.shape.clone(),
                        meta: e.is_meta(),
                    }
                };
                let swap = (to == Format::Safetensors)
                    .then(|| crate::convert::safetensors::swap_unit(&e.dtype))
                    .flatten();
                items.push(Item { shard, index: i, spec, len: e.data_length, swap });
            }
        }
        Input::Safetensors(file) => {
            for (i, e) in file.entries().iter().enumerate() {
                let spec = TensorSpec {
                    path: TensorPath::Plain(e.name.clone()),
                    tensor_type: TensorType::StateDict,
                    module_index: 0,
                    dtype: Dtype::from_element(e.dtype),
                    shape: e.shape.clone(),
                    meta: false,
                };
                items.push(Item { shard, index: i, spec, len: e.end - e.start, swap: None });
            }
        }
        Input::Shards { shards, .. } => {
            for (s, input) in shards.iter().enumerate() {
                collect(input, to, converted, s, items)?;
            }
        }
    }
    Ok(())
}

/// Whether the core writer accepts these paths together (a dry run).
fn paths_fit(items: &[Item], options: &WriteOptions) -> bool {
    let layout = tensorizer_core::WriterOptions { encryption: None, ..options.layout.clone() };
    let specs: Vec<TensorSpec> = items.iter().map(|t| t.spec.clone()).collect();
    match tensorizer_core::Writer::plan(&specs, &layout) {
        Ok(mut w) => specs.iter().all(|s| w.add(s, None).is_ok()),
        Err(_) => false,
    }
}

/// The safetensors header for `items` stored back to back in order
/// ([`safetensors::safetensors_header`](crate::convert::safetensors::safetensors_header), with safetensors' torch metadata).
fn safetensors_header(src: &str, items: &[Item]) -> Result<Vec<u8>> {
    let tensors: Vec<StoredTensor> = items
        .iter()
        .map(|t| StoredTensor {
            name: flat_name(&t.spec.path),
            // Checked when the items were planned (`plan`).
            element: t.spec.dtype.element().unwrap_or(tensorizer_core::ElementType::U8),
            shape: t.spec.shape.clone(),
        })
        .collect();
    let torch = [("format".to_string(), "pt".to_string())];
    crate::convert::safetensors::safetensors_header(src, &tensors, &torch)
}

/// Streams `item`'s data, as the output stores it, through `f` in pieces;
/// a tensorizer input's stored hashes are checked when `verify` is set.
pub(crate) fn stream<S: RangeSource>(
    input: &Input<'_, S>,
    item: &Item,
    verify: bool,
    gather: &Mutex<()>,
    scratch: &mut Vec<u8>,
    f: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let piece = input.piece();
    match input {
        Input::Shards { shards, .. } => {
            let shard = shards
                .get(item.shard)
                .ok_or_else(|| Error::Invalid(format!("shard {} is not open", item.shard)))?;
            stream(shard, item, verify, gather, scratch, f)
        }
        Input::Checkpoint(reader) => {
            let i = item.index;
            if item.len == 0 {
                return Ok(());
            }
            let view = reader.tensor(i)?;
            let span = view
                .byte_span()
                .ok_or_else(|| Error::Invalid("tensor view size overflows".into()))?;
            if !view.is_contiguous() || span.end - span.start != item.len {
                // A strided or expanded view: gathered whole, one at a time.
                let _one = gather.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let mut whole = vec![0u8; usize::try_from(item.len).unwrap_or(usize::MAX)];
                reader.read_contiguous(i, &mut whole)?;
                return whole.chunks(piece).try_for_each(f);
            }
            let start = reader.storage_range(view.storage)?.start + span.start;
            let swap = match reader.byte_order() {
                ByteOrder::Big => {
                    Some(crate::convert::checkpoint::swap_unit(view.dtype)).filter(|&u| u > 1)
                }
                _ => None,
            };
            read_pieces(reader.source(), start, item.len, piece, scratch, &mut |p| {
                if let Some(unit) = swap {
                    swap_bytes(p, unit);
                }
                f(p)
            })
        }
        Input::Tensorizer(reader) => reader
            .stream(item.index, piece, verify, |p| match item.swap {
                Some(unit) => {
                    scratch.clear();
                    scratch.extend_from_slice(p);
                    swap_bytes(scratch, unit);
                    f(scratch)
                }
                None => f(p),
            })
            .map(|_| ()),
        Input::Safetensors(file) => {
            let e = &file.entries()[item.index];
            read_pieces(
                file.source(),
                file.data_start() + e.start,
                item.len,
                piece,
                scratch,
                &mut |p| f(p),
            )
        }
    }
}

/// Reads `len` bytes at `offset` in pieces of `piece` bytes into `scratch`
/// (grown once, never shrunk) and hands each to `f`.
fn read_pieces<S: RangeSource>(
    source: &S,
    offset: u64,
    len: u64,
    piece: usize,
    scratch: &mut Vec<u8>,
    f: &mut dyn FnMut(&mut [u8]) -> Result<()>,
) -> Result<()> {
    let want = usize::try_from(len.min(piece as u64)).unwrap_or(piece);
    if scratch.len() < want {
        scratch.resize(want, 0);
    }
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(piece as u64) as usize;
        let buf = &mut scratch[..n];
        source.read_exact_at(offset + at, buf)?;
        f(buf)?;
        at += n as u64;
    }
    Ok(())
}
