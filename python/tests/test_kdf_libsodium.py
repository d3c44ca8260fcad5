"""tensorizer_rs's Argon2id (host AVX2 kernel) against libsodium's
crypto_pwhash, the library tensorizer derives passphrase keys with."""

from __future__ import annotations

import ctypes

import pytest

from tensorizer_rs import _native

libnacl = pytest.importorskip("libnacl")

ALG_ARGON2ID13 = 2


def sodium_pwhash(pw: bytes, salt: bytes, ops: int, mem: int) -> bytes:
    so = ctypes.CDLL(libnacl.nacl._name)
    vp, ull = ctypes.c_void_p, ctypes.c_ulonglong
    so.crypto_pwhash.argtypes = [vp, ull, ctypes.c_char_p, ull, ctypes.c_char_p, ull, ctypes.c_size_t, ctypes.c_int]
    out = ctypes.create_string_buffer(32)
    assert so.crypto_pwhash(ctypes.addressof(out), 32, pw, len(pw), salt, ops, mem, ALG_ARGON2ID13) == 0
    return out.raw


@pytest.mark.parametrize(
    "pw, salt, ops, mem",
    [
        (b"p", bytes(16), 1, 8192),
        (b"correct horse", bytes(range(16)), 2, 64 << 20),
        (b"\xff" * 200, b"saltsaltsaltsalt", 3, (1 << 20) + 3 * 1024),
        ("pässwörd".encode(), bytes(16), 4, 9 * 1024),
    ],
)
def test_derive_key_matches_libsodium(pw: bytes, salt: bytes, ops: int, mem: int) -> None:
    assert bytes(_native.derive_key(pw, ops, mem, salt)) == sodium_pwhash(pw, salt, ops, mem)
