"""pytest plugin for running tensorizer 2.12.1's own test suite against us.

Loaded with ``-p upstream_plugin`` by ``run.py`` (which puts this directory
on ``sys.path``); it is not a conftest, so the project's own
``pytest python/tests`` never loads it.

It does three things, all before tensorizer's test modules are imported:

1. ``import tensorizer`` (and every ``tensorizer.<sub>``) resolves to
   ``tensorizer_rs`` (and ``tensorizer_rs.<sub>``): the same module objects,
   so ``patch.object(stream_io, ...)`` in a test patches our module. A
   submodule that tensorizer_rs lacks fails to import, as it should. With
   ``TZR_UPSTREAM_IMPL=tensorizer`` nothing is aliased and the real
   tensorizer runs (the control run, ``run.py --oracle``).
2. Adapts the test environment to the pinned packages of ``.venv-test``
   without touching the tests: moto 5 dropped ``moto.mock_s3`` (and
   ``FAKE_KEYS``), which tensorizer's tests (written for moto 4) call.
3. Applies ``expected.toml``: ``skip: why`` entries are skipped, ``heavy:
   why`` entries too unless ``TZR_UPSTREAM_HEAVY=1`` (``heavy, xfail: why``
   combines the two), and the failures of
   ``xfail: why`` entries are reported as xfailed (strictly: one that runs
   without failing fails the session until its entry says ``pass``). Every
   listed test id must be collected, so the list cannot go stale silently.
   Against the real tensorizer (the control run) every test that is not
   skipped must pass.
"""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
EXPECTED_PATH = HERE / "expected.toml"

IMPL = os.environ.get("TZR_UPSTREAM_IMPL", "tensorizer_rs")
ORACLE = IMPL == "tensorizer"
HEAVY = os.environ.get("TZR_UPSTREAM_HEAVY") == "1"


def _alias_tensorizer() -> None:
    """Make ``tensorizer`` and its submodules our modules, the supported way."""
    importlib.import_module("tensorizer_rs").install_as_tensorizer()


def _adapt_moto() -> None:
    """moto 5 replaced ``mock_s3()`` by ``mock_aws()`` and dropped FAKE_KEYS."""
    try:
        import moto
    except ImportError:
        return
    if hasattr(moto, "mock_s3"):
        return
    # The credentials moto 4's mocks exposed as FAKE_KEYS (and that moto 5's
    # mock_aws still puts in the environment).
    fake_keys = {
        "AWS_ACCESS_KEY_ID": "FOOBARKEY",
        "AWS_SECRET_ACCESS_KEY": "FOOBARSECRET",
    }

    def mock_s3() -> Any:
        mock = moto.mock_aws()
        mock.FAKE_KEYS = fake_keys
        return mock

    moto.mock_s3 = mock_s3


if not ORACLE:
    _alias_tensorizer()
_adapt_moto()


def _load_expected() -> dict[str, str]:
    with EXPECTED_PATH.open("rb") as f:
        data = tomllib.load(f)
    tests = data.get("tests", {})
    bad = {
        k: v
        for k, v in tests.items()
        if not isinstance(v, str) or not (v == "pass" or _kinds(v) <= {"skip", "xfail", "heavy"})
    }
    if bad:
        raise pytest.UsageError(f"{EXPECTED_PATH}: unknown outcomes {bad}")
    return tests


def _kinds(value: str) -> set[str]:
    """The outcome words before the reason: "heavy, xfail: why" -> {heavy, xfail}."""
    return {word.strip() for word in value.split(":", 1)[0].split(",")}


def _reason(value: str) -> str:
    return value.split(":", 1)[1].strip() if ":" in value else value


EXPECTED = _load_expected()
_SEEN: set[str] = set()
_XFAIL: dict[str, str] = {}
_RAN: set[str] = set()
_FAILED: set[str] = set()
_UNEXPECTED_PASSES: list[str] = []


def _key(nodeid: str) -> str:
    # run.py runs pytest inside the extracted tests/ directory, so node ids
    # are "test_x.py::Class::test"; subtests are reported under their test.
    return nodeid.split("/")[-1]


def pytest_report_header(config: pytest.Config) -> list[str]:
    module = sys.modules.get("tensorizer") or importlib.import_module(IMPL)
    return [
        f"tensorizer 2.12.1's tests against: {IMPL} "
        f"({getattr(module, '__file__', '?')}); expected outcomes: {EXPECTED_PATH}"
    ]


# test_stream_io's TestCurlStream reads the first bytes of gpt-neo's README
# from raw.githubusercontent.com. Here it reads them from a loopback HTTP
# server (werkzeug, with Range support) serving a file that starts the same
# way, so the tests of begin/end/seek/readinto run offline.
README_HEAD = b"# GPT Neo\n\n[![DOI](https://doi.example/badge.svg)](https://doi.example/)\n"
README_BODY = README_HEAD + b"Stand-in for the README of EleutherAI/gpt-neo.\n" * 64


def _serve_readme() -> str:
    import threading

    from werkzeug.serving import make_server
    from werkzeug.wrappers import Request, Response

    @Request.application  # type: ignore[arg-type]
    def app(request: Request) -> Response:
        response = Response(README_BODY, mimetype="text/markdown")
        return response.make_conditional(request, accept_ranges=True, complete_length=len(README_BODY))

    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/EleutherAI/gpt-neo/master/README.md"


def _redirect_neo_url(items: list[pytest.Item]) -> None:
    modules = {getattr(item, "module", None) for item in items}
    for module in modules:
        if module is not None and hasattr(module, "NEO_URL"):
            module.NEO_URL = _serve_readme()


# test_stream_io's start_redis gives redis-server one second per line of its
# start-up banner and fails when a loaded CI machine is slower than that (seen
# here with a 3 s gap after "just started"). This one starts the same server
# and waits up to REDIS_START_S for it to answer PING.
REDIS_START_S = 30.0


def _start_redis_patiently(port: int = 6381) -> tuple[Any, Any]:
    import subprocess
    import time

    import redis

    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        # A pipe, as theirs: teardown_redis closes it. The banner fits its buffer.
        stdout=subprocess.PIPE,
    )
    client = redis.Redis(host="localhost", port=port, db=0)
    deadline = time.monotonic() + REDIS_START_S
    while True:
        try:
            client.ping()
            # Answered by ours, not by a server some earlier run left on the port?
            if client.info("server").get("process_id") != process.pid:
                process.kill()
                raise Exception(f"port {port} is taken by another redis-server; stop it and run again")
            return process, client
        except redis.exceptions.ResponseError as e:
            process.kill()
            raise Exception(f"port {port}: {e} (another redis-server on this port? stop it and run again)") from e
        except redis.exceptions.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise Exception(f"Redis server did not start on port {port} within {REDIS_START_S} s")
            time.sleep(0.05)


def _patient_redis(items: list[pytest.Item]) -> None:
    modules = {getattr(item, "module", None) for item in items}
    for module in modules:
        if module is not None and hasattr(module, "start_redis"):
            module.start_redis = _start_redis_patiently


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _redirect_neo_url(items)
    _patient_redis(items)
    for item in items:
        key = _key(item.nodeid)
        _SEEN.add(key)
        value = EXPECTED.get(key, "pass")
        kinds = _kinds(value)
        reason = _reason(value)
        if "skip" in kinds:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif "heavy" in kinds and not HEAVY:
            item.add_marker(
                pytest.mark.skip(reason=f"{reason} (set TZR_UPSTREAM_HEAVY=1 to run it)")
            )
        elif "xfail" in kinds and not ORACLE:
            _XFAIL[key] = reason


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.keyword or session.config.option.markexpr:
        return
    files = {key.split("::", 1)[0] for key in _SEEN}
    stale = sorted(k for k in set(EXPECTED) - _SEEN if k.split("::", 1)[0] in files)
    if stale:
        raise pytest.UsageError(
            f"{EXPECTED_PATH} lists tests that tensorizer's suite does not have: {stale}"
        )


# pytest's xfail marker does not fit unittest subTests (each passing subtest
# of a strict xfail would count as an XPASS), so "xfail" is done here: a test
# is expected to fail when any of its reports (setup, call, any subtest) fails.
# Its failed reports are shown as xfailed, with the reason; a test that runs
# without any failure fails the session (an unexpected pass).


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    key = _key(item.nodeid)
    if call.when == "call":
        _RAN.add(key)
    if report.failed:
        _FAILED.add(key)
        reason = _XFAIL.get(key)
        if reason is not None:
            report.outcome = "skipped"
            report.wasxfail = reason
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    _UNEXPECTED_PASSES.extend(sorted(k for k in _XFAIL if k in _RAN and k not in _FAILED))
    if _UNEXPECTED_PASSES and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _UNEXPECTED_PASSES:
        terminalreporter.section("tests expected to fail that passed", red=True)
        for key in _UNEXPECTED_PASSES:
            terminalreporter.line(
                f"XPASS {key}: now passes; change its entry in {EXPECTED_PATH.name} to \"pass\""
            )
