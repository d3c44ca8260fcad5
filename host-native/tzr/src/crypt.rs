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

pub(crate) fn verify(file: &Path, key: &KeyArgs, json: bool, num_readers: Option<usize>) -> Outcome {
    let source = tensorizer_native::open_uri(&file.to_string_lossy(), tensorizer_native::Intent::ReadAll)?;
    if crate::checkpoint::is_checkpoint(&source)? {
        return crate::checkpoint::verify(file, source, json);
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
        for r in &failures {
            if let Some(e) = &r.error {
                eprintln!("tzr: {e}");
            }
        }
        for r in &unchecked {
            eprintln!("tzr: tensor {:?} has no hashes: read, but not verified", r.name);
        }
        if failures.is_empty() {
            let what = if unchecked.is_empty() {
                format!("all {verified} tensors verified")
            } else {
                format!("{verified} of {} tensors verified, {} with no hashes", results.len(), unchecked.len())
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

/// Streams every tensor of `reader` into a new file at `output`, hashing
/// (and encrypting) on several threads.
fn rewrite(reader: &AnyReader, output: &Path, options: WriteOptions, message: &str) -> Outcome {
    let bar = progress::bytes(total_bytes(reader), message);
    convert::write(convert::Input::Tensorizer(reader), output, Format::Tensorizer, &options, |done, _| {
        bar.set_position(done);
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(())
}

pub(crate) fn encrypt(
    input: &Path,
    output: &Path,
    key: &KeyArgs,
    generate: Option<&Path>,
    kdf: KdfPreset,
    layout: WriterOptions,
) -> Outcome {
    let reader = open(input, &KeyArgs::default(), None)?;
    if reader.is_encrypted() {
        return Err(Failure::Usage(format!("{}: already encrypted; decrypt it first", input.display())));
    }
    let (key, params) = match (generate, key.given()) {
        (Some(path), _) => (generate_key_file(path)?, None),
        (None, true) => key.for_writing(kdf)?.ok_or_else(|| Failure::Usage("no key given".into()))?,
        (None, false) => {
            return Err(Failure::Usage(
                "give --key-file, --passphrase-env VAR, --passphrase or --generate-key FILE".into(),
            ));
        }
    };
    let options =
        WriteOptions { layout: WriterOptions { encryption: Some(params), ..layout }, key: Some(key), num_writers: 0 };
    rewrite(&reader, output, options, "encrypting")
}

pub(crate) fn decrypt(input: &Path, output: &Path, key: &KeyArgs, layout: WriterOptions) -> Outcome {
    if !key.given() {
        return Err(Failure::Usage("give --key-file, --passphrase-env VAR or --passphrase".into()));
    }
    let reader = open(input, key, None)?;
    rewrite(&reader, output, WriteOptions { layout, key: None, num_writers: 0 }, "decrypting")
}

/// `tzr convert`: any input the library recognises by its first bytes
/// (torch checkpoint, tensorizer, safetensors). Tensorizer and safetensors
/// inputs convert to the other format only, as OUTPUT's extension says
/// (`--to` must agree); a torch checkpoint goes to either (`--to`, else the
/// extension).
pub(crate) fn convert(
    input: &Path,
    output: &Path,
    key: &KeyArgs,
    layout: WriterOptions,
    to: Option<Target>,
    max_output_bytes: Option<u64>,
) -> Outcome {
    let source = tensorizer_native::open_uri(&input.to_string_lossy(), tensorizer_native::Intent::Peek)?;
    let from = convert::sniff(&source)?;
    let implied = Format::for_output(output);
    let to = match to {
        Some(Target::Tensorizer) => Format::Tensorizer,
        Some(Target::Safetensors) => Format::Safetensors,
        None => implied,
    };
    if from != Format::TorchCheckpoint {
        if to != implied {
            return Err(Failure::Usage(
                "--to must agree with OUTPUT's extension unless INPUT is a torch.save checkpoint".into(),
            ));
        }
        if from == to {
            return Err(Failure::Usage(
                "exactly one of INPUT and OUTPUT must end in .safetensors (tensorizer <-> safetensors)".into(),
            ));
        }
    }
    let options = ConvertOptions {
        to: Some(to),
        write: WriteOptions { layout, key: None, num_writers: 0 },
        key: key.for_reading()?,
        max_output_bytes,
    };
    let bar = progress::bytes(0, "converting");
    let done = convert::convert_source(source, output, &options, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
        Ok(())
    });
    bar.finish_and_clear();
    let done = done?;
    if done.flattened {
        eprintln!("tzr: note: nested keys mix strings and ints at one level; tensors are named with flat dotted paths");
    }
    for name in &done.skipped {
        eprintln!("tzr: note: skipped {:?}: not a tensor", crate::text::printable(name));
    }
    Ok(())
}
