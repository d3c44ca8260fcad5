#!/usr/bin/env bash
# Makes the release archive `cargo binstall tzr` looks for (the
# `[package.metadata.binstall]` of this crate): target/dist/tzr-<target>.tar.gz
# holding tzr-<target>/tzr, built --locked in the release profile (stripped),
# with the licences and README. Prints the archive's path last.
set -euo pipefail
cd "$(dirname "$0")/../.."
triple="$(rustc -vV | sed -n 's/^host: //p')"
cargo build --locked --release -p tzr >&2
target="${CARGO_TARGET_DIR:-target}"
dir="$target/dist/tzr-$triple"
rm -rf "$dir"
mkdir -p "$dir"
cp "$target/release/tzr" LICENSE-MIT LICENSE-APACHE README.md "$dir/"
tar -C "$target/dist" -czf "$dir.tar.gz" "tzr-$triple"
echo "$(du -m "$dir/tzr" | cut -f1) MiB tzr" >&2
echo "$dir.tar.gz"
