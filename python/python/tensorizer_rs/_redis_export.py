"""``TensorDeserializer.to_redis``: the file stored in tensorizer's Redis
key layout through a caller's ``redis.Redis`` client."""

from __future__ import annotations

from typing import Any

from . import _native

_Entry = _native.Entry


class _RedisExport:
    """``TensorDeserializer.to_redis`` (a mixin)."""

    _reader: Any
    _all: list[_Entry]

    def _check_open(self) -> None:
        raise NotImplementedError

    def to_redis(self, redis_client: Any, key_prefix: str, force: bool = False) -> None:
        """Stores the file under ``key_prefix`` in tensorizer's Redis layout,
        readable with ``redis://host:port/<key_prefix>``: the header and
        index in ``{prefix}:header:0``, then each tensor's header and data
        under ``{prefix}:{name}:{byte offset}``.

        As in tensorizer, a tensor whose header key already exists is
        skipped unless ``force`` is true, and every tensor of the file is
        stored, whatever ``filter_func`` selected. ``redis_client`` is a
        ``redis.Redis`` (anything with ``set`` and ``exists``).
        """
        self._check_open()
        entries = self._all
        first = entries[0].header_offset if entries else max(0, self._reader.size() - 8)
        # Key-by-key writes are not atomic: drop the generation marker of an
        # atomic write (spec §12.3) first, so that readers of the file being
        # replaced notice the change instead of mixing tensors.
        delete = getattr(redis_client, "delete", None)
        if delete is not None:
            delete(f"{key_prefix}.tzr-generation")
        redis_client.set(f"{key_prefix}:header:0", self._reader.read_range(0, first))
        for e in entries:
            name = e.name_bytes.decode("utf-8")
            header_key = f"{key_prefix}:{name}:{e.header_offset}"
            if not force and redis_client.exists(header_key):
                continue
            redis_client.set(header_key, self._reader.read_range(e.header_offset, e.data_offset - e.header_offset))
            redis_client.set(f"{key_prefix}:{name}:{e.data_offset}", self._reader.read_range(e.data_offset, e.data_length))
