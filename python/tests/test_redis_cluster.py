"""``redis+cluster://`` against a three-master Redis Cluster on 127.0.0.1
(started by tests/redis-cluster.sh): a small model's state dict stored in
the cluster (by the native writer behind ``tzr copy``, and key by key by
``to_redis`` through redis-py's cluster client) loads back bit-identical,
and its keys are spread over the masters (spec §12.5)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
import torch

import remote_servers
import tzhelpers

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer has no Redis Cluster reader"),
]

_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "redis-cluster.sh")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[list[int]]:
    """Three cluster masters; yields their ports."""
    remote_servers._binary("redis-server", ["/usr/bin/redis-server"])
    remote_servers._binary("redis-cli", ["/usr/bin/redis-cli"])
    d = str(tmp_path_factory.mktemp("redis-cluster"))
    out = subprocess.run([_SCRIPT, "start", d], capture_output=True, text=True)
    try:
        assert out.returncode == 0, out.stderr
        yield [int(p) for p in out.stdout.split()]
    finally:
        subprocess.run([_SCRIPT, "stop", d], capture_output=True)


def _model() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    config = transformers.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, vocab_size=1000, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def _check(tz, uri: str, state: dict[str, torch.Tensor]) -> None:
    with tz.TensorDeserializer(uri, device="cpu", verify_hash=True) as d:
        assert sorted(d.keys()) == sorted(state)
        for name, t in state.items():
            tzhelpers.assert_same_tensor(d[name], t, name)


def test_a_model_round_trips_through_the_cluster(tz, cluster, tmp_path):
    from redis.cluster import ClusterNode, RedisCluster

    model = _model()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    path = tmp_path / "bert.tensors"
    s = tz.TensorSerializer(str(path))
    s.write_state_dict(state)
    s.close()
    seed = f"redis+cluster://127.0.0.1:{cluster[1]}"

    # The native writer (what `tzr copy FILE redis+cluster://…` runs).
    tz._native.upload(str(path), f"{seed}/bert", overwrite=False)
    _check(tz, f"{seed}/bert", state)
    # The stream reads the stored bytes: the file without its end marker.
    with tz.stream_io.open_stream(f"{seed}/bert") as f:
        assert f.read() == path.read_bytes()[:-8]

    # Loaded into a fresh model, the same outputs.
    fresh = _model()
    for p in fresh.parameters():
        torch.nn.init.zeros_(p)
    with tz.TensorDeserializer(f"{seed}/bert", device="cpu") as d:
        fresh.load_state_dict(dict(d))
    ids = torch.arange(12).reshape(2, 6)
    with torch.no_grad():
        assert torch.equal(fresh(ids).last_hidden_state, model(ids).last_hidden_state)

    # tensorizer's key-by-key to_redis, through redis-py's cluster client.
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", port) for port in cluster])
    try:
        with tz.TensorDeserializer(str(path), lazy_load=True) as d:
            d.to_redis(client, "bert-by-to_redis")
        _check(tz, f"{seed}/bert-by-to_redis", state)
        # Both files' keys are spread over every master.
        for prefix in ("bert", "bert-by-to_redis"):
            per_node = [len(remote_servers_keys(port, f"{prefix}:*")) for port in cluster]
            assert sum(per_node) == 1 + 2 * len(state)
            assert sum(1 for n in per_node if n) >= 2, per_node
    finally:
        client.close()

    # An existing prefix is refused without overwrite.
    with pytest.raises(Exception, match="already holds a file"):
        tz._native.upload(str(path), f"{seed}/bert", overwrite=False)


def remote_servers_keys(port: int, pattern: str) -> list[bytes]:
    """The keys of one node matching `pattern`."""
    import redis as redis_py

    client = redis_py.Redis(host="127.0.0.1", port=port)
    try:
        return list(client.keys(pattern))
    finally:
        client.close()


def test_cluster_uris_are_checked(tz):
    assert tz._native.location_scheme("redis+cluster://h:7000/p") == "redis+cluster"
    # TLS and credentials are understood (spec §12.6).
    assert tz._native.location_scheme("rediss+cluster://:pw@h/p") == "rediss+cluster"
    with pytest.raises(ValueError, match="prefix"):
        tz._native.location_scheme("redis+cluster://h:7000")
