"""Meta tensors never allocate what the file merely claims.

A meta tensor stores a shape and dtype and no data. Materializing it as
zeros (tensorizer's contract, and our default) uses lazily zeroed pages
and is bounded by ``max_meta_bytes``; ``meta_tensors="expand"`` and
``"meta"`` take no memory at all. The hostile cases run in a child with a
capped address space.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tzhelpers import (
    TZ_NAME,
    child_result,
    import_oracle,
    raw_tensors_file,
    run_child,
    tz,
    write_with,
)

pytestmark = pytest.mark.skipif(TZ_NAME != "tensorizer_rs", reason="meta_tensors= is a tensorizer_rs extension")

GiB = 1 << 30
HUGE_SHAPE = (4, GiB)  # float32: 16 GiB claimed by a file of a few hundred bytes


@pytest.fixture
def huge_meta_file(tmp_path):
    p = tmp_path / "huge_meta.tensors"
    p.write_bytes(raw_tensors_file([
        (b"small", "<f4", (3,), np.arange(3, dtype="<f4").tobytes()),
        (b"huge", "<f4", HUGE_SHAPE, None),
    ]))
    assert p.stat().st_size < 400
    return p


_HUGE_CHILD = r"""
import importlib, time
import numpy as np
import torch
tz = importlib.import_module(os.environ["TZ_UNDER_TEST"])
limit_address_space(4 << 30)
path, how = sys.argv[1], sys.argv[2]
kwargs = {} if how == "default" else {"meta_tensors": how}
result = {}
start = time.perf_counter()
try:
    if sys.argv[3] == "torch":
        with tz.TensorDeserializer(path, device="cpu", **kwargs) as d:
            t = d["huge"]
            result.update(shape=list(t.shape), is_meta=t.is_meta, stride=list(t.stride()),
                          small=d["small"].tolist())
            if not t.is_meta:
                result["sample"] = t[3, GIB - 1].item()
    else:
        with tz.TensorDeserializer(path, device="cpu", lazy_load=True, **kwargs) as d:
            arrays = {name: a for _, _, name, a, _, _ in d.read_numpy_arrays()}
        a = arrays["huge"]
        result.update(shape=list(a.shape), strides=list(a.strides), writeable=a.flags.writeable,
                      sample=float(a[3, GIB - 1]), small=arrays["small"].tolist())
except Exception as e:
    result["error"] = type(e).__name__ + ": " + str(e)
result["seconds"] = time.perf_counter() - start
print(json.dumps(result), flush=True)
""".replace("GIB", str(GiB))


@pytest.mark.parametrize("api", ["torch", "numpy"])
def test_huge_meta_tensor_default_raises_before_allocating(huge_meta_file, api):
    result = child_result(run_child(_HUGE_CHILD, huge_meta_file, "default", api, timeout=120))
    assert "error" in result, result
    error = result["error"]
    assert error.startswith("ValueError"), error
    for needed in ("'huge'", "17,179,869,184", "max_meta_bytes", "meta_tensors='expand'", "meta_tensors='meta'"):
        assert needed in error, (needed, error)


@pytest.mark.parametrize("api", ["torch", "numpy"])
def test_huge_meta_tensor_expand(huge_meta_file, api):
    result = child_result(run_child(_HUGE_CHILD, huge_meta_file, "expand", api, timeout=120))
    assert "error" not in result, result
    assert result["shape"] == list(HUGE_SHAPE) and result["sample"] == 0
    assert result["small"] == [0.0, 1.0, 2.0]
    assert result["seconds"] < 10, result
    if api == "torch":
        assert result["stride"] == [0, 0] and not result["is_meta"]
    else:
        assert result["strides"] == [0, 0] and not result["writeable"]


def test_huge_meta_tensor_on_the_meta_device(huge_meta_file):
    result = child_result(run_child(_HUGE_CHILD, huge_meta_file, "meta", "torch", timeout=120))
    assert "error" not in result, result
    assert result["shape"] == list(HUGE_SHAPE) and result["is_meta"]
    assert result["small"] == [0.0, 1.0, 2.0]
    assert result["seconds"] < 10, result


_SLICE_CHILD = r"""
import importlib
import torch
tz = importlib.import_module(os.environ["TZ_UNDER_TEST"])
limit_address_space(4 << 30)
path, how = sys.argv[1], sys.argv[2]
kwargs = {} if how == "default" else {"meta_tensors": how}
result = {}
with tz.TensorDeserializer(path, device="cpu", lazy_load=True, **kwargs) as d:
    s = d.get_slice("huge")
    small = s[1, 5:9]
    result.update(small_shape=list(small.shape), small=None if small.is_meta else small.tolist())
    try:
        t = s[:]
        result.update(shape=list(t.shape), stride=list(t.stride()), is_meta=t.is_meta)
    except Exception as e:
        result["error"] = type(e).__name__ + ": " + str(e)
print(json.dumps(result), flush=True)
"""


@pytest.mark.parametrize("how", ["default", "expand", "meta"])
def test_slices_of_a_huge_meta_tensor_are_bounded_like_the_tensor(huge_meta_file, how):
    """``get_slice(name)[...]`` of a meta tensor follows ``meta_tensors``
    and ``max_meta_bytes`` as ``d[name]`` does: a whole 16 GiB claim is
    refused before allocating, small slices are zeros."""
    result = child_result(run_child(_SLICE_CHILD, huge_meta_file, how, timeout=120))
    assert result["small_shape"] == [4]
    if how == "default":
        assert result["small"] == [0.0] * 4
        error = result.get("error", "")
        assert error.startswith("ValueError"), result
        for needed in ("'huge'", "17,179,869,184", "max_meta_bytes", "meta_tensors='expand'"):
            assert needed in error, (needed, error)
    else:
        assert "error" not in result, result
        assert result["shape"] == list(HUGE_SHAPE)
        assert result["is_meta"] == (how == "meta")
        if how == "expand":
            assert result["small"] == [0.0] * 4 and result["stride"] == [0, 0]


def test_meta_slices_count_against_max_meta_bytes(tmp_path):
    """Each zero-filled slice is new memory: its bytes join the reader's
    running total."""
    p, _ = meta_file(tmp_path)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True, max_meta_bytes=48) as d:
        s = d.get_slice("m_f32")
        assert s[0].tolist() == [0.0] * 4  # 16 bytes
        assert s[1:3].shape == (2, 4)  # 32 more: 48 in all
        with pytest.raises(ValueError, match="'m_f32'.*max_meta_bytes=48"):
            s[2]
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True, max_meta_bytes=None) as d:
        assert not d.get_slice("m_f32")[:].any()


_RSS_CHILD = r"""
import importlib
import torch
tz = importlib.import_module(os.environ["TZ_UNDER_TEST"])
limit_address_space(3 << 30)
before = vm_bytes("VmRSS")
d = tz.TensorDeserializer(sys.argv[1], device="cpu")
t = d["big"]
after = vm_bytes("VmRSS")
with torch.no_grad():
    t[-1, -1] = 1.0  # writable: the page written is committed, no other
written = vm_bytes("VmRSS")
print(json.dumps({"grew": after - before, "grew_after_write": written - before,
                  "shape": list(t.shape), "nbytes": t.numel() * t.element_size(),
                  "last": t[-1, -1].item(), "first": t[0, 0].item()}), flush=True)
"""


def test_zero_filled_meta_tensor_takes_no_resident_memory(tmp_path):
    """1 GiB of meta tensor, below the default bound: real, writable zeros
    whose pages are committed only when written."""
    p = tmp_path / "gib_meta.tensors"
    write_with(tz, p, lambda s: s.write_state_dict({"big": torch.empty(GiB // 4096, 1024, device="meta")}))
    result = child_result(run_child(_RSS_CHILD, p, timeout=120))
    assert result["nbytes"] == GiB
    assert result["first"] == 0 and result["last"] == 1
    assert result["grew"] < 64 << 20, result
    assert result["grew_after_write"] < 64 << 20, result


def meta_file(tmp_path):
    sd = {
        "real": torch.arange(4.0),
        "m_f32": torch.empty(3, 4, device="meta"),
        "m_i64": torch.empty(5, dtype=torch.int64, device="meta"),
        "m_bool": torch.empty(2, 2, dtype=torch.bool, device="meta"),
        "m_scalar": torch.empty((), dtype=torch.float16, device="meta"),
        "m_bf16": torch.empty(2, 3, dtype=torch.bfloat16, device="meta"),
    }
    p = tmp_path / "meta.tensors"
    write_with(tz, p, lambda s: s.write_state_dict(sd))
    return p, sd


@pytest.mark.parametrize("verify_hash", [False, True], ids=["plain", "verify_hash"])
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_meta_modes(tmp_path, lazy, verify_hash):
    p, sd = meta_file(tmp_path)
    kw = dict(device="cpu", lazy_load=lazy, verify_hash=verify_hash)
    with tz.TensorDeserializer(str(p), **kw) as zeros, \
         tz.TensorDeserializer(str(p), meta_tensors="expand", **kw) as expand, \
         tz.TensorDeserializer(str(p), meta_tensors="meta", **kw) as meta:
        for k, t in sd.items():
            if not t.is_meta:
                assert torch.equal(zeros[k], t) and torch.equal(expand[k], t) and torch.equal(meta[k], t)
                continue
            expected = torch.zeros(t.shape, dtype=t.dtype)
            for d in (zeros, expand):
                assert d[k].dtype == t.dtype and d[k].shape == t.shape and not d[k].is_meta, k
                assert torch.equal(d[k], expected), k
            assert meta[k].is_meta and meta[k].dtype == t.dtype and meta[k].shape == t.shape, k
            assert isinstance(zeros[k], torch.nn.Parameter)
            assert zeros[k].requires_grad == (t.dtype.is_floating_point or t.dtype.is_complex), k
        with torch.no_grad():
            zeros["m_f32"].add_(1)  # zero-filled meta tensors are ordinary tensors
        assert expand["m_f32"].stride() == (0, 0)


def test_meta_zeros_match_tensorizer(tmp_path):
    oracle = import_oracle()
    sd = {"real": torch.arange(4.0), "m": torch.empty(3, 4, device="meta"),
          "mi": torch.empty(7, dtype=torch.int32, device="meta")}
    p = tmp_path / "tensorizer_meta.tensors"
    write_with(oracle, p, lambda s: s.write_state_dict(sd))
    with oracle.TensorDeserializer(str(p), device="cpu") as ref, tz.TensorDeserializer(str(p), device="cpu") as got:
        for k in sd:
            assert got[k].dtype == ref[k].dtype and torch.equal(got[k], ref[k]), k


def test_meta_dtype_conversion(tmp_path):
    p, sd = meta_file(tmp_path)
    for mode in ("zeros", "expand", "meta"):
        with tz.TensorDeserializer(str(p), device="cpu", dtype=torch.float64, meta_tensors=mode) as d:
            assert d["m_f32"].dtype == torch.float64 and d["m_f32"].shape == (3, 4)
            assert d["m_bool"].dtype == torch.bool


def test_numpy_meta_modes(tmp_path):
    p, sd = meta_file(tmp_path)
    for mode in ("zeros", "expand", "meta"):
        with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True, meta_tensors=mode) as d:
            arrays = {name: a for _, _, name, a, _, _ in d.read_numpy_arrays(allow_raw_data=True)}
        for k, t in sd.items():
            if t.is_meta:
                a = arrays[k]
                assert a.shape == tuple(t.shape) and not a.any(), (mode, k)
                assert a.flags.writeable == (mode == "zeros"), (mode, k)
                assert a.itemsize == t.element_size()


def test_max_meta_bytes_counts_the_whole_file(tmp_path):
    p, sd = meta_file(tmp_path)
    total = sum(t.numel() * t.element_size() for t in sd.values() if t.is_meta)
    with tz.TensorDeserializer(str(p), device="cpu", max_meta_bytes=total) as d:
        assert not d["m_f32"].any()
    with pytest.raises(ValueError, match="max_meta_bytes=48"):
        tz.TensorDeserializer(str(p), device="cpu", max_meta_bytes=48)
    # lazily, one tensor at a time: the running total is what counts
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True, max_meta_bytes=48) as d:
        assert d["m_f32"].shape == (3, 4)
        with pytest.raises(ValueError, match="'m_i64'"):
            d["m_i64"]
    with tz.TensorDeserializer(str(p), device="cpu", max_meta_bytes=0, meta_tensors="expand") as d:
        assert d["m_f32"].shape == (3, 4)
    with tz.TensorDeserializer(str(p), device="cpu", max_meta_bytes=None) as d:
        assert d["m_i64"].shape == (5,)


def test_bad_meta_arguments(tmp_path):
    p, _ = meta_file(tmp_path)
    with pytest.raises(ValueError, match="meta_tensors"):
        tz.TensorDeserializer(str(p), device="cpu", meta_tensors="empty")
    with pytest.raises(ValueError, match="max_meta_bytes"):
        tz.TensorDeserializer(str(p), device="cpu", max_meta_bytes=-1)


def test_meta_tensor_header_hash_still_checked(tmp_path):
    """Meta tensors no longer go through the native load; their hashes
    (over the header alone) are still checked with verify_hash."""
    raw = bytearray(raw_tensors_file([(b"real", "<f4", (2,), bytes(8)), (b"m", "<f4", (3,), None)]))
    raw[-8 - 8 - 5] ^= 0x01  # a byte of the meta tensor's SHA-256, just before its data_length
    p = tmp_path / "bad_meta_hash.tensors"
    p.write_bytes(bytes(raw))
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        assert d["m"].shape == (3,)
    for lazy in (False, True):
        with pytest.raises(tz.serialization.HashMismatchError, match="verification"):
            with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True, lazy_load=lazy) as d:
                d["m"]
        with pytest.raises(tz.serialization.HashMismatchError):
            with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True, lazy_load=True) as d:
                list(d.read_numpy_arrays())
