"""Public API of the implementation under test (``tz``).

Everything here runs against ``TZ_UNDER_TEST`` alone (default
``tensorizer_rs``); with ``TZ_UNDER_TEST=tensorizer`` it checks that the
expectations hold for the real tensorizer 2.12.1.
"""

from __future__ import annotations

import collections.abc
import enum
import io
import pathlib
import types

import numpy as np
import pytest
import torch

import tzhelpers
from tzhelpers import (
    ALL_DTYPES,
    NUMPY_DTYPES,
    OPAQUE_DTYPES,
    TEST_KEY,
    TEST_PASSPHRASE,
    all_dtypes_state_dict,
    assert_same_tensor,
    data_version,
    dtype_id,
    feature_flags,
    flatten,
    is_float_like,
    make_tensor,
    module_entries,
    module_with_buffers,
    normalized_name,
    oracle_bug,
    raw_bytes,
    tz,
    write_with,
)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def write_sd(path, sd, **kwargs):
    write_with(tz, path, lambda s: s.write_state_dict(sd), **kwargs)
    return path


def load_all(path, **kwargs):
    """{name: tensor} for every leaf, via read_tensors on a lazy deserializer."""
    kwargs.setdefault("device", "cpu")
    kwargs["lazy_load"] = True
    out = {}
    with tz.TensorDeserializer(str(path), **kwargs) as d:
        for _idx, _typ, name, t in d.read_tensors():
            out[name] = t.detach().clone()
    return out


def assert_roundtrip(sd, loaded):
    expected = {normalized_name(p): t for p, t in flatten(sd)}
    assert list(loaded.keys()) == list(expected.keys())
    for name, t in expected.items():
        assert_same_tensor(loaded[name], t, str(name))


def simple_sd():
    return {
        "a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "b": torch.tensor([1, -2, 3], dtype=torch.int64),
        "c": torch.tensor([True, False, True]),
        "d": torch.randn(4, 4, generator=torch.Generator().manual_seed(1)),
    }


def nested_sd():
    g = torch.Generator().manual_seed(2)
    return {
        "model": {
            "layers": [
                {"w": torch.randn(3, 2, generator=g), "b": torch.zeros(3)},
                {"w": torch.randn(2, 3, generator=g), "b": torch.arange(2.0)},
            ],
            "emb": torch.arange(8, dtype=torch.int64).reshape(4, 2),
        },
        "extra": [torch.tensor([1, 2], dtype=torch.int16), torch.tensor(1.5)],
        "flat": torch.ones(1),
    }


# --------------------------------------------------------------------------
# package surface
# --------------------------------------------------------------------------
def test_package_surface():
    for name in (
        "TensorSerializer",
        "TensorDeserializer",
        "TensorType",
        "CryptographyError",
        "EncryptionParams",
        "DecryptionParams",
        "serialization",
        "stream_io",
        "utils",
    ):
        assert hasattr(tz, name), name
    assert isinstance(tz.__version__, str)
    assert hasattr(tz.serialization, "HashMismatchError")
    assert issubclass(tz.serialization.HashMismatchError, Exception)
    assert issubclass(tz.CryptographyError, Exception)
    assert tz.serialization.TensorSerializer is tz.TensorSerializer
    assert tz.serialization.TensorDeserializer is tz.TensorDeserializer


def test_tensor_type_enum():
    assert issubclass(tz.TensorType, enum.IntEnum)
    assert int(tz.TensorType.PARAM) == 0
    assert int(tz.TensorType.BUFFER) == 1
    assert int(tz.TensorType.STATE_DICT) == 2
    assert tz.TensorType(2) is tz.TensorType.STATE_DICT


# --------------------------------------------------------------------------
# TensorSerializer
# --------------------------------------------------------------------------
def test_write_state_dict_flat(tmp_path):
    sd = simple_sd()
    p = write_sd(tmp_path / "flat.tensors", sd)
    loaded = load_all(p, verify_hash=True)
    assert_roundtrip(sd, loaded)
    assert all(isinstance(k, str) for k in loaded)


def test_write_state_dict_nested(tmp_path):
    sd = nested_sd()
    p = write_sd(tmp_path / "nested.tensors", sd)
    loaded = load_all(p, verify_hash=True)
    assert_roundtrip(sd, loaded)
    assert ("model", "layers", 1, "w") in loaded
    assert ("extra", 0) in loaded
    assert "flat" in loaded


def test_write_state_dict_list_root(tmp_path):
    sd = [torch.full((i + 1,), float(i)) for i in range(12)]
    p = write_sd(tmp_path / "list.tensors", sd)
    loaded = load_all(p)
    assert list(loaded) == [(i,) for i in range(12)]
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        assert list(d.keys()) == list(range(12))
        assert 5 in d and "5" not in d
        assert_same_tensor(d[11], sd[11])


def test_write_state_dict_type_errors(tmp_path):
    s = tz.TensorSerializer(str(tmp_path / "bad.tensors"))
    try:
        with pytest.raises(TypeError):
            s.write_state_dict({1: torch.ones(1)})
        with pytest.raises(TypeError):
            s.write_state_dict({"x": 3})
        with pytest.raises(TypeError):
            s.write_state_dict({"x": np.arange(3)})
    finally:
        s.close()


def test_duplicate_names_rejected(tmp_path):
    s = tz.TensorSerializer(str(tmp_path / "dup.tensors"))
    try:
        s.write_state_dict({"a": torch.ones(1)})
        with pytest.raises(ValueError, match="Conflicting tensor paths"):
            s.write_state_dict({"a": torch.ones(1)})
    finally:
        s.close()


def test_write_module_indices_and_types(tmp_path):
    m = module_with_buffers()
    p = tmp_path / "module.tensors"
    write_with(tz, p, lambda s: s.write_module(m))
    expected = module_entries(m)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True, verify_hash=True) as d:
        got = list(d.read_tensors())
    assert [(i, int(t), n) for i, t, n, _ in got] == [(i, t, n) for i, t, n, _ in expected]
    # concrete expectations for Sequential(Linear, BatchNorm1d) + root buffer
    names = {n: (i, int(t)) for i, t, n, _ in got}
    assert names[".root_scale"] == (0, 1)
    assert names["0.weight"] == (1, 0) and names["0.bias"] == (1, 0)
    assert names["1.weight"] == (2, 0)
    assert names["1.running_mean"] == (2, 1)
    assert names["1.num_batches_tracked"] == (2, 1)
    assert names["1.scratch"] == (2, 1)  # non-persistent buffers included by default
    for (_, typ, _, t), (_, _, name, e) in zip(got, expected):
        assert isinstance(typ, tz.TensorType)
        assert_same_tensor(t, e, name)


def test_write_module_without_non_persistent_buffers(tmp_path):
    m = module_with_buffers()
    del m.root_scale  # root-level buffers: see the next test
    p = tmp_path / "module_np.tensors"
    write_with(tz, p, lambda s: s.write_module(m, include_non_persistent_buffers=False))
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        keys = list(d.keys())
    assert "1.scratch" not in keys
    assert "1.num_batches_tracked" in keys
    assert keys == [n for _, _, n, _ in module_entries(m, include_non_persistent=False)]


@oracle_bug("write_module(include_non_persistent_buffers=False) drops persistent "
            "*root-level* buffers: it compares '.root_scale' with the set built "
            "from named_buffers() ('root_scale')")
def test_write_module_without_non_persistent_buffers_keeps_root_buffer(tmp_path):
    m = module_with_buffers()
    p = tmp_path / "module_np_root.tensors"
    write_with(tz, p, lambda s: s.write_module(m, include_non_persistent_buffers=False))
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        keys = list(d.keys())
    assert keys == [n for _, _, n, _ in module_entries(m, include_non_persistent=False)]
    assert ".root_scale" in keys


def test_write_tensor_explicit(tmp_path):
    p = tmp_path / "wt.tensors"
    w = torch.arange(4.0).reshape(2, 2)
    arr = np.arange(5, dtype=np.int32)

    def writer(s):
        s.write_tensor(7, "w", tz.TensorType.PARAM, w)
        s.write_tensor(3, "from_numpy", tz.TensorType.BUFFER, arr)
        s.write_tensor(65535, "max_idx", tz.TensorType.STATE_DICT, torch.tensor([True, False]))
        s.write_tensor(0, "zero_idx", tz.TensorType.BUFFER, torch.tensor(2.5, dtype=torch.float64))

    write_with(tz, p, writer)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True, verify_hash=True) as d:
        got = list(d.read_tensors())
    assert [(i, t, n) for i, t, n, _ in got] == [
        (7, tz.TensorType.PARAM, "w"),
        (3, tz.TensorType.BUFFER, "from_numpy"),
        (65535, tz.TensorType.STATE_DICT, "max_idx"),
        (0, tz.TensorType.BUFFER, "zero_idx"),
    ]
    assert_same_tensor(got[0][3], w)
    assert_same_tensor(got[1][3], torch.from_numpy(arr))
    assert_same_tensor(got[2][3], torch.tensor([True, False]))
    assert_same_tensor(got[3][3], torch.tensor(2.5, dtype=torch.float64))


def test_write_tensor_rejects_tuple_name(tmp_path):
    s = tz.TensorSerializer(str(tmp_path / "t.tensors"))
    try:
        with pytest.raises(TypeError):
            s.write_tensor(0, ("a", "b"), tz.TensorType.PARAM, torch.ones(1))
    finally:
        s.close()


def test_multiple_writes_append(tmp_path):
    p = tmp_path / "multi.tensors"
    a = {"a": torch.arange(3.0), "b": torch.ones(2, 2, dtype=torch.int32)}
    b = {"c": torch.zeros(5, dtype=torch.float64)}
    c = {"n": {"x": torch.arange(4, dtype=torch.int16)}}
    s = tz.TensorSerializer(str(p))
    s.write_state_dict(a)
    s.write_state_dict(b)
    s.write_tensor(9, "t", tz.TensorType.PARAM, torch.ones(3))
    s.write_state_dict(c)
    expected_bytes = sum(t.numel() * t.element_size() for t in
                         [*a.values(), *b.values(), torch.ones(3), c["n"]["x"]])
    assert s.total_tensor_bytes == expected_bytes
    s.close()
    loaded = load_all(p, verify_hash=True)
    assert list(loaded) == ["a", "b", "c", "t", ("n", "x")]
    assert_same_tensor(loaded["c"], b["c"])
    assert_same_tensor(loaded[("n", "x")], c["n"]["x"])
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        idx = {n: (i, t) for i, t, n, _ in d.read_tensors()}
    assert idx["t"] == (9, tz.TensorType.PARAM)
    assert idx["a"] == (0, tz.TensorType.STATE_DICT)


@pytest.mark.skipif(
    not hasattr(tz.TensorSerializer, "__enter__"),
    reason="the real tensorizer's TensorSerializer is not a context manager "
    "(no __enter__/__exit__); this is a tensorizer_rs extension",
)
def test_serializer_context_manager(tmp_path):
    p = tmp_path / "ctx.tensors"
    sd = simple_sd()
    with tz.TensorSerializer(str(p)) as s:
        s.write_state_dict(sd)
    # file is complete (closed) after the with-block
    assert_roundtrip(sd, load_all(p, verify_hash=True))


@pytest.mark.skipif(
    not hasattr(tz.TensorSerializer, "__enter__"),
    reason="the real tensorizer's TensorSerializer is not a context manager",
)
def test_serializer_context_manager_propagates_errors(tmp_path):
    p = tmp_path / "ctx_err.tensors"
    with pytest.raises(RuntimeError, match="boom"):
        with tz.TensorSerializer(str(p)) as s:
            s.write_state_dict({"a": torch.ones(2)})
            raise RuntimeError("boom")


def test_serializer_accepts_file_object(tmp_path):
    p = tmp_path / "fobj.tensors"
    sd = simple_sd()
    with open(p, "wb+") as f:
        s = tz.TensorSerializer(f)
        s.write_state_dict(sd)
        s.close()
    assert_roundtrip(sd, load_all(p))


def test_serializer_rejects_text_or_readonly_stream(tmp_path):
    p = tmp_path / "x.tensors"
    p.write_bytes(b"")
    with open(p, "rb") as f:
        with pytest.raises(ValueError):
            tz.TensorSerializer(f)
    with open(p, "w+") as f:
        with pytest.raises(ValueError):
            tz.TensorSerializer(f)


# --------------------------------------------------------------------------
# TensorDeserializer: Mapping behaviour
# --------------------------------------------------------------------------
def test_deserializer_is_mapping(tmp_path):
    sd = simple_sd()
    p = write_sd(tmp_path / "m.tensors", sd)
    d = tz.TensorDeserializer(str(p), device="cpu")
    try:
        assert isinstance(d, collections.abc.Mapping)
        assert list(d.keys()) == list(sd.keys())
        assert len(d) == len(sd)
        assert "a" in d and "zzz" not in d
        with pytest.raises(KeyError):
            d["zzz"]
        for k, v in d.items():
            assert_same_tensor(v, sd[k], k)
        assert len(list(d.values())) == len(sd)
        as_dict = dict(d)
        assert set(as_dict) == set(sd)
    finally:
        d.close()


def test_getitem_returns_parameter(tmp_path):
    sd = {dtype_id(dt): make_tensor(dt, (3,), i) for i, dt in enumerate(ALL_DTYPES)}
    p = write_sd(tmp_path / "params.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        for k, t in sd.items():
            v = d[k]
            assert isinstance(v, torch.nn.Parameter), k
            assert v.requires_grad == is_float_like(t.dtype), k
            assert v.device.type == "cpu"


def test_nested_branches_are_mappingproxy(tmp_path):
    sd = nested_sd()
    p = write_sd(tmp_path / "n.tensors", sd)
    for lazy in (False, True):
        with tz.TensorDeserializer(str(p), device="cpu", lazy_load=lazy) as d:
            assert list(d.keys()) == ["model", "extra", "flat"]
            assert len(d) == 3
            model = d["model"]
            assert isinstance(model, types.MappingProxyType)
            assert list(model.keys()) == ["layers", "emb"]
            layers = model["layers"]
            assert isinstance(layers, types.MappingProxyType)
            assert list(layers.keys()) == [0, 1]
            assert isinstance(layers[0], types.MappingProxyType)
            w = layers[1]["w"]
            assert isinstance(w, torch.nn.Parameter)
            assert_same_tensor(w, sd["model"]["layers"][1]["w"])
            extra = d["extra"]
            assert isinstance(extra, types.MappingProxyType)
            assert list(extra.keys()) == [0, 1]
            assert_same_tensor(extra[1], sd["extra"][1])
            with pytest.raises(TypeError):
                model["new"] = torch.ones(1)  # read-only


def test_tree(tmp_path):
    sd = nested_sd()
    p = write_sd(tmp_path / "tree.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        tree = d.tree()
        assert type(tree) is dict
        assert list(tree) == ["model", "extra", "flat"]
        assert type(tree["model"]["layers"]) is list
        assert type(tree["extra"]) is list
        assert len(tree["model"]["layers"]) == 2
        assert_same_tensor(tree["model"]["layers"][0]["w"], sd["model"]["layers"][0]["w"])
        sub = d.tree(("model", "layers"))
        assert type(sub) is list and len(sub) == 2
        leaf = d.tree(("model", "layers", 1, "b"))
        assert isinstance(leaf, torch.Tensor)
        assert_same_tensor(leaf, sd["model"]["layers"][1]["b"])
        sentinel = object()
        assert d.tree(("nope",), default=sentinel) is sentinel
        with pytest.raises(TypeError):
            d.tree("model")


def test_names_window_filtered_tree_and_pending(tmp_path):
    """The native name index (python/src/names.rs): a lazy read's window,
    a filtered tree leaving out emptied layers, read_tensors' bounds."""
    p = write_sd(tmp_path / "names.tensors", nested_sd())
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        names, first = d._names, d._selected[0]
        assert names.read_ahead(first, {}, 0) == [first]  # no room: alone
        assert names.read_ahead(first, {}, 1 << 30) == d._selected
        tree = d.tree(filter_func=lambda n: isinstance(n, tuple) and n[:2] == ("model", "layers"))
        assert list(tree) == ["model"] and list(tree["model"]) == ["layers"]
        assert [sorted(layer) for layer in tree["model"]["layers"]] == [["b", "w"], ["b", "w"]]
        assert d.tree(filter_func=lambda n: False) == {}
        for bad in (-2, 1.5):
            with pytest.raises(ValueError, match="num_tensors"):
                list(d.read_tensors(num_tensors=bad))
        assert list(d.read_tensors(num_tensors=0)) == []
        assert [name for _, _, name, _ in d.read_tensors(num_tensors=2)] == [e.name for e in d._selected[:2]]
        positions, rest = names.pending(None, -1)
        assert positions[0] == 2 and rest == d._selected[2:]
        assert names.node(("model", "nope")) is None and names.node(("flat", 0)) is None


def test_gc_paused_puts_the_collector_back_as_it_was():
    import gc

    from tensorizer_rs import _native

    assert gc.isenabled()
    with pytest.raises(KeyError), _native.gc_paused():
        assert not gc.isenabled()
        raise KeyError("inside")
    assert gc.isenabled()
    gc.disable()
    try:
        with _native.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off: left off
    finally:
        gc.enable()


def test_context_manager_and_double_close(tmp_path):
    p = write_sd(tmp_path / "cm.tensors", simple_sd())
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        assert_same_tensor(d["a"], simple_sd()["a"])
    d.close()  # closing again is harmless


def test_lazy_load(tmp_path):
    sd = simple_sd()
    p = write_sd(tmp_path / "lazy.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        assert list(d.keys()) == list(sd.keys())
        first = d["a"]
        assert_same_tensor(first, sd["a"])
        assert d["a"] is first  # cached
        for k in sd:  # in file order
            assert_same_tensor(d[k], sd[k], k)


@oracle_bug("lazy_load random access only works forwards: after d['b'] has been "
            "loaded, d['a'] (earlier in the file) raises RuntimeError('Tensor not "
            "found: ...') because read_tensors() resumes after the last yielded key")
def test_lazy_load_out_of_order_access(tmp_path):
    sd = simple_sd()
    p = write_sd(tmp_path / "lazy_ooo.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        for k in reversed(list(sd)):
            assert_same_tensor(d[k], sd[k], k)
        assert_same_tensor(d["b"], sd["b"])


def test_filter_func_str_names(tmp_path):
    sd = simple_sd()
    p = write_sd(tmp_path / "f.tensors", sd)
    seen = []

    def ff(name):
        seen.append(name)
        return name in ("a", "c")

    with tz.TensorDeserializer(str(p), device="cpu", filter_func=ff) as d:
        assert list(d.keys()) == ["a", "c"]
        assert "b" not in d
        assert_same_tensor(d["c"], sd["c"])
        assert d.total_tensor_bytes == sd["a"].nbytes + sd["c"].nbytes
    assert set(seen) == set(sd)
    assert all(isinstance(n, str) for n in seen)


def test_filter_func_tuple_paths(tmp_path):
    sd = nested_sd()
    p = write_sd(tmp_path / "ft.tensors", sd)
    seen = []

    def ff(name):
        seen.append(name)
        return isinstance(name, tuple) and name[0] == "model"

    with tz.TensorDeserializer(str(p), device="cpu", filter_func=ff) as d:
        assert "model" in d
        assert "flat" not in d
        assert_same_tensor(d["model"]["emb"], sd["model"]["emb"])
    expected_names = {normalized_name(path) for path, _ in flatten(sd)}
    assert set(seen) == expected_names
    assert "flat" in seen and ("model", "layers", 0, "w") in seen
    # read_tensors respects the constructor filter as well
    with tz.TensorDeserializer(str(p), device="cpu", filter_func=ff, lazy_load=True) as d:
        names = [n for _, _, n, _ in d.read_tensors()]
    assert names == [n for n in (normalized_name(q) for q, _ in flatten(sd))
                     if isinstance(n, tuple) and n[0] == "model"]


def test_dtype_casting(tmp_path):
    sd = {
        "f32": torch.arange(4, dtype=torch.float32),
        "i16": torch.arange(4, dtype=torch.int16),
        "i64": torch.arange(4, dtype=torch.int64),
        "b": torch.tensor([True, False]),
    }
    p = write_sd(tmp_path / "cast.tensors", sd)
    for lazy in (False, True):
        with tz.TensorDeserializer(str(p), device="cpu", dtype=torch.float16, lazy_load=lazy) as d:
            assert d["f32"].dtype == torch.float16
            # tensorizer casts integers too; we keep them (spec §11.1 row 17).
            ints = torch.float16 if tzhelpers.IS_ORACLE else None
            assert d["i16"].dtype == (ints or torch.int16)
            assert d["i64"].dtype == (ints or torch.int64)
            assert d["b"].dtype == torch.bool  # bool is never cast
            assert torch.equal(d["i64"].detach(), sd["i64"].to(ints or torch.int64))
            assert torch.equal(d["b"].detach(), sd["b"])
            # requires_grad follows the *stored* dtype
            assert d["f32"].requires_grad is True
            assert d["i16"].requires_grad is False


@pytest.mark.parametrize("num_readers", [1, 2, 4])
def test_num_readers(tmp_path, num_readers):
    sd = {f"t{i}": torch.full((i + 1, 3), float(i)) for i in range(9)}
    p = write_sd(tmp_path / "nr.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", num_readers=num_readers, verify_hash=True) as d:
        for k in sd:
            assert_same_tensor(d[k], sd[k], k)


def test_num_readers_invalid(tmp_path):
    p = write_sd(tmp_path / "nr0.tensors", simple_sd())
    with pytest.raises(ValueError):
        tz.TensorDeserializer(str(p), device="cpu", num_readers=0)


@pytest.mark.parametrize("lazy", [False, True])
def test_verify_hash_true(tmp_path, lazy):
    sd = all_dtypes_state_dict(seed=3)
    p = write_sd(tmp_path / "vh.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True, lazy_load=lazy) as d:
        for k in sd:
            assert_same_tensor(d[k], sd[k], k)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")], ids=["str", "torch.device"])
def test_device_cpu(tmp_path, device):
    p = write_sd(tmp_path / "dev.tensors", simple_sd())
    with tz.TensorDeserializer(str(p), device=device) as d:
        assert all(d[k].device.type == "cpu" for k in d)


def test_pathlike_and_bytesio_sources(tmp_path):
    sd = simple_sd()
    p = write_sd(tmp_path / "src.tensors", sd)
    with tz.TensorDeserializer(pathlib.Path(p), device="cpu") as d:
        assert_same_tensor(d["d"], sd["d"])
    with tz.TensorDeserializer(io.BytesIO(p.read_bytes()), device="cpu") as d:
        assert_same_tensor(d["d"], sd["d"])
    with open(p, "rb") as f:
        with tz.TensorDeserializer(f, device="cpu", lazy_load=True) as d:
            assert_same_tensor(d["b"], sd["b"])


# --------------------------------------------------------------------------
# load_into_module / read_tensors / read_numpy_arrays / total_tensor_bytes
# --------------------------------------------------------------------------
def test_load_into_module(tmp_path):
    src = module_with_buffers(seed=0)
    p = tmp_path / "lim.tensors"
    write_with(tz, p, lambda s: s.write_module(src))
    dst = module_with_buffers(seed=5)
    with torch.no_grad():
        for t in list(dst.parameters()) + list(dst.buffers()):
            t.zero_()
    with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True) as d:
        n = d.load_into_module(dst)
    expected = module_entries(src)
    assert n == len(expected)
    dst_params = dict(dst.named_parameters())
    dst_buffers = dict(dst.named_buffers())
    for _, typ, name, t in expected:
        key = name.lstrip(".")
        if typ == 0:
            assert key in dst_params, name
            assert_same_tensor(dst_params[key], t, name)
        else:
            assert key in dst_buffers, name
            assert key not in dst_params, name
            assert_same_tensor(dst_buffers[key], t, name)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    src.eval()
    dst.eval()
    with torch.no_grad():
        assert torch.equal(src(x), dst(x))


def test_load_into_module_rejects_state_dict_entries(tmp_path):
    p = write_sd(tmp_path / "sd.tensors", {"weight": torch.ones(2, 3), "bias": torch.ones(2)})
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        with pytest.raises(NotImplementedError):
            d.load_into_module(torch.nn.Linear(3, 2))


def test_read_tensors_tuples(tmp_path):
    sd = nested_sd()
    p = write_sd(tmp_path / "rt.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True, verify_hash=True) as d:
        items = list(d.read_tensors())
    expected = list(flatten(sd))
    assert len(items) == len(expected)
    for item, (path, t) in zip(items, expected):
        assert isinstance(item, tuple) and len(item) == 4
        idx, typ, name, tensor = item
        assert idx == 0
        assert typ == tz.TensorType.STATE_DICT and isinstance(typ, tz.TensorType)
        assert name == normalized_name(path)
        assert isinstance(tensor, torch.Tensor)
        assert_same_tensor(tensor, t, str(name))


def test_read_tensors_num_tensors_pages(tmp_path):
    """Consecutive read_tensors(num_tensors=2) calls page through the file."""
    sd = {str(i): torch.full((2,), float(i)) for i in range(5)}
    p = write_sd(tmp_path / "pages.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        pages = [[n for _, _, n, _ in d.read_tensors(num_tensors=2)] for _ in range(3)]
    assert pages == [["0", "1"], ["2", "3"], ["4"]]


def test_read_tensors_filter_and_invalid_count(tmp_path):
    sd = simple_sd()
    p = write_sd(tmp_path / "rtf.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        names = [n for _, _, n, _ in d.read_tensors(filter_func=lambda n: n in ("b", "d"))]
        assert names == ["b", "d"]
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        with pytest.raises(ValueError):
            list(d.read_tensors(num_tensors=-2))


def test_read_numpy_arrays(tmp_path):
    sd = {
        "f": torch.arange(4, dtype=torch.float32),
        "i": torch.arange(3, dtype=torch.int64),
        "bf": torch.arange(4, dtype=torch.bfloat16),
    }
    p = write_sd(tmp_path / "np.tensors", sd)

    # without allow_raw_data, an opaque dtype raises ValueError
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        with pytest.raises(ValueError, match="opaque datatype"):
            for _ in d.read_numpy_arrays():
                pass

    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        items = list(d.read_numpy_arrays(filter_func=lambda n: n != "bf"))
    assert [it[2] for it in items] == ["f", "i"]
    for idx, typ, name, arr, is_opaque, torch_dtype in items:
        assert idx == 0 and typ == tz.TensorType.STATE_DICT
        assert isinstance(arr, np.ndarray)
        assert is_opaque is False and torch_dtype is None
        np.testing.assert_array_equal(arr, sd[name].numpy())

    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        items = {it[2]: it for it in d.read_numpy_arrays(allow_raw_data=True)}
    _, _, _, arr, is_opaque, torch_dtype = items["bf"]
    assert is_opaque is True
    assert torch_dtype == "torch.bfloat16"
    assert arr.dtype == np.int16
    assert arr.tobytes() == raw_bytes(sd["bf"])
    assert items["f"][4] is False


def test_total_tensor_bytes(tmp_path):
    sd = simple_sd()
    nbytes = sum(t.nbytes for t in sd.values())
    p = tmp_path / "ttb.tensors"
    s = tz.TensorSerializer(str(p))
    s.write_state_dict(sd)
    assert s.total_tensor_bytes == nbytes
    s.close()
    for lazy in (False, True):
        with tz.TensorDeserializer(str(p), device="cpu", lazy_load=lazy) as d:
            assert d.total_tensor_bytes == nbytes


def test_total_tensor_bytes_with_meta(tmp_path):
    """Lazy: meta tensors count at full size; after an eager load: data bytes only."""
    sd = {"real": torch.ones(4), "meta": torch.empty(3, 4, device="meta")}
    p = write_sd(tmp_path / "ttbm.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        assert d.total_tensor_bytes == 16 + 48
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        assert d.total_tensor_bytes == 16


# --------------------------------------------------------------------------
# dtypes, shapes, meta, non-contiguous
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_dtype_roundtrip(tmp_path, dt, lazy):
    sd = {
        "t": make_tensor(dt, (3, 5), 11),
        "scalar": make_tensor(dt, (), 12),
        "v": make_tensor(dt, (7,), 13),
    }
    p = write_sd(tmp_path / f"{dtype_id(dt)}.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=lazy, verify_hash=True) as d:
        for k, t in sd.items():
            assert_same_tensor(d[k], t, k)


def test_data_version_rules(tmp_path):
    """The writer picks the lowest data version that can express the file."""
    cases = {
        "plain": ({"a": torch.ones(2)}, {}, 1, 0),
        "opaque": ({"a": torch.ones(2, dtype=torch.bfloat16)}, {}, 2, 0),
        "meta": ({"a": torch.ones(2), "m": torch.empty(2, device="meta")}, {}, 4, 0),
        "encrypted": ({"a": torch.ones(2, dtype=torch.bfloat16)},
                      {"encryption": tz.EncryptionParams(TEST_KEY)}, 3, 0),
        "encrypted_meta": ({"a": torch.ones(2), "m": torch.empty(2, device="meta")},
                           {"encryption": tz.EncryptionParams(TEST_KEY)}, 4, 1),
        "long": ({"a": torch.ones(2), "l": torch.empty(2**32, dtype=torch.uint8, device="meta")},
                 {}, 5, 2),
    }
    for name, (sd, kwargs, version, flags) in cases.items():
        p = write_sd(tmp_path / f"{name}.tensors", sd, **kwargs)
        assert data_version(p) == version, name
        assert feature_flags(p) == flags, name


@pytest.mark.parametrize("dt", NUMPY_DTYPES, ids=dtype_id)
def test_zero_element_tensors(tmp_path, dt):
    sd = {"e0": make_tensor(dt, (0,)), "e2x0": make_tensor(dt, (2, 0)), "after": make_tensor(dt, (2,), 4)}
    p = write_sd(tmp_path / "empty.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True) as d:
        for k, t in sd.items():
            assert_same_tensor(d[k], t, k)


@oracle_bug("0-element tensors with an opaque dtype (e.g. bf16) cannot be read back: "
            "TensorEntry.deserialized_length calls numpy.dtype('<V2\\x00torch.bfloat16') "
            "-> TypeError (see vector v2_empty_opaque)")
@pytest.mark.parametrize("dt", OPAQUE_DTYPES, ids=dtype_id)
def test_zero_element_opaque_tensors(tmp_path, dt):
    sd = {"e0": make_tensor(dt, (0,)), "e2x0": make_tensor(dt, (2, 0)), "after": make_tensor(dt, (2,), 4)}
    p = write_sd(tmp_path / "empty_opaque.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True) as d:
        for k, t in sd.items():
            assert_same_tensor(d[k], t, k)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_meta_tensors_load_as_zeros(tmp_path, lazy):
    sd = {
        "real": torch.arange(4.0),
        "meta_f32": torch.empty(3, 4, device="meta"),
        "meta_i64": torch.empty(5, dtype=torch.int64, device="meta"),
        "meta_bool": torch.empty(2, 2, dtype=torch.bool, device="meta"),
        "after": torch.ones(2, dtype=torch.int32),
    }
    p = write_sd(tmp_path / "meta.tensors", sd)
    assert data_version(p) == 4
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=lazy, verify_hash=True) as d:
        for k, t in sd.items():
            v = d[k]
            assert v.device.type == "cpu"
            assert_same_tensor(v, t, k)


@oracle_bug("opaque-dtype meta tensors cannot be read back (numpy.dtype() on the opaque "
            "dtype string -> TypeError; see vector v4_meta_opaque)")
def test_meta_tensor_opaque_dtype(tmp_path):
    sd = {"real": torch.ones(2), "meta_bf16": torch.empty(2, 3, dtype=torch.bfloat16, device="meta")}
    p = write_sd(tmp_path / "meta_bf16.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True) as d:
        for k, t in sd.items():
            assert_same_tensor(d[k], t, k)


@oracle_bug("a meta scalar (shape ()) is written with hashes over 4 bytes of "
            "uninitialized memory, so verify_hash usually raises HashMismatchError")
def test_meta_scalar(tmp_path):
    sd = {"m": torch.empty((), device="meta"), "after": torch.ones(1)}
    p = write_sd(tmp_path / "meta_scalar.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True) as d:
        for k, t in sd.items():
            assert_same_tensor(d[k], t, k)


def test_non_contiguous_inputs(tmp_path):
    base = torch.arange(24.0).reshape(2, 3, 4)
    sd = {
        "transposed": base[0].t(),
        "permuted": base.permute(2, 0, 1),
        "sliced": base[:, 1:, ::3],
        "expanded": torch.arange(3.0).expand(4, 3),
        "channels_last": torch.arange(24.0).reshape(2, 3, 2, 2).to(memory_format=torch.channels_last),
        "offset_view": base.reshape(-1)[5:9],
        "bf16_t": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t(),
        "param": torch.nn.Parameter(torch.ones(2, 2)),
    }
    assert not sd["transposed"].is_contiguous()
    p = write_sd(tmp_path / "nc.tensors", sd)
    with tz.TensorDeserializer(str(p), device="cpu", verify_hash=True) as d:
        for k, t in sd.items():
            v = d[k]
            assert v.is_contiguous(), k
            assert torch.equal(v.detach(), t.detach()), k
            assert_same_tensor(v, t, k)


# --------------------------------------------------------------------------
# Encryption
# --------------------------------------------------------------------------
def _enc_sd():
    return {
        "a": torch.arange(6.0),
        "bf": torch.arange(3, dtype=torch.bfloat16),
        "i": torch.tensor([[1, 2], [3, 4]], dtype=torch.int64),
        "big": make_tensor(torch.float32, (600_000,), 3),  # > 2 MiB: several chunks
    }


def _check_enc(path, dec, sd, **kwargs):
    with tz.TensorDeserializer(str(path), device="cpu", encryption=dec, verify_hash=True, **kwargs) as d:
        for k, t in sd.items():
            assert_same_tensor(d[k], t, k)


def test_encryption_exact_key(tmp_path):
    sd = _enc_sd()
    enc = tz.EncryptionParams(TEST_KEY)
    assert bytes(enc.key) == TEST_KEY
    p = write_sd(tmp_path / "ek.tensors", sd, encryption=enc)
    assert data_version(p) == 3
    _check_enc(p, tz.DecryptionParams.from_key(TEST_KEY), sd)
    _check_enc(p, tz.DecryptionParams.from_key(TEST_KEY), sd, lazy_load=True)


def test_encryption_random(tmp_path):
    sd = _enc_sd()
    enc = tz.EncryptionParams.random()
    assert isinstance(enc.key, bytes) and len(enc.key) == 32
    assert tz.EncryptionParams.random().key != enc.key
    p = write_sd(tmp_path / "er.tensors", sd, encryption=enc)
    _check_enc(p, tz.DecryptionParams.from_key(enc.key), sd)


def test_encryption_from_string(tmp_path):
    sd = _enc_sd()
    EP = tz.EncryptionParams
    enc = EP.from_string(TEST_PASSPHRASE, opslimit=EP.OpsLimit.MIN, memlimit=EP.MemLimit.MIN)
    assert len(enc.key) == 32
    assert isinstance(enc.salt, bytes) and len(enc.salt) == 16
    p = write_sd(tmp_path / "ep.tensors", sd, encryption=enc)
    _check_enc(p, tz.DecryptionParams.from_string(TEST_PASSPHRASE), sd)
    _check_enc(p, tz.DecryptionParams.from_string(TEST_PASSPHRASE), sd, lazy_load=True)
    # the derived key also works directly
    _check_enc(p, tz.DecryptionParams.from_key(enc.key), sd)


def test_encryption_from_string_deterministic_with_salt():
    EP = tz.EncryptionParams
    salt = bytes(range(32, 48))
    a = EP.from_string(TEST_PASSPHRASE, opslimit=EP.OpsLimit.MIN, memlimit=EP.MemLimit.MIN, salt=salt)
    b = EP.from_string(TEST_PASSPHRASE, opslimit=EP.OpsLimit.MIN, memlimit=EP.MemLimit.MIN, salt=salt)
    assert a.key == b.key and a.salt == salt
    # value from tests/vectors/manifest.json (libsodium crypto_pwhash argon2id13)
    assert a.key.hex() == "4daa5f2f5e1e0455b067033d402cce216a2af1d86b19b2975ab624e99337bacf"


def test_ops_mem_limits():
    EP = tz.EncryptionParams
    assert [int(x) for x in (EP.OpsLimit.MIN, EP.OpsLimit.INTERACTIVE,
                             EP.OpsLimit.MODERATE, EP.OpsLimit.SENSITIVE)] == [1, 2, 3, 4]
    assert [int(x) for x in (EP.MemLimit.MIN, EP.MemLimit.INTERACTIVE,
                             EP.MemLimit.MODERATE, EP.MemLimit.SENSITIVE)] == [
        8192, 64 * 1024**2, 256 * 1024**2, 1024**3]


def test_encryption_meta_tensor(tmp_path):
    sd = {"real": torch.ones(3), "meta": torch.empty(3, device="meta"), "after": torch.tensor([7])}
    p = write_sd(tmp_path / "em.tensors", sd, encryption=tz.EncryptionParams(TEST_KEY))
    assert data_version(p) == 4 and feature_flags(p) == 1
    _check_enc(p, tz.DecryptionParams.from_key(TEST_KEY), sd)


@oracle_bug("encrypting a 0-element tensor raises IndexError in the writer")
def test_encryption_zero_element_tensor(tmp_path):
    sd = {"e": torch.zeros(0), "a": torch.ones(2)}
    p = write_sd(tmp_path / "e0.tensors", sd, encryption=tz.EncryptionParams(TEST_KEY))
    _check_enc(p, tz.DecryptionParams.from_key(TEST_KEY), sd)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_wrong_key_raises_cryptography_error(tmp_path, lazy):
    p = write_sd(tmp_path / "wk.tensors", _enc_sd(), encryption=tz.EncryptionParams(TEST_KEY))
    with pytest.raises(tz.CryptographyError):
        with tz.TensorDeserializer(str(p), device="cpu", lazy_load=lazy,
                                   encryption=tz.DecryptionParams.from_key(bytes(32))) as d:
            for k in d:
                d[k]


def test_wrong_passphrase_raises_cryptography_error(tmp_path):
    EP = tz.EncryptionParams
    enc = EP.from_string(TEST_PASSPHRASE, opslimit=EP.OpsLimit.MIN, memlimit=EP.MemLimit.MIN)
    p = write_sd(tmp_path / "wp.tensors", _enc_sd(), encryption=enc)
    with pytest.raises(tz.CryptographyError):
        with tz.TensorDeserializer(str(p), device="cpu",
                                   encryption=tz.DecryptionParams.from_string("wrong")) as d:
            dict(d)


def test_encrypted_file_without_decryption_params(tmp_path):
    p = write_sd(tmp_path / "nd.tensors", _enc_sd(), encryption=tz.EncryptionParams(TEST_KEY))
    with pytest.raises(tz.CryptographyError, match="decryption was not requested"):
        with tz.TensorDeserializer(str(p), device="cpu") as d:
            dict(d)


def test_decryption_params_on_plain_file(tmp_path):
    p = write_sd(tmp_path / "plain.tensors", simple_sd())
    with pytest.raises(tz.CryptographyError):
        tz.TensorDeserializer(str(p), device="cpu",
                              encryption=tz.DecryptionParams.from_key(TEST_KEY))


def test_bad_key_lengths():
    with pytest.raises(ValueError):
        tz.EncryptionParams(b"short")
    with pytest.raises(ValueError):
        tz.DecryptionParams.from_key(b"short")
    with pytest.raises(TypeError):
        tz.EncryptionParams("a" * 32)


# --------------------------------------------------------------------------
# utils / stream_io
# --------------------------------------------------------------------------
def test_no_init_or_tensor():
    m = tz.utils.no_init_or_tensor(lambda: torch.nn.Linear(3, 4))
    assert isinstance(m, torch.nn.Linear)
    assert m.weight.is_meta and m.weight.shape == (4, 3)
    with tz.utils.no_init_or_tensor():
        m2 = torch.nn.Linear(2, 2)
        assert m2.weight.is_meta
    # patches are removed afterwards
    assert not torch.nn.Linear(2, 2).weight.is_meta
    assert not torch.empty(3).is_meta
    with pytest.raises(TypeError):
        tz.utils.no_init_or_tensor(5)


def test_convert_bytes():
    cb = tz.utils.convert_bytes
    assert cb(10) == "10.0 bytes"
    assert cb(1500) == "1.5 KB"
    assert cb(1536, decimal=False) == "1.5 KiB"
    assert cb(3 * 1000**3) == "3.0 GB"
    assert cb(2 * 1024**2, decimal=False) == "2.0 MiB"


def test_get_mem_usage():
    s = tz.utils.get_mem_usage()
    assert isinstance(s, str) and "CPU" in s


def test_open_stream_local(tmp_path):
    sd = simple_sd()
    p = tmp_path / "sub" / "dir" / "s.tensors"  # parent dirs are created for "wb+"
    f = tz.stream_io.open_stream(str(p), "wb+")
    s = tz.TensorSerializer(f)
    s.write_state_dict(sd)
    s.close()
    assert p.exists()
    f = tz.stream_io.open_stream(str(p), "rb")
    with tz.TensorDeserializer(f, device="cpu", verify_hash=True) as d:
        for k, t in sd.items():
            assert_same_tensor(d[k], t, k)
    f.close()
    with pytest.raises(ValueError):
        tz.stream_io.open_stream(str(p), "r")  # text modes are rejected


def test_tree_prefix_is_a_path_and_numpy_reads_need_the_cpu(tmp_path):
    path = str(tmp_path / "m.tensors")
    s = tz.TensorSerializer(path)
    s.write_state_dict({"model": {"w": torch.ones(2)}})
    s.close()
    with tz.TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        for prefix in ("model", 0, True):
            with pytest.raises(TypeError, match="prefix must be a sequence of keys"):
                d.tree(prefix)
        for whole in (d.tree(), d.tree(None), d.tree(())):
            assert list(whole) == ["model"] and whole["model"]["w"].tolist() == [1.0, 1.0]
        assert d.tree(("model", "w")).tolist() == [1.0, 1.0] and d.tree(("nope",), default=7) == 7
    # Refused before anything is read, even when nothing is left to read.
    with tz.TensorDeserializer(path, device="meta", lazy_load=True) as d:
        for n in (-1, 0):
            with pytest.raises(RuntimeError, match="read_numpy_arrays requires device='cpu'"):
                next(d.read_numpy_arrays(num_tensors=n))


def test_load_into_module_names_a_missing_submodule(tmp_path):
    m = torch.nn.Module()
    m.block = torch.nn.Linear(2, 2)
    m.register_buffer("scale", torch.ones(1))
    path = str(tmp_path / "m.tensors")
    s = tz.TensorSerializer(path)
    s.write_module(m)
    s.close()
    with tz.TensorDeserializer(path, device="cpu") as d:
        with pytest.raises(KeyError, match=r"Module 'block' for tensor 'block.weight' not found in Module"):
            d.load_into_module(torch.nn.Module())
        other = torch.nn.Module()
        other.block = torch.nn.Linear(2, 2)
        assert d.load_into_module(other) == 3
        assert torch.equal(other.block.weight, m.block.weight) and torch.equal(other.scale, m.scale)
        assert "scale" in other.state_dict() and isinstance(other.block.weight, torch.nn.Parameter)
