"""gs:// and az:// through the Python API against real emulators on
127.0.0.1: gcp-storage-emulator (PyPI) and Azurite (npm), started by
remote_servers.gcs / remote_servers.azurite and configured the way users
configure them, through the environment (GOOGLE_BASE_URL, and
AZURE_STORAGE_USE_EMULATOR with AZURITE_BLOB_STORAGE_URL).

Reading: the tensorizer test vectors (written by the real tensorizer),
uploaded as they are, load through the store exactly as from the local
file. Writing: our TensorSerializer writes MiniLM to the store; our
TensorDeserializer reads it back through the store, and the real
tensorizer (whose open_stream has no gs:// or az://) reads the bytes we
download. Errors are typed: a missing object is FileNotFoundError.

The emulators are installed by tests/cloud-servers.sh (run-all.sh runs it
first); without them these tests skip, or fail under TZR_REQUIRE_SERVERS=1.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

import pytest
import torch

import remote_servers
import tzhelpers
from tzhelpers import tz

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer has no gs:// or az:// store"),
]

STORES = {"gs": remote_servers.gcs, "az": remote_servers.azurite}


@pytest.fixture(scope="module", params=sorted(STORES))
def store(request: pytest.FixtureRequest) -> Iterator[str]:
    """One emulator, with the environment pointing its scheme at it; yields
    the URI prefix (``gs://tzr/`` or ``az://tzr/``)."""
    scheme = request.param
    with STORES[scheme]() as env:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield f"{scheme}://tzr/"
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _put(uri: str, data: bytes) -> None:
    with tz.stream_io.open_stream(uri, "wb") as f:
        f.write(data)


def _get(uri: str) -> bytes:
    with tz.stream_io.open_stream(uri, "rb") as f:
        return bytes(f.read())


def _leaves(obj, prefix: tuple = ()) -> Iterator[tuple[tuple, torch.Tensor]]:
    """(path, tensor) leaves of nested mappings and sequences."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif hasattr(obj, "items"):
        for k, v in obj.items():
            yield from _leaves(v, prefix + (k,))
    else:
        for i, v in enumerate(obj):
            yield from _leaves(v, prefix + (i,))


def _same_contents(got, expected, what: str) -> None:
    got_leaves, expected_leaves = dict(_leaves(got)), dict(_leaves(expected))
    assert list(got_leaves) == list(expected_leaves), what
    for path, t in expected_leaves.items():
        tzhelpers.assert_same_tensor(got_leaves[path], t, f"{what} {path!r}")


VECTORS = tzhelpers.manifest_vectors(readable_only=True)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["file"] for v in VECTORS])
def test_vectors_load_through_the_store_as_from_the_file(store: str, vector) -> None:
    path = tzhelpers.VECTORS_DIR / vector["file"]
    data = path.read_bytes()
    uri = store + "vectors/" + vector["file"]
    _put(uri, data)
    assert _get(uri) == data
    kw = {"device": "cpu", "encryption": tzhelpers.decryption_params(tz, vector["encryption"])}
    with tz.TensorDeserializer(str(path), **kw) as local, tz.TensorDeserializer(uri, num_readers=4, **kw) as remote:
        _same_contents(remote, local, uri)
    # The same through a stream that open_stream opened.
    stream = tz.stream_io.open_stream(uri, "rb")
    with tz.TensorDeserializer(str(path), **kw) as local, tz.TensorDeserializer(stream, **kw) as remote:
        _same_contents(remote, local, uri)


@pytest.fixture(scope="module")
def minilm_state() -> dict[str, torch.Tensor]:
    safetensors = pytest.importorskip("safetensors.torch")
    files = sorted(tzhelpers.minilm_dir().glob("*.safetensors"))
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(safetensors.load_file(str(f)))
    return state


def test_minilm_written_to_the_store_reads_back_everywhere(store: str, minilm_state, tmp_path) -> None:
    uri = store + "models/minilm.tensors"
    s = tz.TensorSerializer(uri)
    s.write_state_dict(minilm_state)
    s.close()
    local = tmp_path / "minilm.tensors"
    s = tz.TensorSerializer(str(local))
    s.write_state_dict(minilm_state)
    s.close()
    data = _get(uri)
    assert data == local.read_bytes(), "the uploaded object differs from the same file written locally"
    with tz.TensorDeserializer(uri, device="cpu", num_readers=4, verify_hash=True) as d:
        _same_contents(d, minilm_state, uri)
    oracle = tzhelpers.import_oracle()
    with oracle.TensorDeserializer(io.BytesIO(data), device="cpu", verify_hash=True) as d:
        _same_contents(d, minilm_state, "the real tensorizer reading " + uri)


def test_stream_written_with_open_stream_and_lazy_load(store: str, tmp_path) -> None:
    state = tzhelpers.all_dtypes_state_dict(seed=3)
    uri = store + "models/dtypes.tensors"
    with tz.stream_io.open_stream(uri, "wb") as f:
        s = tz.TensorSerializer(f)
        s.write_state_dict(state)
        s.close()
    with tz.TensorDeserializer(uri, device="cpu", lazy_load=True) as d:
        for name, t in state.items():
            tzhelpers.assert_same_tensor(d[name], t, name)


def test_missing_object_is_file_not_found(store: str) -> None:
    uri = store + "no/such.tensors"
    with pytest.raises(FileNotFoundError) as e:
        tz.TensorDeserializer(uri)
    assert "no/such.tensors" in str(e.value) or "such.tensors" in str(e.value)
    with pytest.raises(FileNotFoundError):
        tz.stream_io.open_stream(uri, "rb")


def test_a_stream_left_by_an_exception_uploads_nothing(store: str) -> None:
    uri = store + "discarded.tensors"
    with pytest.raises(RuntimeError):
        with tz.stream_io.open_stream(uri, "wb") as f:
            f.write(b"partial")
            raise RuntimeError("writer failed")
    with pytest.raises(FileNotFoundError):
        tz.stream_io.open_stream(uri, "rb")


def test_a_replaced_object_reads_as_the_new_one(store: str) -> None:
    uri = store + "replaced.bin"
    _put(uri, b"first version")
    _put(uri, b"second, longer version")
    assert _get(uri) == b"second, longer version"


def test_the_safetensors_api_reads_through_the_store(store: str) -> None:
    st = pytest.importorskip("safetensors.torch")
    from tensorizer_rs.safetensors import safe_open
    from tensorizer_rs.safetensors.torch import load_file

    want = {"w": torch.arange(12.0).reshape(3, 4), "b": torch.ones(5, dtype=torch.bfloat16)}
    uri = store + "st/m.safetensors"
    _put(uri, st.save(want, metadata={"format": "pt"}))
    for backend in ("mmap", "pread"):
        got = load_file(uri, backend=backend)
        assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
    with safe_open(uri, "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert torch.equal(f.get_slice("w")[1:, 2:], want["w"][1:, 2:])
