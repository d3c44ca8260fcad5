"""torch_compat: ``torch.save`` / ``torch.load`` with tensor data in a
tensorizer sidecar, interchangeable with tensorizer 2.12.1's in all four
directions (their save -> our load, ours -> theirs, ours -> ours, and
theirs -> theirs as the control)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import io
import logging
import os
import pickle
import threading
import zipfile

import pytest
import torch

import remote_servers
import tzhelpers

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

ORIG_SAVE = torch.save
ORIG_LOAD = torch.load

needs_ours = pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="tensorizer_rs behaviour beyond tensorizer")


def tc(module):
    return importlib.import_module(module.__name__ + ".torch_compat")


@pytest.fixture(scope="module")
def impls(tz, oracle):
    return {"tz": tc(tz), "oracle": tc(oracle)}


DIRECTIONS = [("tz", "tz"), ("tz", "oracle"), ("oracle", "tz"), ("oracle", "oracle")]


def rich_state() -> dict[str, object]:
    g = torch.Generator().manual_seed(3)
    with torch.random.fork_rng():
        torch.manual_seed(3)
        lin = torch.nn.Linear(8, 4)
    base = torch.randn(64, generator=g)
    return {
        "weight": lin.weight,
        "tied": lin.weight,  # the same parameter twice
        "bias": lin.bias,
        "view": base[10:34].view(4, 6),  # storage offset 10
        "t": base.view(8, 8).t(),  # non-contiguous view of the same storage
        "strided": base[::3],
        "bf16": torch.randn(5, 7, generator=g).bfloat16(),
        "fp16": torch.randn(33, generator=g).half(),
        "int8": torch.randint(-128, 127, (6, 2), generator=g, dtype=torch.int8),
        "bool": torch.rand(11, generator=g) > 0.5,
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.empty(0, 3),
        "int64": torch.arange(7),
        "values": [1, "two", 3.0, None, (4, 5), {"six": 6}, torch.float16, torch.device("meta")],
    }


def check_same(got, expected) -> None:
    assert type(got) is type(expected) or (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor))
    if isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.stride() == expected.stride() and got.storage_offset() == expected.storage_offset()
        assert got.requires_grad == expected.requires_grad
        assert type(got) is type(expected)
        assert tzhelpers.raw_bytes(got) == tzhelpers.raw_bytes(expected)
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            check_same(got[k], expected[k])
    else:
        assert got == expected


def check_rich(got) -> None:
    check_same(got, rich_state())
    same = lambda a, b: a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # noqa: E731
    assert same(got["weight"], got["tied"]) and got["weight"] is got["tied"]
    assert same(got["view"], got["t"]) and same(got["view"], got["strided"])
    assert not same(got["weight"], got["bias"])
    got["view"][0, 0] = 1234.0  # writes land in the shared storage
    assert got["t"][2, 1] == 1234.0 and got["strided"][0] != 1234.0


def sidecar_names(path) -> list[str]:
    import tensorizer

    with tensorizer.TensorDeserializer(str(path), device="cpu", lazy_load=True) as d:
        return list(d.keys())


@pytest.mark.parametrize("saver,loader", DIRECTIONS)
def test_state_dict_four_directions(impls, tmp_path, saver, loader):
    pt = tmp_path / "sd.pt"
    with impls[saver].tensorizer_saving():
        torch.save(rich_state(), pt)
    assert (tmp_path / "sd.pt.tensors").is_file()
    assert torch.save is ORIG_SAVE
    with impls[loader].tensorizer_loading(device="cpu"):
        got = torch.load(pt)
    assert torch.load is ORIG_LOAD
    check_rich(got)


@pytest.mark.parametrize("saver,loader", DIRECTIONS)
def test_weights_only_with_suppress_four_directions(impls, tmp_path, saver, loader):
    pt = tmp_path / "w.pt"
    tensors = list(torch.arange(16).view(4, 4))
    with impls[saver].tensorizer_saving():
        torch.save(tensors, pt)
    with pytest.raises(RuntimeError, match="Can not safely load weights when explicit pickle_module is specified"):
        with impls[loader].tensorizer_loading(device="cpu"):
            torch.load(pt, weights_only=True)
    with impls[loader].tensorizer_loading(device="cpu", suppress_weights_only=True):
        got = torch.load(pt, weights_only=True)
    assert torch.equal(torch.stack(got), torch.stack(tensors))


@pytest.mark.parametrize("saver,loader", DIRECTIONS)
def test_module_four_directions(impls, tmp_path, saver, loader):
    model = tzhelpers.module_with_buffers(seed=1)
    model.eval()
    pt = tmp_path / "m.pt"
    with impls[saver].tensorizer_saving():
        torch.save(model, pt)
    assert pt.stat().st_size < (tmp_path / "m.pt.tensors").stat().st_size
    with impls[loader].tensorizer_loading(device="cpu"):
        got = torch.load(pt)
    assert type(got) is type(model)
    assert list(got.state_dict()) == list(model.state_dict())
    for k, v in model.state_dict().items():
        check_same(got.state_dict()[k], v)
    assert torch.equal(got[1].scratch, model[1].scratch)  # non-persistent buffers travel with the module
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(got(x), model(x))


@pytest.mark.parametrize("saver,loader", [("tz", "oracle"), ("oracle", "tz")])
def test_minilm_module(impls, tmp_path, saver, loader):
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModel.from_pretrained(str(tzhelpers.minilm_dir()), local_files_only=True).eval()
    pt = tmp_path / "minilm.pt"
    with impls[saver].tensorizer_saving():
        torch.save(model, pt)
    assert pt.stat().st_size < 1 << 20 < (tmp_path / "minilm.pt.tensors").stat().st_size
    with impls[loader].tensorizer_loading(device="cpu", num_readers=2):
        got = torch.load(pt).eval()
    assert list(got.state_dict()) == list(model.state_dict())
    for k, v in model.state_dict().items():
        assert torch.equal(got.state_dict()[k], v), k
    ids = torch.tensor([[101, 7592, 2088, 102]])
    with torch.no_grad():
        assert torch.equal(got(ids).last_hidden_state, model(ids).last_hidden_state)


@needs_ours
def test_pickle_bytes_and_sidecar_match_tensorizer(impls, tmp_path):
    """The .pt pickle is byte-identical to tensorizer's; the sidecar is too
    with layout="tensorizer". The default (aligned) sidecar has the same
    tensors, which tensorizer reads as an ordinary file."""
    state = rich_state()
    with impls["oracle"].tensorizer_saving():
        torch.save(state, tmp_path / "theirs.pt")
    with impls["tz"].tensorizer_saving(layout="tensorizer"):
        torch.save(state, tmp_path / "ours.pt")
    with impls["tz"].tensorizer_saving():
        torch.save(state, tmp_path / "aligned.pt")

    def pkl(name):
        with zipfile.ZipFile(tmp_path / name) as z:
            return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))

    assert pkl("ours.pt") == pkl("theirs.pt") == pkl("aligned.pt")
    theirs = (tmp_path / "theirs.pt.tensors").read_bytes()
    assert (tmp_path / "ours.pt.tensors").read_bytes() == theirs
    names = sidecar_names(tmp_path / "theirs.pt.tensors")
    assert names == sidecar_names(tmp_path / "aligned.pt.tensors")
    # [0], [1], ...: one 1-D uint8 tensor per storage with data (the empty
    # tensor has none; tied weights and views share one).
    assert names == list(range(9))


def test_callable_sidecar_path(tz, impls, tmp_path):
    """A callable file_obj returning an opened stream (as tensorizer's own
    test does), a path, or None for plain torch."""
    model = tzhelpers.module_with_buffers(seed=2)
    opened = []

    def streams(f):
        path = str(f) + ".dynamic"
        s = open(path, "rb" if os.path.exists(path) else "wb+")
        opened.append(s)
        return s

    for saver, loader in DIRECTIONS:
        pt = tmp_path / f"{saver}-{loader}.pt"
        with impls[saver].tensorizer_saving(streams):
            torch.save(model, pt)
        assert not (tmp_path / f"{pt.name}.tensors").exists() and (tmp_path / f"{pt.name}.dynamic").is_file()
        with impls[loader].tensorizer_loading(streams, device="cpu"):
            got = torch.load(pt)
        assert torch.equal(got[0].weight, model[0].weight)
    for s in opened:
        s.close()

    with impls["tz"].tensorizer_saving(lambda f: str(f) + ".elsewhere"):
        torch.save(model, tmp_path / "p.pt")
    assert (tmp_path / "p.pt.elsewhere").is_file()
    with impls["tz"].tensorizer_loading(lambda f: str(f) + ".elsewhere", device="cpu"):
        assert torch.equal(torch.load(tmp_path / "p.pt")[0].bias, model[0].bias)

    # None: plain torch, which loads with or without a context.
    with impls["tz"].tensorizer_saving(lambda f: None):
        torch.save(model, tmp_path / "plain.pt")
    assert not (tmp_path / "plain.pt.tensors").exists()
    assert torch.equal(torch.load(tmp_path / "plain.pt", weights_only=False)[0].weight, model[0].weight)


@pytest.fixture(scope="module")
def s3():
    with remote_servers.s3_bucket() as server:
        yield server


def test_s3_sidecars(tz, oracle, impls, s3, tmp_path, monkeypatch):
    """Sidecars on the S3 test server: an s3:// URI (configured from the
    environment) for ours, open_stream callables for both."""
    endpoint, client = s3
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.s3cfg
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    creds = remote_servers.s3_credentials(endpoint)
    state = rich_state()

    def via_stream(module, key, mode):
        return lambda f: module.stream_io.open_stream(f"s3://models/{key}", mode, **creds)

    for saver, loader in DIRECTIONS:
        key = f"compat/{saver}-{loader}.pt.tensors"
        saving = tz if saver == "tz" else oracle
        loading = tz if loader == "tz" else oracle
        pt = tmp_path / f"{saver}-{loader}.pt"
        with impls[saver].tensorizer_saving(via_stream(saving, key, "wb+")):
            torch.save(state, pt)
        assert client.head_object(Bucket="models", Key=key)["ContentLength"] > 1000
        with impls[loader].tensorizer_loading(via_stream(loading, key, "rb"), device="cpu"):
            check_rich(torch.load(pt))
        if loader == "tz":
            with impls["tz"].tensorizer_loading(f"s3://models/{key}", device="cpu"):
                check_rich(torch.load(pt))

    if not tzhelpers.IS_ORACLE:
        with impls["tz"].tensorizer_saving("s3://models/compat/uri.pt.tensors"):
            torch.save(state, tmp_path / "uri.pt")
        with impls["oracle"].tensorizer_loading(via_stream(oracle, "compat/uri.pt.tensors", "rb"), device="cpu"):
            check_rich(torch.load(tmp_path / "uri.pt"))


def test_thread_isolation(impls, tmp_path):
    """Two threads at once, one inside the contexts: the other's torch.save
    and torch.load are plain torch."""
    compat = impls["tz"]
    start, finish = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)
    state = {"w": torch.randn(32, 32), "b": torch.arange(5)}
    results: dict[str, object] = {}

    def inside():
        with compat.tensorizer_saving():
            start.wait()
            torch.save(state, tmp_path / "in.pt")
            finish.wait()
        with compat.tensorizer_loading(device="cpu"):
            start.wait()
            results["in"] = torch.load(tmp_path / "in.pt")
            finish.wait()

    def outside():
        start.wait()
        torch.save(state, tmp_path / "out.pt")
        finish.wait()
        start.wait()
        results["out"] = torch.load(tmp_path / "out.pt", weights_only=True)
        finish.wait()

    threads = [threading.Thread(target=inside), threading.Thread(target=outside)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert (tmp_path / "in.pt.tensors").is_file() and not (tmp_path / "out.pt.tensors").exists()
    for k in ("in", "out"):
        check_same(results[k], state)
    with zipfile.ZipFile(tmp_path / "out.pt") as z:
        assert any("/data/" in n for n in z.namelist())  # torch kept the data itself
    assert torch.save is ORIG_SAVE and torch.load is ORIG_LOAD


def test_threads_with_their_own_contexts(tz, impls, tmp_path):
    """Two threads inside contexts at once, with different sidecar paths
    and different keys: each gets its own."""
    compat = impls["tz"]
    barrier = threading.Barrier(2, timeout=30)
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            key = bytes([n]) * 32
            state = {"w": torch.full((64,), float(n)), "n": torch.tensor(n)}
            side = tmp_path / f"side-{n}.bin"
            with compat.tensorizer_saving(side, encryption=tz.EncryptionParams(key)):
                barrier.wait()
                torch.save(state, tmp_path / f"t{n}.pt")
            with compat.tensorizer_loading(side, device="cpu", encryption=tz.DecryptionParams.from_key(key)):
                barrier.wait()
                results[n] = torch.load(tmp_path / f"t{n}.pt")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for n in (1, 2):
        got = results[n]
        assert torch.equal(got["w"], torch.full((64,), float(n))) and int(got["n"]) == n
        assert (tmp_path / f"side-{n}.bin").is_file() and not (tmp_path / f"t{n}.pt.tensors").exists()
    assert torch.save is ORIG_SAVE and torch.load is ORIG_LOAD


def test_asyncio_task_isolation(impls, tmp_path):
    compat = impls["tz"]
    state = {"w": torch.randn(8, 8)}

    async def inside(entered: asyncio.Event, done: asyncio.Event):
        with compat.tensorizer_saving():
            entered.set()
            await done.wait()  # the other task saves while this context is open
            torch.save(state, tmp_path / "in.pt")

    async def outside(entered: asyncio.Event, done: asyncio.Event):
        await entered.wait()
        torch.save(state, tmp_path / "out.pt")
        done.set()

    async def main():
        entered, done = asyncio.Event(), asyncio.Event()
        await asyncio.gather(inside(entered, done), outside(entered, done))

    asyncio.run(main())
    assert (tmp_path / "in.pt.tensors").is_file() and not (tmp_path / "out.pt.tensors").exists()
    check_same(torch.load(tmp_path / "out.pt", weights_only=True), state)


@needs_ours
@pytest.mark.parametrize("saver", ["tz", "oracle"])
def test_map_location(impls, tmp_path, saver):
    """tensorizer ignores map_location for sidecar storages; ours applies it
    (a device string, a torch.device, a dict keyed by the device the
    sidecar was loaded onto, or a callable)."""
    state = {"w": torch.randn(4, 4), "tied": None, "b": torch.arange(3)}
    state["tied"] = state["w"]
    pt = tmp_path / "m.pt"
    with impls[saver].tensorizer_saving():
        torch.save(state, pt)

    def load(map_location, **kwargs):
        with impls["tz"].tensorizer_loading(**kwargs):
            return torch.load(pt, map_location=map_location)

    for where in ("meta", torch.device("meta"), {"cpu": "meta"}, {"cpu": torch.device("meta")}):
        got = load(where, device="cpu")
        assert got["w"].is_meta and got["b"].is_meta and got["w"].shape == (4, 4), where
        assert got["w"].dtype == torch.float32 and got["b"].dtype == torch.int64
    for where in ("cpu", torch.device("cpu"), {"cuda:0": "meta"}, None):
        got = load(where)
        assert got["w"].device.type == "cpu" and torch.equal(got["w"], state["w"]), where
        assert got["tied"].data_ptr() == got["w"].data_ptr()
    seen = []

    def mapper(storage, location):
        seen.append(location)
        return None  # keep it where it is

    got = load(mapper, device="cpu")
    assert seen == ["cpu", "cpu"] and torch.equal(got["b"], state["b"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@needs_ours
def test_map_location_cuda(impls, tmp_path):
    state = {"w": torch.randn(4, 4, device="cuda"), "b": torch.arange(3)}
    pt = tmp_path / "c.pt"
    with impls["tz"].tensorizer_saving():
        torch.save(state, pt)
    with impls["tz"].tensorizer_loading():
        got = torch.load(pt, map_location="cpu")
    assert got["w"].device.type == "cpu" and torch.equal(got["w"], state["w"].cpu())
    with impls["tz"].tensorizer_loading(device="cpu"):
        got = torch.load(pt, map_location={"cpu": "cuda:0"})
    assert got["b"].device == torch.device("cuda", 0)


def test_shared_storage_across_dtypes(impls, tmp_path):
    """As tensorizer's own test: a tensor set_() to another's storage and a
    dtype view of it keep their aliasing (torch alone refuses to save a
    storage viewed as two dtypes)."""
    a = torch.tensor((1, 2, 3), dtype=torch.long)
    b = torch.tensor((4, 5, 6), dtype=torch.long)
    c = torch.tensor((), dtype=torch.long)
    c.set_(a)
    d = c.view(dtype=torch.float64)
    for saver, loader in DIRECTIONS:
        pt = tmp_path / f"{saver}-{loader}.pt"
        with impls[saver].tensorizer_saving():
            torch.save([a, b, c, d], pt)
        with impls[loader].tensorizer_loading(device="cpu"):
            _a, _b, _c, _d = torch.load(pt, weights_only=False)
        for orig, loaded in ((a, _a), (b, _b), (c, _c), (d, _d)):
            assert loaded.dtype == orig.dtype and tzhelpers.raw_bytes(loaded) == tzhelpers.raw_bytes(orig)
        assert _c.is_set_to(_a) and _d.is_set_to(_a)


def test_meta_tensors_and_tensor_free_objects(impls, tmp_path):
    t1 = torch.tensor((1, 2, 3, 4), dtype=torch.long)
    t2 = t1.to(device="meta")
    for saver, loader in DIRECTIONS:
        pt = tmp_path / f"{saver}-{loader}.pt"
        with impls[saver].tensorizer_saving():
            torch.save([t1, t2], pt)
        with impls[loader].tensorizer_loading(device="cpu"):
            l1, l2 = torch.load(pt)
        assert torch.equal(t1, l1) and l2.is_meta and l2.shape == t2.shape and l2.dtype == t2.dtype

    original = [1, "2", 3.0, torch.device("meta"), torch.empty(0)]
    with impls["tz"].tensorizer_saving():
        torch.save(original, tmp_path / "none.pt")
    assert not (tmp_path / "none.pt.tensors").exists()  # nothing with data: no sidecar
    with impls["tz"].tensorizer_loading():
        got = torch.load(tmp_path / "none.pt")
    assert got[:4] == original[:4] and got[4].shape == (0,)


def test_plain_torch_files_load_inside_loading(impls, tmp_path):
    model = tzhelpers.module_with_buffers(seed=4)
    torch.save(model, tmp_path / "plain.pt")
    for compat in impls.values():
        with compat.tensorizer_loading():
            got = torch.load(tmp_path / "plain.pt")
        assert torch.equal(got[0].weight, model[0].weight)
    assert not (tmp_path / "plain.pt.tensors").exists()


def test_encryption_kwargs(tz, oracle, impls, tmp_path):
    for saver, loader in DIRECTIONS:
        s_mod, l_mod = (tz if saver == "tz" else oracle), (tz if loader == "tz" else oracle)
        enc = s_mod.EncryptionParams(tzhelpers.TEST_KEY)
        side = tmp_path / f"{saver}-{loader}.secret"
        pt = tmp_path / f"{saver}-{loader}.pt"
        with impls[saver].tensorizer_saving(side, encryption=enc):
            torch.save(rich_state(), pt)
        with impls[loader].tensorizer_loading(side, device="cpu", encryption=l_mod.DecryptionParams.from_key(tzhelpers.TEST_KEY)):
            check_rich(torch.load(pt))
        with pytest.raises(l_mod.CryptographyError), impls[loader].tensorizer_loading(side, device="cpu"):
            torch.load(pt)


def test_nested_contexts(impls, tmp_path):
    compat = impls["tz"]
    sd = {f"layer.{i}": torch.randn(4, 4) for i in range(3)}
    pt, primary, alt = tmp_path / "n.pt", tmp_path / "n.pt.tensors", tmp_path / "alt.tensors"

    with compat.tensorizer_saving(alt), compat.tensorizer_loading(device="cpu"):
        torch.save(sd, pt)
        assert alt.is_file() and not primary.exists()
        with pytest.raises(OSError):
            torch.load(pt)  # looks for the default sidecar, which is not there
    alt.unlink()
    with compat.tensorizer_saving(alt):
        with compat.tensorizer_saving():
            pass  # the inner context ends; the outer one applies again
        torch.save(sd, pt)
    assert alt.is_file() and not primary.exists()
    with compat.tensorizer_loading(device="cpu"):
        with compat.tensorizer_loading(alt, device="cpu"):  # the innermost wins
            check_same(torch.load(pt), sd)
    assert torch.save is ORIG_SAVE and torch.load is ORIG_LOAD


def test_wrapper_signatures(impls):
    empty = inspect.Parameter.empty
    for compat in impls.values():
        with compat.tensorizer_saving(), compat.tensorizer_loading():
            assert torch.save is not ORIG_SAVE and torch.load is not ORIG_LOAD
            save = list(inspect.signature(torch.save, follow_wrapped=False).parameters.values())[:3]
            load = list(inspect.signature(torch.load, follow_wrapped=False).parameters.values())[:3]
            assert [(p.name, p.default) for p in save] == [("obj", empty), ("f", empty), ("pickle_module", pickle)]
            assert [(p.name, p.default) for p in load] == [("f", empty), ("map_location", None), ("pickle_module", None)]
        assert torch.save is ORIG_SAVE and torch.load is ORIG_LOAD


def test_other_pickle_module_is_refused(impls, tmp_path):
    fake = type(pickle)("fake_pickle")
    with pytest.raises(ValueError, match="pickle_module"), impls["tz"].tensorizer_saving():
        torch.save({"w": torch.ones(2)}, tmp_path / "x.pt", pickle_module=fake)


def test_save_and_load_funcs(impls, tmp_path):
    compat = impls["tz"]
    stored: dict[str, list[torch.Tensor]] = {}

    def save_func(file_obj, tensors, kwargs):
        assert kwargs == {"marker": 1}
        assert all(t.dtype == torch.uint8 and t.dim() == 1 for t in tensors)
        stored[str(file_obj)] = [t.clone() for t in tensors]

    def load_func(file_obj, kwargs):
        assert kwargs == {"marker": 1}
        return iter(stored[str(file_obj)])

    state = rich_state()
    with compat.tensorizer_saving(save_func=save_func, marker=1):
        torch.save(state, tmp_path / "f.pt")
    assert list(stored) == [str(tmp_path / "f.pt") + ".tensors"] and not (tmp_path / "f.pt.tensors").exists()
    with compat.tensorizer_loading(load_func=load_func, marker=1):
        check_rich(torch.load(tmp_path / "f.pt"))


@needs_ours
def test_unnamed_targets_fall_back_to_plain_torch(impls, tmp_path, caplog):
    compat = impls["tz"]
    buf = io.BytesIO()
    with caplog.at_level(logging.WARNING), compat.tensorizer_saving():
        torch.save({"w": torch.ones(3)}, buf)
    assert "Cannot infer a .tensors location" in caplog.text
    buf.seek(0)
    caplog.clear()
    with caplog.at_level(logging.WARNING), compat.tensorizer_loading():
        assert torch.equal(torch.load(buf)["w"], torch.ones(3))
    assert caplog.text == ""  # a plain file never looks for a sidecar

    # A sidecar checkpoint read from a stream without a name says what to do.
    with compat.tensorizer_saving():
        torch.save({"w": torch.ones(3)}, tmp_path / "s.pt")
    with pytest.raises(pickle.UnpicklingError, match="file_obj="), compat.tensorizer_loading():
        torch.load(io.BytesIO((tmp_path / "s.pt").read_bytes()))
    with compat.tensorizer_loading(tmp_path / "s.pt.tensors", device="cpu"):
        assert torch.equal(torch.load(io.BytesIO((tmp_path / "s.pt").read_bytes()))["w"], torch.ones(3))


@needs_ours
def test_bad_arguments_fail_early(impls):
    compat = impls["tz"]
    with pytest.raises(TypeError, match="TensorSerializer"), compat.tensorizer_saving(no_such_option=1):
        pass
    with pytest.raises(TypeError, match="TensorDeserializer"), compat.tensorizer_loading(no_such_option=1):
        pass
    for bad in ({"dtype": torch.float16}, {"filter_func": lambda name: True}):
        with pytest.raises(ValueError, match="raw storage bytes"), compat.tensorizer_loading(**bad):
            pass
    assert torch.save is ORIG_SAVE and torch.load is ORIG_LOAD


@needs_ours
def test_mismatched_sidecar(impls, tmp_path):
    compat = impls["tz"]
    with compat.tensorizer_saving():
        torch.save({"a": torch.ones(2), "b": torch.zeros(3)}, tmp_path / "two.pt")
        torch.save({"a": torch.ones(2)}, tmp_path / "one.pt")
    with pytest.raises(pickle.UnpicklingError, match="does not belong"):
        with compat.tensorizer_loading(tmp_path / "one.pt.tensors", device="cpu"):
            torch.load(tmp_path / "two.pt")


@needs_ours
def test_mmap_loads_of_tensorizer_layout_are_aligned(impls, tmp_path):
    """mmap=True on a tensorizer-layout sidecar (unaligned data) still
    gives aligned storages, and the result equals the copy load."""
    with impls["oracle"].tensorizer_saving():
        torch.save(rich_state(), tmp_path / "m.pt")
    with impls["tz"].tensorizer_loading(device="cpu", mmap=True):
        got = torch.load(tmp_path / "m.pt")
    check_rich(got)
    for k, v in got.items():
        if isinstance(v, torch.Tensor) and v.numel():
            assert v.untyped_storage().data_ptr() % 64 == 0, k


@needs_ours
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_mmap_loads_of_aligned_sidecars_copy_nothing(impls, tmp_path):
    """Our default (aligned) sidecar loads with mmap=True as storages inside
    the file's memory map: no copy."""
    with impls["tz"].tensorizer_saving():
        torch.save(rich_state(), tmp_path / "a.pt")
    with impls["tz"].tensorizer_loading(device="cpu", mmap=True):
        got = torch.load(tmp_path / "a.pt")
    check_rich(got)
    with open("/proc/self/maps") as f:
        spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f if "a.pt.tensors" in line]
    for k, v in got.items():
        if isinstance(v, torch.Tensor) and v.numel():
            assert any(lo <= v.data_ptr() < hi for lo, hi in spans), k


def test_contexts_exit_cleanly_on_errors(impls, tmp_path):
    compat = impls["tz"]
    with contextlib.suppress(ZeroDivisionError), compat.tensorizer_saving(), compat.tensorizer_loading():
        1 / 0
    assert torch.save is ORIG_SAVE and torch.load is ORIG_LOAD
    torch.save({"w": torch.ones(2)}, tmp_path / "after.pt")
    assert not (tmp_path / "after.pt.tensors").exists()


@pytest.mark.parametrize("saver,loader", DIRECTIONS)
def test_legacy_torch_format(impls, tmp_path, saver, loader):
    """torch.save(..., _use_new_zipfile_serialization=False) works too."""
    state = {"w": torch.arange(6.0).view(2, 3), "e": torch.empty(0), "m": torch.empty(3, device="meta")}
    state["t"] = state["w"].t()
    pt = tmp_path / "legacy.pt"
    with impls[saver].tensorizer_saving():
        torch.save(state, pt, _use_new_zipfile_serialization=False)
    assert not zipfile.is_zipfile(pt) and (tmp_path / "legacy.pt.tensors").is_file()
    with impls[loader].tensorizer_loading(device="cpu"):
        got = torch.load(pt)
    assert torch.equal(got["w"], state["w"]) and got["t"].data_ptr() == got["w"].data_ptr()
    assert got["e"].shape == (0,) and got["m"].is_meta and got["m"].shape == (3,)
