"""``tensorizer_rs.sglang_loader`` with the real SGLang 0.5.23: the wheel
pip-installed beside SGLang.

    python tests/sglang-loader-smoke.py WHEEL

Run with the test environment's interpreter. The environment is
target/sglang-venv (kept between runs): SGLang and the packages its loader
and its Llama import, pinned in tests/sglang-requirements.txt and installed
with --no-deps, torch, numpy and transformers borrowed from the test
environment through a path entry, and WHEEL installed over whatever was
there. Inside it: SGLang's ``get_model_loader`` instantiates our class given
as ``load_format``; SGLang's own LlamaForCausalLM (tiny config), built on the
CPU at tensor-parallel size 1 (gloo), gets the Hugging Face checkpoint's
weights from ``load_model`` (after SGLang's fusing); an unknown key and a
missing file are refused in one line. Without network it prints SKIPPED.
"""

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import engine_venv

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "sglang-venv"

INSIDE = r'''
import os, socket, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
from tensorizer_rs import TensorSerializer
from sglang.srt.configs.device_config import DeviceConfig
from sglang.srt.configs.load_config import LoadConfig
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel, parallel_state
from sglang.srt.model_loader.loader import get_model_loader
from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
from sglang.srt.server_args import ServerArgs
from tensorizer_rs.sglang_loader import TensorizerRsSglangLoader

tmp = sys.argv[1]
torch.manual_seed(0)
config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
hf = LlamaForCausalLM(config)
folder = os.path.join(tmp, "llama")
hf.save_pretrained(folder)
sd = {k: v.detach().clone() for k, v in hf.state_dict().items()}
path = os.path.join(tmp, "llama.tensors")
with TensorSerializer(path) as s:
    s.write_state_dict(sd)


def loader(extra):
    return get_model_loader(LoadConfig(load_format=TensorizerRsSglangLoader, model_loader_extra_config=extra))


l = loader({"uri": path, "verify_hash": True})
assert type(l) is TensorizerRsSglangLoader, type(l)
l.download_model(None)
print("ok: SGLang's get_model_loader takes our loader class as load_format")

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                             distributed_init_method=f"tcp://127.0.0.1:{port}")
reset_context()  # SGLang's published topology, as its launcher publishes it
publish(ServerArgs(model_path=folder, tp_size=1, device="cpu"), role="test", ranks=SpawnRanks(world_rank=0))
get_parallel().override_permanently(world_group=parallel_state._WORLD)
initialize_model_parallel()
model = l.load_model(model_config=ModelConfig(model_path=folder, dtype="float32"), device_config=DeviceConfig("cpu"))
assert type(model).__module__ == "sglang.srt.models.llama", type(model)
want = {k: v for k, v in sd.items() if not k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                                        "gate_proj.weight", "up_proj.weight"))}
for i in range(config.num_hidden_layers):
    p = f"model.layers.{i}."
    want[p + "self_attn.qkv_proj.weight"] = torch.cat([sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
    want[p + "mlp.gate_up_proj.weight"] = torch.cat([sd[p + f"mlp.{x}_proj.weight"] for x in ("gate", "up")])
got = dict(model.named_parameters())
assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
assert all(torch.equal(got[k], want[k]) for k in want), [k for k in want if not torch.equal(got[k], want[k])]
print("ok: SGLang's own LlamaForCausalLM, built on the CPU, load_model gives the Hugging Face weights")

for extra, words in (({"uri": path, "tensorizer_uri": path}, ["'tensorizer_uri'", "uri, verify_hash"]),
                     ({}, ['"uri" is required'])):
    try:
        loader(extra)
        raise AssertionError(f"accepted {extra}")
    except ValueError as e:
        assert "\n" not in str(e) and all(w in str(e) for w in words), str(e)
try:
    loader({"uri": os.path.join(tmp, "missing.tensors")}).download_model(None)
    raise AssertionError("a missing file opened")
except FileNotFoundError:
    pass
print("ok: an unknown key, no uri and a missing file are refused")
'''



def main() -> None:
    wheel = Path(sys.argv[1]).resolve()
    engine_venv.install(VENV, "sglang-requirements.txt", wheel, "SGLang")
    env = engine_venv.environment(VENV)
    with tempfile.TemporaryDirectory() as tmp:
        python = [str(VENV / "bin" / "python"), "-c", textwrap.dedent(INSIDE), tmp]
        done = engine_venv.run(python, env=env, cwd=VENV, timeout=600)
        print(done.stdout, end="")
        if done.returncode != 0:
            raise SystemExit(f"sglang-loader-smoke: FAILED\n{done.stderr[-4000:]}")
    print("sglang-loader-smoke: every check passed")


if __name__ == "__main__":
    main()
