"""``tensorizer_rs.zipslicer.load(..., mmap=True)``: views of a private
memory map, like ``torch.load(mmap=True)``: same values, strides and storage
sharing; copies where a view cannot be made; writes stay private."""

from __future__ import annotations

import pathlib

import pytest
import torch

from tensorizer_rs import zipslicer
from test_zipslicer import VECTORS, _bytes_of, _hand_built


def _leaves(obj, path=()):
    if isinstance(obj, dict) or hasattr(obj, "keys"):
        for k in obj.keys():
            yield from _leaves(obj[k], (*path, k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*path, i))
    else:
        yield path, obj


def _check_like_torch_mmap(path: pathlib.Path, expect_views: bool) -> dict:
    ref = dict(_leaves(torch.load(path, weights_only=True, mmap=True)))
    got = dict(_leaves(zipslicer.load(str(path), mmap=True)))
    assert list(got) == list(ref)
    for k, want in ref.items():
        have = got[k]
        if not isinstance(want, torch.Tensor):
            assert have == want, k
            continue
        assert have.dtype == want.dtype and have.shape == want.shape, k
        assert _bytes_of(have) == _bytes_of(want), k
        if expect_views and want.numel():
            assert have.stride() == want.stride(), k
            assert have.storage_offset() == want.storage_offset(), k
    return got


@pytest.mark.parametrize("name", ["dtypes.pt", "nested.pt", "views.pt", "module.pt", "params.pt"])
def test_committed_vectors(name):
    _check_like_torch_mmap(VECTORS / name, expect_views=True)


def test_big_endian_falls_back_to_copies():
    got = _check_like_torch_mmap(VECTORS / "big_endian.pt", expect_views=False)
    assert all(t.is_contiguous() for t in got.values() if isinstance(t, torch.Tensor))


def test_views_share_storages_and_writes_stay_private(tmp_path):
    path = tmp_path / "hand.pt"
    torch.save(_hand_built(), path)
    before = path.read_bytes()
    got = _check_like_torch_mmap(path, expect_views=True)
    tied_a, tied_b, tied_slice = got[("tied_a",)], got[("tied_b",)], got[("tied_slice",)]
    assert tied_a.data_ptr() == tied_b.data_ptr()
    assert got[("transposed",)].untyped_storage().data_ptr() == got[("base",)].untyped_storage().data_ptr()
    tied_a[5] = -1
    assert tied_b[5] == -1 and tied_slice[0] == -1  # one storage, as torch.load gives
    assert path.read_bytes() == before  # copy-on-write: the file is untouched


def test_remote_and_missing_files_ignore_mmap(tmp_path):
    with pytest.raises(Exception):
        zipslicer.load(str(tmp_path / "missing.pt"), mmap=True)
