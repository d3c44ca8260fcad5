//! `tzr copy`: move a tensorizer file between a local path, `http(s)://`,
//! `s3://`, `gs://`, `az://` and `redis://`, byte for byte.

use std::path::Path;
use std::time::Instant;

use tensorizer_native::error::StoreErrorKind;
use tensorizer_native::{Intent, Location, ReadOptions, Reader, StoreOptions, open_sink};

use crate::text::{human, printable};
use crate::{Failure, Outcome, progress};

pub(crate) fn run(input: &str, output: &str, force: bool, quiet: bool) -> Outcome {
    let started = Instant::now();
    let from = Location::parse(input)?;
    let to = Location::parse(output)?;
    let mut options = StoreOptions::from_env(Intent::ReadAll)?;
    options.overwrite = force;
    // Refuse a destination this build cannot write, or one that is taken,
    // before a byte is read.
    let sink = open_sink(&to, &options).map_err(|e| match e.store_kind() {
        Some(StoreErrorKind::AlreadyExists) => {
            Failure::Usage(format!("{output} exists; pass --force to replace it"))
        }
        _ => Failure::Error(e),
    })?;
    // Parsing the header and index first refuses anything that is not a
    // tensorizer file before a byte is written.
    let reader =
        Reader::new(tensorizer_native::open_source(&from, &options)?, ReadOptions::default())?;
    if let Location::Local(path) = &from
        && !to.is_local()
        && !matches!(to, Location::Redis(_) | Location::RedisCluster(_))
    {
        // Object stores upload the local file as it is.
        sink.put_file(Path::new(path))?;
    } else {
        let bar = progress::bytes(reader.source().len(), "copying");
        let put = sink.put_reader(&reader, &mut |done| bar.set_position(done));
        bar.finish_and_clear();
        put?;
    }
    if !quiet {
        let tensors = reader.entries().len();
        eprintln!(
            "tzr: copied {} to {}: {tensors} tensor{}, {} in {:.2} s",
            printable(input),
            printable(output),
            if tensors == 1 { "" } else { "s" },
            human(reader.source().len()),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
