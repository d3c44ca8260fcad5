"""Arguments as the originals take them.

For every public callable of tensorizer 2.12.1 and 2.10.1 (the release vLLM
0.33's ``[tensorizer]`` extra pins), and of zipslicer 0.8.1, and
every one of its parameters, as ``inspect.signature`` of the *original*
gives them at run time, both the original and tensorizer_rs are called with
the same matrix of values in that one parameter (the others at a working
baseline). Each pair must end the same way: success in both, or an exception
in ours that is an instance of the original's class (tensorizer's own
classes, such as ``CryptographyError``, are matched to ours by name).

Deliberate differences are listed in ``EXTENSIONS`` with the spec section
that explains them; every listed case must still differ (a stale entry
fails), so the list cannot outlive its reason.

Values that would make either library touch the test process's own standard
streams (an int or bool is a file descriptor where a file is expected: 1 is
stdout) are not tried for file parameters; see ``UNSAFE``.

2.12.1 is the one installed in the test environment. 2.10.1's sdist is
fetched from PyPI with ``pip download`` into ``target/releases`` (once; its
SHA-256 is checked) and its ``tensorizer/`` extracted to
``target/tensorizer-2.10.1``; without network its cases are skipped. It is
imported into this process as a second ``tensorizer`` (its own module
objects; ``sys.modules`` keeps 2.12.1's), so each of our outcomes is
computed once and compared with both. Callables an original lacks (2.10.1
has no ``torch_compat``) are skipped for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

import tzhelpers
from upstream import releases

if tzhelpers.IS_ORACLE:
    pytest.skip("compares tensorizer_rs with the original itself", allow_module_level=True)

tensorizer = pytest.importorskip("tensorizer")
import tensorizer.stream_io  # noqa: E402
import tensorizer.torch_compat  # noqa: E402
import tensorizer.utils  # noqa: E402

import tensorizer_rs  # noqa: E402
import tensorizer_rs.stream_io  # noqa: E402
import tensorizer_rs.torch_compat  # noqa: E402
import tensorizer_rs.utils  # noqa: E402

KEY = bytes(range(32))


@dataclasses.dataclass(frozen=True)
class Lib:
    """One implementation's public modules."""

    name: str
    top: Any
    stream_io: Any
    utils: Any
    torch_compat: Any
    zipslicer: Any
    version: str = ""


zipslicer = pytest.importorskip("zipslicer")
from tensorizer_rs import zipslicer as our_zipslicer  # noqa: E402

ORIGINAL = Lib(
    "tensorizer", tensorizer, tensorizer.stream_io, tensorizer.utils, tensorizer.torch_compat, zipslicer,
    tensorizer.__version__,
)  # fmt: skip
#: tensorizer-2.10.1.tar.gz as published on PyPI.
SDIST_2_10_1 = releases.Release(
    "tensorizer==2.10.1",
    "tensorizer-2.10.1.tar.gz",
    "fe39940548a287c84891ee9dd966d6e87575312625ba46c9eda11b0b79d05028",
)
VERSIONS = (ORIGINAL.version, "2.10.1")
OURS = Lib(
    "tensorizer_rs",
    tensorizer_rs,
    tensorizer_rs.stream_io,
    tensorizer_rs.utils,
    tensorizer_rs.torch_compat,
    our_zipslicer,
)


def _import_release(folder: pathlib.Path) -> Lib:
    """The ``tensorizer`` package in `folder`, imported beside the installed
    one: its modules are imported with ``sys.modules`` cleared of
    ``tensorizer*``, which then gets the installed ones back."""
    ours = ("tensorizer", "tensorizer.")
    saved = {n: m for n, m in sys.modules.items() if n.startswith(ours) or n == "tensorizer"}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(folder))
    try:
        top = importlib.import_module("tensorizer")
        modules = {n: importlib.import_module(f"tensorizer.{n}") for n in ("stream_io", "utils")}
        try:
            compat = importlib.import_module("tensorizer.torch_compat")
        except ModuleNotFoundError:
            compat = None
    finally:
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n.startswith(ours) or n == "tensorizer"]:
            del sys.modules[name]
        sys.modules.update(saved)
    return Lib("tensorizer", top, modules["stream_io"], modules["utils"], compat, zipslicer, top.__version__)


@pytest.fixture(scope="module")
def originals() -> dict[str, Lib | None]:
    """Each original release by version; None where it cannot be fetched."""
    found: dict[str, Lib | None] = {ORIGINAL.version: ORIGINAL}
    sdist, _ = releases.fetch(SDIST_2_10_1)
    found["2.10.1"] = None
    if sdist is not None:
        folder = releases.extract_package(SDIST_2_10_1, "tensorizer", releases.REPO / "target" / "tensorizer-2.10.1")
        lib = _import_release(folder)
        assert lib.version == "2.10.1" and lib.top is not tensorizer, lib.top.__file__
        found["2.10.1"] = lib
    return found


def _module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))


#: Loopback servers the stream cases read from (set by the ``servers``
#: fixture): nginx serving the fixtures, and redis-server holding the plain
#: file in tensorizer's Redis layout under ``m``.
SERVERS: dict[str, Any] = {}


class Ctx:
    """A fresh directory per call: the plain and encrypted files (written by
    the original), a checkpoint, and paths to write to."""

    def __init__(self, root: pathlib.Path, fixtures: pathlib.Path) -> None:
        self.dir = root
        for f in fixtures.iterdir():
            shutil.copy(f, root / f.name)
        self.model = str(root / "model.tensors")
        self.enc = str(root / "enc.tensors")
        self.ckpt = str(root / "model.pt")
        self.module = _module()
        self._files: list[Any] = []
        self.closers: list[Callable[[], Any]] = []

    def fresh(self, name: str = "out.tensors") -> str:
        return str(self.dir / name)

    def open(self, path: str, mode: str = "rb+") -> Any:
        f = open(path, mode)
        self._files.append(f)
        return f

    def close(self) -> None:
        for f in self._files:
            f.close()
        for close in self.closers:
            close()


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("arg-fixtures")
    m = _module()
    s = tensorizer.TensorSerializer(str(root / "model.tensors"))
    s.write_module(m)
    s.close()
    s = tensorizer.TensorSerializer(str(root / "enc.tensors"), encryption=tensorizer.EncryptionParams(KEY))
    s.write_module(m)
    s.close()
    torch.save(m.state_dict(), root / "model.pt")
    return root


@pytest.fixture(scope="module")
def servers(fixtures: pathlib.Path) -> Iterator[dict[str, Any]]:
    import redis

    import remote_servers

    with remote_servers.nginx(str(fixtures)) as base, remote_servers.redis() as port:
        client = redis.Redis(host="127.0.0.1", port=port)
        # tensorizer's to_redis reads the file again: it needs a lazy deserializer.
        with tensorizer.TensorDeserializer(str(fixtures / "model.tensors"), device="cpu", lazy_load=True) as d:
            d.to_redis(client, "m")
        SERVERS.update(http=f"{base}/model.tensors", redis=f"redis://127.0.0.1:{port}/m", port=port)
        yield SERVERS
        SERVERS.clear()
        client.close()


# -- the values tried in each parameter ------------------------------------


def _matrix(ctx: Ctx, path: str) -> dict[str, Callable[[], Any]]:
    """Label -> a maker of the value (made fresh for each call)."""
    return {
        "None": lambda: None,
        "True": lambda: True,
        "False": lambda: False,
        "0": lambda: 0,
        "1": lambda: 1,
        "-1": lambda: -1,
        "numpy.True_": lambda: np.bool_(True),
        "numpy.False_": lambda: np.bool_(False),
        "numpy.int64(2)": lambda: np.int64(2),
        "2.0": lambda: 2.0,
        "''": lambda: "",
        "str path": lambda: path,
        "PathLike": lambda: pathlib.Path(path),
        "bytes path": lambda: os.fsencode(path),
        "open file": lambda: ctx.open(path),
        "object()": lambda: object(),
        "[]": lambda: [],
    }


#: Parameters through which an int is a file descriptor (0, 1, 2 and True
#: are the test process's own standard streams).
FILE_PARAMS = {"file_obj", "path_uri", "ckpt"}
UNSAFE = {"True", "False", "0", "1", "-1", "numpy.True_", "numpy.False_", "numpy.int64(2)"}


# -- the callables ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """How to call one public callable: the original callable (its signature
    names the parameters), a working baseline, the call itself, and the
    file its path-like values name."""

    name: str
    original: Callable[[Lib], Any]
    baseline: Callable[[Lib, Ctx], dict[str, Any]]
    call: Callable[[Lib, Ctx, dict[str, Any]], Any]
    path: Callable[[Ctx], str] = lambda ctx: ctx.model
    skip: frozenset[str] = frozenset()
    needs_servers: bool = False


def _serialize(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
    s = lib.top.TensorSerializer(**a)
    s.write_module(ctx.module)
    s.close()


def _with_serializer(method: str) -> Callable[[Lib, Ctx, dict[str, Any]], None]:
    def call(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
        s = lib.top.TensorSerializer(ctx.fresh())
        try:
            getattr(s, method)(**a)
        finally:
            s.close()

    return call


def _with_deserializer(method: str, **open_kwargs: Any) -> Callable[[Lib, Ctx, dict[str, Any]], Any]:
    def call(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> Any:
        with lib.top.TensorDeserializer(ctx.model, device="cpu", **open_kwargs) as d:
            return _drain(getattr(d, method)(**a))

    return call


def _deserialize(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
    with lib.top.TensorDeserializer(**a) as d:
        for k in list(d.keys()):
            d[k]


def _drain(result: Any) -> Any:
    """Runs a lazy result to its end (errors of a generator show there)."""
    if isinstance(result, Iterator):
        for _ in result:
            pass
    return result


def _open_stream(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
    with lib.stream_io.open_stream(**a) as f:
        if "r" in getattr(f, "mode", "r"):
            f.read(8)


def _read_stream(cls: str) -> Callable[[Lib, Ctx, dict[str, Any]], None]:
    def call(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
        with getattr(lib.stream_io, cls)(**a) as f:
            f.read(8)

    return call


def _to_redis(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
    with lib.top.TensorDeserializer(ctx.model, device="cpu", lazy_load=True) as d:
        d.to_redis(**a)


def _redis_client(lib: Lib, ctx: Ctx) -> dict[str, Any]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=SERVERS["port"])
    ctx.closers.append(client.close)
    return {"redis_client": client, "key_prefix": f"{lib.name}-{id(ctx)}"}


def _saving(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
    with lib.torch_compat.tensorizer_saving(**a):
        torch.save(ctx.module.state_dict(), ctx.fresh("saved.pt"))


def _loading(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
    pt = ctx.fresh("saved.pt")
    with lib.torch_compat.tensorizer_saving():
        torch.save(ctx.module.state_dict(), pt)
    with lib.torch_compat.tensorizer_loading(**a):
        torch.load(pt)


def _zipslicer_load(lib: Lib, ctx: Ctx, a: dict[str, Any]) -> None:
    sd = lib.zipslicer.load(**a)
    for k in list(sd.keys()):
        sd[k]


def _fresh_module(lib: Lib, ctx: Ctx) -> dict[str, Any]:
    return {"m": _module()}


CASES = [
    Case("TensorSerializer", lambda o: o.top.TensorSerializer,
         lambda lib, ctx: {"file_obj": ctx.fresh()}, _serialize),
    Case("TensorSerializer.write_module", lambda o: o.top.TensorSerializer.write_module,
         lambda lib, ctx: {"m": ctx.module}, _with_serializer("write_module")),
    Case("TensorSerializer.write_tensor", lambda o: o.top.TensorSerializer.write_tensor,
         lambda lib, ctx: {"idx": 0, "name": "x", "tensor_type": lib.top.TensorType.PARAM,
                           "tensor": torch.ones(3)},
         _with_serializer("write_tensor")),
    Case("TensorSerializer.write_state_dict", lambda o: o.top.TensorSerializer.write_state_dict,
         lambda lib, ctx: {"state_dict": ctx.module.state_dict()}, _with_serializer("write_state_dict")),
    Case("TensorDeserializer", lambda o: o.top.TensorDeserializer,
         lambda lib, ctx: {"file_obj": ctx.model, "device": "cpu"}, _deserialize),
    Case("TensorDeserializer (encrypted file)", lambda o: o.top.TensorDeserializer,
         lambda lib, ctx: {"file_obj": ctx.enc, "device": "cpu",
                           "encryption": lib.top.DecryptionParams.from_key(KEY)},
         _deserialize, path=lambda ctx: ctx.enc),
    Case("TensorDeserializer.load_into_module", lambda o: o.top.TensorDeserializer.load_into_module,
         _fresh_module, _with_deserializer("load_into_module")),
    Case("TensorDeserializer.load_into_module (lazy)", lambda o: o.top.TensorDeserializer.load_into_module,
         _fresh_module, _with_deserializer("load_into_module", lazy_load=True)),
    Case("TensorDeserializer.read_tensors", lambda o: o.top.TensorDeserializer.read_tensors,
         lambda lib, ctx: {}, _with_deserializer("read_tensors", lazy_load=True)),
    Case("TensorDeserializer.read_numpy_arrays", lambda o: o.top.TensorDeserializer.read_numpy_arrays,
         lambda lib, ctx: {}, _with_deserializer("read_numpy_arrays", lazy_load=True)),
    Case("TensorDeserializer.tree", lambda o: o.top.TensorDeserializer.tree,
         lambda lib, ctx: {}, _with_deserializer("tree")),
    Case("TensorDeserializer.verify_module", lambda o: o.top.TensorDeserializer.verify_module,
         lambda lib, ctx: {"m": ctx.module}, _with_deserializer("verify_module")),
    Case("EncryptionParams", lambda o: o.top.EncryptionParams,
         lambda lib, ctx: {"key": KEY}, lambda lib, ctx, a: lib.top.EncryptionParams(**a)),
    Case("EncryptionParams.from_string", lambda o: o.top.EncryptionParams.from_string,
         lambda lib, ctx: {"source": "pass", "opslimit": 1, "memlimit": 8192},
         lambda lib, ctx, a: lib.top.EncryptionParams.from_string(**a)),
    Case("DecryptionParams.from_key", lambda o: o.top.DecryptionParams.from_key,
         lambda lib, ctx: {"key": KEY}, lambda lib, ctx, a: lib.top.DecryptionParams.from_key(**a)),
    Case("DecryptionParams.from_string", lambda o: o.top.DecryptionParams.from_string,
         lambda lib, ctx: {"source": "pass"}, lambda lib, ctx, a: lib.top.DecryptionParams.from_string(**a)),
    Case("stream_io.open_stream", lambda o: o.stream_io.open_stream,
         lambda lib, ctx: {"path_uri": ctx.model}, _open_stream),
    Case("utils.convert_bytes", lambda o: o.utils.convert_bytes,
         lambda lib, ctx: {"num": 123456}, lambda lib, ctx, a: lib.utils.convert_bytes(**a)),
    Case("utils.no_init_or_tensor", lambda o: o.utils.no_init_or_tensor,
         lambda lib, ctx: {"loading_code": _module}, lambda lib, ctx, a: lib.utils.no_init_or_tensor(**a)),
    Case("torch_compat.tensorizer_saving", lambda o: o.torch_compat.tensorizer_saving,
         lambda lib, ctx: {"file_obj": ctx.fresh()}, _saving),
    Case("torch_compat.tensorizer_loading", lambda o: o.torch_compat.tensorizer_loading,
         lambda lib, ctx: {}, _loading),
    Case("stream_io.CURLStreamFile", lambda o: o.stream_io.CURLStreamFile,
         lambda lib, ctx: {"uri": SERVERS["http"]}, _read_stream("CURLStreamFile"), needs_servers=True),
    Case("stream_io.RedisStreamFile", lambda o: o.stream_io.RedisStreamFile,
         lambda lib, ctx: {"uri": SERVERS["redis"]}, _read_stream("RedisStreamFile"), needs_servers=True),
    Case("TensorDeserializer.to_redis", lambda o: o.top.TensorDeserializer.to_redis,
         _redis_client, _to_redis, needs_servers=True),
    Case("zipslicer.load", lambda o: o.zipslicer.load,
         lambda lib, ctx: {"ckpt": ctx.ckpt}, _zipslicer_load, path=lambda ctx: ctx.ckpt),
    Case("zipslicer.LazyStateDict.get_meta", lambda o: o.zipslicer.LazyStateDict.get_meta,
         lambda lib, ctx: {"k": "0.weight"},
         lambda lib, ctx, a: lib.zipslicer.load(ctx.ckpt).get_meta(**a), path=lambda ctx: ctx.ckpt),
]  # fmt: skip


def _parameters(original: Any) -> list[str]:
    """The parameters the original names (not self/cls, not *args/**kwargs)."""
    sig = inspect.signature(original)
    return [
        p.name
        for p in sig.parameters.values()
        if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


# -- outcomes --------------------------------------------------------------


def _outcome(fn: Callable[[], Any]) -> type[BaseException] | None:
    try:
        with contextlib.redirect_stdout(None), _quiet():
            fn()
    except Exception as e:  # noqa: BLE001 - the class is the outcome
        return type(e)
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import logging
    import warnings

    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def _ours_for(cls: type[BaseException]) -> type[BaseException]:
    """Our class for one the original raised: its own classes by name."""
    module = cls.__module__ or ""
    for original, ours in (("tensorizer", "tensorizer_rs"), ("zipslicer", "tensorizer_rs.zipslicer")):
        if module == original or module.startswith(original + "."):
            for where in (ours, "tensorizer_rs.stream_io", "tensorizer_rs.serialization"):
                found = getattr(importlib.import_module(where), cls.__name__, None)
                if isinstance(found, type):
                    return found
            raise AssertionError(f"tensorizer_rs has no {cls.__name__} (the original's {module}.{cls.__name__})")
    return cls


def _same(original: type[BaseException] | None, ours: type[BaseException] | None) -> bool:
    if original is None or ours is None:
        return original is ours
    return issubclass(ours, _ours_for(original))


def _show(outcome: type[BaseException] | None) -> str:
    return "ok" if outcome is None else f"{outcome.__module__}.{outcome.__qualname__}"


#: (case, parameter, value label) -> why we differ from the original on
#: purpose (spec §11.5). Each must still differ.
EXTENSIONS: dict[tuple[str, str, str], str] = {
    **{
        ("TensorSerializer", "compress_tensors", label): "tensorizer imports lz4 for this option, which does "
        "nothing; without lz4 installed that import fails, with it the call succeeds as ours does"
        for label in ("True", "1", "-1", "numpy.True_", "numpy.int64(2)", "2.0", "str path", "PathLike",
                      "bytes path", "open file", "object()")
    },
    ("zipslicer.load", "map_location", "*"): "zipslicer asserts map_location == 'cpu'; we take every "
    "torch device (and None for the CPU) and refuse the rest with torch's own errors",
    ("zipslicer.load", "dtype", "*"): "zipslicer compares dtype with the stored dtype instead of the "
    "loaded one, so it never converts and ignores any value; we convert, and refuse what is not a dtype",
    ("zipslicer.load", "ckpt", "''"): "zipslicer asserts the path is a file; we raise FileNotFoundError",
    ("zipslicer.load", "ckpt", "bytes path"): "zipslicer fails on a bytes path (AttributeError); we take "
    "it as open() does",
    ("stream_io.RedisStreamFile", "begin", "-1"): "tensorizer stores any begin and reads from wherever "
    "it lands (at -1, from its last key); a negative position is refused",
    ("TensorSerializer.write_tensor", "name", "''"): "tensorizer writes a tensor named '' that its own "
    "reader refuses ('Invalid empty tensor path'); we refuse it when writing (what we write, we read)",
    ("TensorSerializer.write_state_dict", "state_dict", "''"): "a str is not a state dict: tensorizer "
    "iterates it as a sequence (an empty one writes an empty file, any other exhausts memory)",
}  # fmt: skip

#: (case, parameter, value label) -> why the original is not called with
#: it (the test would not survive it).
ORIGINAL_UNSAFE: dict[tuple[str, str, str], str] = {
    ("TensorSerializer.write_state_dict", "state_dict", label): "tensorizer takes a str for a sequence of "
    "state dicts and allocates until memory runs out"
    for label in ("str path",)
}


#: Our outcome per (case, parameter, value label): computed once, compared
#: with each original's.
_OURS: dict[tuple[str, str, str], type[BaseException] | None] = {}


def _outcome_of(lib: Lib, case: Case, fixtures: pathlib.Path, param: str, label: str) -> type[BaseException] | None:
    with tempfile.TemporaryDirectory() as d:
        ctx = Ctx(pathlib.Path(d), fixtures)
        try:
            args = case.baseline(lib, ctx)
            args[param] = _matrix(ctx, case.path(ctx))[label]()
            return _outcome(lambda: case.call(lib, ctx, args))
        finally:
            ctx.close()


def _run_case(case: Case, original_lib: Lib, fixtures: pathlib.Path) -> list[str]:
    """Every parameter x value of one case against one original; the
    mismatches, described."""
    problems = []
    with tempfile.TemporaryDirectory() as probe:
        labels = list(_matrix(Ctx(pathlib.Path(probe), fixtures), "").keys())
    for param in _parameters(case.original(original_lib)):
        for label in labels:
            key = (case.name, param, label)
            if param in case.skip or (param in FILE_PARAMS and label in UNSAFE) or key in ORIGINAL_UNSAFE:
                continue
            if (case.name, param, "*") in EXTENSIONS:
                continue
            original = _outcome_of(original_lib, case, fixtures, param, label)
            if key not in _OURS:
                _OURS[key] = _outcome_of(OURS, case, fixtures, param, label)
            ours = _OURS[key]
            same = _same(original, ours)
            if key in EXTENSIONS:
                if same:
                    problems.append(f"{param}={label}: listed in EXTENSIONS but no longer differs ({_show(ours)})")
            elif not same:
                problems.append(f"{param}={label}: original {_show(original)}, ours {_show(ours)}")
    return problems


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_arguments_as_the_original_takes_them(
    case: Case, version: str, originals: dict[str, Lib | None], fixtures: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    original = originals[version]
    if original is None:
        pytest.skip(f"SKIPPED: tensorizer {version} could not be downloaded from PyPI")
    if case.name.startswith("zipslicer") and original is not ORIGINAL:
        pytest.skip("zipslicer's cases do not depend on the tensorizer release")
    try:
        case.original(original)
    except AttributeError:
        pytest.skip(f"tensorizer {version} has no {case.name}")
    if case.needs_servers:
        request.getfixturevalue("servers")
    # The baseline itself must work in both.
    for lib in (original, OURS):
        with tempfile.TemporaryDirectory() as d:
            ctx = Ctx(pathlib.Path(d), fixtures)
            try:
                assert _outcome(lambda: case.call(lib, ctx, case.baseline(lib, ctx))) is None, (
                    f"{case.name}: the baseline call fails in {lib.name} {lib.version}"
                )
            finally:
                ctx.close()
    problems = _run_case(case, original, fixtures)
    assert not problems, f"{case.name} (tensorizer {version}):\n  " + "\n  ".join(problems)


class _BytesPath(os.PathLike[bytes]):
    """An ``os.PathLike`` whose ``__fspath__`` gives bytes."""

    def __init__(self, path: str) -> None:
        self._path = os.fsencode(path)

    def __fspath__(self) -> bytes:
        return self._path


def test_a_pathlike_giving_bytes_is_refused_as_tensorizer_refuses_it(tmp_path: pathlib.Path) -> None:
    """tensorizer 2.12.1 opens an ``os.PathLike`` through ``os.fspath`` and
    splits the result on ``"://"``, which raises ``TypeError`` for bytes; ours
    refuses it with the same type (and says why), as it refuses a bytes path."""
    path = str(tmp_path / "m.tensors")
    s = tensorizer.TensorSerializer(path)
    s.write_state_dict({"a": torch.ones(2)})
    s.close()
    with pytest.raises(TypeError):
        tensorizer.TensorDeserializer(_BytesPath(path), device="cpu")
    with pytest.raises(TypeError, match="file_obj must be a path or a binary file object"):
        tensorizer_rs.TensorDeserializer(_BytesPath(path), device="cpu")
    with tensorizer_rs.TensorDeserializer(pathlib.Path(path), device="cpu") as d:
        assert list(d) == ["a"]
