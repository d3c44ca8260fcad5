"""``open_stream`` ranges and tensorizer's stream classes: ``begin``/``end``
(exclusive) bound a read stream for every scheme, invalid ranges are
rejected as tensorizer rejects them, and ``CURLStreamFile`` /
``RedisStreamFile`` are real readable streams over the native sources."""

from __future__ import annotations

import inspect
import io

import pytest

import remote_servers
import tzhelpers

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer ignores end for files and has no redis/curl here"),
]

DATA = bytes(range(256)) * 3 + bytes(range(232))  # 1,000 bytes
assert len(DATA) == 1000


@pytest.fixture(scope="module")
def http_base(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "blob").write_bytes(DATA)
    with remote_servers.nginx(str(root)) as base:
        yield base


def _check_bounded(stream, begin: int = 10, end: int = 20) -> None:
    assert stream.tell() == begin
    assert stream.read() == DATA[begin:end]
    assert stream.read(5) == b""
    stream.seek(begin)
    buf = bytearray(100)
    assert stream.readinto(buf) == end - begin and bytes(buf[: end - begin]) == DATA[begin:end]
    stream.seek(begin + 2)
    assert stream.read(3) == DATA[begin + 2 : begin + 5]
    assert stream.read(100) == DATA[begin + 5 : end]
    stream.close()
    assert stream.closed


def test_local_range(tz, tmp_path):
    p = tmp_path / "blob"
    p.write_bytes(DATA)
    _check_bounded(tz.stream_io.open_stream(str(p), "rb", begin=10, end=20))
    _check_bounded(tz.stream_io.open_stream(p, "rb", begin=10, end=20))
    with tz.stream_io.open_stream(str(p), "rb", begin=990) as f:
        assert f.read() == DATA[990:]
    with tz.stream_io.open_stream(str(p), "rb", end=5) as f:
        assert f.read() == DATA[:5]


def test_http_range(tz, http_base):
    url = f"{http_base}/blob"
    _check_bounded(tz.stream_io.open_stream(url, "rb", begin=10, end=20))
    with tz.stream_io.open_stream(url, end=1500) as f:  # past the end: up to the end
        assert f.read() == DATA


@pytest.mark.parametrize(
    ("begin", "end", "message"),
    [
        (-1, None, "Invalid begin, must be non-negative"),
        (20, 10, "End marker must come strictly after begin marker (requested range: 20 to 10)"),
        (10, 10, "End marker must come strictly after begin marker (requested range: 10 to 10)"),
        (None, 0, "End marker must come strictly after begin marker (requested range: 0 to 0)"),
    ],
)
def test_invalid_ranges_rejected_like_tensorizer(tz, oracle, tmp_path, http_base, begin, end, message):
    with pytest.raises(ValueError) as err:
        tz.stream_io.open_stream(f"{http_base}/blob", "rb", begin=begin, end=end)
    assert str(err.value) == message
    # tensorizer's own message for the same range (its CURLStreamFile checks
    # before starting curl).
    with pytest.raises(ValueError) as theirs:
        oracle.stream_io.CURLStreamFile("http://127.0.0.1:9/x", begin=begin, end=end)
    assert str(theirs.value) == message


@pytest.mark.parametrize(("begin", "end"), [(-1, None), (20, 10), (10, 10), (None, 0), (None, -5)])
def test_local_ranges_as_tensorizer_opens_local_files(tz, oracle, tmp_path, begin, end):
    """tensorizer opens a local file, seeks to ``begin or 0`` (a negative
    one raises OSError there) and ignores ``end``; an ``end`` past
    ``begin`` bounds our stream (spec §11.5)."""
    target = str(tmp_path / "blob")
    (tmp_path / "blob").write_bytes(DATA)
    outcomes = []
    for lib in (tz, oracle):
        try:
            with lib.stream_io.open_stream(target, "rb", begin=begin, end=end) as f:
                outcomes.append(f.read())
        except OSError as e:
            outcomes.append(type(e))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == (OSError if begin == -1 else DATA[begin or 0 :])


def test_curl_stream_file(tz, oracle, http_base):
    url = f"{http_base}/blob"
    assert inspect.signature(tz.stream_io.CURLStreamFile).parameters.keys() == inspect.signature(
        oracle.stream_io.CURLStreamFile
    ).parameters.keys()
    f = tz.stream_io.CURLStreamFile(url, 10, 20)
    assert isinstance(f.setup_latency, float) and f.setup_latency >= 0
    assert f.readable() and f.seekable() and not f.writable()
    assert f.read(4) == DATA[10:14]
    assert len(f.response_latencies) == 1 and f.bytes_read == 4 and f.read_operations == 1
    f.seek(10)
    _check_bounded(f)
    with pytest.raises(ValueError):
        f.read(1)
    with tz.stream_io.CURLStreamFile(url) as g:
        assert g.tell() == 0
        g.seek(990)
        assert g.read() == DATA[990:]
        assert g.seek(-4, io.SEEK_CUR) == 996


def test_s3_and_redis_ranges(tz, tmp_path):
    import redis as redis_py

    with remote_servers.moto() as endpoint:
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        client.create_bucket(Bucket="bkt")
        client.put_object(Bucket="bkt", Key="blob", Body=DATA)
        creds = {"s3_access_key_id": "testing", "s3_secret_access_key": "testing", "s3_endpoint": endpoint,
                 "force_http": True}
        s = tz.stream_io.open_stream("s3://bkt/blob", "rb", begin=10, end=20, **creds)
        assert isinstance(s, tz.stream_io.CURLStreamFile)
        _check_bounded(s)
        d = tz.stream_io.s3_download("s3://bkt/blob", "testing", "testing", endpoint, begin=10, end=20)
        _check_bounded(d)
        with pytest.raises(ValueError, match="End marker must come strictly after begin marker"):
            tz.stream_io.open_stream("s3://bkt/blob", "rb", begin=20, end=10, **creds)
        src = tmp_path / "up"
        src.write_bytes(DATA[:100])
        tz.stream_io.s3_upload(str(src), "s3://bkt/up", "testing", "testing", endpoint)
        assert client.get_object(Bucket="bkt", Key="up")["Body"].read() == DATA[:100]

    with remote_servers.redis() as port:
        client = redis_py.Redis(host="127.0.0.1", port=port)
        client.set("blob:0", DATA[:600])
        client.set("blob:600", DATA[600:])
        uri = f"redis://127.0.0.1:{port}/blob"
        _check_bounded(tz.stream_io.open_stream(uri, "rb", begin=10, end=20))
        _check_bounded(tz.stream_io.open_stream(uri, "rb", begin=595, end=605), 595, 605)
        r = tz.stream_io.RedisStreamFile(uri, begin=10, end=20)
        assert isinstance(r.setup_latency, float) and r.response_latencies == []
        _check_bounded(r)
        with tz.stream_io.RedisStreamFile(uri) as r:
            assert r.read() == DATA
        client.close()


def test_module_constants_and_helpers(tz, oracle, tmp_path):
    s = tz.stream_io
    assert (s.SEEK_SET, s.SEEK_CUR, s.SEEK_END) == (0, 1, 2)
    assert s.default_s3_read_endpoint == oracle.stream_io.default_s3_read_endpoint
    assert s.default_s3_write_endpoint == oracle.stream_io.default_s3_write_endpoint
    with pytest.raises(ValueError, match="Exactly one of"):
        s.CAInfo()
    assert s.CAInfo(allow_untrusted=True).curl_flags == ("--insecure",)
    assert s._infer_credentials("a", "b") == oracle.stream_io._infer_credentials("a", "b")
    cfg = tmp_path / "s3cfg"
    cfg.write_text("[default]\naccess_key = AK\nsecret_key = SK\nhost_base = example.com\nuse_https = False\n")
    assert tuple(s._infer_credentials(None, None, str(cfg))) == tuple(
        oracle.stream_io._infer_credentials(None, None, str(cfg))
    )
    with pytest.raises(FileNotFoundError):
        s._infer_credentials(None, None, str(tmp_path / "nope"))


def test_s3cfg_has_one_reader(tz, tmp_path):
    """Python reads ``.s3cfg`` through the native S3 store's parser, so both
    agree on every value; ``use_https`` as s3cmd reads booleans (tensorizer
    itself takes only ``True``/``False``, and a lowercase ``false`` as unset)."""
    from tensorizer_rs import _native

    if tz.__name__ != "tensorizer_rs":
        pytest.skip("tensorizer_rs only")
    for flag, expected in (("False", False), ("false", False), ("yes", True), ("1", True), ("", None)):
        cfg = tmp_path / "s3cfg"
        cfg.write_text(f"[other]\naccess_key = X\n[default]\naccess_key = AK\nsecret_key: SK\nuse_https = {flag}\n")
        parsed = tz.stream_io._infer_credentials(None, None, str(cfg))
        assert (parsed.s3_access_key, parsed.s3_secret_key, parsed.use_https) == ("AK", "SK", expected), flag
        assert _native.s3cfg_values(cfg.read_text())[4] == expected
    cfg.write_text("[other]\naccess_key = X\n")
    with pytest.raises(ValueError, match="could not be parsed"):
        tz.stream_io._infer_credentials(None, None, str(cfg))


def test_utils_memory_usage(tz, oracle):
    u = tz.utils
    cpu = u.CPUMemoryUsage.now()
    assert cpu.maxrss > 0 and cpu.free > 0 and str(cpu).startswith("CPU: (maxrss: ")
    m = u.MemoryUsage.now()
    assert m.cpu._fields == ("maxrss", "free") and u.get_mem_usage().startswith("CPU:")
    assert u.MemoryUsage._fields == oracle.utils.MemoryUsage._fields
    assert u.GlobalGPUMemoryUsage._fields == oracle.utils.GlobalGPUMemoryUsage._fields
    assert u.TorchGPUMemoryUsage._fields == oracle.utils.TorchGPUMemoryUsage._fields
    assert u.get_gpu_name() == oracle.utils.get_gpu_name()


def test_serialization_names(tz, oracle):
    z, oz = tz.serialization, oracle.serialization
    assert [(h.name, h.value) for h in z.HashType] == [(h.name, h.value) for h in oz.HashType]
    assert z.TensorHash(z.HashType.CRC32, b"x").hash == b"x"
    assert z.TensorEntry.__slots__ == oz.TensorEntry.__slots__
    assert isinstance(z._enable_perf_stats, bool) and tz._crypt.available is True


def _embedded_file(tz, tmp_path):
    """A tensorizer file stored at byte 777 of a bigger object, with junk after it."""
    import torch

    sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(5, dtype=torch.int16)}
    path = tmp_path / "inner.tensors"
    tzhelpers.write_with(tz, path, lambda s: s.write_state_dict(sd))
    inner = path.read_bytes()
    blob = b"\xa5" * 777 + inner + b"\x5a" * 333
    return sd, blob, 777, 777 + len(inner)


def _check_embedded(tz, stream, sd):
    import torch

    with tz.TensorDeserializer(stream, device="cpu", verify_hash=True) as d:
        assert sorted(d.keys()) == sorted(sd)
        for k, v in sd.items():
            assert torch.equal(d[k], v)


def test_deserializer_reads_from_the_stream_begin(tz, tmp_path, http_base):
    """TensorDeserializer(open_stream(uri, begin=N)) reads the file at N, as tensorizer does."""
    sd, blob, begin, end = _embedded_file(tz, tmp_path)
    (tmp_path / "blob.bin").write_bytes(blob)
    _check_embedded(tz, tz.stream_io.open_stream(str(tmp_path / "blob.bin"), "rb", begin=begin, end=end), sd)
    with remote_servers.nginx(str(tmp_path)) as base:
        url = f"{base}/blob.bin"
        _check_embedded(tz, tz.stream_io.open_stream(url, "rb", begin=begin, end=end), sd)
        _check_embedded(tz, tz.stream_io.open_stream(url, "rb", begin=begin), sd)  # junk after the file is ignored
        stream = tz.stream_io.open_stream(url, "rb")
        stream.seek(begin)  # a seek before handing the stream over counts as well
        _check_embedded(tz, stream, sd)
    with remote_servers.s3_bucket() as (endpoint, client):
        client.put_object(Bucket="models", Key="blob.bin", Body=blob)
        creds = remote_servers.s3_credentials(endpoint)
        _check_embedded(tz, tz.stream_io.open_stream("s3://models/blob.bin", "rb", begin=begin, end=end, **creds), sd)


def test_presigned_url_and_scheme_rules(tz):
    """stream_io._s3_download_url presigns a GET that works; _enforce_scheme
    follows tensorizer's rules and open_stream goes through it."""
    import urllib.request

    io_mod = tz.stream_io
    assert io_mod._enforce_scheme("host:9000") == "https://host:9000"
    assert io_mod._enforce_scheme("host:9000", force_http=True) == "http://host:9000"
    assert io_mod._enforce_scheme("https://h", force_http=True) == "http://h"
    assert io_mod._enforce_scheme("http://h", allow_http=True) == "http://h"
    with pytest.raises(ValueError, match="Non-HTTPS endpoint URLs are not allowed."):
        io_mod._enforce_scheme("http://h")
    with remote_servers.s3_bucket() as (endpoint, client):
        client.put_object(Bucket="models", Key="blob", Body=DATA)
        url = io_mod._s3_download_url("s3://models/blob", "testing", "testing", endpoint)
        assert "X-Amz-Signature=" in url and "/models/blob?" in url
        with urllib.request.urlopen(url) as r:
            assert r.read() == DATA
        with pytest.raises(ValueError, match="Non-HTTPS"):
            io_mod.open_stream("s3://models/blob", "rb", s3_access_key_id="testing",
                               s3_secret_access_key="testing", s3_endpoint=endpoint)
        with pytest.raises(OSError, match="^Failed to open stream: "):
            io_mod.open_stream("s3://models/missing", "rb", **remote_servers.s3_credentials(endpoint))
