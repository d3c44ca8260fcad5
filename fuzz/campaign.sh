#!/usr/bin/env bash
# The fuzz campaign: every target for RUNS executions (default 10^7), one
# after another, seeded with the committed vectors. Not part of CI (it takes
# hours on two cores); run it before a release and record the summary in
# spec/15-hostile-input.md §15.10.
#
#   bash fuzz/campaign.sh                  # all targets, 10^7 runs each
#   RUNS=100000 bash fuzz/campaign.sh metadata path_registry
#
# Needs cargo-fuzz (installed here if missing) and a nightly toolchain, or
# the stable one with RUSTC_BOOTSTRAP=1 (which lets it take cargo-fuzz's -Z
# flags) when no nightly is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-10000000}"
# A target that has not finished its runs by then is stopped and its count
# reported as it stands.
MAX_SECONDS="${MAX_SECONDS:-7200}"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(file_header metadata tensor_header crypt_info names_and_dtypes path_registry whole_file whole_file_keyed
        checkpoint checkpoint_pickle sniff validator_cli gguf scan suppress resp http_response)
fi

command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
toolchain=()
if rustup toolchain list | grep -q '^nightly'; then
    toolchain=(+nightly)
else
    export RUSTC_BOOTSTRAP=1
fi

summary=fuzz/artifacts/campaign-summary.txt
mkdir -p fuzz/artifacts
printf '# %s  runs=%s  rustc %s\n' "$(date -u +%FT%TZ)" "$RUNS" "$(rustc "${toolchain[@]}" --version)${RUSTC_BOOTSTRAP:+ (RUSTC_BOOTSTRAP=1)}" >>"$summary"

for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    mkdir -p "$corpus"
    # Inputs that once failed the target: replayed first on every run.
    if [ -d "fuzz/regressions/$t" ]; then
        cp "fuzz/regressions/$t"/* "$corpus/"
    fi
    extra=()
    if [ "$t" = path_registry ]; then
        # Synthetic paths: short inputs hold hundreds of them.
        extra=(-max_len=1024)
    elif [ "$t" = suppress ]; then
        # Suppression files, and globs against paths.
        printf '[[ignore]]\nrule = "PKL-007"\npath = "legacy/**/*.pt"\nreason = "reviewed"\n' >"$corpus/seed-entry"
        printf '*a*a*a*a*a*a*a*a*a*bmodels/aaaaaaaaaaaaaaaaaaaaaaaaa.pt' >"$corpus/seed-glob"
    elif [ "$t" = scan ]; then
        # Every format the scanner tells apart: small files whole, the rest
        # their first 64 KiB.
        for f in tests/vectors/*.tensors tests/vectors/torch/*; do
            head -c 65536 "$f" >"$corpus/seed-$(basename "$f")"
        done
    elif [[ "$t" == checkpoint* ]]; then
        # torch.save checkpoints written by torch (and the hostile ones).
        cp tests/vectors/torch/*.pt "$corpus/"
        if [ "$t" = checkpoint_pickle ]; then
            # The pickle machine alone: the data.pkl of each checkpoint.
            python3 -c 'import sys, zipfile
for p in sys.argv[2:]:
    try:
        z = zipfile.ZipFile(p)
    except zipfile.BadZipFile:
        continue
    for n in z.namelist():
        if n.endswith("/data.pkl"):
            open(sys.argv[1] + "/pkl-" + p.rsplit("/", 1)[-1], "wb").write(z.read(n))' "$corpus" tests/vectors/torch/*.pt
        fi
    elif [ "$t" = sniff ]; then
        # A claimed length (8 bytes), then the first bytes of every format.
        for f in tests/vectors/*.tensors tests/vectors/torch/*.pt; do
            { printf '\xff\xff\xff\x7f\0\0\0\0'; head -c 512 "$f"; } >"$corpus/seed-$(basename "$f")"
        done
    elif [ "$t" = resp ]; then
        # A buffer size byte, then replies a Redis server sends: statuses,
        # errors, integers, bulk strings, nil, a SCAN reply, an EXEC reply.
        printf '\x10+OK\r\n' >"$corpus/status"
        printf '\x04-ERR wrong\r\n:-42\r\n' >"$corpus/error"
        printf '\x08$5\r\na\r\n\0b\r\n$-1\r\n' >"$corpus/bulk"
        printf '\x00*2\r\n$1\r\n0\r\n*2\r\n$3\r\na:1\r\n$3\r\na:2\r\n' >"$corpus/scan"
        printf '\x00*3\r\n:1\r\n-ERR x\r\n*-1\r\n' >"$corpus/exec"
    elif [ "$t" = http_response ]; then
        # A count of read ends (two bytes each), then responses a server
        # sends to a ranged GET: partial content, more body than declared in
        # three reads, a chunked one, one with two differing lengths.
        printf '\x00HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/10\r\nETag: "e"\r\nContent-Length: 5\r\n\r\nhello' >"$corpus/partial"
        printf '\x02\x10\x00\x30\x00HTTP/1.1 206 P\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabcdef' >"$corpus/split"
        printf '\x00HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n' >"$corpus/chunked"
        printf '\x01\x05\x00HTTP/1.0 416 R\r\nContent-Length: 2\r\ncontent-length: 3\r\n\r\n' >"$corpus/lengths"
    elif [ "$t" = validator_cli ]; then
        # A report budget byte, NUL-separated arguments ending in two NULs,
        # then the file.
        for f in tests/vectors/*.tensors; do
            { printf '\x40validate\0--verify\0--json\0f\0\0'; head -c 65536 "$f"; } >"$corpus/seed-$(basename "$f")"
            { printf '\x02validate\0f\0\0'; head -c 4096 "$f"; } >"$corpus/seed-$(basename "$f").head"
        done
    else
        # Seed with real files (small ones whole, and the first 4 KiB of
        # each, which holds the header and the start of the index).
        for f in tests/vectors/*.tensors; do
            head -c 4096 "$f" >"$corpus/seed-$(basename "$f").head"
            if [ "$(stat -c %s "$f")" -le 65536 ]; then cp "$f" "$corpus/seed-$(basename "$f")"; fi
        done
    fi
    log="fuzz/artifacts/$t.log"
    start=$(date +%s)
    cargo "${toolchain[@]}" fuzz run --sanitizer none --fuzz-dir fuzz "$t" "$corpus" -- \
        -runs="$RUNS" -max_total_time="$MAX_SECONDS" -timeout=5 -rss_limit_mb=2048 \
        -print_final_stats=1 "${extra[@]}" >"$log" 2>&1 || { echo "$t: FAILED, see $log" | tee -a "$summary"; continue; }
    took=$(( $(date +%s) - start ))
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    peak=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    line="$t: ${runs:-?} executions in ${took} s, peak RSS ${peak:-?} MiB, no crash"
    echo "$line" | tee -a "$summary"
done
