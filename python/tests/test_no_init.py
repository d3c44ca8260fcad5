"""utils.no_init_or_tensor: skips in-place initialisation of meta tensors
(fast model construction), leaves real tensors alone, and restores torch
exactly on exit."""

from __future__ import annotations

import threading

import pytest
import torch

import tzhelpers
from tzhelpers import tz

pytestmark = pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="checks tensorizer_rs's patches")


def test_meta_init_skipped_real_init_kept():
    before = {n: getattr(torch.Tensor, n) for n in tz.utils._META_NOOP_METHODS}
    with tz.utils.no_init_or_tensor():
        lin = torch.nn.Linear(4, 3)
        assert lin.weight.is_meta
        assert torch.nn.init.normal_(lin.weight) is lin.weight
        assert lin.weight.uniform_(-1, 1) is lin.weight
        real = torch.zeros(5)  # not torch.empty: a real CPU tensor
        real.normal_()
        assert real.abs().sum() > 0, "initialisation of a real tensor must still run"
        buf = torch.arange(6).expand((1, -1)).clone()
        buf.copy_(torch.arange(6).expand((1, -1)) * 2)
        assert buf.tolist() == [[0, 2, 4, 6, 8, 10]]
    assert {n: getattr(torch.Tensor, n) for n in tz.utils._META_NOOP_METHODS} == before
    # outside the context a meta tensor's in-place op goes through torch again
    m = torch.empty(3, device="meta")
    assert m.normal_() is m


def test_other_threads_unaffected():
    seen = {}
    entered, done = threading.Event(), threading.Event()

    def other():
        entered.wait(10)
        t = torch.zeros(4)
        t.fill_(2.0)
        seen["fill"] = t.tolist()
        seen["device"] = torch.empty(2).device.type
        done.set()

    th = threading.Thread(target=other)
    th.start()
    with tz.utils.no_init_or_tensor():
        entered.set()
        done.wait(10)
    th.join(10)
    assert seen == {"fill": [2.0, 2.0, 2.0, 2.0], "device": "cpu"}


def test_transformers_model_buffers_are_real():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=37, vocab_size=50, max_position_embeddings=16)
    model = tz.utils.no_init_or_tensor(lambda: transformers.BertModel(config))
    assert all(p.is_meta for p in model.parameters())
    # non-persistent buffers are built on the CPU with their real values
    assert model.embeddings.position_ids.device.type == "cpu"
    assert model.embeddings.position_ids.tolist() == [list(range(16))]
