// The inspector page: opens a local file (picker or drop) or a URL (Range
// requests), shows its header, totals and tensors, and runs "Verify" in a
// module worker. The wasm module (pkg/, built by host-wasm/browser-test.sh)
// does all parsing and hashing.

import init, { diff, inspect, storedHashes, version } from './pkg/tensorizer_wasm.js';
import { openRemote } from './remote.js';

const $ = (id) => document.getElementById(id);
const ROW_H = 24;
const OVERSCAN = 20;

const wasmReady = init().then(() => {
  $('version').textContent = `v${version()}`;
});

const state = {
  source: null, // { kind: 'file', file } | { kind: 'url', url, remote, name?, local? }
  summary: null,
  rows: [],
  view: [], // indices into rows, filtered and sorted
  sort: { key: 'index', dir: 1 },
  filter: '',
  mode: 'table',
  hashes: new Map(), // row index -> { crc32, sha256, error }
  results: new Map(), // row index -> verification result
  workers: null, // the running verification's workers
  stats: { requests: 0, bytes: 0 }, // URL mode: requests made, body bytes fetched
  lastOpen: null,
  openText: '', // the status line of the last open, kept as others are added
  verifyRun: null,
  scan: null, // the scanner's report (tzr scan --json), or { error } / { running }
  scanOffer: false, // a URL is open and may be scanned on request
  fingerprint: null, // { report, ms } (tzr fingerprint --json), or { error } / { running }
  compare: null, // { report, other } (tzr diff --json), or { error } / { running }
  jobs: new Set(), // running scan/fingerprint workers
  openSeq: 0,
  opens: 0, // opens finished, successful or not (tests wait on it)
};

// ---------- formatting ----------

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
function fmtBytes(n) {
  if (n === null || n === undefined) return '';
  let v = n;
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${UNITS[u]}`;
}
const fmtCount = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} K` : `${n}`);
const fmtInt = (n) => (n === null || n === undefined ? '' : n.toLocaleString('en-US'));
const fmtShape = (s) => `[${s.join(', ')}]`;
const oneLine = (s) => String(s).replace(/[\u0000-\u001f\u007f]/g, (c) => `\\u{${c.charCodeAt(0).toString(16)}}`);

function errorLine(e) {
  if (typeof e === 'string') return oneLine(e);
  return oneLine((e && e.message) || String(e));
}

function showError(line) {
  const el = $('error');
  el.textContent = line || '';
  el.title = line || '';
  el.hidden = !line;
}
const setStatus = (text) => {
  $('status').textContent = text;
};

// ---------- opening ----------

async function openSource(source) {
  const seq = ++state.openSeq;
  cancelVerify('');
  cancelJobs();
  state.scan = null;
  state.scanOffer = false;
  renderFindings();
  showError('');
  setStatus('opening…');
  setTitle(source);
  const t0 = performance.now();
  const stats = { requests: 0, bytes: 0 };
  try {
    await wasmReady;
    let src;
    let len;
    let name;
    if (source.kind === 'file') {
      src = source.file;
      len = source.file.size;
      name = source.file.name;
    } else {
      source.remote = await openRemote(source.url, stats);
      src = source.remote.read;
      len = source.remote.len;
      name = sourceName(source);
    }
    const t1 = performance.now();
    const json = await inspect(src, len, name);
    const t2 = performance.now();
    const summary = JSON.parse(json);
    summary.tensors = expandRows(summary.columns);
    delete summary.columns;
    const t3 = performance.now();
    if (seq !== state.openSeq) return;
    state.source = source;
    state.stats = stats;
    state.summary = summary;
    state.rows = summary.tensors;
    state.hashes = new Map();
    state.results = new Map();
    state.verifyRun = null;
    state.scan = null;
    state.fingerprint = null;
    state.compare = null;
    $('compare-input').value = '';
    renderAll();
    const ms = performance.now() - t0;
    state.lastOpen = {
      ms,
      phases: { connect: t1 - t0, inspect: t2 - t1, parse: t3 - t2, render: performance.now() - t3 },
      format: summary.format,
      tensors: summary.tensor_count,
      reads: summary.reads,
      bytesRead: summary.bytes_read,
      requests: stats.requests,
      bytesFetched: stats.bytes,
    };
    let text = `opened ${name} (${summary.format}, ${fmtBytes(summary.file_bytes)}) in ${ms.toFixed(1)} ms: ` +
      `${summary.reads} reads, ${fmtInt(summary.bytes_read)} bytes read`;
    if (source.kind === 'url') text += `; ${stats.requests} requests, ${fmtInt(stats.bytes)} bytes fetched`;
    state.openText = text;
    setStatus(text);
    state.opens += 1;
    if (summary.format === 'tensorizer' && isLocal(source)) loadHashes();
    if (isLocal(source)) startScan();
    else {
      state.scanOffer = true;
      renderFindings();
    }
  } catch (e) {
    if (seq !== state.openSeq) return;
    state.summary = null;
    state.lastOpen = { error: errorLine(e), requests: stats.requests, bytesFetched: stats.bytes };
    $('details').hidden = true;
    setStatus('');
    showError(errorLine(e));
    state.opens += 1;
    // The scanner reports on files the inspector refuses (that is what
    // it is for).
    if (source.kind === 'file' || source.remote) {
      state.source = source;
      if (isLocal(source)) startScan();
      else {
        state.scanOffer = true;
        renderFindings();
      }
    }
  }
}

/** Whether a format stores anything Verify can check (safetensors and GGUF store no checksums). */
const hasChecksums = (format) => format !== 'safetensors' && format !== 'gguf';

/** The name a source is shown by: a file's name, the name `tzr view` gave, or the URL. */
const sourceName = (source) => (source.kind === 'file' ? source.file.name : source.name ?? source.url);

/**
 * Whether a source is on this machine: a local file, or the one `tzr view`
 * serves beside this page (same origin). Those are scanned, and their stored
 * hashes read, at once; a URL elsewhere on request.
 */
const isLocal = (source) => source.kind === 'file' || Boolean(source.local);

/** The page's title: the file's last path component. */
function setTitle(source) {
  const name = sourceName(source);
  let last = name;
  if (source.kind === 'url' && !source.name) {
    try {
      last = decodeURIComponent(new URL(name).pathname.split('/').pop()) || name;
    } catch {
      last = name;
    }
  } else {
    last = name.split(/[\\/]/).pop() || name;
  }
  document.title = `${oneLine(last)} · tensorizer inspector`;
}

// The module sends rows as columns (smaller, and faster to parse for
// files with many tensors); the page works on one object per row.
function expandRows(c) {
  const rows = new Array(c.count);
  for (let i = 0; i < c.count; i++) {
    const name = c.name[i];
    rows[i] = {
      index: i,
      name,
      path: c.path[i] ?? [name],
      dtype: c.dtypes[c.dtype[i]],
      dtype_string: c.dtype_strings[c.dtype_string[i]],
      shape: c.shape[i],
      bytes: c.bytes[i],
      data_offset: c.data_offset[i],
      data_length: c.data_length[i],
      kind: c.kinds[c.kind[i]],
      meta: c.meta[i] === 1,
    };
  }
  return rows;
}

function sourceArgs() {
  const s = state.source;
  return s.kind === 'file' ? [s.file, s.file.size] : [s.remote.read, s.remote.len];
}

async function loadHashes() {
  const seq = state.openSeq;
  const btn = $('read-hashes');
  btn.disabled = true;
  try {
    const [src, len] = sourceArgs();
    const rows = JSON.parse(await storedHashes(src, len, 0, state.rows.length));
    if (seq !== state.openSeq) return;
    for (const h of rows) state.hashes.set(h.index, h);
    btn.hidden = true;
    renderRows();
    if (state.source.kind === 'url') {
      setStatus(`${state.openText}; stored hashes read: ${state.stats.requests} requests, ` +
        `${fmtInt(state.stats.bytes)} bytes fetched in all`);
    }
  } catch (e) {
    if (seq === state.openSeq) showError(`reading stored hashes: ${errorLine(e)}`);
  } finally {
    btn.disabled = false;
  }
}

// ---------- rendering ----------

/** Most top-level modules the table lists (largest first). */
const MAX_MODULES = 25;

/** Fills a table: the first row as headers, the others as cells. */
function fillGrid(table, rows) {
  table.replaceChildren(
    ...rows.map((cells, i) => {
      const tr = document.createElement('tr');
      for (const c of cells) {
        const cell = document.createElement(i === 0 ? 'th' : 'td');
        cell.textContent = c;
        tr.append(cell);
      }
      return tr;
    }),
  );
}

const COLUMNS = [
  { key: 'index', label: '#', cls: 'num', get: (r) => r.index, text: (r) => r.index },
  { key: 'name', label: 'name', get: (r) => r.name, text: (r) => oneLine(r.name) },
  { key: 'dtype', label: 'dtype', get: (r) => r.dtype, text: (r) => r.dtype, title: (r) => `stored as ${r.dtype_string}` },
  { key: 'shape', label: 'shape', get: (r) => r.shape.reduce((a, b) => a * b, 1), text: (r) => fmtShape(r.shape) },
  { key: 'bytes', label: 'bytes', cls: 'num', get: (r) => r.bytes, text: (r) => fmtInt(r.bytes) },
  { key: 'data_offset', label: 'data offset', cls: 'num', get: (r) => r.data_offset ?? -1, text: (r) => fmtInt(r.data_offset) },
  { key: 'kind', label: 'kind', get: (r) => r.kind, text: (r) => (r.meta ? `${r.kind} (meta)` : r.kind) },
  { key: 'crc32', label: 'CRC-32', cls: 'mono', get: (r) => state.hashes.get(r.index)?.crc32 ?? '', text: (r) => hashText(r, 'crc32') },
  { key: 'sha256', label: 'SHA-256', cls: 'mono', get: (r) => state.hashes.get(r.index)?.sha256 ?? '', text: (r) => hashText(r, 'sha256') },
  { key: 'status', label: 'verify', get: (r) => state.results.get(r.index)?.status ?? '', text: (r) => statusText(r) },
];

function hashText(r, kind) {
  const h = state.hashes.get(r.index);
  if (!h) return '';
  if (h.error) return kind === 'crc32' ? 'error' : h.error;
  return h[kind] ?? '—';
}

function statusText(r) {
  const v = state.results.get(r.index);
  return v ? v.status : '';
}

function renderAll() {
  const s = state.summary;
  $('details').hidden = false;
  // File panel.
  const head = [
    ['format', s.format],
    ['file', s.file],
    ['size', `${fmtInt(s.file_bytes)} bytes (${fmtBytes(s.file_bytes)})`],
    ['tensors', fmtInt(s.tensor_count)],
    ['data', `${fmtInt(s.data_bytes)} bytes (${fmtBytes(s.data_bytes)})`],
    ['encryption', s.encrypted ? 'encrypted (XSalsa20-Poly1305)' : 'none'],
    ...s.header,
  ];
  const table = $('header-table');
  table.replaceChildren(
    ...head.map(([k, v]) => {
      const tr = document.createElement('tr');
      const th = document.createElement('th');
      th.textContent = k;
      const td = document.createElement('td');
      td.textContent = oneLine(typeof v === 'string' ? v : JSON.stringify(v));
      tr.append(th, td);
      return tr;
    }),
  );
  // Parameters (elements) and bytes, by dtype and by top-level module.
  const t = s.totals;
  $('params-total').textContent = `${fmtInt(t.params)} in all (${fmtCount(t.params)})`;
  const totalRows = (entries) => entries.map(([name, x]) =>
    [oneLine(name), fmtInt(x.tensors), fmtInt(x.params), fmtBytes(x.bytes), fmtBytes(x.data_bytes)]);
  fillGrid($('dtype-table'), [['dtype', 'tensors', 'params', 'bytes', 'stored'],
    ...totalRows(Object.entries(t.by_dtype)), ['all', fmtInt(t.tensors), fmtInt(t.params), fmtBytes(t.bytes), fmtBytes(t.data_bytes)]]);
  const modules = Object.entries(t.by_module).sort((a, b) => b[1].bytes - a[1].bytes || (a[0] < b[0] ? -1 : 1));
  const shown = modules.slice(0, MAX_MODULES);
  const moduleRows = [['module', 'tensors', 'params', 'bytes', 'stored'], ...totalRows(shown)];
  if (modules.length > shown.length) moduleRows.push([`${fmtInt(modules.length - shown.length)} more`, '', '', '', '']);
  fillGrid($('module-table'), moduleRows);
  // Findings, fingerprint, compare.
  renderFindings();
  renderFingerprint();
  renderCompare();
  // Verify panel.
  $('verify-what').textContent = `Verify ${s.verify}.`;
  $('key-inputs').hidden = !s.encrypted;
  $('verify-start').disabled = !hasChecksums(s.format);
  $('verify-progress').value = 0;
  $('verify-status').textContent = '';
  $('read-hashes').hidden = !(s.format === 'tensorizer' && !isLocal(state.source));
  // Tensors.
  renderHead();
  applyView();
}

function renderHead() {
  const head = $('thead');
  head.replaceChildren(
    ...COLUMNS.map((c) => {
      const span = document.createElement('span');
      span.textContent = c.label;
      span.dataset.key = c.key;
      if (c.cls) span.className = c.cls;
      if (state.sort.key === c.key) span.classList.add('sorted', ...(state.sort.dir < 0 ? ['desc'] : []));
      return span;
    }),
  );
}

function applyView() {
  const q = state.filter.trim().toLowerCase();
  let view = [];
  for (let i = 0; i < state.rows.length; i++) {
    const r = state.rows[i];
    if (!q || r.name.toLowerCase().includes(q) || r.dtype.toLowerCase() === q) view.push(i);
  }
  const col = COLUMNS.find((c) => c.key === state.sort.key);
  if (col && col.key !== 'index') {
    const keys = new Map(view.map((i) => [i, col.get(state.rows[i])]));
    const dir = state.sort.dir;
    view.sort((a, b) => {
      const ka = keys.get(a);
      const kb = keys.get(b);
      return (ka < kb ? -1 : ka > kb ? 1 : a - b) * dir;
    });
  } else if (state.sort.dir < 0) {
    view.reverse();
  }
  state.view = view;
  $('count').textContent = q ? `${fmtInt(view.length)} of ${fmtInt(state.rows.length)}` : fmtInt(state.rows.length);
  $('tbody').style.height = `${view.length * ROW_H}px`;
  renderRows(true);
  if (state.mode === 'tree') renderTree();
}

let lastRange = null;
function renderRows(force = true) {
  const wrap = $('table-wrap');
  const body = $('tbody');
  const headH = $('thead').offsetHeight || ROW_H;
  const top = Math.max(0, wrap.scrollTop - headH);
  const first = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
  const last = Math.min(state.view.length, Math.ceil((top + wrap.clientHeight) / ROW_H) + OVERSCAN);
  const key = `${first}:${last}`;
  if (!force && key === lastRange) return;
  lastRange = key;
  const frag = document.createDocumentFragment();
  for (let v = first; v < last; v++) {
    const r = state.rows[state.view[v]];
    const row = document.createElement('div');
    row.className = 'row';
    row.style.top = `${v * ROW_H}px`;
    row.dataset.index = r.index;
    for (const c of COLUMNS) {
      const span = document.createElement('span');
      const t = String(c.text(r));
      span.textContent = t;
      if (c.cls) span.className = c.cls;
      if (c.key === 'status') {
        const res = state.results.get(r.index);
        if (res) {
          span.className = res.status === 'verified' ? 'ok' : res.status === 'failed' ? 'bad' : 'warn';
          span.title = res.line || res.checks.join(', ');
        }
      } else if (c.title) {
        span.title = c.title(r);
      } else if (t.length > 12) {
        span.title = t;
      }
      row.append(span);
    }
    frag.append(row);
  }
  body.replaceChildren(frag);
}

// ---------- tree ----------

function treePath(r) {
  if (r.path.length === 1 && typeof r.path[0] === 'string') return r.path[0].split('.');
  return r.path.map((p) => (typeof p === 'number' ? `[${p}]` : p));
}

function buildTree(indices) {
  const root = { name: '', children: new Map(), leaves: [], count: 0, bytes: 0 };
  for (const i of indices) {
    const r = state.rows[i];
    const parts = treePath(r);
    let node = root;
    node.count += 1;
    node.bytes += r.bytes;
    for (let k = 0; k < parts.length - 1; k++) {
      let child = node.children.get(parts[k]);
      if (!child) {
        child = { name: parts[k], children: new Map(), leaves: [], count: 0, bytes: 0 };
        node.children.set(parts[k], child);
      }
      node = child;
      node.count += 1;
      node.bytes += r.bytes;
    }
    node.leaves.push({ label: parts[parts.length - 1], row: r });
  }
  return root;
}

function renderNode(node, container) {
  const frag = document.createDocumentFragment();
  for (const child of node.children.values()) {
    const d = document.createElement('details');
    const s = document.createElement('summary');
    s.textContent = oneLine(child.name);
    const meta = document.createElement('span');
    meta.className = 'meta';
    meta.textContent = `${fmtInt(child.count)} tensors, ${fmtBytes(child.bytes)}`;
    s.append(meta);
    d.append(s);
    d.addEventListener('toggle', () => {
      if (d.open && !d.dataset.filled) {
        d.dataset.filled = '1';
        renderNode(child, d);
      }
    });
    frag.append(d);
  }
  for (const { label, row } of node.leaves) {
    const div = document.createElement('div');
    div.className = 'leaf';
    div.textContent = oneLine(label);
    const meta = document.createElement('span');
    meta.className = 'meta';
    const res = state.results.get(row.index);
    meta.textContent = `${row.dtype} ${fmtShape(row.shape)} ${fmtBytes(row.bytes)}${res ? ` · ${res.status}` : ''}`;
    div.append(meta);
    frag.append(div);
  }
  container.append(frag);
}

function renderTree() {
  const tree = $('tree');
  tree.replaceChildren();
  const root = buildTree(state.view);
  renderNode(root, tree);
  // Open a lone top-level folder.
  const only = tree.querySelectorAll(':scope > details');
  if (only.length === 1) only[0].open = true;
}

function setMode(mode) {
  state.mode = mode;
  $('mode-table').classList.toggle('on', mode === 'table');
  $('mode-tree').classList.toggle('on', mode === 'tree');
  $('table-wrap').hidden = mode !== 'table';
  $('tree').hidden = mode !== 'tree';
  if (mode === 'tree') renderTree();
  else renderRows(true);
}

// ---------- verify ----------

/** Most workers one verification starts (each one wasm instance). */
const MAX_WORKERS = 4;

async function startVerify() {
  if (!state.summary || state.workers) return;
  showError('');
  let key = null;
  const keyFile = $('key-file').files[0];
  if (state.summary.encrypted && keyFile) key = new Uint8Array(await keyFile.arrayBuffer());
  const passphrase = state.summary.encrypted && !key ? $('passphrase').value : '';
  state.results = new Map();
  renderRows(true);
  // A tensorizer file's tensors are split among workers, about evenly by
  // bytes (the module assigns them). A passphrase means one worker: each
  // would run Argon2id with the file's memory cost.
  const withData = state.rows.filter((r) => r.data_length > 0).length;
  const cap = Number(new URLSearchParams(location.search).get('workers')) || MAX_WORKERS; // ?workers=N caps it
  const count = state.summary.format === 'tensorizer' && !passphrase
    ? Math.max(1, Math.min(navigator.hardwareConcurrency || 1, cap, MAX_WORKERS, withData))
    : 1;
  const workers = [];
  const progress = Array.from({ length: count }, () => ({ done: 0, total: 0 }));
  const summaries = [];
  let ms = 0;
  let requests = 0;
  let bytes = 0;
  state.workers = workers;
  state.verifyRun = { running: true, workers: count };
  $('verify-start').disabled = true;
  $('verify-cancel').disabled = false;
  $('verify-progress').value = 0;
  $('verify-status').textContent = 'verifying…';
  $('verify-status').className = 'status';
  let redraw = 0;
  const t0 = performance.now();
  const stop = (line) => {
    state.verifyRun = { error: line };
    $('verify-status').textContent = 'verification stopped';
    $('verify-status').className = 'status bad';
    showError(line);
    finishVerify();
    renderRows(true);
  };
  const finish = () => {
    const s = { ok: true, verified: 0, unverified: 0, failed: 0, data_bytes_checked: 0 };
    for (const x of summaries) {
      s.ok = s.ok && x.ok;
      s.verified += x.verified;
      s.unverified += x.unverified;
      s.failed += x.failed;
      s.data_bytes_checked += x.data_bytes_checked;
    }
    ms = performance.now() - t0;
    const secs = ms / 1000;
    const rate = secs > 0 ? s.data_bytes_checked / secs / 1e6 : 0;
    state.verifyRun = { ...s, ms, mbPerS: rate, requests, bytes, workers: count };
    $('verify-progress').value = 1;
    const firstBad = [...state.results.entries()].sort((a, b) => a[0] - b[0]).find(([, r]) => r.status === 'failed');
    $('verify-status').textContent =
      `${s.ok ? 'OK' : 'FAILED'}: ${fmtInt(s.verified)} verified, ${fmtInt(s.failed)} failed, ` +
      `${fmtInt(s.unverified)} without hashes; ${fmtBytes(s.data_bytes_checked)} in ${secs.toFixed(2)} s ` +
      `(${rate.toFixed(0)} MB/s, ${count} worker${count > 1 ? 's' : ''})`;
    $('verify-status').className = `status ${s.ok ? 'ok' : 'bad'}`;
    if (firstBad) showError(`tensor #${firstBad[0]}: ${firstBad[1].line}`);
    finishVerify();
    renderRows(true);
    if (state.mode === 'tree') renderTree();
  };
  const src = state.source;
  const source = src.kind === 'file' ? src.file : { url: src.url };
  for (let shard = 0; shard < count; shard++) {
    const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
    workers.push(worker);
    worker.onmessage = (e) => {
      const m = e.data;
      if (workers !== state.workers) return;
      if (m.type === 'tensors') {
        for (const [i, res] of m.results) state.results.set(i, res);
        if (!redraw) redraw = requestAnimationFrame(() => { redraw = 0; renderRows(true); });
      } else if (m.type === 'progress') {
        progress[shard] = { done: m.done, total: m.total };
        const done = progress.reduce((a, p) => a + p.done, 0);
        const total = progress.reduce((a, p) => a + p.total, 0);
        $('verify-progress').value = total ? done / total : 0;
        $('verify-status').textContent = `${fmtBytes(done)} of ${fmtBytes(total)} checked`;
      } else if (m.type === 'done') {
        summaries.push(m.summary);
        requests += m.requests;
        bytes += m.bytes;
        if (summaries.length === count) finish();
      } else if (m.type === 'error') {
        stop(m.line);
      }
    };
    worker.onerror = (e) => stop(`the verify worker failed: ${e.message || 'unknown error'}`);
    worker.postMessage({ source, key, passphrase, shard, shards: count });
  }
}

function finishVerify() {
  for (const w of state.workers || []) w.terminate();
  state.workers = null;
  $('verify-start').disabled = !hasChecksums(state.summary?.format);
  $('verify-cancel').disabled = true;
}

function cancelVerify(text = 'cancelled') {
  if (!state.workers) return;
  finishVerify();
  state.verifyRun = { cancelled: true };
  $('verify-status').textContent = text;
  $('verify-status').className = 'status';
}

// ---------- findings, fingerprint, compare ----------

/**
 * Runs one scan or fingerprint job in a worker; resolves to its 'done'
 * message and rejects with its one-line error. `onProgress(done, total)`.
 */
function runJob(job, source, { key = null, passphrase = '', onProgress = null } = {}) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
    state.jobs.add(worker);
    const end = () => {
      worker.terminate();
      state.jobs.delete(worker);
    };
    worker.onmessage = (e) => {
      const m = e.data;
      if (m.type === 'progress' && onProgress) onProgress(m.done, m.total);
      else if (m.type === 'done') { end(); resolve(m); }
      else if (m.type === 'error') { end(); reject(new Error(m.line)); }
    };
    worker.onerror = (e) => { end(); reject(new Error(`the worker failed: ${e.message || 'unknown error'}`)); };
    const src = source.kind === 'file' ? source.file : { url: source.url, len: source.remote.len };
    const name = sourceName(source);
    worker.postMessage({ job, source: src, key, passphrase, name });
  });
}

function cancelJobs() {
  for (const w of state.jobs) w.terminate();
  state.jobs.clear();
}

async function startScan() {
  const seq = state.openSeq;
  state.scan = { running: true };
  renderFindings();
  try {
    const m = await runJob('scan', state.source);
    if (seq !== state.openSeq) return;
    state.scan = { ...m.report, ms: m.ms };
  } catch (e) {
    if (seq !== state.openSeq) return;
    state.scan = { error: errorLine(e) };
  }
  renderFindings();
}

/**
 * Leads the page with a warning when the scan found code that loading would
 * run: the first finding whose rule the core marks `executes_code`.
 */
function renderDanger() {
  const first = state.scan?.findings?.find((f) => f.executes_code);
  const el = $('danger');
  el.hidden = !first;
  el.textContent = first
    ? `⚠ This file would execute code when loaded: ${first.rule} ${oneLine(first.message)}. Do not load it; the findings are below.`
    : '';
}

function renderFindings() {
  renderDanger();
  const r = state.scan;
  const table = $('findings-table');
  const offer = !r && state.scanOffer;
  $('findings-panel').hidden = !r && !offer;
  $('scan-offer').hidden = !offer;
  if (!r || r.running) {
    $('findings-count').textContent = '';
    $('findings-status').textContent = r ? 'scanning…' : '';
    table.replaceChildren();
    return;
  }
  if (r.error) {
    $('findings-status').textContent = `could not scan: ${r.error}`;
    $('findings-status').className = 'status bad';
    table.replaceChildren();
    return;
  }
  $('findings-count').textContent = fmtInt(r.findings.length);
  $('findings-status').textContent = r.findings.length
    ? `${r.format}: ${fmtInt(r.findings.length)} finding${r.findings.length > 1 ? 's' : ''} (scanned in ${r.ms.toFixed(1)} ms)`
    : `${r.format}: no findings (scanned in ${r.ms.toFixed(1)} ms)`;
  $('findings-status').className = `status ${r.findings.length ? 'bad' : 'ok'}`;
  if (!r.findings.length) {
    table.replaceChildren();
    return;
  }
  fillGrid(table, [['rule', 'severity', 'offset', 'tensor', 'message', 'fix'],
    ...r.findings.map((f) => [f.rule, f.severity, fmtInt(f.offset), oneLine(f.tensor ?? ''), oneLine(f.message), f.remediation])]);
}

function keyInputs() {
  return Promise.resolve($('key-file').files[0]?.arrayBuffer()).then((buf) => ({
    key: state.summary.encrypted && buf ? new Uint8Array(buf) : null,
    passphrase: state.summary.encrypted && !buf ? $('passphrase').value : '',
  }));
}

async function fingerprintOf(source, progress) {
  const keys = await keyInputs();
  const m = await runJob('fingerprint', source, { ...keys, onProgress: progress });
  return { report: m.report, ms: m.ms };
}

async function startFingerprint() {
  if (!state.summary || state.fingerprint?.running) return;
  const seq = state.openSeq;
  state.fingerprint = { running: true };
  renderFingerprint();
  try {
    const fp = await fingerprintOf(state.source, (done, total) => {
      $('fingerprint-progress').value = total ? done / total : 0;
      $('fingerprint-status').textContent = `${fmtBytes(done)} of ${fmtBytes(total)} hashed`;
    });
    if (seq !== state.openSeq) return;
    state.fingerprint = fp;
  } catch (e) {
    if (seq !== state.openSeq) return;
    state.fingerprint = { error: errorLine(e) };
  }
  renderFingerprint();
}

function renderFingerprint() {
  const f = state.fingerprint;
  $('fingerprint-start').disabled = Boolean(f?.running);
  $('fingerprint-progress').value = f && !f.running ? 1 : 0;
  $('fingerprint-value').textContent = f?.report ? f.report.fingerprint : '';
  const status = $('fingerprint-status');
  status.className = `status ${f?.error ? 'bad' : ''}`;
  if (!f) status.textContent = '';
  else if (f.running) status.textContent = 'hashing…';
  else if (f.error) status.textContent = f.error;
  else {
    status.textContent = `${f.report.algorithm}: ${fmtInt(f.report.tensor_count)} tensors, ` +
      `${fmtBytes(f.report.data_bytes)} in ${(f.ms / 1000).toFixed(2)} s`;
  }
}

async function startCompare(file) {
  if (!state.summary) return;
  const seq = state.openSeq;
  state.compare = { running: true, other: file.name };
  renderCompare();
  try {
    // Both files are hashed at once, each in its own worker.
    const mine = state.fingerprint?.report ? Promise.resolve(state.fingerprint) : fingerprintOf(state.source, null);
    const [a, b] = await Promise.all([mine, fingerprintOf({ kind: 'file', file }, null)]);
    if (seq !== state.openSeq) return;
    if (!state.fingerprint?.report) state.fingerprint = a;
    state.compare = { report: JSON.parse(diff(JSON.stringify(a.report), JSON.stringify(b.report))), other: file.name };
  } catch (e) {
    if (seq !== state.openSeq) return;
    state.compare = { error: errorLine(e), other: file.name };
  }
  renderFingerprint();
  renderCompare();
}

const describe = (r) => (r ? `${r.dtype} ${fmtShape(r.shape)}` : '');

function renderCompare() {
  const c = state.compare;
  const status = $('compare-status');
  const table = $('compare-table');
  status.className = `status ${c?.error ? 'bad' : c?.report ? (c.report.same ? 'ok' : 'bad') : ''}`;
  if (!c || c.running || c.error) {
    status.textContent = !c ? '' : c.running ? `hashing both files…` : c.error;
    table.replaceChildren();
    return;
  }
  const r = c.report;
  status.textContent = r.same
    ? `the same weights as ${oneLine(c.other)}`
    : `${oneLine(c.other)} differs: ${r.added} added, ${r.removed} removed, ${r.renamed} renamed, ${r.changed} changed`;
  const what = (x) => {
    if (x.change === 'renamed') return `-> ${oneLine(x.to)}  ${describe(x.b)}`;
    if (x.change !== 'changed') return describe(x.a || x.b);
    const parts = [];
    if (x.dtype) parts.push(`dtype ${x.a.dtype} -> ${x.b.dtype}`);
    if (x.shape) parts.push(`shape ${fmtShape(x.a.shape)} -> ${fmtShape(x.b.shape)}`);
    if (x.data && !x.dtype && !x.shape) parts.push('data');
    return parts.join(', ');
  };
  fillGrid(table, [['change', 'name', ''], ...r.changes.map((x) => [x.change, oneLine(x.name), what(x)])]);
}

// ---------- events ----------

$('file-input').addEventListener('change', (e) => {
  const f = e.target.files[0];
  if (f) openSource({ kind: 'file', file: f });
});
$('url-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const raw = $('url-input').value.trim();
  if (!raw) return;
  let url;
  try {
    url = new URL(raw, location.href);
  } catch {
    showError(`not a URL: ${raw}`);
    return;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    showError(`only http(s):// URLs can be opened, not ${url.protocol}`);
    return;
  }
  openSource({ kind: 'url', url: url.href });
});
document.addEventListener('dragover', (e) => {
  e.preventDefault();
  document.body.classList.add('dragging');
});
document.addEventListener('dragleave', (e) => {
  if (e.target === document.documentElement || e.target === document.body) document.body.classList.remove('dragging');
});
document.addEventListener('drop', (e) => {
  e.preventDefault();
  document.body.classList.remove('dragging');
  const f = e.dataTransfer?.files?.[0];
  if (f) openSource({ kind: 'file', file: f });
});
let scrollFrame = 0;
$('table-wrap').addEventListener('scroll', () => {
  if (!scrollFrame) scrollFrame = requestAnimationFrame(() => { scrollFrame = 0; renderRows(false); });
});
$('thead').addEventListener('click', (e) => {
  const key = e.target?.dataset?.key;
  if (!key) return;
  state.sort = state.sort.key === key ? { key, dir: -state.sort.dir } : { key, dir: 1 };
  renderHead();
  applyView();
});
let filterTimer = 0;
$('filter').addEventListener('input', (e) => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => {
    state.filter = e.target.value;
    $('table-wrap').scrollTop = 0;
    applyView();
  }, 120);
});
$('mode-table').addEventListener('click', () => setMode('table'));
$('mode-tree').addEventListener('click', () => setMode('tree'));
$('read-hashes').addEventListener('click', () => loadHashes());
$('verify-start').addEventListener('click', () => startVerify());
$('verify-cancel').addEventListener('click', () => cancelVerify());
$('fingerprint-start').addEventListener('click', () => startFingerprint());
$('scan-start').addEventListener('click', () => startScan());
$('compare-input').addEventListener('change', (e) => {
  const f = e.target.files[0];
  if (f) startCompare(f);
});

// `?url=...` opens a URL at once (tzr view links to the page this way).
// With `&name=...`, the URL is the file `tzr view` serves beside the page:
// the page shows that name, not the URL with its per-run token.
const params = new URLSearchParams(location.search);
const initial = params.get('url');
if (initial) {
  const url = new URL(initial, location.href);
  const local = url.origin === location.origin;
  const given = params.get('name');
  if (!local) $('url-input').value = initial;
  openSource({ kind: 'url', url: url.href, local, ...(given && local ? { name: given } : {}) });
}

// For tests and the curious: the page's state and a view of its rows.
window.__inspector = {
  state,
  ready: wasmReady,
  view: () => state.view.map((i) => state.rows[i]),
  open: openSource,
};
