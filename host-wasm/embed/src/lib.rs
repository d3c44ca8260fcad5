//! Runs the `tensorizer-validate` WASI module (wasm32-wasip1) inside a Rust
//! program with wasmtime, so that an untrusted model file (tensorizer,
//! safetensors, torch.save zip or pickle) is scanned in a sandbox whose fuel, wall-clock time, linear memory and captured output are
//! all bounded by the host.
//!
//! ```no_run
//! use std::path::Path;
//! use tensorizer_validate_host::{Kind, Limits, Validator};
//!
//! let validator = Validator::from_file("tensorizer-validate.wasm")?; // compile once
//! let outcome = validator.validate(Path::new("/srv/models"), "model.tensors", &Limits::default())?;
//! match outcome.kind {
//!     Kind::Clean => println!("{} tensors", outcome.report_json.unwrap()["tensors"]),
//!     Kind::Findings => println!("{}", outcome.report_json.unwrap()["findings"]),
//!     Kind::CannotScan => eprintln!("{}", outcome.stderr.trim_end()),
//!     limit => eprintln!("stopped: {limit:?}"),
//! }
//! # anyhow::Ok(())
//! ```
//!
//! Each run gets a fresh [`wasmtime::Store`]: a read-only preopen of the
//! file's directory at `/in`, no other files, no environment unless given,
//! empty stdin, and stdout/stderr captured in bounded in-memory pipes.
//!
//! The guest may open only regular files: the file and every `/in/...` path
//! among the options (`--key-file`) are checked before the run, since
//! opening a FIFO blocks inside a host call, where the epoch deadline cannot
//! interrupt. The wall-clock bound covers the whole run (checks,
//! instantiation, and any host call the guest is blocked in): the guest
//! runs on its own thread, and a run still going past the bound ends as
//! [`Kind::Timeout`], its thread left to finish on its own.

mod limiter;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use wasmtime::{Config, Engine, Linker, Module, Store, Trap};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::limiter::Limiter;

/// The guest directory the file's host directory is preopened at.
pub const GUEST_DIR: &str = "/in";

/// How often the epoch thread ticks: the granularity of the wall-clock bound.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Wasm stack the guest may use (wasmtime's default is 512 KiB).
const MAX_WASM_STACK: usize = 1 << 20;

/// How long past the wall-clock bound the host waits for the epoch trap
/// before it stops waiting for the guest (a guest blocked in a host call
/// never sees the epoch).
const WATCHDOG_GRACE: Duration = Duration::from_millis(250);

/// Bounds for one run. [`Limits::default`] suits files with tensorizer's
/// usual 256 KiB index, plain or key-file encrypted (see host-wasm/README.md,
/// "Resources"); raise `fuel_base` and `memory_bytes` for passphrase files
/// with a costly Argon2id setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Fuel for start-up, index parsing and key derivation.
    pub fuel_base: u64,
    /// Fuel added per byte of the file (hashing and decrypting cost about
    /// 90 and 155 units a byte with `--verify`).
    pub fuel_per_byte: u64,
    /// Linear memory the guest may have in all, in bytes. Growth beyond it
    /// fails inside the guest, which reports exit 2 ([`Kind::MemoryLimit`]).
    pub memory_bytes: usize,
    /// Wall-clock bound for the run, enforced with epoch interruption
    /// (to within [`EPOCH_TICK`]).
    pub wall_clock: Duration,
    /// Most bytes of stdout kept; a guest write beyond it fails.
    pub stdout_bytes: usize,
    /// Most bytes of stderr kept; a guest write beyond it fails.
    pub stderr_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel_base: 2_000_000_000,
            fuel_per_byte: 400,
            memory_bytes: 256 << 20,
            wall_clock: Duration::from_secs(60),
            stdout_bytes: 64 << 20,
            stderr_bytes: 64 << 10,
        }
    }
}

impl Limits {
    /// The fuel budget for a file of `file_bytes` (saturating).
    pub fn fuel_for(&self, file_bytes: u64) -> u64 {
        self.fuel_base.saturating_add(self.fuel_per_byte.saturating_mul(file_bytes))
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Exit 0: the file was scanned and nothing was found (with
    /// `--verify`, every tensor passed too).
    Clean,
    /// Exit 1: the file was scanned and has findings (the report lists
    /// them, each with a rule id, offset and remediation).
    Findings,
    /// Exit 2: the file could not be scanned (bad arguments, an unreadable
    /// file or key, a missing passphrase, a report that could not be
    /// written).
    CannotScan,
    /// The fuel budget ran out (trap): the file needs more work than allowed.
    OutOfFuel,
    /// The wall-clock bound passed (epoch deadline trap).
    Timeout,
    /// The guest was refused linear memory beyond [`Limits::memory_bytes`]:
    /// it reported exit 2, trapped, or could not even be instantiated.
    MemoryLimit,
    /// Any other trap or exit status: a bug in the module, not a property of
    /// the file.
    Crashed,
}

/// The result of one run.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// What happened, for a host to act on.
    pub kind: Kind,
    /// The guest's exit status (0 to 2), or `None` when it trapped or was
    /// never started.
    pub exit_code: Option<i32>,
    /// The guest's stdout, parsed, when it is one JSON document (`--json`).
    pub report_json: Option<serde_json::Value>,
    /// The guest's stdout as text (lossy UTF-8).
    pub stdout: String,
    /// The guest's stderr as text: one line when the run failed.
    pub stderr: String,
    /// The trap or instantiation error, when there was one.
    pub trap: Option<String>,
    /// Fuel consumed (0 when the guest was left blocked in a host call).
    pub fuel_used: u64,
    /// Wall-clock time of the run (checks and instantiation included).
    pub elapsed: Duration,
}

/// One file to validate and the validator's options.
#[derive(Clone, Debug)]
pub struct Request {
    /// Host directory to preopen read-only at [`GUEST_DIR`].
    pub dir: PathBuf,
    /// The file's name inside `dir` (a single path component).
    pub file_name: String,
    /// Options before the path, e.g. `["--verify", "--json"]`. A key file
    /// must be named by its guest path (`/in/key`).
    pub args: Vec<String>,
    /// Guest environment (for `--passphrase-env VAR`).
    pub env: Vec<(String, String)>,
}

impl Request {
    /// `--json /in/NAME` over `dir`.
    pub fn new(dir: impl Into<PathBuf>, file_name: impl Into<String>) -> Self {
        Self {
            dir: dir.into(),
            file_name: file_name.into(),
            args: vec!["--json".into()],
            env: Vec::new(),
        }
    }

    /// Replaces the validator options.
    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a guest environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The guest's argv.
    fn argv(&self) -> Vec<String> {
        let mut argv = vec!["tensorizer-validate".to_owned()];
        argv.extend(self.args.iter().cloned());
        argv.push(format!("{GUEST_DIR}/{}", self.file_name));
        argv
    }
}

/// Per-store host state.
struct Host {
    wasi: WasiP1Ctx,
    limiter: Limiter,
}

/// The compiled validator, reusable for any number of runs (also from
/// several threads at once).
pub struct Validator {
    engine: Engine,
    module: Module,
    linker: Linker<Host>,
    /// Tells the epoch thread to stop when the validator is dropped.
    stop: Arc<AtomicBool>,
}

impl Validator {
    /// Compiles the module at `path` (`tensorizer-validate.wasm`).
    pub fn from_file(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read the module {}", path.display()))?;
        Self::from_binary(&bytes)
            .with_context(|| format!("cannot load the module {}", path.display()))
    }

    /// Compiles a module from its bytes.
    pub fn from_binary(wasm: &[u8]) -> anyhow::Result<Self> {
        let mut config = Config::new();
        config.consume_fuel(true).epoch_interruption(true).max_wasm_stack(MAX_WASM_STACK);
        let engine = Engine::new(&config)?;
        let module = Module::new(&engine, wasm)?;
        let mut linker: Linker<Host> = Linker::new(&engine);
        p1::add_to_linker_sync(&mut linker, |host: &mut Host| &mut host.wasi)?;
        let stop = Arc::new(AtomicBool::new(false));
        spawn_epoch_thread(&engine, Arc::clone(&stop))?;
        Ok(Self { engine, module, linker, stop })
    }

    /// `--json /in/FILE_NAME` with `dir` preopened read-only.
    pub fn validate(
        &self,
        dir: &Path,
        file_name: &str,
        limits: &Limits,
    ) -> anyhow::Result<Outcome> {
        self.run(&Request::new(dir, file_name), limits)
    }

    /// Runs the validator on `request` under `limits`.
    ///
    /// Every outcome of the guest, limits hit included, is an `Ok`
    /// [`Outcome`]. `Err` means the host could not set the run up: the file
    /// name is not a plain name, the file or a `/in/...` path among the
    /// options exists but is not a regular file (a FIFO would block the
    /// host), the directory cannot be opened, or the module does not
    /// instantiate for a reason other than memory.
    pub fn run(&self, request: &Request, limits: &Limits) -> anyhow::Result<Outcome> {
        let began = Instant::now();
        let name = &request.file_name;
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) {
            bail!(
                "file name {name:?} must be a single path component inside the preopened directory"
            );
        }
        check_regular_files(request)?;
        // A missing file costs no fuel here; the guest reports it (exit 2).
        let file_bytes = std::fs::metadata(request.dir.join(name)).map(|m| m.len()).unwrap_or(0);
        let fuel = limits.fuel_for(file_bytes);

        let stdout = MemoryOutputPipe::new(limits.stdout_bytes);
        let stderr = MemoryOutputPipe::new(limits.stderr_bytes);
        let wasi = WasiCtxBuilder::new()
            .args(&request.argv())
            .envs(&request.env)
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .preopened_dir(&request.dir, GUEST_DIR, FsPerms::ReadOnly)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot preopen {}", request.dir.display()))?
            .build_p1();
        let mut store =
            Store::new(&self.engine, Host { wasi, limiter: Limiter::new(limits.memory_bytes) });
        store.limiter(|host| &mut host.limiter);
        store.set_fuel(fuel)?;
        store.set_epoch_deadline(deadline_ticks(limits.wall_clock.saturating_sub(began.elapsed())));

        // The guest runs on its own thread, so that a host call it is
        // blocked in cannot hold the caller past the wall-clock bound.
        let (module, linker) = (self.module.clone(), self.linker.clone());
        let (done, finished) = mpsc::channel();
        thread::Builder::new()
            .name("tensorizer-validate-guest".into())
            .spawn(move || {
                let result = match linker.instantiate(&mut store, &module) {
                    Ok(instance) => match instance.get_typed_func::<(), ()>(&mut store, "_start") {
                        Ok(start) => Ok(Ended::from_call(start.call(&mut store, ()))),
                        Err(error) => Err(error),
                    },
                    // Initial memory over the limit, most likely; classified below.
                    Err(error) if store.data().limiter.memory_refused => {
                        Ok(Ended::NotStarted(error))
                    }
                    Err(error) => Err(error.context("cannot instantiate the module")),
                };
                let _ = done.send((
                    result,
                    store.data().limiter.memory_refused,
                    store.get_fuel().unwrap_or(0),
                ));
            })
            .context("cannot start the guest thread")?;
        let waited = finished.recv_timeout(
            limits.wall_clock.saturating_sub(began.elapsed()).saturating_add(WATCHDOG_GRACE),
        );
        let elapsed = began.elapsed();
        let stdout = String::from_utf8_lossy(&stdout.contents()).into_owned();
        let stderr = String::from_utf8_lossy(&stderr.contents()).into_owned();
        let (result, memory_refused, fuel_left) = match waited {
            Ok((result, memory_refused, fuel_left)) => (result?, memory_refused, fuel_left),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let trap =
                    "the wall-clock bound passed while the module was blocked in a host call"
                        .to_owned();
                let (report_json, fuel_used) = (None, 0);
                let (kind, exit_code, trap) = (Kind::Timeout, None, Some(trap));
                return Ok(Outcome {
                    kind,
                    exit_code,
                    report_json,
                    stdout,
                    stderr,
                    trap,
                    fuel_used,
                    elapsed,
                });
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                bail!("the guest thread ended without a result")
            }
        };
        let fuel_used = fuel.saturating_sub(fuel_left);
        let report_json = serde_json::from_str(&stdout).ok();
        let (kind, exit_code, trap) = result.classify(memory_refused);
        Ok(Outcome { kind, exit_code, report_json, stdout, stderr, trap, fuel_used, elapsed })
    }
}

impl Drop for Validator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Refuses a run whose file, or any `/in/...` path among the validator
/// options (`--key-file PATH`, `--key-file=PATH`), exists and is not a
/// regular file: the guest opening a FIFO would block inside a host call.
/// `metadata` follows symlinks and never blocks; a missing file is left for
/// the guest to report.
fn check_regular_files(request: &Request) -> anyhow::Result<()> {
    let guest_prefix = format!("{GUEST_DIR}/");
    let named = request.args.iter().filter_map(|arg| {
        let value =
            if arg.starts_with("--") { arg.split_once('=').map(|(_, v)| v)? } else { arg.as_str() };
        value.strip_prefix(&guest_prefix)
    });
    for rel in std::iter::once(request.file_name.as_str()).chain(named) {
        let path = request.dir.join(rel);
        if let Ok(meta) = std::fs::metadata(&path)
            && !meta.is_file()
        {
            bail!(
                "{} is not a regular file ({:?}): refused before the run",
                path.display(),
                meta.file_type()
            );
        }
    }
    Ok(())
}

/// How the guest's `_start` ended.
enum Ended {
    Exit(i32),
    Trap(Trap, wasmtime::Error),
    Other(wasmtime::Error),
    NotStarted(wasmtime::Error),
}

impl Ended {
    fn from_call(result: wasmtime::Result<()>) -> Self {
        match result {
            Ok(()) => Self::Exit(0),
            Err(error) => {
                if let Some(exit) = error.downcast_ref::<I32Exit>() {
                    Self::Exit(exit.0)
                } else if let Some(trap) = error.downcast_ref::<Trap>() {
                    Self::Trap(*trap, error)
                } else {
                    Self::Other(error)
                }
            }
        }
    }

    fn classify(self, memory_refused: bool) -> (Kind, Option<i32>, Option<String>) {
        match self {
            Self::Exit(0) => (Kind::Clean, Some(0), None),
            Self::Exit(1) => (Kind::Findings, Some(1), None),
            Self::Exit(2) if memory_refused => (Kind::MemoryLimit, Some(2), None),
            Self::Exit(2) => (Kind::CannotScan, Some(2), None),
            Self::Exit(code) => (Kind::Crashed, Some(code), None),
            Self::Trap(Trap::OutOfFuel, error) => {
                (Kind::OutOfFuel, None, Some(format!("{error:#}")))
            }
            Self::Trap(Trap::Interrupt, error) => (Kind::Timeout, None, Some(format!("{error:#}"))),
            Self::Trap(_, error) | Self::Other(error) | Self::NotStarted(error) => {
                let kind = if memory_refused { Kind::MemoryLimit } else { Kind::Crashed };
                (kind, None, Some(format!("{error:#}")))
            }
        }
    }
}

/// Epoch ticks for a wall-clock bound: the next tick may come at once, so one
/// more than the bound divided by the tick (the run is stopped between
/// `wall_clock` and `wall_clock + EPOCH_TICK`). Capped so that wasmtime's
/// `current epoch + ticks` cannot overflow (2^48 ticks are 89,000 years).
fn deadline_ticks(wall_clock: Duration) -> u64 {
    const MAX_TICKS: u128 = 1 << 48;
    let ticks =
        wall_clock.as_nanos().div_ceil(EPOCH_TICK.as_nanos()).saturating_add(1).min(MAX_TICKS);
    u64::try_from(ticks).unwrap_or(1 << 48)
}

/// One thread per engine advances the epoch every [`EPOCH_TICK`]; each store
/// sets its own deadline in ticks, so concurrent runs do not disturb each
/// other. The thread ends once `stop` is set or the engine is gone.
fn spawn_epoch_thread(engine: &Engine, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let engine = engine.weak();
    thread::Builder::new()
        .name("tensorizer-validate-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                thread::sleep(EPOCH_TICK);
                match engine.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .context("cannot start the epoch thread")?;
    Ok(())
}

/// Compiles `module_path` and runs it once: `--json` on
/// `dir/file_name`. To check many files, build one [`Validator`] and reuse it.
pub fn validate(
    module_path: &Path,
    dir: &Path,
    file_name: &str,
    limits: &Limits,
) -> anyhow::Result<Outcome> {
    Validator::from_file(module_path)?.validate(dir, file_name, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_covers_the_wall_clock() {
        assert_eq!(deadline_ticks(Duration::ZERO), 1);
        assert_eq!(deadline_ticks(Duration::from_millis(10)), 2);
        assert_eq!(deadline_ticks(Duration::from_millis(11)), 3);
        assert_eq!(deadline_ticks(Duration::MAX), 1 << 48);
    }

    #[test]
    fn fuel_scales_and_saturates() {
        let limits = Limits { fuel_base: 10, fuel_per_byte: 3, ..Limits::default() };
        assert_eq!(limits.fuel_for(5), 25);
        assert_eq!(Limits { fuel_per_byte: u64::MAX, ..limits }.fuel_for(2), u64::MAX);
    }

    #[test]
    fn argv_ends_with_the_guest_path() {
        let request = Request::new("/tmp", "m.tensors").args(["--verify", "--json"]);
        assert_eq!(request.argv(), ["tensorizer-validate", "--verify", "--json", "/in/m.tensors"]);
    }
}
