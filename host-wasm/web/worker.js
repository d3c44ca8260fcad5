// The page's long jobs run here, off its thread; the page cancels one by
// terminating this worker. The wasm module does the work:
//
// * 'verify' (several workers can split a file's tensors): reads every
//   tensor (Blob.slice for a local file, Range requests for a URL),
//   decrypts it when a key is given and checks its hashes;
// * 'scan': the core's scanner, which reads synchronously (FileReaderSync,
//   or synchronous Range requests for a URL);
// * 'fingerprint': every tensor hashed as `tzr fingerprint` does.
//
// In:  { job: 'verify' | 'scan' | 'fingerprint', source: File | { url, len },
//        key: Uint8Array | null, passphrase: string | null, name,
//        shard, shards } (verify: this worker checks its share of a tensorizer file's tensors)
// Out: { type: 'ready' } once, then { type: 'tensors', results: [[index, result], ...] },
//      { type: 'progress', done, total, requests, bytes }, and finally
//      { type: 'done', summary, ms, requests, bytes } or { type: 'error', line }.
//      scan and fingerprint are done with { type: 'done', report, ms, requests, bytes }.

import init, { fingerprint, scan, verify } from './pkg/tensorizer_wasm.js';
import { openRemote } from './remote.js';

const ready = init();
const FLUSH_MS = 100;

/** A synchronous read function `(offset, length) => Uint8Array` over `source`. */
function syncReader(source, stats) {
  if (source instanceof Blob) {
    const reader = new FileReaderSync();
    return (offset, length) => new Uint8Array(reader.readAsArrayBuffer(source.slice(offset, offset + length)));
  }
  return (offset, length) => {
    if (length === 0) return new Uint8Array(0);
    const xhr = new XMLHttpRequest();
    xhr.open('GET', source.url, false);
    xhr.responseType = 'arraybuffer';
    xhr.setRequestHeader('Range', `bytes=${offset}-${offset + length - 1}`);
    xhr.send();
    stats.requests += 1;
    if (xhr.status !== 206) throw new Error(`the server answered ${xhr.status} to a Range request`);
    stats.bytes += xhr.response.byteLength;
    return new Uint8Array(xhr.response);
  };
}

async function runJob({ job, source, key, passphrase, name }) {
  const stats = { requests: 0, bytes: 0 };
  try {
    await ready;
    const t0 = performance.now();
    let report;
    if (job === 'scan') {
      const len = source instanceof Blob ? source.size : source.len;
      report = scan(syncReader(source, stats), len, name);
    } else {
      const { src, len } = source instanceof Blob
        ? { src: source, len: source.size }
        : await openRemote(source.url, stats).then((r) => ({ src: r.read, len: r.len }));
      let last = 0;
      report = await fingerprint(src, len, key || undefined, passphrase || undefined, (done, total) => {
        if (performance.now() - last > FLUSH_MS) {
          last = performance.now();
          self.postMessage({ type: 'progress', done, total, requests: stats.requests, bytes: stats.bytes });
        }
      });
    }
    const ms = performance.now() - t0;
    self.postMessage({ type: 'done', report: JSON.parse(report), ms, requests: stats.requests, bytes: stats.bytes });
  } catch (e) {
    const line = typeof e === 'string' ? e : (e && e.message) || String(e);
    self.postMessage({ type: 'error', line });
  }
}

self.onmessage = async (event) => {
  if (event.data.job && event.data.job !== 'verify') {
    await runJob(event.data);
    return;
  }
  const { source, key, passphrase, shard = 0, shards = 1 } = event.data;
  const stats = { requests: 0, bytes: 0 };
  let pending = [];
  let last = 0;
  let progress = { done: 0, total: 0 };
  const flush = () => {
    if (pending.length) self.postMessage({ type: 'tensors', results: pending });
    pending = [];
    self.postMessage({ type: 'progress', ...progress, requests: stats.requests, bytes: stats.bytes });
    last = performance.now();
  };
  try {
    await ready;
    let src;
    let len;
    if (source instanceof Blob) {
      src = source;
      len = source.size;
    } else {
      const remote = await openRemote(source.url, stats);
      src = remote.read;
      len = remote.len;
    }
    const t0 = performance.now();
    const summary = await verify(
      src,
      len,
      key || undefined,
      passphrase || undefined,
      (index, json) => {
        pending.push([index, JSON.parse(json)]);
        if (performance.now() - last > FLUSH_MS) flush();
      },
      (done, total) => {
        progress = { done, total };
        if (performance.now() - last > FLUSH_MS) flush();
      },
      shard,
      shards,
    );
    const ms = performance.now() - t0;
    flush();
    self.postMessage({ type: 'done', summary: JSON.parse(summary), ms, requests: stats.requests, bytes: stats.bytes });
  } catch (e) {
    flush();
    const line = typeof e === 'string' ? e : (e && e.message) || String(e);
    self.postMessage({ type: 'error', line });
  }
};
self.postMessage({ type: 'ready' });
