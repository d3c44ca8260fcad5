// Range reads of a file behind an http(s) URL, for the page and its worker.
// Only the ranges the inspector asks for are fetched; every request and
// every body byte is counted in `stats`.

/** Bytes fetched by the first request; the inspector's first read fits in it. */
export const FIRST_BYTES = 64 * 1024;

const CORS_HELP =
  'the server must allow this page to read it: Access-Control-Allow-Origin, and ' +
  'Access-Control-Expose-Headers: Content-Range (S3 and other buckets need a CORS rule)';

/** A failure the page shows as one line. */
export class RemoteError extends Error {}

function parseContentRange(value) {
  // "bytes START-END/TOTAL"
  const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec((value || '').trim());
  if (!m) return null;
  return { start: Number(m[1]), end: Number(m[2]), total: m[3] === '*' ? null : Number(m[3]) };
}

async function rangeFetch(url, start, end, stats, signal) {
  let resp;
  try {
    resp = await fetch(url, {
      headers: { Range: `bytes=${start}-${end}` },
      mode: 'cors',
      credentials: 'omit',
      cache: 'no-store',
      signal,
    });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    // fetch() rejects with a bare TypeError both for network failures and
    // for CORS refusals; the page cannot tell them apart.
    throw new RemoteError(`could not fetch ${url}: the network failed or the server refused a cross-origin read (CORS); ${CORS_HELP}`);
  }
  stats.requests += 1;
  return resp;
}

async function body(resp, stats) {
  const buf = new Uint8Array(await resp.arrayBuffer());
  stats.bytes += buf.byteLength;
  return buf;
}

/**
 * Opens `url` for range reads: one request for the first FIRST_BYTES
 * bytes, which also gives the length. Resolves to
 * `{ url, len, read(offset, length) -> Promise<Uint8Array>, stats }`.
 */
export async function openRemote(url, stats = { requests: 0, bytes: 0 }) {
  const abort = new AbortController();
  const resp = await rangeFetch(url, 0, FIRST_BYTES - 1, stats, abort.signal);
  if (resp.status === 200) {
    abort.abort(); // do not download the whole file
    throw new RemoteError(
      `the server ignored the Range request (it answered 200 with the whole file): the inspector needs a server that honours HTTP Range requests`,
    );
  }
  if (resp.status === 416) {
    // An empty file has no byte 0.
    return { url, len: 0, first: new Uint8Array(0), stats, read: reader(url, 0, new Uint8Array(0), stats) };
  }
  if (resp.status !== 206) {
    abort.abort();
    throw new RemoteError(`the server answered ${resp.status} ${resp.statusText} for ${url}`);
  }
  const header = resp.headers.get('Content-Range');
  if (header === null) {
    abort.abort();
    throw new RemoteError(
      `the server's Content-Range header is hidden from the page, so the file's length is unknown: add Access-Control-Expose-Headers: Content-Range`,
    );
  }
  const range = parseContentRange(header);
  if (!range || range.total === null || range.start !== 0) {
    abort.abort();
    throw new RemoteError(`the server sent an unusable Content-Range: ${header}`);
  }
  const first = await body(resp, stats);
  return { url, len: range.total, first, stats, read: reader(url, range.total, first, stats) };
}

function reader(url, len, first, stats) {
  return async (offset, length) => {
    if (length === 0) return new Uint8Array(0);
    if (offset + length <= first.byteLength) return first.slice(offset, offset + length);
    const end = offset + length - 1;
    if (end >= len) throw new RemoteError(`a read of ${length} bytes at byte ${offset} runs past the end of the file (${len} bytes)`);
    const resp = await rangeFetch(url, offset, end, stats);
    if (resp.status === 200) {
      throw new RemoteError('the server ignored the Range request (it answered 200 with the whole file)');
    }
    if (resp.status !== 206) throw new RemoteError(`the server answered ${resp.status} ${resp.statusText} at byte ${offset}`);
    const range = parseContentRange(resp.headers.get('Content-Range'));
    if (range && range.start !== offset) throw new RemoteError(`the server sent bytes from ${range.start}, not ${offset}`);
    const buf = await body(resp, stats);
    if (buf.byteLength !== length) {
      throw new RemoteError(`the server sent ${buf.byteLength} bytes at byte ${offset}, not ${length} (did the file change?)`);
    }
    return buf;
  };
}
