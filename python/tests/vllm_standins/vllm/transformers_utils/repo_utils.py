"""Stand-in for vllm.transformers_utils.repo_utils: a hub API whose
snapshot_download writes a model's small artifacts locally (no network)."""

import fnmatch
import json
import os
from collections.abc import Iterable

#: What snapshot_download "downloads" for every repository: the files that
#: serialize_extra_artifacts keeps, and ones its ignore_patterns drop.
def artifacts(repo_id: str, revision: str | None) -> dict[str, bytes]:
    config = {"architectures": ["TinyForCausalLM"], "model_type": "tiny", "_name_or_path": repo_id,
              "revision": revision}
    return {
        "config.json": json.dumps(config, sort_keys=True).encode(),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "WordLevel"}}).encode(),
        "README.md": b"# ignored\n",
        "model.safetensors": b"ignored",
    }


class _StandinHfApi:
    def snapshot_download(
        self,
        repo_id: str,
        *,
        revision: str | None = None,
        local_dir: str | None = None,
        ignore_patterns: Iterable[str] | None = None,
        **_: object,
    ) -> str:
        assert local_dir is not None
        patterns = list(ignore_patterns or ())
        for name, data in artifacts(repo_id, revision).items():
            if any(fnmatch.fnmatch(name, p) for p in patterns):
                continue
            with open(os.path.join(local_dir, name), "wb") as f:
                f.write(data)
        return local_dir


def hf_api() -> _StandinHfApi:
    return _StandinHfApi()
