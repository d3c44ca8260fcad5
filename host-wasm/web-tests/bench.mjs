// Measures the inspector for BENCHMARKS.md: the module's gzipped size, the
// time to open a 20,000-tensor index in the page, and verify throughput in
// the browser beside native single-core `tzr verify` on the same 1 GiB file.
//
// Needs a built page and the cached inputs (host-wasm/browser-test.sh makes
// both) and a release tzr (cargo build --release -p tzr).
// usage: node host-wasm/web-tests/bench.mjs [RUNS]
//   (pin to one core for a single-core comparison: taskset -c 0 node ...)

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const WEB = path.join(process.env.TZR_ARTIFACTS || path.join(ROOT, 'target/browser-artifacts'), 'page');
const CACHE = path.join(process.env.TZR_ARTIFACTS || path.join(ROOT, 'target/browser-artifacts'), 'cache');
const TZR = process.env.TZR_BIN || path.join(ROOT, 'target/release/tzr');
const RUNS = Number(process.argv[2] || 3);
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.wasm': 'application/wasm' };

const wasm = fs.readFileSync(path.join(WEB, 'pkg/tensorizer_wasm_bg.wasm'));
console.log(`wasm: ${wasm.length} bytes; gzip -9: ${zlib.gzipSync(wasm, { level: 9 }).length} bytes; ` +
  `gzip -6: ${zlib.gzipSync(wasm, { level: 6 }).length} bytes`);

// The page's files only, from memory of the disk: no Range needed here.
const server = http.createServer((req, res) => {
  const rel = new URL(req.url, 'http://x').pathname.replace(/^\/+/, '') || 'index.html';
  const p = path.join(WEB, rel);
  if (!p.startsWith(WEB) || !fs.existsSync(p)) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'Content-Type': TYPES[path.extname(p)] || 'application/octet-stream' });
  fs.createReadStream(p).pipe(res);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const browser = await chromium.launch({
  executablePath: process.env.TZR_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage();
await page.goto(`http://127.0.0.1:${server.address().port}/index.html`);
await page.waitForFunction(() => window.__inspector && document.getElementById('version').textContent);

async function open(file) {
  const n = await page.evaluate(() => window.__inspector.state.opens);
  await page.evaluate(() => { document.getElementById('file-input').value = ''; });
  await page.setInputFiles('#file-input', file);
  await page.waitForFunction((k) => window.__inspector.state.opens > k, n, { timeout: 60000 });
  return page.evaluate(() => window.__inspector.state.lastOpen);
}

const times = [];
for (let i = 0; i < Math.max(RUNS, 5); i++) {
  const o = await open(path.join(CACHE, 'many_20k.tensors'));
  times.push(o.ms);
  // Let the background read of stored hashes finish before the next open.
  await page.waitForFunction(() => window.__inspector.state.hashes.size === 20000, null, { timeout: 60000 });
}
times.sort((a, b) => a - b);
console.log(`open 20,000-tensor index: median ${times[times.length >> 1].toFixed(1)} ms, best ${times[0].toFixed(1)} ms ` +
  `(${times.map((t) => t.toFixed(0)).join(' ')})`);

const big = path.join(CACHE, 'big_1gib.tensors');
const size = fs.statSync(big).size;
for (let i = 0; i < RUNS; i++) {
  for (const workers of [1, 4]) {
    // ?workers=N caps the page's verify workers (it also stays within
    // navigator.hardwareConcurrency and the number of tensors).
    await page.goto(`http://127.0.0.1:${server.address().port}/index.html?workers=${workers}`);
    await page.waitForFunction(() => window.__inspector && document.getElementById('version').textContent);
    await open(big);
    await page.click('#verify-start');
    await page.waitForFunction(() => {
      const r = window.__inspector.state.verifyRun;
      return r && !r.running;
    }, null, { timeout: 600000 });
    const run = await page.evaluate(() => window.__inspector.state.verifyRun);
    console.log(`browser verify (${run.workers} workers): ${run.data_bytes_checked} bytes in ${(run.ms / 1000).toFixed(2)} s = ${run.mbPerS.toFixed(1)} MB/s`);
  }
  if (fs.existsSync(TZR)) {
    const t0 = process.hrtime.bigint();
    execFileSync(TZR, ['verify', '--num-readers', '1', big], { stdio: 'ignore' });
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(`native tzr verify --num-readers 1: ${size} bytes in ${s.toFixed(2)} s = ${(size / s / 1e6).toFixed(1)} MB/s`);
  }
}
await browser.close();
server.close();
