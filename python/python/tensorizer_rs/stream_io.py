"""tensorizer's ``stream_io``: ``open_stream`` for local paths, ``http(s)://``,
``s3://`` and ``redis://`` URIs.

Remote reads are positioned range requests served by the native host (the
same code that loads tensors), so a stream can seek anywhere, including from
the end. Writing to ``s3://`` goes to a local temporary file that is uploaded
when the stream is closed (a multipart upload, aborted on any error); leaving
a ``with`` block by an exception discards it instead of uploading.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from typing import IO, Any

from . import _native

__all__ = ["open_stream", "RemoteStream", "S3Upload"]

_REMOTE = ("http", "https", "s3", "redis")


def _s3_kwargs(
    s3_access_key_id: str | None,
    s3_secret_access_key: str | None,
    s3_endpoint: str | None,
    s3_config_path: str | os.PathLike[str] | None,
    s3_region_name: str | None,
    force_http: bool | None,
) -> dict[str, Any]:
    return {
        "s3_access_key_id": s3_access_key_id,
        "s3_secret_access_key": s3_secret_access_key,
        "s3_endpoint": s3_endpoint,
        "s3_config_path": os.fspath(s3_config_path) if s3_config_path is not None else None,
        "s3_region_name": s3_region_name,
        "force_http": force_http,
    }


class RemoteStream(io.RawIOBase):
    """A read-only, seekable file over a remote object. Every read is one
    range request (or a few, for Redis keys); nothing is buffered."""

    def __init__(self, source: _native.NativeSource, begin: int = 0) -> None:
        super().__init__()
        self._source = source
        self._pos = max(0, begin)

    @property
    def name(self) -> str:
        return self._source.name()

    @property
    def native_source(self) -> _native.NativeSource:
        """The native source, shared with ``TensorDeserializer``."""
        return self._source

    @property
    def size(self) -> int:
        return self._source.size()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._source.size()}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence ({whence})")
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        view = memoryview(buffer).cast("B")
        n = self._source.readinto_at(self._pos, view)
        self._pos += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if size is None or size < 0:
            size = max(0, self._source.size() - self._pos)
        data = self._source.read_at(self._pos, size)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)


class S3Upload(io.FileIO):
    """A local temporary file that is uploaded to ``s3://`` when closed.

    It is always readable and writable (as tensorizer's, whatever the
    mode), so ``TensorSerializer`` accepts it. Only an explicit
    :meth:`close` (or leaving a ``with`` block normally) uploads: leaving a
    ``with`` block by an exception, :meth:`discard`, or the stream being
    garbage-collected unclosed deletes it without uploading, leaving any
    existing object under the key as it was. If the upload fails, nothing
    is visible under the key and ``close`` raises."""

    def __init__(self, uri: str, mode: str, s3: dict[str, Any]) -> None:
        self._discarded = True  # until fully opened: a half-built stream uploads nothing
        fd, path = tempfile.mkstemp(prefix="tensorizer-rs-", suffix=".upload")
        os.close(fd)
        super().__init__(path, "r+b")
        self._uri = uri
        self._s3 = s3
        self._temp_path = path
        self._discarded = False

    @property
    def uri(self) -> str:
        return self._uri

    def _replace_contents(self, path: str) -> None:
        """Makes the finished file at ``path`` (moved here, on the same file
        system) what is uploaded, instead of what was written so far."""
        os.replace(path, self._temp_path)

    def discard(self) -> None:
        """Closes without uploading."""
        self._discarded = True
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()
            if not self._discarded:
                _native.s3_upload(self._temp_path, self._uri, **self._s3)
        finally:
            with contextlib.suppress(OSError, AttributeError):
                os.unlink(self._temp_path)

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is not None:
            self._discarded = True
        self.close()

    def __del__(self) -> None:
        # Collected without an explicit close: abandoned, so nothing is
        # uploaded (io.IOBase.__del__ would close, and so upload, it).
        with contextlib.suppress(Exception):
            self.discard()


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
    s3_region_name: str | None = None,
    s3_signature_version: str | None = None,
    certificate_handling: Any = None,
) -> IO[bytes] | RemoteStream:
    """Opens a local path or a remote URI like tensorizer's ``open_stream``.

    * ``http(s)://``, ``redis://host[:port]/prefix``: ``"rb"`` only.
    * ``s3://bucket/key``: ``"rb"``, or ``"wb[+]"`` / ``"ab[+]"`` to upload
      on close. Credentials, endpoint and region come from the arguments,
      then vLLM's ``S3_*`` variables, ``~/.s3cfg`` (or ``s3_config_path``),
      the ``AWS_*`` variables, and finally tensorizer's defaults. Requests
      are always signed with SigV4.
    * Anything else, including an ``os.PathLike``, is a local file (binary
      modes only; parent directories are created for writing).

    ``begin`` positions the stream. ``end``, ``buffer_size`` and
    ``certificate_handling`` are accepted for compatibility: reads are
    ranged on demand, so they change nothing.
    """
    if isinstance(path_uri, os.PathLike):
        path, scheme = os.fspath(path_uri), ""
    elif isinstance(path_uri, str):
        path = path_uri
        scheme = path.split("://", 1)[0].lower() if "://" in path else ""
    else:
        raise TypeError(f"path_uri must be str or os.PathLike, not {type(path_uri).__name__}")
    normalized = "".join(sorted(mode))
    if scheme in _REMOTE:
        if s3_signature_version not in (None, "s3v4", "v4"):
            raise ValueError(f"unsupported S3 signature version {s3_signature_version!r}: only SigV4 is implemented")
        s3 = _s3_kwargs(
            s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path, s3_region_name, force_http
        )
        if scheme == "s3" and normalized in ("bw", "ab", "+bw", "+ab"):
            return S3Upload(path, mode, s3)
        if normalized != "br":
            if scheme == "s3":
                raise ValueError('Only the modes "rb", "wb[+]", and "ab[+]" are valid when opening s3:// streams.')
            label = "http(s)" if scheme.startswith("http") else scheme
            raise ValueError(f'Only the mode "rb" is valid when opening {label}:// streams.')
        source = _native.NativeSource(path, **(s3 if scheme == "s3" else {}))
        return RemoteStream(source, begin or 0)
    if "b" not in mode:
        raise ValueError("Only binary modes are supported")
    if any(c in mode for c in "wax"):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    f = open(path, mode, buffering=buffer_size or io.DEFAULT_BUFFER_SIZE)
    if begin:
        f.seek(begin)
    return f
