"""tensorizer's ``stream_io.open_stream`` for local files (remote URIs are
reported as unsupported for now)."""

from __future__ import annotations

import io
import os
from typing import IO, Any


def open_stream(
    path_uri: str | os.PathLike[str],
    mode: str = "rb",
    s3_access_key_id: str | None = None,
    s3_secret_access_key: str | None = None,
    s3_endpoint: str | None = None,
    s3_config_path: str | os.PathLike[str] | None = None,
    buffer_size: int | None = None,
    force_http: bool | None = None,
    *,
    begin: int | None = None,
    end: int | None = None,
    **_ignored: Any,
) -> IO[bytes]:
    """Opens a local file in binary mode (creating parent directories for
    writing), positioned at ``begin``."""
    if isinstance(path_uri, os.PathLike):
        path = os.fspath(path_uri)
    elif isinstance(path_uri, str):
        path = path_uri
        scheme = path.split("://", 1)[0].lower() if "://" in path else ""
        if scheme in ("http", "https", "s3", "redis"):
            raise NotImplementedError(f"{scheme}:// streams are not supported by tensorizer_rs yet")
    else:
        raise TypeError(f"path_uri must be str or os.PathLike, not {type(path_uri).__name__}")
    if "b" not in mode:
        raise ValueError("Only binary modes are supported")
    if any(c in mode for c in "wax"):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    f = open(path, mode, buffering=buffer_size or io.DEFAULT_BUFFER_SIZE)
    if begin:
        f.seek(begin)
    return f
