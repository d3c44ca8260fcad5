//! Telling a file's format from its first bytes: the one test every host
//! asks (conversion, `tzr inspect`, the browser inspector).
//!
//! The tests differ in strength. The tensorizer and ZIP magic numbers are
//! exact; a safetensors file is recognised by three conditions together (a
//! header length within [`MAX_SAFETENSORS_HEADER`] that fits the file, and
//! `{` right after it); a legacy torch pickle only by its first byte,
//! `0x80`. A safetensors file whose header length is ≡ 128 (mod 256) also
//! starts with `0x80` (about 1 file in 32, as the length is a multiple of
//! 8), so the stricter safetensors test is asked before the legacy one.

use crate::checkpoint;
use crate::error::Error;
use crate::layout::{MAGIC, MAX_SAFETENSORS_HEADER};

/// Bytes before a safetensors JSON header: its length, a little-endian u64.
pub const SAFETENSORS_PREFIX_LEN: u64 = 8;

/// A file format told from the first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sniffed {
    /// A tensorizer file (starts with [`MAGIC`]).
    Tensorizer,
    /// A safetensors file whose JSON header is `header_len` bytes long.
    Safetensors {
        /// The JSON header's length (the first 8 bytes).
        header_len: u64,
    },
    /// A ZIP archive, presumably a `torch.save` checkpoint.
    TorchZip,
    /// A legacy `torch.save` file (a pickle stream or a tar archive), which
    /// [`checkpoint::sniff`] refuses with a message saying how to convert it.
    LegacyTorch,
}

impl Sniffed {
    /// What the format is, for messages: "a safetensors file", ...
    pub fn describe(self) -> &'static str {
        match self {
            Self::Tensorizer => "a tensorizer file",
            Self::Safetensors { .. } => "a safetensors file",
            Self::TorchZip => "a torch.save checkpoint",
            Self::LegacyTorch => "a legacy (pre-zip) torch.save checkpoint",
        }
    }
}

/// The header length of a plausible safetensors file of `file_len` bytes
/// starting with `head`: the first 8 bytes read as a little-endian length
/// of at least 2 and at most [`MAX_SAFETENSORS_HEADER`], which the file is
/// long enough to hold, followed by `{`.
pub fn safetensors_header_len(head: &[u8], file_len: u64) -> Option<u64> {
    let n = u64::from_le_bytes(head.get(..8)?.try_into().ok()?);
    let fits = SAFETENSORS_PREFIX_LEN.checked_add(n).is_some_and(|end| end <= file_len);
    ((2..=MAX_SAFETENSORS_HEADER).contains(&n) && fits && head.get(8) == Some(&b'{')).then_some(n)
}

/// Tells the format of a file of `file_len` bytes from its first bytes
/// (`head`, up to [`checkpoint::SNIFF_LEN`]); `None` when they match no
/// format. See the module docs for the order of the tests.
pub fn sniff_format(head: &[u8], file_len: u64) -> Option<Sniffed> {
    if head.starts_with(&MAGIC) {
        return Some(Sniffed::Tensorizer);
    }
    if let Some(header_len) = safetensors_header_len(head, file_len) {
        return Some(Sniffed::Safetensors { header_len });
    }
    match checkpoint::sniff(head) {
        Ok(()) => Some(Sniffed::TorchZip),
        Err(Error::LegacyTorchCheckpoint { .. }) => Some(Sniffed::LegacyTorch),
        Err(_) => None,
    }
}

/// The scanner's finer, more permissive reading of the first bytes
/// ([`classify`]): it names what each file most likely is so that its
/// anomalies can be reported, where [`sniff_format`] only names what a
/// reader can open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Classified {
    /// Starts with the tensorizer magic.
    Tensorizer,
    /// Starts with a ZIP local header (or an empty archive's end record).
    Zip,
    /// An 8-byte length, then `{`: a safetensors file, whose header length
    /// may be above the limit or beyond the file (the scanner says so).
    Safetensors {
        /// The declared JSON header length.
        header_len: u64,
    },
    /// A pickle stream with torch's legacy magic number first.
    TorchLegacy,
    /// A pickle stream starting with a `PROTO` opcode (protocol 2 to 5).
    Pickle,
    /// A tar archive (torch's oldest save format).
    Tar,
    /// None of the above (a protocol 0 or 1 pickle has no header: the
    /// scanner tries walking it).
    Unknown,
}

/// Classifies a file of `file_len` bytes by its first bytes (up to
/// [`checkpoint::SNIFF_LEN`]). The order: the tensorizer and ZIP magic
/// numbers (exact), a strict safetensors header, torch's legacy magic, a
/// `PROTO` opcode, a permissive safetensors header (a length of at least 2
/// and `{` at byte 8, whatever the length), a tar header.
pub fn classify(head: &[u8], file_len: u64) -> Classified {
    if head.starts_with(&MAGIC) {
        return Classified::Tensorizer;
    }
    if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        return Classified::Zip;
    }
    if let Some(header_len) = safetensors_header_len(head, file_len) {
        return Classified::Safetensors { header_len };
    }
    match checkpoint::sniff(head) {
        Err(Error::LegacyTorchCheckpoint { layout }) if layout.contains("magic") => {
            return Classified::TorchLegacy;
        }
        _ => {}
    }
    if let [0x80, proto, ..] = head
        && *proto <= 5
    {
        return Classified::Pickle;
    }
    if let Some(n) = head.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
        && n >= 2
        && head.get(8) == Some(&b'{')
    {
        return Classified::Safetensors { header_len: n };
    }
    if head.get(257..262) == Some(b"ustar") {
        return Classified::Tar;
    }
    Classified::Unknown
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    /// A safetensors file holding one empty tensor, its JSON header padded
    /// with spaces (as the safetensors library pads) to `n` bytes.
    fn safetensors(n: usize) -> Vec<u8> {
        let json = br#"{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#;
        let mut out = (n as u64).to_le_bytes().to_vec();
        out.extend_from_slice(json);
        out.resize(8 + n, b' ');
        out
    }

    #[test]
    fn a_header_length_of_128_mod_256_is_safetensors_not_a_pickle() {
        let f = safetensors(384);
        assert_eq!(f[0], 0x80);
        assert_eq!(
            sniff_format(&f, f.len() as u64),
            Some(Sniffed::Safetensors { header_len: 384 })
        );
        // The same bytes in a file too short for the header stay what the
        // first byte says.
        assert_eq!(sniff_format(&f[..100], 100), Some(Sniffed::LegacyTorch));
    }

    #[test]
    fn the_other_formats_are_still_recognised() {
        let mut legacy =
            Vec::from([0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8]);
        legacy.resize(600, 0);
        assert_eq!(sniff_format(&legacy, 600), Some(Sniffed::LegacyTorch));
        assert_eq!(
            sniff_format(b"\x80\x02}q\x00(X\x01\x00\x00\x00", 1000),
            Some(Sniffed::LegacyTorch)
        );
        assert_eq!(
            sniff_format(b"PK\x03\x04\x14\x00\x00\x00\x00\x00", 1000),
            Some(Sniffed::TorchZip)
        );
        assert_eq!(sniff_format(b"|TZR|\x05\x00", 1000), Some(Sniffed::Tensorizer));
        assert_eq!(sniff_format(b"hello, world", 12), None);
        assert_eq!(sniff_format(b"", 0), None);
    }

    #[test]
    fn classify_is_permissive_where_sniff_is_strict() {
        let mut huge = (MAX_SAFETENSORS_HEADER + 1).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{\"a\":1}");
        assert_eq!(sniff_format(&huge, 100), None);
        assert_eq!(
            classify(&huge, 100),
            Classified::Safetensors { header_len: MAX_SAFETENSORS_HEADER + 1 }
        );
        let f = safetensors(384);
        assert_eq!(classify(&f, f.len() as u64), Classified::Safetensors { header_len: 384 });
        assert_eq!(classify(b"\x80\x04\x95\x00", 4), Classified::Pickle);
        let legacy = [
            0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
            0x2e,
        ];
        assert_eq!(classify(&legacy, 15), Classified::TorchLegacy);
        // torch.save(pickle_protocol=3), and 4 with its FRAME.
        let mut p3 = legacy;
        p3[1] = 3;
        assert_eq!(classify(&p3, 15), Classified::TorchLegacy);
        let mut p4 = b"\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00".to_vec();
        p4.extend_from_slice(&legacy[2..]);
        assert_eq!(classify(&p4, p4.len() as u64), Classified::TorchLegacy);
        assert_eq!(classify(b"PK\x05\x06", 22), Classified::Zip);
        assert_eq!(classify(b"|TZR|", 5), Classified::Tensorizer);
        assert_eq!(classify(b"cos\nsystem\n", 12), Classified::Unknown);
    }
}
