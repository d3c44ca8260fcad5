"""``TensorDeserializer.to_redis``: the file stored in tensorizer's Redis
key layout through a caller's ``redis.Redis`` client."""

from __future__ import annotations

from typing import Any


def to_redis(reader: Any, redis_client: Any, key_prefix: str, force: bool) -> None:
    """``TensorDeserializer.to_redis`` through the open `reader`."""
    # The layout is the native Redis store's (the one place it is
    # computed); the writes go through the caller's client.
    # Any key_prefix is formatted into the keys, as tensorizer's f-strings do.
    key_prefix = f"{key_prefix}"
    generation, keys = reader.redis_layout(key_prefix)
    # Key-by-key writes are not atomic: drop the generation marker of an
    # atomic write (spec §12.3) first, so that readers of the file being
    # replaced notice the change instead of mixing tensors.
    delete = getattr(redis_client, "delete", None)
    if delete is not None:
        delete(generation)
    header, tensors = keys[0], keys[1:]
    redis_client.set(header[0], reader.read_range(header[1], header[2]))
    # Each tensor's header key, then its data key.
    for (head, head_at, head_len), (data, data_at, data_len) in zip(tensors[::2], tensors[1::2]):
        if not force and redis_client.exists(head):
            continue
        redis_client.set(head, reader.read_range(head_at, head_len))
        redis_client.set(data, reader.read_range(data_at, data_len))
