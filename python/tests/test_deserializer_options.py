"""``TensorDeserializer``'s reader options are decided once, natively.

Every option goes to one ``_native.DeserializerOptions`` built from the
constructor's arguments (spec §11.5): it refuses bad values before the file
is opened, with the class tensorizer raises, and it is the only copy the
deserializer, its mixins and the native reader ask.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensorizer_rs as tz
from tensorizer_rs import _native


@pytest.fixture
def small_file(tmp_path):
    path = tmp_path / "small.tensors"
    with tz.TensorSerializer(str(path)) as s:
        s.write_state_dict({"a": torch.arange(4, dtype=torch.float32), "b": torch.ones(2, dtype=torch.float16)})
    return path


def test_the_deserializer_holds_one_options_object(small_file):
    keep = lambda name: name == "a"  # noqa: E731
    with tz.TensorDeserializer(
        str(small_file), device="cpu", filter_func=keep, verify_hash=np.True_, num_readers=True, lazy_load=1,
        mmap="auto", meta_tensors="expand", max_meta_bytes=None,
    ) as d:
        o = d._options
        assert isinstance(o, _native.DeserializerOptions)
        assert (o.verify_hash, o.num_readers, o.lazy_load, o.mmap, o.meta_tensors, o.max_meta_bytes) == (
            True, 1, True, "auto", "expand", None,
        )
        assert o.filter_func is keep and o.device == "cpu" and o.dtype is None and not o.decrypts
        assert list(d.keys()) == ["a"]
        assert not any(hasattr(d, n) for n in ("_verify_hash", "_meta_mode", "_max_meta_bytes", "_dtype", "_lazy"))
        assert "verify_hash=True" in repr(o)


def test_a_calls_verify_hash_is_its_truth_or_the_constructors(small_file):
    with tz.TensorDeserializer(str(small_file), device="cpu", lazy_load=True) as d:
        o = d._options
        assert (o.verify(None), o.verify(np.True_), o.verify(0), o.verify("yes")) == (False, True, False, True)
        assert torch.equal(d["a"], torch.arange(4, dtype=torch.float32))


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"num_readers": 0}, ValueError, "at least 1"),
        ({"num_readers": "2"}, TypeError, "not str"),
        ({"num_readers": 2.0}, TypeError, "not float"),
        ({"mmap": "yes"}, ValueError, '"auto"'),
        ({"meta_tensors": None}, ValueError, "'zeros', 'expand', 'meta'"),
        ({"max_meta_bytes": -1}, ValueError, "non-negative"),
        ({"max_meta_bytes": 1.5}, ValueError, "non-negative"),
        ({"dtype": "float16"}, TypeError, "torch.dtype"),
        ({"filter_func": 3}, TypeError, "callable"),
        ({"encryption": "key"}, TypeError, "DecryptionParams"),
    ],
)
def test_bad_values_are_refused_before_the_file_is_opened(tmp_path, kwargs, error, says):
    missing = tmp_path / "does-not-exist.tensors"
    with pytest.raises(error) as info:
        tz.TensorDeserializer(str(missing), **kwargs)
    assert says in str(info.value)


def test_lazy_load_with_a_process_group_is_refused_first():
    with pytest.raises(ValueError, match="lazy_load"):
        tz.TensorDeserializer("does-not-matter.tensors", lazy_load=True, process_group=object())


def test_huge_counts_are_accepted(small_file):
    with tz.TensorDeserializer(str(small_file), device="cpu", num_readers=1 << 70, max_meta_bytes=1 << 70) as d:
        assert d._options.max_meta_bytes == (1 << 64) - 1
        assert torch.equal(d["b"], torch.ones(2, dtype=torch.float16))


def test_the_native_reader_takes_its_settings_from_the_options(small_file):
    o = _native.DeserializerOptions(
        device=None, filter_func=None, dtype=None, lazy_load=False, plaid_mode=None, plaid_mode_buffers=None,
        num_readers=3, verify_hash=True, encryption=None, mmap=False, meta_tensors="zeros", max_meta_bytes=None,
    )
    reader = _native.NativeReader(str(small_file), o)
    assert reader.size() == small_file.stat().st_size
    # Defaults without options, as a bare reader.
    assert _native.NativeReader(str(small_file)).size() == reader.size()
