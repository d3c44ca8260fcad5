// The WASI validator (tensorizer-validate.wasm, a wasm32-wasip1 command
// module) under Node's node:wasi, behind one function: the file's
// directory is the module's only preopen, the report is its --json line,
// and the exit status keeps the validator's contract (0 no findings,
// 1 findings, 2 could not scan).
//
// Node gives a WASI module no fuel, epoch or memory limit: to bound a
// hostile file's time, call this in a worker thread or child process you
// can kill.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WASI } from 'node:wasi';

/** The validator's exit statuses. */
export const EXIT = Object.freeze({ CLEAN: 0, FINDINGS: 1, CANNOT_SCAN: 2 });

const DEFAULT_WASM = new URL('./tensorizer-validate.wasm', import.meta.url);
const modules = new Map();

/** The compiled module at `wasm` (a path or file URL), compiled once. */
export async function loadModule(wasm = DEFAULT_WASM) {
  const key = String(wasm);
  if (!modules.has(key)) modules.set(key, WebAssembly.compile(await fs.promises.readFile(wasm)));
  return modules.get(key);
}

/**
 * Scans `file` (a local path). Options: `verify` (check every tensorizer
 * hash and MAC), `keyFile` (a path) or `passphrase` (a string) for an
 * encrypted file, `wasm` (another module path). Resolves to
 * `{ code, report, stderr }`: `code` as in EXIT, `report` the parsed JSON
 * report (null if the module wrote none), `stderr` its one-line messages.
 */
export async function validate(file, { verify = false, keyFile = null, passphrase = null, wasm = DEFAULT_WASM } = {}) {
  const module = await loadModule(wasm);
  const abs = path.resolve(file);
  const preopens = { '/in': path.dirname(abs) };
  const args = ['tensorizer-validate', '--json'];
  if (verify) args.push('--verify');
  const env = {};
  if (keyFile) {
    const key = path.resolve(keyFile);
    preopens['/key'] = path.dirname(key);
    args.push('--key-file', `/key/${path.basename(key)}`);
  } else if (passphrase !== null) {
    env.TZR_PASSPHRASE = passphrase;
    args.push('--passphrase-env', 'TZR_PASSPHRASE');
  }
  args.push(`/in/${path.basename(abs)}`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensorizer-validate-'));
  const out = path.join(dir, 'stdout');
  const err = path.join(dir, 'stderr');
  const stdout = fs.openSync(out, 'w+');
  const stderr = fs.openSync(err, 'w+');
  try {
    const wasi = new WASI({ version: 'preview1', returnOnExit: true, args, env, preopens, stdout, stderr });
    const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
    const code = wasi.start(instance);
    const text = fs.readFileSync(out, 'utf8').trim();
    return { code, report: text ? JSON.parse(text) : null, stderr: fs.readFileSync(err, 'utf8').trim() };
  } finally {
    fs.closeSync(stdout);
    fs.closeSync(stderr);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
