//! `tensorizer-validate`: the WASI (wasm32-wasip1) validator command. All
//! the work is in [`tensorizer_wasm::cli::run`].

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env = |name: &str| std::env::var(name).ok();
    let code = tensorizer_wasm::cli::run(
        &args,
        &env,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    ExitCode::from(code)
}
