//! `tensorizer-validate-host`: runs the tensorizer-validate WASI module on one
//! file under fuel, wall-clock and memory limits, prints what the module
//! printed and exits with its status, or with a distinct status when a limit
//! stopped it.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tensorizer_validate_host::{Kind, Limits, Request, Validator};

const USAGE: &str = "\
usage: tensorizer-validate-host [--fuel N] [--memory BYTES] [--timeout SECS] [--env VAR]...
                                MODULE.wasm FILE [-- VALIDATOR-OPTIONS...]

Runs `tensorizer-validate VALIDATOR-OPTIONS /in/NAME` (default options: --json;
--sarif, --verify, --key-file /in/KEY and --passphrase-env VAR also pass through)
with FILE's directory preopened read-only at /in.

  --fuel N         total fuel (default: 2e9 + 400 per byte of FILE)
  --memory BYTES   linear-memory limit (default: 268435456)
  --timeout SECS   wall-clock limit (default: 60)
  --env VAR        pass the host's VAR to the module (for --passphrase-env VAR)

exit: the module's status (0 no findings, 1 findings, 2 could not scan),
      or 4 host error, 10 out of fuel, 11 timeout, 12 memory limit, 13 module crashed";

/// Exit statuses for outcomes the module did not choose itself.
const EXIT_USAGE: u8 = 2;
const EXIT_HOST_ERROR: u8 = 4;
const EXIT_OUT_OF_FUEL: u8 = 10;
const EXIT_TIMEOUT: u8 = 11;
const EXIT_MEMORY_LIMIT: u8 = 12;
const EXIT_CRASHED: u8 = 13;

struct Cli {
    fuel: Option<u64>,
    limits: Limits,
    env: Vec<String>,
    module: PathBuf,
    file: PathBuf,
    validator_args: Vec<String>,
}

fn parse(args: Vec<OsString>) -> Result<Cli, String> {
    let mut args = args.into_iter();
    let mut limits = Limits::default();
    let (mut fuel, mut env, mut positional) = (None, Vec::new(), Vec::new());
    let mut validator_args = None;
    while let Some(arg) = args.next() {
        let text = arg.to_str().map(str::to_owned);
        let mut value = |name: &str| -> Result<String, String> {
            args.next()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match text.as_deref() {
            Some("-h" | "--help") => return Err(String::new()),
            Some("--fuel") => {
                fuel = Some(value("--fuel")?.parse().map_err(|e| format!("--fuel: {e}"))?)
            }
            Some("--memory") => {
                limits.memory_bytes =
                    value("--memory")?.parse().map_err(|e| format!("--memory: {e}"))?;
            }
            Some("--timeout") => {
                let secs: f64 =
                    value("--timeout")?.parse().map_err(|e| format!("--timeout: {e}"))?;
                limits.wall_clock = Duration::try_from_secs_f64(secs)
                    .map_err(|e| format!("--timeout {secs}: {e}"))?;
            }
            Some("--env") => env.push(value("--env")?),
            Some("--") => {
                let rest =
                    args.by_ref().map(|a| a.into_string().map_err(|a| format!("not UTF-8: {a:?}")));
                validator_args = Some(rest.collect::<Result<Vec<_>, _>>()?);
            }
            Some(flag) if flag.starts_with('-') && flag.len() > 1 => {
                return Err(format!("unknown option {flag}"));
            }
            _ => positional.push(PathBuf::from(arg)),
        }
    }
    let [module, file]: [PathBuf; 2] =
        positional.try_into().map_err(|_| "expected MODULE.wasm and FILE".to_owned())?;
    let validator_args = validator_args.unwrap_or_else(|| vec!["--json".to_owned()]);
    Ok(Cli { fuel, limits, env, module, file, validator_args })
}

fn main() -> ExitCode {
    let cli = match parse(std::env::args_os().skip(1).collect()) {
        Ok(cli) => cli,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("tensorizer-validate-host: {message}\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("tensorizer-validate-host: {error:#}");
            ExitCode::from(EXIT_HOST_ERROR)
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<u8> {
    let dir = match cli.file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = cli.file.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        anyhow::anyhow!("FILE {} must end in a UTF-8 file name", cli.file.display())
    })?;
    let mut request = Request::new(dir, name).args(cli.validator_args.iter().cloned());
    for var in &cli.env {
        let value = std::env::var(var).map_err(|e| anyhow::anyhow!("--env {var}: {e}"))?;
        request = request.env(var.clone(), value);
    }
    let mut limits = cli.limits.clone();
    if let Some(fuel) = cli.fuel {
        (limits.fuel_base, limits.fuel_per_byte) = (fuel, 0);
    }

    let validator = Validator::from_file(&cli.module)?;
    let outcome = validator.run(&request, &limits)?;
    // What the module printed, as it printed it.
    std::io::stdout().write_all(outcome.stdout.as_bytes())?;
    std::io::stderr().write_all(outcome.stderr.as_bytes())?;

    let trap = outcome.trap.as_deref().unwrap_or("no trap");
    let stopped = |why: String, code: u8| {
        eprintln!("tensorizer-validate-host: {}: {why}", cli.file.display());
        code
    };
    Ok(match outcome.kind {
        Kind::Clean | Kind::Findings | Kind::CannotScan => {
            u8::try_from(outcome.exit_code.unwrap_or(2)).unwrap_or(EXIT_CRASHED)
        }
        Kind::OutOfFuel => stopped(
            format!("stopped: out of fuel after {} units (raise --fuel)", outcome.fuel_used),
            EXIT_OUT_OF_FUEL,
        ),
        Kind::Timeout => stopped(
            format!(
                "stopped: wall-clock limit of {:?} reached (raise --timeout)",
                limits.wall_clock
            ),
            EXIT_TIMEOUT,
        ),
        Kind::MemoryLimit => stopped(
            format!("memory limit of {} bytes reached (raise --memory)", limits.memory_bytes),
            EXIT_MEMORY_LIMIT,
        ),
        Kind::Crashed => stopped(
            format!("the module crashed (exit {:?}): {trap}", outcome.exit_code),
            EXIT_CRASHED,
        ),
    })
}
