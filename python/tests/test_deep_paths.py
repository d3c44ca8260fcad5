"""Deep structured tensor paths: every walk over them is iterative.

Paths may have up to 1024 components; every access path (indexing down,
``tree``, iteration, ``read_tensors``, writing and reading a nested state
dict) works at that depth under Python's default recursion limit, and a
file whose name has tens of thousands of components is refused with a
ValueError (never a RecursionError or a crash), even on a small thread
stack.
"""

from __future__ import annotations

import sys

import pytest
import torch

from tzhelpers import TZ_NAME, child_result, raw_bytes, raw_tensors_file, run_child, structured_name, tz

pytestmark = pytest.mark.skipif(TZ_NAME != "tensorizer_rs", reason="path depth limits are tensorizer_rs's")

DEPTH = 1024


@pytest.fixture
def default_recursion_limit():
    """Python's default limit (1000) for the duration of the test."""
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(saved)


def chain(depth: int, leaf):
    """``[[...[leaf]...]]``: ``leaf`` at path ``(0,) * depth``."""
    node = leaf
    for _ in range(depth):
        node = [node]
    return node


def deep_state_dict():
    """A top-level list with two tensors at depth DEPTH (paths ``(0,)*1023 +
    (0,)`` and ``(0,)*1023 + (1,)``) and one shallow one at ``(1, "s")``."""
    a, b, s = torch.arange(6.0).reshape(2, 3), torch.tensor([7, 8], dtype=torch.int16), torch.ones(2)
    innermost = [a, b]
    return [chain(DEPTH - 2, innermost), {"s": s}], {(0,) * (DEPTH - 1) + (0,): a, (0,) * (DEPTH - 1) + (1,): b, (1, "s"): s}


def down(node, path):
    for part in path:
        node = node[part]
    return node


@pytest.fixture(params=["written", "crafted"])
def deep_file(request, tmp_path, default_recursion_limit):
    """The deep state dict written by TensorSerializer, or the same tensors
    in a file crafted byte by byte (so that reading is tested apart from
    writing)."""
    sd, leaves = deep_state_dict()
    p = tmp_path / "deep.tensors"
    if request.param == "written":
        with tz.TensorSerializer(str(p)) as s:
            s.write_state_dict(sd)
    else:
        dtypes = {torch.float32: "<f4", torch.int16: "<i2"}
        p.write_bytes(raw_tensors_file([
            (structured_name(path), dtypes[t.dtype], tuple(t.shape), raw_bytes(t)) for path, t in leaves.items()
        ]))
    return p, leaves


def test_write_and_index_down_at_depth_1024(deep_file):
    p, leaves = deep_file
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        assert list(d) == [0, 1]
        for path, t in leaves.items():
            assert len(path) <= DEPTH
            assert torch.equal(down(d, path), t), path
        node = d
        for _ in range(DEPTH - 1):
            node = node[0]
            assert set(node.keys()) <= {0, 1}
        assert torch.equal(node[1], leaves[(0,) * (DEPTH - 1) + (1,)])


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_tree_at_depth_1024(deep_file, lazy):
    p, leaves = deep_file
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=lazy) as d:
        whole = d.tree()
        assert isinstance(whole, list) and len(whole) == 2
        for path, t in leaves.items():
            assert torch.equal(down(whole, path), t), path
        sub = d.tree((0,) * 1000)
        assert torch.equal(down(sub, (0,) * (DEPTH - 1001) + (1,)), leaves[(0,) * (DEPTH - 1) + (1,)])
        assert torch.equal(d.tree((0,) * DEPTH), leaves[(0,) * DEPTH])
        assert d.tree((0,) * (DEPTH + 1), default="none") == "none"
        only_b = d.tree(filter_func=lambda name: name[-1] == 1)
        assert len(only_b) == 1
        assert torch.equal(down(only_b, (0,) * (DEPTH - 1) + (0,)), leaves[(0,) * (DEPTH - 1) + (1,)])


def test_iteration_and_read_tensors_at_depth_1024(deep_file):
    p, leaves = deep_file
    with tz.TensorDeserializer(str(p), device="cpu") as d:
        values = list(d.values())
        assert len(values) == 2 and len(list(d.items())) == 2
    with tz.TensorDeserializer(str(p), device="cpu", lazy_load=True) as d:
        got = {name: t for _, _, name, t in d.read_tensors()}
    assert list(got) == list(leaves)
    for path, t in leaves.items():
        assert torch.equal(got[path], t)


def test_deeper_than_1024_or_cyclic_state_dicts_are_refused(tmp_path, default_recursion_limit):
    with pytest.raises(ValueError, match="path depth"):
        with tz.TensorSerializer(str(tmp_path / "too_deep.tensors")) as s:
            s.write_state_dict(chain(DEPTH + 1, torch.ones(1)))
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="path depth"):
        with tz.TensorSerializer(str(tmp_path / "cyclic.tensors")) as s:
            s.write_state_dict({"loop": cyclic})
    assert not (tmp_path / "too_deep.tensors").exists()


_HUGE_DEPTH_CHILD = r"""
import threading
import torch
import importlib
tz = importlib.import_module(os.environ["TZ_UNDER_TEST"])
limit_address_space(2 << 30)
threading.stack_size(1 << 20)
result = {}

def work():
    try:
        with tz.TensorDeserializer(sys.argv[1], device="cpu") as d:
            d.tree()
            node = d
            while not isinstance(node, torch.Tensor):
                node = node[0]
        result["loaded"] = True
    except ValueError as e:
        result["error"] = type(e).__name__ + ": " + str(e)[:300]
    except BaseException as e:
        result["other"] = type(e).__name__ + ": " + str(e)[:300]

t = threading.Thread(target=work)
t.start()
t.join()
print(json.dumps(result), flush=True)
"""


def test_name_with_32000_components_is_refused_on_a_small_stack(tmp_path):
    """A file whose one tensor name has 32,000 components (64 KB of
    ``[0,0,...]``), loaded on a 1 MiB thread stack in a child process: a
    ValueError about the path depth, no RecursionError, no crash."""
    name = structured_name((0,) * 32000)
    assert len(name) <= 0xFFFF
    p = tmp_path / "huge_depth.tensors"
    p.write_bytes(raw_tensors_file([(name, "<f4", (1,), b"\x00\x00\x80\x3f")]))
    result = child_result(run_child(_HUGE_DEPTH_CHILD, p, timeout=120))
    assert "error" in result, result
    assert "path depth" in result["error"], result
