//! CPU kernels the read and write paths share: XSalsa20-Poly1305 chunk
//! sealing and opening ([`cipher`]), the CRC32/SHA-256 tensor digests
//! ([`digest`]), and Argon2id key derivation ([`kdf`]), each using the
//! fastest instructions the CPU has, chosen once at run time.

pub mod cipher;
pub mod digest;
pub mod kdf;
