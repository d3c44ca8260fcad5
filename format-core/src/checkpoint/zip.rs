//! The ZIP subset `torch.save` writes: stored entries, a central directory,
//! ZIP64 end records. Sans-IO: each step takes the bytes of one range and
//! says which range to fetch next.

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use crate::codec::cursor::Cursor;
use crate::error::{Error, Result};
use crate::layout::{MAX_ZIP_CENTRAL_DIRECTORY_LEN, MAX_ZIP_ENTRIES, ZIP_EOCD_SEARCH_WINDOW};

const EOCD_SIG: u32 = 0x0605_4b50;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;
const EOCD_LEN: u64 = 22;
const ZIP64_LOCATOR_LEN: u64 = 20;
/// Length of a ZIP64 end-of-central-directory record without extensions.
pub const ZIP64_EOCD_LEN: u64 = 56;
const CENTRAL_LEN: u64 = 46;
/// Length of a local file header before its name and extra field.
pub const LOCAL_HEADER_LEN: u64 = 30;

/// Where the tail of a file of `file_len` bytes starts: fetch
/// `tail_start(len)..len` and give it to [`EndRecord::find`].
pub fn tail_start(file_len: u64) -> u64 {
    file_len.saturating_sub(ZIP_EOCD_SEARCH_WINDOW + ZIP64_LOCATOR_LEN + ZIP64_EOCD_LEN)
}

/// The end-of-central-directory record (and ZIP64 locator, if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndRecord {
    /// Absolute offset of the classic end record.
    pub offset: u64,
    /// Entries declared by the classic record (0xFFFF: see ZIP64).
    entries: u16,
    cd_size: u32,
    cd_offset: u32,
    /// Absolute offset of the ZIP64 end record, when a locator is present.
    pub zip64_offset: Option<u64>,
    file_len: u64,
}

/// Where the central directory is and how many entries it declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryLocation {
    /// Absolute offset of the first central-directory record.
    pub offset: u64,
    /// Length of the central directory in bytes.
    pub len: u64,
    /// Number of entries declared.
    pub entries: u64,
    /// Length of the whole file.
    pub file_len: u64,
}

impl DirectoryLocation {
    /// The byte range to fetch for [`CentralDirectory::parse`].
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.len
    }
}

impl EndRecord {
    /// Finds the end record in `tail`, the last bytes of a file of
    /// `file_len` bytes starting at absolute offset `tail_offset` (see
    /// [`tail_start`]). The record must end exactly where its comment ends
    /// at the end of the file; the last such record wins.
    pub fn find(tail: &[u8], tail_offset: u64, file_len: u64) -> Result<Self> {
        if tail_offset.checked_add(tail.len() as u64) != Some(file_len) {
            return Err(Error::invalid("the tail must end at the end of the file"));
        }
        let window = tail.len().min((ZIP_EOCD_SEARCH_WINDOW) as usize);
        let first = tail.len() - window;
        let mut pos = tail.len().checked_sub(EOCD_LEN as usize).ok_or(Error::NotZip {
            reason: "the file is shorter than an end-of-central-directory record",
        })?;
        loop {
            if pos < first {
                break;
            }
            if tail.get(pos..pos + 4) == Some(&EOCD_SIG.to_le_bytes()[..]) {
                let mut c = Cursor::new(&tail[pos..], tail_offset + pos as u64);
                if let Ok(record) = Self::parse_at(&mut c, tail, pos, tail_offset, file_len) {
                    return Ok(record);
                }
            }
            if pos == 0 {
                break;
            }
            pos -= 1;
        }
        Err(Error::NotZip { reason: "no end-of-central-directory record in the last 65,557 bytes" })
    }

    fn parse_at(
        c: &mut Cursor<'_>,
        tail: &[u8],
        pos: usize,
        tail_offset: u64,
        file_len: u64,
    ) -> Result<Self> {
        let offset = c.offset();
        c.u32()?;
        let disk = c.u16()?;
        let cd_disk = c.u16()?;
        let entries_here = c.u16()?;
        let entries = c.u16()?;
        let cd_size = c.u32()?;
        let cd_offset = c.u32()?;
        let comment = u64::from(c.u16()?);
        if offset + EOCD_LEN + comment != file_len {
            return Err(Error::malformed(
                offset,
                "end record comment does not reach the end of the file",
            ));
        }
        if disk != 0 && disk != 0xFFFF
            || cd_disk != 0 && cd_disk != 0xFFFF
            || entries_here != entries
        {
            return Err(Error::malformed(offset, "multi-disk archives are not supported"));
        }
        let mut zip64_offset = None;
        if let Some(lpos) = pos.checked_sub(ZIP64_LOCATOR_LEN as usize)
            && tail.get(lpos..lpos + 4) == Some(&ZIP64_LOCATOR_SIG.to_le_bytes()[..])
        {
            let mut l = Cursor::new(&tail[lpos..], tail_offset + lpos as u64);
            l.u32()?;
            let disk = l.u32()?;
            let at = l.u64()?;
            let disks = l.u32()?;
            let locator = offset - ZIP64_LOCATOR_LEN;
            if disk != 0 || disks > 1 {
                return Err(Error::malformed(locator, "multi-disk archives are not supported"));
            }
            if at.checked_add(ZIP64_EOCD_LEN).is_none_or(|end| end > locator) {
                return Err(Error::malformed(locator, "ZIP64 end record outside the file"));
            }
            zip64_offset = Some(at);
        }
        Ok(Self { offset, entries, cd_size, cd_offset, zip64_offset, file_len })
    }

    /// The ZIP64 end record's range, which the host fetches when present
    /// (it is usually inside the tail already).
    pub fn zip64_range(&self) -> Option<Range<u64>> {
        self.zip64_offset.map(|o| o..o + ZIP64_EOCD_LEN)
    }

    /// Where the central directory is. `zip64` holds the bytes of
    /// [`EndRecord::zip64_range`] when the file has a ZIP64 locator.
    /// The directory must end exactly where the end records start.
    pub fn directory(&self, zip64: Option<&[u8]>) -> Result<DirectoryLocation> {
        let (offset, len, entries, end) = match (self.zip64_offset, zip64) {
            (None, _) => (
                u64::from(self.cd_offset),
                u64::from(self.cd_size),
                u64::from(self.entries),
                self.offset,
            ),
            (Some(_), None) => return Err(Error::invalid("the ZIP64 end record is needed")),
            (Some(at), Some(bytes)) => {
                let mut c = Cursor::new(bytes, at);
                if c.u32()? != ZIP64_EOCD_SIG {
                    return Err(Error::NotZip {
                        reason: "the ZIP64 locator does not point to a ZIP64 end record",
                    });
                }
                let size = c.u64()?;
                c.take(4)?;
                let disk = c.u32()?;
                let cd_disk = c.u32()?;
                let here = c.u64()?;
                let total = c.u64()?;
                let cd_size = c.u64()?;
                let cd_offset = c.u64()?;
                if size < ZIP64_EOCD_LEN - 12 || disk != 0 || cd_disk != 0 || here != total {
                    return Err(Error::malformed(at, "unsupported ZIP64 end record"));
                }
                let agree =
                    |classic: u64, sentinel: u64, wide: u64| classic == sentinel || classic == wide;
                if !agree(u64::from(self.entries), 0xFFFF, total)
                    || !agree(u64::from(self.cd_size), 0xFFFF_FFFF, cd_size)
                    || !agree(u64::from(self.cd_offset), 0xFFFF_FFFF, cd_offset)
                {
                    return Err(Error::malformed(
                        self.offset,
                        "end record and ZIP64 end record disagree",
                    ));
                }
                (cd_offset, cd_size, total, at)
            }
        };
        if len > MAX_ZIP_CENTRAL_DIRECTORY_LEN {
            return Err(Error::limit(
                self.offset,
                "central directory length",
                len,
                MAX_ZIP_CENTRAL_DIRECTORY_LEN,
            ));
        }
        if entries > MAX_ZIP_ENTRIES {
            return Err(Error::limit(self.offset, "zip entry count", entries, MAX_ZIP_ENTRIES));
        }
        if offset.checked_add(len) != Some(end) {
            return Err(Error::malformed(
                self.offset,
                "central directory does not end where the end record starts",
            ));
        }
        Ok(DirectoryLocation { offset, len, entries, file_len: self.file_len })
    }
}

/// One stored entry, from its central-directory record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZipEntry {
    /// The entry name (UTF-8).
    pub name: String,
    /// Absolute offset of the local file header.
    pub header_offset: u64,
    /// Length of the data (stored: compressed = uncompressed).
    pub size: u64,
    /// The CRC-32 the central directory records (not verified here).
    pub crc32: u32,
    /// Where the next entry (or the central directory) starts: the local
    /// header, data and data descriptor must end before it.
    pub span_end: u64,
    /// Absolute offset of the central-directory record.
    pub record_offset: u64,
}

impl ZipEntry {
    /// How many bytes the local header takes, given at least its first
    /// [`LOCAL_HEADER_LEN`] bytes (starting at `header_offset`).
    pub fn local_header_len(&self, fixed: &[u8]) -> Result<u64> {
        let mut c = Cursor::new(fixed, self.header_offset);
        if c.u32()? != LOCAL_SIG {
            return Err(Error::malformed(
                self.header_offset,
                "no local file header where the directory points",
            ));
        }
        c.take(22)?;
        let name = u64::from(c.u16()?);
        let extra = u64::from(c.u16()?);
        Ok(LOCAL_HEADER_LEN + name + extra)
    }

    /// Where the entry's data lies, given the whole local header (at least
    /// [`ZipEntry::local_header_len`] bytes from `header_offset`). The local
    /// name must equal the central one; the local extra field (torch's
    /// alignment padding) may differ from the central one.
    pub fn data_range(&self, local: &[u8]) -> Result<Range<u64>> {
        let at = self.header_offset;
        let len = self.local_header_len(local)?;
        let mut c = Cursor::new(local, at);
        c.take(6)?;
        let flags = c.u16()?;
        let method = c.u16()?;
        if method != 0 || flags & 1 != 0 {
            return Err(Error::CompressedEntry {
                offset: self.record_offset,
                name: self.name.clone(),
                method: if flags & 1 != 0 { 0xFFFF } else { method },
            });
        }
        c.take(16)?;
        let name_len = u64::from(c.u16()?);
        c.u16()?;
        if c.take(name_len)? != self.name.as_bytes() {
            return Err(Error::malformed(at, "local file name differs from the central directory"));
        }
        let start = at.checked_add(len).ok_or(Error::malformed(at, "entry offset overflows"))?;
        let end =
            start.checked_add(self.size).ok_or(Error::malformed(at, "entry size overflows"))?;
        if end > self.span_end {
            return Err(Error::malformed(
                at,
                "entry data overlaps the next entry or the central directory",
            ));
        }
        Ok(start..end)
    }
}

/// The parsed central directory: every entry, checked for duplicate names
/// and overlapping spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CentralDirectory {
    /// Entries in directory order.
    pub entries: Vec<ZipEntry>,
    /// Entry indices sorted by name, for lookups.
    by_name: Vec<usize>,
}

impl CentralDirectory {
    /// Parses the bytes of [`DirectoryLocation::range`].
    pub fn parse(bytes: &[u8], location: &DirectoryLocation) -> Result<Self> {
        let mut c = Cursor::new(bytes, location.offset);
        // Each record takes at least 46 bytes: the capacity follows the bytes
        // actually present, not the declared count.
        let cap = (location.entries).min(bytes.len() as u64 / CENTRAL_LEN);
        let mut entries = Vec::with_capacity(cap as usize);
        for _ in 0..location.entries {
            entries.push(parse_record(&mut c, location)?);
        }
        if c.remaining() != 0 {
            return Err(Error::malformed(c.offset(), "central directory longer than its entries"));
        }
        // Duplicate names.
        let mut by_name: Vec<usize> = (0..entries.len()).collect();
        by_name.sort_unstable_by(|&a, &b| entries[a].name.cmp(&entries[b].name));
        for w in by_name.windows(2) {
            if entries[w[0]].name == entries[w[1]].name {
                return Err(Error::malformed(
                    entries[w[1]].record_offset,
                    "duplicate zip entry name",
                ));
            }
        }
        // Spans: sorted by local header offset, each must end before the next.
        let mut by_offset: Vec<usize> = (0..entries.len()).collect();
        by_offset.sort_unstable_by_key(|&i| entries[i].header_offset);
        for (k, &i) in by_offset.iter().enumerate() {
            let next = by_offset.get(k + 1).map_or(location.offset, |&j| entries[j].header_offset);
            let e = &entries[i];
            let min_end = e
                .header_offset
                .checked_add(LOCAL_HEADER_LEN + e.name.len() as u64)
                .and_then(|v| v.checked_add(e.size))
                .ok_or(Error::malformed(e.record_offset, "entry size overflows"))?;
            if min_end > next {
                return Err(Error::malformed(e.record_offset, "zip entries overlap"));
            }
            entries[i].span_end = next;
        }
        Ok(Self { entries, by_name })
    }

    /// The index of the entry called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        let k = self.by_name.binary_search_by(|&i| self.entries[i].name.as_str().cmp(name)).ok()?;
        self.by_name.get(k).copied()
    }

    /// The entry called `name`.
    pub fn get(&self, name: &str) -> Option<&ZipEntry> {
        self.position(name).and_then(|i| self.entries.get(i))
    }
}

fn parse_record(c: &mut Cursor<'_>, location: &DirectoryLocation) -> Result<ZipEntry> {
    let record_offset = c.offset();
    if c.u32()? != CENTRAL_SIG {
        return Err(Error::malformed(record_offset, "bad central-directory record signature"));
    }
    c.take(4)?;
    let flags = c.u16()?;
    let method = c.u16()?;
    c.take(4)?;
    let crc32 = c.u32()?;
    let mut csize = u64::from(c.u32()?);
    let mut usize_ = u64::from(c.u32()?);
    let name_len = u64::from(c.u16()?);
    let extra_len = u64::from(c.u16()?);
    let comment_len = u64::from(c.u16()?);
    let mut disk = u32::from(c.u16()?);
    c.take(6)?;
    let mut header_offset = u64::from(c.u32()?);
    let name = c.take(name_len)?;
    let extra = c.take(extra_len)?;
    c.take(comment_len)?;
    let lossy = || String::from_utf8_lossy(name).into_owned();
    // ZIP64 extended information: the fields whose 32-bit value is saturated.
    let mut x = Cursor::new(extra, record_offset + CENTRAL_LEN + name_len);
    while x.remaining() >= 4 {
        let id = x.u16()?;
        let len = u64::from(x.u16()?);
        let body = x.take(len)?;
        if id == 1 {
            let mut z = Cursor::new(body, x.offset() - len);
            if usize_ == 0xFFFF_FFFF {
                usize_ = z.u64()?;
            }
            if csize == 0xFFFF_FFFF {
                csize = z.u64()?;
            }
            if header_offset == 0xFFFF_FFFF {
                header_offset = z.u64()?;
            }
            if disk == 0xFFFF {
                disk = z.u32()?;
            }
        }
    }
    if method != 0 || flags & 1 != 0 {
        return Err(Error::CompressedEntry {
            offset: record_offset,
            name: lossy(),
            method: if flags & 1 != 0 { 0xFFFF } else { method },
        });
    }
    if disk != 0 {
        return Err(Error::malformed(record_offset, "multi-disk archives are not supported"));
    }
    if csize != usize_ {
        return Err(Error::malformed(
            record_offset,
            "stored entry with different compressed and real sizes",
        ));
    }
    let Ok(name) = core::str::from_utf8(name) else {
        return Err(Error::malformed(record_offset, "zip entry name is not UTF-8"));
    };
    if name.is_empty() {
        return Err(Error::malformed(record_offset, "empty zip entry name"));
    }
    if header_offset >= location.offset {
        return Err(Error::malformed(record_offset, "local header offset beyond the entries"));
    }
    Ok(ZipEntry {
        name: name.into(),
        header_offset,
        size: csize,
        crc32,
        span_end: location.offset,
        record_offset,
    })
}
