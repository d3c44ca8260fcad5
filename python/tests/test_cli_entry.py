"""The `tzr` the wheel installs: `python -m tensorizer_rs` and the console
script run the native command line in-process, with its exit codes."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import torch

import tensorizer_rs
from tensorizer_rs.__main__ import main


def test_python_m_runs_tzr() -> None:
    done = subprocess.run([sys.executable, "-m", "tensorizer_rs", "--version"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout == f"tzr {tensorizer_rs.__rs_version__}\n"


def test_main_returns_the_exit_code(tmp_path: pathlib.Path) -> None:
    file = tmp_path / "m.tensors"
    with tensorizer_rs.TensorSerializer(str(file)) as s:
        s.write_state_dict({"w": torch.ones(2)})
    assert main(["verify", "--quiet", str(file)]) == 0
    assert main(["convert", str(file), str(tmp_path / "m.pt")]) == 2
    assert main(["inspect", str(tmp_path / "missing.tensors")]) == 3
    assert main(["no-such-command"]) == 2


def test_console_script_is_declared() -> None:
    import tomllib

    project = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["tzr"] == "tensorizer_rs.__main__:main"
