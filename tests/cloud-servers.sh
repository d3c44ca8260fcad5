#!/usr/bin/env bash
# Installs the loopback servers of the cloud store tests (feature "cloud")
# and runs those tests. Idempotent; safe on a fresh machine.
#   - Azurite (Azure Blob), from npm, pinned in tests/cloud-servers/package-lock.json;
#   - gcp-storage-emulator (GCS), from PyPI, pinned in tests/python-requirements.txt
#     (tests/python-env.sh installs it), wrapped by tests/cloud-servers/gcs_emulator.py;
#   - moto_server (STS for web identity), also from tests/python-requirements.txt.
# Usage: tests/cloud-servers.sh [VENV]   (default: .venv-test, made by tests/python-env.sh)
#        tests/cloud-servers.sh --install   (Azurite only; run-all.sh runs these
#                                            tests within `cargo test --workspace`)
set -euo pipefail
cd "$(dirname "$0")/.."
install_only=0
if [ "${1:-}" = "--install" ]; then
    install_only=1
    shift
fi
VENV="${1:-${TZR_TEST_VENV:-$PWD/.venv-test}}"

if ! command -v npm >/dev/null 2>&1; then
    echo "npm is required for Azurite (apt-get install npm, or Node.js 20+)" >&2
    exit 1
fi
# npm ci reinstalls only when the lock file changed since the last install.
stamp=tests/cloud-servers/node_modules/.tzr-lock
if [ ! -x tests/cloud-servers/node_modules/.bin/azurite-blob ] || ! cmp -s tests/cloud-servers/package-lock.json "$stamp"; then
    (cd tests/cloud-servers && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
    cp tests/cloud-servers/package-lock.json "$stamp"
fi
[ "$install_only" = 0 ] || exit 0
"$VENV/bin/python" -c "import gcp_storage_emulator" 2>/dev/null ||
    "$VENV/bin/pip" install -q --disable-pip-version-check -r tests/python-requirements.txt

export TZR_REQUIRE_SERVERS=1
export TZR_TEST_PYTHON="$VENV/bin/python"
export TZR_MOTO_SERVER="$VENV/bin/moto_server"
export TZR_AZURITE="$PWD/tests/cloud-servers/node_modules/.bin/azurite-blob"
cargo test --locked -p tensorizer-native --features cloud --lib cloud::
cargo test --locked -p tensorizer-native --features cloud --test it cloud::
