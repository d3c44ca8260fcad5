"""S3 and TLS settings are one typed, frozen ``stream_io.RemoteOptions``
(spec §14): every entry point takes it as ``remote_options=``, and
tensorizer's keyword arguments are converted into it in one function."""

from __future__ import annotations

import pytest
import torch

import remote_servers
import tensorizer_rs as tz
from tensorizer_rs.stream_io import CAInfo, RemoteOptions, _remote_options

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def s3():
    with remote_servers.s3_bucket() as server:
        yield server


def _options(endpoint: str) -> RemoteOptions:
    return _remote_options(**remote_servers.s3_credentials(endpoint))


def test_keyword_arguments_become_one_frozen_options_object(tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    made = _remote_options(
        s3_access_key_id="id", s3_secret_access_key="hunter2", s3_endpoint="http://h:1", force_http=True,
        certificate_handling=CAInfo(cacert=str(bundle)),
    )
    assert made == RemoteOptions(
        s3_access_key_id="id", s3_secret_access_key="hunter2", s3_endpoint="http://h:1", force_http=True,
        cacert=str(bundle),
    )
    assert str(made.cacert) == str(bundle) and made.capath is None and not made.allow_untrusted
    assert "hunter2" not in repr(made)
    with pytest.raises(AttributeError):
        made.s3_endpoint = "other"  # type: ignore[misc]
    assert _remote_options(certificate_handling=CAInfo(allow_untrusted=True)).allow_untrusted


def test_refusals_are_clear():
    with pytest.raises(ValueError, match="not both"):
        _remote_options(RemoteOptions(), s3_endpoint="h")
    with pytest.raises(ValueError, match="at most one"):
        RemoteOptions(cacert="a", capath="b")
    with pytest.raises(TypeError, match="CAInfo"):
        _remote_options(certificate_handling="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RemoteOptions"):
        tz.stream_io.open_stream("s3://models/x", "rb", remote_options={"s3_endpoint": "h"})  # type: ignore[arg-type]


def test_every_entry_point_takes_the_options(s3, tmp_path):
    endpoint, client = s3
    options = _options(endpoint)
    state = {"w": torch.arange(6, dtype=torch.float32)}
    with tz.stream_io.open_stream("s3://models/opts.tensors", "wb", remote_options=options) as f:
        with tz.TensorSerializer(f) as s:
            s.write_state_dict(state)
    with tz.stream_io.open_stream("s3://models/opts.tensors", "rb", remote_options=options) as f:
        with tz.TensorDeserializer(f, device="cpu", verify_hash=True) as d:
            assert torch.equal(d["w"], state["w"])
    local = tmp_path / "up.tensors"
    local.write_bytes(client.get_object(Bucket="models", Key="opts.tensors")["Body"].read())
    tz.stream_io.s3_upload(str(local), "s3://models/up.tensors", None, None, remote_options=options)
    with tz.stream_io.s3_download("s3://models/up.tensors", None, None, remote_options=options) as f:
        assert f.read() == local.read_bytes()
    converted = tz.convert("s3://models/up.tensors", tmp_path / "out.safetensors", remote_options=options)
    assert converted is not None and (tmp_path / "out.safetensors").stat().st_size > 0
