"""The package's PEP 517 build backend: maturin's, behind a check that the
Rust toolchain it needs is here.

Without this check, a build on a machine with no ``cargo`` asks for
maturin's rustup installer, which downloads a toolchain from the internet
(and fails with a long traceback on an offline GPU node). Instead, every
hook first looks for what the build needs (``cargo`` and ``rustc`` at the
workspace's ``rust-version``, and the ``wasm32-unknown-unknown`` target that
``tzr view``'s embedded page is compiled for) and stops with one line that
names what to install. The wheel is stripped of debug information.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import maturin

# What `tzr view`'s page is compiled for (host-native/tzr/build/page.rs).
WASM_TARGET = "wasm32-unknown-unknown"
WORKSPACE = Path(__file__).resolve().parents[2] / "Cargo.toml"
HELP = "install Rust with rustup (https://rustup.rs), or install a prebuilt tensorizer-rs wheel"


def _rust_version() -> str:
    """The workspace's minimum Rust version, from its Cargo.toml ("0" when
    the package is built away from its workspace: cargo then says)."""
    try:
        with WORKSPACE.open("rb") as f:
            return str(tomllib.load(f)["workspace"]["package"]["rust-version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0"


def _version(text: str) -> tuple[int, ...]:
    match = re.search(r"(\d+)\.(\d+)", text)
    return tuple(int(x) for x in match.groups()) if match else ()


def missing() -> str | None:
    """One line saying what the build lacks, or None when it has it all."""
    cargo, rustc = shutil.which("cargo"), shutil.which("rustc")
    if cargo is None or rustc is None:
        return f"tensorizer-rs: building from source needs cargo and rustc, which are not on PATH: {HELP}"
    need = _rust_version()
    try:
        have = subprocess.run([rustc, "--version"], capture_output=True, text=True, check=True).stdout
        sysroot = subprocess.run([rustc, "--print", "sysroot"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return f"tensorizer-rs: building from source needs a working rustc ({rustc}: {e}): {HELP}"
    if _version(have) < _version(need):
        return f"tensorizer-rs: building from source needs Rust {need} or newer, not {have.strip()}: rustup update"
    if not (Path(sysroot.strip()) / "lib" / "rustlib" / WASM_TARGET).is_dir():
        return (
            f"tensorizer-rs: building from source needs the Rust target {WASM_TARGET} for tzr's inspector page: "
            f"rustup target add {WASM_TARGET}"
        )
    return None


def _checked() -> None:
    problem = missing()
    if problem is not None:
        # One line on stderr and a plain exit: no traceback to read past.
        print(problem, file=sys.stderr)
        raise SystemExit(1)
    # Never let maturin fetch a toolchain behind the user's back.
    os.environ["MATURIN_NO_INSTALL_RUST"] = "1"
    os.environ.setdefault("MATURIN_PEP517_ARGS", "--strip")


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _checked()
    return list(maturin.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _checked()
    return list(maturin.get_requires_for_build_editable(config_settings))


def get_requires_for_build_sdist(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    os.environ["MATURIN_NO_INSTALL_RUST"] = "1"
    return list(maturin.get_requires_for_build_sdist(config_settings))


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    _checked()
    return str(maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def build_wheel(
    wheel_directory: str, config_settings: Mapping[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    _checked()
    return str(maturin.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(
    wheel_directory: str, config_settings: Mapping[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    _checked()
    return str(maturin.build_editable(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    return str(maturin.build_sdist(sdist_directory, config_settings))
