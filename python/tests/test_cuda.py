"""Loading to a CUDA device (``device="cuda"``): every vector, modules,
encrypted and verified files, corruption. Skipped without a CUDA device.

Run side by side with tensorizer's own CUDA path::

    pytest python/tests/test_cuda.py
    TZ_UNDER_TEST=tensorizer pytest python/tests/test_cuda.py
"""

from __future__ import annotations

import pytest
import torch

from tzhelpers import (
    IS_ORACLE,
    TEST_KEY,
    VECTORS_DIR,
    assert_same_tensor,
    decryption_params,
    make_tensor,
    manifest_vectors,
    module_with_buffers,
    tz,
    write_with,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)")


def _sd() -> dict[str, torch.Tensor]:
    return {
        "a": torch.arange(6.0),
        "bf": torch.arange(3, dtype=torch.bfloat16),
        "i": torch.tensor([[1, 2], [3, 4]], dtype=torch.int64),
        "big": make_tensor(torch.float32, (3_000_000,), 3),  # 12 MB: several staging pieces
        "mid": make_tensor(torch.bfloat16, (1_000_000,), 4),
    }


def test_native_path_is_reported() -> None:
    if IS_ORACLE:
        pytest.skip("tensorizer_rs only")
    from tensorizer_rs import _native

    # Informational: a wheel built without the `cuda` feature falls back to pinned copies.
    print("native CUDA loading:", _native.cuda_available())


@pytest.mark.parametrize("vec", manifest_vectors(), ids=lambda v: v["file"])
def test_every_vector_loads_to_cuda_as_to_cpu(vec: dict) -> None:
    if "long" in vec["file"]:
        pytest.skip("a 4 GiB meta tensor")
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


@pytest.mark.parametrize("encrypted", [False, True])
def test_encrypted_and_verified_load_to_cuda(tmp_path, encrypted: bool) -> None:
    sd = _sd()
    p = tmp_path / "m.tensors"
    kw = {"encryption": tz.EncryptionParams(TEST_KEY)} if encrypted else {}
    write_with(tz, p, lambda s: s.write_state_dict(sd), **kw)
    dec = tz.DecryptionParams.from_key(TEST_KEY) if encrypted else None
    for lazy in (False, True):
        with tz.TensorDeserializer(str(p), device="cuda", encryption=dec, verify_hash=True, lazy_load=lazy) as d:
            for k, t in sd.items():
                assert d[k].device.type == "cuda"
                assert_same_tensor(d[k].cpu(), t, k)


@pytest.mark.parametrize("encrypted", [False, True])
def test_corruption_is_detected_on_cuda(tmp_path, encrypted: bool) -> None:
    sd = _sd()
    p = tmp_path / "c.tensors"
    kw = {"encryption": tz.EncryptionParams(TEST_KEY)} if encrypted else {}
    write_with(tz, p, lambda s: s.write_state_dict(sd), **kw)
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0x20  # inside "big" (most of the file)
    p.write_bytes(bytes(raw))
    dec = tz.DecryptionParams.from_key(TEST_KEY) if encrypted else None
    with pytest.raises(Exception):
        with tz.TensorDeserializer(str(p), device="cuda", encryption=dec, verify_hash=True) as d:
            for k in sd:
                d[k].cpu()


def test_load_into_module_on_cuda(tmp_path) -> None:
    src = module_with_buffers(seed=0)
    p = tmp_path / "lim.tensors"
    write_with(tz, p, lambda s: s.write_module(src))
    dst = module_with_buffers(seed=5).cuda()
    with torch.no_grad():
        for t in list(dst.parameters()) + list(dst.buffers()):
            t.zero_()
    with tz.TensorDeserializer(str(p), device="cuda", verify_hash=True) as d:
        d.load_into_module(dst)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    src.eval()
    dst.eval()
    with torch.no_grad():
        assert torch.equal(src(x), dst(x.cuda()).cpu())
