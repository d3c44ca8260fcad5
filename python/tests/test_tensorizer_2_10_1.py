"""Files both ways with tensorizer 2.10.1, the release vLLM 0.33's
``[tensorizer]`` extra pins (its arguments: ``test_arguments.py``).

Its sdist is fetched from PyPI with ``pip download`` into
``target/releases`` (once; its SHA-256 is checked) and its ``tensorizer/``
package extracted to ``target/tensorizer-2.10.1``; without network the test
is skipped. In a subprocess where ``import tensorizer`` gives 2.10.1, it
reads what tensorizer_rs writes (our layout and tensorizer's, encrypted by
key and by passphrase, ``write_module`` and ``write_state_dict`` names,
bf16, float8, int64 and bool tensors) and tensorizer_rs reads what 2.10.1
writes, tensor for tensor; and 2.10.1 refuses a version-5 file (spec §11.5).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tzhelpers
from upstream import releases

if tzhelpers.IS_ORACLE:
    pytest.skip("compares tensorizer_rs with the original itself", allow_module_level=True)

HERE = Path(__file__).resolve().parent
VERSION = "2.10.1"
#: tensorizer-2.10.1.tar.gz as published on PyPI.
SDIST = releases.Release(
    f"tensorizer=={VERSION}",
    f"tensorizer-{VERSION}.tar.gz",
    "fe39940548a287c84891ee9dd966d6e87575312625ba46c9eda11b0b79d05028",
)
WORK_DIR = releases.REPO / "target" / f"tensorizer-{VERSION}"


@pytest.fixture(scope="module")
def original() -> Path:
    """The folder holding 2.10.1's ``tensorizer`` package."""
    sdist, why = releases.fetch(SDIST)
    if sdist is None:
        pytest.skip(f"SKIPPED: {why}")
    return releases.extract_package(SDIST, "tensorizer", WORK_DIR)


FILES_BOTH_WAYS = r"""
import os, sys, torch
sys.path.insert(0, os.environ["TZR_ORIGINAL_TENSORIZER"])
import tensorizer, tensorizer_rs
assert tensorizer.__version__ == os.environ["TZR_ORIGINAL_VERSION"], tensorizer.__file__

torch.manual_seed(0)
module = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.LayerNorm(3))
sd = {
    "model.embed_tokens.weight": torch.randn(7, 4, dtype=torch.bfloat16),
    "model.norm.weight": torch.rand(4, dtype=torch.float16),
    "position_ids": torch.arange(9, dtype=torch.int64),
    "mask": torch.tensor([True, False]),
    "scales": torch.rand(6).to(torch.float8_e4m3fn),
}
key = bytes(range(32))
tmp = sys.argv[1]

def same(loaded, expected):
    assert sorted(loaded) == sorted(expected), (sorted(loaded), sorted(expected))
    for k, v in expected.items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k].view(torch.uint8), v.view(torch.uint8)), k

def write(lib, name, what, **kw):
    path = os.path.join(tmp, name)
    s = lib.TensorSerializer(path, **kw)
    if isinstance(what, dict):
        s.write_state_dict(what)
    else:
        s.write_module(what)
    s.close()
    return path

def read(lib, path, **kw):
    with lib.TensorDeserializer(path, device="cpu", **kw) as d:
        return {k: v.clone() for k, v in d.items()}

module_sd = {k: v.detach() for k, v in module.state_dict().items()}
cases = {
    "state dict, aligned": (sd, {}),
    "state dict, tensorizer layout": (sd, {"layout": "tensorizer"}),
    "module": (module, {}),
}
for label, (what, kw) in cases.items():
    expected = sd if isinstance(what, dict) else module_sd
    stem = label.replace(" ", "_").replace(",", "")
    path = write(tensorizer_rs, stem + ".rs.tensors", what, **kw)
    same(read(tensorizer, path), expected)
    path = write(tensorizer, stem + ".orig.tensors", what)
    same(read(tensorizer_rs, path), expected)
    print("ok:", label)

for label, (enc, dec) in {
    "key": (lambda lib: lib.EncryptionParams(key), lambda lib: lib.DecryptionParams.from_key(key)),
    "passphrase": (
        lambda lib: lib.EncryptionParams.from_string("secret", opslimit=1, memlimit=8192),
        lambda lib: lib.DecryptionParams.from_string("secret"),
    ),
}.items():
    path = write(tensorizer_rs, f"enc-{label}.rs.tensors", sd, encryption=enc(tensorizer_rs))
    same(read(tensorizer, path, encryption=dec(tensorizer)), sd)
    path = write(tensorizer, f"enc-{label}.orig.tensors", sd, encryption=enc(tensorizer))
    same(read(tensorizer_rs, path, encryption=dec(tensorizer_rs)), sd)
    print("ok: encrypted by", label)

# A dimension of 2**32 or more needs data version 5, which 2.10.1 refuses.
path = write(tensorizer_rs, "long.rs.tensors", {"x": torch.empty(1 << 32, dtype=torch.bool, device="meta")})
try:
    read(tensorizer, path, lazy_load=True)
except ValueError as e:
    assert "version 5" in str(e), e
    print("ok: 2.10.1 refuses a version-5 file")
"""


def test_files_both_ways_with_2_10_1(original: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FILES_BOTH_WAYS), str(tmp_path)],
        env=dict(os.environ, TZR_ORIGINAL_TENSORIZER=str(original), TZR_ORIGINAL_VERSION=VERSION),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert done.stdout.count("ok:") == 6, done.stdout
