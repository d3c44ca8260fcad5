// "Verify" runs here, off the page's thread (several workers can split a
// file's tensors): the wasm module reads every
// tensor (Blob.slice for a local file, Range requests for a URL), decrypts
// it when a key is given and checks its hashes. The page cancels a run by
// terminating this worker.
//
// In:  { source: File | { url }, key: Uint8Array | null, passphrase: string | null,
//        shard, shards } (this worker checks its share of a tensorizer file's tensors)
// Out: { type: 'ready' } once, then { type: 'tensors', results: [[index, result], ...] },
//      { type: 'progress', done, total, requests, bytes }, and finally
//      { type: 'done', summary, ms, requests, bytes } or { type: 'error', line }.

import init, { verify } from './pkg/tensorizer_wasm.js';
import { openRemote } from './remote.js';

const ready = init();
const FLUSH_MS = 100;

self.onmessage = async (event) => {
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
