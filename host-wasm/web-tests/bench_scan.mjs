// Times the inspector's scan in wasm under node: the page's module
// (target/browser-artifacts/page/pkg, written by host-wasm/browser-test.sh --build-only) and
// its `scan` export, reading the file with fs.readSync as the page's worker
// reads with FileReaderSync. The native side of the comparison is
// `cargo run --release -p tensorizer-wasm --example scan_bench -- FILE`.
// usage: node host-wasm/web-tests/bench_scan.mjs FILE [RUNS]

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const PKG = path.join(process.env.TZR_ARTIFACTS || path.join(ROOT, 'target/browser-artifacts'), 'page/pkg');
const [file, runsArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: node bench_scan.mjs FILE [RUNS]');
  process.exit(2);
}
const runs = Number(runsArg || 20);

const { default: init, scan } = await import(path.join(PKG, 'tensorizer_wasm.js'));
await init({ module_or_path: fs.readFileSync(path.join(PKG, 'tensorizer_wasm_bg.wasm')) });

const fd = fs.openSync(file, 'r');
const len = fs.fstatSync(fd).size;
const read = (offset, length) => {
  const buf = new Uint8Array(length);
  let done = 0;
  while (done < length) {
    const n = fs.readSync(fd, buf, done, length - done, offset + done);
    if (n === 0) throw new Error(`unexpected end of file at byte ${offset + done}`);
    done += n;
  }
  return buf;
};
const times = [];
let report;
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  report = JSON.parse(scan(read, len, file));
  times.push(performance.now() - t0);
}
times.sort((a, b) => a - b);
console.log(`wasm scan of ${file}: ${report.tensors} tensors, ${report.findings.length} findings, ${report.reads} reads; ` +
  `best ${times[0].toFixed(2)} ms, median ${times[Math.floor(times.length / 2)].toFixed(2)} ms over ${runs} runs`);
