//! `tzr verify`, `encrypt`, `decrypt` and `convert`.

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use tensorizer_core::WriterOptions;
use tensorizer_native::convert::{self, ConvertOptions, Format};
use tensorizer_native::read::verify::verify_all;
use tensorizer_native::{Error, ReadOptions, Reader, WriteOptions, default_readers};

use crate::checkpoint::Target;
use crate::keys::{KdfPreset, KeyArgs, generate_key_file};
use crate::{Failure, Outcome, progress};

type AnyReader = Reader<Box<dyn tensorizer_native::RangeSource>>;

fn open(file: &Path, key: &KeyArgs, num_readers: Option<usize>) -> Result<AnyReader, Failure> {
    open_with(
        tensorizer_native::open_uri(&file.to_string_lossy(), tensorizer_native::Intent::ReadAll)?,
        key,
        num_readers,
    )
}

fn open_with(
    source: Box<dyn tensorizer_native::RangeSource>,
    key: &KeyArgs,
    num_readers: Option<usize>,
) -> Result<AnyReader, Failure> {
    let options = ReadOptions {
        num_readers: num_readers.unwrap_or_else(default_readers).max(1),
        verify_hash: true,
        key: key.for_reading()?,
    };
    Ok(Reader::new(source, options)?)
}

fn total_bytes(reader: &AnyReader) -> u64 {
    reader.entries().iter().map(|e| e.data_length).sum()
}

pub(crate) fn verify(
    file: &Path,
    key: &KeyArgs,
    json: bool,
    num_readers: Option<usize>,
) -> Outcome {
    let source =
        tensorizer_native::open_uri(&file.to_string_lossy(), tensorizer_native::Intent::ReadAll)?;
    if crate::checkpoint::is_checkpoint(&source)? {
        return crate::checkpoint::verify(file, source, json);
    }
    if crate::safetensors::is_safetensors(&source)? {
        return crate::safetensors::verify(file, source, json);
    }
    let reader = open_with(source, key, num_readers)?;
    if reader.is_encrypted() && !key.given() {
        return Err(Failure::Usage(format!(
            "{}: the file is encrypted; give --key-file, --passphrase-env VAR or --passphrase",
            file.display()
        )));
    }
    let bar = progress::bytes(total_bytes(&reader), "verifying");
    let started = Instant::now();
    let results = verify_all(&reader, |done| bar.set_position(done))?;
    bar.finish_and_clear();
    let failures: Vec<_> = results.iter().filter(|r| r.error.is_some()).collect();
    let unchecked: Vec<_> = results.iter().filter(|r| !r.checked).collect();
    let verified = results.len() - failures.len() - unchecked.len();
    if json {
        let report = json!({
            "file": file.display().to_string(),
            "ok": failures.is_empty(),
            "tensors": results.len(),
            "verified": verified,
            "no_hashes": unchecked.iter().map(|r| &r.name).collect::<Vec<_>>(),
            "data_bytes": total_bytes(&reader),
            "seconds": started.elapsed().as_secs_f64(),
            "failures": failures.iter().map(|r| json!({
                "index": r.index,
                "tensor": r.name,
                "error": r.error.as_ref().map(ToString::to_string),
            })).collect::<Vec<_>>(),
        });
        out!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        let shown = crate::text::printable(&file.display().to_string());
        // A wrong key is one error from verify_all, not a failure per tensor.
        for e in failures.iter().filter_map(|r| r.error.as_ref()) {
            eprintln!("tzr: {}", crate::text::printable(&e.to_string()));
        }
        for r in &unchecked {
            eprintln!("tzr: tensor {:?} has no hashes: read, but not verified", r.name);
        }
        if !failures.is_empty() {
            eprintln!(
                "tzr: {shown}: {verified} of {} tensors verified, {} failed",
                results.len(),
                failures.len()
            );
        }
        if failures.is_empty() {
            let what = if unchecked.is_empty() {
                format!("all {verified} tensors verified")
            } else {
                format!(
                    "{verified} of {} tensors verified, {} with no hashes",
                    results.len(),
                    unchecked.len()
                )
            };
            out!(
                "{}: {what} ({} in {:.2} s)",
                crate::text::printable(&file.display().to_string()),
                crate::text::human(total_bytes(&reader)),
                started.elapsed().as_secs_f64()
            );
        }
    }
    match failures.first().and_then(|r| r.error.as_ref()) {
        None => Ok(()),
        Some(e) if e.is_verification_failure() => Err(Failure::Verification),
        Some(_) => Err(Failure::Error(Error::Invalid(format!(
            "{}: {} tensors are unreadable",
            file.display(),
            failures.len()
        )))),
    }
}

/// Where and how a command writes its one output file.
pub(crate) struct Writing<'a> {
    /// The file to write (atomically).
    pub(crate) output: &'a Path,
    /// A tensorizer output's layout.
    pub(crate) layout: WriterOptions,
    /// `--quiet`: no summary line.
    pub(crate) quiet: bool,
}

impl Writing<'_> {
    /// The summary line on stderr (unless `--quiet`): `verb OUTPUT: N
    /// tensors, SIZE in S s`.
    fn done(&self, verb: &str, converted: &convert::Converted, started: Instant) {
        if !self.quiet {
            let plural = if converted.tensors == 1 { "" } else { "s" };
            eprintln!(
                "tzr: {verb} {} ({}): {} tensor{plural}, {} in {:.2} s",
                crate::text::printable(&self.output.display().to_string()),
                converted.to.name(),
                converted.tensors,
                crate::text::human(converted.bytes),
                started.elapsed().as_secs_f64()
            );
        }
    }
}

/// Streams every tensor of `reader` into a new tensorizer file, hashing
/// (and encrypting) on several threads. An OUTPUT whose extension names
/// another format is refused first.
fn rewrite(
    reader: &AnyReader,
    writing: &Writing<'_>,
    options: WriteOptions,
    verb: &str,
) -> Outcome {
    let to = Format::for_output(writing.output, Some(Format::Tensorizer))
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let started = Instant::now();
    let bar = progress::bytes(total_bytes(reader), verb);
    let converted = convert::write(
        convert::Input::Tensorizer(reader),
        writing.output,
        to,
        &options,
        |done, _| {
            bar.set_position(done);
            Ok(())
        },
    );
    bar.finish_and_clear();
    writing.done(verb, &converted?, started);
    Ok(())
}

pub(crate) fn encrypt(
    input: &Path,
    writing: &Writing<'_>,
    key: &KeyArgs,
    generate: Option<&Path>,
    kdf: KdfPreset,
) -> Outcome {
    let reader = open(input, &KeyArgs::default(), None)?;
    if reader.is_encrypted() {
        return Err(Failure::Usage(format!(
            "{}: already encrypted; decrypt it first",
            input.display()
        )));
    }
    let (key, params) = match (generate, key.given()) {
        (Some(path), _) => (generate_key_file(path)?, None),
        (None, true) => {
            key.for_writing(kdf)?.ok_or_else(|| Failure::Usage("no key given".into()))?
        }
        (None, false) => {
            return Err(Failure::Usage(
                "give --key-file, --passphrase-env VAR, --passphrase or --generate-key FILE".into(),
            ));
        }
    };
    let layout = WriterOptions { encryption: Some(params), ..writing.layout.clone() };
    rewrite(&reader, writing, WriteOptions { layout, key: Some(key), num_writers: 0 }, "encrypted")
}

pub(crate) fn decrypt(input: &Path, writing: &Writing<'_>, key: &KeyArgs) -> Outcome {
    if !key.given() {
        return Err(Failure::Usage("give --key-file, --passphrase-env VAR or --passphrase".into()));
    }
    let reader = open(input, key, None)?;
    rewrite(
        &reader,
        writing,
        WriteOptions { layout: writing.layout.clone(), key: None, num_writers: 0 },
        "decrypted",
    )
}

/// `tzr convert`: any input the library recognises by its first bytes
/// (torch checkpoint, tensorizer, safetensors) into the format OUTPUT's
/// extension names (or `--to`, which must agree with it), as
/// [`Format::for_output`] rules for every front end. Tensorizer to
/// tensorizer re-lays the file out (`--tensorizer-layout`, or ours).
pub(crate) fn convert(
    input: &Path,
    writing: &Writing<'_>,
    key: &KeyArgs,
    to: Option<Target>,
    max_output_bytes: Option<u64>,
) -> Outcome {
    let output = writing.output;
    let to = to.map(|t| match t {
        Target::Tensorizer => Format::Tensorizer,
        Target::Safetensors => Format::Safetensors,
    });
    // Refused before anything is read: the name decides the format.
    let to = Format::for_output(output, to).map_err(|e| Failure::Usage(e.to_string()))?;
    let started = Instant::now();
    let options = ConvertOptions {
        to: Some(to),
        write: WriteOptions { layout: writing.layout.clone(), key: None, num_writers: 0 },
        key: key.for_reading()?,
        max_output_bytes,
    };
    let bar = progress::bytes(0, "converting");
    // A folder or index (a model stored as shards) becomes one file.
    let done = convert::convert(&input.to_string_lossy(), output, &options, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
        Ok(())
    });
    bar.finish_and_clear();
    let done = done?;
    if done.flattened {
        eprintln!(
            "tzr: note: nested keys mix strings and ints at one level; tensors are named with flat dotted paths"
        );
    }
    for name in &done.skipped {
        eprintln!("tzr: note: skipped {:?}: not a tensor", crate::text::printable(name));
    }
    writing.done("wrote", &done, started);
    Ok(())
}
