"""``--load-format tensorizer_rs`` with the real vLLM 0.33.0: the wheel
pip-installed beside vLLM, found by vLLM's own plugin loading.

    python tests/vllm-plugin-smoke.py WHEEL

Run with the test environment's interpreter. The environment is
target/vllm-venv (kept between runs): vLLM and the small packages its
loader registry imports, pinned in tests/vllm-requirements.txt and
installed with --no-deps (vLLM's wheel from target/releases when a test
already fetched it), torch and numpy borrowed from the test environment
through a path entry, and WHEEL installed over whatever was there. Then,
inside it: vLLM's ``load_general_plugins()`` runs our entry point, its
``get_model_loader`` gives our loader, which loads a file (and a Hugging
Face folder of safetensors shards: local, its index, an S3 prefix) through
a model's ``load_weights`` protocol, yields every tensor from
``get_all_weights``, decrypts with a key from the environment, picks the
file of its tensor-parallel rank, and refuses bad configuration in one
line; vLLM's own LlamaForCausalLM (tiny config), built on the CPU
(``VLLM_TARGET_DEVICE=cpu``) in a gloo world of size 1 and, in two
processes, of size 2, gets the Hugging Face checkpoint's weights from
``load_model`` (after vLLM's fusing and cutting), at size 2 also by
``tp_slices`` from vLLM's size-1 parameters; ``tensorizer_rs.vllm.serialize_for_tp``'s per-rank files load
through our loader and vLLM's built-in tensorizer format (on tensorizer
2.10.1, vLLM's pin, and, in a second process with
``TENSORIZER_RS_AS_TENSORIZER=1``, on tensorizer_rs, there also into vLLM's
Llama); with ``tp_slices``
each rank copies its share of one file into its parameters. Without network
it prints SKIPPED.
"""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import engine_venv

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "vllm-venv"

TINY = r'''
class Tiny(torch.nn.Module):
    """vLLM's weight-loading protocol: load_weights(pairs) -> names loaded."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)
        self.norm = torch.nn.LayerNorm(3)
        self.scale = torch.nn.Parameter(torch.rand(3))  # the top module's own

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        done = set()
        for name, tensor in weights:
            params[name].data.copy_(tensor)
            done.add(name)
        return done
'''

#: vLLM's own Llama (a tiny config) built on the CPU in a gloo world of tp
#: ranks, vLLM's CPU platform chosen by VLLM_TARGET_DEVICE=cpu.
LLAMA = r'''
import socket
from vllm.config import DeviceConfig, ModelConfig, ParallelConfig, VllmConfig, set_current_vllm_config
from vllm import distributed
from vllm.distributed import init_distributed_environment, initialize_model_parallel


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_llama(tmp):
    """A Hugging Face LlamaForCausalLM from a config (random weights): its
    folder (config.json for vLLM) and its state dict in our format."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
    hf = LlamaForCausalLM(config)
    hf.save_pretrained(os.path.join(tmp, "llama"))
    sd = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    with TensorSerializer(os.path.join(tmp, "llama.tensors")) as s:
        s.write_state_dict(sd)
    torch.save(sd, os.path.join(tmp, "llama.pt"))


def vllm_llama(tmp, tp, rank, port, load_format="tensorizer_rs", extra=None):
    """vLLM's Llama loaded from llama.tensors by load_format (ours, or
    vLLM's built-in tensorizer), or by ours with extra."""
    model_config = ModelConfig(model=os.path.join(tmp, "llama"), skip_tokenizer_init=True, dtype="float32",
                               enforce_eager=True, max_model_len=128)
    uri = os.path.join(tmp, "llama.tensors")
    extra = extra or {"uri": uri, "verify_hash": True}
    if load_format == "tensorizer":
        extra = {"tensorizer_config": {"tensorizer_uri": uri, "verify_hash": True}}
    load_config = LoadConfig(load_format=load_format, model_loader_extra_config=extra)
    vllm_config = VllmConfig(model_config=model_config, load_config=load_config, device_config=DeviceConfig("cpu"),
                             parallel_config=ParallelConfig(tensor_parallel_size=tp))
    with set_current_vllm_config(vllm_config):
        if not distributed.model_parallel_is_initialized():
            init_distributed_environment(world_size=tp, rank=rank, local_rank=rank, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{port}")
            initialize_model_parallel(tp, 1)
        model = get_model_loader(load_config).load_model(vllm_config=vllm_config, model_config=model_config)
    assert type(model).__module__ == "vllm.model_executor.models.llama", type(model)
    return model


def llama_share(sd, tp, rank):
    """What vLLM's Llama holds at rank of tp after loading sd: q, k, v and
    gate, up fused; column-parallel layers and the vocabulary cut by rows,
    row-parallel ones by columns, norms whole."""
    def cut(t, dim):
        return torch.tensor_split(t, tp, dim)[rank]

    want = {}
    for name, t in sd.items():
        if name.endswith(("k_proj.weight", "v_proj.weight", "up_proj.weight")):
            continue
        if name.endswith("q_proj.weight"):
            parts = [sd[name.replace("q_proj", f"{x}_proj")] for x in "qkv"]
            want[name.replace("q_proj", "qkv_proj")] = torch.cat([cut(p, 0) for p in parts])
        elif name.endswith("gate_proj.weight"):
            parts = [sd[name.replace("gate", x)] for x in ("gate", "up")]
            want[name.replace("gate_", "gate_up_")] = torch.cat([cut(p, 0) for p in parts])
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            want[name] = cut(t, 1)
        elif "norm" in name:
            want[name] = t
        else:
            want[name] = cut(t, 0)  # embed_tokens, lm_head
    return want


def check_llama(model, tmp, tp, rank):
    want = llama_share(torch.load(os.path.join(tmp, "llama.pt")), tp, rank)
    got = dict(model.named_parameters())
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    bad = [k for k in want if not torch.equal(got[k], want[k])]
    assert not bad, bad
'''

INSIDE = r'''
import json, os, sys, torch
import tensorizer_rs
from tensorizer_rs import TensorSerializer, EncryptionParams
from vllm.config.load import LoadConfig
from vllm.plugins import load_general_plugins
from vllm.model_executor.model_loader import get_model_loader

assert "site-packages" in tensorizer_rs.__file__, tensorizer_rs.__file__
load_general_plugins()
load_general_plugins()  # idempotent
''' + TINY + LLAMA + r'''

def loader(extra):
    return get_model_loader(LoadConfig(load_format="tensorizer_rs", model_loader_extra_config=extra))


tmp = sys.argv[1]
source = Tiny()
sd = {k: v.detach().clone() for k, v in source.state_dict().items()}
torch.save(sd, os.path.join(tmp, "expected.pt"))  # for ALIAS
plain = os.path.join(tmp, "model-rank-00.tensors")
with TensorSerializer(plain) as s:
    s.write_state_dict(sd)
key = EncryptionParams.random()
secret = os.path.join(tmp, "secret.tensors")
with TensorSerializer(secret, encryption=key) as s:
    s.write_state_dict(sd)

l = loader({"uri": os.path.join(tmp, "model-rank-%02d.tensors"), "num_readers": 2, "verify_hash": True})
assert type(l).__name__ == "TensorizerRsLoader", type(l)
print("ok: vLLM's plugin loading registered --load-format tensorizer_rs")
l.download_model(None)
model = Tiny()
l.load_weights(model, None)
assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
print("ok: the weights load through the model's load_weights, rank 0's file by %02d")
names = sorted(n for n, _ in l.get_all_weights(None, Tiny()))
assert names == sorted(sd), names
print("ok: get_all_weights yields every tensor")

module_file = os.path.join(tmp, "module.tensors")
with TensorSerializer(module_file) as s:
    s.write_module(source)  # the top module's own tensors are named ".weight" and so on
model = Tiny()
loader({"uri": module_file}).load_weights(model, None)
assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
print("ok: a file written by write_module, its top-level names without the leading dot")

os.environ["TZR_SMOKE_KEY"] = key.key.hex()
model = Tiny()
loader({"uri": secret, "key_env": "TZR_SMOKE_KEY"}).load_weights(model, None)
assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
print("ok: an encrypted file with its key from an environment variable")

os.environ["TZR_SMOKE_WRONG_KEY"] = "00" * 32
try:
    loader({"uri": secret, "key_env": "TZR_SMOKE_WRONG_KEY"}).load_weights(Tiny(), None)
    raise SystemExit("a wrong key loaded")
except Exception as e:  # noqa: BLE001 (the message is what is checked)
    assert "wrong key or passphrase" in str(e) and "\n" not in str(e), repr(e)
print("ok: a wrong key is refused in one line")

if os.environ.get("S3_ENDPOINT_URL"):
    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT_URL"], region_name="us-east-1")
    s3.upload_file(secret, "models", "secret.tensors")
    model = Tiny()
    loader({"uri": "s3://models/secret.tensors", "key_env": "TZR_SMOKE_KEY", "verify_hash": True}).load_weights(model, None)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
    print("ok: an encrypted file from S3 (moto_server on 127.0.0.1), hashes checked")

from tensorizer_rs.safetensors.torch import save_file
shards = os.path.join(tmp, "hf-shards")
os.mkdir(shards)
halves = [dict(list(sd.items())[:2]), dict(list(sd.items())[2:])]
weight_map = {}
for i, half in enumerate(halves):
    shard = f"model-0000{i + 1}-of-00002.safetensors"
    save_file(half, os.path.join(shards, shard))
    weight_map.update({k: shard for k in half})
with open(os.path.join(shards, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": weight_map}, f)
for uri in (shards, os.path.join(shards, "model.safetensors.index.json")):
    model = Tiny()
    l = loader({"uri": uri})
    l.download_model(None)
    l.load_weights(model, None)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
print("ok: a Hugging Face folder of safetensors shards, and its index, as published")
if os.environ.get("S3_ENDPOINT_URL"):
    for name in sorted(os.listdir(shards)):
        s3.upload_file(os.path.join(shards, name), "models", f"hf-shards/{name}")
    for uri in ("s3://models/hf-shards/", "s3://models/hf-shards/model.safetensors.index.json"):
        model = Tiny()
        loader({"uri": uri}).load_weights(model, None)
        assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
    print("ok: the same folder from an S3 prefix, and its index by URI")

def refused(extra, words):
    try:
        loader(extra)
    except ValueError as e:
        message = str(e)
        assert "\n" not in message and all(w in message for w in words), message
        return
    raise AssertionError(f"accepted {extra}")

refused({"uri": plain, "tensorizer_uri": plain}, ["unknown key", "'tensorizer_uri'", "uri, verify_hash"])
refused({}, ['"uri" is required'])
refused({"uri": plain, "mmap": "yes"}, ['"mmap"'])
refused({"uri": plain, "key_env": "NOT_SET_ANYWHERE"}, ["NOT_SET_ANYWHERE", "not set"])
print("ok: bad configuration is refused in one line, naming the known keys")
try:
    loader({"uri": os.path.join(tmp, "missing.tensors")}).download_model(None)
    raise AssertionError("a missing file opened")
except FileNotFoundError:
    print("ok: download_model names a missing file")

write_llama(tmp)
llama = vllm_llama(tmp, 1, 0, free_port())
check_llama(llama, tmp, 1, 0)
with TensorSerializer(os.path.join(tmp, "llama-vllm.tensors")) as s:
    s.write_module(llama)  # named and shaped as vLLM's parameters at size 1, for tp_slices
print("ok: vLLM's own LlamaForCausalLM, built on the CPU at world size 1, load_model gives the Hugging Face weights")

# Writing for vLLM: a Hugging Face folder becomes one file per rank, read by
# our plugin and by vLLM's built-in tensorizer format on the real tensorizer
# 2.10.1 (vLLM's pin). The ranks are taken in turn in this process.
import tensorizer
import tensorizer_rs.vllm
from types import SimpleNamespace
from safetensors.torch import save_file
from vllm.model_executor.model_loader.tensorizer_loader import TensorizerLoader
from tensorizer_rs import vllm_loader

assert tensorizer.__version__ == "2.10.1" and "tensorizer_rs" not in tensorizer.__file__, tensorizer.__file__
hf = os.path.join(tmp, "hf")
os.mkdir(hf)
save_file(sd, os.path.join(hf, "model.safetensors"))
with open(os.path.join(tmp, "vllm.key"), "wb") as f:
    f.write(key.key)
plain_uri = os.path.join(tmp, "tp", "model-%02d.tensors")
secret_uri = os.path.join(tmp, "tp", "secret-%02d.tensors")
assert len(tensorizer_rs.vllm.serialize_for_tp(hf, plain_uri, 2)) == 2
tensorizer_rs.vllm.serialize_for_tp(hf, secret_uri, 2, encryption=key)


def built_in(uri, **extra):
    l = get_model_loader(LoadConfig(load_format="tensorizer",
                                    model_loader_extra_config={"tensorizer_config": {"tensorizer_uri": uri, **extra}}))
    assert isinstance(l, TensorizerLoader), type(l)
    l.tensorizer_config.verify_with_parallel_config(SimpleNamespace(tensor_parallel_size=2))
    return l


for rank in range(2):
    vllm_loader._tensor_parallel = lambda: (rank, 2)  # what vLLM's tensor-parallel group answers
    for extra in ({"uri": plain_uri}, {"uri": secret_uri, "key_file": os.path.join(tmp, "vllm.key")}):
        model = Tiny()
        loader(extra).load_weights(model, None)
        assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
    for uri, extra in ((plain_uri, {}), (secret_uri, {"encryption_keyfile": os.path.join(tmp, "vllm.key")})):
        l = built_in(uri, **extra)
        l.tensorizer_config.tensorizer_uri = uri % rank  # as its load_model does at tensor-parallel size > 1
        model = Tiny()
        l.load_weights(model, None)
        assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
print("ok: serialize_for_tp's per-rank files load in our plugin and in vLLM's built-in tensorizer format (2.10.1)")


class Wide(torch.nn.Module):
    """A model at tensor-parallel size tp: proj cut by rows, gate_up fused
    (two blocks of 4 rows, as vLLM's merged layers give output_sizes), norm
    replicated. Its load_weights would cut again: tp_slices must not call it."""

    def __init__(self, tp):
        super().__init__()
        self.proj = torch.nn.Linear(4, 6 // tp)
        self.gate_up = torch.nn.Linear(4, 8 // tp)
        self.gate_up.output_sizes = [4, 4]
        self.norm = torch.nn.LayerNorm(4)

    def load_weights(self, weights):
        raise AssertionError("tp_slices called load_weights")


full = Wide(1)
full_file = os.path.join(tmp, "full.tensors")
with TensorSerializer(full_file) as s:
    s.write_module(full)
l = loader({"uri": full_file, "tp_slices": True, "verify_hash": True})
for rank in range(2):
    vllm_loader._tensor_parallel = lambda: (rank, 2)
    model = Wide(2)
    l.load_weights(model, None)
    for name, tensor in full.state_dict().items():
        want = torch.tensor_split(tensor, 2, 0)[rank] if name.startswith("proj.") else tensor
        if name.startswith("gate_up."):
            want = torch.cat([torch.tensor_split(block, 2, 0)[rank] for block in torch.split(tensor, 4)])
        assert torch.equal(model.state_dict()[name], want), (rank, name)
    assert sorted(n for n, _ in l.get_all_weights(None, Wide(2))) == sorted(full.state_dict())
refused({"uri": full_file, "tp_slices": "yes"}, ['"tp_slices" must be true or false'])
refused({"uri": full_file, "tp_slices": True, "mmap": True}, ['"tp_slices"', '"mmap"'])
print("ok: tp_slices: each rank copies its share of one file into its parameters, fused layers block by block")
'''

#: With TENSORIZER_RS_AS_TENSORIZER=1, in a fresh process: vLLM's built-in
#: tensorizer format on tensorizer_rs reads INSIDE's per-rank files.
ALIAS = r'''
import os, sys, torch
from types import SimpleNamespace
from vllm.plugins import load_general_plugins

load_general_plugins()  # installs the alias before vLLM's loaders import tensorizer
import tensorizer, tensorizer_rs
from vllm.config.load import LoadConfig
from vllm.model_executor.model_loader import get_model_loader

assert tensorizer is tensorizer_rs
''' + TINY + LLAMA + r'''
tmp = sys.argv[1]
sd = torch.load(os.path.join(tmp, "expected.pt"))
template = os.path.join(tmp, "tp", "secret-%02d.tensors")
for rank in range(2):
    extra = {"tensorizer_uri": template, "encryption_keyfile": os.path.join(tmp, "vllm.key")}
    l = get_model_loader(LoadConfig(load_format="tensorizer", model_loader_extra_config={"tensorizer_config": extra}))
    l.tensorizer_config.verify_with_parallel_config(SimpleNamespace(tensor_parallel_size=2))
    l.tensorizer_config.tensorizer_uri = template % rank  # as its load_model does at tensor-parallel size > 1
    model = Tiny()
    l.load_weights(model, None)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
print("ok: with TENSORIZER_RS_AS_TENSORIZER=1, vLLM's built-in tensorizer format on tensorizer_rs reads them too")
check_llama(vllm_llama(tmp, 1, 0, free_port(), load_format="tensorizer"), tmp, 1, 0)
print("ok: and loads vLLM's own Llama at world size 1 through vLLM's built-in tensorizer format")
'''

#: Two processes, the ranks of vLLM's own tensor-parallel group (gloo, built
#: by vLLM's init_distributed_environment), load one file shared by both
#: into vLLM's Llama at tensor-parallel size 2: the loader reads it
#: cooperatively over get_tp_group().cpu_group (spec §24), and each rank's
#: load_weights keeps its share.
COOP = r'''
import os, sys, torch
from vllm import distributed
from vllm.config.load import LoadConfig
from vllm.plugins import load_general_plugins
from vllm.model_executor.model_loader import get_model_loader
from tensorizer_rs import TensorSerializer, _deserializer

load_general_plugins()
''' + LLAMA + r'''
tmp, rank, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
groups = []


class Seen(_deserializer.TensorDeserializer):
    def __init__(self, *args, **kwargs):
        groups.append(kwargs.get("process_group"))
        super().__init__(*args, **kwargs)


_deserializer.TensorDeserializer = Seen
check_llama(vllm_llama(tmp, 2, rank, port), tmp, 2, rank)
assert groups == [distributed.get_tp_group().cpu_group], groups
print(f"ok: rank {rank} of 2 loads one shared file cooperatively into vLLM's Llama at tensor-parallel size 2")
extra = {"uri": os.path.join(tmp, "llama-vllm.tensors"), "tp_slices": True, "verify_hash": True}
check_llama(vllm_llama(tmp, 2, rank, port, extra=extra), tmp, 2, rank)
print(f"ok: rank {rank} of 2 copies its tp_slices share of vLLM's Llama at size 1 into its Llama at size 2")
'''


def cooperative(env: dict[str, str], tmp: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    python = [str(VENV / "bin" / "python"), "-c", textwrap.dedent(COOP), tmp]
    ranks = [subprocess.Popen([*python, str(r), port], env=env, cwd=VENV, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]
    for p in ranks:
        out, err = p.communicate(timeout=300)
        print(out, end="")
        if p.returncode != 0:
            raise SystemExit(f"vllm-plugin-smoke: FAILED\n{err[-4000:]}")



def main() -> None:
    wheel = Path(sys.argv[1]).resolve()
    engine_venv.install(VENV, "vllm-requirements.txt", wheel, "vLLM")
    env = engine_venv.environment(VENV, VLLM_TARGET_DEVICE="cpu")  # vLLM's CPU platform: there is no GPU
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as servers:
        # S3 from moto_server on 127.0.0.1, where the test environment has it.
        s3: dict[str, str] = {}
        sys.path.insert(0, str(ROOT / "python" / "tests"))
        try:
            import remote_servers

            endpoint, _ = servers.enter_context(remote_servers.s3_bucket("models"))
            s3 = {"S3_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                  "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        except Exception as e:  # noqa: BLE001 (said, then the rest runs)
            if os.environ.get("TZR_REQUIRE_SERVERS"):
                raise
            print(f"SKIPPED: S3 through vLLM (no moto_server: {e})")
        for code, extra_env in ((INSIDE, s3), (ALIAS, {"TENSORIZER_RS_AS_TENSORIZER": "1"})):
            python = [str(VENV / "bin" / "python"), "-c", textwrap.dedent(code), tmp]
            done = engine_venv.run(python, env={**env, **extra_env}, cwd=VENV, timeout=600)
            print(done.stdout, end="")
            if done.returncode != 0:
                raise SystemExit(f"vllm-plugin-smoke: FAILED\n{done.stderr[-4000:]}")
        cooperative(env, tmp)
    print("vllm-plugin-smoke: every check passed")


if __name__ == "__main__":
    main()
