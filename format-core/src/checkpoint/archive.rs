//! The torch layout inside the ZIP: one top-level folder holding
//! `data.pkl`, `data/<key>` storages and small text records.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::zip::CentralDirectory;
use crate::dtype::ByteOrder;
use crate::error::{Error, Result};
use crate::layout::{MAX_CHECKPOINT_RECORD_LEN, MAX_TORCH_ARCHIVE_VERSION};

/// How many leading bytes [`sniff`] looks at.
pub const SNIFF_LEN: usize = 512;

/// `torch.save`'s legacy magic number, pickled as a LONG1.
const LEGACY_MAGIC: [u8; 12] =
    [0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/// Whether `head` opens with torch's legacy magic number: `PROTO` 2 to 5
/// (the `pickle_protocol` torch.save was given), a `FRAME` from protocol 4
/// on, then the magic number as a LONG1.
fn legacy_magic(head: &[u8]) -> bool {
    let [0x80, 2..=5, rest @ ..] = head else {
        return false;
    };
    let rest = match rest {
        [0x95, framed @ ..] => framed.get(8..).unwrap_or(&[]),
        _ => rest,
    };
    rest.starts_with(&LEGACY_MAGIC)
}

/// Checks the first bytes of a file (up to [`SNIFF_LEN`]): a ZIP local
/// header must be at byte 0. Legacy torch files (a pickle stream, or the
/// older tar layout) are refused with an error saying how to convert them.
pub fn sniff(head: &[u8]) -> Result<()> {
    if head.starts_with(b"PK\x03\x04") {
        return Ok(());
    }
    if legacy_magic(head) {
        return Err(Error::LegacyTorchCheckpoint {
            layout: "a pickle stream with torch's legacy magic number, written by torch < 1.6 or with \
                     _use_new_zipfile_serialization=False",
        });
    }
    if head.first() == Some(&0x80) {
        return Err(Error::LegacyTorchCheckpoint {
            layout: "a bare pickle stream, not a zip archive",
        });
    }
    if head.get(257..262) == Some(b"ustar") {
        return Err(Error::LegacyTorchCheckpoint {
            layout: "a tar archive, torch's oldest save format",
        });
    }
    Err(Error::NotZip { reason: "no ZIP local file header at byte 0" })
}

/// One of the small text records torch writes beside `data.pkl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// `version` (archive format version, e.g. `3`).
    Version,
    /// `.data/version` (preferred over `version` by torch's reader).
    DataVersion,
    /// `byteorder`: `little` or `big`.
    ByteOrder,
    /// `.format_version`.
    FormatVersion,
    /// `.storage_alignment`.
    StorageAlignment,
}

const RECORDS: &[(&str, Record)] = &[
    ("version", Record::Version),
    (".data/version", Record::DataVersion),
    ("byteorder", Record::ByteOrder),
    (".format_version", Record::FormatVersion),
    (".storage_alignment", Record::StorageAlignment),
];

/// Where the torch parts are in the central directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    /// The top-level folder (`archive`, or the file stem), without `/`.
    pub prefix: String,
    /// Entry index of `<prefix>/data.pkl`.
    pub pickle: usize,
    /// The records present, with their entry indices.
    pub records: Vec<(Record, usize)>,
}

impl Archive {
    /// Finds the folder (the first entry's top-level folder, as torch's
    /// reader does), `data.pkl` and the records.
    pub fn locate(dir: &CentralDirectory) -> Result<Self> {
        let first = dir
            .entries
            .first()
            .ok_or(Error::NotZip { reason: "the zip archive has no entries" })?;
        let Some((prefix, _)) = first.name.split_once('/') else {
            return Err(Error::CorruptCheckpoint {
                key: first.name.clone(),
                reason: "the first zip entry is not inside a top-level folder",
            });
        };
        let pickle = dir.position(&format!("{prefix}/data.pkl")).ok_or_else(|| {
            Error::CorruptCheckpoint {
                key: format!("{prefix}/data.pkl"),
                reason: "missing: not a torch.save checkpoint",
            }
        })?;
        let records = RECORDS
            .iter()
            .filter_map(|&(name, r)| dir.position(&format!("{prefix}/{name}")).map(|i| (r, i)))
            .collect();
        Ok(Self { prefix: prefix.into(), pickle, records })
    }

    /// The entry index of storage `key` (`<prefix>/data/<key>`).
    pub fn storage_entry(&self, dir: &CentralDirectory, key: &str) -> Result<usize> {
        dir.position(&format!("{}/data/{key}", self.prefix)).ok_or_else(|| {
            Error::CorruptCheckpoint { key: key.into(), reason: "storage has no data/<key> entry" }
        })
    }
}

/// The records' values. Absent records keep their defaults: no version,
/// little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Records {
    /// The archive version (`.data/version`, else `version`).
    pub version: Option<u64>,
    /// The `byteorder` record, if present (absent means little-endian).
    pub byte_order: Option<ByteOrder>,
    /// The `.format_version` record.
    pub format_version: Option<u64>,
    /// The `.storage_alignment` record.
    pub storage_alignment: Option<u64>,
}

fn number(text: &str, offset: u64) -> Result<u64> {
    let t = text.trim_end_matches(['\n', '\r']);
    if t.is_empty() || t.len() > 19 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::malformed(offset, "checkpoint record is not a decimal number"));
    }
    t.parse().map_err(|_| Error::malformed(offset, "checkpoint record is not a decimal number"))
}

impl Records {
    /// Reads one record's bytes (found at absolute `offset`).
    pub fn apply(&mut self, record: Record, bytes: &[u8], offset: u64) -> Result<()> {
        if bytes.len() as u64 > MAX_CHECKPOINT_RECORD_LEN {
            return Err(Error::limit(
                offset,
                "checkpoint record length",
                bytes.len() as u64,
                MAX_CHECKPOINT_RECORD_LEN,
            ));
        }
        let text = core::str::from_utf8(bytes)
            .map_err(|_| Error::malformed(offset, "checkpoint record is not text"))?;
        match record {
            Record::Version | Record::DataVersion => {
                let v = number(text, offset)?;
                if v == 0 || v > MAX_TORCH_ARCHIVE_VERSION {
                    return Err(Error::malformed(offset, "unsupported torch archive version"));
                }
                if record == Record::DataVersion || self.version.is_none() {
                    self.version = Some(v);
                }
            }
            Record::ByteOrder => {
                self.byte_order = Some(match text {
                    "little" => ByteOrder::Little,
                    "big" => ByteOrder::Big,
                    _ => {
                        return Err(Error::malformed(
                            offset,
                            "byteorder record is neither little nor big",
                        ));
                    }
                })
            }
            Record::FormatVersion => self.format_version = Some(number(text, offset)?),
            Record::StorageAlignment => self.storage_alignment = Some(number(text, offset)?),
        }
        Ok(())
    }

    /// The storages' byte order (little-endian when the record is absent).
    pub fn storage_byte_order(&self) -> ByteOrder {
        self.byte_order.unwrap_or(ByteOrder::Little)
    }
}
