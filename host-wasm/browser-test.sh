#!/usr/bin/env bash
# Tests the browser inspector page built into tzr (its build script compiles
# host-wasm for wasm32-unknown-unknown and makes the wasm-bindgen glue; see
# host-native/tzr/build/page.rs) in headless Debian chromium, driven by
# playwright-core, against a local nginx (Range + CORS). The page under test
# is the one in the binary: `tzr view --write-page` writes it out for nginx,
# and `tzr view` serves it itself from outside the repository.
#
# Idempotent installs, each only when missing or at another version:
#   rustup target wasm32-unknown-unknown; Debian chromium (as root); npm
#   playwright-core (host-wasm/web-tests/package-lock.json).
# No browser is ever downloaded: playwright-core drives /usr/bin/chromium.
#
# usage: host-wasm/browser-test.sh [PYTHON]    (default: .venv-test/bin/python)
#        host-wasm/browser-test.sh --build-only (build tzr, write the page, check its size)
#        host-wasm/browser-test.sh --install     (playwright-core from npm only)
# TZR_BIN: a tzr built already (run-all.sh's, from its one workspace build);
# by default this builds target/debug/tzr.
set -euo pipefail
cd "$(dirname "$0")/.."

PLAYWRIGHT_VERSION=1.64.1
CHROMIUM="${TZR_CHROMIUM:-/usr/bin/chromium}"
MAX_GZIPPED_WASM=$((400 * 1024))
BUILD_ONLY=0
INSTALL=""
case "${1:-}" in
--build-only) BUILD_ONLY=1; shift ;;
--install) INSTALL="$1"; shift ;;
esac
PY="${1:-.venv-test/bin/python}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
ARTIFACTS="$TARGET_DIR/browser-artifacts"
as_root() { [ "$(id -u)" = 0 ]; }

WEB_TESTS=host-wasm/web-tests
install_playwright() {
    local have_pw
    have_pw="$(node -p "require('./$WEB_TESTS/node_modules/playwright-core/package.json').version" 2>/dev/null || true)"
    if [ "$have_pw" != "$PLAYWRIGHT_VERSION" ]; then
        (cd "$WEB_TESTS" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
    fi
}
if [ "$INSTALL" = --install ]; then
    install_playwright
    exit 0
fi

# --- tzr and its page ------------------------------------------------------------
if [ -z "${TZR_BIN:-}" ]; then
    if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
        rustup target add wasm32-unknown-unknown
    fi
    # Linted as it builds, the page's crate included (clippy -D warnings).
    bash tests/linted.sh cargo build --locked -p tzr
    TZR_BIN="$TARGET_DIR/debug/tzr"
fi
TZR_BIN="$(realpath "$TZR_BIN")"
PAGE="$ARTIFACTS/page"
rm -rf "$PAGE"
(cd / && "$TZR_BIN" view --write-page "$PAGE")
WASM_OUT="$PAGE/pkg/tensorizer_wasm_bg.wasm"
raw=$(wc -c <"$WASM_OUT")
gz=$(gzip -9 -c "$WASM_OUT" | wc -c)
echo "inspector wasm: $raw bytes, $gz bytes gzipped (-9); limit $MAX_GZIPPED_WASM"
if [ "$gz" -gt "$MAX_GZIPPED_WASM" ]; then
    echo "browser-test: the inspector's wasm is over 400 KiB gzipped" >&2
    exit 1
fi
if [ "$BUILD_ONLY" = 1 ]; then
    exit 0
fi

# --- browser, server, driver ---------------------------------------------------
if [ ! -x "$CHROMIUM" ]; then
    if as_root && apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; then
        :
    fi
    if [ ! -x "$CHROMIUM" ]; then
        echo "SKIPPED: Debian chromium could not be installed (apt-get install chromium); the browser inspector was built but not tested" >&2
        exit 0
    fi
fi
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    if as_root; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
    else
        echo "browser-test: nginx is missing (apt-get install nginx-light)" >&2
        exit 1
    fi
fi

install_playwright

# --- inputs --------------------------------------------------------------------
mkdir -p "$ARTIFACTS/cache"
"$PY" "$WEB_TESTS/make_files.py" "$ARTIFACTS/cache"

# --- tests -----------------------------------------------------------------------
TZR_CHROMIUM="$CHROMIUM" TZR_ARTIFACTS="$ARTIFACTS" TZR_BIN="$TZR_BIN" \
    node --test --test-concurrency=1 --test-reporter=spec "$WEB_TESTS/inspector.test.mjs"
echo "browser-test: screenshot in $ARTIFACTS/inspector.png"
