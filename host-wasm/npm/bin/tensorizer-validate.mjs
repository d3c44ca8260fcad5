#!/usr/bin/env node
// `npx tensorizer-validate FILE...`: the validator's command line over the
// package's `run`, one file after another; exits with the worst status
// (0 no findings, 1 findings, 2 could not scan).

import fs from 'node:fs';

import { EXIT, PROGRAM, VERBOSE_ENV, moduleVersion, run } from '../index.mjs';

const USAGE = `\
${PROGRAM}: scan model files (tensorizer, safetensors, torch.save zip, legacy
torch or bare pickle) in a WebAssembly sandbox and report every finding

Usage:
  ${PROGRAM} [--verify] [--json | --sarif] [--key-file PATH | --passphrase-env VAR]
                      [--verbose] FILE...
  ${PROGRAM} --help | --version

Options:
  --verify              also check every tensor of a tensorizer file against its
                        stored CRC32/SHA-256 hashes (and MACs, when encrypted)
  --key-file PATH       file holding the 32-byte key, raw or as 64 hex digits
  --passphrase-env VAR  read the passphrase from environment variable VAR
  --json                print each file's report as one line of JSON
  --sarif               print each file's findings as one line of SARIF 2.1.0
  --verbose             keep Node's warning that WASI is experimental
                        (also: ${VERBOSE_ENV}=1)

Exit codes (the worst over all files):
  0  scanned: no findings
  1  scanned: findings (hash or authentication failures included)
  2  could not be scanned (usage error, unreadable file or key, --verify on an
     encrypted file without a key)
`;

/** Parses `argv`: { files, options, help, version } or throws a usage line. */
function parse(argv) {
  const opts = { output: 'text', verify: false, keyFile: null, passphraseEnv: null, verbose: false };
  const files = [];
  let done = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (done || !arg.startsWith('-') || arg === '-') {
      files.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const value = () => {
      if (eq > 0) return arg.slice(eq + 1);
      if (i + 1 >= argv.length) throw new Error(`${name} needs a value`);
      return argv[++i];
    };
    if (name === '--') done = true;
    else if (name === '-h' || name === '--help') return { help: true };
    else if (name === '-V' || name === '--version') return { version: true };
    else if (name === '--verify' && eq < 0) opts.verify = true;
    else if (name === '--verbose' && eq < 0) opts.verbose = true;
    else if ((name === '--json' || name === '--sarif') && eq < 0) {
      const want = name.slice(2);
      if (opts.output !== 'text' && opts.output !== want) throw new Error('give at most one of --json and --sarif');
      opts.output = want;
    } else if (name === '--key-file' || name === '--passphrase-env') {
      if (opts.keyFile !== null || opts.passphraseEnv !== null) {
        throw new Error('give at most one of --key-file and --passphrase-env');
      }
      if (name === '--key-file') opts.keyFile = value();
      else opts.passphraseEnv = value();
    } else throw new Error(`unknown option ${JSON.stringify(arg)}`);
  }
  if (!files.length) throw new Error('no FILE given');
  return { files, opts };
}

async function main(argv) {
  let parsed;
  try {
    parsed = parse(argv);
  } catch (e) {
    process.stderr.write(`${PROGRAM}: ${e.message} (see --help)\n`);
    return EXIT.CANNOT_SCAN;
  }
  if (parsed.help) {
    process.stdout.write(USAGE);
    return EXIT.CLEAN;
  }
  if (parsed.version) {
    const pkg = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    process.stdout.write(`${PROGRAM} ${pkg.version} (npm package); ${await moduleVersion()}\n`);
    return EXIT.CLEAN;
  }
  const { files, opts } = parsed;
  if (opts.verbose) process.env[VERBOSE_ENV] = '1';
  let passphrase = null;
  if (opts.passphraseEnv !== null) {
    passphrase = process.env[opts.passphraseEnv] ?? null;
    if (!passphrase) {
      const why = passphrase === null ? 'is not set' : 'is empty';
      process.stderr.write(`${PROGRAM}: environment variable ${opts.passphraseEnv} ${why}\n`);
      return EXIT.CANNOT_SCAN;
    }
  }
  let worst = EXIT.CLEAN;
  for (const file of files) {
    const r = await run(file, { output: opts.output, verify: opts.verify, keyFile: opts.keyFile, passphrase });
    if (r.stdout) process.stdout.write(`${r.stdout}\n`);
    if (r.stderr) process.stderr.write(`${r.stderr}\n`);
    worst = Math.max(worst, r.code);
  }
  return worst;
}

process.exitCode = await main(process.argv.slice(2));
