"""tensorizer_rs's zero-copy loads from a private memory map."""

import hashlib

import pytest
import torch

from tzhelpers import TZ_NAME, tz

pytestmark = pytest.mark.skipif(TZ_NAME != "tensorizer_rs", reason="mmap= is a tensorizer_rs extension")


def test_mapped_and_copied_loads_agree_and_never_write_the_file(tmp_path):
    sd = {
        "w": torch.randn(64, 33),
        "bf": torch.randn(17).to(torch.bfloat16),
        "i": torch.arange(10),
        "b": torch.tensor([True, False, True]),
        "empty": torch.empty(0, 3),
        "meta": torch.empty(5, device="meta"),
    }
    path = tmp_path / "m.tensors"
    with tz.TensorSerializer(str(path)) as s:
        s.write_state_dict(sd)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    mapped = tz.TensorDeserializer(str(path), device="cpu")
    copied = tz.TensorDeserializer(str(path), device="cpu", mmap=False)
    for k in sd:
        assert torch.equal(mapped[k], copied[k]), k
    with torch.no_grad():
        mapped["w"].add_(1.0)  # copy-on-write: the file must not change
    mapped.close()
    del mapped
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    again = tz.TensorDeserializer(str(path), device="cpu", verify_hash=True)
    assert torch.equal(again["w"], sd["w"])
