"""Write streams never destroy data: an ``s3://`` write stream uploads only
on an explicit, successful ``close()`` (or a ``with`` block left normally);
one that is rejected, abandoned or garbage-collected uploads nothing and
leaves the object already under the key as it was. And the streams
``open_stream`` gives for writing work with ``TensorSerializer``."""

from __future__ import annotations

import gc

import pytest
import torch

import remote_servers
import tzhelpers

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer uploads abandoned streams when collected"),
]

GOOD = b"the good model, already uploaded" * 100


@pytest.fixture(scope="module")
def s3():
    with remote_servers.s3_bucket() as server:
        yield server


_creds = remote_servers.s3_credentials


def _put_good(client, key: str) -> None:
    client.put_object(Bucket="models", Key=key, Body=GOOD)


def _get(client, key: str) -> bytes:
    return client.get_object(Bucket="models", Key=key)["Body"].read()


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(9)
    return {"w": torch.randn(32, 16, generator=g), "b": torch.arange(7, dtype=torch.int32),
            "h": torch.randn(5, generator=g).half()}


def _check_loads(module, uri: str, endpoint: str, state) -> None:
    stream = module.stream_io.open_stream(uri, "rb", **_creds(endpoint))
    with module.TensorDeserializer(stream, device="cpu", verify_hash=True) as d:
        assert sorted(d.keys()) == sorted(state)
        for k, t in state.items():
            tzhelpers.assert_same_tensor(d[k], t, k)


@pytest.mark.parametrize("mode", ["wb", "wb+", "ab", "ab+"])
def test_abandoned_stream_uploads_nothing(tz, s3, mode):
    endpoint, client = s3
    key = f"abandoned-{mode}"
    _put_good(client, key)
    f = tz.stream_io.open_stream(f"s3://models/{key}", mode, **_creds(endpoint))
    f.write(b"partial")
    del f
    gc.collect()
    assert _get(client, key) == GOOD
    # Opened and dropped without writing anything: no 0-byte object either.
    tz.stream_io.open_stream(f"s3://models/{key}", mode, **_creds(endpoint))
    gc.collect()
    assert _get(client, key) == GOOD


def test_rejected_stream_uploads_nothing(tz, s3, tmp_path):
    endpoint, client = s3
    _put_good(client, "rejected")
    with pytest.raises(ValueError):
        tz.TensorSerializer(tz.stream_io.open_stream("s3://models/rejected", "wb", **_creds(endpoint)),
                            limit_cpu_concurrency=0)
    gc.collect()
    assert _get(client, "rejected") == GOOD


def test_abandoned_serializer_uploads_nothing(tz, s3):
    endpoint, client = s3
    for key, target in (
        ("ser-uri", "s3://models/ser-uri"),
        ("ser-stream", tz.stream_io.open_stream("s3://models/ser-stream", "wb", **_creds(endpoint))),
    ):
        _put_good(client, key)
        s = tz.TensorSerializer(target)
        s.write_state_dict({"w": torch.ones(4)})
        del s, target
        gc.collect()
        assert _get(client, key) == GOOD, key


@pytest.mark.parametrize("mode", ["wb", "wb+"])
def test_serializer_over_write_stream_round_trips(tz, oracle, s3, mode):
    endpoint, client = s3
    key = f"ser-{mode}"
    _put_good(client, key)
    state = _state()
    with tz.stream_io.open_stream(f"s3://models/{key}", mode, **_creds(endpoint)) as f:
        assert f.readable() and f.writable()
        s = tz.TensorSerializer(f)
        s.write_state_dict(state)
        s.close()
        assert f.closed  # TensorSerializer.close() closes the stream it was given
    assert _get(client, key) != GOOD
    _check_loads(tz, f"s3://models/{key}", endpoint, state)
    _check_loads(oracle, f"s3://models/{key}", endpoint, state)


def test_serializer_closed_without_with_uploads(tz, oracle, s3):
    endpoint, client = s3
    _put_good(client, "no-with")
    state = _state()
    f = tz.stream_io.open_stream("s3://models/no-with", "wb", **_creds(endpoint))
    s = tz.TensorSerializer(f)
    s.write_state_dict(state)
    s.close()
    del s, f
    gc.collect()
    _check_loads(tz, "s3://models/no-with", endpoint, state)
    _check_loads(oracle, "s3://models/no-with", endpoint, state)


def test_read_write_stream_uploads_on_close(tz, s3):
    endpoint, client = s3
    f = tz.stream_io.open_stream("s3://models/rw", "wb+", **_creds(endpoint))
    f.write(b"hello world")
    f.seek(6)
    assert f.read() == b"world"
    f.close()
    assert _get(client, "rw") == b"hello world"
    with tz.stream_io.open_stream("s3://models/rw2", "wb", **_creds(endpoint)) as g:
        g.write(b"abc")
    assert _get(client, "rw2") == b"abc"
