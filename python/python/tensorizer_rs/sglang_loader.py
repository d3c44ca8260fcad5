"""SGLang's model loader over tensorizer_rs: pass the class itself as
``load_format`` (SGLang's ``get_model_loader`` instantiates a class given
there), with the file in ``model_loader_extra_config``::

    from tensorizer_rs.sglang_loader import TensorizerRsSglangLoader
    LoadConfig(load_format=TensorizerRsSglangLoader,
               model_loader_extra_config={"uri": "s3://bucket/model.tensors"})

SGLang builds the model as its own default loader does, then the file's
tensors go through the model's ``load_weights`` (name and tensor pairs,
fused and sharded by the model) and SGLang's own post-processing, so the
result is what SGLang's safetensors path gives. The configuration keys are
``KEYS``; anything else is refused, naming the known ones.

This module imports SGLang: import it only where SGLang is installed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from sglang.srt.model_loader import loader as sgl_loader  # type: ignore[import-not-found]

from . import _deserializer, _model, _native

KEYS: Mapping[str, str] = {
    "uri": "the file: a path or an http(s)://, s3://, gs://, az:// or redis:// URI, "
    "or a Hugging Face folder or its *.index.json",
    "verify_hash": "check every tensor's stored hashes as it loads (default false)",
    "num_readers": "parallel reads (default: chosen from the number of CPU cores)",
}


def _config(extra: Any) -> dict[str, Any]:
    """The checked ``model_loader_extra_config`` (one-line errors)."""
    if not isinstance(extra, Mapping):
        raise ValueError(f'model_loader_extra_config must be a mapping with "uri", not {type(extra).__name__}')
    unknown = sorted(set(extra) - set(KEYS))
    if unknown:
        raise ValueError(
            f"model_loader_extra_config: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"the known keys are {', '.join(KEYS)}"
        )
    if not isinstance(extra.get("uri"), str) or not extra["uri"]:
        raise ValueError(f'model_loader_extra_config: "uri" is required ({KEYS["uri"]})')
    if not isinstance(extra.get("verify_hash", False), bool):
        raise ValueError('model_loader_extra_config: "verify_hash" must be true or false')
    return dict(extra)


class TensorizerRsSglangLoader(sgl_loader.BaseModelLoader):  # type: ignore[misc]
    """SGLang's loader for a tensorizer_rs file (``load_format=`` this class)."""

    def __init__(self, load_config: Any) -> None:
        super().__init__(load_config)
        self.config = _config(load_config.model_loader_extra_config or {})

    def _weights(self, device: torch.device) -> Iterator[tuple[str, torch.Tensor]]:
        c = self.config
        pairs = _model.iter_state_dict(
            c["uri"],
            device=device,
            lazy_load=True,
            verify_hash=c.get("verify_hash", False),
            num_readers=c.get("num_readers"),
        )
        for name, tensor in pairs:
            yield str(name).removeprefix("."), tensor

    def download_model(self, model_config: Any) -> None:
        """Checks that the file opens (its header and index read), or that
        a sharded model's index names shards that are there."""
        uri = self.config["uri"]
        if _native.is_sharded(uri):
            _native.open_sharded(uri)
            return
        with _deserializer.TensorDeserializer(uri, device="cpu", lazy_load=True):
            pass

    def load_model(self, *, model_config: Any, device_config: Any) -> torch.nn.Module:
        """SGLang's model, built as its default loader builds it, with the
        file's tensors through ``load_weights`` and SGLang's post-processing."""
        target = torch.device(device_config.device)
        quant_config = sgl_loader._get_quantization_config(model_config, self.load_config)
        with sgl_loader.set_default_torch_dtype(model_config.dtype):
            with target:
                model = sgl_loader._initialize_model(model_config, self.load_config, quant_config)
            sgl_loader.DefaultModelLoader.load_weights_and_postprocess(model, self._weights(target), target)
        module: torch.nn.Module = model.eval()
        return module
