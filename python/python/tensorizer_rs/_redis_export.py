"""``TensorDeserializer.to_redis``: the file stored in tensorizer's Redis
key layout through a caller's ``redis.Redis`` client."""

from __future__ import annotations

from typing import Any


class _RedisExport:
    """``TensorDeserializer.to_redis`` (a mixin)."""

    _reader: Any

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
        # The layout is the native Redis store's (the one place it is
        # computed); the writes go through the caller's client.
        # Any key_prefix is formatted into the keys, as tensorizer's f-strings do.
        key_prefix = f"{key_prefix}"
        generation, keys = self._reader.redis_layout(key_prefix)
        # Key-by-key writes are not atomic: drop the generation marker of an
        # atomic write (spec §12.3) first, so that readers of the file being
        # replaced notice the change instead of mixing tensors.
        delete = getattr(redis_client, "delete", None)
        if delete is not None:
            delete(generation)
        header, tensors = keys[0], keys[1:]
        redis_client.set(header[0], self._reader.read_range(header[1], header[2]))
        # Each tensor's header key, then its data key.
        for (head, head_at, head_len), (data, data_at, data_len) in zip(tensors[::2], tensors[1::2]):
            if not force and redis_client.exists(head):
                continue
            redis_client.set(head, self._reader.read_range(head_at, head_len))
            redis_client.set(data, self._reader.read_range(data_at, data_len))
