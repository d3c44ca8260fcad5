"""EncryptionParams and DecryptionParams, as in tensorizer."""

from __future__ import annotations

import enum
from typing import Any, Union

from . import _native

CryptographyError = _native.CryptographyError

# Encryption is built into the native core (no libsodium needed), so it is
# always available.
available: bool = True

_SALT_LEN = 16
_KEY_LEN = 32


class EncryptionParams:
    """How to encrypt a file: an exact 32-byte key, a random one, or one
    derived from a passphrase with Argon2id (:meth:`from_string`)."""

    class OpsLimit(enum.IntEnum):
        MIN = 1
        INTERACTIVE = 2
        MODERATE = 3
        SENSITIVE = 4

    class MemLimit(enum.IntEnum):
        MIN = 8192
        INTERACTIVE = 64 << 20
        MODERATE = 256 << 20
        SENSITIVE = 1 << 30

    def __init__(self, key: Union[bytes, bytearray, memoryview]) -> None:
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise TypeError("Encryption key must be bytes, bytearray or memoryview")
        key = bytes(key)
        if len(key) != _KEY_LEN:
            raise ValueError(
                f"Invalid encryption key length: {len(key)} bytes, expected {_KEY_LEN}. "
                "To use a passphrase, use EncryptionParams.from_string()."
            )
        self.key = key
        self._kdf: tuple[int, int, bytes] | None = None

    @classmethod
    def random(cls) -> EncryptionParams:
        return cls(_native.random_bytes(_KEY_LEN))

    @classmethod
    def from_string(
        cls,
        source: Union[str, bytes],
        opslimit: Union[OpsLimit, int, None] = None,
        memlimit: Union[MemLimit, int, None] = None,
        salt: Union[bytes, bytearray, memoryview, None] = None,
        *,
        encoding: str = "utf-8",
    ) -> EncryptionParams:
        # Checked in tensorizer's order, so a value wrong in two ways fails
        # as it does there.
        if not source:
            raise ValueError("source cannot be empty")
        for name, value, own, other in (
            ("opslimit", opslimit, EncryptionParams.OpsLimit, EncryptionParams.MemLimit),
            ("memlimit", memlimit, EncryptionParams.MemLimit, EncryptionParams.OpsLimit),
        ):
            if isinstance(value, other) or not isinstance(value, (own, int, type(None))):
                raise TypeError(
                    f"{name} parameter: expected EncryptionParams.{own.__name__}, int, or None; "
                    f"{type(value).__name__} found"
                )
        if isinstance(source, str):
            source = source.encode(encoding)
        if not isinstance(source, (bytes, bytearray)):
            raise TypeError("source must be str or bytes")
        ops = int(EncryptionParams.OpsLimit.MODERATE if opslimit is None else opslimit)
        mem = int(EncryptionParams.MemLimit.MODERATE if memlimit is None else memlimit)
        if salt is None:
            salt = _native.random_bytes(_SALT_LEN)
        elif not isinstance(salt, (bytes, bytearray, memoryview)):
            raise TypeError("salt must be bytes, bytearray or memoryview")
        salt = bytes(salt)
        if len(salt) != _SALT_LEN:
            raise ValueError(f"salt must be exactly {_SALT_LEN} bytes")
        params = cls(_native.derive_key(bytes(source), ops, mem, salt))
        params._kdf = (ops, mem, salt)
        return params

    @property
    def salt(self) -> bytes:
        if self._kdf is None:
            raise ValueError("Only EncryptionParams created with from_string() have a salt")
        return self._kdf[2]

    def __repr__(self) -> str:
        return "EncryptionParams(<key hidden>)"


class DecryptionParams:
    """How to decrypt: an exact key (:meth:`from_key`) or a passphrase
    (:meth:`from_string`), whose key is derived per file."""

    def __init__(self) -> None:
        self.key: bytes | None = None
        self.source: bytes | None = None

    @classmethod
    def from_key(cls, key: Union[bytes, bytearray, memoryview]) -> DecryptionParams:
        # tensorizer's order: empty, then length (a TypeError for what has
        # none), then the type.
        if not key:
            raise ValueError("Key cannot be empty")
        if len(key) != _KEY_LEN:
            raise ValueError(f"Invalid decryption key length: {len(key)} bytes, expected {_KEY_LEN}")
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise TypeError(f"key must be bytes, not {type(key).__name__}")
        key = bytes(key)
        params = cls()
        params.key = key
        return params

    @classmethod
    def from_string(cls, source: Union[str, bytes], *, encoding: str = "utf-8") -> DecryptionParams:
        if not source:
            raise ValueError("source cannot be empty")
        if isinstance(source, str):
            source = source.encode(encoding)
        if not isinstance(source, (bytes, bytearray)):
            raise TypeError("source must be str or bytes")
        params = cls()
        params.source = bytes(source)
        return params

    def native_args(self) -> dict[str, Any]:
        if self.key is None and self.source is None:
            raise ValueError("Invalid DecryptionParams, no key or source string provided")
        return {"key": self.key, "passphrase": self.source if self.key is None else None}

    def __repr__(self) -> str:
        return "DecryptionParams(<secret hidden>)"
