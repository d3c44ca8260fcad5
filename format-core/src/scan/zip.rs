//! ZIP scanning: the end records, the central directory and every local
//! header, read permissively (as the most lenient reader would) with each
//! anomaly a finding; then every `*.pkl` entry through [`super::pickle`].

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::pickle::{walk, walk_growing};
use super::{Finding, Findings, RuleId, read_vec, shown};
use crate::checkpoint::zip::{LOCAL_HEADER_LEN, ZIP64_EOCD_LEN, tail_start};
use crate::checkpoint::{Leaf, Pickle, StateDict};
use crate::error::Result;
use crate::layout::{
    MAX_INFLATE_RATIO, MAX_PICKLE_LEN, MAX_SCANNED_PICKLE_BYTES, MAX_SCANNED_PICKLES,
    MAX_ZIP_CENTRAL_DIRECTORY_LEN, MAX_ZIP_ENTRIES,
};
use crate::report::TensorRow;
use crate::source::RandomAccess;

const EOCD_SIG: [u8; 4] = *b"PK\x05\x06";
const ZIP64_LOCATOR_SIG: [u8; 4] = *b"PK\x06\x07";
const ZIP64_EOCD_SIG: [u8; 4] = *b"PK\x06\x06";
const CENTRAL_SIG: [u8; 4] = *b"PK\x01\x02";
const LOCAL_SIG: [u8; 4] = *b"PK\x03\x04";
const EOCD_LEN: u64 = 22;
const ZIP64_LOCATOR_LEN: u64 = 20;
const CENTRAL_LEN: usize = 46;

fn le(b: &[u8], at: usize, n: usize) -> u64 {
    let mut buf = [0u8; 8];
    if let Some(s) = b.get(at..at + n) {
        buf[..n].copy_from_slice(s);
    }
    u64::from_le_bytes(buf)
}

/// The classic end record.
#[derive(Debug, Clone, Copy)]
struct End {
    offset: u64,
    disk: u64,
    entries: u64,
    cd_size: u64,
    cd_offset: u64,
    comment: u64,
}

/// Offsets of end records in `tail` other than the one at `chosen` whose
/// central directory ends right where they start, as a writer's does (a
/// chance `PK\x05\x06` in data or a comment is not one).
fn other_ends(tail: &[u8], tail_at: u64, chosen: u64) -> Vec<u64> {
    let last = tail.len().saturating_sub(EOCD_LEN as usize - 1);
    (0..last)
        .filter(|&p| tail.get(p..p + 4) == Some(&EOCD_SIG[..]) && tail_at + p as u64 != chosen)
        .filter(|&p| le(tail, p + 16, 4) + le(tail, p + 12, 4) == tail_at + p as u64)
        .map(|p| tail_at + p as u64)
        .collect()
}

/// The last end-of-central-directory record in `tail` (absolute offset
/// `tail_at`) whose fixed bytes are all there.
fn find_end(tail: &[u8], tail_at: u64) -> Option<End> {
    let last = tail.len().checked_sub(EOCD_LEN as usize)?;
    (0..=last).rev().find(|&p| tail.get(p..p + 4) == Some(&EOCD_SIG[..])).map(|p| End {
        offset: tail_at + p as u64,
        disk: le(tail, p + 4, 2) | le(tail, p + 6, 2),
        entries: le(tail, p + 10, 2),
        cd_size: le(tail, p + 12, 4),
        cd_offset: le(tail, p + 16, 4),
        comment: le(tail, p + 20, 2),
    })
}

fn read_tail<R: RandomAccess + ?Sized>(src: &mut R) -> Result<(Vec<u8>, u64)> {
    let len = src.len();
    let at = tail_start(len);
    Ok((read_vec(src, at, len - at, "the zip end records")?, at))
}

/// Whether the end of `src` holds a ZIP end record.
pub fn has_end_record<R: RandomAccess + ?Sized>(src: &mut R) -> Result<bool> {
    let (tail, at) = read_tail(src)?;
    Ok(find_end(&tail, at).is_some())
}

/// One central-directory record.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    record: u64,
    flags: u64,
    method: u64,
    csize: u64,
    usize_: u64,
    local: u64,
    /// The data range, once the local header was read.
    data: Option<(u64, u64)>,
}

/// What a ZIP scan found besides its findings.
#[derive(Debug, Clone, Default)]
pub struct Scanned {
    /// Tensor rebuild calls its pickles make.
    pub tensors: u64,
    /// One row per tensor of the state dict in `<folder>/data.pkl`, when
    /// the checkpoint reader reads it (see `torch_rows`).
    pub rows: Option<Vec<TensorRow>>,
}

/// Scans a ZIP archive.
pub fn scan<R: RandomAccess + ?Sized>(src: &mut R, findings: &mut Findings) -> Result<Scanned> {
    let tensors = scan_tensors(src, findings)?;
    Ok(Scanned { tensors: tensors.0, rows: tensors.1 })
}

fn scan_tensors<R: RandomAccess + ?Sized>(
    src: &mut R,
    findings: &mut Findings,
) -> Result<(u64, Option<Vec<TensorRow>>)> {
    let len = src.len();
    let (tail, tail_at) = read_tail(src)?;
    let Some(end) = find_end(&tail, tail_at) else {
        findings.push(Finding::new(
            RuleId::ZipStructure,
            Some(0),
            "no end-of-central-directory record in the last 65,557 bytes",
        ));
        return Ok((0, None));
    };
    for at in other_ends(&tail, tail_at, end.offset) {
        let m = format!(
            "a second end-of-central-directory record (the scan reads the one at byte {})",
            end.offset
        );
        findings.push(Finding::new(RuleId::ZipTwoEnds, Some(at), m).spanning(EOCD_LEN));
    }
    let record_end = end.offset.saturating_add(EOCD_LEN).saturating_add(end.comment);
    if record_end > len {
        let f = Finding::new(
            RuleId::ZipPastEnd,
            Some(end.offset),
            "the end record's comment runs past the end of the file",
        );
        findings.push(f.spanning(EOCD_LEN));
    } else if record_end < len {
        let n = len - record_end;
        findings.push(
            Finding::new(
                RuleId::ZipOutside,
                Some(record_end),
                format!("{n} bytes follow the end record"),
            )
            .spanning(n),
        );
    }
    if end.disk != 0 && end.disk != 0xFFFF {
        findings.push(Finding::new(RuleId::ZipStructure, Some(end.offset), "a multi-disk archive"));
        return Ok((0, None));
    }
    let Some(dir) = directory(src, &tail, tail_at, end, findings)? else {
        return Ok((0, None));
    };
    let entries = central(src, &dir, findings)?;
    let entries = locals(src, entries, dir.offset, findings)?;
    overlaps(&entries, findings);
    let first = entries.iter().map(|e| e.local).min().unwrap_or(dir.offset);
    if first > 0 {
        findings.push(
            Finding::new(
                RuleId::ZipOutside,
                Some(0),
                format!("{first} bytes come before the first entry"),
            )
            .spanning(first),
        );
    }
    let tensors = pickles(src, &entries, findings)?;
    Ok((tensors, torch_rows(src, &entries)?))
}

#[derive(Debug, Clone, Copy)]
struct Dir {
    offset: u64,
    len: u64,
    entries: u64,
}

fn directory<R: RandomAccess + ?Sized>(
    src: &mut R,
    tail: &[u8],
    tail_at: u64,
    end: End,
    findings: &mut Findings,
) -> Result<Option<Dir>> {
    let len = src.len();
    let (mut offset, mut size, mut entries, mut dir_end) =
        (end.cd_offset, end.cd_size, end.entries, end.offset);
    let loc = end.offset.checked_sub(ZIP64_LOCATOR_LEN).filter(|&l| l >= tail_at);
    if let Some(l) = loc
        && tail.get((l - tail_at) as usize..(l - tail_at) as usize + 4)
            == Some(&ZIP64_LOCATOR_SIG[..])
    {
        let at = le(tail, (l - tail_at) as usize + 8, 8);
        if at.checked_add(ZIP64_EOCD_LEN).is_none_or(|e| e > l) {
            findings.push(Finding::new(
                RuleId::ZipStructure,
                Some(l),
                "the ZIP64 locator points outside the file",
            ));
            return Ok(None);
        }
        let z = read_vec(src, at, ZIP64_EOCD_LEN, "the ZIP64 end record")?;
        if z.get(..4) != Some(&ZIP64_EOCD_SIG[..]) {
            findings.push(Finding::new(
                RuleId::ZipStructure,
                Some(at),
                "no ZIP64 end record where the locator points",
            ));
            return Ok(None);
        }
        entries = le(&z, 32, 8);
        size = le(&z, 40, 8);
        offset = le(&z, 48, 8);
        dir_end = at;
    }
    if size > MAX_ZIP_CENTRAL_DIRECTORY_LEN || entries > MAX_ZIP_ENTRIES {
        findings.push(Finding::new(
            RuleId::ZipStructure,
            Some(end.offset),
            format!(
                "the central directory declares {entries} entries in {size} bytes, above the limits of \
                 {MAX_ZIP_ENTRIES} entries and {MAX_ZIP_CENTRAL_DIRECTORY_LEN} bytes"
            ),
        ));
        return Ok(None);
    }
    if offset > dir_end.min(len) {
        findings.push(Finding::new(
            RuleId::ZipStructure,
            Some(end.offset),
            format!("the central directory offset {offset} is past the end records"),
        ));
        return Ok(None);
    }
    let stop = offset.saturating_add(size);
    if stop > dir_end {
        findings.push(
            Finding::new(
                RuleId::ZipPastEnd,
                Some(offset),
                "the central directory runs past the end records",
            )
            .spanning(size),
        );
        size = dir_end - offset;
    } else if stop < dir_end {
        let n = dir_end - stop;
        findings.push(
            Finding::new(
                RuleId::ZipOutside,
                Some(stop),
                format!("{n} bytes lie between the central directory and the end records"),
            )
            .spanning(n),
        );
    }
    Ok(Some(Dir { offset, len: size, entries }))
}

fn central<R: RandomAccess + ?Sized>(
    src: &mut R,
    dir: &Dir,
    findings: &mut Findings,
) -> Result<Vec<Entry>> {
    let bytes = read_vec(src, dir.offset, dir.len, "the central directory")?;
    let mut entries = Vec::new();
    let mut p = 0usize;
    while bytes.get(p..p + 4) == Some(&CENTRAL_SIG[..]) && (entries.len() as u64) < MAX_ZIP_ENTRIES
    {
        let record = dir.offset + p as u64;
        let Some(fixed) = bytes.get(p..p + CENTRAL_LEN) else { break };
        let (n, x, c) =
            (le(fixed, 28, 2) as usize, le(fixed, 30, 2) as usize, le(fixed, 32, 2) as usize);
        let Some(name) = bytes.get(p + CENTRAL_LEN..p + CENTRAL_LEN + n) else { break };
        let extra = bytes.get(p + CENTRAL_LEN + n..p + CENTRAL_LEN + n + x).unwrap_or_default();
        let mut e = Entry {
            name: String::from_utf8_lossy(name).into_owned(),
            record,
            flags: le(fixed, 8, 2),
            method: le(fixed, 10, 2),
            csize: le(fixed, 20, 4),
            usize_: le(fixed, 24, 4),
            local: le(fixed, 42, 4),
            data: None,
        };
        zip64_extra(&mut e, extra);
        check_record(&e, findings);
        entries.push(e);
        p += CENTRAL_LEN + n + x + c;
    }
    if entries.len() as u64 != dir.entries || p < bytes.len() {
        findings.push(Finding::new(
            RuleId::ZipHeaderMismatch,
            Some(dir.offset + p.min(bytes.len()) as u64),
            format!(
                "the end record declares {} entries; the central directory holds {} records{}",
                dir.entries,
                entries.len(),
                if p < bytes.len() { " and bytes that are not one" } else { "" }
            ),
        ));
    }
    let mut by_name: Vec<usize> = (0..entries.len()).collect();
    by_name.sort_by(|&a, &b| {
        (&entries[a].name, entries[a].record).cmp(&(&entries[b].name, entries[b].record))
    });
    for w in by_name.windows(2) {
        let (a, b) = (&entries[w[0]], &entries[w[1]]);
        if a.name == b.name {
            let m = format!(
                "entry {} appears twice (central records at bytes {} and {})",
                shown(&b.name),
                a.record,
                b.record
            );
            findings.push(
                Finding::new(RuleId::ZipDuplicate, Some(b.record), m).in_tensor(b.name.clone()),
            );
        }
    }
    Ok(entries)
}

/// Applies a ZIP64 extended-information field to the saturated values.
fn zip64_extra(e: &mut Entry, extra: &[u8]) {
    let mut q = 0usize;
    while let (Some(id), Some(n)) = (extra.get(q..q + 2), extra.get(q + 2..q + 4)) {
        let n = le(n, 0, 2) as usize;
        let body = extra.get(q + 4..q + 4 + n).unwrap_or_default();
        if le(id, 0, 2) == 1 {
            let mut k = 0;
            for v in [&mut e.usize_, &mut e.csize, &mut e.local] {
                if *v == 0xFFFF_FFFF && body.len() >= k + 8 {
                    *v = le(body, k, 8);
                    k += 8;
                }
            }
        }
        q += 4 + n;
    }
}

fn check_record(e: &Entry, findings: &mut Findings) {
    let at = Some(e.record);
    let name = shown(&e.name);
    if e.flags & 1 != 0 {
        findings.push(
            Finding::new(RuleId::ZipEncrypted, at, format!("entry {name} is encrypted"))
                .in_tensor(e.name.clone()),
        );
    }
    if e.method != 0 {
        let m = format!("entry {name} uses compression method {}", e.method);
        findings.push(Finding::new(RuleId::ZipCompressed, at, m).in_tensor(e.name.clone()));
    } else if e.csize != e.usize_ {
        let m = format!(
            "stored entry {name} declares {} compressed and {} real bytes",
            e.csize, e.usize_
        );
        findings.push(Finding::new(RuleId::ZipHeaderMismatch, at, m).in_tensor(e.name.clone()));
    }
}

fn locals<R: RandomAccess + ?Sized>(
    src: &mut R,
    mut entries: Vec<Entry>,
    dir_offset: u64,
    findings: &mut Findings,
) -> Result<Vec<Entry>> {
    for e in &mut entries {
        let name = shown(&e.name);
        let push = |f: &mut Findings, rule, at, m: String| {
            f.push(Finding::new(rule, Some(at), m).in_tensor(e.name.clone()))
        };
        if e.local.checked_add(LOCAL_HEADER_LEN).is_none_or(|x| x > dir_offset) {
            push(
                findings,
                RuleId::ZipPastEnd,
                e.record,
                format!("entry {name}'s local header at {} is past the entries", e.local),
            );
            continue;
        }
        let fixed = read_vec(src, e.local, LOCAL_HEADER_LEN, "a local file header")?;
        if fixed.get(..4) != Some(&LOCAL_SIG[..]) {
            push(
                findings,
                RuleId::ZipHeaderMismatch,
                e.local,
                format!("no local header where entry {name} points"),
            );
            continue;
        }
        let (n, x) = (le(&fixed, 26, 2), le(&fixed, 28, 2));
        let start = e.local + LOCAL_HEADER_LEN + n + x;
        if start > dir_offset {
            push(
                findings,
                RuleId::ZipPastEnd,
                e.local,
                format!("entry {name}'s local header runs into the central directory"),
            );
            continue;
        }
        let local_name = read_vec(src, e.local + LOCAL_HEADER_LEN, n, "a local file name")?;
        let mut differs = Vec::new();
        if local_name != e.name.as_bytes() {
            differs.push("name");
        }
        if le(&fixed, 8, 2) != e.method {
            differs.push("compression method");
        }
        if le(&fixed, 6, 2) & 1 != e.flags & 1 {
            differs.push("encryption flag");
        }
        let sized = |v: u64, c: u64| v == c || v == 0xFFFF_FFFF;
        if le(&fixed, 6, 2) & 8 == 0
            && (!sized(le(&fixed, 18, 4), e.csize) || !sized(le(&fixed, 22, 4), e.usize_))
        {
            differs.push("sizes");
        }
        if !differs.is_empty() {
            let m = format!(
                "entry {name}'s local header and central record disagree: {}",
                differs.join(", ")
            );
            push(findings, RuleId::ZipHeaderMismatch, e.local, m);
        }
        let Some(end) = start.checked_add(e.csize) else {
            push(findings, RuleId::ZipPastEnd, e.record, format!("entry {name}'s size overflows"));
            continue;
        };
        if end > dir_offset {
            let whence =
                if end > src.len() { "the end of the file" } else { "the central directory" };
            let m = format!("entry {name}'s {} data bytes run past {whence}", e.csize);
            findings.push(
                Finding::new(RuleId::ZipPastEnd, Some(start), m)
                    .spanning(e.csize)
                    .in_tensor(e.name.clone()),
            );
            continue;
        }
        e.data = Some((start, end));
    }
    Ok(entries)
}

fn overlaps(entries: &[Entry], findings: &mut Findings) {
    let mut spans: Vec<(u64, u64, &str)> =
        entries.iter().filter_map(|e| Some((e.local, e.data?.1, e.name.as_str()))).collect();
    spans.sort();
    let mut reach: Option<(u64, &str)> = None;
    for &(start, end, name) in &spans {
        if let Some((r, other)) = reach
            && start < r
        {
            let m = format!("entry {} starts inside entry {}", shown(name), shown(other));
            findings.push(
                Finding::new(RuleId::ZipOverlap, Some(start), m)
                    .spanning(r - start)
                    .in_tensor(name),
            );
        }
        if reach.is_none_or(|(r, _)| end > r) {
            reach = Some((end, name));
        }
    }
}

/// The inflated bytes of the deflated entry `e` (data at `start..end`), or
/// why they were not inflated: a declared size above the pickle limit or
/// the DEFLATE ratio, data that does not inflate, or inflates to another
/// size than declared.
fn inflated<R: RandomAccess + ?Sized>(
    src: &mut R,
    e: &Entry,
    start: u64,
    end: u64,
) -> Result<core::result::Result<Vec<u8>, String>> {
    let csize = end - start;
    if e.usize_ > MAX_PICKLE_LEN {
        return Ok(Err(format!(
            "it inflates to {} bytes, above the limit of {MAX_PICKLE_LEN}",
            e.usize_
        )));
    }
    if e.usize_ > csize.saturating_mul(MAX_INFLATE_RATIO) {
        let why = format!(
            "it declares {} bytes from {csize}, more than DEFLATE's ratio of {MAX_INFLATE_RATIO}",
            e.usize_
        );
        return Ok(Err(why));
    }
    let deflated = read_vec(src, start, csize, "a compressed pickle")?;
    // One byte over the declared size tells a lying size from a right one.
    let limit = usize::try_from(e.usize_).unwrap_or(usize::MAX).saturating_add(1);
    Ok(match miniz_oxide::inflate::decompress_to_vec_with_limit(&deflated, limit) {
        Ok(data) if data.len() as u64 == e.usize_ => Ok(data),
        Ok(data) => {
            Err(format!("it inflates to {} bytes, not the {} it declares", data.len(), e.usize_))
        }
        Err(err) if err.output.len() as u64 > e.usize_ => {
            Err(format!("it inflates past the {} bytes it declares", e.usize_))
        }
        Err(_) => Err(String::from("its deflated data is corrupt")),
    })
}

/// Walks an inflated pickle; its findings are placed at the entry's data
/// (`start`), each message giving its offset in the inflated bytes.
fn walk_inflated(data: &[u8], start: u64, e: &Entry, findings: &mut Findings) -> u64 {
    let mut found = Findings::default();
    let w = walk(data, 0, &e.name, true, &mut found);
    if let Some(n) = w.end
        && n < data.len()
    {
        let m = format!("{}: {} bytes follow the pickle's STOP", shown(&e.name), data.len() - n);
        found.push(Finding::new(RuleId::PklTrailing, Some(n as u64), m));
    }
    findings.merge(found.relocated(start));
    w.tensors
}

fn pickles<R: RandomAccess + ?Sized>(
    src: &mut R,
    entries: &[Entry],
    findings: &mut Findings,
) -> Result<u64> {
    let (mut tensors, mut scanned, mut bytes) = (0u64, 0u64, 0u64);
    let mut any = false;
    for e in entries.iter().filter(|e| e.name.ends_with(".pkl")) {
        any = true;
        let not_scanned = |f: &mut Findings, why: &str| {
            let m = format!("pickle {} was not scanned: {why}", shown(&e.name));
            f.push(
                Finding::new(RuleId::PklNotScanned, Some(e.record), m).in_tensor(e.name.clone()),
            );
        };
        let Some((start, end)) = e.data else {
            not_scanned(findings, "its data could not be located");
            continue;
        };
        if e.flags & 1 != 0 || !matches!(e.method, 0 | 8) {
            not_scanned(
                findings,
                if e.flags & 1 != 0 {
                    "it is encrypted"
                } else {
                    "its compression method is not deflate"
                },
            );
            continue;
        }
        scanned += 1;
        bytes = bytes.saturating_add(if e.method == 8 { e.usize_ } else { end - start });
        if scanned > MAX_SCANNED_PICKLES || bytes > MAX_SCANNED_PICKLE_BYTES {
            not_scanned(findings, "the archive's pickles are above the scan limits");
            continue;
        }
        if e.method == 8 {
            match inflated(src, e, start, end)? {
                Ok(data) => tensors += walk_inflated(&data, start, e, findings),
                Err(why) => not_scanned(findings, &why),
            }
            continue;
        }
        let (w, _) = walk_growing(src, start, end, &e.name, findings)?;
        tensors += w.tensors;
        if let Some(n) = w.end
            && start + (n as u64) < end
        {
            let extra = end - start - n as u64;
            let m = format!("{}: {extra} bytes follow the pickle's STOP", shown(&e.name));
            findings
                .push(Finding::new(RuleId::PklTrailing, Some(start + n as u64), m).spanning(extra));
        }
    }
    if !any {
        findings.push(Finding::new(
            RuleId::ZipNoPickle,
            Some(0),
            "the archive holds no .pkl entry",
        ));
    }
    Ok(tensors)
}

/// The state dict's tensors as rows, read by the checkpoint reader
/// ([`Pickle::parse`], [`StateDict::from_pickle`]) from the archive's one
/// `<folder>/data.pkl` (stored, or deflated within the scan's limits).
/// `None` when there is no such pickle, it holds anything the reader
/// refuses (any global off its list: the scan's findings say why), or a
/// storage it views has no located entry.
fn torch_rows<R: RandomAccess + ?Sized>(
    src: &mut R,
    entries: &[Entry],
) -> Result<Option<Vec<TensorRow>>> {
    let mut pkls = entries
        .iter()
        .filter(|e| e.name.ends_with("/data.pkl") && !e.name[..e.name.len() - 9].contains('/'));
    let (Some(e), None) = (pkls.next(), pkls.next()) else { return Ok(None) };
    let Some((start, end)) = e.data else { return Ok(None) };
    let bytes = match e.method {
        0 if end - start <= MAX_PICKLE_LEN => read_vec(src, start, end - start, "a pickle")?,
        8 => match inflated(src, e, start, end)? {
            Ok(data) => data,
            Err(_) => return Ok(None),
        },
        _ => return Ok(None),
    };
    let Ok(state) = Pickle::parse(&bytes, start).and_then(|p| StateDict::from_pickle(&p)) else {
        return Ok(None);
    };
    let folder = &e.name[..e.name.len() - "data.pkl".len()];
    let mut places = Vec::with_capacity(state.storages.len());
    for s in &state.storages {
        let name = format!("{folder}data/{}", s.key);
        let place =
            entries.iter().find(|x| x.name == name).and_then(|x| Some((x.local, x.data?.0)));
        let Some(place) = place else { return Ok(None) };
        places.push(place);
    }
    let rows = state
        .entries
        .iter()
        .filter_map(|entry| match &entry.value {
            Leaf::Tensor(v) => Some((&entry.path, v)),
            _ => None,
        })
        .enumerate()
        .map(|(i, (path, v))| {
            let (local, data) = places[v.storage];
            TensorRow::of_torch(i, path, v, local, data)
        })
        .collect();
    Ok(Some(rows))
}
