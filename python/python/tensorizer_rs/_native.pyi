"""Type stubs for the compiled extension ``tensorizer_rs._native``."""

import pickle
import struct
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, Literal, final

__all__ = [
    "CryptographyError",
    "FormatError",
    "HashMismatchError",
    "TruncatedError",
    "CheckpointUnpicklingError",
    "Entry",
    "NativeCheckpoint",
    "CheckpointEntry",
    "ZipEntryCheck",
    "NativeReader",
    "DeserializerOptions",
    "ALLOCATION_ALIGN",
    "ARENA_ALIGN",
    "ARENA_BYTES",
    "NativeSource",
    "RemoteOptions",
    "upload",
    "location_scheme",
    "location_is_redis",
    "ObjectChangedError",
    "RangeNotSupportedError",
    "s3_presign",
    "scan_file",
    "scan_paths",
    "s3cfg_values",
    "file_frozen",
    "NativeWriter",
    "WriteSpec",
    "derive_key",
    "random_bytes",
    "tzr_main",
    "__version__",
    "OPTIMIZED",
    "DEFAULT_READERS",
    "MAX_SHARDS_AT_ONCE",
    "HUGE_PAGE_MIN",
    "HUGE_PAGE",
    "MAX_CUDA_STREAMS",
    "CUDA_ENV_NATIVE",
    "CUDA_ENV_ALLOC",
    "CUDA_ENV_STREAMS",
    "CUDA_ALLOC_MODES",
    "cuda_env_allows",
    "cuda_alloc_mode",
    "cuda_copy_streams",
    "UPLOADED_SCHEMES",
    "Loader",
    "Names",
    "LoadReceipt",
    "gc_paused",
    "LAZY_READ_AHEAD_BYTES",
    "LAZY_READ_AHEAD_TENSORS",
    "HostMemory",
    "Copies",
    "MmapFallbackWarning",
    "slice_shape",
    "checkpoint_slice_shape",
    "checkpoint_read_slice",
    "reader_slice_shape",
    "reader_read_slice",
    "reader_read_range",
    "reader_verify_tensor",
    "DEVICE_VIEW_ALIGN",
    "carve",
    "carve_offsets",
    "cooperative_verdict",
    "register_loaded",
    "dtype_torch_name",
    "dtype_string_for",
    "safetensors_dtype_name",
    "load_arenas",
    "write_safetensors_file",
    "NativeShards",
    "is_sharded",
    "open_sharded",
    "safetensors_file_bytes",
    "convert_file",
    "ConversionReport",
    "fingerprint_file",
    "FingerprintReport",
    "cuda_available",
    "reader_load_cuda",
    "reader_load_staged",
]

__version__: str
#: Whether this module was compiled with optimizations and without debug
#: assertions (a release wheel); benchmarks refuse a build that is not.
OPTIMIZED: bool
DEFAULT_READERS: int
MAX_SHARDS_AT_ONCE: int
ARENA_BYTES: int
LAZY_READ_AHEAD_BYTES: int
LAZY_READ_AHEAD_TENSORS: int
ARENA_ALIGN: int
HUGE_PAGE_MIN: int
ALLOCATION_ALIGN: int
#: One transparent huge page.
HUGE_PAGE: int
#: Most copy streams of our own a CUDA load may ask for.
MAX_CUDA_STREAMS: int
CUDA_ENV_NATIVE: str
CUDA_ENV_ALLOC: str
CUDA_ENV_STREAMS: str
CUDA_ALLOC_MODES: tuple[str, ...]

def cuda_env_allows() -> bool: ...
def cuda_alloc_mode() -> str: ...
def cuda_copy_streams() -> int: ...
#: Schemes a written file is uploaded to, whole, on close.
UPLOADED_SCHEMES: tuple[str, ...]

class FormatError(ValueError):
    offset: int | None
    tensor: str | None
    location: str | None
class HashMismatchError(Exception):
    offset: int | None
    tensor: str | None
    location: str | None
class CryptographyError(Exception):
    offset: int | None
    tensor: str | None
    location: str | None
class TruncatedError(FormatError, struct.error): ...
class CheckpointUnpicklingError(FormatError, pickle.UnpicklingError): ...
class ObjectChangedError(OSError):
    offset: int | None
    tensor: str | None
    location: str | None
class RangeNotSupportedError(OSError):
    offset: int | None
    tensor: str | None
    location: str | None

def derive_key(passphrase: bytes, opslimit: int, memlimit: int, salt: bytes) -> bytes: ...
def random_bytes(n: int) -> bytes: ...
def tzr_main(args: Sequence[str]) -> int: ...
def upload(
    path: str | PathLike[str],
    uri: str | PathLike[str],
    options: RemoteOptions | None = None,
    *,
    overwrite: bool = True,
) -> None: ...
def location_scheme(uri: str | PathLike[str]) -> str: ...
def location_is_redis(uri: str | PathLike[str]) -> bool: ...
def file_frozen(path: str | PathLike[str]) -> str | None: ...
def s3cfg_values(text: str) -> tuple[bool, str | None, str | None, str | None, bool | None]: ...
def s3_presign(uri: str, expires: int, options: RemoteOptions | None = None) -> str: ...
@final
class RemoteOptions:
    def __new__(
        cls,
        *,
        s3_access_key_id: str | None = None,
        s3_secret_access_key: str | None = None,
        s3_endpoint: str | None = None,
        s3_config_path: str | PathLike[str] | None = None,
        s3_region_name: str | None = None,
        force_http: bool | None = None,
        cacert: str | PathLike[str] | None = None,
        capath: str | PathLike[str] | None = None,
        allow_untrusted: bool = False,
    ) -> RemoteOptions: ...
    @property
    def s3_access_key_id(self) -> str | None: ...
    @property
    def s3_secret_access_key(self) -> str | None: ...
    @property
    def s3_endpoint(self) -> str | None: ...
    @property
    def s3_config_path(self) -> Path | None: ...
    @property
    def s3_region_name(self) -> str | None: ...
    @property
    def force_http(self) -> bool | None: ...
    @property
    def cacert(self) -> Path | None: ...
    @property
    def capath(self) -> Path | None: ...
    @property
    def allow_untrusted(self) -> bool: ...
    def with_endpoint(self, s3_endpoint: str | None, force_http: bool | None) -> RemoteOptions: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
@final
class NativeSource:
    def __new__(cls, uri: str | PathLike[str], options: RemoteOptions | None = None) -> NativeSource: ...
    def __len__(self) -> int: ...
    def size(self) -> int: ...
    def name(self) -> str: ...
    def read_at(self, offset: int, n: int) -> bytes: ...
    def readinto_at(self, offset: int, buffer: Any) -> int: ...
    def window(self, begin: int, end: int | None = None) -> NativeSource: ...

@final
class CheckpointEntry:
    """One entry of a checkpoint's state dict, in ``torch.load`` order."""
    @property
    def index(self) -> int: ...
    @property
    def path(self) -> tuple[str | int, ...]: ...
    @property
    def kind(self) -> str: ...
    @property
    def value(self) -> Any: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def shape(self) -> list[int]: ...
    @property
    def stride(self) -> list[int]: ...
    @property
    def storage_offset(self) -> int: ...
    @property
    def storage_key(self) -> str: ...
    @property
    def requires_grad(self) -> bool: ...
    @property
    def nbytes(self) -> int | None: ...

@final
class ZipEntryCheck:
    """One zip entry's CRC-32 check."""
    @property
    def name(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def expected(self) -> int: ...
    @property
    def actual(self) -> int: ...

@final
class NativeCheckpoint:
    def __new__(
        cls,
        source: str | PathLike[str] | bytes | NativeSource,
        *,
        name: str | None = None,
        max_expanded_bytes: int | None = None,
    ) -> NativeCheckpoint: ...
    def containers(self) -> list[tuple[tuple[str | int, ...], str, int, int]]: ...
    def entries(self) -> list[CheckpointEntry]: ...
    def nbytes(self, i: int) -> int: ...
    def read_into(self, i: int, buffer: Any) -> None: ...
    def storage_span(self, i: int) -> tuple[int, int]: ...
    def verify(self) -> list[ZipEntryCheck]: ...
    def byte_order(self) -> str: ...
    def archive(self) -> str: ...
    def size(self) -> int: ...
    def name(self) -> str: ...
    def bytes_read(self) -> tuple[int, int]: ...

@final
class Entry:
    """One tensor of a file's index."""

    @property
    def index(self) -> int: ...
    @property
    def path(self) -> tuple[str | int, ...]: ...
    @property
    def name(self) -> str | tuple[str | int, ...]: ...
    @property
    def name_bytes(self) -> bytes: ...
    @property
    def tensor_type(self) -> Any: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def data_length(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def is_meta(self) -> bool: ...
    @property
    def header_offset(self) -> int: ...
    @property
    def data_offset(self) -> int: ...

@final
class HostMemory:
    """Writable CPU memory for loaded tensors, lent through the buffer protocol."""

    def __new__(cls, size: int, huge: bool = True, lead: int = 0) -> HostMemory: ...
    @property
    def address(self) -> int: ...
    def __len__(self) -> int: ...

class MmapFallbackWarning(UserWarning):
    """``mmap=True`` could not map some tensors and copied them instead."""

@final
class Copies:
    """Host copies of one load plan's tensors (``Loader.copies``)."""

    @property
    def huge_pages(self) -> bool: ...
    def buffers(self) -> list[Any]: ...

@final
class gc_paused:
    """``with gc_paused():`` the cyclic collector paused inside."""

    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class LoadReceipt:
    """What a deserializer has done so far (python/src/loader/receipt.rs)."""

    @property
    def expected(self) -> tuple[Any, ...]: ...
    @property
    def loaded(self) -> tuple[Any, ...]: ...
    @property
    def skipped_by_filter(self) -> tuple[Any, ...]: ...
    @property
    def verified(self) -> tuple[Any, ...]: ...
    @property
    def unverified(self) -> tuple[Any, ...]: ...
    @property
    def failed(self) -> tuple[Any, ...]: ...
    @property
    def pending(self) -> tuple[Any, ...]: ...
    @property
    def bytes_by_source(self) -> Mapping[str, int]: ...
    @property
    def complete(self) -> bool: ...
    @property
    def total_bytes(self) -> int: ...
    def to_dict(self) -> dict[str, Any]: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Names:
    """The selected entries and their name tree (python/src/names.rs)."""

    def __new__(cls, entries: list[Entry], filter_func: Callable[[Any], Any] | None = None) -> Names: ...
    @property
    def selected(self) -> list[Entry]: ...
    @property
    def structure(self) -> dict[Any, Any]: ...
    def flat(self, cache: dict[int, Any]) -> dict[Any, Any] | None: ...
    def node(self, path: Any = None) -> Any: ...
    def leaves(self, node: Any, filter_func: Callable[[Any], Any] | None = None) -> list[Entry]: ...
    def view(self, node: dict[Any, Any], cache: dict[int, Any]) -> Any: ...
    def tree(self, node: dict[Any, Any], cache: dict[int, Any], filter_func: Callable[[Any], Any] | None = None) -> Any: ...
    def read_ahead(self, e: Entry, cache: dict[int, Any], max_bytes: int) -> list[Entry]: ...
    def handed_out(self, e: Entry) -> None: ...
    def yielded(self, position: int | None = None) -> None: ...
    def pending(self, filter_func: Callable[[Any], Any] | None, num_tensors: Any) -> tuple[list[int], list[Entry]]: ...
    def data_bytes(self, cache: dict[int, Any] | None = None) -> int: ...
    def module_entries(self, filter_func: Callable[[Any], Any] | None = None) -> list[Entry]: ...
    @staticmethod
    def strict_mismatches(
        entries: list[Entry], known: dict[str, Any], required: list[str]
    ) -> tuple[list[str], list[str], list[tuple[str, tuple[int, ...], tuple[int, ...]]]]: ...
    @staticmethod
    def strict_message(
        module_name: str, missing: list[str], unexpected: list[str], sizes: list[tuple[str, Any, Any]]
    ) -> str: ...

@final
class Loader:
    """One open file's loads (python/src/loader.rs)."""

    def __new__(cls, file_obj: Any, options: DeserializerOptions, alloc: Any, partial: bool = False) -> Loader: ...
    @property
    def reader(self) -> NativeReader | None: ...
    @property
    def cache(self) -> dict[int, Any]: ...
    @property
    def map(self) -> Any: ...
    @property
    def device(self) -> Any: ...
    def check_open(self) -> NativeReader: ...
    def close(self) -> None: ...
    def load(self, entries: list[Entry], verify: bool, group: Any = None) -> None: ...
    def read(self, e: Entry, names: Names, max_bytes: int) -> Any: ...
    def copies(self, entries: list[Entry], fill: bool, verify: bool) -> Copies: ...
    def cast_to(self, stored: Any) -> Any: ...
    def load_arrays(
        self, entries: list[Entry], allow_raw: object, verify: bool
    ) -> tuple[list[int], list[Any], list[str | None], ValueError | None]: ...
    def meta_slice(self, e: Entry, shape: list[int]) -> Any: ...
    def receipt(self, all: list[Entry], selected: list[Entry]) -> LoadReceipt: ...
    def forget_failed(self, entries: list[Entry]) -> None: ...
    def verify_module(self, selected: list[Entry], tensors: dict[str, Any]) -> tuple[bool, list[tuple[Any, bool]]]: ...

@final
class DeserializerOptions:
    def __new__(
        cls,
        *,
        device: Any,
        filter_func: Any,
        dtype: Any,
        lazy_load: object,
        plaid_mode: object,
        plaid_mode_buffers: object,
        num_readers: object,
        verify_hash: object,
        encryption: Any,
        mmap: object,
        meta_tensors: object,
        max_meta_bytes: object,
        cooperative: bool = False,
    ) -> DeserializerOptions: ...
    @staticmethod
    def check_cooperative(lazy_load: object, cooperative: bool) -> None: ...
    @property
    def verify_hash(self) -> bool: ...
    def verify(self, verify_hash: object = None) -> bool: ...
    @property
    def num_readers(self) -> int | None: ...
    @property
    def lazy_load(self) -> bool: ...
    @property
    def mmap(self) -> Literal["off", "on", "auto"]: ...
    @property
    def meta_tensors(self) -> Literal["zeros", "expand", "meta"]: ...
    @property
    def max_meta_bytes(self) -> int | None: ...
    @property
    def device(self) -> Any: ...
    @property
    def dtype(self) -> Any: ...
    @property
    def filter_func(self) -> Any: ...
    @property
    def decrypts(self) -> bool: ...

@final
class NativeReader:
    def __new__(
        cls,
        source: str | PathLike[str] | bytes | NativeSource,
        options: DeserializerOptions | None = None,
        *,
        name: str | None = None,
        partial: bool = False,
    ) -> NativeReader: ...
    @property
    def format(self) -> Literal["tensorizer", "safetensors", "torch"]: ...
    @property
    def version(self) -> int | None: ...
    @property
    def flags(self) -> int: ...
    @property
    def tensor_size(self) -> int: ...
    @property
    def encrypted(self) -> bool: ...
    @property
    def safetensors_metadata(self) -> list[tuple[str, str]] | None: ...
    @property
    def origin(self) -> str: ...
    def read_range(self, offset: int, n: int) -> bytes: ...
    def bytes_read(self) -> tuple[int, int]: ...
    def redis_layout(self, prefix: str) -> tuple[str, list[tuple[bytes, int, int]]]: ...
    def to_redis(self, client: Any, key_prefix: Any, force: object) -> None: ...
    def size(self) -> int: ...
    def name(self) -> str: ...
    def entries(self, tensor_types: tuple[Any, ...]) -> list[Entry]: ...
    def module_indices(self, indices: Sequence[int]) -> list[int]: ...
    def vouched(self, indices: Sequence[int]) -> list[bool]: ...
    def verify_bytes(self, i: int, data: Any) -> None: ...
    def load_into(self, indices: Sequence[int], buffers: Sequence[Any], verify_hash: bool | None = None) -> None: ...
    def plan_shares(self, indices: list[int], ranks: int) -> tuple[list[list[int]], list[int]]: ...
    def selection_digest(self, indices: list[int], device_type: str) -> str: ...

@final
class WriteSpec:
    """One tensor to write, checked when made."""
    def __new__(
        cls,
        path: Sequence[str | int],
        tensor_type: int,
        module_index: int,
        dtype: str,
        shape: Sequence[int],
        meta: bool = False,
    ) -> WriteSpec: ...

@final
class NativeWriter:
    def __new__(
        cls,
        path: str | PathLike[str],
        *,
        alignment: int = 64,
        metadata_len: int | None = None,
        key: bytes | None = None,
        kdf: tuple[int, int, bytes] | None = None,
        num_writers: int | None = None,
    ) -> NativeWriter: ...
    def append(self, specs: Sequence[WriteSpec], buffers: Sequence[Any]) -> None: ...
    def version(self) -> int: ...
    def tensor_size(self) -> int: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...

# -- safetensors (python/src/safetensors.rs) ---------------------------------

def write_safetensors_file(
    path: str | PathLike[str],
    tensors: Sequence[tuple[str, str, Sequence[int]]],
    buffers: Sequence[Any],
    metadata: Sequence[tuple[str, str]],
) -> None: ...
def safetensors_file_bytes(
    tensors: Sequence[tuple[str, str, Sequence[int]]],
    buffers: Sequence[Any],
    metadata: Sequence[tuple[str, str]],
) -> bytes: ...

# -- sharded models (python/src/shards.rs) -----------------------------------

@final
class NativeShards:
    @property
    def index(self) -> str | None: ...
    @property
    def shards(self) -> list[str]: ...
    def parallel_loads(self, readers: int | None, cooperative: bool) -> tuple[int, int]: ...
    def check(self, held: Mapping[str, set[str]]) -> None: ...

def is_sharded(location: str) -> bool: ...
def open_sharded(location: str) -> NativeShards: ...

# -- slices (python/src/slices.rs) ---------------------------------------------

from types import EllipsisType as _EllipsisType

_IndexKey = tuple[int | slice | _EllipsisType | None, ...]

def slice_shape(shape: Sequence[int], key: _IndexKey) -> list[int]: ...
def checkpoint_slice_shape(ckpt: NativeCheckpoint, i: int, key: _IndexKey) -> list[int]: ...
def checkpoint_read_slice(ckpt: NativeCheckpoint, i: int, key: _IndexKey, buffer: Any) -> None: ...
def reader_slice_shape(reader: NativeReader, i: int, key: _IndexKey) -> list[int]: ...
def reader_read_slice(reader: NativeReader, i: int, key: _IndexKey, buffer: Any) -> None: ...
def reader_read_range(reader: NativeReader, i: int, start: int, stop: int) -> bytes: ...
def reader_verify_tensor(reader: NativeReader, i: int) -> None: ...

# -- arenas (python/src/carve.rs) ----------------------------------------------

DEVICE_VIEW_ALIGN: int

def carve_offsets(sizes: list[int]) -> tuple[list[int], int]: ...
def register_loaded(cache: dict[int, Any], m: Any, entries: list[Entry], registrar: Any) -> None: ...
def cooperative_verdict(
    everyone: list[tuple[str | None, tuple[str, Any] | None]], digest: str | None
) -> tuple[str, int | None, Any] | None: ...

def carve(
    members: list[Entry],
    buffer: Any,
    offsets: list[int],
    kind_of: Callable[[str], tuple[Any, int, bool]],
    frombuffer: Any,
    empty: Any,
    make: Any,
    parameter: Any,
) -> list[Any]: ...

# -- arenas (python/src/arenas.rs) --------------------------------------------

def load_arenas(
    reader: NativeReader,
    indices: list[list[int]],
    buffers: list[Any],
    offsets: list[list[int]],
    verify_hash: bool | None = None,
) -> None: ...

# -- conversion (python/src/convert.rs) ----------------------------------------

def convert_file(
    src: str | PathLike[str] | NativeSource,
    dst: str | PathLike[str],
    *,
    to: str | None = None,
    tensorizer_layout: bool = False,
    num_threads: int | None = None,
    progress: Callable[[int, int], object] | None = None,
    max_output_bytes: int | None = None,
) -> ConversionReport: ...

@final
class ConversionReport:
    """What a conversion did."""
    @property
    def source_format(self) -> str: ...
    @property
    def target_format(self) -> str: ...
    @property
    def tensors(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def skipped(self) -> list[str]: ...
    @property
    def flattened(self) -> bool: ...

# -- fingerprints (python/src/fingerprint.rs) ----------------------------------

def scan_file(path: str, ignore: str | None = None) -> str: ...
def scan_paths(paths: list[str], ignore: str | None = None) -> str: ...
def fingerprint_file(
    src: str | PathLike[str] | NativeSource,
    *,
    key: bytes | None = None,
    passphrase: bytes | None = None,
    num_threads: int | None = None,
) -> FingerprintReport: ...

@final
class FingerprintReport:
    """A file's fingerprint and its records."""
    @property
    def fingerprint(self) -> str: ...
    @property
    def source_format(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def skipped(self) -> list[str]: ...
    @property
    def tensors(self) -> list[tuple[str, str, list[int], str | None]]: ...

# -- CUDA (python/src/cuda.rs; native only in builds with the `cuda` feature) --

def cuda_available() -> bool: ...
def reader_load_cuda(
    reader: NativeReader,
    indices: Sequence[int],
    tensors: Sequence[Any],
    verify_hash: bool | None = None,
    *,
    streams: int = 0,
    buffer_len: int | None = None,
    ring: int | None = None,
) -> None: ...
def reader_load_staged(
    reader: NativeReader,
    indices: Sequence[int],
    buffers: Sequence[Any],
    verify_hash: bool | None = None,
    *,
    buffer_len: int | None = None,
    ring: int | None = None,
    copy_latency_us: int = 0,
) -> tuple[int, int]: ...

def dtype_torch_name(stored: str) -> str:
    """torch's name (without ``torch.``) of the dtype stored as `stored`;
    ValueError for a big-endian, unknown or invalid dtype string."""

def dtype_string_for(name: str) -> str | None:
    """The string tensorizer stores for the torch dtype named `name`, or
    None when the format has no entry for it."""

def safetensors_dtype_name(name: str) -> str | None:
    """safetensors' name (``F32``, ``F8_E8M0``, ...) for the torch dtype
    named `name`, or None when safetensors has none."""
