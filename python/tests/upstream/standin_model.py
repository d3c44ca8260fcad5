"""A local stand-in for ``EleutherAI/gpt-neo-125M``, built offline.

tensorizer's tests load ``EleutherAI/gpt-neo-125M`` from the Hugging Face hub
in most of their classes (often in ``setUpClass``, so one missing model takes
the whole class down). Our tests never download a model, so ``run.py``
builds this stand-in into a private hub cache (``HF_HUB_CACHE``) under the
repository id the tests ask for, and runs them with ``HF_HUB_OFFLINE=1``.

What it is: a ``GPTNeoForCausalLM`` with gpt-neo-125M's width (768, which
``test_module_verification_fail`` hard-codes), 2 layers instead of 12, a
2,048-word vocabulary instead of 50,257, and seeded random weights, about
17M parameters (35 MB in fp16, above the 20 MiB ``test_save_load`` wants).
Its tokenizer is a word-level one whose words are ``hello`` and fillers.
Layer norms get random weights, as trained ones would have.

``check_inference`` in tensorizer's tests generates 50 sampled tokens after
400 ``" hello"``s and wants at least one more ``hello``. Random weights would
not do that, so the output layer is arranged to always predict ``hello``:
the final layer norm's weight is 0 and its bias points along ``hello``'s
(unit-length) embedding, which the tied output head turns into a logit of
``HELLO_LOGIT`` for ``hello`` and well under 1 for every other word. The
weights still pass through serialization like any others, so a wrong byte
anywhere changes the tensors the tests compare.

Not the real model: the tests' byte-for-byte comparisons are between what was
serialized and what came back, so they keep their meaning; only the text the
real model would generate is not reproduced.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

REPO_ID = "EleutherAI/gpt-neo-125M"
#: Bump when the recipe changes, so cached copies are rebuilt.
RECIPE = "tensorizer-rs stand-in v2"
VOCAB_SIZE = 2048
HIDDEN = 768
LAYERS = 2
HEADS = 12
HELLO = "hello"
HELLO_LOGIT = 40.0
EOS = "<|endoftext|>"
SEED = 14


def _revision() -> str:
    # A 40-hex "commit" for the cache layout, derived from the recipe.
    return hashlib.sha1(RECIPE.encode()).hexdigest()


def ensure(cache_dir: Path) -> Path:
    """Build the stand-in into the hub cache ``cache_dir`` unless it is there.

    Returns its snapshot directory.
    """
    repo_dir = cache_dir / ("models--" + REPO_ID.replace("/", "--"))
    revision = _revision()
    snapshot = repo_dir / "snapshots" / revision
    stamp = snapshot / "standin.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("recipe") == RECIPE:
        return snapshot
    if repo_dir.exists():
        shutil.rmtree(repo_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".standin-") as tmp:
        _build(Path(tmp))
        (Path(tmp) / "standin.json").write_text(
            json.dumps({"recipe": RECIPE, "stands_in_for": REPO_ID}) + "\n"
        )
        snapshot.parent.mkdir(parents=True)
        Path(tmp).rename(snapshot)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    return snapshot


def _build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPTNeoConfig, GPTNeoForCausalLM, PreTrainedTokenizerFast

    words = [EOS, HELLO] + [f"w{i:04d}" for i in range(VOCAB_SIZE - 2)]
    vocab = {w: i for i, w in enumerate(words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=EOS))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=EOS, bos_token=EOS, unk_token=EOS
    )
    tokenizer.save_pretrained(out)

    config = GPTNeoConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        num_layers=LAYERS,
        num_heads=HEADS,
        attention_types=[[["global", "local"], LAYERS // 2]],
        max_position_embeddings=2048,
        window_size=256,
        bos_token_id=vocab[EOS],
        eos_token_id=vocab[EOS],
        tie_word_embeddings=True,
    )
    torch.manual_seed(SEED)
    model = GPTNeoForCausalLM(config).eval()
    hello = vocab[HELLO]
    with torch.no_grad():
        # Layer norms start as exactly 1 and 0, which a fresh LayerNorm
        # also has; trained ones do not (test_module_verification_fail
        # swaps one for a fresh one and expects the hashes to differ).
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.1)
                module.bias.normal_(0.0, 0.02)
        wte = model.transformer.wte.weight
        wte[hello] = wte[hello] / wte[hello].norm()
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(wte[hello] * HELLO_LOGIT)
    model.save_pretrained(out)
