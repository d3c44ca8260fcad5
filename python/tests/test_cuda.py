"""Loading to a CUDA device (``device="cuda"``).

Two halves:

* Without a GPU (always run, tensorizer_rs only): the native path's Python
  side against a host stand-in. ``_native.reader_load_staged`` runs the
  same staging ring as ``reader_load_cuda`` (spec §19) with host memory
  standing in for the device, so the carving of one allocation into views,
  the keys and hash flags handed to the native call, typed errors, and the
  routing of ``TensorDeserializer(device="cuda")``, ``load_into_module``
  and ``torch_compat`` to the native path are all checked here.
* With a GPU (skipped otherwise, with the reason): every vector, modules,
  encrypted (key and passphrase) and verified files, corruption, both
  allocation modes, extra copy streams, the escape hatch and torch_compat,
  side by side with tensorizer's own CUDA path::

    bash tests/gpu-tests.sh          # both implementations
    pytest python/tests/test_cuda.py
    TZ_UNDER_TEST=tensorizer pytest python/tests/test_cuda.py
"""

from __future__ import annotations

import contextlib
import copy
import importlib
from typing import Any

import pytest
import torch

from tzhelpers import (
    IS_ORACLE,
    ORACLE_SKIP_REASON,
    TEST_KEY,
    TEST_PASSPHRASE,
    VECTORS_DIR,
    assert_same_tensor,
    decryption_params,
    make_tensor,
    manifest_vectors,
    module_with_buffers,
    tz,
    write_with,
)

HAVE_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (torch.cuda.is_available() is False)")
rs_only = pytest.mark.skipif(IS_ORACLE, reason=ORACLE_SKIP_REASON)
ENCRYPTIONS = ["plain", "key", "passphrase"]


def _sd(encryption: str = "plain") -> dict[str, torch.Tensor]:
    """The state dict these tests load. Without the 0-element tensor when
    the real tensorizer encrypts: its writer cannot (spec §11.1, quirk 5)."""
    sd = {
        "a": torch.arange(6.0),
        "bf": torch.arange(3, dtype=torch.bfloat16),
        "i": torch.tensor([[1, 2], [3, 4]], dtype=torch.int64),
        "flag": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros((0, 3), dtype=torch.float16),
        "big": make_tensor(torch.float32, (3_000_000,), 3),  # 12 MB: several staging pieces
        "mid": make_tensor(torch.bfloat16, (1_000_000,), 4),
    }
    if IS_ORACLE and encryption != "plain":
        del sd["empty"]
    return sd


def _write(tmp_path: Any, encryption: str, name: str = "m.tensors", sd: dict[str, torch.Tensor] | None = None) -> tuple[str, Any]:
    """Writes ``sd`` (default ``_sd()``) plain or encrypted; returns the
    path and the matching DecryptionParams (or None)."""
    p = tmp_path / name
    kw: dict[str, Any] = {}
    dec = None
    if encryption == "key":
        kw["encryption"] = tz.EncryptionParams(TEST_KEY)
        dec = tz.DecryptionParams.from_key(TEST_KEY)
    elif encryption == "passphrase":
        kw["encryption"] = tz.EncryptionParams.from_string(TEST_PASSPHRASE)
        dec = tz.DecryptionParams.from_string(TEST_PASSPHRASE)
    data = _sd(encryption) if sd is None else sd
    write_with(tz, p, lambda s: s.write_state_dict(data), **kw)
    return str(p), dec


def _corrupt(path: str, at_fraction: float = 0.5) -> None:
    with open(path, "r+b") as f:
        raw = bytearray(f.read())
        raw[int(len(raw) * at_fraction)] ^= 0x20  # inside "big" (most of the file)
        f.seek(0)
        f.write(raw)


# -- without a GPU: the host stand-in ------------------------------------------


def _standin(reader: Any, indices: list[int], tensors: list[Any], verify_hash: bool | None, streams: int) -> None:
    """``reader_load_cuda`` with host memory standing in for the device:
    the same native staging ring, small buffers so tensors split."""
    from tensorizer_rs import _native

    assert 0 <= streams <= 16
    buffers = [t.reshape(-1).view(torch.uint8).numpy() for t in tensors]
    _native.reader_load_staged(reader, indices, buffers, verify_hash, buffer_len=4 << 20, ring=2, copy_latency_us=200)


def _lazy(path: str, dec: Any, verify: bool) -> Any:
    return tz.TensorDeserializer(path, device="cpu", encryption=dec, verify_hash=verify, lazy_load=True)


@rs_only
def test_carve_offsets_are_aligned_and_disjoint() -> None:
    from tensorizer_rs import _cuda

    sizes = [0, 1, 255, 256, 257, 4096, 3, 0, 10]
    offsets, total = _cuda.carve_offsets(sizes)
    assert all(o % _cuda.VIEW_ALIGN == 0 for o in offsets)
    spans = sorted((o, o + n) for o, n in zip(offsets, sizes))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert total == offsets[-1] + sizes[-1]
    assert _cuda.carve_offsets([]) == ([], 0)


@rs_only
@pytest.mark.parametrize("mode", ["per_tensor", "carved"])
@pytest.mark.parametrize("encryption", ENCRYPTIONS)
@pytest.mark.parametrize("verify", [False, True])
def test_standin_load_matches_the_source(tmp_path, mode: str, encryption: str, verify: bool) -> None:
    from tensorizer_rs import _cuda

    path, dec = _write(tmp_path, encryption)
    sd = _sd()
    with _lazy(path, dec, verify) as d:
        entries = d._selected
        got = _cuda.load(d._reader, entries, torch.device("cpu"), verify, loader=_standin, mode=mode)
    for e, t in zip(entries, got):
        assert t.is_contiguous()
        assert_same_tensor(t, sd[e.name], e.name)
    if mode == "carved":
        base = got[0].untyped_storage().data_ptr()
        for t in got:
            assert t.untyped_storage().data_ptr() == base, "one allocation"
            if t.numel():  # (an empty view's data_ptr() is 0)
                assert (t.data_ptr() - base) % _cuda.VIEW_ALIGN == 0
    else:
        assert len({t.untyped_storage().data_ptr() for t in got if t.numel()}) == len([t for t in got if t.numel()])


@rs_only
@pytest.mark.parametrize("encryption", ENCRYPTIONS)
def test_standin_errors_are_typed(tmp_path, encryption: str) -> None:
    from tensorizer_rs import _cuda

    path, dec = _write(tmp_path, encryption)
    _corrupt(path)
    # Encrypted data fails authentication whether or not hashes are checked;
    # plain data fails only the hash check.
    expected = tz.HashMismatchError if encryption == "plain" else tz.CryptographyError
    with _lazy(path, dec, True) as d:
        with pytest.raises(expected, match="big"):
            _cuda.load(d._reader, d._selected, torch.device("cpu"), True, loader=_standin, mode="carved")
    if encryption != "plain":
        with _lazy(path, dec, False) as d:
            with pytest.raises(tz.CryptographyError, match="big"):
                _cuda.load(d._reader, d._selected, torch.device("cpu"), False, loader=_standin)


@rs_only
def test_environment_switches(monkeypatch) -> None:
    from tensorizer_rs import _cuda, _native

    monkeypatch.setattr(_native, "cuda_available", lambda: True)
    assert _cuda.native_enabled()
    for off in ("0", "false", "OFF"):
        monkeypatch.setenv(_cuda.ENV_NATIVE, off)
        assert not _cuda.native_enabled()
    monkeypatch.setenv(_cuda.ENV_NATIVE, "1")
    assert _cuda.native_enabled()
    monkeypatch.setattr(_native, "cuda_available", lambda: False)
    assert not _cuda.native_enabled(), "no driver: the torch path"

    assert _cuda.alloc_mode() == "per_tensor"
    monkeypatch.setenv(_cuda.ENV_ALLOC, "carved")
    assert _cuda.alloc_mode() == "carved"
    with _cuda.per_tensor():
        assert _cuda.alloc_mode() == "per_tensor"
    monkeypatch.setenv(_cuda.ENV_ALLOC, "slabs")
    with pytest.raises(ValueError, match="per_tensor, carved"):
        _cuda.alloc_mode()

    assert _cuda.copy_streams() == 0
    monkeypatch.setenv(_cuda.ENV_STREAMS, "3")
    assert _cuda.copy_streams() == 3
    for bad in ("-1", "17", "two"):
        monkeypatch.setenv(_cuda.ENV_STREAMS, bad)
        with pytest.raises(ValueError, match=_cuda.ENV_STREAMS):
            _cuda.copy_streams()


@rs_only
def test_native_call_checks_its_arguments(tmp_path) -> None:
    from tensorizer_rs import _native

    path, _ = _write(tmp_path, "plain")
    with _lazy(path, None, False) as d:
        reader = d._reader
        _native.reader_load_cuda(reader, [], [])  # nothing to do: no device touched
        with pytest.raises(ValueError, match="streams"):
            _native.reader_load_cuda(reader, [], [], None, streams=99)
        with pytest.raises(ValueError, match="not a contiguous CUDA tensor"):
            _native.reader_load_cuda(reader, [0], [torch.empty(6)])
        with pytest.raises(ValueError, match="one tensor per index"):
            _native.reader_load_cuda(reader, [0, 1], [torch.empty(6)])


class _Routed:
    """``device="cuda"`` sent down the native path with the stand-in: the
    destinations land on the CPU, every native call is recorded."""

    def __init__(self, monkeypatch: Any) -> None:
        from tensorizer_rs import _cuda, _loader, _native

        self.calls: list[dict[str, Any]] = []
        resolve = _loader.resolve_device

        def fake_resolve(device: Any) -> Any:
            if device is not None and torch.device(device).type == "cuda":
                return torch.device("cuda", 0)
            return resolve(device)

        destinations = _cuda.destinations

        def on_cpu(entries: Any, device: Any, mode: str) -> list[Any]:
            assert device.type == "cuda"
            self.calls.append({"mode": mode, "names": [e.name for e in entries]})
            return destinations(entries, torch.device("cpu"), mode)

        def load(reader: Any, indices: list[int], tensors: list[Any], verify_hash: bool | None, streams: int) -> None:
            self.calls[-1].update(verify_hash=verify_hash, streams=streams)
            _standin(reader, indices, tensors, verify_hash, streams)

        monkeypatch.setattr(_native, "cuda_available", lambda: True)
        monkeypatch.setattr(_loader, "resolve_device", fake_resolve)
        monkeypatch.setattr(_cuda, "destinations", on_cpu)
        monkeypatch.setattr(_cuda, "_reader_load", load)
        monkeypatch.setattr(_cuda, "_device_context", lambda device: contextlib.nullcontext())


@rs_only
@pytest.mark.parametrize("mode", ["per_tensor", "carved"])
@pytest.mark.parametrize("encryption", ENCRYPTIONS)
def test_device_cuda_goes_through_the_native_path(tmp_path, monkeypatch, mode: str, encryption: str) -> None:
    routed = _Routed(monkeypatch)
    monkeypatch.setenv("TENSORIZER_RS_CUDA_ALLOC", mode)
    monkeypatch.setenv("TENSORIZER_RS_CUDA_STREAMS", "2")
    path, dec = _write(tmp_path, encryption)
    sd = _sd()
    with tz.TensorDeserializer(path, device="cuda", encryption=dec, verify_hash=True) as d:
        got = dict(d)
    assert routed.calls == [{"mode": mode, "names": list(sd), "verify_hash": True, "streams": 2}]
    for k, t in sd.items():
        assert isinstance(got[k], torch.nn.Parameter)
        assert got[k].requires_grad == (t.dtype.is_floating_point)
        assert_same_tensor(got[k].data, t, k)
    # Lazy loads: one native call per access, the deserializer's verify flag.
    routed.calls.clear()
    with tz.TensorDeserializer(path, device="cuda:0", encryption=dec, lazy_load=True) as d:
        assert_same_tensor(d["mid"].data, sd["mid"], "mid")
        assert_same_tensor(d["a"].data, sd["a"], "a")
    assert [c["names"] for c in routed.calls] == [["mid"], ["a"]]
    assert all(c["verify_hash"] is False for c in routed.calls)


@rs_only
def test_dtype_cast_after_a_native_load(tmp_path, monkeypatch) -> None:
    _Routed(monkeypatch)
    path, _ = _write(tmp_path, "plain")
    sd = _sd()
    with tz.TensorDeserializer(path, device="cuda", dtype=torch.float16) as d:
        assert d["big"].dtype == torch.float16
        assert d["flag"].dtype == torch.bool
        assert torch.equal(d["a"].data, sd["a"].to(torch.float16))


@rs_only
def test_load_into_module_goes_through_the_native_path(tmp_path, monkeypatch) -> None:
    routed = _Routed(monkeypatch)
    src = module_with_buffers(seed=0)
    p = tmp_path / "lim.tensors"
    write_with(tz, p, lambda s: s.write_module(src), encryption=tz.EncryptionParams(TEST_KEY))
    dst = module_with_buffers(seed=5)
    dec = tz.DecryptionParams.from_key(TEST_KEY)
    with tz.TensorDeserializer(str(p), device="cuda", encryption=dec, lazy_load=True) as d:
        n = d.load_into_module(dst, verify_hash=True)
    assert len(routed.calls) == 1 and routed.calls[0]["verify_hash"] is True
    assert n == len(routed.calls[0]["names"])
    for (name, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        assert torch.equal(a, b), name


@rs_only
def test_torch_compat_goes_through_the_native_path_per_tensor(tmp_path, monkeypatch) -> None:
    routed = _Routed(monkeypatch)
    monkeypatch.setenv("TENSORIZER_RS_CUDA_ALLOC", "carved")
    compat = importlib.import_module(tz.__name__ + ".torch_compat")
    model = module_with_buffers(seed=1)
    f = tmp_path / "model.pt"
    with compat.tensorizer_saving():
        torch.save(model.state_dict(), f)
    with compat.tensorizer_loading(device="cuda", verify_hash=True):
        loaded = torch.load(f, weights_only=False)
    assert len(routed.calls) == 1
    assert routed.calls[0]["mode"] == "per_tensor", "torch_compat's storages must be the tensors' own"
    assert routed.calls[0]["verify_hash"] is True
    for k, v in model.state_dict().items():
        assert torch.equal(loaded[k], v), k


# -- with a GPU ------------------------------------------------------------------


class _Counting:
    """Counts calls of the real native CUDA load (tensorizer_rs only)."""

    def __init__(self, monkeypatch: Any) -> None:
        self.calls = 0
        if IS_ORACLE:
            return
        from tensorizer_rs import _cuda

        real = _cuda._reader_load

        def counted(*args: Any) -> None:
            self.calls += 1
            real(*args)

        monkeypatch.setattr(_cuda, "_reader_load", counted)

    def assert_native(self) -> None:
        if IS_ORACLE:
            return
        from tensorizer_rs import _native

        assert _native.cuda_available(), "this build has no native CUDA path, or no driver was found"
        assert self.calls > 0, "the load did not go through the native CUDA path"


@needs_cuda
def test_native_path_is_reported() -> None:
    if IS_ORACLE:
        pytest.skip("tensorizer_rs only")
    from tensorizer_rs import _cuda, _native

    print("native CUDA loading:", _native.cuda_available(), "enabled:", _cuda.native_enabled())
    assert _native.cuda_available(), "built with the cuda feature (the default) and a driver is present"


@needs_cuda
@pytest.mark.parametrize("vec", manifest_vectors(), ids=lambda v: v["file"])
def test_every_vector_loads_to_cuda_as_to_cpu(vec: dict, monkeypatch) -> None:
    if "long" in vec["file"]:
        pytest.skip("a 4 GiB meta tensor")
    counting = _Counting(monkeypatch)
    path = str(VECTORS_DIR / vec["file"])
    dec = decryption_params(tz, vec.get("encryption"))
    with tz.TensorDeserializer(path, device="cpu", encryption=dec) as d:
        want = {k: v for k, v in d.items()}
    with tz.TensorDeserializer(path, device="cuda", encryption=dec, verify_hash=True) as d:
        got = {k: v for k, v in d.items()}
    assert got.keys() == want.keys()
    for k, t in want.items():
        if isinstance(t, torch.Tensor):
            assert got[k].device.type == "cuda", k
            assert_same_tensor(got[k].cpu(), t, str(k))
    if any(isinstance(t, torch.Tensor) and t.numel() and not t.is_meta for t in want.values()):
        counting.assert_native()


@needs_cuda
@pytest.mark.parametrize("mode", ["per_tensor", "carved"])
@pytest.mark.parametrize("encryption", ENCRYPTIONS)
def test_encrypted_and_verified_load_to_cuda(tmp_path, monkeypatch, mode: str, encryption: str) -> None:
    monkeypatch.setenv("TENSORIZER_RS_CUDA_ALLOC", mode)
    counting = _Counting(monkeypatch)
    path, dec = _write(tmp_path, encryption)
    sd = _sd(encryption)
    for lazy in (False, True):
        with tz.TensorDeserializer(path, device="cuda", encryption=dec, verify_hash=True, lazy_load=lazy) as d:
            for k, t in sd.items():
                assert d[k].device.type == "cuda"
                assert_same_tensor(d[k].cpu(), t, k)
    counting.assert_native()


@needs_cuda
@pytest.mark.parametrize("encryption", ENCRYPTIONS)
def test_corruption_is_detected_on_cuda(tmp_path, encryption: str) -> None:
    path, dec = _write(tmp_path, encryption, "c.tensors")
    _corrupt(path)
    expected: Any = Exception
    if not IS_ORACLE:
        expected = tz.HashMismatchError if encryption == "plain" else tz.CryptographyError
    with pytest.raises(expected):
        with tz.TensorDeserializer(path, device="cuda", encryption=dec, verify_hash=True) as d:
            for k in d:
                d[k].cpu()


@needs_cuda
@rs_only
def test_streams_and_the_escape_hatch(tmp_path, monkeypatch) -> None:
    path, dec = _write(tmp_path, "key")
    sd = _sd()
    for env in ({"TENSORIZER_RS_CUDA_STREAMS": "3"}, {"TENSORIZER_RS_NATIVE_CUDA": "0"}):
        with monkeypatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            counting = _Counting(mp)
            with tz.TensorDeserializer(path, device="cuda", encryption=dec, verify_hash=True) as d:
                for k, t in sd.items():
                    assert_same_tensor(d[k].cpu(), t, k)
            assert counting.calls == (0 if "TENSORIZER_RS_NATIVE_CUDA" in env else 1), env


@needs_cuda
@rs_only
def test_loads_follow_torchs_current_stream(tmp_path) -> None:
    """Memory torch's allocator just handed out on a side stream is written
    only after the work queued there (the native copies run on it)."""
    path, _ = _write(tmp_path, "plain")
    sd = _sd()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keep the stream busy
        with tz.TensorDeserializer(path, device="cuda") as d:
            got = {k: d[k] for k in sd}
    for k, t in sd.items():
        assert_same_tensor(got[k].cpu(), t, k)


@needs_cuda
def test_loading_to_another_device_keeps_torchs_current_device(tmp_path) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    path, _ = _write(tmp_path, "plain")
    torch.cuda.set_device(0)
    with tz.TensorDeserializer(path, device="cuda:1") as d:
        assert d["big"].device == torch.device("cuda", 1)
        assert_same_tensor(d["big"].cpu(), _sd()["big"], "big")
    assert torch.cuda.current_device() == 0
    assert torch.empty(1, device="cuda").device.index == 0


@needs_cuda
def test_load_into_module_on_cuda(tmp_path, monkeypatch) -> None:
    counting = _Counting(monkeypatch)
    src = module_with_buffers(seed=0)
    p = tmp_path / "lim.tensors"
    write_with(tz, p, lambda s: s.write_module(src), encryption=tz.EncryptionParams(TEST_KEY))
    dst = module_with_buffers(seed=5).cuda()
    with torch.no_grad():
        for t in list(dst.parameters()) + list(dst.buffers()):
            t.zero_()
    dec = tz.DecryptionParams.from_key(TEST_KEY)
    with tz.TensorDeserializer(str(p), device="cuda", encryption=dec, verify_hash=True) as d:
        d.load_into_module(dst)
    assert all(t.device.type == "cuda" for t in dst.state_dict().values())
    for k, v in src.state_dict().items():
        assert torch.equal(dst.state_dict()[k].cpu(), v), k
    # The forward pass is compared on one device: a GPU's matrix product
    # need not round as the CPU's does, so CPU against CUDA is no check.
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    src.eval()
    dst.eval()
    with torch.no_grad():
        assert torch.equal(src(x), copy.deepcopy(dst).cpu()(x))
    counting.assert_native()


@needs_cuda
@pytest.mark.parametrize("how", ["map_location", "device"])
def test_torch_compat_loads_to_cuda(tmp_path, monkeypatch, how: str) -> None:
    counting = _Counting(monkeypatch)
    compat = importlib.import_module(tz.__name__ + ".torch_compat")
    model = module_with_buffers(seed=2)
    f = tmp_path / "model.pt"
    with compat.tensorizer_saving():
        torch.save(model, f)
    kwargs: dict[str, Any] = {"device": "cuda"} if how == "device" else {}
    with compat.tensorizer_loading(**kwargs):
        loaded = torch.load(f, map_location="cuda" if how == "map_location" else None, weights_only=False)
    for (k, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert b.device.type == "cuda", k
        assert torch.equal(a, b.cpu()), k
    counting.assert_native()
