"""tensorizer's ``stream_io``: ``open_stream`` for local paths, ``http(s)://``,
``s3://``, ``gs://``, ``az://`` and ``redis://`` URIs (``gs://`` and ``az://``
need a native build with the ``cloud`` feature).

Remote reads are positioned range requests served by the native host (the
same code that loads tensors), so a stream can seek anywhere, including from
the end. Every URI is parsed once, natively, and opened by the host's one
``open_source``; failures are ``OSError`` subclasses (``FileNotFoundError``,
``PermissionError``, ``TimeoutError``, ...) naming the URI and byte range.
Writing to an object store goes to a local temporary file that is uploaded
when the stream is closed (a multipart upload, aborted on any error); leaving
a ``with`` block by an exception discards it instead of uploading.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
from typing import IO, Any, NamedTuple, Optional, Union

import numpy as np

from . import _args, _native

__all__ = [
    "open_stream",
    "CURLStreamFile",
    "RedisStreamFile",
    "CAInfo",
    "RemoteOptions",
    "RemoteStream",
    "RemoteUpload",
    "S3Upload",
]

# Object stores that streams opened for writing upload to on close.
_UPLOADED = _native.UPLOADED_SCHEMES

SEEK_SET = io.SEEK_SET
SEEK_CUR = io.SEEK_CUR
SEEK_END = io.SEEK_END

# tensorizer's module attributes. No curl binary is used here (HTTP is
# native); ``curl_path`` is only reported, as tensorizer does.
curl_path = shutil.which("curl")
default_s3_read_endpoint = "accel-object.ord1.coreweave.com"
default_s3_write_endpoint = "object.ord1.coreweave.com"
_s3_default_config_paths = (os.path.expanduser("~/.s3cfg"),)


def _check_range(begin: int | None, end: int | None) -> tuple[int, int | None]:
    """tensorizer's validation of a ``begin``/``end`` (exclusive) range."""
    if begin is None:
        begin = 0
    elif begin < 0:
        raise ValueError("Invalid begin, must be non-negative")
    if end is not None and end <= begin:
        raise ValueError(f"End marker must come strictly after begin marker (requested range: {begin} to {end})")
    return begin, end


def _scheme_or_none(uri: str) -> str | None:
    try:
        return str(_native.location_scheme(uri))
    except ValueError:
        return None


def _curl_range(begin: Any, end: Any) -> tuple[int | None, int | None]:
    """``begin``/``end`` as tensorizer's ``CURLStreamFile`` takes them: its
    range checks first, then the values written into curl's ``--range``,
    which fails (OSError) on anything but an int; a begin equal to 0 asks for
    no range."""
    _check_range(begin, end)
    if end is not None and not isinstance(end, int):
        raise TypeError(f"end must be an int or None, not {type(end).__name__}")
    if begin is not None and begin != 0 and (isinstance(begin, bool) or not isinstance(begin, (int, np.integer))):
        raise _failed_to_open(OSError(f"curl cannot request the range {begin}-"))
    return (int(begin) if begin else None), end


def _bounds_stream(begin: object, end: object) -> bool:
    """Whether ``end`` bounds a local read: an int past ``begin`` (our
    extension; tensorizer ignores ``end`` for local files, so any other
    value is ignored too)."""
    if isinstance(end, bool) or not isinstance(end, int):
        return False
    start = begin or 0
    return isinstance(start, int) and 0 <= start < end


class RemoteStream(io.RawIOBase):
    """A read-only, seekable file over a remote object. Every read is one
    range request (or a few, for Redis keys); nothing is buffered.

    Positions are absolute in the object. ``begin`` is where the stream
    starts; ``end`` (exclusive, as in tensorizer) is where reads stop: the
    stream ends there, also for ``SEEK_END``."""

    def __init__(self, source: _native.NativeSource, begin: int | None = 0, end: int | None = None) -> None:
        super().__init__()
        begin, end = _check_range(begin, end)
        self._source = source
        self._pos = begin
        self._end = end
        self.setup_latency: float = 0.0
        self.response_latencies: list[float] = []
        self.bytes_read = 0
        self.bytes_skipped = 0
        self.read_operations = 0
        self._error_context: list[str] = []

    @property
    def name(self) -> str:
        return self._source.name()

    @property
    def native_source(self) -> _native.NativeSource:
        """The native source (the whole object), shared with ``TensorDeserializer``."""
        return self._source

    @property
    def size(self) -> int:
        return self._source.size()

    @property
    def end(self) -> int | None:
        """Where reads stop (exclusive), or ``None`` for the object's end."""
        return self._end

    def _limit(self) -> int:
        size = self._source.size()
        return size if self._end is None else min(size, self._end)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def fileno(self) -> int:
        return -1

    def tell(self) -> int:
        return self._pos

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._limit()}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence ({whence})")
        if base + position < 0:
            raise ValueError("negative seek position")
        target = base + position
        if target > self._pos:
            self.bytes_skipped += target - self._pos
        self._pos = target
        return self._pos

    def close(self) -> None:
        """Closes the stream (the native source is released with it)."""
        super().close()

    def register_error_context(self, msg: str) -> None:
        """Adds ``msg`` to the message of read errors from now on (as
        tensorizer's ``CURLStreamFile`` does)."""
        self._error_context.append(msg)

    def _annotate(self, error: OSError) -> OSError:
        if self._error_context:
            error.args = (*error.args[:-1], f"{error.args[-1] if error.args else ''}\n" + "\n".join(self._error_context))
        return error

    def _span(self, size: int | None) -> int:
        left = max(0, self._limit() - self._pos)
        return left if size is None or size < 0 else min(size, left)

    def readinto(self, ba: Any) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        view = memoryview(ba).cast("B")
        want = self._span(len(view))
        if want == 0:
            return 0
        started = time.monotonic()
        try:
            n = self._source.readinto_at(self._pos, view[:want])
        except OSError as e:
            raise self._annotate(e)
        self.response_latencies.append(time.monotonic() - started)
        self._pos += n
        self.bytes_read += n
        self.read_operations += 1
        return n

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        want = self._span(size)
        if want == 0:
            return b""
        started = time.monotonic()
        try:
            data = self._source.read_at(self._pos, want)
        except OSError as e:
            raise self._annotate(e)
        self.response_latencies.append(time.monotonic() - started)
        self._pos += len(data)
        self.bytes_read += len(data)
        self.read_operations += 1
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readline(self, size: int | None = -1) -> bytes:
        raise io.UnsupportedOperation("readline")


class CAInfo:
    """tensorizer's SSL certificate settings for ``https://`` and S3
    streams: exactly one of ``cacert`` (a PEM bundle of the CAs to trust,
    curl's ``--cacert``), ``capath`` (a directory of PEM CA files, curl's
    ``--capath``) or ``allow_untrusted=True`` (no verification, curl's
    ``--insecure``). A named bundle or directory replaces the default
    trust; ``certificate_handling=None`` keeps the default: the first of
    ``AWS_CA_BUNDLE`` (S3 only), ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``,
    ``SSL_CERT_FILE``/``SSL_CERT_DIR`` that is set, else the system's CAs."""

    __slots__ = ("_curl_flags",)

    def __init__(self, *, cacert: Optional[str] = None, capath: Optional[str] = None, allow_untrusted: bool = False):
        if (cacert, capath).count(None) + (not allow_untrusted) != 2:
            raise ValueError(
                "Exactly one of cacert, capath, or allow_untrusted=True"
                " must be specified. For default certificate verification"
                " behaviour, use certificate_handling=None instead of"
                " an explicit CAInfo instance"
            )
        self._curl_flags: tuple[str, ...]
        if cacert is not None:
            if not os.path.isfile(cacert):
                raise ValueError("Invalid cacert file path, see https://curl.se/docs/manpage.html#--cacert")
            self._curl_flags = ("--cacert", str(cacert))
        elif capath is not None:
            if not os.path.isdir(capath):
                raise ValueError("Invalid capath directory path, see https://curl.se/docs/manpage.html#--capath")
            self._curl_flags = ("--capath", str(capath))
        else:
            self._curl_flags = ("--insecure",)

    @property
    def curl_flags(self) -> tuple[str, ...]:
        return self._curl_flags

    def __hash__(self) -> int:
        return hash(self._curl_flags)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CAInfo) and self._curl_flags == other._curl_flags


#: S3 and TLS settings for remote objects, one typed, frozen class (native).
RemoteOptions = _native.RemoteOptions


def _remote_options(
    options: Optional[RemoteOptions] = None,
    *,
    s3_access_key_id: Optional[str] = None,
    s3_secret_access_key: Optional[str] = None,
    s3_endpoint: Optional[str] = None,
    s3_config_path: Union[str, "os.PathLike[str]", None] = None,
    s3_region_name: Optional[str] = None,
    force_http: Optional[bool] = None,
    certificate_handling: Optional[CAInfo] = None,
) -> RemoteOptions:
    """The one conversion of tensorizer's keyword arguments (the ``s3_*``
    ones, ``force_http``, ``certificate_handling``) into a
    :class:`RemoteOptions`; ``options``, if given, is used as it is, and
    may not be combined with them."""
    loose = (s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path, s3_region_name, force_http)
    if certificate_handling is not None and not isinstance(certificate_handling, CAInfo):
        raise TypeError(
            "certificate_handling must either be None"
            " (for cURL's default SSL certificate verification),"
            " or a CAInfo object,"
            f" not {certificate_handling.__class__.__name__}"
        )
    if options is not None:
        if not isinstance(options, RemoteOptions):
            raise TypeError(f"remote_options must be a RemoteOptions or None, not {type(options).__name__}")
        if certificate_handling is not None or any(v is not None for v in loose):
            raise ValueError(
                "pass either remote_options or the s3_* / force_http / certificate_handling arguments, not both"
            )
        return options
    trust: dict[str, Any] = {}
    if certificate_handling is not None:
        flag, *value = certificate_handling.curl_flags
        trust = {"cacert": value[0]} if flag == "--cacert" else {"capath": value[0]} if flag == "--capath" else {
            "allow_untrusted": True
        }
    return RemoteOptions(
        s3_access_key_id=s3_access_key_id,
        s3_secret_access_key=s3_secret_access_key,
        s3_endpoint=s3_endpoint,
        s3_config_path=os.fspath(s3_config_path) if s3_config_path is not None else None,
        s3_region_name=s3_region_name,
        force_http=force_http,
        **trust,
    )


class CURLStreamFile(RemoteStream):
    """tensorizer's ``CURLStreamFile``: a readable, seekable stream over an
    ``http(s)://`` URL, served by native range requests (no curl process).
    ``begin``/``end`` (exclusive) bound it as in tensorizer."""

    def __init__(
        self,
        uri: str,
        begin: Optional[int] = None,
        end: Optional[int] = None,
        headers: Optional[dict[str, Any]] = None,
        *,
        buffer_size: Optional[int] = None,
        certificate_handling: Optional[CAInfo] = None,
    ) -> None:
        self._open(uri, begin, end, headers, buffer_size, certificate_handling, None)

    @classmethod
    def _with(
        cls, uri: str, begin: int | None, end: int | None, buffer_size: int | None, remote: RemoteOptions
    ) -> CURLStreamFile:
        """A stream reaching `uri` as `remote` says (``open_stream``'s
        ``remote_options``; tensorizer's signature has no place for it)."""
        self = cls.__new__(cls)
        self._open(uri, begin, end, None, buffer_size, None, remote)
        return self

    def _open(
        self,
        uri: str,
        begin: int | None,
        end: int | None,
        headers: Optional[dict[str, Any]],
        buffer_size: int | None,
        certificate_handling: Optional[CAInfo],
        remote_options: RemoteOptions | None,
    ) -> None:
        begin, end = _curl_range(begin, end)
        if buffer_size is not None and not isinstance(buffer_size, int):
            # tensorizer hands it to the pipe's buffer (TypeError there).
            raise TypeError(f"buffer_size must be an int or None, not {type(buffer_size).__name__}")
        remote = _remote_options(remote_options, certificate_handling=certificate_handling)
        if headers is not None and list(headers.items()):  # AttributeError for a non-mapping, as tensorizer
            raise NotImplementedError("custom request headers are not supported by tensorizer_rs")
        if not isinstance(uri, (str, bytes, os.PathLike)):
            # tensorizer puts it on curl's command line (TypeError there).
            raise TypeError(f"uri must be a str, not {type(uri).__name__}")
        if not isinstance(uri, str) or _scheme_or_none(uri) not in ("http", "https"):
            # tensorizer hands anything else to curl, which fails to fetch it.
            raise _failed_to_open(OSError(f"{uri!r} is not an http(s):// URL"))
        self._uri = uri
        started = time.monotonic()
        source = _open_remote(uri, remote)
        super().__init__(source, begin, end)
        self.setup_latency = time.monotonic() - started
        self.popen_latencies: list[float] = [self.setup_latency]
        self.http_response_latencies = self.response_latencies

    @classmethod
    def _over(cls, source: _native.NativeSource, begin: int | None, end: int | None) -> CURLStreamFile:
        """A stream over an already-opened source (``s3_download``)."""
        self = cls.__new__(cls)
        RemoteStream.__init__(self, source, begin, end)
        self._uri = source.name()
        self.popen_latencies = []
        self.http_response_latencies = self.response_latencies
        return self


class RedisStreamFile(RemoteStream):
    """tensorizer's ``RedisStreamFile``: a readable, seekable stream over the
    ``prefix:…:offset`` keys under ``redis://host[:port]/prefix`` (or, on a
    Redis Cluster, ``redis+cluster://host[:port]/prefix``), served by
    native reads. ``begin``/``end`` (exclusive) bound it."""

    def __init__(
        self,
        uri: str,
        *,
        begin: Optional[int] = None,
        end: Optional[int] = None,
        buffer_size: Optional[int] = None,
    ) -> None:
        # As tensorizer: only a Redis URI (which the native parser names),
        # buffer_size applied to a socket's receive buffer (the same errors
        # for the same values), a false begin is 0 and an end that bounds
        # nothing is ignored.
        if uri and not isinstance(uri, (str, bytes)):
            # The error tensorizer's urlparse raises for anything else (a
            # false value it takes as an empty URI: ValueError below).
            raise AttributeError(f"uri must be a str, not {type(uri).__name__}")
        if not isinstance(uri, str) or not _native.location_is_redis(uri):
            raise ValueError(f"Invalid Redis URI: {uri}")
        if buffer_size is not None:
            import socket

            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_size)
        begin = _args.count(begin) if begin else None
        if not _bounds_stream(begin, end):
            end = None
        _check_range(begin, end)
        started = time.monotonic()
        source = _native.NativeSource(uri)
        super().__init__(source, begin, end)
        self.setup_latency = time.monotonic() - started

    def __enter__(self) -> RedisStreamFile:
        return self


class _ParsedCredentials(NamedTuple):
    config_file: Optional[str]
    s3_endpoint: Optional[str]
    s3_access_key: Optional[str]
    s3_secret_key: Optional[str]
    use_https: Optional[bool]


def _get_s3cfg_values(config_path: Union[str, bytes, "os.PathLike[str]", None] = None) -> _ParsedCredentials:
    """The first readable s3cmd config file of ``config_path`` or the
    defaults, read by the native S3 store's parser (the one reader of
    ``.s3cfg``; ``use_https`` as s3cmd reads booleans)."""
    paths = (config_path,) if config_path else _s3_default_config_paths
    for path in paths:
        try:
            with open(os.fsdecode(path), encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        break
    else:
        return _ParsedCredentials(None, None, None, None, None)
    has_default, host_base, access_key, secret_key, use_https = _native.s3cfg_values(text)
    if not has_default:
        raise ValueError(f"No default section in {os.fsdecode(path)}")
    return _ParsedCredentials(
        config_file=os.fsdecode(path),
        s3_endpoint=host_base,
        s3_access_key=access_key,
        s3_secret_key=secret_key,
        use_https=use_https,
    )


def _infer_credentials(
    s3_access_key_id: Optional[str],
    s3_secret_access_key: Optional[str],
    s3_config_path: Union[str, bytes, "os.PathLike[str]", None] = None,
) -> _ParsedCredentials:
    """tensorizer's credential completion from the s3cmd config file (an
    empty string is a given credential, ``None`` a missing one)."""
    if s3_access_key_id is not None and s3_secret_access_key is not None:
        return _ParsedCredentials(None, None, s3_access_key_id, s3_secret_access_key, None)
    if s3_config_path is not None and not os.path.exists(s3_config_path):
        raise FileNotFoundError(f"Explicitly specified s3_config_path does not exist: {s3_config_path!r}")
    try:
        parsed = _get_s3cfg_values(s3_config_path)
    except ValueError as parse_error:
        raise ValueError(
            "Attempted to access an S3 bucket, but credentials were not provided,"
            " and the fallback .s3cfg file could not be parsed."
        ) from parse_error
    if parsed.config_file is None:
        raise ValueError(
            "Attempted to access an S3 bucket, but credentials were not provided,"
            " and no default .s3cfg file could be found."
        )
    if s3_access_key_id is None:
        s3_access_key_id = parsed.s3_access_key
    if s3_secret_access_key is None:
        s3_secret_access_key = parsed.s3_secret_key
    for value, label in ((s3_access_key_id, "s3_access_key_id"), (s3_secret_access_key, "s3_secret_access_key")):
        if not value:
            raise ValueError(
                f"Attempted to access an S3 bucket, but {label} was not provided,"
                f" and could not be found in the default config file at {parsed.config_file}."
            )
    return parsed._replace(s3_access_key=s3_access_key_id, s3_secret_key=s3_secret_access_key)


def _enforce_scheme(endpoint: str, allow_http: bool = False, force_http: bool = False) -> str:
    """tensorizer's endpoint scheme rule: a bare host gets ``https://``
    (``http://`` when forced), ``https://`` becomes ``http://`` when forced,
    and ``http://`` needs ``allow_http`` or ``force_http``. ``open_stream``
    checks explicit S3 endpoints through this module-level name, so patching
    it (as tensorizer's tests do) takes effect."""
    scheme, *location = endpoint.split("://", maxsplit=1)
    scheme_lc = scheme.lower() if location else None
    if scheme_lc is None:
        return ("http://" if force_http else "https://") + endpoint
    if scheme_lc == "https":
        return "http://" + endpoint[8:] if force_http else endpoint
    if (force_http or allow_http) and scheme_lc == "http":
        return endpoint
    raise ValueError("Non-HTTPS endpoint URLs are not allowed.")


#: tensorizer's presigned-URL expiry granularity: URLs expire at the second
#: day boundary, so clients signing within one day produce the same URL
#: (and hit an HTTP cache).
_SIG_GRANULARITY = 86400


def _s3_download_url(
    path_uri: str,
    s3_access_key_id: Optional[str],
    s3_secret_access_key: Optional[str],
    s3_endpoint: Optional[str] = default_s3_read_endpoint,
    s3_region_name: Optional[str] = None,
    s3_signature_version: Optional[str] = None,
) -> str:
    """A presigned GET URL for ``s3://bucket/key`` (tensorizer's private
    helper; SigV4 query-string signing, expiring at the second day boundary
    from now). Empty credentials give an unsigned URL."""
    _check_signature(s3_signature_version)
    now = int(time.time())
    expiry = now - now % _SIG_GRANULARITY + 2 * _SIG_GRANULARITY
    remote = _remote_options(
        s3_access_key_id=s3_access_key_id, s3_secret_access_key=s3_secret_access_key, s3_endpoint=s3_endpoint,
        s3_region_name=s3_region_name, force_http=_verbatim(s3_endpoint),
    )
    return _native.s3_presign(path_uri, expiry - now, remote)


def _failed_to_open(err: OSError) -> OSError:
    """``err`` with tensorizer's "Failed to open stream" prefix, same type."""
    message = f"Failed to open stream: {err}"
    try:
        again = type(err)(message)
    except Exception:  # an OSError subclass with another constructor
        again = OSError(message)
    again.__cause__ = err
    return again


def _open_remote(path: str, remote: RemoteOptions | None = None) -> _native.NativeSource:
    """Opens a remote source; failures read as tensorizer's do."""
    try:
        return _native.NativeSource(path, remote)
    except OSError as err:
        raise _failed_to_open(err) from err


def _check_signature(s3_signature_version: Optional[str]) -> None:
    if s3_signature_version not in (None, "s3v4", "v4"):
        raise ValueError(f"unsupported S3 signature version {s3_signature_version!r}: only SigV4 is implemented")


def _verbatim(s3_endpoint: Optional[str]) -> Optional[bool]:
    """tensorizer's s3_download/s3_upload use the endpoint as given (open_stream
    has already checked its scheme): an explicit http:// one is allowed."""
    return True if s3_endpoint and s3_endpoint.lower().startswith("http://") else None


def s3_download(
    path_uri: str,
    s3_access_key_id: Optional[str],
    s3_secret_access_key: Optional[str],
    s3_endpoint: Optional[str] = default_s3_read_endpoint,
    s3_region_name: Optional[str] = None,
    s3_signature_version: Optional[str] = None,
    buffer_size: Optional[int] = None,
    begin: Optional[int] = None,
    end: Optional[int] = None,
    certificate_handling: Optional[CAInfo] = None,
    *,
    remote_options: Optional[RemoteOptions] = None,
) -> CURLStreamFile:
    """A readable stream over ``s3://bucket/key`` (SigV4-signed native
    range requests), bounded by ``begin``/``end`` (exclusive). The S3 and
    TLS settings: the arguments, or ``remote_options`` instead."""
    _check_range(begin, end)
    _check_signature(s3_signature_version)
    if remote_options is not None and s3_endpoint == default_s3_read_endpoint:
        s3_endpoint = None  # left at its default: remote_options says
    remote = _remote_options(
        remote_options, s3_access_key_id=s3_access_key_id, s3_secret_access_key=s3_secret_access_key,
        s3_endpoint=s3_endpoint, s3_region_name=s3_region_name, force_http=_verbatim(s3_endpoint),
        certificate_handling=certificate_handling,
    )
    source = _native.NativeSource(path_uri, remote)
    return CURLStreamFile._over(source, begin, end)


def s3_upload(
    path: str,
    target_uri: str,
    s3_access_key_id: Optional[str],
    s3_secret_access_key: Optional[str],
    s3_endpoint: Optional[str] = default_s3_write_endpoint,
    s3_region_name: Optional[str] = None,
    s3_signature_version: Optional[str] = None,
    *,
    remote_options: Optional[RemoteOptions] = None,
) -> None:
    """Uploads the local file ``path`` to ``s3://bucket/key``: one PUT or a
    multipart upload aborted on any error. The S3 and TLS settings: the
    arguments, or ``remote_options`` instead."""
    _check_signature(s3_signature_version)
    try:
        is_s3 = _native.location_scheme(target_uri) == "s3"
    except ValueError:
        is_s3 = False
    if not is_s3:
        raise ValueError(f"{target_uri}: not an s3:// URI")
    if remote_options is not None and s3_endpoint == default_s3_write_endpoint:
        s3_endpoint = None  # left at its default: remote_options says
    remote = _remote_options(
        remote_options, s3_access_key_id=s3_access_key_id, s3_secret_access_key=s3_secret_access_key,
        s3_endpoint=s3_endpoint, s3_region_name=s3_region_name, force_http=_verbatim(s3_endpoint),
    )
    _native.upload(path, target_uri, remote)


class RemoteUpload(io.FileIO):
    """A local temporary file that is uploaded to an object store
    (``s3://``, ``gs://``, ``az://``) when closed.

    It is always readable and writable (as tensorizer's, whatever the
    mode), so ``TensorSerializer`` accepts it. Only an explicit
    :meth:`close` (or leaving a ``with`` block normally) uploads: leaving a
    ``with`` block by an exception, :meth:`discard`, or the stream being
    garbage-collected unclosed deletes it without uploading, leaving any
    existing object under the key as it was. If the upload fails, nothing
    is visible under the key and ``close`` raises."""

    def __init__(self, uri: str, mode: str, remote: RemoteOptions) -> None:
        self._discarded = True  # until fully opened: a half-built stream uploads nothing
        fd, path = tempfile.mkstemp(prefix="tensorizer-rs-", suffix=".upload")
        os.close(fd)
        super().__init__(path, "r+b")
        self._uri = uri
        self._remote = remote
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
                _native.upload(self._temp_path, self._uri, self._remote)
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


class S3Upload(RemoteUpload):
    """A :class:`RemoteUpload` to ``s3://``."""


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
    certificate_handling: Optional[CAInfo] = None,
    remote_options: Optional[RemoteOptions] = None,
) -> IO[bytes] | RemoteStream:
    """Opens a local path or a remote URI like tensorizer's ``open_stream``.

    * ``http(s)://``, ``redis://host[:port]/prefix``,
      ``redis+cluster://host[:port]/prefix``: ``"rb"`` only.
    * ``s3://bucket/key`` (likewise ``gs://bucket/object``, ``az://container/blob``):
      ``"rb"``, or ``"wb[+]"`` / ``"ab[+]"`` to upload on close. Credentials, endpoint and region come from the arguments,
      then vLLM's ``S3_*`` variables, ``~/.s3cfg`` (or ``s3_config_path``),
      the ``AWS_*`` variables, and finally tensorizer's defaults. Requests
      are always signed with SigV4.
    * Anything else, including an ``os.PathLike``, is a local file (binary
      modes only; parent directories are created for writing).

    ``begin`` positions the stream and ``end`` (exclusive) ends it, for
    every scheme including local files (tensorizer ignores ``end`` there);
    both are validated as tensorizer's ``CURLStreamFile`` does. ``end`` has
    no effect on writes. ``buffer_size`` is accepted for compatibility:
    reads are ranged on demand. ``certificate_handling`` (a
    :class:`CAInfo`) says which CAs ``https://`` and S3 servers must be
    signed by, for S3 uploads too (tensorizer's uploads ignore it); ``None``
    leaves it to the CA variables of the environment and the system's CAs.
    ``remote_options`` (a :class:`RemoteOptions`) gives the S3 and TLS
    settings in one object instead of the ``s3_*``, ``force_http`` and
    ``certificate_handling`` arguments.
    """
    if isinstance(path_uri, os.PathLike):
        path, scheme = os.fspath(path_uri), "file"
    elif isinstance(path_uri, str):
        # Parsed once, natively (``Location``): a malformed URI raises ValueError.
        path = path_uri
        scheme = _native.location_scheme(path) if path else "file"
    else:
        raise _args.ArgumentTypeError(f"path_uri must be str or os.PathLike, not {type(path_uri).__name__}")
    normalized = "".join(sorted(mode))
    if scheme != "file":
        if s3_signature_version not in (None, "s3v4", "v4"):
            raise ValueError(f"unsupported S3 signature version {s3_signature_version!r}: only SigV4 is implemented")
        # The TLS trust applies to reads and, unlike tensorizer's boto3
        # uploads, to writes too.
        remote = _remote_options(
            remote_options, s3_access_key_id=s3_access_key_id, s3_secret_access_key=s3_secret_access_key,
            s3_endpoint=s3_endpoint, s3_config_path=s3_config_path, s3_region_name=s3_region_name,
            force_http=force_http, certificate_handling=certificate_handling,
        )
        if scheme == "s3" and remote.s3_endpoint:
            # tensorizer's scheme rule, through the patchable module name; an
            # endpoint it lets through as http:// is then used as given.
            endpoint = _enforce_scheme(remote.s3_endpoint, False, bool(remote.force_http))
            forced = True if endpoint.lower().startswith("http://") else remote.force_http
            remote = remote.with_endpoint(endpoint, forced)
        if scheme in _UPLOADED and normalized in ("bw", "ab", "+bw", "+ab"):
            return S3Upload(path, mode, remote) if scheme == "s3" else RemoteUpload(path, mode, remote)
        if normalized != "br":
            if scheme in _UPLOADED:
                raise ValueError(
                    f'Only the modes "rb", "wb[+]", and "ab[+]" are valid when opening {scheme}:// streams.'
                )
            label = "http(s)" if scheme.startswith("http") else scheme
            raise ValueError(f'Only the mode "rb" is valid when opening {label}:// streams.')
        if scheme in _UPLOADED:
            _check_range(begin, end)
            return CURLStreamFile._over(_open_remote(path, remote), begin, end)
        if scheme in ("redis", "redis+cluster"):
            return RedisStreamFile(path, begin=begin, end=end, buffer_size=buffer_size)
        return CURLStreamFile._with(path, begin, end, buffer_size, remote)
    if "b" not in mode:
        raise ValueError("Only binary modes are supported")
    if any(c in mode for c in "wax"):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    reading_only = not any(c in mode for c in "wax+")
    if reading_only and _bounds_stream(begin, end):
        # A bounded read of a local file: the stream ends at ``end``.
        _check_range(begin, end)
        return RemoteStream(_native.NativeSource(path), begin, end)
    # As tensorizer opens a local file: ``buffer_size`` is open's
    # ``buffering``, the stream starts at ``begin or 0``, and an ``end`` that
    # bounds nothing is ignored.
    f = open(path, mode, buffering=io.DEFAULT_BUFFER_SIZE if buffer_size is None else buffer_size)
    try:
        f.seek(begin or 0)
    except BaseException:
        f.close()
        raise
    return f
