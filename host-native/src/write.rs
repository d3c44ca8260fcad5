//! Writing tensorizer files atomically: everything goes to a temporary file
//! in the target's directory, which is fsynced and renamed over the target
//! only when complete. An interrupted or failed write leaves the previous
//! file untouched.
//!
//! Tensors may be written in any order and from several threads: each has
//! its place in the file fixed up front, data is hashed (and encrypted, one
//! 2 MiB chunk at a time) as it streams in, and the header is written last.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use tensorizer_core::crypto::{Key, seal_chunk_on};
use tensorizer_core::hash::TensorHasher;
use tensorizer_core::layout::{END_MARKER_LEN, NONCE_LEN};
use tensorizer_core::write::{PlannedTensor, Writer, WriterOptions};
use tensorizer_core::{FileHeader, TensorSpec};

pub mod atomic;
mod blocks;

use std::sync::OnceLock;

use crate::error::{Error, Result, file_err, io_err};
use crate::parallel::{default_readers, for_each};
use crate::write::atomic::AtomicFile;

/// Tensors whose header and data together are at most this long are
/// written in runs.
const SMALL_TENSOR: u64 = 256 << 10;

/// Longest run of small tensors written with one call.
const RUN_LEN: u64 = 4 << 20;

/// Writes at least this long ask the kernel to start writing back at once,
/// so the disk works while later tensors are still being hashed.
const WRITEBACK_KICK: usize = 1 << 20;

/// Starts asynchronous writeback of a range (Linux `sync_file_range` with
/// `SYNC_FILE_RANGE_WRITE`). Purely a performance hint: failures are
/// ignored, and the final `fsync` still makes everything durable.
#[cfg(target_os = "linux")]
pub(crate) fn start_writeback(file: &File, offset: u64, len: usize) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor stays open for the lifetime of `file`; the
    // call reads only its integer arguments and touches no memory of ours.
    #[allow(unsafe_code)]
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn start_writeback(_file: &File, _offset: u64, _len: usize) {}

/// How to write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Layout and encryption settings of the format core.
    pub layout: WriterOptions,
    /// The encryption key; required exactly when `layout.encryption` is set.
    pub key: Option<Key>,
    /// Threads hashing, encrypting and writing (0 = one per core).
    pub num_writers: usize,
}

/// A file being written. Dropping it without [`FileWriter::commit`]
/// removes the temporary file and leaves the target alone.
pub struct FileWriter {
    tmp: AtomicFile,
    name: String,
    planned: Vec<PlannedTensor>,
    finished: Mutex<Vec<bool>>,
    writer: Writer,
    key: Option<Key>,
    /// Set when an append failed part-way: the file can no longer be committed.
    poisoned: bool,
}

impl FileWriter {
    /// Lays out `specs` and creates the temporary file next to `path`.
    pub fn create(
        path: impl AsRef<Path>,
        specs: &[TensorSpec],
        options: &WriteOptions,
    ) -> Result<Self> {
        let name = path.as_ref().display().to_string();
        let invalid = |e: tensorizer_core::Error| Error::format(name.as_str(), e);
        if options.layout.encryption.is_some() != options.key.is_some() {
            return Err(Error::Invalid(format!(
                "{name}: a key is required exactly when encrypting"
            )));
        }
        let mut writer = Writer::plan(specs, &options.layout).map_err(invalid)?;
        let mut planned = Vec::with_capacity(specs.len());
        for spec in specs {
            let nonce = options.key.as_ref().map(|_| random_nonce()).transpose()?;
            planned.push(writer.add(spec, nonce).map_err(invalid)?);
        }
        let tmp = AtomicFile::create(path.as_ref())?;
        let file_len = writer.finish().map_err(invalid)?.file_len;
        tmp.file().set_len(file_len).map_err(file_err(&name))?;
        let finished = Mutex::new(vec![false; planned.len()]);
        Ok(Self { tmp, name, planned, finished, writer, key: options.key.clone(), poisoned: false })
    }

    /// Starts an empty file to which tensors are added with
    /// [`FileWriter::append`]. The metadata index is reserved up front:
    /// `options.layout.metadata_len`, or tensorizer's 256 KiB when unset.
    pub fn open(path: impl AsRef<Path>, options: &WriteOptions) -> Result<Self> {
        let name = path.as_ref().display().to_string();
        if options.layout.encryption.is_some() != options.key.is_some() {
            return Err(Error::Invalid(format!(
                "{name}: a key is required exactly when encrypting"
            )));
        }
        let writer = Writer::new(&options.layout).map_err(|e| Error::format(name.as_str(), e))?;
        let tmp = AtomicFile::create(path.as_ref())?;
        Ok(Self {
            tmp,
            name,
            planned: Vec::new(),
            finished: Mutex::new(Vec::new()),
            writer,
            key: options.key.clone(),
            poisoned: false,
        })
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.planned.len()
    }

    /// Whether the file has no tensors.
    pub fn is_empty(&self) -> bool {
        self.planned.is_empty()
    }

    /// Starts writing tensor `i`; its data must then be written in order.
    pub fn tensor(&self, i: usize) -> Result<TensorSink<'_>> {
        let planned = self
            .planned
            .get(i)
            .cloned()
            .ok_or_else(|| Error::Invalid(format!("{}: no tensor number {i}", self.name)))?;
        Ok(self.sink(planned, i))
    }

    fn sink(&self, planned: PlannedTensor, index: usize) -> TensorSink<'_> {
        let hasher = planned.hasher_on(crate::kernels::digest::kernel());
        let staging = match (&self.key, planned.nonce) {
            (Some(_), Some(_)) => {
                Vec::with_capacity(planned.chunk_size.min(planned.data_length) as usize)
            }
            _ => Vec::new(),
        };
        TensorSink { owner: self, index, planned, hasher, written: 0, staging, macs: Vec::new() }
    }

    fn pwrite(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.tmp.file().write_all_at(bytes, offset).map_err(io_err(&self.name, offset))?;
        if bytes.len() >= WRITEBACK_KICK {
            start_writeback(self.tmp.file(), offset, bytes.len());
        }
        Ok(())
    }

    fn mark_finished(&self, i: usize) {
        if let Ok(mut f) = self.finished.lock() {
            f[i] = true;
        }
    }

    /// Writes `data[i]` as tensor `i`, using several threads. Runs of small
    /// tensors are assembled in memory and written with one call each.
    pub fn write_all(&self, data: &[&[u8]], num_writers: usize) -> Result<()> {
        if data.len() != self.planned.len() {
            return Err(Error::Invalid(format!(
                "{}: one data buffer per tensor is required",
                self.name
            )));
        }
        self.write_planned(&self.planned, data, num_writers)?;
        for i in 0..self.planned.len() {
            self.mark_finished(i);
        }
        Ok(())
    }

    /// Plans `tensors` after those already in the file and writes them at
    /// once (hashing, encrypting and writing on several threads). This is
    /// the incremental mode: the index must have been reserved big enough
    /// by [`FileWriter::open`].
    pub fn append(&mut self, tensors: &[(TensorSpec, &[u8])], num_writers: usize) -> Result<()> {
        if self.poisoned {
            return Err(Error::Invalid(format!(
                "{}: an earlier write failed; start a new file",
                self.name
            )));
        }
        let invalid = |e: tensorizer_core::Error| Error::format(self.name.as_str(), e);
        let mut planned = Vec::with_capacity(tensors.len());
        for (spec, data) in tensors {
            if spec.data_length().map_err(invalid)? != data.len() as u64 {
                return Err(Error::Invalid(format!(
                    "{}: tensor {:?} has {} bytes of data, expected {}",
                    self.name,
                    spec.path.to_string(),
                    data.len(),
                    spec.data_length().unwrap_or(0)
                )));
            }
        }
        for (spec, _) in tensors {
            let nonce = self.key.as_ref().map(|_| random_nonce()).transpose()?;
            match self.writer.add(spec, nonce) {
                Ok(p) => planned.push(p),
                Err(e) if planned.is_empty() => return Err(invalid(e)),
                Err(e) => {
                    self.poisoned = true;
                    return Err(invalid(e));
                }
            }
        }
        let data: Vec<&[u8]> = tensors.iter().map(|(_, d)| *d).collect();
        let result = self.write_planned(&planned, &data, num_writers);
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// The data version chosen so far.
    pub fn version(&self) -> u32 {
        self.writer.version()
    }

    /// Bytes of tensor data written so far.
    pub fn tensor_size(&self) -> u64 {
        self.writer.file_header().tensor_size
    }

    fn write_planned(
        &self,
        planned: &[PlannedTensor],
        data: &[&[u8]],
        num_writers: usize,
    ) -> Result<()> {
        let threads = if num_writers == 0 { default_readers() } else { num_writers };
        let mut work: Vec<Vec<usize>> = Vec::new();
        let mut run_len = u64::MAX;
        for (i, p) in planned.iter().enumerate() {
            let span = p.header.len() as u64 + p.data_length;
            if !is_small(p) {
                work.push(vec![i]);
                run_len = u64::MAX;
                continue;
            }
            match work.last_mut() {
                Some(run) if run_len.saturating_add(span) <= RUN_LEN => run.push(i),
                _ => {
                    work.push(vec![i]);
                    run_len = 0;
                }
            }
            run_len += span;
        }
        if self.key.is_some() {
            // Encryption must happen before the data can be written.
            return for_each(threads, work, |run| match run.as_slice() {
                [i] if !is_small(&planned[*i]) => {
                    let mut sink = self.sink(planned[*i].clone(), *i);
                    sink.write(data[*i])?;
                    sink.finish()
                }
                _ => self.write_run(planned, &run, data),
            });
        }
        // Plain data does not depend on its hashes: one thread writes the
        // blocks that hold no header (starting writeback as it goes) while
        // the others hash, so disk and CPU work overlap; the blocks with
        // headers follow (see `blocks`).
        for (i, (p, bytes)) in planned.iter().zip(data).enumerate() {
            if bytes.len() as u64 != p.data_length {
                return Err(Error::Invalid(format!(
                    "{}: tensor {i} has {} bytes of data, expected {}",
                    self.name,
                    bytes.len(),
                    p.data_length
                )));
            }
        }
        let headers: Vec<OnceLock<Vec<u8>>> = planned.iter().map(|_| OnceLock::new()).collect();
        let batch = blocks::Batch { planned, data, headers: &headers };
        let (early, late): (Vec<_>, Vec<_>) =
            batch.blocks().into_iter().partition(|b| batch.data_only(b));
        let invalid = |e: tensorizer_core::Error| Error::format(self.name.as_str(), e);
        std::thread::scope(|scope| {
            let streamer =
                scope.spawn(|| early.into_iter().try_for_each(|range| batch.write(self, range)));
            let hashed = for_each(threads, work, |run| {
                for i in run {
                    let mut one = planned[i].clone();
                    let mut hasher = one.hasher_on(crate::kernels::digest::kernel());
                    hasher.update(data[i]);
                    one.set_hashes(&hasher.finish()).map_err(invalid)?;
                    let _ = headers[i].set(one.header);
                }
                Ok(())
            });
            let streamed = streamer
                .join()
                .unwrap_or_else(|_| Err(Error::Invalid("writer thread panicked".into())));
            hashed.and(streamed)
        })?;
        batch.write_all(self, late, threads)
    }

    /// Writes consecutive small tensors with a single positioned write.
    fn write_run(&self, planned: &[PlannedTensor], run: &[usize], data: &[&[u8]]) -> Result<()> {
        let (Some(&first), Some(&last)) = (run.first(), run.last()) else { return Ok(()) };
        let start = planned[first].header_offset;
        let end = planned[last].data_offset + planned[last].data_length;
        let invalid = |e: tensorizer_core::Error| Error::format(self.name.as_str(), e);
        let mut buf = Vec::with_capacity((end - start) as usize);
        for &i in run {
            let mut planned = planned[i].clone();
            let bytes = data[i];
            if bytes.len() as u64 != planned.data_length {
                return Err(Error::Invalid(format!(
                    "{}: tensor {i} has {} bytes of data, expected {}",
                    self.name,
                    bytes.len(),
                    planned.data_length
                )));
            }
            let mut hasher = planned.hasher_on(crate::kernels::digest::kernel());
            hasher.update(bytes);
            planned.set_hashes(&hasher.finish()).map_err(invalid)?;
            let at = buf.len();
            buf.extend_from_slice(&planned.header);
            let data_at = buf.len();
            buf.extend_from_slice(bytes);
            if let (Some(key), Some(nonce)) = (&self.key, planned.nonce) {
                let chunk = planned.chunk_size as usize;
                let macs: Vec<_> = buf[data_at..]
                    .chunks_mut(chunk)
                    .enumerate()
                    .map(|(n, c)| {
                        seal_chunk_on(key, &nonce, n as u64, c, crate::kernels::cipher::kernel())
                    })
                    .collect();
                planned.set_macs(&macs).map_err(invalid)?;
                buf[at..data_at].copy_from_slice(&planned.header);
            }
        }
        self.pwrite(start, &buf)
    }

    /// Writes the file header and index, fsyncs, and renames the file over
    /// the target. Fails if any tensor was not finished.
    pub fn commit(self) -> Result<()> {
        let done =
            !self.poisoned && self.finished.lock().map(|f| f.iter().all(|&d| d)).unwrap_or(false);
        if !done {
            return Err(Error::Invalid(format!("{}: not every tensor was written", self.name)));
        }
        let fin = self.writer.finish().map_err(|e| Error::format(self.name.as_str(), e))?;
        self.pwrite(0, &fin.header_bytes)?;
        self.pwrite(FileHeader::LEN as u64, &fin.metadata)?;
        self.pwrite(fin.end_marker_offset, &[0u8; END_MARKER_LEN as usize])?;
        self.tmp.commit()
    }
}

/// One tensor's data stream: hashes, encrypts and writes as bytes arrive.
pub struct TensorSink<'w> {
    owner: &'w FileWriter,
    index: usize,
    planned: PlannedTensor,
    hasher: TensorHasher,
    written: u64,
    staging: Vec<u8>,
    macs: Vec<[u8; 16]>,
}

impl TensorSink<'_> {
    /// Appends the next bytes of plaintext data.
    pub fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        let total = self.written + self.staging.len() as u64 + bytes.len() as u64;
        if total > self.planned.data_length {
            return Err(Error::Invalid(format!(
                "{}: tensor {} got more than its {} bytes",
                self.owner.name, self.index, self.planned.data_length
            )));
        }
        self.hasher.update(bytes);
        let (Some(key), Some(nonce)) = (&self.owner.key, self.planned.nonce) else {
            self.owner.pwrite(self.planned.data_offset + self.written, bytes)?;
            self.written += bytes.len() as u64;
            return Ok(());
        };
        let chunk = self.planned.chunk_size as usize;
        while !bytes.is_empty() {
            let take = (chunk - self.staging.len()).min(bytes.len());
            self.staging.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            let last = self.written + self.staging.len() as u64 == self.planned.data_length;
            if self.staging.len() == chunk || last {
                let kernel = crate::kernels::cipher::kernel();
                self.macs.push(seal_chunk_on(
                    key,
                    &nonce,
                    self.macs.len() as u64,
                    &mut self.staging,
                    kernel,
                ));
                self.owner.pwrite(self.planned.data_offset + self.written, &self.staging)?;
                self.written += self.staging.len() as u64;
                self.staging.clear();
            }
        }
        Ok(())
    }

    /// Checks the length, fills in hashes and MACs, and writes the header.
    pub fn finish(mut self) -> Result<()> {
        if self.written != self.planned.data_length {
            return Err(Error::Invalid(format!(
                "{}: tensor {} got {} of its {} bytes",
                self.owner.name, self.index, self.written, self.planned.data_length
            )));
        }
        let invalid = |e: tensorizer_core::Error| Error::format(self.owner.name.as_str(), e);
        self.planned.set_hashes(&self.hasher.finish()).map_err(invalid)?;
        if self.planned.nonce.is_some() {
            self.planned.set_macs(&self.macs).map_err(invalid)?;
        }
        self.owner.pwrite(self.planned.header_offset, &self.planned.header)?;
        if self.index < self.owner.planned.len() {
            self.owner.mark_finished(self.index);
        }
        Ok(())
    }
}

/// Whether a tensor is written as part of a run of small ones.
fn is_small(p: &PlannedTensor) -> bool {
    p.header.len() as u64 + p.data_length <= SMALL_TENSOR
}

fn random_nonce() -> Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n)
        .map_err(|e| Error::Invalid(format!("no randomness for a nonce: {e}")))?;
    Ok(n)
}

/// Random bytes from the OS (keys, salts).
pub fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| Error::Invalid(format!("no randomness: {e}")))?;
    Ok(b)
}

/// Writes a whole file atomically: `tensors[i].1` is the data of
/// `tensors[i].0` (empty for meta tensors).
pub fn write_file(
    path: impl AsRef<Path>,
    tensors: &[(TensorSpec, &[u8])],
    options: &WriteOptions,
) -> Result<()> {
    let specs: Vec<TensorSpec> = tensors.iter().map(|(s, _)| s.clone()).collect();
    let writer = FileWriter::create(path, &specs, options)?;
    let data: Vec<&[u8]> = tensors.iter().map(|(_, d)| *d).collect();
    writer.write_all(&data, options.num_writers)?;
    writer.commit()
}
