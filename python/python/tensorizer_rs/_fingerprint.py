"""``tensorizer_rs.fingerprint``: what ``tzr fingerprint`` prints, from Python.

One SHA-256 digest for the weights in a tensorizer file, a safetensors file
or a ``torch.save`` checkpoint -- a local path or an ``http(s)://`` /
``s3://`` URI, recognised by its first bytes -- the same for the same
weights in any of the three (spec §21, ``tzr-fingerprint-v1``)::

    tensorizer_rs.fingerprint("model.safetensors") == tensorizer_rs.fingerprint("model.tensors")

Every tensor's name, dtype, shape and C-contiguous little-endian bytes go
into it; tensors are streamed (never a whole file in memory) and hashed on
several threads with the GIL released.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from . import _native
from ._crypt import DecryptionParams

__all__ = ["TensorFingerprint", "fingerprint", "fingerprint_tensors"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class TensorFingerprint:
    """One tensor's record in a fingerprint."""

    #: The flat dotted name (structured paths joined with ".").
    name: str
    #: torch's dtype name without "torch.", e.g. "bfloat16".
    dtype: str
    #: The shape.
    shape: tuple[int, ...]
    #: SHA-256 of the C-contiguous little-endian bytes, in hex; ``None``
    #: for a meta tensor (no data).
    sha256: Optional[str]


def _report(
    path_or_uri: PathLike, encryption: Optional[DecryptionParams], num_threads: Optional[int]
) -> _native.FingerprintReport:
    keys = encryption.native_args() if encryption is not None else {}
    return _native.fingerprint_file(os.fspath(path_or_uri), num_threads=num_threads, **keys)


def fingerprint(
    path_or_uri: PathLike,
    *,
    encryption: Optional[DecryptionParams] = None,
    num_threads: Optional[int] = None,
) -> str:
    """The fingerprint of the weights in ``path_or_uri``: 64 hex digits.

    Args:
        path_or_uri: A local path or a URI (``http(s)://``, ``s3://``, ...)
            of a tensorizer, safetensors or ``torch.save`` file; or a model
            stored as shards (a folder or its ``*.index.json``), whose
            fingerprint is that of the same tensors in one file.
        encryption: How to decrypt an encrypted tensorizer file.
        num_threads: Threads hashing tensors (default: one per core).

    Raises:
        ValueError: The input is not a readable file of the three formats,
            two tensors share a flat name, or a dtype has no torch name.
        CryptographyError: The file is encrypted and no key (or the wrong
            key) was given.
        OSError: Reading failed.
    """
    return _report(path_or_uri, encryption, num_threads).fingerprint


def fingerprint_tensors(
    path_or_uri: PathLike,
    *,
    encryption: Optional[DecryptionParams] = None,
    num_threads: Optional[int] = None,
) -> list[TensorFingerprint]:
    """Every tensor's record of :func:`fingerprint`, in name order (the
    order they are combined in). Arguments and errors as there."""
    report = _report(path_or_uri, encryption, num_threads)
    return [TensorFingerprint(n, d, tuple(s), h) for n, d, s, h in report.tensors]


def _scan_one(path: str, ignore: Optional[str]) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(_native.scan_file(path, ignore))
    return report


def scan(
    path_or_uri: Union[PathLike, Sequence[PathLike]],
    *,
    ignore: Optional[PathLike] = None,
) -> dict[str, Any]:
    """Scans model files with the core's scanner (spec §22), the same
    scanner as ``tzr scan`` and the WASI validator: the format told from
    the bytes (tensorizer, safetensors, ``torch.save`` zip, legacy or bare
    pickle), and every finding with its rule id, severity, byte offset and
    remediation. Nothing in the file is executed.

    Given one file (a path or a URI), returns its report:
    ``{"file", "format", "valid", "tensors", "file_bytes", "findings"}``,
    ``valid`` true when there are no findings; each finding a dict with
    ``rule``, ``severity``, ``offset``, ``length``, ``tensor``,
    ``message``, ``remediation`` and ``count``. Given a directory or a list
    of paths, returns ``{"files": [each file's report], "valid": ...}`` as
    ``tzr scan --json`` does: directories are walked recursively in sorted
    order and a store prefix (``s3://``, ``gs://`` or ``az://``, ending in
    ``/``) lists the objects directly under it, each file told by its
    bytes, and files found there of no format the scanner knows are left
    out; each file is reported once. A sharded
    checkpoint's index (``*.index.json``, format ``"shard-index"``) is
    scanned with the shards it names as one model, given alone too: the
    shards' reports carry ``"model"`` (the index), the index's
    ``"shards"``, and its findings say which shards are missing, unnamed,
    outside its folder or not holding the tensors it maps to them.

    Suppressions are read as ``tzr scan`` reads them (spec §22.8): the
    file ``ignore`` names, else ``.tzrscan.toml`` in the current directory
    when there is one. A finding an entry covers is still reported, with
    ``suppressed`` (the entry's reason), and a file whose findings are all
    suppressed is ``valid``; the report (or document) then has
    ``"suppressions": {"file", "notes"}``, a ``SUP-001`` note for each
    entry that covered nothing.

    Raises:
        OSError: A file could not be read, or a store prefix listed.
        ValueError: The suppression file cannot be read or is not one, or
            the path is an ``http(s)://`` prefix (HTTP cannot list).
    """
    ignored = None if ignore is None else os.fspath(ignore)
    if isinstance(path_or_uri, (str, os.PathLike)):
        one = os.fspath(path_or_uri)
        if not _native.is_sharded(one):  # (a folder, a store prefix, an index: below)
            report = _scan_one(one, ignored)
            if report["format"] != "shard-index":
                return report
        paths: list[str] = [one]
    else:
        paths = [os.fspath(p) for p in path_or_uri]
    document: dict[str, Any] = json.loads(_native.scan_paths(paths, ignored))
    return document

