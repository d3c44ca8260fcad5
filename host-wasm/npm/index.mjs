// The WASI validator (tensorizer-validate.wasm, a wasm32-wasip1 command
// module) under Node's node:wasi, behind two functions: `run` (the
// module's output as text, for the command line in bin/) and `validate`
// (its --json report, parsed). The file's directory is the module's only
// preopen, as /in; what the module prints names the caller's path, not
// /in; and the exit status keeps the validator's contract (0 no findings,
// 1 findings, 2 could not scan).
//
// Node gives a WASI module no fuel, epoch or memory limit: to bound a
// hostile file's time, call this in a worker thread or child process you
// can kill.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** The validator's exit statuses. */
export const EXIT = Object.freeze({ CLEAN: 0, FINDINGS: 1, CANNOT_SCAN: 2 });

/** The module's program name, which starts its stderr lines. */
export const PROGRAM = 'tensorizer-validate';

/** Set to 1 to see Node's warnings about WASI (ExperimentalWarning). */
export const VERBOSE_ENV = 'TENSORIZER_VALIDATE_VERBOSE';

const DEFAULT_WASM = new URL('./tensorizer-validate.wasm', import.meta.url);
const modules = new Map();
let wasiClass = null;

/**
 * node:wasi, imported once. Node warns that WASI is experimental when it is
 * first imported: that one warning is dropped unless VERBOSE_ENV is 1
 * (every other warning goes through).
 */
async function loadWasi() {
  if (wasiClass) return wasiClass;
  if (process.env[VERBOSE_ENV] === '1') {
    wasiClass = (await import('node:wasi')).WASI;
    return wasiClass;
  }
  const emit = process.emitWarning;
  process.emitWarning = function filtered(warning, ...rest) {
    const type = typeof rest[0] === 'string' ? rest[0] : rest[0]?.type;
    if (type === 'ExperimentalWarning' && String(warning?.message ?? warning).startsWith('WASI ')) return;
    emit.call(process, warning, ...rest);
  };
  try {
    wasiClass = (await import('node:wasi')).WASI;
  } finally {
    process.emitWarning = emit;
  }
  return wasiClass;
}

/** The compiled module at `wasm` (a path or file URL), compiled once. */
export async function loadModule(wasm = DEFAULT_WASM) {
  const key = String(wasm);
  if (!modules.has(key)) {
    modules.set(key, fs.promises.readFile(wasm).then((bytes) => WebAssembly.compile(bytes)));
  }
  return modules.get(key);
}

/** SARIF's artifact URI for a path, as the validator writes it. */
export function artifactUri(p) {
  if (/^[A-Za-z0-9+.-]+:\/\//.test(p)) return p;
  return Array.from(new TextEncoder().encode(p), (b) => {
    const c = String.fromCharCode(b);
    return /[A-Za-z0-9\-._~/]/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }).join('');
}

/**
 * `text` with the sandbox paths (`[inner, outer]` pairs) replaced by the
 * caller's, and without WASI's errno numbers (` (os error 44)`: they are
 * not the host's numbers, so they would mislead).
 */
function rename(text, pairs) {
  return pairs.reduce((t, [inner, outer]) => t.split(inner).join(outer), text).replace(/ \(os error \d+\)/g, '');
}

/** Whether `dir` is a directory (a preopen must be one). */
function isDir(dir) {
  try {
    return fs.statSync(dir).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Runs the validator on `file` (a local path) and returns
 * `{ code, stdout, stderr }`: the exit status (EXIT), the report as the
 * module printed it (`output`: 'text', 'json' or 'sarif'; one line for
 * the JSON forms) and its one-line messages, both naming `file` as given
 * here. Options: `verify` (check every tensorizer hash and MAC),
 * `keyFile` (a path) or `passphrase` (a string) for an encrypted file,
 * `wasm` (another module path).
 */
export async function run(file, { output = 'text', verify = false, keyFile = null, passphrase = null, wasm = DEFAULT_WASM } = {}) {
  const abs = path.resolve(file);
  const inner = `/in/${path.basename(abs)}`;
  const names = [[inner, file]];
  const args = [PROGRAM];
  if (output === 'json') args.push('--json');
  else if (output === 'sarif') args.push('--sarif');
  if (verify) args.push('--verify');
  const env = {};
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensorizer-validate-'));
  // A directory that does not exist cannot be preopened: an empty one
  // stands in, and the module reports the missing file as it would.
  const empty = path.join(dir, 'empty');
  fs.mkdirSync(empty);
  const preopens = { '/in': isDir(path.dirname(abs)) ? path.dirname(abs) : empty };
  if (keyFile) {
    const key = path.resolve(keyFile);
    const keyInner = `/key/${path.basename(key)}`;
    preopens['/key'] = isDir(path.dirname(key)) ? path.dirname(key) : empty;
    args.push('--key-file', keyInner);
    names.push([keyInner, keyFile]);
  } else if (passphrase !== null) {
    env.TZR_PASSPHRASE = passphrase;
    args.push('--passphrase-env', 'TZR_PASSPHRASE');
  }
  args.push('--', inner);
  try {
    const r = await startModule(wasm, args, env, preopens, dir);
    const pairs = names.flatMap(([i, o]) => [[i, o], [artifactUri(i), artifactUri(o)]]);
    // JSON is renamed as text, escaped as JSON escapes it: parsing and
    // printing it again would round offsets above 2^53.
    const escaped = (s) => JSON.stringify(s).slice(1, -1);
    const outPairs = output === 'text' ? pairs : pairs.map(([i, o]) => [escaped(i), escaped(o)]);
    return { code: r.code, stdout: rename(r.stdout, outPairs), stderr: rename(r.stderr, pairs) };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Runs the module with `args` (the program name first), its output going
 * to files in `dir`: `{ code, stdout, stderr }`, trimmed.
 */
async function startModule(wasm, args, env, preopens, dir) {
  const out = path.join(dir, 'stdout');
  const err = path.join(dir, 'stderr');
  const stdout = fs.openSync(out, 'w+');
  const stderr = fs.openSync(err, 'w+');
  try {
    const [WASI, module] = await Promise.all([loadWasi(), loadModule(wasm)]);
    const wasi = new WASI({ version: 'preview1', returnOnExit: true, args, env, preopens, stdout, stderr });
    const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
    const code = wasi.start(instance);
    return { code, stdout: fs.readFileSync(out, 'utf8').trim(), stderr: fs.readFileSync(err, 'utf8').trim() };
  } finally {
    fs.closeSync(stdout);
    fs.closeSync(stderr);
  }
}

/** The module's `--version` line. */
export async function moduleVersion(wasm = DEFAULT_WASM) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensorizer-validate-'));
  try {
    return (await startModule(wasm, [PROGRAM, '--version'], {}, {}, dir)).stdout;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Scans `file` (a local path). Options as for `run`, less `output`.
 * Resolves to `{ code, report, stderr }`: `code` as in EXIT, `report` the
 * parsed JSON report (its `file` is `file` as given here; null if the
 * module wrote none), `stderr` its one-line messages.
 */
export async function validate(file, options = {}) {
  const { code, stdout, stderr } = await run(file, { ...options, output: 'json' });
  return { code, report: stdout ? JSON.parse(stdout) : null, stderr };
}
