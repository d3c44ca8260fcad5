"""``tensorizer_rs.convert``: what ``tzr convert`` does, from Python.

A ``torch.save`` checkpoint (``.pt``/``.pth``/``.bin``), a tensorizer file
or a safetensors file -- a local path or an ``http(s)://`` / ``s3://`` URI,
recognised by its first bytes -- becomes a tensorizer or safetensors file::

    tensorizer_rs.convert("model.pt", "model.tensors")
    tensorizer_rs.convert("s3://bucket/model.bin", "model.safetensors")
    tensorizer_rs.convert("model.tensors", "model.v2.tensors", tensorizer_layout=True)

``dst``'s extension names the format written (``.tensors``,
``.safetensors``); ``torch.save`` checkpoints are read, never written, so a
``.pt``/``.pth``/``.bin``/``.ckpt`` ``dst`` is refused, as is a ``to`` that
contradicts the extension. The same rule as ``tzr convert``'s.

The output is written atomically: an existing file at ``dst`` is replaced
only once the conversion is complete. Memory is bounded by the largest
tensor, never by the file; tensors are hashed (tensorizer output: CRC-32
and SHA-256, as tensorizer writes) on several threads with the GIL
released. Non-tensor entries of a checkpoint are skipped and listed in the
result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Literal, Optional, Union

from . import _native
from .stream_io import RemoteOptions, _remote_options

__all__ = ["Conversion", "convert"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Conversion:
    """What :func:`convert` did."""

    #: ``"torch"``, ``"tensorizer"`` or ``"safetensors"``.
    source_format: str
    #: ``"tensorizer"`` or ``"safetensors"``.
    target_format: str
    #: Tensors written (tied weights once per name).
    tensors: int
    #: Data bytes written.
    bytes: int
    #: Names of checkpoint entries that are not tensors (skipped).
    skipped: tuple[str, ...]
    #: Whether nested checkpoint keys were written as flat dotted names
    #: (their keys mix strings and ints at one level, which tensorizer
    #: cannot hold).
    flattened: bool


def convert(
    src: PathLike,
    dst: PathLike,
    *,
    to: Optional[Literal["tensorizer", "safetensors"]] = None,
    tensorizer_layout: bool = False,
    num_threads: Optional[int] = None,
    progress: Optional[Callable[[int, int], object]] = None,
    s3_access_key_id: Optional[str] = None,
    s3_secret_access_key: Optional[str] = None,
    s3_endpoint: Optional[str] = None,
    s3_config_path: Optional[PathLike] = None,
    s3_region_name: Optional[str] = None,
    force_http: Optional[bool] = None,
    max_output_bytes: Optional[int] = None,
    remote_options: Optional[RemoteOptions] = None,
) -> Conversion:
    """Converts ``src`` into a new file at ``dst``.

    Args:
        src: A local path or an ``http(s)://`` / ``s3://`` URI: a torch
            checkpoint, a tensorizer file or a safetensors file (recognised
            by its first bytes, whatever its name); or a model stored as
            shards (a folder or its ``*.index.json``), written as one file
            once its shards are checked against its index (spec §26.5).
        dst: The local file to write (atomically).
        to: ``"tensorizer"`` or ``"safetensors"``, for a ``dst`` whose
            extension names no format; default: the extension's format
            (``ValueError`` when it names none, or another).
        tensorizer_layout: Write exactly tensorizer's layout (no data
            alignment, a 256 KiB index) instead of ours (64-byte aligned).
        num_threads: Threads hashing and writing (default: one per core).
        progress: Called as ``progress(bytes_done, bytes_total)`` now and
            then and once at the end; an exception from it stops the
            conversion (``dst`` is left as it was) and propagates.
        s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path,
        s3_region_name, force_http: How to reach an ``s3://`` source, as in
            ``stream_io.open_stream``; unset ones come from the environment
            (``S3_*`` / ``AWS_*``) and ``~/.s3cfg``.
        remote_options: The same settings (and TLS trust) as one
            ``stream_io.RemoteOptions``, instead of the ``s3_*`` arguments.
        max_output_bytes: Most bytes of tensor data to write; a conversion
            that would write more is refused before anything is written.
            Default (``None``): 4 times ``src``'s size, at least 1 GiB -- a
            checkpoint of a few KB can hold expanded (stride-0) views of
            any size, which are written out whole. Pass a larger int to
            allow more.

    Raises:
        ValueError: The input is not a readable checkpoint, tensorizer or
            safetensors file, the output format cannot hold a tensor
            (safetensors has no complex128, no meta tensors), or the output
            would be larger than ``max_output_bytes``.
        OSError: Reading or writing failed.
    """
    uri = os.fspath(src)
    source: Union[str, _native.NativeSource] = uri
    s3 = (s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path, s3_region_name, force_http)
    if remote_options is not None or any(v is not None for v in s3):
        remote = _remote_options(
            remote_options, s3_access_key_id=s3_access_key_id, s3_secret_access_key=s3_secret_access_key,
            s3_endpoint=s3_endpoint, s3_config_path=s3_config_path, s3_region_name=s3_region_name,
            force_http=force_http,
        )
        source = _native.NativeSource(uri, remote)
    report = _native.convert_file(
        source,
        os.fspath(dst),
        to=to,
        tensorizer_layout=tensorizer_layout,
        num_threads=num_threads,
        progress=progress,
        max_output_bytes=max_output_bytes,
    )
    return Conversion(
        report.source_format, report.target_format, report.tensors, report.nbytes, tuple(report.skipped), report.flattened
    )
