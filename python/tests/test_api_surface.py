"""tensorizer_rs offers every public name of tensorizer 2.12.1, found at run
time in the installed tensorizer, and every parameter tensorizer's
callables accept (by name and kind, via ``inspect.signature``).

What is not there yet is listed in ``GAPS`` below, each with a reason, so
the list of gaps is visible; an entry that is no longer a gap fails the
test, so the list shrinks as they are filled."""

from __future__ import annotations

import enum
import importlib
import inspect
import types

import pytest

import tzhelpers

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="compares tensorizer_rs with tensorizer"),
]

MODULES = ["", ".serialization", ".stream_io", ".utils", ".torch_compat"]

# Private names that real code uses, checked as if public.
PRIVATE = {
    ".stream_io": ["_infer_credentials"],
    ".serialization": ["_enable_perf_stats"],
    "._crypt": ["available"],
    # tensorizer's tests/test_torch_compat.py uses these two.
    ".torch_compat": ["_LOAD_WRAPPER_DEFAULT_MODULE", "_FileLike"],
}

# Known gaps: "module:name" (a missing name) or "module:name(param)" (a
# parameter ours does not accept, or accepts differently), with why.
GAPS: dict[str, str] = {
    # Handles of optional third-party modules (None in tensorizer when they
    # are not installed): LZ4 compression is not implemented (tensorizer
    # does not compress either), and GPU memory comes from torch, not NVML.
    ".serialization:lz4": "optional module handle; no compression",
    ".utils:pynvml": "optional module handle; NVML not used",
}


def _public_names(mod: types.ModuleType) -> set[str]:
    """Names tensorizer's module offers: ``__all__``, plus what it defines
    itself (classes, functions, constants) that does not start with "_"."""
    names = set(getattr(mod, "__all__", ()))
    for name, obj in vars(mod).items():
        if name.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if obj.__module__ == mod.__name__:
                names.add(name)
        elif isinstance(obj, (int, str, bytes, float, bool, tuple)) or obj is None:
            if isinstance(obj, enum.Enum):
                continue
            names.add(name)
    return names


def _accepts(theirs: inspect.Signature, ours: inspect.Signature) -> list[str]:
    """The parameters of ``theirs`` that ``ours`` does not accept alike."""
    P = inspect.Parameter
    ours_params = [p for p in ours.parameters.values()]
    ours_positional = [p for p in ours_params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    ours_by_name = {p.name: p for p in ours_params}
    has_args = any(p.kind is P.VAR_POSITIONAL for p in ours_params)
    has_kwargs = any(p.kind is P.VAR_KEYWORD for p in ours_params)
    missing = []
    index = 0
    for p in theirs.parameters.values():
        if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            if index < len(ours_positional):
                q = ours_positional[index]
                if p.kind is P.POSITIONAL_OR_KEYWORD and (q.name != p.name or q.kind is not P.POSITIONAL_OR_KEYWORD):
                    missing.append(p.name)
                elif p.default is not P.empty and q.default is P.empty:
                    missing.append(p.name)  # optional there, required here
            elif not has_args:
                missing.append(p.name)
            index += 1
        elif p.kind is P.KEYWORD_ONLY:
            q = ours_by_name.get(p.name)
            if q is None:
                if not has_kwargs:
                    missing.append(p.name)
            elif q.kind not in (P.KEYWORD_ONLY, P.POSITIONAL_OR_KEYWORD):
                missing.append(p.name)
            elif p.default is not P.empty and q.default is P.empty:
                missing.append(p.name)
        elif p.kind is P.VAR_POSITIONAL and not has_args:
            missing.append("*" + p.name)
        elif p.kind is P.VAR_KEYWORD and not has_kwargs:
            missing.append("**" + p.name)
    return missing


def _signature(obj: object) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _surface(oracle) -> list[tuple[str, str]]:
    pairs = []
    for suffix in MODULES:
        mod = importlib.import_module(oracle.__name__ + suffix)
        pairs += [(suffix, name) for name in sorted(_public_names(mod))]
    for suffix, names in PRIVATE.items():
        pairs += [(suffix, name) for name in names]
    return pairs


def _gaps(tz, oracle) -> dict[str, str]:
    found: dict[str, str] = {}
    for suffix, name in _surface(oracle):
        theirs_mod = importlib.import_module(oracle.__name__ + suffix)
        if not hasattr(theirs_mod, name):
            continue  # in tensorizer's __all__ but not there (its "protobuf", "tensors_pb2")
        theirs = getattr(theirs_mod, name)
        try:
            ours_mod = importlib.import_module(tz.__name__ + suffix)
        except ImportError:
            found[f"{suffix}:{name}"] = "module missing"
            continue
        if not hasattr(ours_mod, name):
            found[f"{suffix}:{name}"] = "missing"
            continue
        ours = getattr(ours_mod, name)
        if not (inspect.isclass(theirs) or inspect.isfunction(theirs)):
            continue  # constants and typing aliases
        if inspect.isclass(theirs) and issubclass(theirs, enum.Enum):
            continue
        _compare(f"{suffix}:{name}", theirs, ours, found)
        if inspect.isclass(theirs):
            for attr, member in vars(theirs).items():
                if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, (classmethod, staticmethod))):
                    continue
                if not hasattr(ours, attr):
                    found[f"{suffix}:{name}.{attr}"] = "missing"
                    continue
                _compare(f"{suffix}:{name}.{attr}", getattr(theirs, attr), getattr(ours, attr), found)
    return found


def _compare(label: str, theirs: object, ours: object, found: dict[str, str]) -> None:
    sig_theirs, sig_ours = _signature(theirs), _signature(ours)
    if sig_theirs is None:
        return
    if sig_ours is None:
        found[f"{label}()"] = "no signature"
        return
    for param in _accepts(sig_theirs, sig_ours):
        found[f"{label}({param})"] = "parameter not accepted alike"


def test_every_public_name_and_parameter(tz, oracle):
    found = _gaps(tz, oracle)
    unexpected = {k: v for k, v in found.items() if k not in GAPS}
    assert not unexpected, f"tensorizer offers these and tensorizer_rs does not: {unexpected}"


def test_gap_list_is_current(tz, oracle):
    found = _gaps(tz, oracle)
    filled = sorted(k for k in GAPS if k not in found)
    assert not filled, f"no longer gaps, remove them from GAPS: {filled}"


def test_surface_is_enumerated(oracle):
    # The enumeration itself sees the names this file was written against.
    surface = set(_surface(oracle))
    for pair in [("", "TensorSerializer"), (".stream_io", "CURLStreamFile"), (".stream_io", "SEEK_END"),
                 (".stream_io", "default_s3_read_endpoint"), (".utils", "MemoryUsage"),
                 (".serialization", "TensorEntry"), (".stream_io", "_infer_credentials"),
                 (".torch_compat", "tensorizer_saving"), (".torch_compat", "tensorizer_loading")]:
        assert pair in surface, pair


def test_version_is_tensorizer_compatible(tz):
    assert tz.__version__ == "2.12.1"
    assert isinstance(tz.__rs_version__, str)
