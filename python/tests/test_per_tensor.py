"""The per-tensor fast paths give what the general paths give:
the mapping's views of an eager load of plain names, tensors made by the
native arena loop (every dtype, scalars, empty tensors, a dtype cast), and
load_into_module's direct registration, which must step aside for
subclasses, registration hooks and names that are other attributes."""

from __future__ import annotations

from collections.abc import ItemsView, ValuesView

import pytest
import torch

import tzhelpers
from tzhelpers import all_dtypes_state_dict, assert_same_tensor, tz, write_with

pytestmark = pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer_rs's own fast paths")


def _state_dict():
    sd = all_dtypes_state_dict()
    sd["scalar"] = torch.tensor(3.5)
    sd["empty"] = torch.empty(0, 4)
    sd["matrix"] = torch.randn(3, 5, generator=torch.Generator().manual_seed(5))
    return sd


@pytest.fixture()
def path(tmp_path):
    p = tmp_path / "plain.tensors"
    write_with(tz, p, lambda s: s.write_state_dict(_state_dict()))
    return p


def test_mapping_views_of_an_eager_load(path):
    sd = _state_dict()
    with tz.TensorDeserializer(str(path), device="cpu") as d:
        items, values = d.items(), d.values()
        assert isinstance(items, ItemsView) and isinstance(values, ValuesView)
        assert [k for k, _ in items] == list(sd) == list(d)
        for (k, v), w in zip(items, values):
            assert v is w is d[k]
            assert_same_tensor(v, sd[k], k)
        assert ("matrix", d["matrix"]) in items
        with pytest.raises(KeyError, match="nope"):
            d["nope"]
    # The views outlive close(), as tensors already loaded do.
    assert len(items) == len(sd)


def test_lazy_and_nested_loads_take_the_general_path(path, tmp_path):
    with tz.TensorDeserializer(str(path), device="cpu", lazy_load=True) as d:
        assert not isinstance(d.items(), type({}.items()))
        assert_same_tensor(dict(d.items())["matrix"], _state_dict()["matrix"], "matrix")
    nested = tmp_path / "nested.tensors"
    write_with(tz, nested, lambda s: s.write_state_dict({"a": {"b": torch.ones(2)}, "c": torch.zeros(1)}))
    with tz.TensorDeserializer(str(nested), device="cpu") as d:
        assert set(d["a"].keys()) == {"b"}
        assert dict(d.items())["c"].shape == (1,)


def test_arena_tensors_of_every_dtype(path):
    sd = _state_dict()
    with tz.TensorDeserializer(str(path), device="cpu") as d:
        for k, v in sd.items():
            got = d[k]
            assert isinstance(got, torch.nn.Parameter)
            assert_same_tensor(got, v, k)
            assert got.requires_grad == (v.dtype.is_floating_point or v.dtype.is_complex), k
            if v.numel():
                assert got.untyped_storage().nbytes() == v.numel() * v.element_size(), k


@pytest.mark.filterwarnings("ignore:Casting complex values")
def test_a_cast_goes_through_python(path):
    sd = _state_dict()
    with tz.TensorDeserializer(str(path), device="cpu", dtype=torch.float64) as d:
        assert d["matrix"].dtype == torch.float64
        torch.testing.assert_close(d["matrix"].detach(), sd["matrix"].double())
        bools = [k for k, v in sd.items() if v.dtype == torch.bool]
        assert bools and all(d[k].dtype == torch.bool for k in bools)  # bool is never cast


class Leaf(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(3, 5))
        self.register_buffer("stat", torch.zeros(3), persistent=False)


class Tree(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.leaf = Leaf()


def _module_file(tmp_path, extra=None):
    src = Tree()
    with torch.no_grad():
        src.leaf.weight.normal_()
        src.leaf.stat.fill_(7)
    src.leaf.register_buffer("stat", src.leaf.stat)  # persistent in the file
    if extra:
        extra(src)
    p = tmp_path / "module.tensors"
    write_with(tz, p, lambda s: s.write_module(src))
    return p, src


def test_load_into_module_replaces_and_adds(tmp_path):
    def add(m):
        m.leaf.register_parameter("extra", torch.nn.Parameter(torch.ones(2)))

    p, src = _module_file(tmp_path, add)
    dst = Tree()
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        assert d.load_into_module(dst) == 3
    assert_same_tensor(dst.leaf.weight, src.leaf.weight, "weight")
    assert_same_tensor(dst.leaf.extra, src.leaf.extra, "extra")
    assert "stat" in dst.leaf.state_dict()  # registered persistent, as tensorizer does
    assert torch.equal(dst.leaf.stat, torch.full((3,), 7.0))
    assert dict(dst.named_parameters()).keys() == {"leaf.weight", "leaf.extra"}


def test_load_into_module_respects_overrides_and_hooks(tmp_path):
    p, _ = _module_file(tmp_path)
    seen = []

    class Watched(Leaf):
        def register_parameter(self, name, param):
            seen.append(name)
            super().register_parameter(name, param)

    dst = Tree()
    dst.leaf = Watched()
    seen.clear()  # (its constructor registered one)
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        d.load_into_module(dst)
    assert seen == ["weight"]

    hooked = []
    fresh = Tree()
    handle = torch.nn.modules.module.register_module_parameter_registration_hook(
        lambda module, name, param: hooked.append(name)
    )
    try:
        with tz.TensorDeserializer(str(p), device="cpu") as d:
            d.load_into_module(fresh)
    finally:
        handle.remove()
    assert hooked == ["weight"]


def test_load_into_module_refuses_a_name_that_is_another_attribute(tmp_path):
    p, _ = _module_file(tmp_path)

    class Clash(Leaf):
        def __init__(self) -> None:
            super().__init__()
            del self.weight
            self.weight = "not a tensor"  # a plain attribute of the same name

    dst = Tree()
    dst.leaf = Clash()
    with tz.TensorDeserializer(str(p), device="cpu") as d, pytest.raises(KeyError, match="already exists"):
        d.load_into_module(dst)


def test_lazy_reads_in_order_load_ahead_but_errors_stay_where_they_are(tmp_path):
    sd = {f"t{i}": torch.full((4,), float(i)) for i in range(50)}
    p = tmp_path / "lazy.tensors"
    write_with(tz, p, lambda s: s.write_state_dict(sd))
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        assert_same_tensor(d["t0"], sd["t0"], "t0")
        assert len(d._cache) == 50  # one window: the rest came with the first read
        assert [k for k, _ in d.items()] == list(sd)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        d["t7"]  # not in order: alone
        assert len(d._cache) == 1
    # Corrupt the last tensor's data: in-order lazy reads before it succeed
    # (with verify_hash), and it fails only when asked for.
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        last = d._selected[-1].data_offset
    raw = bytearray(p.read_bytes())
    raw[last] ^= 0xFF
    p.write_bytes(bytes(raw))
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True, verify_hash=True) as d:
        for i in range(49):
            assert_same_tensor(d[f"t{i}"], sd[f"t{i}"], f"t{i}")
        with pytest.raises(Exception, match="t49|hash|verif"):
            d["t49"]


@pytest.mark.filterwarnings("ignore:Casting complex values")
def test_mapped_views_with_and_without_a_cast(path):
    sd = _state_dict()
    with tz.TensorDeserializer(str(path), device="cpu", mmap=True) as d:
        for k, v in sd.items():
            assert isinstance(d[k], torch.nn.Parameter)
            assert_same_tensor(d[k], v, k)
    with tz.TensorDeserializer(str(path), device="cpu", mmap=True, dtype=torch.float64) as d:
        torch.testing.assert_close(d["matrix"].detach(), sd["matrix"].double())
        assert d["matrix"].requires_grad
