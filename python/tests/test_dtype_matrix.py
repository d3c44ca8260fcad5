"""Every dtype round-trips byte for byte across the three formats: tensorizer,
safetensors and ``torch.save`` zip checkpoints, through ``tensorizer_rs.convert``
in each direction it offers, and from the real tensorizer and the real
safetensors writer. A format that cannot hold a dtype is an error naming the
dtype and the tensor, never a cast (spec §6.7 holds the table)."""

from __future__ import annotations

import json
import pathlib
import struct
import zlib

import pytest
import torch

import tensorizer_rs
from tensorizer_rs import TensorDeserializer, TensorSerializer
from tzhelpers import import_oracle

#: torch name -> safetensors name (None: safetensors cannot hold it).
MATRIX = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "uint16": "U16",
    "int16": "I16",
    "uint32": "U32",
    "int32": "I32",
    "uint64": "U64",
    "int64": "I64",
    "float16": "F16",
    "bfloat16": "BF16",
    "float32": "F32",
    "float64": "F64",
    "complex32": None,
    "complex64": "C64",
    "complex128": None,
    "float8_e5m2": "F8_E5M2",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e8m0fnu": "F8_E8M0",
    "float4_e2m1fn_x2": "F4",
}

DTYPES = [n for n in MATRIX if isinstance(getattr(torch, n, None), torch.dtype)]


def _sample(dtype: torch.dtype, shape: tuple[int, ...] = (3, 5)) -> torch.Tensor:
    """Every byte pattern the dtype allows, NaNs and all (bool: 0 and 1)."""
    g = torch.Generator().manual_seed(zlib.crc32(str(dtype).encode()))
    size = torch.empty((), dtype=dtype).element_size()
    n = size * int(torch.tensor(shape).prod())
    high = 2 if dtype == torch.bool else 256
    raw = torch.randint(0, high, (n,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy())


def _state(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {"x": _sample(dtype), "y.z": _sample(dtype, (7,))}


def _read_tensorizer(path: pathlib.Path) -> dict[str, torch.Tensor]:
    with TensorDeserializer(str(path), device="cpu", verify_hash=True) as d:
        return {k: d[k] for k in d.keys()}


def _read_safetensors(path: pathlib.Path) -> dict[str, tuple[str, list[int], bytes]]:
    """(dtype name, header shape, bytes) per tensor, read without any
    library (safetensors' own loader lacks some of these dtypes)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n :]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in header.items()}


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and tuple(got[k].shape) == tuple(v.shape), k
        assert _bytes(got[k]) == _bytes(v), k


def _packed(shape: tuple[int, ...], name: str) -> list[int]:
    """The shape safetensors records: F4 counts the two values per byte."""
    return [*shape[:-1], shape[-1] * 2] if name == "F4" else list(shape)


@pytest.mark.parametrize("name", DTYPES)
def test_tensorizer_to_safetensors_and_back(tmp_path: pathlib.Path, name: str) -> None:
    dtype = getattr(torch, name)
    state = _state(dtype)
    with TensorSerializer(str(tmp_path / "a.tensors")) as s:
        s.write_state_dict(state)
    st_name = MATRIX[name]
    if st_name is None:
        with pytest.raises(ValueError, match=rf'tensor "(x|y\.z)": safetensors has no dtype for {name}\b'):
            tensorizer_rs.convert(tmp_path / "a.tensors", tmp_path / "a.safetensors")
        assert not (tmp_path / "a.safetensors").exists()
        return
    tensorizer_rs.convert(tmp_path / "a.tensors", tmp_path / "a.safetensors")
    st = _read_safetensors(tmp_path / "a.safetensors")
    for k, v in state.items():
        assert st[k] == (st_name, _packed(tuple(v.shape), st_name), _bytes(v)), k
    tensorizer_rs.convert(tmp_path / "a.safetensors", tmp_path / "b.tensors")
    _same(_read_tensorizer(tmp_path / "b.tensors"), state)


@pytest.mark.parametrize("name", DTYPES)
def test_torch_checkpoint_to_both_and_back(tmp_path: pathlib.Path, name: str) -> None:
    dtype = getattr(torch, name)
    state = _state(dtype)
    torch.save(state, tmp_path / "a.pt")
    tensorizer_rs.convert(tmp_path / "a.pt", tmp_path / "a.tensors")
    loaded = _read_tensorizer(tmp_path / "a.tensors")
    _same(loaded, state)
    st_name = MATRIX[name]
    if st_name is None:
        with pytest.raises(ValueError, match=rf"safetensors has no dtype for {name}\b"):
            tensorizer_rs.convert(tmp_path / "a.pt", tmp_path / "a.safetensors")
    else:
        tensorizer_rs.convert(tmp_path / "a.pt", tmp_path / "a.safetensors")
        st = _read_safetensors(tmp_path / "a.safetensors")
        assert {k: v[2] for k, v in st.items()} == {k: _bytes(v) for k, v in state.items()}
    # Back to a torch checkpoint (our converters read checkpoints but do
    # not write them: torch.save of what we loaded), and through us again.
    torch.save({k: v.detach() for k, v in loaded.items()}, tmp_path / "b.pt")
    _same(torch.load(tmp_path / "b.pt", weights_only=True), state)
    tensorizer_rs.convert(tmp_path / "b.pt", tmp_path / "b.tensors")
    _same(_read_tensorizer(tmp_path / "b.tensors"), state)


@pytest.mark.parametrize("name", [n for n in DTYPES if MATRIX[n] is not None])
def test_safetensors_writer_to_tensorizer(tmp_path: pathlib.Path, name: str) -> None:
    st = pytest.importorskip("safetensors.torch")
    dtype = getattr(torch, name)
    state = _state(dtype)
    try:
        st.save_file(state, str(tmp_path / "a.safetensors"))
    except (KeyError, ValueError, TypeError):
        pytest.skip(f"safetensors {st.__name__} cannot write {name}")
    tensorizer_rs.convert(tmp_path / "a.safetensors", tmp_path / "a.tensors")
    _same(_read_tensorizer(tmp_path / "a.tensors"), state)
    # And what we write, safetensors reads, where its loader knows the dtype.
    tensorizer_rs.convert(tmp_path / "a.tensors", tmp_path / "b.safetensors")
    assert _read_safetensors(tmp_path / "b.safetensors") == _read_safetensors(tmp_path / "a.safetensors")


@pytest.mark.parametrize("name", DTYPES)
def test_real_tensorizer_writes_we_read(tmp_path: pathlib.Path, name: str) -> None:
    tensorizer = import_oracle()
    dtype = getattr(torch, name)
    state = _state(dtype)
    try:
        s = tensorizer.TensorSerializer(str(tmp_path / "a.tensors"))
        s.write_state_dict(state)
        s.close()
    except Exception as e:  # noqa: BLE001 - whatever tensorizer refuses, it refuses
        pytest.skip(f"tensorizer 2.12.1 cannot write {name}: {type(e).__name__}: {e}")
    _same(_read_tensorizer(tmp_path / "a.tensors"), state)
    # And tensorizer reads what we write, byte-identical.
    with TensorSerializer(str(tmp_path / "b.tensors"), layout="tensorizer") as ours:
        ours.write_state_dict(state)
    assert (tmp_path / "b.tensors").read_bytes() == (tmp_path / "a.tensors").read_bytes()


def test_what_a_format_cannot_hold_is_refused_by_name(tmp_path: pathlib.Path) -> None:
    if "float4_e2m1fn_x2" not in DTYPES:
        pytest.skip("this torch has no float4_e2m1fn_x2")
    header = json.dumps({"w": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}}).encode()
    header += b" " * (-len(header) % 8)
    (tmp_path / "odd.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(3))
    with pytest.raises(ValueError, match=r'tensor "w": dtype F4 with shape \[2, 3\] does not pack'):
        tensorizer_rs.convert(tmp_path / "odd.safetensors", tmp_path / "odd.tensors")
    header = json.dumps({"w": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]}}).encode()
    header += b" " * (-len(header) % 8)
    (tmp_path / "f6.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(3))
    with pytest.raises(ValueError, match=r'tensor "w": dtype "F6_E2M3" has no tensorizer equivalent'):
        tensorizer_rs.convert(tmp_path / "f6.safetensors", tmp_path / "f6.tensors")
    with TensorSerializer(str(tmp_path / "s.tensors")) as s:
        s.write_state_dict({"s": torch.zeros((), dtype=torch.uint8).view(torch.float4_e2m1fn_x2)})
    with pytest.raises(ValueError, match=r'tensor "s": safetensors cannot store a 0-dimensional float4_e2m1fn_x2'):
        tensorizer_rs.convert(tmp_path / "s.tensors", tmp_path / "s.safetensors")
