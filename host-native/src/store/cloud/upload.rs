//! Uploads: one `PUT` for a small file, a multipart upload (aborted on any
//! failure) for a larger one.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::{
    CloudOptions, MIN_PART_SIZE, azure_name, azure_store, block_on, gcs_store, object_path,
    request_error,
};
use crate::error::{Error, Result, file_err};
use crate::store::tls::Trust;

/// Opens the file to upload and takes its length.
pub(super) fn open_file(from: &std::path::Path) -> Result<(File, u64)> {
    let name = from.display().to_string();
    let file = File::open(from).map_err(file_err(&name))?;
    let meta = file.metadata().map_err(file_err(&name))?;
    if !meta.is_file() {
        return Err(Error::Invalid(format!("{name}: not a regular file, nothing to upload")));
    }
    Ok((file, meta.len()))
}

/// Uploads everything `reader` yields to `gs://bucket/object`. A read error
/// aborts the upload: no object is left behind.
pub fn upload_gcs_reader(
    reader: &mut dyn Read,
    bucket: &str,
    object: &str,
    opts: &CloudOptions,
) -> Result<()> {
    let name = format!("gs://{bucket}/{object}");
    let (store, trust) = gcs_store(bucket, opts, opts.retry())?;
    upload(&store, &trust, &name, &object_path(&name, object)?, reader, None, opts)
}

/// Uploads everything `reader` yields to blob `blob` of `container`. A read
/// error aborts the upload: no blob is left behind.
pub fn upload_azure_reader(
    reader: &mut dyn Read,
    account: Option<&str>,
    container: &str,
    blob: &str,
    opts: &CloudOptions,
) -> Result<()> {
    let name = azure_name(account, container, blob);
    let (store, trust) = azure_store(account, container, opts, opts.retry())?;
    upload(&store, &trust, &name, &object_path(&name, blob)?, reader, None, opts)
}

/// Reads up to `want` bytes (fewer only at the end of `reader`).
fn read_part(reader: &mut dyn Read, want: usize) -> io::Result<Vec<u8>> {
    let mut part = Vec::with_capacity(want);
    reader.take(want as u64).read_to_end(&mut part)?;
    Ok(part)
}

/// Uploads `reader` (of `len` bytes, when known) to `path` of `store`, whose
/// requests verify servers with `trust`.
pub(super) fn upload(
    store: &dyn ObjectStore,
    trust: &Trust,
    name: &str,
    path: &Path,
    reader: &mut dyn Read,
    len: Option<u64>,
    opts: &CloudOptions,
) -> Result<()> {
    let part_size = opts.part_size.max(MIN_PART_SIZE);
    let source_err = |at: u64| {
        move |e: io::Error| Error::Io {
            file: name.to_string(),
            offset: at,
            source: io::Error::new(
                e.kind(),
                format!("reading the data to upload at byte {at}: {e}"),
            ),
        }
    };
    let first = read_part(reader, part_size).map_err(source_err(0))?;
    let small = match len {
        Some(len) => len <= part_size as u64,
        None => first.len() < part_size,
    };
    if small {
        block_on(store.put(path, PutPayload::from(first)))?
            .map_err(|e| request_error(name, None, e, trust))?;
        return Ok(());
    }
    let mut upload =
        block_on(store.put_multipart(path))?.map_err(|e| request_error(name, None, e, trust))?;
    let result = send_parts(
        &mut *upload,
        trust,
        name,
        reader,
        first,
        part_size,
        opts.parts_in_flight.max(1),
        source_err,
    );
    match result {
        Ok(()) => match block_on(upload.complete())? {
            Ok(_) => Ok(()),
            Err(e) => {
                let _ = block_on(upload.abort());
                Err(request_error(name, None, e, trust))
            }
        },
        Err(e) => {
            // Best effort: the error that stopped the upload is the one to report.
            let _ = block_on(upload.abort());
            Err(e)
        }
    }
}

/// Sends `first` and the rest of `reader` as parts, `in_flight` at a time.
#[allow(clippy::too_many_arguments)] // one upload's state, passed down once
fn send_parts<F>(
    upload: &mut dyn object_store::MultipartUpload,
    trust: &Trust,
    name: &str,
    reader: &mut dyn Read,
    first: Vec<u8>,
    part_size: usize,
    in_flight: usize,
    source_err: impl Fn(u64) -> F,
) -> Result<()>
where
    F: FnOnce(io::Error) -> Error,
{
    let runtime = super::runtime()?;
    let mut pending: VecDeque<(u64, tokio::task::JoinHandle<object_store::Result<()>>)> =
        VecDeque::new();
    let wait =
        |(at, handle): (u64, tokio::task::JoinHandle<object_store::Result<()>>)| -> Result<()> {
            match block_on(handle)? {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(request_error(name, None, e, trust)),
                Err(e) => Err(Error::Io {
                    file: name.to_string(),
                    offset: at,
                    source: io::Error::other(e),
                }),
            }
        };
    let mut part = first;
    let mut at = 0u64;
    let outcome = loop {
        if part.is_empty() {
            break Ok(());
        }
        let len = part.len() as u64;
        pending.push_back((at, runtime.spawn(upload.put_part(PutPayload::from(part)))));
        at += len;
        if pending.len() >= in_flight
            && let Err(e) = wait(pending.pop_front().expect("not empty"))
        {
            break Err(e);
        }
        if len < part_size as u64 {
            break Ok(());
        }
        part = match read_part(reader, part_size) {
            Ok(part) => part,
            Err(e) => break Err(source_err(at)(e)),
        };
    };
    // Let every part in flight finish (or fail) before completing or aborting.
    let mut outcome = outcome;
    while let Some(next) = pending.pop_front() {
        let done = wait(next);
        if outcome.is_ok() {
            outcome = done;
        }
    }
    outcome
}
