"""Interoperability between the implementation under test (``tz``) and the
real tensorizer 2.12.1 (``oracle``).

* Every committed test vector (written by the real tensorizer) must load with
  ``tz`` exactly as with tensorizer and as recorded in ``manifest.json``.
  These tests also run under ``TZ_UNDER_TEST=tensorizer`` (they check the
  manifest, not only tensorizer against itself).
* Files written by ``tz`` must load in tensorizer (``verify_hash=True``),
  including encrypted ones.
* With ``layout="tensorizer"``, ``tz`` must write byte-identical files.

Tests that compare tz with the oracle skip themselves when
``TZ_UNDER_TEST=tensorizer``.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from tzhelpers import (
    NUMPY_DTYPES,
    TEST_KEY,
    TEST_PASSPHRASE,
    VECTORS_DIR,
    all_dtypes_state_dict,
    assert_same_tensor,
    data_version,
    decryption_params,
    dtype_id,
    entry_key,
    feature_flags,
    get_path,
    import_oracle,
    make_tensor,
    manifest_vectors,
    module_with_buffers,
    needs_two_impls,
    oracle_bug,
    raw_bytes,
    tz,
    write_with,
)

oracle = import_oracle()

LONG = 2**32


def not_long(name) -> bool:
    """filter_func that skips the 4 GiB meta tensor (loading it materialises zeros)."""
    return name != "long"


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def torch_dtype_from_string(s: str) -> torch.dtype:
    """torch dtype for a stored dtype string ('<f4', '<V2\\x00torch.bfloat16', ...)."""
    if "\x00" in s:
        return getattr(torch, s.split("\x00", 1)[1].replace("torch.", ""))
    return torch.from_numpy(np.empty(0, dtype=np.dtype(s))).dtype


def read_all(module, path, dec=None, filter_func=not_long):
    """[(idx, type, name, tensor)] in file order via a lazy deserializer."""
    out = []
    with module.TensorDeserializer(
        str(path), device="cpu", lazy_load=True, verify_hash=True,
        encryption=dec, filter_func=filter_func,
    ) as d:
        for idx, typ, name, t in d.read_tensors():
            out.append((idx, int(typ), name, t.detach()))
    return out


def assert_same_sequence(got, expected, what=""):
    assert [(i, t, n) for i, t, n, _ in got] == [(i, t, n) for i, t, n, _ in expected], what
    for (_, _, name, a), (_, _, _, b) in zip(got, expected):
        assert_same_tensor(a, b, f"{what}:{name}")


def assert_long_entry(path, encrypted=False):
    """Checks the (2**32,) meta uint8 entry through tensorizer's metadata only."""
    dec = oracle.DecryptionParams.from_key(TEST_KEY) if encrypted else None
    with oracle.TensorDeserializer(str(path), device="cpu", lazy_load=True, encryption=dec) as d:
        assert "long" in d
        entry = d._metadata[("long",)]  # oracle-private, pinned to 2.12.1
        assert entry.shape == (LONG,)
        assert entry.dtype == "|u1"
        assert entry.data_length == 0
    assert data_version(path) == 5
    assert feature_flags(path) == (3 if encrypted else 2)


# --------------------------------------------------------------------------
# 1. Committed vectors (written by tensorizer) load identically with tz
# --------------------------------------------------------------------------
VECTORS = manifest_vectors(readable_only=True)


@pytest.mark.parametrize("vec", VECTORS, ids=[v["file"] for v in VECTORS])
def test_vector_loads_like_tensorizer(vec):
    path = VECTORS_DIR / vec["file"]
    assert path.exists(), path
    dec_tz = decryption_params(tz, vec["encryption"])
    dec_or = decryption_params(oracle, vec["encryption"])
    entries = [e for e in vec["tensors"] if e["name"] != "long"]

    with tz.TensorDeserializer(str(path), device="cpu", verify_hash=True,
                               encryption=dec_tz, filter_func=not_long) as d_tz, \
         oracle.TensorDeserializer(str(path), device="cpu", verify_hash=True,
                                   encryption=dec_or, filter_func=not_long) as d_or:
        assert list(d_tz.keys()) == list(d_or.keys())
        assert len(d_tz) == len(d_or)
        for e in entries:
            key = entry_key(e)
            got = get_path(d_tz, key)
            ref = get_path(d_or, key)
            what = f"{vec['file']}:{e['name']!r}"
            assert isinstance(got, torch.nn.Parameter), what
            assert got.requires_grad == ref.requires_grad, what
            assert got.dtype == ref.dtype == torch_dtype_from_string(e["dtype"]), what
            assert list(got.shape) == e["shape"], what
            assert_same_tensor(got, ref, what)
            b = raw_bytes(got)
            if e["is_meta"]:
                assert b == bytes(e["deserialized_length"]), what
            else:
                assert len(b) == e["data_length"], what
                assert hashlib.sha256(b).hexdigest() == e["sha256"], what


@pytest.mark.parametrize("vec", VECTORS, ids=[v["file"] for v in VECTORS])
def test_vector_read_tensors_metadata(vec):
    """read_tensors yields module index, tensor type and name as in the manifest."""
    path = VECTORS_DIR / vec["file"]
    got = read_all(tz, path, dec=decryption_params(tz, vec["encryption"]))
    expected = [e for e in vec["tensors"] if e["name"] != "long"]
    assert [(i, t, n) for i, t, n, _ in got] == [
        (e["module_index"], e["tensor_type"], entry_key(e)) for e in expected
    ]
    for (_, _, _, t), e in zip(got, expected):
        if not e["is_meta"]:
            assert hashlib.sha256(raw_bytes(t)).hexdigest() == e["sha256"]


UNREADABLE_VECTORS = [v for v in manifest_vectors(readable_only=False)
                      if not v["tensorizer_can_read"]]


@oracle_bug("these vectors cannot be read by tensorizer itself "
            "(manifest.json: tensorizer_read_error)")
@pytest.mark.parametrize("vec", UNREADABLE_VECTORS, ids=[v["file"] for v in UNREADABLE_VECTORS])
def test_vector_tensorizer_cannot_read_but_tz_can(vec):
    """0-element and meta tensors with opaque dtypes: tz reads them correctly."""
    path = VECTORS_DIR / vec["file"]
    got = read_all(tz, path, dec=decryption_params(tz, vec["encryption"]))
    assert [(i, t, n) for i, t, n, _ in got] == [
        (e["module_index"], e["tensor_type"], entry_key(e)) for e in vec["tensors"]
    ]
    for (_, _, _, t), e in zip(got, vec["tensors"]):
        assert t.dtype == torch_dtype_from_string(e["dtype"]), e["name"]
        assert list(t.shape) == e["shape"], e["name"]
        b = raw_bytes(t)
        if e["is_meta"]:
            assert b == bytes(e["deserialized_length"]), e["name"]
        else:
            assert hashlib.sha256(b).hexdigest() == e["sha256"], e["name"]


LONG_VECTORS = [v for v in VECTORS if any(e["name"] == "long" for e in v["tensors"])]


@pytest.mark.parametrize("vec", LONG_VECTORS, ids=[v["file"] for v in LONG_VECTORS])
def test_vector_long_tensor_listed_without_loading(vec):
    path = VECTORS_DIR / vec["file"]
    with tz.TensorDeserializer(str(path), device="cpu", lazy_load=True,
                               encryption=decryption_params(tz, vec["encryption"])) as d:
        assert list(d.keys()) == [entry_key(e) for e in vec["tensors"]]
        assert "long" in d
        # lazy: meta tensors count at their full deserialized size
        assert d.total_tensor_bytes == sum(e["deserialized_length"] for e in vec["tensors"])
        after = next(e for e in vec["tensors"] if e["name"] == "after")
        assert hashlib.sha256(raw_bytes(d["after"])).hexdigest() == after["sha256"]


@needs_two_impls
def test_vector_filtered_structure_matches_tensorizer():
    path = VECTORS_DIR / "v1_nested.tensors"

    def ff(name):
        return isinstance(name, tuple) and name[:2] in (("model", "emb"), ("extra", 1))

    with tz.TensorDeserializer(str(path), device="cpu", filter_func=ff) as d_tz, \
         oracle.TensorDeserializer(str(path), device="cpu", filter_func=ff) as d_or:
        assert list(d_tz.keys()) == list(d_or.keys())
        assert d_tz.total_tensor_bytes == d_or.total_tensor_bytes
        assert list(d_tz["model"].keys()) == list(d_or["model"].keys())
        t_tz, t_or = d_tz.tree(), d_or.tree()
        assert repr(type(t_tz)) == repr(type(t_or))
        assert_same_tensor(t_tz["model"]["emb"], t_or["model"]["emb"])


@needs_two_impls
def test_vector_tree_matches_tensorizer():
    path = VECTORS_DIR / "v1_nested.tensors"

    def shape_of(node):
        if isinstance(node, torch.Tensor):
            return ("T", str(node.dtype), tuple(node.shape), raw_bytes(node))
        if isinstance(node, list):
            return [shape_of(x) for x in node]
        return {k: shape_of(v) for k, v in node.items()}

    with tz.TensorDeserializer(str(path), device="cpu") as d_tz, \
         oracle.TensorDeserializer(str(path), device="cpu") as d_or:
        assert shape_of(d_tz.tree()) == shape_of(d_or.tree())
        assert shape_of(d_tz.tree(("model", "layers"))) == shape_of(d_or.tree(("model", "layers")))


# --------------------------------------------------------------------------
# 2. Inputs written by both implementations
# --------------------------------------------------------------------------
def _flat_all_dtypes(empties=True):
    sd = all_dtypes_state_dict(seed=21)
    base = torch.arange(24.0).reshape(4, 6)
    sd["transposed"] = base.t()
    sd["strided"] = base[:, ::2]
    sd["expanded"] = torch.arange(3, dtype=torch.int32).expand(2, 3)
    if empties:
        for dt in NUMPY_DTYPES:
            sd[dtype_id(dt) + "_empty"] = make_tensor(dt, (2, 0))
        sd["empty_1d"] = torch.zeros(0)
    return sd


def _nested():
    g = torch.Generator().manual_seed(7)
    return {
        "model": {
            "layers": [{"w": torch.randn(3, 2, generator=g), "b": torch.zeros(3)},
                       {"w": torch.randn(2, 3, generator=g), "b": torch.arange(2.0)}],
            "emb": torch.arange(8, dtype=torch.int64).reshape(4, 2),
            "bf": torch.arange(4, dtype=torch.bfloat16),
        },
        "extra": [torch.tensor([1, 2], dtype=torch.int16), torch.tensor(1.5)],
        "flat": torch.ones(1),
    }


def _meta():
    return {
        "real_f32": torch.arange(4.0),
        "meta_f32": torch.empty(3, 4, device="meta"),
        "real_i64": torch.tensor([5, 6]),
        "meta_i64": torch.empty(5, dtype=torch.int64, device="meta"),
        "after": torch.tensor([1.0, 2.0]),
    }


def w_flat_all_dtypes(mod, s):
    s.write_state_dict(_flat_all_dtypes())


def w_flat_all_dtypes_no_empties(mod, s):
    s.write_state_dict(_flat_all_dtypes(empties=False))


def w_nested(mod, s):
    s.write_state_dict(_nested())


def w_list_root(mod, s):
    s.write_state_dict([torch.full((i % 3 + 1,), float(i)) for i in range(11)])


def w_module(mod, s):
    s.write_module(module_with_buffers(seed=3))


def w_module_root(mod, s):
    torch.manual_seed(4)
    s.write_module(torch.nn.Linear(3, 2))


def w_meta(mod, s):
    s.write_state_dict(_meta())


def w_long_meta(mod, s):
    # like tensorizer's test_long_dimensions: the long tensor arrives in a later
    # write_state_dict call, so earlier metadata entries must be re-tagged.
    s.write_state_dict({"small": torch.tensor([1.0, 2.0]), "i": torch.arange(3)})
    s.write_state_dict({"long": torch.empty(LONG, dtype=torch.uint8, device="meta"),
                        "mid": torch.tensor([3.0])})
    s.write_state_dict({"after": torch.tensor([4.0]), "bf": torch.ones(2, dtype=torch.bfloat16)})


def w_write_tensor(mod, s):
    T = mod.TensorType
    s.write_tensor(7, "w", T.PARAM, torch.arange(4.0).reshape(2, 2))
    s.write_tensor(7, "running", T.BUFFER, torch.tensor([1, 2, 3]))
    s.write_tensor(0, "sd_entry", T.STATE_DICT, torch.tensor([True, False]))
    s.write_tensor(65535, "max_module_index", T.PARAM, torch.tensor([1.0], dtype=torch.float64))
    s.write_tensor(3, "from_numpy", T.BUFFER, np.arange(5, dtype=np.int32))
    s.write_tensor(1, "bf16", T.PARAM, torch.arange(3, dtype=torch.bfloat16))


def w_multi_call(mod, s):
    s.write_state_dict({"a": torch.arange(3.0), "b": torch.ones(2, 2, dtype=torch.int32)})
    s.write_tensor(2, "t", mod.TensorType.BUFFER, torch.tensor([9.0]))
    s.write_state_dict({"n": {"x": torch.arange(4, dtype=torch.int16)}, "c": torch.zeros(2)})
    s.write_state_dict({"e": torch.ones(1, dtype=torch.float16)})


def w_unicode(mod, s):
    s.write_state_dict({"naïve_café": torch.ones(1), "日本語/重み": torch.ones(2),
                        "emoji_😀": torch.ones(1), "tab\there": torch.ones(1),
                        'quote"and\\backslash': torch.ones(1)})
    s.write_state_dict({"nested": {'quote"d': torch.ones(1), "ünïcödé": torch.ones(1),
                                   "😀": [torch.ones(1)], "ctl\x01": torch.ones(1)}})


PLAIN_CASES = {
    "flat_all_dtypes": w_flat_all_dtypes,
    "nested": w_nested,
    "list_root": w_list_root,
    "module": w_module,
    "module_root": w_module_root,
    "meta": w_meta,
    "long_meta": w_long_meta,
    "write_tensor": w_write_tensor,
    "multi_call": w_multi_call,
    "unicode": w_unicode,
}

ENCRYPTED_CASES = {
    "flat_all_dtypes": w_flat_all_dtypes_no_empties,
    "nested": w_nested,
    "module": w_module,
    "meta": w_meta,
    "long_meta": w_long_meta,
}


def _enc_params(module, how):
    EP = module.EncryptionParams
    if how == "key":
        return EP(TEST_KEY), module.DecryptionParams.from_key(TEST_KEY)
    enc = EP.from_string(TEST_PASSPHRASE, opslimit=EP.OpsLimit.MIN, memlimit=EP.MemLimit.MIN)
    return enc, module.DecryptionParams.from_string(TEST_PASSPHRASE)


@pytest.fixture(scope="module")
def oracle_files(tmp_path_factory):
    """Each plain case written once by the real tensorizer, plus its read-back."""
    root = tmp_path_factory.mktemp("oracle_written")
    out = {}
    for name, writer in PLAIN_CASES.items():
        p = root / f"{name}.tensors"
        write_with(oracle, p, lambda s, w=writer: w(oracle, s))
        out[name] = (p, read_all(oracle, p))
    return out


@needs_two_impls
@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_tz_written_loads_in_tensorizer(tmp_path, oracle_files, case):
    ref_path, expected = oracle_files[case]
    p = tmp_path / "tz.tensors"
    write_with(tz, p, lambda s: PLAIN_CASES[case](tz, s))
    got = read_all(oracle, p)  # tensorizer, verify_hash=True
    assert_same_sequence(got, expected, case)
    with oracle.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d_or, \
         oracle.TensorDeserializer(str(ref_path), device="cpu", lazy_load=True) as d_ref:
        assert list(d_or.keys()) == list(d_ref.keys())
        assert d_or.total_tensor_bytes == d_ref.total_tensor_bytes
    if case == "long_meta":
        assert_long_entry(p)


@needs_two_impls
@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_tensorizer_written_loads_in_tz(oracle_files, case):
    ref_path, expected = oracle_files[case]
    got = read_all(tz, ref_path)
    assert_same_sequence(got, expected, case)


@needs_two_impls
@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_byte_identical_with_tensorizer_layout(tmp_path, oracle_files, case):
    ref_path, _ = oracle_files[case]
    p = tmp_path / "tz_layout.tensors"
    write_with(tz, p, lambda s: PLAIN_CASES[case](tz, s), layout="tensorizer")
    got, ref = p.read_bytes(), ref_path.read_bytes()
    if got != ref:
        first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
        pytest.fail(f"{case}: files differ (sizes {len(got)} vs {len(ref)}; first "
                    f"difference at byte {first})")


@needs_two_impls
@pytest.mark.parametrize("how", ["key", "passphrase"])
@pytest.mark.parametrize("case", list(ENCRYPTED_CASES))
def test_tz_encrypted_loads_in_tensorizer(tmp_path, case, how):
    writer = ENCRYPTED_CASES[case]
    plain = tmp_path / "plain.tensors"
    write_with(oracle, plain, lambda s: writer(oracle, s))
    expected = read_all(oracle, plain)

    enc, _ = _enc_params(tz, how)
    p = tmp_path / "tz_enc.tensors"
    write_with(tz, p, lambda s: writer(tz, s), encryption=enc)
    _, dec_or = _enc_params(oracle, how)
    got = read_all(oracle, p, dec=dec_or)
    assert_same_sequence(got, expected, f"{case}/{how}")
    if how == "key":  # from_key works for passphrase files too; keep it simple here
        got2 = read_all(oracle, p, dec=oracle.DecryptionParams.from_key(TEST_KEY))
        assert_same_sequence(got2, expected)
    else:
        got2 = read_all(oracle, p, dec=oracle.DecryptionParams.from_key(enc.key))
        assert_same_sequence(got2, expected)
    # wrong key is detected by tensorizer
    with pytest.raises(oracle.CryptographyError):
        read_all(oracle, p, dec=oracle.DecryptionParams.from_key(bytes(32)))
    if case == "long_meta" and how == "key":
        assert_long_entry(p, encrypted=True)


@needs_two_impls
@pytest.mark.parametrize("how", ["key", "passphrase"])
@pytest.mark.parametrize("case", ["flat_all_dtypes", "meta", "long_meta"])
def test_tensorizer_encrypted_loads_in_tz(tmp_path, case, how):
    writer = ENCRYPTED_CASES[case]
    plain = tmp_path / "plain.tensors"
    write_with(oracle, plain, lambda s: writer(oracle, s))
    expected = read_all(oracle, plain)
    enc, _ = _enc_params(oracle, how)
    p = tmp_path / "or_enc.tensors"
    write_with(oracle, p, lambda s: writer(oracle, s), encryption=enc)
    _, dec_tz = _enc_params(tz, how)
    assert_same_sequence(read_all(tz, p, dec=dec_tz), expected, f"{case}/{how}")
    with pytest.raises(tz.CryptographyError):
        read_all(tz, p, dec=tz.DecryptionParams.from_key(bytes(32)))


@needs_two_impls
def test_tz_written_module_load_into_module_by_tensorizer(tmp_path):
    src = module_with_buffers(seed=8)
    p = tmp_path / "m.tensors"
    write_with(tz, p, lambda s: s.write_module(src))
    dst = module_with_buffers(seed=9)
    with oracle.TensorDeserializer(str(p), device="cpu", verify_hash=True) as d:
        n = d.load_into_module(dst)
    assert n == len(list(src.parameters())) + len(list(src.buffers()))
    for (k, a), (k2, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        assert k == k2
        assert_same_tensor(b, a, k)
