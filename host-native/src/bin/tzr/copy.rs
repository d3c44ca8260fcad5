//! `tzr copy`: move a tensorizer file between a local path, `http(s)://`,
//! `s3://` and `redis://`, byte for byte.

use std::io::Write;
use std::path::Path;

use tensorizer_native::atomic::AtomicFile;
use tensorizer_native::{Error, RangeSource, ReadOptions, Reader, redis};

use crate::{Failure, Outcome, progress};

/// Bytes per read while copying.
const STEP: u64 = 32 << 20;

fn is_remote(uri: &str) -> bool {
    let lower = uri.get(..8).unwrap_or(uri).to_ascii_lowercase();
    ["http://", "https://", "s3://", "redis://"].iter().any(|s| lower.starts_with(s))
}

/// Copies every byte of `source` into `file`, with a progress bar.
fn copy_bytes(source: &dyn RangeSource, file: &mut std::fs::File, name: &str) -> Result<(), Error> {
    let bar = progress::bytes(source.len(), "copying");
    let mut buf = vec![0u8; STEP.min(source.len()) as usize];
    let mut offset = 0u64;
    while offset < source.len() {
        let n = (source.len() - offset).min(STEP) as usize;
        source.read_exact_at(offset, &mut buf[..n])?;
        file.write_all(&buf[..n]).map_err(|e| Error::Io { file: name.to_string(), offset, source: e })?;
        offset += n as u64;
        bar.set_position(offset);
    }
    file.sync_all().map_err(|e| Error::Io { file: name.to_string(), offset, source: e })?;
    bar.finish_and_clear();
    Ok(())
}

#[cfg(feature = "s3")]
fn temp_in(dir: &Path, output: &str) -> Result<tempfile::NamedTempFile, Failure> {
    tempfile::Builder::new()
        .prefix(".tzr-copy-")
        .tempfile_in(dir)
        .map_err(|e| Failure::Error(Error::Io { file: output.to_string(), offset: 0, source: e }))
}

pub(crate) fn run(input: &str, output: &str, force: bool) -> Outcome {
    // Parsing the header and index first refuses anything that is not a
    // tensorizer file before a byte is written.
    let reader = Reader::open_uri(input, ReadOptions::default())?;
    if redis::is_redis_uri(output) {
        redis::write_redis(output, &reader, force)?;
        return Ok(());
    }
    #[cfg(feature = "s3")]
    if tensorizer_native::s3::is_s3_uri(output) {
        let mut options = tensorizer_native::s3::S3Options::default();
        options.http.limits = tensorizer_native::source::TransferLimits::from_env()?;
        if !is_remote(input) {
            return Ok(tensorizer_native::s3::upload(Path::new(input), output, &options)?);
        }
        let mut temp = temp_in(&std::env::temp_dir(), output)?;
        copy_bytes(reader.source(), temp.as_file_mut(), output)?;
        return Ok(tensorizer_native::s3::upload(temp.path(), output, &options)?);
    }
    if is_remote(output) {
        let targets = if cfg!(feature = "s3") { "a local path, s3:// or redis://" } else { "a local path or redis://" };
        return Err(Failure::Usage(format!("{output}: can only write to {targets}")));
    }
    let target = Path::new(output);
    if target.exists() && !force {
        return Err(Failure::Usage(format!("{output} exists; pass --force to replace it")));
    }
    // Beside the file the path (or its symlinks) names, with the mode a new
    // or replaced file should have; renamed over it once complete.
    let mut temp = AtomicFile::create(target)?;
    copy_bytes(reader.source(), temp.file_mut(), output)?;
    Ok(temp.commit()?)
}
