#!/usr/bin/env bash
# Runs a cargo command with clippy linting the workspace's own crates as
# they compile (clippy-driver as the workspace wrapper, given the arguments
# `cargo clippy -- -D warnings` passes it): one compile both lints and
# builds, where `cargo clippy` and then `cargo build` would type-check
# every crate twice. Every cargo command on the same target directory and
# profile must run through it alike, or the workspace's crates rebuild.
#
# usage: tests/linted.sh cargo build ...
set -euo pipefail
driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"
export RUSTC_WORKSPACE_WRAPPER="$driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
exec "$@"
