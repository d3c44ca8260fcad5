//! `tzr`: inspect, verify, encrypt, decrypt, convert and copy tensorizer files
//! (and inspect, verify and convert torch.save checkpoints); fingerprint and
//! diff the weights in any of the three formats.

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
mod inspect;
mod keys;
mod progress;
mod scan;
mod text;
mod view;

use std::path::PathBuf;
use std::process::ExitCode;

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

#[derive(Parser)]
#[command(name = "tzr", version, about = "Inspect, verify, encrypt, decrypt, convert, fingerprint and diff tensorizer (.tensors) files", after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the file header and a table of tensors (reads only the header and index).
    /// torch.save checkpoints (recognised by their first bytes) show their
    /// entries, dtypes, shapes, strides, storages and offsets.
    Inspect {
        /// The .tensors file or torch.save checkpoint (a path or URI).
        file: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check every tensor's stored hashes (decrypting first when encrypted);
    /// for a torch.save checkpoint, every zip entry's CRC-32.
    Verify {
        /// The .tensors file or torch.save checkpoint.
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
    /// Write an encrypted copy of a file (atomically).
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
    /// Write a decrypted copy of a file (atomically).
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
    /// Copy a file between a local path, http(s)://, s3://, redis:// and redis+cluster://
    /// (byte for byte; the input's header and index are checked first).
    /// s3:// is configured from ~/.s3cfg and the S3_* / AWS_* variables.
    Copy {
        /// Where to read: a path or a URI.
        input: String,
        /// Where to write: a path, s3://bucket/key or redis://host:port/prefix (or redis+cluster://).
        output: String,
        /// Replace an existing local file or Redis prefix.
        #[arg(long)]
        force: bool,
    },
    /// Convert between tensorizer and safetensors, or a torch.save checkpoint
    /// to either (atomically, hashing on every core). INPUT is recognised by
    /// its first bytes; OUTPUT is safetensors when it ends in `.safetensors`,
    /// else tensorizer. A checkpoint (`.pt`, `.pth`, `.bin`) may go to either
    /// (`--to` overrides the extension); non-tensor entries are skipped with
    /// a note.
    Convert {
        /// The file to read: a path or an http(s)://, s3://, redis:// or redis+cluster:// URI.
        input: PathBuf,
        /// The file to write.
        output: PathBuf,
        /// Key for an encrypted tensorizer input.
        #[command(flatten)]
        key: keys::KeyArgs,
        #[command(flatten)]
        layout: LayoutArgs,
        /// The output format (default: from OUTPUT's extension).
        #[arg(long, value_enum)]
        to: Option<checkpoint::Target>,
        /// Most bytes of tensor data to write; more is refused before
        /// writing (default: 4 × INPUT's size, at least 1 GiB: expanded
        /// checkpoint views are written out whole).
        #[arg(long, value_name = "BYTES")]
        max_output_bytes: Option<u64>,
    },
    /// Print a fingerprint of the weights (spec §21): one SHA-256 over every
    /// tensor's name, dtype, shape and data, the same for the same weights
    /// in a tensorizer, safetensors or torch.save file. Prints `HEX  FILE`.
    Fingerprint {
        /// The file: a path or an http(s)://, s3://, redis:// or redis+cluster:// URI.
        file: PathBuf,
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
    /// List the tensors added, removed, renamed or changed (dtype, shape or
    /// data) between two files of any of the three formats, by their
    /// fingerprints. Exits 0 when the weights are the same, 1 when they
    /// differ, 2 on any error.
    Diff {
        /// The first file (a path or URI).
        a: PathBuf,
        /// The second file (a path or URI).
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
    /// Scan model files and directories (tensorizer, safetensors, torch.save
    /// zip, legacy or bare pickle; told by their bytes) without executing
    /// anything, and list every finding with its rule id, offset and
    /// remediation (spec §22). Exits with the worst status of any file: 0
    /// no findings at or above --fail-on, 1 such findings, 2 could not scan.
    Scan {
        /// Files (paths or http(s)://, s3:// or redis:// URIs) and
        /// directories (scanned recursively; files told by their bytes).
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
    },
    /// Serve the browser inspector and FILE (or open a URL) on 127.0.0.1 and print the address.
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Scan { files, json, sarif, fail_on, models_only } => {
            let output = match (json, sarif) {
                (true, _) => scan::Output::Json,
                (_, true) => scan::Output::Sarif,
                _ => scan::Output::Text,
            };
            return scan::run(&files, output, fail_on, models_only);
        }
        Command::Diff { a, b, key, json, num_readers } => {
            return match fingerprint::diff_files(&a, &b, &key, json, num_readers) {
                Ok(same) => ExitCode::from(if same { 0 } else { 1 }),
                Err(failure) => {
                    match failure {
                        Failure::Usage(msg) => eprintln!("tzr: {msg}"),
                        Failure::Error(e) => eprintln!("tzr: {e}"),
                        Failure::Output(e) => return output_failed(&e, 2),
                        Failure::Verification => {}
                    }
                    ExitCode::from(2)
                }
            };
        }
        Command::Fingerprint { file, key, json, num_readers } => fingerprint::run(&file, &key, json, num_readers),
        Command::Inspect { file, json } => inspect::run(&file, json),
        Command::Verify { file, key, json, num_readers } => crypt::verify(&file, &key, json, num_readers),
        Command::Encrypt { input, output, key, generate_key, kdf, layout } => {
            crypt::encrypt(&input, &output, &key, generate_key.as_deref(), kdf, layout.options())
        }
        Command::Decrypt { input, output, key, layout } => crypt::decrypt(&input, &output, &key, layout.options()),
        Command::Convert { input, output, key, layout, to, max_output_bytes } => {
            crypt::convert(&input, &output, &key, layout.options(), to, max_output_bytes)
        }
        Command::Copy { input, output, force } => copy::run(&input, &output, force),
        Command::View(args) => view::run(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Verification) => ExitCode::from(1),
        Err(Failure::Usage(msg)) => {
            eprintln!("tzr: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Error(e)) => {
            eprintln!("tzr: {e}");
            ExitCode::from(if e.is_verification_failure() { 1 } else { 3 })
        }
        Err(Failure::Output(e)) => output_failed(&e, 3),
    }
}

/// Reports a failed write of standard output and gives the exit code:
/// `code`, or 141 without a message for a closed pipe.
fn output_failed(e: &std::io::Error, code: u8) -> ExitCode {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return ExitCode::from(141);
    }
    eprintln!("tzr: could not write the output: {e}");
    ExitCode::from(code)
}
