"""TensorSerializer: tensorizer's writer API over the Rust writer."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np

from . import _args, _dtypes, _native, _paths
from ._crypt import EncryptionParams
from ._types import TensorType
from .stream_io import RemoteUpload

_TENSORIZER_INDEX = 256 * 1024
_DEFAULT_ALIGNMENT = 64
# Schemes a serializer writes to: a temporary file, uploaded on close.

FileLike = Union[str, "os.PathLike[str]", io.BufferedIOBase, io.RawIOBase, Any]


class TensorSerializer:
    """Writes tensors, modules and state dicts to a ``.tensors`` file.

    A drop-in for ``tensorizer.TensorSerializer`` (same methods:
    ``write_module``, ``write_state_dict``, ``write_tensor``, ``close``), and
    also a context manager: an exception inside the ``with`` block discards
    the new file and leaves any previous file untouched. Nothing appears at
    the destination until :meth:`close`, which writes the index, fsyncs,
    and renames the file into place.

    Args:
        file_obj: Where to write: a local path (``str`` or
            ``os.PathLike``; missing parent directories are created), an
            ``s3://``, ``gs://`` or ``az://`` URI (written to a temporary
            file and uploaded on close), or a binary file object opened
            for reading and writing (``"wb+"``; filled on close).
        compress_tensors: Accepted for compatibility and ignored: tensors
            are always written uncompressed.
        encryption: An ``EncryptionParams`` (a random key, or a key
            derived from a passphrase) to encrypt every tensor's data;
            ``None`` writes plain data.
        limit_cpu_concurrency: The most threads hashing, encrypting and
            writing (at least 1). ``None``: chosen from the CPU cores.
        layout: ``"aligned"`` (default) aligns each tensor's data to 64
            bytes, which tensorizer reads and which lets
            ``TensorDeserializer(mmap=True)`` map every tensor;
            ``"tensorizer"`` writes tensorizer's exact layout
            (byte-identical output, data not aligned).
        metadata_capacity: Bytes reserved for the metadata index at the
            start of the file. ``None``: sized from the first write, at
            least tensorizer's 256 KiB with the tensorizer layout.
    """

    def __init__(
        self,
        file_obj: FileLike,
        compress_tensors: bool = False,
        *,
        encryption: EncryptionParams | None = None,
        limit_cpu_concurrency: int | None = None,
        layout: str = "aligned",
        metadata_capacity: int | None = None,
    ) -> None:
        if encryption is not None and not isinstance(encryption, EncryptionParams):
            raise TypeError("encryption must be an EncryptionParams object or None")
        if limit_cpu_concurrency is not None:
            if not isinstance(limit_cpu_concurrency, int):
                raise TypeError("limit_cpu_concurrency must be an int or None")
            if limit_cpu_concurrency < 1:
                raise ValueError("limit_cpu_concurrency must be at least 1")
        if layout not in ("aligned", "tensorizer"):
            raise ValueError('layout must be "aligned" or "tensorizer"')
        self._encryption = encryption
        self._threads = limit_cpu_concurrency
        self._layout = layout
        self._capacity = metadata_capacity
        self._writer: Any = None
        self._closed = False
        # total_tensor_bytes once the native writer is finished with.
        self._final_tensor_bytes: int | None = None
        self._sink: Any = None
        self._upload_uri: str | None = None
        # The scheme is parsed once, natively (``Location``).
        scheme = _native.location_scheme(file_obj) if isinstance(file_obj, str) and file_obj else "file"
        if isinstance(file_obj, str) and scheme in _native.UPLOADED_SCHEMES:
            # Written to a private temporary file, uploaded on close.
            self._upload_uri = file_obj
            self._tmpdir = tempfile.mkdtemp(prefix="tensorizer-rs-")
            self._path = os.path.join(self._tmpdir, "out.tensors")
        elif scheme != "file":
            label = "http(s)" if scheme.startswith("http") else scheme
            raise ValueError(f'Only the mode "rb" is valid when opening {label}:// streams.')
        elif isinstance(file_obj, (str, os.PathLike)):
            self._path = os.fspath(file_obj)
            if _args.no_such_path(self._path):
                raise _args.file_not_found(self._path)
            parent = os.path.dirname(os.path.abspath(self._path))
            os.makedirs(parent, exist_ok=True)
        elif isinstance(file_obj, (bytes, int)):
            raise TypeError("file_obj must be a path or a binary file object")
        else:
            try:
                read_write = bool(file_obj.writable() and file_obj.readable())
            except AttributeError:
                read_write = True  # as tensorizer: no full io.IOBase interface, assume it's fine
            if isinstance(file_obj, io.TextIOBase) or not read_write:
                mode = getattr(file_obj, "mode", "")
                raise ValueError(
                    "TensorSerializer's file_obj must be readable, writable, "
                    'and in binary mode (mode="wb+"{})'.format(mode and f', current mode="{mode}"')
                )
            if not hasattr(file_obj, "write"):
                raise _args.not_a_file(file_obj)
            # Written to a private temporary file, copied into the object on close.
            self._sink = file_obj
            self._tmpdir = tempfile.mkdtemp(prefix="tensorizer-rs-")
            self._path = os.path.join(self._tmpdir, "out.tensors")

    # -- writing --------------------------------------------------------------

    def _native_writer(self) -> Any:
        if self._closed:
            raise ValueError("the serializer is closed")
        if self._writer is None:
            # Without metadata_capacity, the native writer sizes the index
            # from the first tensors it gets, with room for more.
            capacity: int | None
            if self._layout == "tensorizer":
                alignment, capacity = 1, self._capacity or _TENSORIZER_INDEX
            else:
                alignment, capacity = _DEFAULT_ALIGNMENT, self._capacity
            enc = self._encryption
            self._writer = _native.NativeWriter(
                self._path,
                alignment=alignment,
                metadata_len=capacity,
                key=enc.key if enc else None,
                kdf=enc._kdf if enc else None,
                num_writers=self._threads,
            )
        return self._writer

    def _append(self, items: list[tuple[_paths.Path, TensorType, int, Any]]) -> None:
        specs: list[_native.WriteSpec] = []
        buffers: list[Any] = []
        for path, tensor_type, module_index, tensor in items:
            spec, buf = _describe(path, tensor_type, module_index, tensor)
            specs.append(spec)
            buffers.append(buf)
        if not specs:
            return
        writer = self._native_writer()
        try:
            writer.append(specs, buffers)
        except ValueError as e:
            if "metadata overflow" in str(e):
                raise RuntimeError(
                    f"Metadata overflow: {e}. Pass metadata_capacity= to TensorSerializer, "
                    "or write all tensors in one write_state_dict() call."
                ) from e
            raise

    def write_tensor(
        self,
        idx: int,
        name: str,
        tensor_type: TensorType,
        tensor: Any,
    ) -> None:
        """Writes one tensor (a torch.Tensor or numpy.ndarray) now."""
        if not isinstance(name, str):
            raise TypeError(f"Invalid tensor path type: {type(name)!r}; write_tensor takes a str name")
        index = _args.module_index(idx)
        if not isinstance(tensor_type, TensorType):
            raise _args.ArgumentTypeError(f"tensor_type must be a TensorType, not {type(tensor_type).__name__}")
        self._append([((name,), tensor_type, index, _tensor_like(tensor))])

    def write_module(
        self,
        m: Any,
        remove_tensors: bool = False,
        *,
        include_non_persistent_buffers: bool = True,
    ) -> None:
        """Writes every parameter (PARAM) and buffer (BUFFER) of every
        submodule, named ``f"{module_name}.{name}"`` as tensorizer does."""
        items: list[tuple[_paths.Path, TensorType, int, Any]] = []
        removals = []
        for idx, (module_name, module) in enumerate(m.named_modules()):
            for name, param in module.named_parameters(recurse=False):
                items.append(((f"{module_name}.{name}",), TensorType.PARAM, idx, param))
                removals.append((module, name))
            non_persistent: set[str] = getattr(module, "_non_persistent_buffers_set", set())
            for name, buf in module.named_buffers(recurse=False):
                if not include_non_persistent_buffers and name in non_persistent:
                    continue
                items.append(((f"{module_name}.{name}",), TensorType.BUFFER, idx, buf))
                removals.append((module, name))
        self._append(items)
        if remove_tensors:
            for module, name in removals:
                setattr(module, name, None)

    def write_state_dict(self, state_dict: Mapping[str, Any] | Sequence[Any]) -> None:
        """Writes a (possibly nested) state dict: mappings with str keys and
        sequences, with tensors as leaves. Flat dicts give plain names."""
        import torch

        items = [(path, TensorType.STATE_DICT, 0, t) for path, t in _paths.flatten(state_dict, torch.Tensor)]
        self._append(items)

    @property
    def total_tensor_bytes(self) -> int:
        """Bytes of tensor data written so far (and, after :meth:`close`,
        in all)."""
        if self._final_tensor_bytes is not None:
            return self._final_tensor_bytes
        return 0 if self._writer is None else int(self._writer.tensor_size())

    total_compressed_tensor_bytes = 0

    # -- finishing ------------------------------------------------------------

    def close(self) -> None:
        """Writes the index and header, fsyncs and moves the file into place."""
        if self._closed:
            return
        self._closed = True
        if self._writer is None:
            self._writer = _native.NativeWriter(
                self._path,
                alignment=1 if self._layout == "tensorizer" else _DEFAULT_ALIGNMENT,
                metadata_len=self._capacity or _TENSORIZER_INDEX,
                key=self._encryption.key if self._encryption else None,
                kdf=self._encryption._kdf if self._encryption else None,
            )
        self._final_tensor_bytes = int(self._writer.tensor_size())
        try:
            self._writer.commit()
        except BaseException:
            if isinstance(self._sink, RemoteUpload):
                self._sink.discard()
            raise
        if self._upload_uri is not None:
            try:
                _native.upload(self._path, self._upload_uri)
            finally:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
        elif isinstance(self._sink, RemoteUpload):
            # Hand the stream the finished file; closing it uploads, as
            # tensorizer's close() closes the stream it was given.
            try:
                self._sink._replace_contents(self._path)
            except BaseException:
                self._sink.discard()
                raise
            finally:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._sink.close()
        elif self._sink is not None:
            try:
                with open(self._path, "rb") as src:
                    if hasattr(self._sink, "seek"):
                        self._sink.seek(0)
                    shutil.copyfileobj(src, self._sink, 8 << 20)
                    if hasattr(self._sink, "flush"):
                        self._sink.flush()
            finally:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
            # tensorizer's close() closes the stream it was given.
            if hasattr(self._sink, "close"):
                self._sink.close()

    def _abort(self) -> None:
        self._closed = True
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._final_tensor_bytes = int(self._writer.tensor_size())
            self._writer.abort()
        if self._sink is not None or self._upload_uri is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
        if isinstance(self._sink, RemoteUpload):
            self._sink.discard()

    def __enter__(self) -> TensorSerializer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()

    def __del__(self) -> None:
        # Like tensorizer, an unclosed serializer is closed when collected,
        # except that an upload to S3 happens only on an explicit close():
        # an abandoned one (perhaps half-written) uploads nothing.
        try:
            if getattr(self, "_closed", True):
                return
            if self._upload_uri is not None or isinstance(self._sink, RemoteUpload):
                self._abort()
            elif self._writer is not None:
                self.close()
        except Exception:
            pass


def _tensor_like(tensor: Any) -> Any:
    """A torch tensor or numpy array to write; a numpy scalar is a 0-d
    array, as tensorizer takes it."""
    if isinstance(tensor, np.generic):
        return np.asarray(tensor)
    if not hasattr(tensor, "dtype"):
        raise _args.ArgumentTypeError(f"write_tensor takes a torch.Tensor or numpy.ndarray, not {type(tensor).__name__}")
    return tensor


def _describe(path: _paths.Path, tensor_type: TensorType, module_index: int, tensor: Any) -> tuple[_native.WriteSpec, Any]:
    """(native spec, contiguous uint8 buffer) for a torch tensor or ndarray."""
    if isinstance(tensor, np.ndarray):
        arr = np.ascontiguousarray(tensor)
        dtype = _dtypes.numpy_dtype_string(arr.dtype)
        shape = list(arr.shape)
        buf = arr.reshape(-1).view(np.uint8)
        return _native.WriteSpec(list(path), int(tensor_type), module_index, dtype, shape), buf
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"Cannot serialize {type(tensor)!r}: expected a torch.Tensor or numpy.ndarray")
    dtype = _dtypes.dtype_string(tensor.dtype)
    shape = list(tensor.shape)
    if tensor.is_meta:
        return _native.WriteSpec(list(path), int(tensor_type), module_index, dtype, shape, True), b""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    buf = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)
    return _native.WriteSpec(list(path), int(tensor_type), module_index, dtype, shape), buf
