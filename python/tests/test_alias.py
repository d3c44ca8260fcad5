"""``install_as_tensorizer()``: ``import tensorizer`` gives our modules, one
copy of each. Each case runs in a fresh interpreter (it changes
``sys.modules``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_every_name_is_our_module_object() -> None:
    done = run(
        """
        import sys, tensorizer_rs
        tensorizer_rs.install_as_tensorizer()
        tensorizer_rs.install_as_tensorizer()  # idempotent
        import tensorizer
        from tensorizer import TensorDeserializer
        from tensorizer.serialization import TensorSerializer
        import tensorizer.stream_io, tensorizer.utils, tensorizer._deserializer
        assert tensorizer is tensorizer_rs
        assert TensorDeserializer is tensorizer_rs.TensorDeserializer
        assert TensorSerializer is tensorizer_rs.TensorSerializer
        assert tensorizer.stream_io is sys.modules["tensorizer_rs.stream_io"]
        assert sys.modules["tensorizer._deserializer"] is sys.modules["tensorizer_rs._deserializer"]
        assert tensorizer.serialization.__spec__.name == "tensorizer_rs.serialization"
        assert "torch" not in sys.modules, "nothing heavy is imported"
        import tensorizer.torch_compat
        assert tensorizer.torch_compat is sys.modules["tensorizer_rs.torch_compat"]
        try:
            import tensorizer.no_such_module
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("a submodule we lack imported")
        """
    )
    assert done.returncode == 0, done.stderr


def test_the_real_tensorizer_imported_first_is_refused() -> None:
    pytest.importorskip("tensorizer")
    done = run(
        """
        import tensorizer, tensorizer_rs
        tensorizer_rs.install_as_tensorizer()
        """
    )
    assert done.returncode != 0
    assert "the real tensorizer is already imported" in done.stderr.splitlines()[-1], done.stderr


@pytest.mark.parametrize(("value", "installed"), [("1", True), ("0", False), ("", False)])
def test_the_vllm_plugin_installs_it_when_asked(value: str, installed: bool) -> None:
    done = run(
        f"""
        import sys
        from tensorizer_rs.vllm_plugin import register
        register(); register()
        assert (sys.modules.get("tensorizer") is sys.modules["tensorizer_rs"]) is {installed}
        """,
        TENSORIZER_RS_AS_TENSORIZER=value,
    )
    assert done.returncode == 0, done.stderr
