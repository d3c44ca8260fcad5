"""``tensorizer_rs.zipslicer.load`` over HTTP (nginx) and S3 (moto): keys and
tensors equal ``torch.load``'s, and only ranges are fetched -- counted both by
the checkpoint's own counters and on the wire, by a proxy between the client
and the server."""

from __future__ import annotations

import contextlib
import pathlib
import socket
import threading
from typing import Iterator

import pytest
import torch

import remote_servers
from tensorizer_rs import zipslicer

MiB = 1 << 20
#: The opening request of an HTTP or S3 source asks for the first MiB
#: (tensorizer_native::http::PREFIX); everything after it is a range read.
OPENING = MiB
#: A tensor's read may take its local header and torch's alignment padding too.
HEADER_SLACK = 4096


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(512, 256, generator=g)
    state: dict[str, torch.Tensor] = {}
    for i in range(8):
        state[f"layers.{i}.weight"] = torch.randn(512, 512, generator=g)  # 1 MiB each
        state[f"layers.{i}.bias"] = torch.randn(512, generator=g)
    state["transposed"] = base.t()
    state["column"] = base[:, 3]
    state["tied"] = state["layers.0.weight"]
    state["half"] = torch.randn(64, 64, generator=g).to(torch.float16)
    return state


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("remote")
    torch.save(_state(), root / "model.pt")
    assert (root / "model.pt").stat().st_size > 8 * MiB
    return root


class CountingProxy:
    """A TCP proxy to 127.0.0.1:`port` counting the bytes the server sends."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.received = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if count:
                    with self._lock:
                        self.received += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop = True
        self._listener.close()


@contextlib.contextmanager
def proxied(base: str) -> Iterator[tuple[str, CountingProxy]]:
    port = int(base.rsplit(":", 1)[1])
    proxy = CountingProxy(port)
    try:
        yield f"http://127.0.0.1:{proxy.port}", proxy
    finally:
        proxy.close()


def _check(uri: str, path: pathlib.Path, proxy: CountingProxy) -> None:
    ref = torch.load(path, weights_only=True)
    sd = zipslicer.load(uri)
    keys = list(sd.keys())
    read, requests = sd.bytes_read()
    assert keys == list(ref.keys())
    # Open + keys: the head, the tail, the central directory, data.pkl.
    assert read < MiB and requests <= 8, (read, requests)
    # On the wire: the opening request's prefix and those ranges, never the
    # rest of the file (an opening request that went on into the whole
    # object moved 3 MiB here).
    assert proxy.received < OPENING + read + 64 * 1024, f"open + keys moved {proxy.received} bytes on the wire"
    meta = sd.get_meta("layers.3.weight")
    assert tuple(meta.shape) == (512, 512) and meta.dtype == torch.float32
    # One tensor: its bytes (and its local header), nothing else.
    wire = proxy.received
    t = sd["layers.3.weight"]
    assert torch.equal(t, ref["layers.3.weight"])
    got = sd.bytes_read()[0] - read
    assert MiB <= got <= MiB + HEADER_SLACK, got
    assert proxy.received - wire < MiB + 64 * 1024, proxy.received - wire
    # Every tensor, views and tied weights included, equals torch.load's.
    for k in keys:
        v = sd[k]
        assert v.dtype == ref[k].dtype and v.shape == ref[k].shape, k
        assert torch.equal(v, ref[k]), k
    # Everything on the wire was a counted range (plus the opening prefix
    # and each response's headers).
    read, requests = sd.bytes_read()
    assert proxy.received <= read + OPENING + requests * 2048, (proxy.received, read, requests)


def test_zipslicer_load_over_http(served: pathlib.Path) -> None:
    with remote_servers.nginx(str(served)) as base, proxied(base) as (url, proxy):
        _check(f"{url}/model.pt", served / "model.pt", proxy)


def test_zipslicer_load_over_s3(served: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with remote_servers.s3_bucket("ckpts") as (endpoint, client), proxied(endpoint) as (url, proxy):
        client.upload_file(str(served / "model.pt"), "ckpts", "dir/model.pt")  # type: ignore[attr-defined]
        monkeypatch.setenv("S3_ENDPOINT_URL", url)
        monkeypatch.setenv("S3_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("S3_SECRET_ACCESS_KEY", "testing")
        before = proxy.received
        assert before == 0
        _check("s3://ckpts/dir/model.pt", served / "model.pt", proxy)
