"""What a newcomer reads: every constructor argument documented, a warning
when ``mmap=True`` copies, files of other formats named as such, errors
stated once with their attributes filled."""

from __future__ import annotations

import inspect
import re
import warnings

import pytest
import torch
from safetensors.torch import save_file

import tensorizer_rs
from tensorizer_rs import _native
from tensorizer_rs.serialization import (
    CryptographyError,
    DecryptionParams,
    EncryptionParams,
    HashMismatchError,
    TensorDeserializer,
    TensorSerializer,
)


def write(path, tensors, **kwargs):
    with TensorSerializer(str(path), **kwargs) as s:
        s.write_state_dict(tensors)


def args_block(cls) -> str:
    doc = inspect.getdoc(cls) or ""
    match = re.search(r"^Args:\n((?:    .*\n|\n)+)", doc + "\n", re.MULTILINE)
    assert match, f"{cls.__name__} has no Args: block"
    return match.group(1)


@pytest.mark.parametrize("cls", [TensorDeserializer, TensorSerializer])
def test_every_constructor_argument_is_documented(cls):
    block = args_block(cls)
    documented = set(re.findall(r"^    (\w+):", block, re.MULTILINE))
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    assert set(params) <= documented, sorted(set(params) - documented)
    assert "§" not in (inspect.getdoc(cls) or "")


def test_mmap_true_warns_once_why_it_copies(tmp_path):
    path = tmp_path / "m.tensors"
    write(path, {f"t{i}": torch.arange(64, dtype=torch.float32) + i for i in range(4)})
    with pytest.warns(tensorizer_rs.MmapFallbackWarning, match="verify_hash") as caught:
        with TensorDeserializer(str(path), device="cpu", mmap=True, verify_hash=True, lazy_load=True) as d:
            for k in d.keys():
                d[k]
    assert len([w for w in caught if w.category is tensorizer_rs.MmapFallbackWarning]) == 1
    assert issubclass(tensorizer_rs.MmapFallbackWarning, UserWarning)


def test_mmap_true_names_unaligned_tensorizer_layout_offsets(tmp_path):
    path = tmp_path / "m.tensors"
    # Offsets that depend on the names: these four are not multiples of 4.
    tensors = {name: torch.arange(64, dtype=torch.float32) for name in ("b", "bb", "bbb", "bbbb")}
    write(path, tensors, layout="tensorizer")
    with pytest.warns(tensorizer_rs.MmapFallbackWarning, match="4 of 4 tensors .* not aligned"):
        TensorDeserializer(str(path), device="cpu", mmap=True)


def test_mmap_auto_and_mappable_files_stay_silent(tmp_path):
    path = tmp_path / "m.tensors"
    write(path, {"a": torch.arange(3, dtype=torch.uint8), "b": torch.arange(64, dtype=torch.float32)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TensorDeserializer(str(path), device="cpu", mmap="auto", verify_hash=True)
        TensorDeserializer(str(path), device="cpu", mmap=True)


def test_a_safetensors_file_loads_through_the_same_reader(tmp_path):
    # One load path: the reader takes safetensors files too (spec §26).
    path = tmp_path / "x.safetensors"
    save_file({"w": torch.arange(4.0), "b": torch.ones(2, dtype=torch.bfloat16)}, str(path))
    with TensorDeserializer(str(path), device="cpu", filter_func=lambda n: n == "w") as d:
        assert list(d) == ["w"] and torch.equal(d["w"], torch.arange(4.0))
        assert d._file_header.version_number is None


def test_a_sharded_folder_or_index_names_the_call_that_loads_it(tmp_path):
    save_file({"a": torch.ones(3)}, str(tmp_path / "model-00001-of-00001.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"metadata": {}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}')
    for where in (tmp_path, index):
        with pytest.raises(_native.FormatError) as caught:
            tensorizer_rs.TensorDeserializer(str(where))
        message = str(caught.value)
        assert "\n" not in message
        assert f"tensorizer_rs.load_state_dict({str(where)!r})" in message.replace('"', "'")
        assert dict(tensorizer_rs.load_state_dict(str(where)))["a"].tolist() == [1.0, 1.0, 1.0]


def test_a_legacy_torch_save_file_is_named(tmp_path):
    # A zip checkpoint loads (test_torch_through_the_reader.py); the pre-zip
    # layout is named, with the call that reads it.
    path = tmp_path / "x.pt"
    torch.save({"w": torch.zeros(4)}, str(path), _use_new_zipfile_serialization=False)
    with pytest.raises(_native.FormatError, match=r"is a legacy \(pre-zip\) torch.save checkpoint, not a tensorizer file"):
        TensorDeserializer(str(path))


def test_unknown_bytes_name_the_three_formats(tmp_path):
    path = tmp_path / "random.bin"
    path.write_bytes(bytes(range(256)) * 4)
    for call in (lambda: tensorizer_rs.convert(str(path), str(tmp_path / "o.tensors")),
                 lambda: tensorizer_rs.fingerprint(str(path))):
        with pytest.raises(_native.FormatError, match="not a tensorizer, safetensors or torch.save file"):
            call()


def test_safetensors_errors_fill_location_and_offset(tmp_path):
    path = tmp_path / "bad.safetensors"
    save_file({"w": torch.zeros(64)}, str(path))
    path.write_bytes(path.read_bytes()[:-16])  # data shorter than the header says
    with pytest.raises(_native.FormatError) as err:
        tensorizer_rs.convert(str(path), str(tmp_path / "o.tensors"))
    assert isinstance(err.value, ValueError)
    assert err.value.location == str(path)
    assert isinstance(err.value.offset, int), str(err.value)


def test_a_missing_file_says_so_without_a_byte_offset(tmp_path):
    path = tmp_path / "missing.tensors"
    with pytest.raises(FileNotFoundError) as err:
        tensorizer_rs.fingerprint(str(path))
    assert str(err.value) == f"{path}: No such file or directory"
    assert err.value.offset is None


def test_a_hash_mismatch_names_the_tensor_once(tmp_path):
    path = tmp_path / "m.tensors"
    write(path, {"a": torch.zeros(16), "b": torch.arange(256, dtype=torch.float32)})
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # inside b's data, the last tensor
    path.write_bytes(bytes(data))
    with pytest.raises(HashMismatchError) as err:
        TensorDeserializer(str(path), device="cpu", verify_hash=True)
    assert str(err.value).count('"b"') == 1, str(err.value)


def encrypted(tmp_path, n=8):
    path = tmp_path / "enc.tensors"
    enc = EncryptionParams.random()
    write(path, {f"t{i}": torch.arange(256, dtype=torch.float32) + i for i in range(n)}, encryption=enc)
    return path, enc


def test_a_wrong_key_is_reported_once(tmp_path):
    path, _ = encrypted(tmp_path)
    wrong = DecryptionParams.from_key(bytes(32))
    with pytest.raises(CryptographyError) as err:
        TensorDeserializer(str(path), device="cpu", encryption=wrong)
    assert "no tensor decrypts: wrong key or passphrase" in str(err.value)
    assert err.value.tensor is None and err.value.location == str(path)


def test_one_damaged_encrypted_tensor_is_not_a_wrong_key(tmp_path):
    path, enc = encrypted(tmp_path)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # inside the last tensor's ciphertext
    path.write_bytes(bytes(data))
    with pytest.raises(CryptographyError) as err:
        TensorDeserializer(str(path), device="cpu", encryption=DecryptionParams.from_key(enc.key))
    assert "wrong key or passphrase" not in str(err.value)
    assert err.value.tensor == "t7"
