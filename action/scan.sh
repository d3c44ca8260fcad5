#!/usr/bin/env bash
# The GitHub Action's scan step (action.yml): `tzr scan --sarif` over the
# paths in $TZR_SCAN_PATHS (whitespace-separated), the SARIF log written to
# $TZR_SCAN_SARIF, its path given to later steps through $GITHUB_OUTPUT.
# Exits with tzr's status: 0 clean, 1 findings at or above
# $TZR_SCAN_FAIL_ON (default error), 2 could not scan.
set -uo pipefail
tzr="${TZR:-tzr}"
sarif="${TZR_SCAN_SARIF:-tzr-scan.sarif}"
read -r -a paths <<<"${TZR_SCAN_PATHS:-.}"
"$tzr" scan --sarif --fail-on "${TZR_SCAN_FAIL_ON:-error}" "${paths[@]}" >"$sarif"
status=$?
if [ -n "${GITHUB_OUTPUT:-}" ]; then
    echo "sarif=$sarif" >>"$GITHUB_OUTPUT"
    echo "status=$status" >>"$GITHUB_OUTPUT"
fi
exit "$status"
