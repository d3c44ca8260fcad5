#!/usr/bin/env bash
# Builds the browser inspector (wasm32-unknown-unknown + wasm-bindgen) into
# host-wasm/web/pkg and tests the page in headless Debian chromium, driven
# by playwright-core, against a local nginx (Range + CORS).
#
# Idempotent installs, each only when missing or at another version:
#   rustup target wasm32-unknown-unknown; wasm-bindgen-cli exactly
#   $WASM_BINDGEN_VERSION (cargo install --locked); Debian chromium (as
#   root); npm playwright-core (host-wasm/web-tests/package-lock.json).
# No browser is ever downloaded: playwright-core drives /usr/bin/chromium.
#
# usage: host-wasm/browser-test.sh [PYTHON]    (default: .venv-test/bin/python)
#        host-wasm/browser-test.sh --build-only
#        host-wasm/browser-test.sh --install     (playwright-core from npm only)
#        host-wasm/browser-test.sh --install-cli (wasm-bindgen-cli only)
set -euo pipefail
cd "$(dirname "$0")/.."

WASM_BINDGEN_VERSION=0.2.130
PLAYWRIGHT_VERSION=1.64.1
CHROMIUM="${TZR_CHROMIUM:-/usr/bin/chromium}"
MAX_GZIPPED_WASM=$((400 * 1024))
BUILD_ONLY=0
INSTALL=""
case "${1:-}" in
--build-only) BUILD_ONLY=1; shift ;;
--install | --install-cli) INSTALL="$1"; shift ;;
esac
PY="${1:-.venv-test/bin/python}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
ARTIFACTS="$TARGET_DIR/browser-artifacts"
as_root() { [ "$(id -u)" = 0 ]; }

# --- toolchain ---------------------------------------------------------------
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    rustup target add wasm32-unknown-unknown
fi

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

install_wasm_bindgen() {
    # --debug: compiles in a third of the time, and runs in a second or two
    # on the inspector's module.
    if cargo install --debug --locked wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"; then
        return 0
    fi
    # The published lockfile can name a dependency version the registry no
    # longer serves (wasm-bindgen-cli 0.2.130 locks webpki-roots 1.0.11,
    # which crates.io does not list). Keep every other locked version:
    # let cargo re-resolve only the missing entries, then install --locked
    # from that lockfile.
    echo "browser-test: cargo install --locked failed; retrying with the missing lock entries re-resolved" >&2
    local crate work
    crate="$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/wasm-bindgen-cli-"$WASM_BINDGEN_VERSION".crate | head -1)"
    work="$(mktemp -d)"
    tar -xzf "$crate" -C "$work"
    (
        cd "$work/wasm-bindgen-cli-$WASM_BINDGEN_VERSION"
        cp Cargo.lock Cargo.lock.published
        for _ in 1 2 3 4 5 6 7 8; do
            if out="$(cargo fetch 2>&1)"; then
                break
            fi
            # "failed to select a version for the requirement `NAME = "^x"` (locked to y)"
            name="$(printf '%s\n' "$out" | sed -n 's/.*requirement `\([A-Za-z0-9_-]*\) = .*(locked to .*/\1/p' | head -1)"
            if [ -z "$name" ]; then
                printf '%s\n' "$out" >&2
                exit 1
            fi
            cargo update --quiet -p "$name"
        done
        diff Cargo.lock.published Cargo.lock >&2 || true
        cargo install --debug --locked --path . --root "${CARGO_HOME:-$HOME/.cargo}"
    )
    rm -rf "$work"
}
if [ "$INSTALL" != --install ] && [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $WASM_BINDGEN_VERSION" ]; then
    install_wasm_bindgen
fi
[ "$INSTALL" != --install-cli ] || exit 0

# --- build -------------------------------------------------------------------
# The validator's size profile (LTO, one codegen unit, opt-level 3) but not
# stripped: wasm-bindgen reads the target_features section, and removes
# the name and producers sections itself.
# Linted as it builds (clippy -D warnings on host-wasm and the core for wasm32).
bash tests/linted.sh cargo build --locked --target wasm32-unknown-unknown -p tensorizer-wasm --lib \
    --config host-wasm/wasm-release.toml --profile wasm-release --config 'profile.wasm-release.strip=false'
WASM_IN="$TARGET_DIR/wasm32-unknown-unknown/wasm-release/tensorizer_wasm.wasm"
PKG=host-wasm/web/pkg
rm -rf "$PKG"
wasm-bindgen --target web --remove-name-section --remove-producers-section --out-dir "$PKG" "$WASM_IN"
WASM_OUT="$PKG/tensorizer_wasm_bg.wasm"
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

# `tzr view` serves the page in one test.
install_playwright
# The tzr under test: TZR_BIN when the caller built it (run-all.sh does, in
# its one workspace build), else a debug build here.
if [ -z "${TZR_BIN:-}" ]; then
    cargo build --locked -p tzr
    TZR_BIN="$TARGET_DIR/debug/tzr"
fi

# --- inputs --------------------------------------------------------------------
mkdir -p "$ARTIFACTS/cache"
"$PY" "$WEB_TESTS/make_files.py" "$ARTIFACTS/cache"

# --- tests -----------------------------------------------------------------------
TZR_CHROMIUM="$CHROMIUM" TZR_ARTIFACTS="$ARTIFACTS" TZR_BIN="$TZR_BIN" \
    node --test --test-concurrency=1 --test-reporter=spec "$WEB_TESTS/inspector.test.mjs"
echo "browser-test: screenshot in $ARTIFACTS/inspector.png"
