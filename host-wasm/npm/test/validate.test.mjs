// The npm package's API under node --test, run by host-wasm/test.sh once
// it has copied the validator into the package (or on TZR_VALIDATOR_WASM).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { EXIT, validate } from '../index.mjs';

const VECTORS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../tests/vectors');
const MANIFEST = JSON.parse(fs.readFileSync(path.join(VECTORS, 'manifest.json'), 'utf8'));
const wasm = process.env.TZR_VALIDATOR_WASM || undefined;
const run = (file, options = {}) => validate(file, { ...options, wasm });

test('a clean file: exit 0 and a valid report', async () => {
  const { code, report } = await run(path.join(VECTORS, 'v1_flat.tensors'), { verify: true });
  assert.equal(code, EXIT.CLEAN);
  assert.equal(report.valid, true);
  assert.equal(report.file, path.join(VECTORS, 'v1_flat.tensors'), 'the caller\'s path, not the sandbox\'s');
  assert.equal(report.format, 'tensorizer');
  assert.equal(report.tensor_count, 15);
  assert.equal(report.verification.ok, true);
});

test('a hostile checkpoint: exit 1 and its findings', async () => {
  const { code, report, stderr } = await run(path.join(VECTORS, 'torch/hostile_os_system.pt'));
  assert.equal(code, EXIT.FINDINGS);
  assert.equal(report.valid, false);
  assert.ok(report.findings.some((f) => f.rule === 'PKL-001' && f.message.includes('system')), JSON.stringify(report.findings));
  assert.ok(stderr.length > 0);
});

test('encrypted files verify with a key file or a passphrase', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tzr-npm-'));
  try {
    const key = path.join(dir, 'model.key');
    fs.writeFileSync(key, `${MANIFEST.secrets.key_hex}\n`);
    let r = await run(path.join(VECTORS, 'v3_enc_key.tensors'), { verify: true, keyFile: key });
    assert.equal(r.code, EXIT.CLEAN, r.stderr);
    r = await run(path.join(VECTORS, 'v3_enc_pass.tensors'), { verify: true, passphrase: MANIFEST.secrets.passphrase });
    assert.equal(r.code, EXIT.CLEAN, r.stderr);
    r = await run(path.join(VECTORS, 'v3_enc_pass.tensors'), { verify: true, passphrase: 'wrong' });
    assert.equal(r.code, EXIT.FINDINGS);
    r = await run(path.join(VECTORS, 'v3_enc_key.tensors'), { verify: true });
    assert.equal(r.code, EXIT.CANNOT_SCAN);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a missing file cannot be scanned: exit 2, named as given, no WASI errno', async () => {
  for (const missing of [path.join(VECTORS, 'no-such-file.tensors'), path.join(VECTORS, 'no-such-dir/x.pt')]) {
    const { code, report, stderr } = await run(missing);
    assert.equal(code, EXIT.CANNOT_SCAN);
    assert.equal(stderr, `tensorizer-validate: ${missing}: cannot open: No such file or directory`);
    assert.equal(report.file, missing);
    assert.equal(report.error.message, 'cannot open: No such file or directory');
  }
});

test('importing and running the package emits no warning', () => {
  const script = `import { validate } from ${JSON.stringify(new URL('../index.mjs', import.meta.url).href)};
    const r = await validate(${JSON.stringify(path.join(VECTORS, 'v1_flat.tensors'))}, { wasm: process.env.W || undefined });
    process.exitCode = r.code;`;
  const env = { ...process.env, W: wasm ?? '' };
  delete env.TENSORIZER_VALIDATE_VERBOSE;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { env, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '');
});
