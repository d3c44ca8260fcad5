"""HTTPS with a private certificate authority, as users configure it: a CA
and a server certificate made with the ``openssl`` command, nginx (HTTP
Range) and moto_server (S3) serving over TLS on 127.0.0.1, and the CA named
by ``certificate_handling=CAInfo(...)``, by the environment variables, or
verification turned off."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest
import torch

import remote_servers
import tzhelpers
from tzhelpers import tz

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CA_VARS = ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")

#: Our precedence and messages, beyond what tensorizer (curl) does.
ours_only = pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer_rs behaviour beyond tensorizer's")


class Pki:
    """A private CA (``ca.pem``, also alone in ``cadir/``) and a certificate
    it signed for 127.0.0.1 (``server.pem``, ``server.key``)."""

    def __init__(self, root: str) -> None:
        self.root = root
        openssl = shutil.which("openssl")
        if openssl is None:
            if os.environ.get("TZR_REQUIRE_SERVERS"):
                pytest.fail("openssl is required for this test but is not installed")
            pytest.skip("openssl is not installed")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

        def run(*args: str) -> None:
            subprocess.run([openssl, *args], cwd=root, check=True, capture_output=True)

        run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "3", "-subj", "/CN=tzr test CA")
        run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
        with open(os.path.join(root, "ext.cnf"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "3", "-extfile", "ext.cnf")
        # A CA directory as c_rehash leaves it (OpenSSL, so curl, finds CAs by subject hash).
        subject_hash = subprocess.run(
            [openssl, "x509", "-hash", "-noout", "-in", "ca.pem"], cwd=root, check=True, capture_output=True, text=True
        ).stdout.strip()
        os.mkdir(os.path.join(root, "cadir"))
        shutil.copy(os.path.join(root, "ca.pem"), os.path.join(root, "cadir", f"{subject_hash}.0"))

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)


@pytest.fixture(scope="module")
def pki() -> Iterator[Pki]:
    with tempfile.TemporaryDirectory() as d:
        yield Pki(d)


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(14)
    return {"w": torch.randn(256, 64, generator=g), "b": torch.arange(64, dtype=torch.int32)}


@contextlib.contextmanager
def _https_nginx(pki: Pki, root: str) -> Iterator[str]:
    binary = remote_servers._binary("nginx", ["/usr/sbin/nginx", "/usr/bin/nginx"])
    port = remote_servers._free_port()
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(
                f"daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;\n"
                "events { worker_connections 256; }\n"
                f"http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n"
                f"  uwsgi_temp_path {d}; scgi_temp_path {d}; keepalive_requests 10000;\n"
                f"  server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {pki.path('server.pem')};\n"
                f"    ssl_certificate_key {pki.path('server.key')}; root {root}; location / {{ }} }} }}\n"
            )
        with remote_servers._running([binary, "-c", conf, "-p", d], port, "nginx"):
            yield f"https://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def https(pki: Pki) -> Iterator[str]:
    """nginx over TLS serving ``data.bin`` (64 KiB) and ``model.tensors``."""
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "data.bin"), "wb") as f:
            f.write(bytes(range(256)) * 256)
        serializer = tz.TensorSerializer(os.path.join(root, "model.tensors"))
        serializer.write_state_dict(_state())
        serializer.close()
        with _https_nginx(pki, root) as base:
            yield base


@pytest.fixture(autouse=True)
def _no_ca_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with none of the CA variables set."""
    for var in CA_VARS:
        monkeypatch.delenv(var, raising=False)


DATA = bytes(range(256)) * 256


def _read(url: str, **kwargs: object) -> bytes:
    with tz.stream_io.open_stream(url, "rb", **kwargs) as s:
        return s.read()


def test_a_private_ca_is_refused_by_default(https: str) -> None:
    with pytest.raises(OSError) as caught:
        _read(f"{https}/data.bin")
    if not tzhelpers.IS_ORACLE:
        text = str(caught.value)
        assert "UnknownIssuer" in text and "CAInfo(cacert=" in text and "CURL_CA_BUNDLE" in text, text


def test_cainfo_names_the_ca(https: str, pki: Pki) -> None:
    CAInfo = tz.stream_io.CAInfo
    for handling in (CAInfo(cacert=pki.path("ca.pem")), CAInfo(capath=pki.path("cadir")),
                     CAInfo(allow_untrusted=True)):
        assert _read(f"{https}/data.bin", certificate_handling=handling) == DATA, handling.curl_flags
    # With a range, and through CURLStreamFile itself.
    got = _read(f"{https}/data.bin", begin=10, end=20, certificate_handling=CAInfo(cacert=pki.path("ca.pem")))
    assert got == DATA[10:20]
    with tz.stream_io.CURLStreamFile(f"{https}/data.bin", certificate_handling=CAInfo(allow_untrusted=True)) as s:
        assert s.read(5) == DATA[:5]


@ours_only
def test_capath_holding_only_the_server_certificate_is_not_enough(https: str, pki: Pki) -> None:
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(pki.path("server.pem"), d)
        with pytest.raises(OSError, match="UnknownIssuer"):
            _read(f"{https}/data.bin", certificate_handling=tz.stream_io.CAInfo(capath=d))


def test_certificate_handling_must_be_a_cainfo(https: str, pki: Pki) -> None:
    with pytest.raises(TypeError, match="CAInfo"):
        _read(f"{https}/data.bin", certificate_handling=pki.path("ca.pem"))
    with pytest.raises(ValueError, match="Exactly one"):
        tz.stream_io.CAInfo(cacert=pki.path("ca.pem"), allow_untrusted=True)
    with pytest.raises(ValueError, match="cacert"):
        tz.stream_io.CAInfo(cacert=pki.path("missing.pem"))


@pytest.mark.parametrize("var", ["CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"])
def test_curl_variables_name_the_ca(https: str, pki: Pki, var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(var, pki.path("cadir" if var == "SSL_CERT_DIR" else "ca.pem"))
    assert _read(f"{https}/data.bin") == DATA


@ours_only
def test_requests_variable_and_precedence(https: str, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", pki.path("ca.pem"))
    monkeypatch.setenv("CURL_CA_BUNDLE", pki.path("missing.pem"))
    assert _read(f"{https}/data.bin") == DATA
    # AWS_CA_BUNDLE is for S3 only (boto3's).
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    monkeypatch.delenv("CURL_CA_BUNDLE")
    monkeypatch.setenv("AWS_CA_BUNDLE", pki.path("ca.pem"))
    with pytest.raises(OSError, match="UnknownIssuer"):
        _read(f"{https}/data.bin")
    # An explicit CAInfo outranks every variable.
    monkeypatch.setenv("SSL_CERT_FILE", pki.path("missing.pem"))
    assert _read(f"{https}/data.bin", certificate_handling=tz.stream_io.CAInfo(capath=pki.path("cadir"))) == DATA


@ours_only
def test_an_unusable_ca_variable_names_itself(https: str, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", pki.path("missing.pem"))
    with pytest.raises(ValueError) as caught:
        _read(f"{https}/data.bin")
    assert "SSL_CERT_FILE" in str(caught.value) and "missing.pem" in str(caught.value)
    monkeypatch.setenv("SSL_CERT_FILE", pki.path("server.key"))  # PEM, but no certificate
    with pytest.raises(ValueError, match="no PEM certificate"):
        _read(f"{https}/data.bin")


def test_deserializer_over_https(https: str, pki: Pki) -> None:
    stream = tz.stream_io.open_stream(
        f"{https}/model.tensors", certificate_handling=tz.stream_io.CAInfo(cacert=pki.path("ca.pem"))
    )
    with tz.TensorDeserializer(stream, device="cpu") as got:
        for name, t in _state().items():
            tzhelpers.assert_same_tensor(got[name], t, name)


@contextlib.contextmanager
def _https_moto(pki: Pki) -> Iterator[str]:
    here = os.path.join(os.path.dirname(sys.executable), "moto_server")
    binary = remote_servers._binary("moto_server", [os.environ.get("TZR_MOTO_SERVER", ""), here])
    port = remote_servers._free_port()
    args = [binary, "-H", "127.0.0.1", "-p", str(port), "-c", pki.path("server.pem"), "-k", pki.path("server.key")]
    with remote_servers._running(args, port, "moto_server"):
        yield f"https://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def s3_https(pki: Pki) -> Iterator[str]:
    with _https_moto(pki) as endpoint:
        import boto3

        client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
            region_name="us-east-1", verify=pki.path("ca.pem"),
        )
        client.create_bucket(Bucket="secure")
        yield endpoint


def _s3(endpoint: str) -> dict[str, object]:
    return {"s3_access_key_id": "testing", "s3_secret_access_key": "testing", "s3_endpoint": endpoint}


def _write(uri: str, data: bytes, **kwargs: object) -> None:
    with tz.stream_io.open_stream(uri, "wb", **kwargs) as s:
        s.write(data)


def test_s3_over_https_with_aws_ca_bundle(s3_https: str, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = "s3://secure/env.bin"
    monkeypatch.setenv("AWS_CA_BUNDLE", pki.path("ca.pem"))
    _write(uri, DATA, **_s3(s3_https))
    if tzhelpers.IS_ORACLE:
        # tensorizer reads S3 with curl, which does not know AWS_CA_BUNDLE.
        monkeypatch.setenv("CURL_CA_BUNDLE", pki.path("ca.pem"))
    assert _read(uri, **_s3(s3_https)) == DATA
    # A TensorSerializer writing to, and a TensorDeserializer reading from, the HTTPS endpoint.
    with tz.stream_io.open_stream("s3://secure/model.tensors", "wb", **_s3(s3_https)) as s:
        serializer = tz.TensorSerializer(s)
        serializer.write_state_dict(_state())
        serializer.close()
    with tz.TensorDeserializer(tz.stream_io.open_stream("s3://secure/model.tensors", **_s3(s3_https))) as got:
        for name, t in _state().items():
            tzhelpers.assert_same_tensor(got[name], t, name)


def test_s3_over_https_refused_without_the_ca(s3_https: str) -> None:
    with pytest.raises(OSError):
        _read("s3://secure/env.bin", **_s3(s3_https))


@ours_only
def test_s3_cainfo_for_reads_and_uploads(s3_https: str, pki: Pki) -> None:
    CAInfo = tz.stream_io.CAInfo
    handling = CAInfo(cacert=pki.path("ca.pem"))
    _write("s3://secure/cainfo.bin", DATA[:1000], certificate_handling=handling, **_s3(s3_https))
    assert _read("s3://secure/cainfo.bin", certificate_handling=handling, **_s3(s3_https)) == DATA[:1000]
    insecure = CAInfo(allow_untrusted=True)
    assert _read("s3://secure/cainfo.bin", certificate_handling=insecure, **_s3(s3_https)) == DATA[:1000]
    got = tz.stream_io.s3_download("s3://secure/cainfo.bin", "testing", "testing", s3_https, certificate_handling=handling)
    assert got.read() == DATA[:1000]
    # Without the CA, the upload is refused and nothing replaces the object.
    with pytest.raises(OSError, match="UnknownIssuer"):
        _write("s3://secure/cainfo.bin", b"overwritten", **_s3(s3_https))
    assert _read("s3://secure/cainfo.bin", certificate_handling=handling, **_s3(s3_https)) == DATA[:1000]
