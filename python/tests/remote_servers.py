"""Real servers on 127.0.0.1 for the remote-source tests: nginx (HTTP Range),
moto_server (S3) and redis-server. Each is started in a private temporary
directory and killed at the end. A missing binary skips the test, or fails
it when TZR_REQUIRE_SERVERS=1 (set by tests/run-all.sh)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def _binary(name: str, candidates: list[str]) -> str:
    for c in candidates:
        if c and os.path.exists(c):
            return c
    found = shutil.which(name)
    if found:
        return found
    if os.environ.get("TZR_REQUIRE_SERVERS"):
        pytest.fail(f"{name} is required for this test but is not installed")
    pytest.skip(f"{name} is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: How long a server may take to listen. Azurite (node) has taken over 10 s
#: to start on two cores busy with builds; a server that never listens still
#: fails within this bound.
START_TIMEOUT_S = 60


def _wait(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.025)
    raise RuntimeError(f"{what} did not start on port {port} within {START_TIMEOUT_S} s")


@contextmanager
def _running(args: list[str], port: int, what: str, group: bool = False) -> Iterator[None]:
    """Runs `args` until the block ends; with `group`, in a session of its
    own: it is asked to stop (a master stops and reaps its workers), and
    the whole session is killed if it has not stopped within 5 s."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=group)
    try:
        _wait(port, proc, what)
        yield
    finally:
        if not group:
            proc.kill()
            proc.wait()
        else:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@contextmanager
def nginx(root: str, extra: str = "", workers: int = 1) -> Iterator[str]:
    """Serves ``root`` (``extra``: more directives for its ``server``
    block) from one process, or from a master and ``workers`` worker
    processes; yields the base URL."""
    binary = _binary("nginx", ["/usr/sbin/nginx", "/usr/bin/nginx"])
    port = _free_port()
    master = "off" if workers <= 1 else "on"
    # A master started by root hands its workers to `nobody`, who may not
    # reach files under root's home; keep them as the caller.
    user = "user root;" if workers > 1 and os.geteuid() == 0 else ""
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(
                f"daemon off; master_process {master}; worker_processes {max(workers, 1)}; {user}"
                f" pid {d}/nginx.pid; error_log {d}/error.log;\n"
                "events { worker_connections 256; }\n"
                f"http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n"
                f"  uwsgi_temp_path {d}; scgi_temp_path {d}; sendfile on; keepalive_requests 10000;\n"
                f"  server {{ listen 127.0.0.1:{port}; root {root}; location / {{ }} {extra} }} }}\n"
            )
        with _running([binary, "-c", conf, "-p", d], port, "nginx", group=workers > 1):
            yield f"http://127.0.0.1:{port}"


@contextmanager
def moto() -> Iterator[str]:
    """An S3-compatible server; yields its endpoint URL."""
    here = os.path.join(os.path.dirname(sys.executable), "moto_server")
    binary = _binary("moto_server", [os.environ.get("TZR_MOTO_SERVER", ""), here])
    port = _free_port()
    with _running([binary, "-H", "127.0.0.1", "-p", str(port)], port, "moto_server"):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def s3_bucket(bucket: str = "models") -> Iterator[tuple[str, object]]:
    """moto_server with one bucket; yields its endpoint and a boto3 client."""
    with moto() as endpoint:
        import boto3

        client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=bucket)
        yield endpoint, client


def s3_credentials(endpoint: str) -> dict[str, object]:
    """open_stream's keyword arguments for the moto server at `endpoint`."""
    return {"s3_access_key_id": "testing", "s3_secret_access_key": "testing", "s3_endpoint": endpoint,
            "force_http": True}


@contextmanager
def redis() -> Iterator[int]:
    """A redis-server without persistence; yields its port."""
    binary = _binary("redis-server", ["/usr/bin/redis-server"])
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d]
        with _running(args, port, "redis-server"):
            yield port


_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@contextmanager
def gcs(bucket: str = "tzr") -> Iterator[dict[str, str]]:
    """gcp-storage-emulator (PyPI) behind tests/cloud-servers/gcs_emulator.py
    (which adds the XML object calls `object_store` makes), with one bucket;
    yields the environment variables that point ``gs://`` at it."""
    try:
        import gcp_storage_emulator  # noqa: F401
    except ImportError:
        if os.environ.get("TZR_REQUIRE_SERVERS"):
            pytest.fail("gcp-storage-emulator is required (pip install -r tests/python-requirements.txt)")
        pytest.skip("gcp-storage-emulator is not installed (pip install -r tests/python-requirements.txt)")
    port = _free_port()
    script = os.path.join(_ROOT, "tests", "cloud-servers", "gcs_emulator.py")
    args = [sys.executable, script, "--port", str(port), "--bucket", bucket]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("ready"):
            raise RuntimeError(f"gcp-storage-emulator did not start: {line!r}")
        # An http:// base URL is taken as an emulator; the emulator ignores
        # the (placeholder) bearer token that writes need.
        yield {"GOOGLE_BASE_URL": f"http://127.0.0.1:{port}", "GOOGLE_BEARER_TOKEN": "emulator"}
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def azurite(container: str = "tzr") -> Iterator[dict[str, str]]:
    """Azurite's blob service (npm, installed by tests/cloud-servers.sh) with
    one container; yields the environment variables that point ``az://``
    at it (its well-known development account and key)."""
    local = os.path.join(_ROOT, "tests", "cloud-servers", "node_modules", ".bin", "azurite-blob")
    binary = _binary("azurite-blob (tests/cloud-servers.sh)", [os.environ.get("TZR_AZURITE", ""), local])
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as d:
        args = [binary, "--inMemoryPersistence", "--blobHost", "127.0.0.1", "--blobPort", str(port),
                "--skipApiVersionCheck", "--silent"]
        proc = subprocess.Popen(args, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait(port, proc, "azurite-blob")
            script = os.path.join(_ROOT, "tests", "cloud-servers", "azurite_container.py")
            subprocess.run([sys.executable, script, endpoint, container], check=True)
            yield {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": endpoint}
        finally:
            proc.kill()
            proc.wait()
