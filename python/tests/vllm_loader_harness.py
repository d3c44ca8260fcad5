"""Runs vLLM 0.33.0's tensorizer loader modules, unmodified, with one
tensorizer implementation. ``test_vllm_loader.py`` runs it in a subprocess
per implementation:

    python vllm_loader_harness.py --impl tensorizer_rs --src SRC --out OUT --results R.json
        [--s3-endpoint URL --s3-bucket B] [--foreign OTHER_OUT] [--foreign-only]

SRC holds ``vllm/``: the stand-ins of ``vllm_standins/`` with vLLM's own
``tensorizer.py`` and ``tensorizer_loader.py`` beside them. With
``--impl tensorizer_rs``, ``import tensorizer`` (and ``tensorizer.<sub>``)
gives tensorizer_rs, as ``upstream/upstream_plugin.py`` does; with
``--impl tensorizer`` the real one runs (the control).

Every case runs in turn (its name printed to stderr first); R.json gets ``{case: {"status": "pass" | "fail" |
"not_run", "detail": ...}}``. OUT/manifest.json lists the files written,
with their reference tensors, for the other implementation to load
(``--foreign``: cases ``cross_*``). ``~/.s3cfg`` (HOME is a private
directory) is written just before the ``s3cfg_*`` cases.

Importing this module only defines the cases (for pytest's parametrize):
tensorizer and vLLM are imported by ``main()``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_REF = "standin/tiny-model"
#: The key of the encrypted cases with a key file made by the test.
FIXED_KEY = hashlib.sha256(b"tensorizer-rs vllm loader test key").digest()
WRONG_KEY = hashlib.sha256(b"not the key").digest()


@dataclass
class Case:
    name: str
    fn: Callable[[], None]
    needs: tuple[str, ...]
    group: str  # "local", "s3", "foreign"


CASES: list[Case] = []


def case(*needs: str, group: str = "local") -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        CASES.append(Case(fn.__name__, fn, needs, group))
        return fn

    return register


# Filled in by main(): the implementation and vLLM's modules.
IMPL = ""
OUT = Path()
S3: dict[str, Any] = {}
FOREIGN: Path | None = None
MANIFEST: list[dict[str, Any]] = []
torch: Any = None
tensorizer: Any = None  # the implementation, as `import tensorizer` gives it
vt: Any = None  # vllm.model_executor.model_loader.tensorizer
vtl: Any = None  # vllm.model_executor.model_loader.tensorizer_loader
vcfg: Any = None  # vllm.config
LoadConfig: Any = None


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _dtype(name: str) -> Any:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def model_config(dtype: str = "float32") -> Any:
    from vllm.model_executor.models.tiny import TinyConfig

    return vcfg.ModelConfig(model=MODEL_REF, hf_config=TinyConfig(), dtype=_dtype(dtype))


def vllm_config(mc: Any, tp: int = 1) -> Any:
    return vcfg.VllmConfig(model_config=mc, parallel_config=vcfg.ParallelConfig(tensor_parallel_size=tp))


def make_model(dtype: str = "float32", seed: int = 0) -> tuple[Any, Any, dict[str, Any]]:
    """A freshly initialized model (as vLLM builds one), its ModelConfig and
    a copy of its state dict."""
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    mc = model_config(dtype)
    torch.manual_seed(seed)
    with set_default_torch_dtype(mc.dtype), torch.device("cpu"):
        model = initialize_model(vllm_config=vllm_config(mc))
    return model, mc, {k: v.detach().clone() for k, v in model.state_dict().items()}


def save_ref(ref: dict[str, Any], path: Path) -> str:
    torch.save(ref, path)
    return str(path)


def expected(ref: dict[str, Any], dtype: str, vllm_tensorized: bool) -> dict[str, Any]:
    """What the loaded model must hold. vLLM passes its dtype to the
    TensorDeserializer of a vLLM-tensorized model: tensorizer 2.12.1 casts
    every tensor but bool ones (the int64 buffer too), tensorizer_rs only
    floating-point ones, as ``Module.to(dtype)`` does (spec §11.1); the
    weights iterator of the other path loads with no dtype, and
    load_weights copies into the model's own tensors (floats in the
    model's dtype, the int buffer int64)."""
    target = _dtype(dtype)
    out = {}
    for k, v in ref.items():
        if vllm_tensorized and IMPL == "tensorizer":
            cast = v.dtype != torch.bool
        else:
            cast = v.dtype.is_floating_point
        out[k] = v.to(target) if cast else v
    return out


def check_model(model: Any, ref: dict[str, Any], dtype: str, vllm_tensorized: bool) -> None:
    assert not hasattr(model, "vllm_tensorized_marker"), "the marker was not removed"
    state = model.state_dict()
    want = expected(ref, dtype, vllm_tensorized)
    assert sorted(state) == sorted(want), (sorted(state), sorted(want))
    for k, v in want.items():
        got = state[k]
        assert got.device.type == "cpu", (k, got.device)
        assert got.dtype == v.dtype, (k, got.dtype, v.dtype)
        assert torch.equal(got, v), f"{k}: values differ"


def load(tc: Any, dtype: str = "float32", tp: int = 1, rank: int = 0) -> Any:
    """TensorizerLoader(...).load_model(...), as vLLM's worker calls it."""
    import vllm.distributed

    mc = model_config(dtype)
    loader = vtl.TensorizerLoader(LoadConfig(model_loader_extra_config=tc))
    vllm.distributed.TP_RANK = rank
    try:
        return loader.load_model(vllm_config(mc, tp), mc)
    finally:
        vllm.distributed.TP_RANK = 0


def raises(exc: type[BaseException] | tuple[type[BaseException], ...], fn: Callable[[], Any],
           match: str | None = None) -> BaseException:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001
        if not isinstance(e, exc):
            raise AssertionError(f"expected {exc}, got {type(e).__module__}.{type(e).__qualname__}: {e}") from e
        if match is not None and match not in str(e):
            raise AssertionError(f"expected {match!r} in the message, got {e!r}") from e
        return e
    raise AssertionError(f"expected {exc}, nothing was raised")


def cryptography_error() -> type[BaseException]:
    cls = tensorizer.serialization.CryptographyError
    assert isinstance(cls, type) and issubclass(cls, Exception)
    return cls


def check_artifacts(directory: str, listing: Callable[[], dict[str, bytes]]) -> None:
    from vllm.transformers_utils.repo_utils import artifacts

    files = listing()
    want = {k: v for k, v in artifacts(MODEL_REF, None).items() if k in ("config.json", "tokenizer.json")}
    for name, data in want.items():
        assert files.get(name) == data, f"{directory}/{name}: {files.get(name)!r}"
    for name in ("README.md", "model.safetensors"):
        assert name not in files, f"{directory}/{name} should have been ignored"


def local_listing(directory: Path) -> Callable[[], dict[str, bytes]]:
    return lambda: {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def publish(name: str, uri: str, ref: str, dtype: str, vllm_tensorized: bool, keyfile: str | None = None,
            tp: int = 1, rank: int = 0) -> None:
    """Lists a written file for the other implementation's cross cases."""
    MANIFEST.append(dict(name=name, uri=uri, ref=ref, dtype=dtype, vllm_tensorized=vllm_tensorized,
                         keyfile=keyfile, tp=tp, rank=rank))


def d(*parts: str) -> Path:
    path = OUT.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------
# Cases: local files
# --------------------------------------------------------------------------


@case()
def imports_the_implementation() -> None:
    """vLLM's module imported the implementation's classes (no placeholder)."""
    for name in ("TensorDeserializer", "TensorSerializer", "EncryptionParams", "DecryptionParams",
                 "open_stream", "convert_bytes", "get_mem_usage", "no_init_or_tensor"):
        obj = getattr(vt, name)
        module = getattr(obj, "__module__", "") or ""
        assert module.split(".")[0] == IMPL, f"{name} comes from {module!r}"
    other = "tensorizer_rs" if IMPL == "tensorizer" else None
    assert other is None or other not in sys.modules


@case()
def device_index_unpatched() -> None:
    """vLLM's device is f"{device_type}:{torch.accelerator.current_device_index()}";
    without an accelerator torch raises there, before tensorizer reads anything.
    Then the stand-in platform patches the index to 0 (see vllm/platforms)."""
    from vllm.platforms import accelerator_index_error, patch_accelerator_index

    error = accelerator_index_error()
    if error is not None:
        model, _, _ = make_model()
        # Any existing file passes vLLM's URI check; this one is never read.
        tc = vt.TensorizerConfig(tensorizer_uri=__file__)
        got = raises(type(error), lambda: vt.deserialize_tensorizer_model(model, tc))
        assert str(got) == str(error), (got, error)
    patch_accelerator_index()
    assert torch.accelerator.current_device_index() == 0


def _save(sub: str, dtype: str, config: Any, seed: int = 0) -> tuple[Path, str]:
    model, mc, ref = make_model(dtype, seed)
    directory = d(sub)
    vtl.TensorizerLoader.save_model(model, config(directory), mc)
    assert isinstance(getattr(model, "vllm_tensorized_marker", None), torch.nn.Parameter)
    uri = directory / "model.tensors"
    assert uri.is_file()
    check_artifacts(str(directory), local_listing(directory))
    return uri, save_ref(ref, directory / "ref.pt")


@case()
def save_fp32() -> None:
    uri, ref = _save("fp32", "float32", lambda p: vt.TensorizerConfig(tensorizer_uri=str(p / "model.tensors")))
    publish("fp32", str(uri), ref, "float32", True)


@case("save_fp32")
def is_vllm_tensorized_true() -> None:
    assert vt.is_vllm_tensorized(vt.TensorizerConfig(tensorizer_uri=str(OUT / "fp32" / "model.tensors"))) is True


@case("save_fp32", "device_index_unpatched")
def load_fp32_defaults() -> None:
    """Default TensorizerConfig: verify_hash=None, num_readers=None."""
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "fp32" / "model.tensors"))
    check_model(load(tc), torch.load(OUT / "fp32" / "ref.pt"), "float32", True)


@case("save_fp32", "device_index_unpatched")
def load_fp32_explicit_args() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "fp32" / "model.tensors"), verify_hash=True, num_readers=2)
    check_model(load(tc), torch.load(OUT / "fp32" / "ref.pt"), "float32", True)


@case()
def save_bf16() -> None:
    uri, ref = _save("bf16", "bfloat16", lambda p: vt.TensorizerConfig(tensorizer_uri=str(p / "model.tensors")),
                     seed=1)
    publish("bf16", str(uri), ref, "bfloat16", True)


@case("save_bf16", "device_index_unpatched")
def load_bf16_defaults() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "bf16" / "model.tensors"))
    check_model(load(tc, "bfloat16"), torch.load(OUT / "bf16" / "ref.pt"), "bfloat16", True)


@case()
def save_dict_config() -> None:
    """save_model with a dict, with serialization_kwargs (as vLLM's test does)."""
    uri, ref = _save("dict", "float32", lambda p: {
        "tensorizer_uri": str(p / "model.tensors"),
        "serialization_kwargs": {"limit_cpu_concurrency": 2},
    }, seed=2)
    publish("dict", str(uri), ref, "float32", True)


@case("save_dict_config", "device_index_unpatched")
def load_dict_config() -> None:
    """LoadConfig(model_loader_extra_config={"tensorizer_config": {...}})."""
    extra = {"tensorizer_config": {"tensorizer_uri": str(OUT / "dict" / "model.tensors")}}
    check_model(load(extra), torch.load(OUT / "dict" / "ref.pt"), "float32", True)


@case("save_dict_config", "device_index_unpatched")
def load_to_serializable_dict() -> None:
    """A TensorizerConfig's to_serializable() dict, as vLLM's engine passes it."""
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "dict" / "model.tensors"), num_readers=1)
    extra = {"tensorizer_config": tc.to_serializable()}
    check_model(load(extra), torch.load(OUT / "dict" / "ref.pt"), "float32", True)


def _keyfile(path: Path, key: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(key)
    return str(path)


@case()
def save_encrypted() -> None:
    keyfile = _keyfile(OUT / "keys" / "fixed.key", FIXED_KEY)
    uri, ref = _save("enc", "float32", lambda p: vt.TensorizerConfig(
        tensorizer_uri=str(p / "model.tensors"), encryption_keyfile=keyfile), seed=3)
    publish("encrypted", str(uri), ref, "float32", True, keyfile=keyfile)


@case("save_encrypted")
def is_vllm_tensorized_encrypted() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "enc" / "model.tensors"),
                             encryption_keyfile=str(OUT / "keys" / "fixed.key"))
    assert vt.is_vllm_tensorized(tc) is True


@case("save_encrypted", "device_index_unpatched")
def load_encrypted() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "enc" / "model.tensors"),
                             encryption_keyfile=str(OUT / "keys" / "fixed.key"))
    check_model(load(tc), torch.load(OUT / "enc" / "ref.pt"), "float32", True)


@case("save_encrypted", "device_index_unpatched")
def error_encrypted_wrong_key() -> None:
    keyfile = _keyfile(OUT / "keys" / "wrong.key", WRONG_KEY)
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "enc" / "model.tensors"), encryption_keyfile=keyfile)
    raises(cryptography_error(), lambda: load(tc))


@case("save_encrypted", "device_index_unpatched")
def error_encrypted_missing_key() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "enc" / "model.tensors"))
    raises(cryptography_error(), lambda: load(tc))


@case()
def tensorize_random_key() -> None:
    """tensorize_vllm_model (unmodified): EncryptionParams.random() written to
    the key file with open_stream, then the engine's workers save the model
    through collective_rpc with to_serializable()'s dict."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine import llm_engine

    directory = d("random")
    keyfile = directory / "model.key"
    tc = vt.TensorizerConfig(tensorizer_uri=str(directory / "model.tensors"), encryption_keyfile=str(keyfile))
    llm_engine.SAVED.clear()
    vt.tensorize_vllm_model(EngineArgs(model=MODEL_REF, seed=4), tc)
    assert len(keyfile.read_bytes()) == 32
    assert (directory / "model.tensors").is_file()
    check_artifacts(str(directory), local_listing(directory))
    ref = save_ref(llm_engine.SAVED[0], directory / "ref.pt")
    publish("random_key", str(directory / "model.tensors"), ref, "float32", True, keyfile=str(keyfile))


@case("tensorize_random_key", "device_index_unpatched")
def load_random_key() -> None:
    directory = OUT / "random"
    tc = vt.TensorizerConfig(tensorizer_uri=str(directory / "model.tensors"),
                             encryption_keyfile=str(directory / "model.key"))
    check_model(load(tc), torch.load(directory / "ref.pt"), "float32", True)


@case()
def tensorize_tp2_sharded() -> None:
    """TP=2: the URI's %03d gets get_tensor_model_parallel_rank() (0, 1), with
    a generated key (as vLLM's test_deserialized_encrypted_vllm_model_with_tp)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine import llm_engine

    directory = d("tp2")
    uri = str(directory / "model-%03d.tensors")
    keyfile = str(directory / "model.key")
    llm_engine.SAVED.clear()
    vt.tensorize_vllm_model(EngineArgs(model=MODEL_REF, tensor_parallel_size=2, seed=5),
                            vt.TensorizerConfig(tensorizer_uri=uri, encryption_keyfile=keyfile))
    shards = [directory / "model-000.tensors", directory / "model-001.tensors"]
    assert all(s.is_file() for s in shards), sorted(p.name for p in directory.iterdir())
    assert not (directory / "model-%03d.tensors").exists()
    for rank in (0, 1):
        ref = save_ref(llm_engine.SAVED[rank], directory / f"ref-{rank}.pt")
        publish(f"tp2_rank{rank}", uri, ref, "float32", True, keyfile=keyfile, tp=2, rank=rank)
    assert not torch.equal(llm_engine.SAVED[0]["lm_head.weight"], llm_engine.SAVED[1]["lm_head.weight"])


def _load_tp2(rank: int) -> None:
    directory = OUT / "tp2"
    tc = vt.TensorizerConfig(tensorizer_uri=str(directory / "model-%03d.tensors"),
                             encryption_keyfile=str(directory / "model.key"))
    check_model(load(tc, tp=2, rank=rank), torch.load(directory / f"ref-{rank}.pt"), "float32", True)


@case("tensorize_tp2_sharded", "device_index_unpatched")
def load_tp2_rank0() -> None:
    _load_tp2(0)


@case("tensorize_tp2_sharded", "device_index_unpatched")
def load_tp2_rank1() -> None:
    _load_tp2(1)


@case()
def save_hf_style() -> None:
    """A model serialized with tensorizer directly, without vLLM's marker (as
    vLLM's test_deserialized_hf_model_has_same_outputs writes it)."""
    model, _, ref = make_model("float32", seed=6)
    directory = d("hf")
    with vt.open_stream(str(directory / "model.tensors"), "wb+") as stream:
        serializer = vt.TensorSerializer(stream)
        serializer.write_module(model)
        serializer.close()
    publish("hf_style", str(directory / "model.tensors"), save_ref(ref, directory / "ref.pt"), "float32", False)


@case("save_hf_style")
def is_vllm_tensorized_false() -> None:
    assert vt.is_vllm_tensorized(vt.TensorizerConfig(tensorizer_uri=str(OUT / "hf" / "model.tensors"))) is False


@case("save_hf_style")
def load_hf_style_defaults() -> None:
    """Not vLLM-tensorized: _load_model_serialized_cpu, tensorizer_weights_iterator."""
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "hf" / "model.tensors"))
    check_model(load(tc), torch.load(OUT / "hf" / "ref.pt"), "float32", False)


@case("save_hf_style")
def load_hf_style_bf16_num_readers_1() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "hf" / "model.tensors"), num_readers=1)
    check_model(load(tc, "bfloat16"), torch.load(OUT / "hf" / "ref.pt"), "bfloat16", False)


@case("save_hf_style")
def load_hf_style_explicit_args() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "hf" / "model.tensors"), verify_hash=True, num_readers=1)
    check_model(load(tc), torch.load(OUT / "hf" / "ref.pt"), "float32", False)


@case()
def error_invalid_uri() -> None:
    model, _, _ = make_model()
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "missing" / "model.tensors"))
    raises(ValueError, lambda: vt.deserialize_tensorizer_model(model, tc), match="is not a valid tensorizer URI")


@case()
def error_missing_file() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "missing" / "model.tensors"))
    raises(FileNotFoundError, lambda: load(tc))


@case("save_fp32")
def error_stream_kwargs_bad_mode() -> None:
    """vLLM's test_assert_stream_kwargs_passed_to_tensor_deserializer: ValueError from open_stream."""
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "fp32" / "model.tensors"), stream_kwargs={"mode": "foo"},
                             deserialization_kwargs={"num_readers": 1})
    raises(ValueError, lambda: load(tc))


@case("save_fp32")
def error_deserialization_kwargs_bad_num_readers() -> None:
    """vLLM's test_assert_deserialization_kwargs_passed_to_tensor_deserializer:
    num_readers="bar" is a TypeError from TensorDeserializer.__init__."""
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "fp32" / "model.tensors"),
                             deserialization_kwargs={"num_readers": "bar"})
    raises(TypeError, lambda: load(tc), match="num_readers")


@case()
def error_blacklisted_args() -> None:
    for illegal in sorted(vtl.BLACKLISTED_TENSORIZER_ARGS):
        extra = {"tensorizer_uri": str(OUT / "fp32" / "model.tensors"), illegal: "foo"}
        raises(ValueError, lambda: vtl.TensorizerLoader(LoadConfig(model_loader_extra_config=extra)),
               match=f"{illegal} is not an allowed Tensorizer argument.")


@case()
def error_tp2_uri_without_template() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=str(OUT / "fp32" / "model.tensors"))
    raises(ValueError, lambda: load(tc, tp=2), match="For a sharded model, tensorizer_uri should include")


# --------------------------------------------------------------------------
# Cases: S3 (moto_server), explicit credentials, then ~/.s3cfg
# --------------------------------------------------------------------------


def s3_uri(*parts: str) -> str:
    return "/".join([f"s3://{S3['bucket']}", IMPL, *parts])


def s3_key(uri: str) -> str:
    return uri.split("/", 3)[3]


def s3_client() -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=S3["endpoint"], aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


def s3_listing(prefix_uri: str) -> Callable[[], dict[str, bytes]]:
    def listing() -> dict[str, bytes]:
        client = s3_client()
        prefix = s3_key(prefix_uri) + "/"
        out = {}
        for obj in client.list_objects_v2(Bucket=S3["bucket"], Prefix=prefix).get("Contents", []):
            name = obj["Key"][len(prefix):]
            if "/" not in name:
                out[name] = client.get_object(Bucket=S3["bucket"], Key=obj["Key"])["Body"].read()
        return out

    return listing


def explicit(**kw: Any) -> Any:
    """A TensorizerConfig with the moto server's credentials and endpoint;
    force_http because the endpoint is http:// (tensorizer requires https
    for an explicit endpoint otherwise)."""
    return vt.TensorizerConfig(s3_access_key_id="testing", s3_secret_access_key="testing",
                               s3_endpoint=S3["endpoint"], stream_kwargs={"force_http": True}, **kw)


@case(group="s3")
def s3_save() -> None:
    model, mc, ref = make_model("float32", seed=7)
    uri = s3_uri("explicit", "model.tensors")
    vtl.TensorizerLoader.save_model(model, explicit(tensorizer_uri=uri), mc)
    listing = s3_listing(s3_uri("explicit"))
    assert "model.tensors" in listing(), sorted(listing())
    check_artifacts(s3_uri("explicit"), listing)
    save_ref(ref, d("s3") / "explicit-ref.pt")


@case("s3_save", group="s3")
def s3_is_vllm_tensorized() -> None:
    assert vt.is_vllm_tensorized(explicit(tensorizer_uri=s3_uri("explicit", "model.tensors"))) is True


@case("s3_save", "device_index_unpatched", group="s3")
def s3_load() -> None:
    tc = explicit(tensorizer_uri=s3_uri("explicit", "model.tensors"))
    check_model(load(tc), torch.load(OUT / "s3" / "explicit-ref.pt"), "float32", True)


@case("device_index_unpatched", group="s3")
def s3_encrypted_key_on_s3() -> None:
    """Saved encrypted to S3; loaded with encryption_keyfile an s3:// URI
    (TensorizerArgs reads it with open_stream and the stream kwargs)."""
    model, mc, ref = make_model("bfloat16", seed=8)
    keyfile = _keyfile(OUT / "keys" / "s3.key", FIXED_KEY)
    uri = s3_uri("enc", "model.tensors")
    vtl.TensorizerLoader.save_model(model, explicit(tensorizer_uri=uri, encryption_keyfile=keyfile), mc)
    key_uri = s3_uri("keys", "model.key")
    s3_client().put_object(Bucket=S3["bucket"], Key=s3_key(key_uri), Body=FIXED_KEY)
    check_model(load(explicit(tensorizer_uri=uri, encryption_keyfile=key_uri), "bfloat16"), ref, "bfloat16", True)


@case("save_hf_style", group="s3")
def s3_load_hf_style() -> None:
    uri = s3_uri("hf", "model.tensors")
    s3_client().put_object(Bucket=S3["bucket"], Key=s3_key(uri), Body=(OUT / "hf" / "model.tensors").read_bytes())
    check_model(load(explicit(tensorizer_uri=uri)), torch.load(OUT / "hf" / "ref.pt"), "float32", False)


def _write_s3cfg() -> None:
    host = S3["endpoint"].split("://", 1)[1]
    path = Path(os.path.expanduser("~/.s3cfg"))
    assert str(path).startswith(os.environ["HOME"]), path
    path.write_text(f"[default]\naccess_key = testing\nsecret_key = testing\nhost_base = {host}\n"
                    f"host_bucket = {host}\nuse_https = False\n")


@case(group="s3")
def s3cfg_save() -> None:
    """No credentials nor endpoint in the config: ~/.s3cfg gives them."""
    _write_s3cfg()
    model, mc, ref = make_model("float32", seed=9)
    uri = s3_uri("s3cfg", "model.tensors")
    vtl.TensorizerLoader.save_model(model, vt.TensorizerConfig(tensorizer_uri=uri), mc)
    check_artifacts(s3_uri("s3cfg"), s3_listing(s3_uri("s3cfg")))
    save_ref(ref, d("s3") / "s3cfg-ref.pt")


@case("s3cfg_save", "device_index_unpatched", group="s3")
def s3cfg_load() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=s3_uri("s3cfg", "model.tensors"))
    check_model(load(tc), torch.load(OUT / "s3" / "s3cfg-ref.pt"), "float32", True)


@case("s3cfg_save", "device_index_unpatched", group="s3")
def s3cfg_load_explicit_args() -> None:
    tc = vt.TensorizerConfig(tensorizer_uri=s3_uri("s3cfg", "model.tensors"), verify_hash=True, num_readers=1)
    check_model(load(tc), torch.load(OUT / "s3" / "s3cfg-ref.pt"), "float32", True)


# --------------------------------------------------------------------------
# Cases: the files the other implementation wrote, loaded through vLLM
# --------------------------------------------------------------------------

FOREIGN_NAMES = ("fp32", "bf16", "dict", "encrypted", "random_key", "tp2_rank0", "tp2_rank1", "hf_style")


def _load_foreign(name: str) -> None:
    assert FOREIGN is not None
    entries = {e["name"]: e for e in json.loads((FOREIGN / "manifest.json").read_text())}
    assert name in entries, f"the other implementation did not write {name!r} (its save case failed)"
    e = entries[name]
    tc = vt.TensorizerConfig(tensorizer_uri=e["uri"], encryption_keyfile=e["keyfile"])
    assert vt.is_vllm_tensorized(vt.TensorizerConfig(
        tensorizer_uri=e["uri"] % e["rank"] if e["tp"] > 1 else e["uri"],
        encryption_keyfile=e["keyfile"])) is e["vllm_tensorized"]
    model = load(tc, e["dtype"], tp=e["tp"], rank=e["rank"])
    check_model(model, torch.load(e["ref"]), e["dtype"], e["vllm_tensorized"])


for _name in FOREIGN_NAMES:
    def _foreign(name: str = _name) -> None:
        _load_foreign(name)

    _foreign.__name__ = f"cross_{_name}"
    case("device_index_unpatched", group="foreign")(_foreign)


# --------------------------------------------------------------------------


def _alias_tensorizer() -> None:
    """``import tensorizer`` gives tensorizer_rs, the supported way."""
    importlib.import_module("tensorizer_rs").install_as_tensorizer()


def main() -> int:
    global IMPL, OUT, FOREIGN, torch, tensorizer, vt, vtl, vcfg, LoadConfig
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=("tensorizer", "tensorizer_rs"), required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--s3-endpoint")
    parser.add_argument("--s3-bucket", default="models")
    parser.add_argument("--foreign")
    parser.add_argument("--foreign-only", action="store_true")
    args = parser.parse_args()

    IMPL = args.impl
    OUT = Path(args.out)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.s3_endpoint:
        S3.update(endpoint=args.s3_endpoint, bucket=args.s3_bucket)
    FOREIGN = Path(args.foreign) if args.foreign else None

    if IMPL == "tensorizer_rs":
        _alias_tensorizer()
    sys.path.insert(0, args.src)
    import torch as _torch

    torch = _torch
    tensorizer = importlib.import_module("tensorizer")
    import vllm.config as _vcfg
    import vllm.model_executor.model_loader.tensorizer as _vt
    import vllm.model_executor.model_loader.tensorizer_loader as _vtl
    from vllm.config.load import LoadConfig as _LoadConfig

    vcfg, vt, vtl, LoadConfig = _vcfg, _vt, _vtl, _LoadConfig
    assert Path(vt.__file__).resolve().is_relative_to(Path(args.src).resolve())

    results: dict[str, dict[str, str]] = {}
    for c in CASES:
        if args.foreign_only and c.group != "foreign" and c.name != "device_index_unpatched":
            continue
        if c.group == "s3" and not S3:
            results[c.name] = {"status": "not_run", "detail": "no S3 server"}
            continue
        if c.group == "foreign" and FOREIGN is None:
            continue
        failed = [n for n in c.needs if results.get(n, {}).get("status") != "pass"]
        if failed:
            results[c.name] = {"status": "not_run", "detail": f"needs {', '.join(failed)}, which did not pass"}
            continue
        print(f"case {c.name}", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            c.fn()
        except BaseException as e:  # noqa: BLE001
            tb = traceback.format_exc()
            results[c.name] = {"status": "fail", "detail": f"{type(e).__module__}.{type(e).__qualname__}: {e}",
                               "traceback": tb}
        else:
            results[c.name] = {"status": "pass", "detail": ""}
        finally:
            results[c.name]["seconds"] = f"{time.monotonic() - started:.2f}"
            import vllm.distributed

            vllm.distributed.TP_RANK = 0
        # After every case, so a crash or a hang keeps what ran before it.
        (OUT / "manifest.json").write_text(json.dumps(MANIFEST, indent=1))
        Path(args.results).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
