"""Small differences from tensorizer that real code hits (issue 14), one
test each: ``total_tensor_bytes`` after ``close()``, ``no_init_or_tensor``
confined to its own thread or task, picklable exceptions, and
``serialization._enable_perf_stats``."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import threading

import pytest
import torch

import tzhelpers


def _state() -> dict[str, torch.Tensor]:
    return {"a": torch.ones(10), "b": torch.zeros(3, dtype=torch.int8), "m": torch.empty(4, device="meta")}


def test_total_tensor_bytes_after_close(tz, oracle, tmp_path):
    """tensorizer's encryption example reads it after close()."""
    for module in (tz, oracle):
        s = module.TensorSerializer(str(tmp_path / f"{module.__name__}.tensors"))
        s.write_state_dict(_state())
        before = s.total_tensor_bytes
        s.close()
        assert s.total_tensor_bytes == before == 43, module.__name__
        empty = module.TensorSerializer(str(tmp_path / f"{module.__name__}-empty.tensors"))
        empty.close()
        assert empty.total_tensor_bytes == 0


@pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer_rs's context-manager form")
def test_total_tensor_bytes_after_with_block_and_abort(tz, tmp_path):
    with tz.TensorSerializer(str(tmp_path / "w.tensors")) as s:
        s.write_state_dict(_state())
    assert s.total_tensor_bytes == 43
    with pytest.raises(KeyError), tz.TensorSerializer(str(tmp_path / "x.tensors")) as s:
        s.write_state_dict(_state())
        raise KeyError("interrupted")
    assert s.total_tensor_bytes == 43 and not (tmp_path / "x.tensors").exists()


def _build() -> tuple[torch.Tensor, torch.nn.Linear]:
    return torch.empty(3), torch.nn.Linear(4, 4)


def test_no_init_or_tensor_stays_in_its_thread(tz):
    """Another thread building modules meanwhile gets real, initialised
    tensors; only the thread inside the context gets meta ones."""
    inside_entered, outside_done = threading.Event(), threading.Event()
    results: dict[str, tuple[torch.Tensor, torch.nn.Linear]] = {}
    errors: list[BaseException] = []

    def inside() -> None:
        try:
            with tz.utils.no_init_or_tensor():
                inside_entered.set()
                assert outside_done.wait(30)
                results["inside"] = _build()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def outside() -> None:
        try:
            assert inside_entered.wait(30)
            torch.manual_seed(0)
            results["outside"] = _build()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            outside_done.set()

    threads = [threading.Thread(target=inside), threading.Thread(target=outside)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    empty, linear = results["outside"]
    assert empty.device.type == "cpu" and linear.weight.device.type == "cpu"
    torch.manual_seed(0)
    assert torch.equal(linear.weight, torch.nn.Linear(4, 4).weight)  # reset_parameters ran
    empty, linear = results["inside"]
    assert empty.is_meta and linear.weight.is_meta
    assert torch.empty(2).device.type == "cpu"


def test_no_init_or_tensor_stays_in_its_task(tz):
    async def inside(entered: asyncio.Event, done: asyncio.Event) -> bool:
        with tz.utils.no_init_or_tensor():
            entered.set()
            await done.wait()
            return bool(_build()[1].weight.is_meta)

    async def outside(entered: asyncio.Event, done: asyncio.Event) -> bool:
        await entered.wait()
        try:
            return bool(_build()[1].weight.is_meta)
        finally:
            done.set()

    async def main() -> list[bool]:
        entered, done = asyncio.Event(), asyncio.Event()
        return list(await asyncio.gather(inside(entered, done), outside(entered, done)))

    assert asyncio.run(main()) == [True, False]


def test_no_init_or_tensor_callable_and_nesting(tz):
    linear = tz.utils.no_init_or_tensor(lambda: torch.nn.Linear(2, 2))
    assert linear.weight.is_meta
    with tz.utils.no_init_or_tensor():
        with tz.utils.no_init_or_tensor():
            pass
        assert torch.empty(1).is_meta  # the outer context still applies
    assert not torch.empty(1).is_meta and not torch.nn.Linear(2, 2).weight.is_meta


def _raised_errors(tz, tmp_path) -> list[BaseException]:
    """Exceptions as the library raises them: a decryption without a key
    and a hash mismatch."""
    path = tmp_path / "enc.tensors"
    with tz.TensorSerializer(str(path), encryption=tz.EncryptionParams(tzhelpers.TEST_KEY)) as s:
        s.write_state_dict({"w": torch.arange(64.0)})
    found: list[BaseException] = []
    with pytest.raises(tz.CryptographyError) as info:
        tz.TensorDeserializer(str(path), device="cpu")
    found.append(info.value)
    plain = tmp_path / "plain.tensors"
    with tz.TensorSerializer(str(plain)) as s:
        s.write_state_dict({"w": torch.arange(64.0)})
    data = bytearray(plain.read_bytes())
    data[-9] ^= 0xFF  # the last data byte
    plain.write_bytes(bytes(data))
    with pytest.raises(tz.HashMismatchError) as info2:
        tz.TensorDeserializer(str(plain), device="cpu", verify_hash=True)
    found.append(info2.value)
    return found


@pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer_rs's exception classes")
def test_exceptions_pickle(tz, tmp_path):
    """vLLM's worker processes pickle exceptions back to their parent."""
    from tensorizer_rs import _native

    made = [
        tz.CryptographyError("no key"),
        tz.HashMismatchError("bad hash"),
        _native.FormatError("bad file"),
        _native.TruncatedError("short file"),
    ]
    for e in made + _raised_errors(tz, tmp_path):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e) and back.args == e.args
    # And in a fresh interpreter, as a parent process would.
    blob = pickle.dumps(made)
    code = "import pickle, sys; print([(type(e).__name__, str(e)) for e in pickle.loads(sys.stdin.buffer.read())])"
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == repr([(type(e).__name__, str(e)) for e in made])
    assert tz.serialization.CryptographyError is tz.CryptographyError
    assert isinstance(_native.TruncatedError("x"), _native.FormatError)


def test_enable_perf_stats(tz):
    """tensorizer's examples import it; like tensorizer, it follows
    TENSORIZER_ENABLE_PERF_STATS."""
    assert tz.serialization._enable_perf_stats is bool(os.environ.get("TENSORIZER_ENABLE_PERF_STATS"))
    code = f"import {tz.__name__} as tz; print(tz.serialization._enable_perf_stats)"
    env = dict(os.environ, TENSORIZER_ENABLE_PERF_STATS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
