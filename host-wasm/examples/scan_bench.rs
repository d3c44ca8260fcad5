//! Times the browser inspector's scan natively: the same code the page's
//! worker runs in wasm ([`tensorizer_wasm::browser::findings::scan_report`],
//! read-ahead cache included), over a local file. BENCHMARKS.md compares
//! it with the wasm build under node (`host-wasm/web-tests/bench_scan.mjs`).
//!
//! usage: cargo run --release -p tensorizer-wasm --example scan_bench -- FILE [RUNS]

use std::time::Instant;

use tensorizer_wasm::FileSource;
use tensorizer_wasm::browser::findings::scan_report;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: scan_bench FILE [RUNS]")?;
    let runs: usize = args.next().map_or(Ok(20), |r| r.parse())?;
    let mut times = Vec::with_capacity(runs);
    let mut last = serde_json::Value::Null;
    for _ in 0..runs.max(1) {
        let t0 = Instant::now();
        last = scan_report(FileSource::open(&path)?, &path).map_err(|e| e.to_string())?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "native scan of {path}: {} tensors, {} findings, {} reads; best {:.2} ms, median {:.2} ms over {} runs",
        last["tensors"],
        last["findings"].as_array().map_or(0, Vec::len),
        last["reads"],
        times[0],
        times[times.len() / 2],
        times.len()
    );
    Ok(())
}
