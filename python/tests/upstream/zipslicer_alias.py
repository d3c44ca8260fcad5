"""pytest plugin: ``import zipslicer`` gives ``tensorizer_rs.zipslicer``.

Loaded with ``-p zipslicer_alias`` by ``run_zipslicer.py`` before
zipslicer's test modules are imported. With
``TZR_ZIPSLICER_IMPL=zipslicer`` nothing is aliased and the real zipslicer
runs (the control run).
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest

IMPL = os.environ.get("TZR_ZIPSLICER_IMPL", "tensorizer_rs")

if IMPL != "zipslicer":
    if "zipslicer" in sys.modules:
        raise RuntimeError("the real zipslicer was imported before the alias was installed")
    sys.modules["zipslicer"] = importlib.import_module("tensorizer_rs.zipslicer")


def pytest_report_header(config: pytest.Config) -> list[str]:
    module = sys.modules.get("zipslicer") or importlib.import_module("zipslicer")
    return [f"zipslicer 0.8.1's tests against: {module.__name__} ({getattr(module, '__file__', '?')})"]
