"""``vllm serve MODEL --load-format tensorizer_rs``: a vLLM model loader
over ``TensorDeserializer`` (the one native load path).

vLLM builds the model as usual, then this loader hands the file's tensors
to the model's own ``load_weights`` (the protocol every vLLM model
implements: name and tensor pairs, mapped onto its layers, fused and
sharded as the model needs), loaded straight onto the model's device. The
base ``load_model`` runs around it, so ``process_weights_after_loading``
still runs. ``get_all_weights`` gives the same pairs (vLLM's in-place weight
reload asks for it).

``--model-loader-extra-config`` is a JSON object; its keys are ``KEYS``
(anything else is refused, naming the known ones). Keys and passphrases
come from a file or an environment variable, never the command line.

With ``"tp_slices": true`` the ``uri`` is one file at full size whose
tensors are named and shaped as the model's own parameters (say, written by
``write_module`` from the model built at tensor-parallel size 1). Each rank
then reads only its share (``tensorizer_rs.vllm.load_tp_share``: a slice
plan from the model's parameter shapes, read by ``load_shards``) and copies
it into the parameters directly, as vLLM's ``sharded_state`` format does:
the model's ``load_weights``, which would cut again, is not called. For the
same reason ``get_all_weights`` then gives these shares, which vLLM's
in-place reload takes as already processed (``is_checkpoint_format=False``),
not as a checkpoint.

A ``uri`` that is a Hugging Face folder or its ``*.index.json`` loads the
safetensors shards as published (``tensorizer_rs.load_state_dict``'s files,
checked against the index): every rank reads them whole and the model's
``load_weights`` cuts its share, as vLLM's own loader does; no conversion.

This module imports vLLM: it is imported by ``vllm_plugin.register`` only
in processes where vLLM is already loaded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from vllm.model_executor.model_loader import base_loader  # type: ignore[import-not-found]

from . import _deserializer, _model, _native
from ._crypt import DecryptionParams
from .vllm import load_tp_share

#: The name passed to ``--load-format``.
LOAD_FORMAT = "tensorizer_rs"

#: Every key ``--model-loader-extra-config`` may hold, with its meaning.
KEYS: Mapping[str, str] = {
    "uri": "the file: a path or an http(s)://, s3://, gs://, az:// or redis:// URI, or a Hugging Face "
    "folder or its *.index.json (safetensors shards, read as published); "
    "with tensor parallelism, one file per rank named by {rank} or a %-format such as %02d",
    "verify_hash": "check every tensor's stored hashes as it loads (default false)",
    "num_readers": "parallel reads (default: chosen from the number of CPU cores)",
    "mmap": 'false (default), true or "auto": tensors as views of a memory map of a local file',
    "tp_slices": "true: uri is one file at full size, named and shaped as the model's parameters, "
    "from which each tensor-parallel rank reads only its share (default false)",
    "key_file": "a file holding the 32-byte encryption key",
    "key_env": "an environment variable holding the encryption key, hex-encoded",
    "passphrase_file": "a file holding the passphrase (one line)",
    "passphrase_env": "an environment variable holding the passphrase",
}


class ConfigError(ValueError):
    """``--model-loader-extra-config`` cannot be used; the message says why
    in one line."""


@dataclass(frozen=True)
class LoaderConfig:
    """The loader's settings, checked once (``from_extra``)."""

    uri: str
    verify_hash: bool = False
    num_readers: int | None = None
    mmap: bool | Literal["auto"] = False
    encryption: DecryptionParams | None = None
    tp_slices: bool = False

    @classmethod
    def from_extra(cls, extra: Any) -> LoaderConfig:
        """Checks vLLM's ``model_loader_extra_config`` (a mapping)."""
        if not isinstance(extra, Mapping):
            raise ConfigError(
                f"--model-loader-extra-config for {LOAD_FORMAT} must be a JSON object with "
                f'at least "uri", not {type(extra).__name__}'
            )
        unknown = sorted(set(extra) - set(KEYS))
        if unknown:
            raise ConfigError(
                f"--model-loader-extra-config: unknown key(s) {', '.join(map(repr, unknown))} "
                f"for {LOAD_FORMAT}; the known keys are {', '.join(KEYS)}"
            )
        uri = extra.get("uri")
        if not isinstance(uri, str) or not uri:
            raise ConfigError(f'--model-loader-extra-config: "uri" is required ({KEYS["uri"]})')
        mmap = extra.get("mmap", False)
        if mmap not in (True, False, "auto"):
            raise ConfigError(f'--model-loader-extra-config: "mmap" is {KEYS["mmap"]}, not {mmap!r}')
        readers = extra.get("num_readers")
        if readers is not None and (not isinstance(readers, int) or isinstance(readers, bool) or readers < 1):
            raise ConfigError(f'--model-loader-extra-config: "num_readers" must be a whole number ≥ 1, not {readers!r}')
        verify, slices = (extra.get(k, False) for k in ("verify_hash", "tp_slices"))
        for key, value in (("verify_hash", verify), ("tp_slices", slices)):
            if not isinstance(value, bool):
                raise ConfigError(f'--model-loader-extra-config: "{key}" must be true or false, not {value!r}')
        if slices and mmap:
            raise ConfigError('--model-loader-extra-config: "tp_slices" reads shares, not whole tensors; drop "mmap"')
        return cls(uri, verify, readers, mmap, _encryption(extra), slices)

    def uri_for(self, rank: int) -> str:
        """The file tensor-parallel rank `rank` loads (``uri`` as written
        with ``tp_slices``)."""
        if self.tp_slices:
            return self.uri
        if "{rank}" in self.uri:
            return self.uri.replace("{rank}", str(rank))
        # A %d directive (%d, %02d, ...), as vLLM's tensorizer loader takes
        # it; other % signs (percent-encoding) are left alone.
        return re.sub(r"%(0?\d*)d", lambda m: format(rank, m.group(1) + "d"), self.uri, count=1)


def _encryption(extra: Mapping[str, Any]) -> DecryptionParams | None:
    """The decryption parameters the key_*/passphrase_* keys name, or None."""
    given = [k for k in ("key_file", "key_env", "passphrase_file", "passphrase_env") if extra.get(k)]
    if len(given) > 1:
        raise ConfigError(f"--model-loader-extra-config: give one of {', '.join(given)}, not several")
    if not given:
        return None
    name, where = given[0], str(extra[given[0]])
    if name.endswith("_env"):
        value = os.environ.get(where)
        if not value:
            raise ConfigError(f"--model-loader-extra-config: {name}: the environment variable {where} is not set")
        secret = value.strip().encode()
    else:
        try:
            with open(where, "rb") as f:
                secret = f.read()
        except OSError as e:
            raise ConfigError(f"--model-loader-extra-config: {name}: cannot read {where}: {e.strerror}") from None
    if name.startswith("passphrase"):
        return DecryptionParams.from_string(secret.decode().rstrip("\r\n"))
    key = bytes.fromhex(secret.decode()) if name == "key_env" else secret
    return DecryptionParams.from_key(key)


def _tensor_parallel() -> tuple[int, int]:
    """This process's tensor-parallel rank and world size ((0, 1) outside
    a parallel group)."""
    try:
        from vllm import distributed  # type: ignore[import-not-found]

        return int(distributed.get_tensor_model_parallel_rank()), int(
            distributed.get_tensor_model_parallel_world_size()
        )
    except (AssertionError, ImportError, RuntimeError):
        return 0, 1


def _tp_group() -> Any:
    """vLLM's tensor-parallel group on the CPU (gloo) when this process is
    one of several ranks, else ``None``."""
    try:
        from vllm import distributed

        if int(distributed.get_tensor_model_parallel_world_size()) > 1:
            return distributed.get_tp_group().cpu_group
    except (AssertionError, ImportError, RuntimeError, AttributeError):
        pass
    return None


def _device_of(model: torch.nn.Module) -> torch.device:
    """Where the model's weights live (the CPU for a model on the meta
    device or with no parameters)."""
    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cpu")


class TensorizerRsLoader(base_loader.BaseModelLoader):  # type: ignore[misc]
    """vLLM's loader for ``--load-format tensorizer_rs``."""

    def __init__(self, load_config: Any) -> None:
        super().__init__(load_config)
        self.config = LoaderConfig.from_extra(load_config.model_loader_extra_config or {})

    def _open(self, device: Any, *, lazy: bool = False) -> _deserializer.TensorDeserializer:
        c = self.config
        return _deserializer.TensorDeserializer(
            c.uri_for(_tensor_parallel()[0]),
            device=device,
            lazy_load=lazy,
            verify_hash=c.verify_hash,
            num_readers=c.num_readers,
            encryption=c.encryption,
            mmap=c.mmap,
        )

    def download_model(self, model_config: Any) -> None:
        """Checks that the file opens (its header and index read), or that
        a sharded model's index names shards that are there."""
        uri = self.config.uri_for(_tensor_parallel()[0])
        if _native.is_sharded(uri):
            _native.open_sharded(uri)
            return
        with self._open("cpu", lazy=True):
            pass

    def get_all_weights(self, model_config: Any, model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        """Every tensor of the file, by name, on the model's device, read in
        file order a window at a time (a whole model is never held twice on
        the device: the model's ``load_weights`` copies each one in before
        the next window is read). The top module's own tensors, which
        ``write_module`` names ``.name``, come without the leading dot, as
        the model's ``named_parameters`` names them. With ``tp_slices``,
        this rank's shares, named and shaped as the model's parameters."""
        if self.config.tp_slices:
            yield from self._shares(model)
            return
        for name, tensor in self._weights(_device_of(model)):
            yield str(name).removeprefix("."), tensor

    def _weights(self, device: Any) -> Iterator[tuple[Any, torch.Tensor]]:
        """This rank's file, or the shards of a folder or ``*.index.json``
        (a Hugging Face model as published, spec §26.5), a window at a time.
        Where every rank of the tensor-parallel group reads the same file,
        they read it together (spec §24): each rank reads its share and the
        shares are exchanged over the group's gloo backend, so the store
        serves the file once, not once per rank."""
        c = self.config
        options: dict[str, Any] = {"verify_hash": c.verify_hash, "num_readers": c.num_readers, "encryption": c.encryption}
        uri = c.uri_for(_tensor_parallel()[0])
        per_rank = c.uri_for(0) != c.uri_for(1)
        group = None if per_rank or _native.is_sharded(uri) else _tp_group()
        if group is None:
            yield from _model.iter_state_dict(uri, device=device, lazy_load=True, mmap=c.mmap, **options)
            return
        with _deserializer.TensorDeserializer(uri, device="cpu", process_group=group, **options) as d:
            yield from d.items()

    def _shares(self, model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        c = self.config
        return load_tp_share(
            model,
            c.uri,
            *_tensor_parallel(),
            device=_device_of(model),
            verify_hash=c.verify_hash,
            num_readers=c.num_readers,
            encryption=c.encryption,
        )

    def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
        """The file's tensors through the model's own ``load_weights``; with
        ``tp_slices``, this rank's shares copied into the parameters."""
        if not self.config.tp_slices:
            model.load_weights(self.get_all_weights(model_config, model))  # type: ignore[operator]
            return
        targets = dict(model.named_parameters()) | dict(model.named_buffers())
        with torch.no_grad():
            for name, share in self._shares(model):
                targets[name].copy_(share)


def register() -> None:
    """Registers ``TensorizerRsLoader`` as ``--load-format tensorizer_rs``
    (once: a second call finds it registered)."""
    from vllm.model_executor import model_loader  # type: ignore[import-not-found]

    if model_loader._LOAD_FORMAT_TO_MODEL_LOADER.get(LOAD_FORMAT) is not TensorizerRsLoader:
        model_loader.register_model_loader(LOAD_FORMAT)(TensorizerRsLoader)
