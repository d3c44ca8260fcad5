"""pytest configuration for the tensorizer_rs Python package.

Run (against our implementation, the default)::

    /work/.venv-oracle/bin/python -m pytest python/tests

Validate the suite against the real tensorizer 2.12.1::

    TZ_UNDER_TEST=tensorizer /work/.venv-oracle/bin/python -m pytest python/tests
"""

from __future__ import annotations

import os
import sys

# Nothing may download from a model hub at runtime.  Set before anything
# imports transformers / huggingface_hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import pytest  # noqa: E402

import tzhelpers  # noqa: E402

#: The implementation under test (module-level, as well as a fixture below).
tz = tzhelpers.tz


def pytest_configure(config):
    config.addinivalue_line(
        "filterwarnings", "ignore:ComplexHalf support is experimental:UserWarning"
    )


def pytest_report_header(config):
    where = getattr(tz, "__file__", "?")
    ver = getattr(tz, "__version__", "?")
    return f"implementation under test: {tzhelpers.TZ_NAME} {ver} ({where})"


@pytest.fixture(name="tz", scope="session")
def tz_fixture():
    """The implementation under test (TZ_UNDER_TEST, default tensorizer_rs)."""
    return tz


@pytest.fixture(scope="session")
def oracle():
    """The real tensorizer package (reference implementation)."""
    return tzhelpers.import_oracle()


@pytest.fixture(scope="session")
def manifest():
    return tzhelpers.load_manifest()


@pytest.fixture(scope="session")
def vectors_dir():
    return tzhelpers.VECTORS_DIR
