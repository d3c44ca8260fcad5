// `npm pack` / `npm publish` run this first: the package must hold a
// current tensorizer-validate.wasm. TZR_VALIDATOR_WASM=PATH copies a module
// built already (host-wasm/test.sh passes its own); otherwise, in a
// tensorizer-rs checkout with cargo on PATH, cargo builds it (a no-op when
// it is up to date) and it is copied in; with neither, a module already
// here is packed as it is, and without one the pack stops with one line
// saying how to build it.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DEST = path.join(HERE, 'tensorizer-validate.wasm');
const REPO = path.resolve(HERE, '../..');
const BUILD = [
  'build', '--locked', '-p', 'tensorizer-wasm', '--target', 'wasm32-wasip1', '--bin', 'tensorizer-validate',
  '--config', 'host-wasm/wasm-release.toml', '--profile', 'wasm-release',
];
const HOW = 'build it in the tensorizer-rs repository with `bash host-wasm/test.sh`, or with '
  + '`rustup target add wasm32-wasip1 && cargo ' + BUILD.join(' ') + '`, then run npm pack again '
  + '(or set TZR_VALIDATOR_WASM=PATH to a built module)';

function fail(line) {
  process.stderr.write(`tensorizer-validate prepack: ${line}\n`);
  process.exit(1);
}

function copy(from) {
  const bytes = fs.readFileSync(from);
  if (bytes.subarray(0, 4).toString('latin1') !== '\0asm') fail(`${from} is not a WebAssembly module; ${HOW}`);
  fs.writeFileSync(DEST, bytes);
  process.stderr.write(`tensorizer-validate prepack: packing ${from} (${bytes.length} bytes)\n`);
}

function hasCargo() {
  return spawnSync('cargo', ['--version'], { stdio: 'ignore' }).status === 0;
}

const given = process.env.TZR_VALIDATOR_WASM;
if (given) {
  if (!fs.existsSync(given)) fail(`TZR_VALIDATOR_WASM=${given} does not exist; ${HOW}`);
  copy(given);
} else if (fs.existsSync(path.join(REPO, 'host-wasm/Cargo.toml')) && hasCargo()) {
  const built = spawnSync('cargo', BUILD, { cwd: REPO, stdio: ['ignore', 'inherit', 'inherit'] });
  if (built.status !== 0) fail(`cargo could not build the module (above); ${HOW}`);
  const target = process.env.CARGO_TARGET_DIR ? path.resolve(REPO, process.env.CARGO_TARGET_DIR) : path.join(REPO, 'target');
  copy(path.join(target, 'wasm32-wasip1/wasm-release/tensorizer-validate.wasm'));
} else if (fs.existsSync(DEST)) {
  process.stderr.write('tensorizer-validate prepack: no cargo here to rebuild it: packing the tensorizer-validate.wasm already in the package\n');
} else {
  fail(`tensorizer-validate.wasm is missing and there is no cargo to build it: ${HOW}`);
}
