//! Writing tensorizer files atomically: everything goes to a temporary file
//! in the target's directory, which is fsynced and renamed over the target
//! only when complete. An interrupted or failed write leaves the previous
//! file untouched.
//!
//! Tensors may be written in any order and from several threads: each has
//! its place in the file fixed up front, data is hashed (and encrypted, one
//! 2 MiB chunk at a time) as it streams in, and the header is written last.

use std::fs::{File, Permissions};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tempfile::NamedTempFile;
use tensorizer_core::crypto::{Key, seal_chunk};
use tensorizer_core::hash::TensorHasher;
use tensorizer_core::layout::{END_MARKER_LEN, NONCE_LEN};
use tensorizer_core::write::{PlannedTensor, Writer, WriterOptions};
use tensorizer_core::{FileHeader, TensorSpec};

use crate::error::{Error, Result, io_err};
use crate::parallel::{default_readers, for_each};

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
    tmp: NamedTempFile,
    target: PathBuf,
    name: String,
    planned: Vec<PlannedTensor>,
    finished: Mutex<Vec<bool>>,
    writer: Writer,
    key: Option<Key>,
}

impl FileWriter {
    /// Lays out `specs` and creates the temporary file next to `path`.
    pub fn create(
        path: impl AsRef<Path>,
        specs: &[TensorSpec],
        options: &WriteOptions,
    ) -> Result<Self> {
        let target = path.as_ref().to_path_buf();
        let name = target.display().to_string();
        let invalid = |e: tensorizer_core::Error| Error::Invalid(format!("{name}: {e}"));
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
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mode = std::fs::metadata(&target)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o644);
        let file_name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{file_name}."))
            .suffix(".tmp")
            .permissions(Permissions::from_mode(mode))
            .tempfile_in(&dir)
            .map_err(io_err(&name, 0))?;
        let file_len = writer.finish().map_err(invalid)?.file_len;
        tmp.as_file().set_len(file_len).map_err(io_err(&name, 0))?;
        let finished = Mutex::new(vec![false; planned.len()]);
        Ok(Self {
            tmp,
            target,
            name,
            planned,
            finished,
            writer,
            key: options.key.clone(),
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
        let hasher = planned.hasher();
        let staging = match (&self.key, planned.nonce) {
            (Some(_), Some(_)) => {
                Vec::with_capacity(planned.chunk_size.min(planned.data_length) as usize)
            }
            _ => Vec::new(),
        };
        Ok(TensorSink {
            owner: self,
            index: i,
            planned,
            hasher,
            written: 0,
            staging,
            macs: Vec::new(),
        })
    }

    fn pwrite(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.tmp
            .as_file()
            .write_all_at(bytes, offset)
            .map_err(io_err(&self.name, offset))
    }

    /// Writes `data[i]` as tensor `i`, using several threads.
    pub fn write_all(&self, data: &[&[u8]], num_writers: usize) -> Result<()> {
        if data.len() != self.planned.len() {
            return Err(Error::Invalid(format!(
                "{}: one data buffer per tensor is required",
                self.name
            )));
        }
        let threads = if num_writers == 0 {
            default_readers()
        } else {
            num_writers
        };
        for_each(threads, data.iter().enumerate().collect(), |(i, bytes)| {
            let mut sink = self.tensor(i)?;
            sink.write(bytes)?;
            sink.finish()
        })
    }

    /// Writes the file header and index, fsyncs, and renames the file over
    /// the target. Fails if any tensor was not finished.
    pub fn commit(self) -> Result<()> {
        let done = self
            .finished
            .lock()
            .map(|f| f.iter().all(|&d| d))
            .unwrap_or(false);
        if !done {
            return Err(Error::Invalid(format!(
                "{}: not every tensor was written",
                self.name
            )));
        }
        let fin = self
            .writer
            .finish()
            .map_err(|e| Error::Invalid(format!("{}: {e}", self.name)))?;
        self.pwrite(0, &fin.header_bytes)?;
        self.pwrite(FileHeader::LEN as u64, &fin.metadata)?;
        self.pwrite(fin.end_marker_offset, &[0u8; END_MARKER_LEN as usize])?;
        self.tmp
            .as_file()
            .sync_all()
            .map_err(io_err(&self.name, 0))?;
        let name = self.name;
        self.tmp.persist(&self.target).map_err(|e| Error::Io {
            file: name.clone(),
            offset: 0,
            source: e.error,
        })?;
        if let Some(dir) = self.target.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Make the rename itself durable.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
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
            self.owner
                .pwrite(self.planned.data_offset + self.written, bytes)?;
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
                self.macs.push(seal_chunk(
                    key,
                    &nonce,
                    self.macs.len() as u64,
                    &mut self.staging,
                ));
                self.owner
                    .pwrite(self.planned.data_offset + self.written, &self.staging)?;
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
        let invalid = |e: tensorizer_core::Error| Error::Invalid(format!("{e}"));
        self.planned
            .set_hashes(&self.hasher.finish())
            .map_err(invalid)?;
        if self.planned.nonce.is_some() {
            self.planned.set_macs(&self.macs).map_err(invalid)?;
        }
        self.owner
            .pwrite(self.planned.header_offset, &self.planned.header)?;
        if let Ok(mut f) = self.owner.finished.lock() {
            f[self.index] = true;
        }
        Ok(())
    }
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
