"""Tensors handed out are private copies by default: rewriting or truncating
the file afterwards changes nothing and kills nothing. ``mmap=True`` opts
into zero-copy views of a private memory map (unsafe against in-place
rewrites, so never the default)."""

import hashlib

import pytest
import torch

from tzhelpers import TZ_NAME, child_result, make_tensor, raw_bytes, run_child, tz

pytestmark = pytest.mark.skipif(TZ_NAME != "tensorizer_rs", reason="mmap= is a tensorizer_rs extension")


def state_dict():
    return {
        "w": torch.randn(64, 33),
        "bf": torch.randn(17).to(torch.bfloat16),
        "big": make_tensor(torch.bfloat16, (1024, 1024), 3),  # 2 MiB: many pages
        "i": torch.arange(10),
        "b": torch.tensor([True, False, True]),
        "empty": torch.empty(0, 3),
        "meta": torch.empty(5, device="meta"),
    }


def test_mapped_and_copied_loads_agree_and_never_write_the_file(tmp_path):
    sd = state_dict()
    path = tmp_path / "m.tensors"
    with tz.TensorSerializer(str(path)) as s:
        s.write_state_dict(sd)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    mapped = tz.TensorDeserializer(str(path), device="cpu", mmap=True)
    copied = tz.TensorDeserializer(str(path), device="cpu")
    assert mapped._map is not None and copied._map is None
    for k in sd:
        assert raw_bytes(mapped[k]) == raw_bytes(copied[k]), k
    with torch.no_grad():
        mapped["w"].add_(1.0)  # copy-on-write: the file must not change
        copied["w"].add_(1.0)
    mapped.close()
    del mapped
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    again = tz.TensorDeserializer(str(path), device="cpu", verify_hash=True)
    assert torch.equal(again["w"], sd["w"])


_REWRITE_CHILD = r"""
import importlib
import torch
tz = importlib.import_module(os.environ["TZ_UNDER_TEST"])
path, expected_path, lazy = sys.argv[1], sys.argv[2], sys.argv[3] == "lazy"
expected = torch.load(expected_path)
result = {"steps": []}
if hasattr(tz, "_deserializer") and hasattr(tz._deserializer, "LAZY_READ_AHEAD_BYTES"):
    tz._deserializer.LAZY_READ_AHEAD_BYTES = 0  # no read-ahead: "b" must stay unread
d = tz.TensorDeserializer(path, device="cpu", lazy_load=lazy)
held = {k: d[k] for k in ("w", "bf", "big", "i")}  # the rest stays unloaded when lazy

def raw(t):
    return t.detach().reshape(-1).view(torch.uint8)

def same():  # reads every byte of every tensor held
    return all(torch.equal(raw(t), raw(expected[k])) for k, t in held.items())

result["steps"].append(["loaded", same()])
size = os.path.getsize(path)
with open(path, "r+b") as f:  # cp-style: the same inode, new bytes
    f.write(bytes((b ^ 0x5A) for b in open(path, "rb").read()))
    f.flush()
    os.fsync(f.fileno())
result["steps"].append(["rewritten", same()])
os.truncate(path, 0)
result["steps"].append(["truncated", same()])  # touches every byte of every tensor
with torch.no_grad():
    for t in held.values():
        t.reshape(-1)[0] = t.reshape(-1)[-1]  # and write to each
result["steps"].append(["written", True])
try:
    d["b"]
    result["late"] = "loaded"
except Exception as e:
    result["late"] = type(e).__name__
print(json.dumps(result), flush=True)
"""


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_tensors_survive_in_place_rewrite_and_truncation(tmp_path, lazy):
    """Load, rewrite the file in place with other bytes, then truncate it
    to 0 bytes: the tensors already handed out keep their values, and
    touching them never raises SIGBUS (the child would die)."""
    sd = state_dict()
    path = tmp_path / "victim.tensors"
    with tz.TensorSerializer(str(path)) as s:
        s.write_state_dict(sd)
    expected = tmp_path / "expected.pt"
    torch.save({k: v for k, v in sd.items() if not v.is_meta}, expected)
    result = child_result(run_child(_REWRITE_CHILD, path, expected, "lazy" if lazy else "eager", timeout=120))
    assert result["steps"] == [["loaded", True], ["rewritten", True], ["truncated", True], ["written", True]]
    if lazy:
        # a tensor first asked for after the truncation: an error, not a crash
        assert result["late"] != "loaded", result
    else:
        assert result["late"] == "loaded", result


def test_explicit_mmap_loads(tmp_path):
    sd = state_dict()
    path = tmp_path / "m.tensors"
    with tz.TensorSerializer(str(path)) as s:
        s.write_state_dict(sd)
    for lazy in (False, True):
        with tz.TensorDeserializer(str(path), device="cpu", mmap=True, lazy_load=lazy) as d:
            assert d._map is not None
            for k, t in sd.items():
                if t.is_meta:
                    assert not d[k].any() and d[k].shape == t.shape
                else:
                    assert raw_bytes(d[k]) == raw_bytes(t), k
