"""Big-endian tensors (spec §15.4): numpy reads see the right values, torch
loads refuse clearly instead of reinterpreting the bytes."""

from __future__ import annotations

import numpy as np
import pytest

from tzhelpers import IS_ORACLE, raw_tensors_file, tz

# tensorizer itself fails on both with numpy's/torch's own messages.
pytestmark = pytest.mark.skipif(IS_ORACLE, reason="tensorizer_rs's own byte-order handling")


@pytest.fixture
def big_endian_file(tmp_path):
    values = np.array([1.5, -2.25, 1e-3], dtype=">f4")
    path = tmp_path / "be.tensors"
    path.write_bytes(raw_tensors_file([(b"be", ">f4", (3,), values.tobytes())]))
    return path, values


def test_numpy_reads_big_endian_values(big_endian_file):
    path, values = big_endian_file
    with tz.TensorDeserializer(str(path), device="cpu", lazy_load=True, verify_hash=True) as d:
        [(_, _, name, array, opaque, _)] = list(d.read_numpy_arrays())
    assert name == "be" and not opaque
    np.testing.assert_array_equal(array, values)


def test_torch_loads_refuse_big_endian_with_the_reason(big_endian_file):
    path, _ = big_endian_file
    with pytest.raises(ValueError, match="big-endian.*read_numpy_arrays.*tzr convert"):
        tz.TensorDeserializer(str(path), device="cpu")
