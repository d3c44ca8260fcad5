// Browser tests of the inspector page (host-wasm/web, as built into tzr
// and written out by `tzr view --write-page`), run by
// host-wasm/browser-test.sh: playwright-core drives Debian's chromium
// (never a downloaded browser); a private nginx on 127.0.0.1 serves the
// page on one port and the files on another, cross-origin, with Range and
// CORS, plus locations that ignore Range, send no CORS headers, or hide
// Content-Range.
//
// Environment: TZR_CHROMIUM (default /usr/bin/chromium), TZR_ARTIFACTS
// (default target/browser-artifacts; its cache/ holds make_files.py's
// outputs, its page/ the page), TZR_NGINX (default: nginx on PATH or
// /usr/sbin/nginx), TZR_BIN (default target/debug/tzr).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const VECTORS = path.join(ROOT, 'tests/vectors');
const ARTIFACTS = process.env.TZR_ARTIFACTS || path.join(ROOT, 'target/browser-artifacts');
const WEB = path.join(ARTIFACTS, 'page');
const CACHE = path.join(ARTIFACTS, 'cache');
const CHROMIUM = process.env.TZR_CHROMIUM || '/usr/bin/chromium';
const MANIFEST = JSON.parse(fs.readFileSync(path.join(VECTORS, 'manifest.json'), 'utf8'));
const MIB = 1024 * 1024;
// Opening a 20,000-tensor index takes well under 150 ms on an idle machine
// (the number is printed and kept in BENCHMARKS.md). CI runs this beside
// other test lanes, so the test asserts only a bound ten times looser: it
// catches a change of complexity (a quadratic pass, a render of every row),
// not noise.
const OPEN_20K_SANITY_MS = 1500;
const TZR = process.env.TZR_BIN || path.join(ROOT, 'target/debug/tzr');

let tmp;
let files; // directory nginx serves under /files/ (vectors linked, copies made)
let nginx;
let pagePort;
let filePort;
let browser;
let page;

// ---------- nginx ----------

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function nginxBinary() {
  if (process.env.TZR_NGINX) return process.env.TZR_NGINX;
  for (const dir of (process.env.PATH || '').split(':').concat(['/usr/sbin'])) {
    const p = path.join(dir, 'nginx');
    if (fs.existsSync(p)) return p;
  }
  throw new Error('nginx not found (apt-get install nginx-light)');
}

function waitForPort(port, ms) {
  const until = Date.now() + ms;
  return new Promise((resolve, reject) => {
    const attempt = () => {
      const sock = net.connect(port, '127.0.0.1');
      sock.once('connect', () => {
        sock.destroy();
        resolve();
      });
      sock.once('error', () => {
        sock.destroy();
        if (Date.now() > until) reject(new Error(`nothing listens on ${port}`));
        else setTimeout(attempt, 50);
      });
    };
    attempt();
  });
}

async function startNginx() {
  pagePort = await freePort();
  filePort = await freePort();
  const cors = 'add_header Access-Control-Allow-Origin "*" always; ' +
    'add_header Access-Control-Expose-Headers "Content-Range, Content-Length" always;';
  const conf = `
daemon off; master_process off; worker_processes 1;
pid ${tmp}/nginx.pid; error_log ${tmp}/error.log;
events { worker_connections 256; }
http {
  log_format counted '$uri $status $bytes_sent $body_bytes_sent "$http_range"';
  access_log ${tmp}/access.log counted;
  client_body_temp_path ${tmp}; proxy_temp_path ${tmp}; fastcgi_temp_path ${tmp};
  uwsgi_temp_path ${tmp}; scgi_temp_path ${tmp};
  types { text/html html; text/javascript js mjs; text/css css; application/wasm wasm; application/json json; }
  default_type application/octet-stream;
  sendfile on; etag off;
  # The page.
  server { listen 127.0.0.1:${pagePort}; root ${WEB}; location / { add_header Cache-Control no-store; } }
  # The files, cross-origin: Range + CORS, and the broken servers.
  server {
    listen 127.0.0.1:${filePort};
    location /files/ { alias ${files}/; ${cors} }
    location /norange/ { alias ${files}/; max_ranges 0; ${cors} }
    location /nocors/ { alias ${files}/; }
    location /noexpose/ { alias ${files}/; add_header Access-Control-Allow-Origin "*" always; }
  }
}
`;
  fs.writeFileSync(path.join(tmp, 'nginx.conf'), conf);
  nginx = spawn(nginxBinary(), ['-p', tmp, '-c', path.join(tmp, 'nginx.conf')], { stdio: 'inherit' });
  await waitForPort(pagePort, 10000);
  await waitForPort(filePort, 10000);
}

/** Body bytes nginx sent for `name` (any location) since `since` log lines. */
function servedBytes(name, since = 0) {
  const lines = fs.readFileSync(path.join(tmp, 'access.log'), 'utf8').split('\n').filter(Boolean);
  let bytes = 0;
  let requests = 0;
  for (const line of lines.slice(since)) {
    const [uri, , , body] = line.split(' ');
    if (uri.endsWith(`/${name}`)) {
      bytes += Number(body);
      requests += 1;
    }
  }
  return { bytes, requests, lines: lines.length };
}
const logLines = () => servedBytes('', 0).lines;

// ---------- page helpers ----------

const fileUrl = (name, location = 'files') => `http://127.0.0.1:${filePort}/${location}/${name}`;

async function opens() {
  return page.evaluate(() => window.__inspector.state.opens);
}

async function openFile(p) {
  const n = await opens();
  await page.evaluate(() => {
    document.getElementById('file-input').value = '';
  });
  await page.setInputFiles('#file-input', p);
  await page.waitForFunction((k) => window.__inspector.state.opens > k, n, { timeout: 60000 });
  return page.evaluate(() => window.__inspector.state.lastOpen);
}

async function openUrl(url) {
  const n = await opens();
  await page.fill('#url-input', url);
  await page.click('#url-open');
  await page.waitForFunction((k) => window.__inspector.state.opens > k, n, { timeout: 60000 });
  return page.evaluate(() => window.__inspector.state.lastOpen);
}

const viewRows = () => page.evaluate(() => window.__inspector.view());
const errorText = async () => ((await page.isVisible('#error')) ? page.textContent('#error') : '');

async function verify({ keyFile = null, passphrase = '' } = {}) {
  if (keyFile) await page.setInputFiles('#key-file', keyFile);
  else await page.evaluate(() => { document.getElementById('key-file').value = ''; });
  await page.fill('#passphrase', passphrase);
  await page.click('#verify-start');
  await page.waitForFunction(() => {
    const r = window.__inspector.state.verifyRun;
    return r && !r.running;
  }, null, { timeout: 300000 });
  return page.evaluate(() => window.__inspector.state.verifyRun);
}

function assertMatchesManifest(rows, vector) {
  const want = vector.tensors;
  assert.equal(rows.length, want.length, `${vector.file}: tensor count`);
  rows.forEach((r, i) => {
    const t = want[i];
    assert.deepEqual(r.path, t.path, `${vector.file}[${i}] path`);
    assert.equal(r.dtype_string, t.dtype, `${vector.file}[${i}] dtype`);
    assert.deepEqual(r.shape, t.shape, `${vector.file}[${i}] shape`);
    assert.equal(r.data_offset, t.data_offset, `${vector.file}[${i}] data offset`);
  });
}

/** The rendered table's first rows, as cell texts. */
async function domRows(n) {
  return page.$$eval('#tbody .row', (rows, k) =>
    rows
      .map((r) => ({ top: parseFloat(r.style.top), cells: [...r.children].map((c) => c.textContent) }))
      .sort((a, b) => a.top - b.top)
      .slice(0, k)
      .map((r) => r.cells), n);
}

const vector = (file) => MANIFEST.vectors.find((v) => v.file === file);

/** A GGUF string: its length (u64) and UTF-8 bytes. */
const ggufString = (s) => {
  const b = Buffer.from(s, 'utf8');
  const n = Buffer.alloc(8);
  n.writeBigUInt64LE(BigInt(b.length));
  return Buffer.concat([n, b]);
};

/** Bytes of `gguf()`'s data area: far more than its header. */
const GGUF_DATA = 4 * MIB;

/** The GGUF tensors of `gguf()`: name, dims (innermost first), ggml type, offset in the data. */
const GGUF_TENSORS = [
  ['token_embd.weight', [4, 2], 0, 0], // F32
  ['blk.0.attn_q.weight', [32], 8, 32], // Q8_0: one 34-byte block
  ['output_norm.weight', [4], 1, 96], // F16
];

/**
 * A GGUF v3 file: a chat template that reaches for Python internals (GGUF-006)
 * and long enough that the header outgrows the page's first 64 KiB read,
 * the tensors of GGUF_TENSORS, then their data.
 */
function gguf() {
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
  const template = `{{ ''.__class__.__mro__[1].__subclasses__() }}${' '.repeat(100_000)}`;
  const parts = [Buffer.from('GGUF'), u32(3), u64(GGUF_TENSORS.length), u64(2),
    ggufString('general.architecture'), u32(8), ggufString('llama'),
    ggufString('tokenizer.chat_template'), u32(8), ggufString(template)];
  for (const [name, dims, type, offset] of GGUF_TENSORS) {
    parts.push(ggufString(name), u32(dims.length), ...dims.map(u64), u32(type), u64(offset));
  }
  const header = Buffer.concat(parts);
  const padded = Math.ceil(header.length / 32) * 32;
  return Buffer.concat([header, Buffer.alloc(padded - header.length + GGUF_DATA)]);
}

// ---------- setup ----------

before(async () => {
  assert.ok(fs.existsSync(path.join(WEB, 'pkg/tensorizer_wasm_bg.wasm')), `no page in ${WEB}: host-wasm/browser-test.sh --build-only writes it`);
  for (const f of ['big_1gib.tensors', 'many_20k.tensors', 'model.safetensors']) {
    assert.ok(fs.existsSync(path.join(CACHE, f)), `${f} missing: run host-wasm/web-tests/make_files.py ${CACHE}`);
  }
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tzr-inspector-'));
  files = path.join(tmp, 'files');
  fs.mkdirSync(files);
  for (const v of MANIFEST.vectors) fs.symlinkSync(path.join(VECTORS, v.file), path.join(files, v.file));
  for (const f of ['big_1gib.tensors', 'many_20k.tensors', 'model.safetensors']) {
    fs.symlinkSync(path.join(CACHE, f), path.join(files, f));
  }
  fs.symlinkSync(path.join(VECTORS, 'torch/dtypes.pt'), path.join(files, 'dtypes.pt'));
  // A flipped data byte in the first tensor, and a cut copy.
  const flat = fs.readFileSync(path.join(VECTORS, 'v1_flat.tensors'));
  const flipped = Buffer.from(flat);
  flipped[vector('v1_flat.tensors').tensors[0].data_offset + 1] ^= 0x10;
  fs.writeFileSync(path.join(files, 'flipped.tensors'), flipped);
  fs.writeFileSync(path.join(files, 'truncated.tensors'), flat.subarray(0, 1000));
  fs.writeFileSync(path.join(files, 'key.hex'), `${MANIFEST.secrets.key_hex}\n`);
  fs.writeFileSync(path.join(files, 'notamodel.bin'), Buffer.from('just some text, not a model file\n'));
  // A safetensors file whose two tensors share bytes.
  const overlapJson = Buffer.from(JSON.stringify({
    a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
    b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] },
  }));
  const overlapLen = Buffer.alloc(8);
  overlapLen.writeBigUInt64LE(BigInt(overlapJson.length));
  fs.writeFileSync(path.join(files, 'overlap.safetensors'), Buffer.concat([overlapLen, overlapJson, Buffer.alloc(12)]));
  fs.writeFileSync(path.join(files, 'model.gguf'), gguf());

  await startNginx();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync',
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
  page = await context.newPage();
  page.on('pageerror', (e) => console.error(`page error: ${e.message}`));
  await page.goto(`http://127.0.0.1:${pagePort}/index.html`);
  await page.waitForFunction(() => window.__inspector && document.getElementById('version').textContent);
});

after(async () => {
  if (browser) await browser.close();
  if (nginx) nginx.kill('SIGTERM');
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

// ---------- tests ----------

describe('tensorizer files', () => {
  test('every vector, opened from the file input, matches the manifest', async () => {
    for (const v of MANIFEST.vectors) {
      const open = await openFile(path.join(VECTORS, v.file));
      assert.equal(open.error, undefined, `${v.file}: ${open.error}`);
      assertMatchesManifest(await viewRows(), v);
      const summary = await page.evaluate(() => window.__inspector.state.summary);
      assert.equal(summary.format, 'tensorizer');
      assert.equal(summary.file_bytes, v.size);
      assert.equal(summary.encrypted, v.encryption !== null, v.file);
    }
    // The table as drawn: v1_flat's first rows.
    const v = vector('v1_flat.tensors');
    await openFile(path.join(VECTORS, v.file));
    const cells = await domRows(5);
    assert.equal(cells.length, 5);
    cells.forEach((c, i) => {
      assert.equal(c[1], v.tensors[i].name);
      assert.equal(c[3], `[${v.tensors[i].shape.join(', ')}]`);
    });
    const dtypeCount = await page.$$eval('#dtype-table tr', (r) => r.length);
    assert.ok(dtypeCount >= 2);
  });

  test('stored hashes are read from the tensor headers', async () => {
    const v = vector('v1_flat.tensors');
    await openFile(path.join(VECTORS, v.file));
    await page.waitForFunction((n) => window.__inspector.state.hashes.size === n, v.tensors.length);
    const hashes = await page.evaluate(() => [...window.__inspector.state.hashes.values()]);
    for (const h of hashes) {
      const t = v.tensors[h.index];
      assert.equal(h.sha256, t.stored_sha256);
      assert.equal(parseInt(h.crc32, 16), t.stored_crc32);
    }
  });

  test('a vector opened from a URL matches the manifest, with Range reads only', async () => {
    const v = vector('v1_nested.tensors');
    const since = logLines();
    const open = await openUrl(fileUrl(v.file));
    assert.equal(open.error, undefined, open.error);
    assertMatchesManifest(await viewRows(), v);
    const served = servedBytes(v.file, since);
    assert.equal(served.bytes, open.bytesFetched);
    assert.ok(open.requests <= 3, `${open.requests} requests`);
  });

  test('sorting and filtering', async () => {
    const v = vector('v2_dtypes.tensors');
    await openFile(path.join(VECTORS, v.file));
    await page.click('#thead span[data-key="bytes"]');
    let rows = await viewRows();
    for (let i = 1; i < rows.length; i++) assert.ok(rows[i - 1].bytes <= rows[i].bytes);
    await page.click('#thead span[data-key="bytes"]');
    rows = await viewRows();
    for (let i = 1; i < rows.length; i++) assert.ok(rows[i - 1].bytes >= rows[i].bytes);
    await page.click('#thead span[data-key="index"]');
    await page.fill('#filter', 'int');
    await page.waitForFunction(() => window.__inspector.state.filter === 'int');
    rows = await viewRows();
    assert.ok(rows.length > 0 && rows.length < v.tensors.length);
    assert.ok(rows.every((r) => r.name.toLowerCase().includes('int')));
    await page.fill('#filter', '');
    await page.waitForFunction(() => window.__inspector.state.filter === '');
  });

  test('nested names as a collapsible tree', async () => {
    await openFile(path.join(VECTORS, 'v1_nested.tensors'));
    await page.click('#mode-tree');
    try {
      // Top-level keys, closed; children are drawn when a folder opens.
      const top = await page.$$eval('#tree > details > summary', (s) => s.map((x) => x.firstChild.textContent));
      const want = [...new Set(vector('v1_nested.tensors').tensors.map((t) => t.path[0]))];
      assert.deepEqual(top, want);
      assert.equal((await page.$$('#tree > details > details')).length, 0);
      await page.click('#tree > details:first-child > summary');
      // A folder draws its children on its toggle event: wait for them.
      await page.waitForSelector('#tree > details:first-child > details > summary');
      const inner = await page.$$eval('#tree > details:first-child > details > summary', (s) => s.map((x) => x.firstChild.textContent));
      assert.ok(inner.includes('layers'), JSON.stringify(inner));
      await page.click('#tree > details:first-child > details > summary');
      await page.waitForSelector('#tree > details:first-child > details > details > summary');
      // List indices show as [0], [1], ...
      const indices = await page.$$eval('#tree > details:first-child > details > details > summary', (s) => s.map((x) => x.firstChild.textContent));
      assert.ok(indices.includes('[0]'), JSON.stringify(indices));
    } finally {
      await page.click('#mode-table');
    }
  });
});

describe('verify', () => {
  test('a plain vector verifies', async () => {
    await openFile(path.join(VECTORS, 'v1_flat.tensors'));
    const run = await verify();
    assert.equal(run.ok, true, JSON.stringify(run));
    assert.equal(run.verified, 15);
    const statuses = await page.evaluate(() => [...window.__inspector.state.results.values()].map((r) => r.status));
    assert.equal(statuses.length, 15);
    assert.ok(statuses.every((s) => s === 'verified'));
  });

  test('encrypted vectors verify with a key file and with a passphrase', async () => {
    await openFile(path.join(VECTORS, 'v3_enc_key.tensors'));
    let run = await verify({ keyFile: path.join(files, 'key.hex') });
    assert.equal(run.ok, true, JSON.stringify(run));
    assert.equal(run.verified, 5);
    await openFile(path.join(VECTORS, 'v3_enc_pass.tensors'));
    run = await verify({ passphrase: MANIFEST.secrets.passphrase });
    assert.equal(run.ok, true, JSON.stringify(run));
    // A wrong passphrase fails every tensor's MAC; no key at all is refused.
    run = await verify({ passphrase: 'not the passphrase' });
    assert.equal(run.ok, false);
    assert.ok(run.failed > 0);
    run = await verify();
    assert.match(run.error, /encrypted/);
  });

  test('a flipped data byte is caught, with the offset', async () => {
    await openFile(path.join(files, 'flipped.tensors'));
    const run = await verify();
    assert.equal(run.ok, false);
    assert.equal(run.failed, 1);
    const first = await page.evaluate(() => window.__inspector.state.results.get(0));
    assert.equal(first.status, 'failed');
    assert.match(first.line, /byte \d+/);
    assert.match(await errorText(), /f32_2x3.*byte \d+/);
  });

  test('verify over a URL', async () => {
    await openUrl(fileUrl('v1_module.tensors'));
    const run = await verify();
    assert.equal(run.ok, true, JSON.stringify(run));
  });

  test('a torch.save checkpoint opens and its CRC-32s verify', async () => {
    const open = await openFile(path.join(VECTORS, 'torch/dtypes.pt'));
    assert.equal(open.error, undefined, open.error);
    assert.equal(open.format, 'torch');
    assert.ok(open.tensors > 0);
    const run = await verify();
    assert.equal(run.ok, true, JSON.stringify(run));
    assert.equal(run.verified, open.tensors);
    // Over a URL: the zip's tail, directory, records and data.pkl only.
    const remote = await openUrl(fileUrl('dtypes.pt'));
    assert.equal(remote.error, undefined, remote.error);
    assert.equal(remote.tensors, open.tensors);
    assert.ok(remote.requests <= 4, `${remote.requests} requests`);
  });

  test('hostile checkpoints are refused with one line, nothing run', async () => {
    for (const name of ['hostile_os_system.pt', 'hostile_eval.pt', 'hostile_legacy.pt', 'hostile_deflated.pt']) {
      const open = await openFile(path.join(VECTORS, 'torch', name));
      assert.ok(open.error, `${name} opened`);
      assert.ok(!open.error.includes('\n'), name);
      assert.equal(await errorText(), open.error);
    }
  });

  test('cancel stops a running verification', async () => {
    await openFile(path.join(CACHE, 'big_1gib.tensors'));
    await page.click('#verify-start');
    await page.waitForFunction(() => document.getElementById('verify-progress').value > 0, null, { timeout: 60000 });
    await page.click('#verify-cancel');
    const run = await page.evaluate(() => window.__inspector.state.verifyRun);
    assert.equal(run.cancelled, true);
    assert.equal(await page.textContent('#verify-status'), 'cancelled');
    assert.equal(await page.isDisabled('#verify-start'), false);
  });
});

describe('errors', () => {
  test('a truncated file shows one line with a byte offset', async () => {
    const open = await openFile(path.join(files, 'truncated.tensors'));
    assert.match(open.error, /byte \d+/);
    const line = await errorText();
    assert.equal(line, open.error);
    assert.ok(!line.includes('\n'));
    assert.equal(await page.isVisible('#details'), false);
  });

  test('a file of another kind is refused at byte 0', async () => {
    const open = await openFile(path.join(files, 'notamodel.bin'));
    assert.match(open.error, /not a tensorizer, safetensors, torch.save or GGUF file.*byte 0/);
  });

  test('a server that ignores Range is named as such', async () => {
    const open = await openUrl(fileUrl('big_1gib.tensors', 'norange'));
    assert.match(open.error, /ignored the Range request/);
    // The page aborted the download: far less than the file was sent.
    assert.ok(open.bytesFetched < MIB);
  });

  test('CORS refusals and a hidden Content-Range are explained', async () => {
    let open = await openUrl(fileUrl('v1_flat.tensors', 'nocors'));
    assert.match(open.error, /CORS/);
    assert.match(open.error, /Access-Control-Expose-Headers: Content-Range/);
    open = await openUrl(fileUrl('v1_flat.tensors', 'noexpose'));
    assert.match(open.error, /Access-Control-Expose-Headers: Content-Range/);
  });
});

describe('other formats', () => {
  test('a safetensors file opens', async () => {
    const p = path.join(CACHE, 'model.safetensors');
    const bytes = fs.readFileSync(p);
    const n = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8'));
    const want = Object.entries(header)
      .filter(([k]) => k !== '__metadata__')
      .sort((a, b) => a[1].data_offsets[0] - b[1].data_offsets[0]);
    for (const open of [await openFile(p), await openUrl(fileUrl('model.safetensors'))]) {
      assert.equal(open.error, undefined, open.error);
      assert.equal(open.format, 'safetensors');
      const rows = await viewRows();
      assert.deepEqual(rows.map((r) => r.name), want.map(([k]) => k));
      assert.deepEqual(rows.map((r) => r.dtype), want.map(([, v]) => v.dtype));
      assert.deepEqual(rows.map((r) => r.shape), want.map(([, v]) => v.shape));
      assert.deepEqual(rows.map((r) => r.data_offset), want.map(([, v]) => 8 + n + v.data_offsets[0]));
    }
    const fields = await page.textContent('#header-table');
    assert.match(fields, /__metadata__\.note/);
  });

});

// ---------- findings, parameters, fingerprint, compare ----------

const haveTzr = fs.existsSync(TZR);
const noTzr = !haveTzr && `no ${TZR}`;

/** `tzr ARGS... --json`'s report (exit codes 0 and 1 both report). */
function tzrJson(...args) {
  const r = spawnSync(TZR, [...args, '--json'], { encoding: 'utf8', maxBuffer: 64 * MIB });
  assert.ok(r.status === 0 || r.status === 1, `tzr ${args.join(' ')}: ${r.status} ${r.stderr}`);
  return JSON.parse(r.stdout);
}

async function scanned() {
  await page.waitForFunction(() => {
    const s = window.__inspector.state.scan;
    return s && !s.running;
  }, null, { timeout: 60000 });
  return page.evaluate(() => window.__inspector.state.scan);
}

async function pageFingerprint({ keyFile = null } = {}) {
  if (keyFile) await page.setInputFiles('#key-file', keyFile);
  else await page.evaluate(() => { document.getElementById('key-file').value = ''; });
  await page.click('#fingerprint-start');
  await page.waitForFunction(() => {
    const f = window.__inspector.state.fingerprint;
    return f && !f.running;
  }, null, { timeout: 120000 });
  return page.evaluate(() => window.__inspector.state.fingerprint);
}

describe('findings', () => {
  test('a GGUF file opens from its header only, from a file and a URL, with the scanner\'s findings', { skip: noTzr }, async () => {
    const p = path.join(files, 'model.gguf');
    const size = fs.statSync(p).size;
    const dataStart = size - GGUF_DATA;
    for (const how of ['file', 'url']) {
      const since = logLines();
      const open = how === 'file' ? await openFile(p) : await openUrl(fileUrl('model.gguf'));
      assert.equal(open.error, undefined, open.error);
      assert.equal(open.format, 'gguf');
      const rows = await viewRows();
      assert.deepEqual(rows.map((r) => r.name), GGUF_TENSORS.map(([n]) => n));
      assert.deepEqual(rows.map((r) => r.dtype), ['F32', 'Q8_0', 'F16']);
      assert.deepEqual(rows.map((r) => r.shape), GGUF_TENSORS.map(([, d]) => d));
      assert.deepEqual(rows.map((r) => r.data_offset), GGUF_TENSORS.map(([, , , o]) => dataStart + o));
      const fields = await page.textContent('#header-table');
      assert.match(fields, /general\.architecture\s*llama/);
      assert.match(fields, /GGUF version\s*3/);
      assert.equal(await page.isDisabled('#verify-start'), true);
      // The first 64 KiB, then what the parser asks for, at least doubling:
      // at most twice the header, never the data area.
      assert.ok(open.reads <= 3, `${open.reads} reads`);
      assert.ok(open.bytesRead <= 2 * dataStart, `${open.bytesRead} of ${size}`);
      if (how === 'url') {
        assert.ok(servedBytes('model.gguf', since).bytes <= 2 * dataStart);
        await page.click('#scan-start');
      }
      const got = await scanned();
      assert.equal(got.error, undefined, got.error);
      const want = tzrJson('scan', p);
      assert.equal(got.format, 'gguf');
      assert.deepEqual(got.findings, want.findings);
      assert.ok(got.findings.some((f) => f.rule === 'GGUF-006' && f.executes_code), JSON.stringify(got.findings));
    }
  });

  test('the page shows the findings tzr scan --json reports, hostile files included', { skip: noTzr }, async () => {
    const cases = [
      path.join(VECTORS, 'torch/hostile_os_system.pt'), // a pickle that calls os.system
      path.join(files, 'overlap.safetensors'), // tensors that overlap
      path.join(files, 'truncated.tensors'), // cut inside the index
      path.join(VECTORS, 'v1_flat.tensors'), // clean
    ];
    for (const p of cases) {
      await openFile(p);
      const got = await scanned();
      assert.equal(got.error, undefined, `${p}: ${got.error}`);
      const want = tzrJson('scan', p);
      assert.equal(got.format, want.format, p);
      assert.deepEqual(got.findings, want.findings, p);
      const rows = await page.$$eval('#findings-table tr', (r) => r.length);
      assert.equal(rows, want.findings.length ? want.findings.length + 1 : 0, p);
      if (want.findings.length) {
        const first = await page.$$eval('#findings-table tr:nth-child(2) td', (c) => c.map((x) => x.textContent));
        assert.equal(first[0], want.findings[0].rule);
        assert.equal(first[5], want.findings[0].remediation);
      }
    }
    assert.ok(tzrJson('scan', cases[0]).findings.some((f) => f.message.includes('system')));
  });

  test('a file opened from a URL is scanned on request, with synchronous Range requests', { skip: noTzr }, async () => {
    for (const name of ['dtypes.pt', 'truncated.tensors']) {
      await openUrl(fileUrl(name));
      // Opening reads only the header and index: the scan waits for the button.
      assert.equal(await page.evaluate(() => window.__inspector.state.scan), null);
      const since = logLines();
      await page.click('#scan-start');
      const got = await scanned();
      assert.equal(got.error, undefined, `${name}: ${got.error}`);
      assert.deepEqual(got.findings, tzrJson('scan', path.join(files, name)).findings, name);
      assert.ok(got.reads >= 1 && servedBytes(name, since).requests >= 1, name);
    }
  });
});

describe('parameters and modules', () => {
  test('parameter counts by dtype, in total and per top-level module', async () => {
    const p = path.join(CACHE, 'model.safetensors');
    await openFile(p);
    const bytes = fs.readFileSync(p);
    const n = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8'));
    delete header.__metadata__;
    const numel = (shape) => shape.reduce((a, b) => a * b, 1);
    const want = { params: 0, by_dtype: {}, by_module: {} };
    for (const [name, t] of Object.entries(header)) {
      want.params += numel(t.shape);
      want.by_dtype[t.dtype] = (want.by_dtype[t.dtype] || 0) + numel(t.shape);
      const m = name.split('.')[0];
      want.by_module[m] = (want.by_module[m] || 0) + numel(t.shape);
    }
    const totals = await page.evaluate(() => window.__inspector.state.summary.totals);
    assert.equal(totals.params, want.params);
    assert.deepEqual(Object.fromEntries(Object.entries(totals.by_dtype).map(([k, v]) => [k, v.params])), want.by_dtype);
    assert.deepEqual(Object.fromEntries(Object.entries(totals.by_module).map(([k, v]) => [k, v.params])), want.by_module);
    const modules = await page.$$eval('#module-table tr td:first-child', (c) => c.map((x) => x.textContent));
    assert.deepEqual(modules.sort(), Object.keys(want.by_module).sort());
    assert.match(await page.textContent('#params-total'), new RegExp(want.params.toLocaleString('en-US')));
  });
});

describe('fingerprint and compare', () => {
  test('the page computes the fingerprint tzr fingerprint prints', { skip: noTzr }, async () => {
    const cases = [
      [path.join(VECTORS, 'v1_nested.tensors')],
      [path.join(VECTORS, 'v4_meta.tensors')],
      [path.join(VECTORS, 'v3_enc_key.tensors'), path.join(files, 'key.hex')],
      [path.join(CACHE, 'model.safetensors')],
      [path.join(VECTORS, 'torch/dtypes.pt')],
      [path.join(VECTORS, 'torch/big_endian.pt')],
      [path.join(VECTORS, 'torch/views.pt')],
    ];
    for (const [p, keyFile] of cases) {
      const open = await openFile(p);
      assert.equal(open.error, undefined, `${p}: ${open.error}`);
      const fp = await pageFingerprint({ keyFile });
      assert.equal(fp.error, undefined, `${p}: ${fp.error}`);
      const want = keyFile ? tzrJson('fingerprint', '--key-file', keyFile, p) : tzrJson('fingerprint', p);
      assert.equal(fp.report.fingerprint, want.fingerprint, p);
      assert.deepEqual(fp.report.tensors, want.tensors, p);
      assert.equal(fp.report.data_bytes, want.data_bytes, p);
      assert.equal(await page.textContent('#fingerprint-value'), want.fingerprint);
    }
  });

  test('comparing two files lists what tzr diff lists', { skip: noTzr }, async () => {
    // The same weights in another format, then a flipped byte.
    const st = path.join(tmp, 'flat.safetensors');
    const conv = spawnSync(TZR, ['convert', path.join(VECTORS, 'v1_flat.tensors'), st], { encoding: 'utf8' });
    assert.equal(conv.status, 0, conv.stderr);
    for (const [a, b] of [[path.join(VECTORS, 'v1_flat.tensors'), st], [path.join(VECTORS, 'v1_flat.tensors'), path.join(files, 'flipped.tensors')],
      [path.join(VECTORS, 'v1_flat.tensors'), path.join(VECTORS, 'v1_nested.tensors')]]) {
      await openFile(a);
      await page.setInputFiles('#compare-input', b);
      await page.waitForFunction(() => {
        const c = window.__inspector.state.compare;
        return c && !c.running;
      }, null, { timeout: 120000 });
      const got = await page.evaluate(() => window.__inspector.state.compare);
      assert.equal(got.error, undefined, got.error);
      const want = tzrJson('diff', a, b);
      for (const k of ['same', 'fingerprint_a', 'fingerprint_b', 'added', 'removed', 'renamed', 'changed', 'changes']) {
        assert.deepEqual(got.report[k], want[k], `${a} vs ${b}: ${k}`);
      }
      const rows = await page.$$eval('#compare-table tr', (r) => r.length);
      assert.equal(rows, want.changes.length + 1);
    }
  });
});

/**
 * Starts `tzr view ARGS` outside the repository with the page built into
 * it: { child, url, stderr() } once it has printed its address.
 */
async function startView(args, extraEnv = {}) {
  const env = { ...process.env, ...extraEnv };
  delete env.TZR_VIEW_ASSETS;
  const child = spawn(TZR, ['view', ...args], { cwd: os.tmpdir(), env, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => { err += d; });
  const url = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(out.split('\n')[0].trim());
    });
    child.once('exit', (code) => reject(new Error(`tzr view exited with ${code}: ${err}`)));
  });
  return { child, url, stderr: () => err };
}

/** Resolves once `check()` is true (polled), or after 10 s. */
async function eventually(check) {
  const until = Date.now() + 10000;
  while (!check() && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
}

/** A new page at `url`, after its first open finished (or at once with `opened` false). */
async function viewPageAt(url, { opened = true } = {}) {
  const viewPage = await page.context().newPage();
  await viewPage.goto(url);
  await viewPage.waitForFunction((o) => window.__inspector && (!o || window.__inspector.state.opens > 0), opened,
    { timeout: 30000 });
  return viewPage;
}

describe('tzr view', () => {
  const noTzr = !fs.existsSync(TZR) && `no ${TZR}`;

  test('serves the page built into it and a local file on 127.0.0.1, from any directory', { skip: noTzr }, async () => {
    const v = vector('v5_long.tensors');
    const given = path.join(VECTORS, v.file);
    const { child, url } = await startView([given]);
    try {
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/[0-9a-f]{32}\/\?url=/);
      const viewPage = await viewPageAt(url);
      try {
        const open = await viewPage.evaluate(() => window.__inspector.state.lastOpen);
        assert.equal(open.error, undefined, open.error);
        assertMatchesManifest(await viewPage.evaluate(() => window.__inspector.view()), v);
        // The file's name, not the URL with its per-run token.
        assert.equal(await viewPage.title(), `${v.file} · tensorizer inspector`);
        const head = await viewPage.$$eval('#header-table tr', (rows) =>
          Object.fromEntries(rows.map((r) => [r.querySelector('th').textContent, r.querySelector('td').textContent])));
        assert.equal(head.file, given);
        assert.equal(await viewPage.inputValue('#url-input'), '');
        assert.ok((await viewPage.textContent('#status')).startsWith(`opened ${given} (tensorizer`));
        // A local file: scanned and its stored hashes read at once, no button to press.
        await viewPage.waitForFunction(() => window.__inspector.state.scan && !window.__inspector.state.scan.running
          && window.__inspector.state.hashes.size > 0, null, { timeout: 30000 });
        assert.equal(await viewPage.isVisible('#scan-offer'), false);
        assert.equal(await viewPage.isVisible('#read-hashes'), false);
        assert.equal(await viewPage.isVisible('#danger'), false);
        assert.match(await viewPage.textContent('#findings-status'), /no findings/);
        await viewPage.click('#verify-start');
        await viewPage.waitForFunction(() => window.__inspector.state.verifyRun && !window.__inspector.state.verifyRun.running,
          null, { timeout: 60000 });
        const run = await viewPage.evaluate(() => window.__inspector.state.verifyRun);
        assert.equal(run.ok, true, JSON.stringify(run));
      } finally {
        await viewPage.close();
      }
    } finally {
      child.kill('SIGTERM');
    }
  });

  test('a file that would run code: said first, in the terminal and the page, findings without Scan', { skip: noTzr }, async () => {
    const given = path.join(VECTORS, 'torch/hostile_os_system.pt');
    const { child, url, stderr } = await startView([given]);
    try {
      await eventually(() => stderr().includes('serving'));
      assert.match(stderr().split('\n')[0], /^tzr view: .*hostile_os_system\.pt: This file would execute code when loaded: PKL-00[12] /);
      const viewPage = await viewPageAt(url);
      try {
        await viewPage.waitForFunction(() => window.__inspector.state.scan && !window.__inspector.state.scan.running,
          null, { timeout: 30000 });
        assert.equal(await viewPage.isVisible('#danger'), true);
        assert.match(await viewPage.textContent('#danger'), /^⚠ This file would execute code when loaded: PKL-00[12] .*system/);
        // The warning comes before everything else the page says.
        const order = await viewPage.evaluate(() => {
          const d = document.getElementById('danger');
          return ['error', 'status', 'findings-panel'].map((id) =>
            Boolean(d.compareDocumentPosition(document.getElementById(id)) & Node.DOCUMENT_POSITION_FOLLOWING));
        });
        assert.deepEqual(order, [true, true, true]);
        assert.equal(await viewPage.isVisible('#scan-offer'), false);
        const rules = await viewPage.$$eval('#findings-table tr td:first-child', (cells) => cells.map((c) => c.textContent));
        assert.deepEqual(rules, tzrJson('scan', given).findings.map((f) => f.rule));
        assert.equal(await viewPage.title(), 'hostile_os_system.pt · tensorizer inspector');
      } finally {
        await viewPage.close();
      }
    } finally {
      child.kill('SIGTERM');
    }
  });

  test('with no file, serves the empty inspector, which opens a file given to it', { skip: noTzr }, async () => {
    const { child, url, stderr } = await startView([]);
    try {
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/[0-9a-f]{32}\/$/);
      await eventually(() => stderr().includes('serving'));
      assert.match(stderr(), /serving the empty inspector/);
      const viewPage = await viewPageAt(url, { opened: false });
      try {
        await viewPage.evaluate(() => window.__inspector.ready);
        assert.equal(await viewPage.title(), 'tensorizer inspector');
        assert.equal(await viewPage.isVisible('#details'), false);
        assert.equal(await viewPage.isVisible('#error'), false);
        await viewPage.setInputFiles('#file-input', path.join(VECTORS, 'v1_flat.tensors'));
        await viewPage.waitForFunction(() => window.__inspector.state.opens > 0, null, { timeout: 30000 });
        assert.equal(await viewPage.evaluate(() => window.__inspector.state.lastOpen.error), undefined);
        assert.equal(await viewPage.title(), 'v1_flat.tensors · tensorizer inspector');
      } finally {
        await viewPage.close();
      }
    } finally {
      child.kill('SIGTERM');
    }
  });

  test('--open hands the address to $BROWSER, and a failure is one line while serving goes on', { skip: noTzr }, async () => {
    const script = path.join(tmp, 'browser.sh');
    const got = path.join(tmp, 'browser-got');
    fs.writeFileSync(script, `#!/bin/sh\necho "$1" > '${got}'\n`, { mode: 0o755 });
    let view = await startView(['--open', path.join(VECTORS, 'v1_flat.tensors')], { BROWSER: script });
    try {
      await eventually(() => fs.existsSync(got) && fs.readFileSync(got, 'utf8').includes('\n'));
      assert.equal(fs.readFileSync(got, 'utf8').trim(), view.url);
    } finally {
      view.child.kill('SIGTERM');
    }
    view = await startView(['--open'], { BROWSER: '/no/such/browser' });
    try {
      await eventually(() => view.stderr().includes('could not open'));
      const lines = view.stderr().trim().split('\n');
      assert.equal(lines.filter((l) => l.includes('could not open')).length, 1, view.stderr());
      assert.match(view.stderr(), /tzr view: could not open a browser \(\/no\/such\/browser: no such file\); open the address above/);
      const res = await fetch(view.url);
      assert.equal(res.status, 200);
      assert.equal(view.child.exitCode, null);
    } finally {
      view.child.kill('SIGTERM');
    }
  });

  test('says what a page directory must hold when --assets names another', { skip: noTzr }, async () => {
    const child = spawn(TZR, ['view', '--assets', tmp, path.join(VECTORS, 'v1_flat.tensors')], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => { err += d; });
    const code = await new Promise((resolve) => child.once('close', resolve));
    assert.equal(code, 3);
    assert.match(err, /is not a built inspector page.*tzr view --write-page DIR/);
  });
});

describe('sizes and speed', () => {
  test('inspecting a 1 GiB file over a URL fetches under 1 MiB', async () => {
    const size = fs.statSync(path.join(CACHE, 'big_1gib.tensors')).size;
    assert.ok(size >= 1 << 30);
    const since = logLines();
    const open = await openUrl(fileUrl('big_1gib.tensors'));
    assert.equal(open.error, undefined, open.error);
    // nginx logs a request once its response is sent, a moment after the
    // page has its bytes: wait (up to 2 s) for the log to catch up.
    let served = servedBytes('big_1gib.tensors', since);
    for (let i = 0; i < 50 && served.bytes < open.bytesFetched; i++) {
      await new Promise((resolve) => setTimeout(resolve, 40));
      served = servedBytes('big_1gib.tensors', since);
    }
    console.log(`# 1 GiB file (${size} bytes): ${open.requests} requests, ${open.bytesFetched} bytes fetched by the page, ` +
      `${served.bytes} body bytes sent by nginx in ${served.requests} requests`);
    assert.ok(open.bytesFetched < MIB && served.bytes < MIB);
    assert.equal(served.bytes, open.bytesFetched);
  });

  test('a 20,000-tensor index opens quickly and renders only the visible rows', async () => {
    // Best of five: the page's own background work (reading the stored
    // hashes) is let finish first, but other load on the machine is not
    // under the test's control.
    const times = [];
    for (let i = 0; i < 5; i++) {
      const open = await openFile(path.join(CACHE, 'many_20k.tensors'));
      assert.equal(open.error, undefined, open.error);
      assert.equal(open.tensors, 20000);
      times.push(open.ms);
      await page.waitForFunction(() => window.__inspector.state.hashes.size === 20000, null, { timeout: 60000 });
    }
    const best = Math.min(...times);
    // The scanner ran too, in a worker (FileReaderSync reads).
    const scan = await scanned();
    assert.equal(scan.tensors, 20000);
    assert.deepEqual(scan.findings, []);
    console.log(`# 20,000-tensor file scanned in the page's worker in ${scan.ms.toFixed(1)} ms (${scan.reads} reads)`);
    assert.ok(scan.ms <= OPEN_20K_SANITY_MS, `scan: ${scan.ms} ms`);
    const phases = await page.evaluate(() => window.__inspector.state.lastOpen.phases);
    console.log(`# 20,000-tensor index opened in ${times.map((t) => t.toFixed(1)).join(', ')} ms (best ${best.toFixed(1)} ms; ` +
      `last: ${Object.entries(phases).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(', ')})`);
    assert.ok(best <= OPEN_20K_SANITY_MS, `${best} ms`);
    // The table is virtual: only the visible rows are in the page.
    assert.ok((await page.$$('#tbody .row')).length < 200);
    await page.evaluate(() => { document.getElementById('table-wrap').scrollTop = 24 * 15000; });
    await page.waitForFunction(() => [...document.querySelectorAll('#tbody .row')].some((r) => r.dataset.index === '15000'));
  });

  test('in-browser verify throughput on the 1 GiB file', async () => {
    await openFile(path.join(CACHE, 'big_1gib.tensors'));
    const run = await verify();
    assert.equal(run.ok, true, JSON.stringify(run));
    console.log(`# verify in the browser (${run.workers} workers): ${run.data_bytes_checked} bytes in ${(run.ms / 1000).toFixed(2)} s = ${run.mbPerS.toFixed(1)} MB/s`);
  });

  test('screenshot', async () => {
    await openFile(path.join(VECTORS, 'v2_dtypes.tensors'));
    await verify();
    await page.waitForFunction(() => window.__inspector.state.hashes.size > 0);
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'inspector.png'), fullPage: true });
  });
});
