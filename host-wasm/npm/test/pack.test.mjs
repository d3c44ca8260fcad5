// The package as a user gets it: `npm pack` (its prepack copies the module
// named by TZR_VALIDATOR_WASM, as host-wasm/test.sh runs it), the tarball
// installed into an empty project with no registry (it has no
// dependencies), and `npx tensorizer-validate` on a tensorizer, a
// safetensors and a torch.save file.

import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const VECTORS = path.resolve(PACKAGE, '../../tests/vectors');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tzr-npm-pack-'));
const project = path.join(tmp, 'project');
// npm's own state stays in the temporary directory, and nothing is fetched.
const npmEnv = { ...process.env, npm_config_cache: path.join(tmp, 'cache'), npm_config_offline: 'true',
  npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' };
delete npmEnv.TENSORIZER_VALIDATE_VERBOSE;
let tarball;

/** A safetensors file of one float32 tensor [2]. */
function safetensors(file) {
  let header = JSON.stringify({ w: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } });
  header += ' '.repeat((8 - (header.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(header.length));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(header), Buffer.from(new Float32Array([1, 2]).buffer)]));
}

/** `npx tensorizer-validate ARGS` in the project: { status, stdout, stderr }. */
function npx(args) {
  return spawnSync('npx', ['tensorizer-validate', ...args], { cwd: project, env: npmEnv, encoding: 'utf8' });
}

/** The command npx runs (node_modules/.bin), without npx's second of start-up. */
function bin(args) {
  const cmd = path.join(project, 'node_modules/.bin/tensorizer-validate');
  return spawnSync(cmd, args, { cwd: project, env: npmEnv, encoding: 'utf8' });
}

const haveNpm = spawnSync('npm', ['--version'], { stdio: 'ignore' }).status === 0;

test('prepack without cargo or a module stops with one line saying how to build it', () => {
  const pkg = path.join(tmp, 'bare');
  fs.mkdirSync(path.join(pkg, 'scripts'), { recursive: true });
  fs.copyFileSync(path.join(PACKAGE, 'scripts/prepack.mjs'), path.join(pkg, 'scripts/prepack.mjs'));
  const env = { ...process.env, PATH: path.dirname(process.execPath) };
  delete env.TZR_VALIDATOR_WASM;
  const r = spawnSync(process.execPath, ['scripts/prepack.mjs'], { cwd: pkg, env, encoding: 'utf8' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /^tensorizer-validate prepack: tensorizer-validate\.wasm is missing .*host-wasm\/test\.sh/);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.ok(!fs.existsSync(path.join(pkg, 'tensorizer-validate.wasm')));
});

before(() => {
  if (!haveNpm) return;
  assert.ok(process.env.TZR_VALIDATOR_WASM, 'TZR_VALIDATOR_WASM must name the built module (host-wasm/test.sh sets it)');
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', tmp], { cwd: PACKAGE, env: npmEnv, encoding: 'utf8' });
  const [packed] = JSON.parse(out);
  tarball = path.join(tmp, packed.filename);
  const files = packed.files.map((f) => f.path).sort();
  assert.deepEqual(files, ['README.md', 'bin/tensorizer-validate.mjs', 'index.mjs', 'package.json', 'tensorizer-validate.wasm']);
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, 'package.json'), '{"name": "project", "private": true}\n');
  execFileSync('npm', ['install', tarball], { cwd: project, env: npmEnv, stdio: 'pipe' });
  fs.copyFileSync(path.join(VECTORS, 'v1_flat.tensors'), path.join(project, 'model.tensors'));
  fs.copyFileSync(path.join(VECTORS, 'torch/hostile_os_system.pt'), path.join(project, 'evil.pt'));
  fs.copyFileSync(path.join(VECTORS, 'torch/params.pt'), path.join(project, 'params.pt'));
  safetensors(path.join(project, 'model.safetensors'));
});

after(() => fs.rmSync(tmp, { recursive: true, force: true }));

test('the tarball holds the module the prepack was given', { skip: !haveNpm && 'npm is not installed' }, () => {
  const installed = path.join(project, 'node_modules/tensorizer-validate/tensorizer-validate.wasm');
  assert.deepEqual(fs.readFileSync(installed), fs.readFileSync(process.env.TZR_VALIDATOR_WASM));
});

test('npx on the three formats: reports name the given paths, exit statuses, no warnings', { skip: !haveNpm && 'npm is not installed' }, () => {
  let r = npx(['model.tensors', 'model.safetensors', 'params.pt']);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '');
  assert.match(r.stdout, /^model\.tensors\n  tensorizer data version 1, 15 tensors/m);
  assert.match(r.stdout, /^model\.safetensors\n  safetensors, 1 tensors/m);
  assert.match(r.stdout, /^params\.pt\n  torch-zip, \d+ tensors/m);
  assert.doesNotMatch(r.stdout, /\/in\//);

  r = npx(['--json', 'evil.pt', 'model.tensors']);
  assert.equal(r.status, 1);
  const [evil, clean] = r.stdout.trim().split('\n').map((line) => JSON.parse(line));
  assert.equal(evil.file, 'evil.pt');
  assert.ok(evil.findings.some((f) => f.rule === 'PKL-002'), r.stdout);
  assert.equal(clean.file, 'model.tensors');
  assert.equal(clean.valid, true);
  assert.match(r.stderr, /^tensorizer-validate: evil\.pt: 2 findings/);
  assert.doesNotMatch(r.stderr, /Warning/);

  r = bin(['--sarif', path.join(project, 'evil.pt')]);
  assert.equal(r.status, 1);
  assert.equal(JSON.parse(r.stdout).runs[0].artifacts[0].location.uri, artifactUriOf(path.join(project, 'evil.pt')));
});

test('a missing file: one clear line, exit 2, the worst status wins', { skip: !haveNpm && 'npm is not installed' }, () => {
  const r = bin(['model.tensors', 'no/such.pt', 'evil.pt']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^tensorizer-validate: no\/such\.pt: cannot open: No such file or directory$/m);
  assert.doesNotMatch(r.stderr, /os error/);
});

test('--help, --version, usage errors and --verbose', { skip: !haveNpm && 'npm is not installed' }, () => {
  let r = bin(['--help']);
  assert.equal(r.status, 0);
  assert.match(r.stdout, /FILE\.\.\./);
  r = bin(['--version']);
  assert.equal(r.status, 0);
  assert.match(r.stdout, /^tensorizer-validate 0\.1\.0 \(npm package\); tensorizer-validate \S+ \(report version \d+\)$/m);
  r = bin([]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /no FILE given/);
  r = bin(['--verbose', 'model.tensors']);
  assert.equal(r.status, 0);
  assert.match(r.stderr, /ExperimentalWarning: WASI/);
});

/** The SARIF artifact URI of an absolute POSIX path of plain characters. */
function artifactUriOf(p) {
  return p.replace(/[^A-Za-z0-9\-._~/]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}
