//! `tzr`: inspect, verify, encrypt, decrypt, convert and copy tensorizer files
//! (and inspect, verify and convert torch.save checkpoints); fingerprint and
//! diff the weights in any of the three formats.
//!
//! The command line is a library so that one build serves two entry
//! points: the `tzr` binary (`src/main.rs`) and the Python wheel's `tzr`
//! script and `python -m tensorizer_rs`, which call [`run`] through the
//! extension module. Both take the same arguments and exit the same way.

/// `println!` that fails the command, instead of panicking, when standard
/// output cannot be written (a full disk, a closed pipe): a report that did
/// not reach its reader is not a success.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err(crate::Failure::Output)?
    }};
}

mod checkpoint;
mod copy;
mod crypt;
mod fingerprint;
mod gguf;
mod inspect;
mod keys;
mod progress;
mod safetensors;
mod scan;
mod text;
mod view;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use tensorizer_native::Error;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  verification failed: a hash did not match, or decryption failed (wrong key or tampered data)
  2  usage error (bad arguments)
  3  the input is not a valid tensorizer/safetensors file or torch.save checkpoint (legacy and
     compressed checkpoints included), or reading or writing failed
`tzr diff` instead exits as diff(1) does: 0 same weights, 1 different, 2 any error;
`tzr scan` as the validator does: 0 no findings, 1 findings, 2 could not scan";

/// `tzr --help`'s description.
const LONG_ABOUT: &str = "\
Inspect, verify, convert, encrypt, fingerprint, diff and scan model weight files.

Files are tensorizer (.tensors), safetensors or torch.save checkpoints, told apart by their first \
bytes. Wherever a command reads a FILE, it may also be an http(s)://, s3://, gs://, az://, redis:// \
or redis+cluster:// URI.";

#[derive(Parser)]
#[command(
    name = "tzr",
    version,
    about = "Inspect, verify, convert, encrypt, fingerprint, diff and scan model weight files",
    long_about = LONG_ABOUT,
    after_help = EXIT_CODES
)]
struct Cli {
    /// Print no summary line on success.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a file's header and tensors (reads only the header and index)
    ///
    /// A tensorizer file shows its data version, flags and every tensor's
    /// dtype, shape, size and offsets; a safetensors file its header; a
    /// torch.save checkpoint its entries, dtypes, shapes, strides, storages
    /// and offsets; a GGUF file its metadata and tensor infos (ggml type,
    /// dimensions innermost first, size). Encrypted tensorizer files are
    /// inspected without a key. A model stored as shards (a folder, an
    /// `*.index.json`) lists its shards (format, tensors, bytes) and its
    /// totals, the shards checked against the index.
    Inspect {
        /// The file (a path or URI), or a model's folder or index.
        file: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check every tensor against its stored hashes
    ///
    /// A tensorizer file's CRC32 and SHA-256 hashes are checked (encrypted
    /// tensors are decrypted first, which checks their MACs); a torch.save
    /// checkpoint's zip entries against their CRC-32. safetensors files
    /// store no hashes: their header and offsets are checked, and the
    /// report says so.
    Verify {
        /// The file (a path or URI).
        file: PathBuf,
        #[command(flatten)]
        key: keys::KeyArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Concurrent readers (default: one per core).
        #[arg(long)]
        num_readers: Option<usize>,
    },
    /// Write an encrypted copy of a tensorizer file
    ///
    /// The copy is written to a temporary file and renamed into place, so
    /// OUTPUT is either the old file or the complete new one.
    Encrypt {
        /// The plain .tensors file.
        input: PathBuf,
        /// Where to write the encrypted file.
        output: PathBuf,
        #[command(flatten)]
        key: keys::KeyArgs,
        /// Create a new random key, write it (hex) to this file, and use it.
        #[arg(long, conflicts_with_all = ["key_file", "passphrase", "passphrase_env"])]
        generate_key: Option<PathBuf>,
        /// Argon2id cost for a passphrase: interactive, moderate or sensitive.
        #[arg(long, default_value = "moderate")]
        kdf: keys::KdfPreset,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// Write a decrypted copy of a tensorizer file
    ///
    /// Written atomically, as `encrypt` writes.
    Decrypt {
        /// The encrypted .tensors file.
        input: PathBuf,
        /// Where to write the plain file.
        output: PathBuf,
        #[command(flatten)]
        key: keys::KeyArgs,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// Copy a tensorizer file between a path and a store, byte for byte
    ///
    /// Either side may be a local path, http(s):// (reading), s3://, gs://,
    /// az://, redis:// or redis+cluster://. The input's header and index
    /// are checked before anything is written. s3:// is configured from
    /// ~/.s3cfg and the S3_* / AWS_* variables.
    Copy {
        /// Where to read: a path or a URI.
        input: String,
        /// Where to write: a path or a URI.
        output: String,
        /// Replace an existing local file or Redis prefix.
        #[arg(long)]
        force: bool,
    },
    /// Convert between tensorizer and safetensors, or a torch.save checkpoint to either
    ///
    /// INPUT is recognised by its first bytes. OUTPUT's extension names the
    /// format written: .tensors or .safetensors (`--to` may name it for
    /// other names, and must agree with the extension). torch.save
    /// checkpoints can be read, not written. tensorizer to tensorizer
    /// rewrites the layout (`--tensorizer-layout` for tensorizer's own).
    /// Non-tensor entries of a checkpoint are skipped with a note. A model
    /// stored as shards (a folder, an `*.index.json`) becomes one file, its
    /// shards checked against the index first. Written atomically, hashing
    /// on every core.
    Convert {
        /// The file to read (a path or URI), or a model's folder or index.
        input: PathBuf,
        /// The file to write: NAME.tensors or NAME.safetensors.
        output: PathBuf,
        /// Key for an encrypted tensorizer input.
        #[command(flatten)]
        key: keys::KeyArgs,
        #[command(flatten)]
        layout: LayoutArgs,
        /// The output format, for an OUTPUT whose extension names none.
        #[arg(long, value_enum)]
        to: Option<checkpoint::Target>,
        /// Most bytes of tensor data to write; more is refused before
        /// writing (default: 4 × INPUT's size, at least 1 GiB: expanded
        /// checkpoint views are written out whole).
        #[arg(long, value_name = "BYTES")]
        max_output_bytes: Option<u64>,
    },
    /// Print a digest of the weights, the same in every format
    ///
    /// One SHA-256 over every tensor's name, dtype, shape and data: the
    /// same weights give the same digest whether they are stored as
    /// tensorizer, safetensors or torch.save, in one file or as shards.
    /// Prints `HEX  FILE`.
    Fingerprint {
        /// The files (paths or URIs), models stored as shards (an
        /// `*.index.json`, or a folder holding one or `*.safetensors` files:
        /// one model, its shards checked against the index) and other
        /// directories (walked recursively; their files are chosen by
        /// content). With more than one file,
        /// `--json` prints `{"files": [...], "ok": ...}` and the exit
        /// status is the worst of any file.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Key for an encrypted tensorizer file.
        #[command(flatten)]
        key: keys::KeyArgs,
        /// Print JSON, with every tensor's record, instead of the digest.
        #[arg(long)]
        json: bool,
        /// Threads hashing tensors (default: one per core).
        #[arg(long)]
        num_readers: Option<usize>,
    },
    /// List the tensors added, removed, renamed or changed between two files
    ///
    /// The files may be of any of the three formats; tensors are compared
    /// by name, dtype, shape and a hash of their data. Exits 0 when the
    /// weights are the same, 1 when they differ, 2 on any error.
    Diff {
        /// The first file (a path or URI), or a model's folder or index.
        a: PathBuf,
        /// The second file (a path or URI), or a model's folder or index.
        b: PathBuf,
        /// Key for encrypted tensorizer files (used for both).
        #[command(flatten)]
        key: keys::KeyArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Threads hashing tensors (default: one per core).
        #[arg(long)]
        num_readers: Option<usize>,
    },
    /// Scan files and directories for code they would run when loaded, and for lies in their structure
    ///
    /// Reads tensorizer, safetensors, torch.save (zip or legacy) and bare
    /// pickles, told apart by their bytes, without executing anything, and
    /// lists every finding with its rule id, offset and remediation.
    /// Directories are scanned recursively, a store prefix (s3://, gs://,
    /// az://, ending in /) one level. Exits with the worst status of
    /// any file: 0 no findings at or above --fail-on, 1 such findings, 2
    /// could not scan.
    Scan {
        /// Files (paths or URIs), directories and store prefixes.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The least severity that fails the scan (exit 1): `error` (code
        /// execution, a computed global, a structure that lies), `warning`
        /// or `note` (any finding).
        #[arg(long, value_enum, default_value = "error")]
        fail_on: scan::FailOn,
        /// Leave out named files of no format the scanner knows, as files
        /// found in a directory are (for hooks that pass every file).
        #[arg(long)]
        models_only: bool,
        /// Print JSON instead of text.
        #[arg(long, conflicts_with = "sarif")]
        json: bool,
        /// Print SARIF 2.1.0 instead of text.
        #[arg(long)]
        sarif: bool,
        /// The suppression file (default: `.tzrscan.toml` in the current
        /// directory, when there is one): `[[ignore]]` entries of `rule`,
        /// `path` glob and `reason`; what they cover is reported as
        /// suppressed and fails nothing.
        #[arg(long, value_name = "FILE")]
        ignore: Option<PathBuf>,
    },
    /// Open a file (or none) in the browser inspector served on 127.0.0.1
    View(view::ViewArgs),
}

#[derive(Args, Clone, Copy)]
struct LayoutArgs {
    /// Write exactly tensorizer's layout (no data alignment, 256 KiB index).
    #[arg(long)]
    tensorizer_layout: bool,
}

impl LayoutArgs {
    fn options(self) -> tensorizer_core::WriterOptions {
        if self.tensorizer_layout {
            tensorizer_core::WriterOptions::tensorizer()
        } else {
            tensorizer_core::WriterOptions::default()
        }
    }
}

/// Why the command failed, mapped to an exit code.
enum Failure {
    /// Checks ran and something did not verify (exit 1).
    Verification,
    /// An error to print (exit 1 for verification errors, 3 otherwise).
    Error(Error),
    /// Bad arguments discovered after parsing (exit 2).
    Usage(String),
    /// Standard output could not be written (exit 3, 2 for `diff`; a closed
    /// pipe exits 141 without a message, as a process killed by SIGPIPE
    /// would).
    Output(std::io::Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Self::Error(e)
    }
}

type Outcome = Result<(), Failure>;

/// Runs the command line `args` (the program name first, as in
/// `std::env::args_os`) and returns the process's exit code. Usage errors,
/// `--help` and `--version` are printed here and return their codes
/// rather than exiting, so a host process (Python) stays in charge.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Printing can only fail on a closed stream, and then there
            // is no one left to tell.
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    let json = cli.command.json();
    let outcome = match cli.command {
        Command::Scan { files, json, sarif, fail_on, models_only, ignore } => {
            let output = match (json, sarif) {
                (true, _) => scan::Output::Json,
                (_, true) => scan::Output::Sarif,
                _ => scan::Output::Text,
            };
            let suppressions = match tensorizer_core::walk::Suppressions::load(ignore.as_deref()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("tzr: suppression file {e}");
                    return 2;
                }
            };
            return scan::run(&files, output, fail_on, models_only, suppressions.as_ref());
        }
        Command::Diff { a, b, key, json, num_readers } => {
            return match fingerprint::diff_files(&a, &b, &key, json, num_readers) {
                Ok(same) => u8::from(!same),
                Err(Failure::Output(e)) => output_failed(&e, 2),
                Err(failure) => report_failure(&failure, json, 2),
            };
        }
        Command::Fingerprint { files, key, json, num_readers } => {
            let listed = match fingerprint::list(&files) {
                Ok(l) => l,
                Err(e) => {
                    let failure = Failure::Usage(format!("cannot list the files: {e}"));
                    return report_failure(&failure, json, 2);
                }
            };
            if tensorizer_core::walk::is_many(&files, &listed) {
                return fingerprint::run_many(&listed, &key, json, num_readers);
            }
            fingerprint::run(Path::new(&listed[0].name), &key, json, num_readers)
        }
        Command::Inspect { file, json } => inspect::run(&file, json),
        Command::Verify { file, key, json, num_readers } => {
            crypt::verify(&file, &key, json, num_readers)
        }
        Command::Encrypt { input, output, key, generate_key, kdf, layout } => {
            let writing =
                crypt::Writing { output: &output, layout: layout.options(), quiet: cli.quiet };
            crypt::encrypt(&input, &writing, &key, generate_key.as_deref(), kdf)
        }
        Command::Decrypt { input, output, key, layout } => {
            let writing =
                crypt::Writing { output: &output, layout: layout.options(), quiet: cli.quiet };
            crypt::decrypt(&input, &writing, &key)
        }
        Command::Convert { input, output, key, layout, to, max_output_bytes } => {
            let writing =
                crypt::Writing { output: &output, layout: layout.options(), quiet: cli.quiet };
            crypt::convert(&input, &writing, &key, to, max_output_bytes)
        }
        Command::Copy { input, output, force } => copy::run(&input, &output, force, cli.quiet),
        Command::View(args) => view::run(&args),
    };
    match outcome {
        Ok(()) => 0,
        Err(Failure::Output(e)) => output_failed(&e, 3),
        Err(failure) => report_failure(&failure, json, failure.exit_code()),
    }
}

impl Command {
    /// Whether the command was asked for JSON: then every outcome, a
    /// failure included, is one JSON object on standard output.
    fn json(&self) -> bool {
        match self {
            Self::Inspect { json, .. }
            | Self::Verify { json, .. }
            | Self::Fingerprint { json, .. }
            | Self::Diff { json, .. }
            | Self::Scan { json, .. } => *json,
            _ => false,
        }
    }
}

impl Failure {
    /// The exit code (see [`EXIT_CODES`]).
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Verification => 1,
            Self::Usage(_) => 2,
            Self::Error(e) if e.is_verification_failure() => 1,
            Self::Error(_) | Self::Output(_) => 3,
        }
    }

    /// The message to print, if the failure has not been reported yet (a
    /// failed verification has printed its own report).
    pub(crate) fn message(&self) -> Option<String> {
        match self {
            Self::Verification => None,
            Self::Usage(m) => Some(m.clone()),
            Self::Error(e) => Some(e.to_string()),
            Self::Output(e) => Some(format!("could not write the output: {e}")),
        }
    }
}

/// Prints a failure on stderr and, under `--json`, as `{"ok": false,
/// "error": ..., "exit_code": ...}` on stdout (best effort: a report that
/// cannot be written changes nothing about the exit code); returns
/// `exit_code`.
fn report_failure(failure: &Failure, json: bool, exit_code: u8) -> u8 {
    let Some(message) = failure.message() else { return exit_code };
    eprintln!("tzr: {}", text::printable(&message));
    if json {
        use std::io::Write as _;
        let doc = serde_json::json!({"ok": false, "error": message, "exit_code": exit_code});
        let _ = writeln!(std::io::stdout().lock(), "{doc}");
    }
    exit_code
}

/// Reports a failed write of standard output and gives the exit code:
/// `code`, or 141 without a message for a closed pipe.
pub(crate) fn output_failed(e: &std::io::Error, code: u8) -> u8 {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return 141;
    }
    eprintln!("tzr: could not write the output: {e}");
    code
}
