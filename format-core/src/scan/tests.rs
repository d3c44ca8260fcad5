//! Every rule triggered by a crafted file, and clean files of every
//! format scanned without findings.

extern crate std;

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::layout::MAX_FINDINGS_PER_RULE;
use crate::source::SliceSource;
use crate::{Dtype, ElementType, TensorSpec, WriterOptions, write};

fn run(bytes: &[u8], name: Option<&str>) -> Scan {
    let options = ScanOptions { name, ..ScanOptions::default() };
    scan(&mut SliceSource::new(bytes), &options).unwrap()
}

fn rules_of(bytes: &[u8], name: Option<&str>) -> BTreeSet<RuleId> {
    run(bytes, name).findings.iter().map(|f| f.rule).collect()
}

fn vector(path: &str) -> Vec<u8> {
    std::fs::read(std::format!("{}/../tests/vectors/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

// ---- builders --------------------------------------------------------------

fn tensorizer() -> Vec<u8> {
    let a: Vec<u8> = (0..6u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
    let b = [1u8, 2, 3, 4];
    let specs = [
        TensorSpec::state_dict("weight", Dtype::from_element(ElementType::F32), vec![2, 3]),
        TensorSpec::state_dict("bias", Dtype::from_element(ElementType::U8), vec![4]),
    ];
    write::to_vec(&specs, &[&a, &b], &WriterOptions::tensorizer(), None, || [0; 24]).unwrap()
}

fn safetensors() -> Vec<u8> {
    let json =
        r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let json = std::format!("{json:<width$}", width = json.len().next_multiple_of(8));
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(&[0; 8]);
    out
}

/// A clean protocol 2 state dict: an empty `OrderedDict`.
const STATE_DICT: &[u8] = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01.";
/// `os.system("ls")` in protocol 2.
const OS_SYSTEM: &[u8] = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.";

struct ZipEntry<'a> {
    name: &'a str,
    data: &'a [u8],
    flags: u16,
    method: u16,
}

fn e<'a>(name: &'a str, data: &'a [u8]) -> ZipEntry<'a> {
    ZipEntry { name, data, flags: 0, method: 0 }
}

/// A stored ZIP archive; returns the bytes and each entry's local and
/// central-record offsets.
fn zip(entries: &[ZipEntry<'_>]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut out = Vec::new();
    let mut locals = Vec::new();
    for z in entries {
        locals.push(out.len());
        out.extend_from_slice(b"PK\x03\x04\x14\x00");
        out.extend_from_slice(&z.flags.to_le_bytes());
        out.extend_from_slice(&z.method.to_le_bytes());
        out.extend_from_slice(&[0; 8]); // time, date, crc
        out.extend_from_slice(&(z.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(z.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(z.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(z.name.as_bytes());
        out.extend_from_slice(z.data);
    }
    let cd = out.len();
    let mut offsets = Vec::new();
    for (z, &local) in entries.iter().zip(&locals) {
        offsets.push((local, out.len()));
        out.extend_from_slice(b"PK\x01\x02\x14\x00\x14\x00");
        out.extend_from_slice(&z.flags.to_le_bytes());
        out.extend_from_slice(&z.method.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&(z.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(z.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(z.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&[0; 12]); // extra, comment, disk, attributes
        out.extend_from_slice(&(local as u32).to_le_bytes());
        out.extend_from_slice(z.name.as_bytes());
    }
    let cd_len = out.len() - cd;
    out.extend_from_slice(b"PK\x05\x06\x00\x00\x00\x00");
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(cd_len as u32).to_le_bytes());
    out.extend_from_slice(&(cd as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    (out, offsets)
}

fn torch_zip() -> (Vec<u8>, Vec<(usize, usize)>) {
    zip(&[
        e("archive/data.pkl", STATE_DICT),
        e("archive/version", b"3\n"),
        e("archive/data/0", &[0; 16]),
    ])
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// A legacy `torch.save` stream holding `object`, then storage bytes.
fn legacy(object: &[u8]) -> Vec<u8> {
    let mut out = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.".to_vec();
    out.extend_from_slice(b"\x80\x02M\xe9\x03.");
    out.extend_from_slice(b"\x80\x02}q\x00.");
    out.extend_from_slice(object);
    out.extend_from_slice(b"\x80\x02]q\x00.");
    out.extend_from_slice(&[7; 24]);
    out
}

// ---- one crafted file per rule ---------------------------------------------

fn cases() -> Vec<(RuleId, Vec<u8>, Option<&'static str>)> {
    let mut c = Vec::new();
    c.push((RuleId::UnknownFormat, b"hello, world".to_vec(), None));
    c.push((RuleId::ExtensionMismatch, OS_SYSTEM.to_vec(), Some("model.safetensors")));
    let mut many = Vec::new();
    for _ in 0..MAX_FINDINGS_PER_RULE + 5 {
        many.extend_from_slice(b"cos\nsystem\n0");
    }
    many.extend_from_slice(b"N.");
    c.push((RuleId::FindingsCapped, many, None));

    let t = tensorizer();
    let mut v = t.clone();
    v[5] = 9;
    c.push((RuleId::TzrFileHeader, v, None));
    let mut v = t.clone();
    let index_end = 73 + u64::from_le_bytes(v[0x41..0x49].try_into().unwrap()) as usize;
    v[index_end - 1] = 1;
    c.push((RuleId::TzrIndex, v, None));
    c.push((RuleId::TzrTruncated, t[..t.len() - 12].to_vec(), None));
    let mut v = t.clone();
    let at = v.windows(4).rposition(|w| w == b"bias").unwrap();
    v[at] = b'B';
    c.push((RuleId::TzrTensorHeader, v, None));

    let s = safetensors();
    let mut v = s.clone();
    v[..8].copy_from_slice(&(crate::layout::MAX_SAFETENSORS_HEADER + 1).to_le_bytes());
    c.push((RuleId::StHeaderLimit, v, None));
    let swap = |from: &str, to: &str| {
        assert_eq!(from.len(), to.len());
        let mut v = s.clone();
        let at = v.windows(from.len()).position(|w| w == from.as_bytes()).unwrap();
        v[at..at + to.len()].copy_from_slice(to.as_bytes());
        v
    };
    c.push((RuleId::StHeaderJson, swap("\"format\":", "\"format\";"), None));
    c.push((RuleId::StEntry, swap("\"shape\":[2]", "\"shape\":\"2\""), None));
    c.push((RuleId::StUnknownDtype, swap("F32", "F31"), None));
    c.push((RuleId::StSizeMismatch, swap("[2]", "[3]"), None));
    c.push((RuleId::StPastEnd, swap("[0,8]", "[0,9]"), None));
    c.push((RuleId::StReversed, swap("[0,8]", "[8,0]"), None));
    c.push((RuleId::StGap, swap("[2],\"data_offsets\":[0,8]", "[1],\"data_offsets\":[4,8]"), None));
    let mut v = s.clone();
    v.extend_from_slice(b"payload");
    c.push((RuleId::StTrailing, v, None));
    c.push((
        RuleId::StMisaligned,
        swap(
            "F32\",\"shape\":[2],\"data_offsets\":[0,8]",
            "U16\",\"shape\":[3],\"data_offsets\":[1,7]",
        ),
        None,
    ));
    c.push((RuleId::StMetadata, swap("\"pt\"", "[1] "), None));
    let json = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#;
    let json = std::format!("{json:<width$}", width = json.len().next_multiple_of(8));
    let mut v = (json.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(json.as_bytes());
    v.extend_from_slice(&[0; 4]);
    c.push((RuleId::StOverlap, v, None));
    let dup = json.replace("\"b\"", "\"a\"");
    let mut v = (dup.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(dup.as_bytes());
    v.extend_from_slice(&[0; 4]);
    c.push((RuleId::StDuplicate, v, None));

    let (z, offsets) = torch_zip();
    c.push((RuleId::ZipStructure, z[..z.len() - 22].to_vec(), None));
    c.push((
        RuleId::ZipDuplicate,
        zip(&[e("archive/data.pkl", STATE_DICT), e("archive/data.pkl", STATE_DICT)]).0,
        None,
    ));
    let mut v = z.clone();
    put32(&mut v, offsets[1].1 + 42, offsets[0].0 as u32);
    c.push((RuleId::ZipOverlap, v, None));
    let mut v = z.clone();
    put32(&mut v, offsets[2].1 + 20, 1 << 20);
    put32(&mut v, offsets[2].1 + 24, 1 << 20);
    c.push((RuleId::ZipPastEnd, v, None));
    let mut v = z.clone();
    put32(&mut v, offsets[1].1 + 24, 3);
    c.push((RuleId::ZipHeaderMismatch, v, None));
    let compressed = |flags, method| {
        zip(&[
            e("archive/data.pkl", STATE_DICT),
            ZipEntry { name: "archive/version", data: b"3\n", flags, method },
        ])
        .0
    };
    c.push((RuleId::ZipCompressed, compressed(0, 8), None));
    c.push((RuleId::ZipEncrypted, compressed(1, 0), None));
    let mut v = z.clone();
    v.extend_from_slice(b"appended");
    c.push((RuleId::ZipOutside, v, None));
    let mut v = z.clone();
    v.extend_from_slice(&z[z.len() - 22..]);
    c.push((RuleId::ZipTwoEnds, v, None));
    c.push((RuleId::ZipNoPickle, zip(&[e("readme.txt", b"hi")]).0, None));

    c.push((RuleId::PklGlobal, OS_SYSTEM.to_vec(), None));
    c.push((RuleId::PklCall, legacy(OS_SYSTEM), None));
    c.push((RuleId::PklMalformed, b"\x80\x02K\x01".to_vec(), None));
    let mut v = STATE_DICT.to_vec();
    v.extend_from_slice(b"tail");
    c.push((RuleId::PklTrailing, v, None));
    c.push((
        RuleId::PklComputedGlobal,
        b"\x80\x04\x8c\x0bcollections\x8c\x0bOrderedDict\x93)R\x8c\x06system\x93.".to_vec(),
        None,
    ));
    c.push((RuleId::IdxMalformed, b"{\"weight_map\": 5}".to_vec(), Some("m.index.json")));
    c.push((
        RuleId::IdxPathEscape,
        b"{\"weight_map\": {\"w\": \"../../x.bin\"}}".to_vec(),
        Some("pytorch_model.bin.index.json"),
    ));
    {
        use crate::gguf::tests::{gguf, gstr};
        c.push((RuleId::GgufHeader, b"GGUF\x01\0\0\0".to_vec(), Some("m.gguf")));
        let t = |dims: &'static [u64], ty, off| [("t", dims, ty, off)];
        c.push((RuleId::GgufTensorType, gguf(&[], &t(&[3], 8, 0), &[]), None));
        c.push((RuleId::GgufPastEnd, gguf(&[], &t(&[8], 0, 0), &[0; 31]), None));
        c.push((RuleId::GgufMisaligned, gguf(&[], &t(&[1], 0, 4), &[0; 8]), None));
        let two = [("a", &[8u64][..], 0, 0), ("b", &[8u64][..], 0, 0)];
        c.push((RuleId::GgufOverlap, gguf(&[], &two, &[0; 32]), None));
        let evil = gstr("{{ cycler.__init__.__globals__.os.popen('id').read() }}");
        c.push((
            RuleId::GgufChatTemplate,
            gguf(&[("tokenizer.chat_template", 8, evil)], &[], &[]),
            None,
        ));
    }
    c.push((RuleId::PklInert, b"\x80\x02cargparse\nNamespace\n)\x81}b.".to_vec(), None));
    c.push((
        RuleId::PklNotScanned,
        zip(&[ZipEntry { name: "archive/data.pkl", data: STATE_DICT, flags: 0, method: 8 }]).0,
        None,
    ));
    c
}

#[test]
fn every_rule_has_a_crafted_file_that_triggers_it() {
    let mut covered = BTreeSet::new();
    for (rule, bytes, name) in cases() {
        let found = rules_of(&bytes, name);
        assert!(found.contains(&rule), "{rule}: found {:?}", run(&bytes, name).findings);
        covered.insert(rule);
    }
    // A limit lowered through the options (the defaults take a 1 GiB index).
    let options = ScanOptions {
        limits: ParseLimits { max_tensors: 1, ..ParseLimits::default() },
        ..Default::default()
    };
    let s = scan(&mut SliceSource::new(&tensorizer()), &options).unwrap();
    assert_eq!(s.findings[0].rule, RuleId::TzrLimit, "{:?}", s.findings);
    assert_eq!(s.findings[0].offset, Some(crate::layout::TENSOR_COUNT_OFFSET));
    covered.insert(RuleId::TzrLimit);
    // Hash and authentication failures come from the host's streaming
    // verifier (`--verify`); their rules are chosen by `rule_for_error`.
    assert_eq!(rule_for_error(&Error::Decryption), RuleId::TzrAuthFailed);
    let mismatch = Error::HashMismatch {
        tensor: "t".into(),
        kind: crate::HashKind::Crc32,
        expected: "1".into(),
        actual: "2".into(),
    };
    assert_eq!(rule_for_error(&mismatch), RuleId::TzrHashMismatch);
    assert_eq!(rule_for_error(&Error::Encryption { reason: "x" }), RuleId::TzrEncryption);
    covered.extend([RuleId::TzrHashMismatch, RuleId::TzrAuthFailed, RuleId::TzrEncryption]);
    // A shard index's shards are compared with what the host found beside
    // it; the size limit is `shards`' own test.
    let index = super::shards::parse(
        b"{\"weight_map\": {\"w\": \"a\", \"v\": \"b\"}}",
        &mut Findings::default(),
    );
    let found =
        BTreeMap::from([("b".into(), super::shards::Shard::Present(Some(BTreeSet::new())))]);
    let checked = super::shards::check(&index.unwrap(), &found, &["c".into()]);
    covered.extend(checked.iter().map(|f| f.rule));
    covered.insert(RuleId::IdxLimit);
    // An unused suppression entry is a note about the suppression file.
    let entry = super::suppress::Suppression::new("PKL-001", "*", "reviewed").unwrap();
    covered.extend(super::suppress::unused(&[entry], &[0]).iter().map(|f| f.rule));
    let all: BTreeSet<RuleId> = RULES.iter().map(|r| r.id).collect();
    assert_eq!(covered, all);
}

#[test]
fn clean_files_of_every_format_have_no_findings() {
    let clean: Vec<(&str, Vec<u8>, Format)> = vec![
        ("built.tensors", tensorizer(), Format::Tensorizer),
        ("built.safetensors", safetensors(), Format::Safetensors),
        ("built.pt", torch_zip().0, Format::TorchZip),
        ("built.pkl", STATE_DICT.to_vec(), Format::Pickle),
        ("built-legacy.pt", legacy(STATE_DICT), Format::TorchLegacy),
    ];
    for (name, bytes, format) in clean {
        let s = run(&bytes, Some(name));
        assert_eq!(s.format, format, "{name}");
        assert!(s.findings.is_empty(), "{name}: {:?}", s.findings);
    }
}

#[test]
fn real_files_scan_as_expected() {
    let manifest: serde_json::Value = serde_json::from_slice(&vector("manifest.json")).unwrap();
    let files: Vec<String> = manifest["vectors"]
        .as_array()
        .map(|v| v.iter().filter_map(|x| x["file"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    assert!(files.len() >= 10, "{manifest}");
    for f in &files {
        let s = run(&vector(f), Some(f));
        assert_eq!(s.format, Format::Tensorizer);
        assert!(s.findings.is_empty(), "{f}: {:?}", s.findings);
        assert!(s.tensors > 0 || f.contains("empty"), "{f}");
    }
    for f in [
        "dtypes.pt",
        "nested.pt",
        "views.pt",
        "module.pt",
        "params.pt",
        "big_endian.pt",
        "hostile_legacy.pt",
    ] {
        let s = run(&vector(&std::format!("torch/{f}")), Some(f));
        assert!(s.findings.is_empty(), "{f}: {:?}", s.findings);
        assert!(s.tensors > 0, "{f}");
    }
    let s = run(&vector("torch/hostile_os_system.pt"), None);
    let names: Vec<&str> = s.findings.iter().map(|f| f.message.as_str()).collect();
    assert!(names.iter().any(|m| m.contains("posix.system")), "{names:?}");
    assert!(s.findings.iter().any(|f| f.rule == RuleId::PklCall));
    let s = run(&vector("torch/hostile_module.pt"), None);
    // A whole nn.Module: refused by weights_only, but rebuilding it runs
    // only torch's code, a warning.
    assert!(
        s.findings
            .iter()
            .any(|f| f.rule == RuleId::PklInert && f.message.contains("torch.nn.modules"))
    );
    assert!(s.findings.iter().all(|f| f.severity != Severity::Error), "{:?}", s.findings);
    let s = run(&vector("torch/hostile_deflated.pt"), None);
    let rules: BTreeSet<RuleId> = s.findings.iter().map(|f| f.rule).collect();
    // A benign state dict, deflated: inflated and scanned, only ZIP-006.
    assert_eq!(rules, [RuleId::ZipCompressed].into());
    assert!(s.tensors > 0);
}

#[test]
fn findings_are_sorted_capped_and_carry_remediation() {
    let (_, bytes, _) = cases().into_iter().find(|c| c.0 == RuleId::FindingsCapped).unwrap();
    let s = run(&bytes, None);
    let globals = s.findings.iter().filter(|f| f.rule == RuleId::PklGlobal).count() as u64;
    assert_eq!(globals, MAX_FINDINGS_PER_RULE);
    let last = s.findings.last().unwrap();
    assert_eq!(last.rule, RuleId::FindingsCapped);
    assert!(last.message.starts_with("5 more PKL-001"), "{}", last.message);
    let sorted: Vec<_> =
        s.findings[..s.findings.len() - 1].iter().map(|f| (f.offset, f.rule)).collect();
    let mut want = sorted.clone();
    want.sort();
    assert_eq!(sorted, want);
    assert!(s.findings.iter().all(|f| f.remediation == f.rule.remediation()));
    // Deterministic: the same bytes give the same findings.
    assert_eq!(run(&bytes, None).findings, s.findings);
}

/// A torch zip whose `data.pkl` is `pickle` deflated, declaring
/// `declared` inflated bytes.
fn deflated_zip(pickle: &[u8], declared: u32) -> Vec<u8> {
    let packed = miniz_oxide::deflate::compress_to_vec(pickle, 6);
    let (mut v, offsets) =
        zip(&[ZipEntry { name: "archive/data.pkl", data: &packed, flags: 0, method: 8 }]);
    put32(&mut v, offsets[0].0 + 22, declared);
    put32(&mut v, offsets[0].1 + 24, declared);
    v
}

#[test]
fn a_deflated_pickle_is_inflated_and_scanned_within_the_limits() {
    let s = run(&deflated_zip(OS_SYSTEM, OS_SYSTEM.len() as u32), None);
    let rules: BTreeSet<RuleId> = s.findings.iter().map(|f| f.rule).collect();
    assert!(
        rules.contains(&RuleId::ZipCompressed) && rules.contains(&RuleId::PklGlobal),
        "{:?}",
        s.findings
    );
    assert!(!rules.contains(&RuleId::PklNotScanned), "{:?}", s.findings);
    let g = s.findings.iter().find(|f| f.rule == RuleId::PklGlobal).unwrap();
    assert!(g.message.contains("of the inflated entry"), "{}", g.message);
    // A size that lies, either way, or beyond DEFLATE's ratio: not inflated.
    for declared in [OS_SYSTEM.len() as u32 - 1, OS_SYSTEM.len() as u32 + 1, 1 << 30] {
        let s = run(&deflated_zip(OS_SYSTEM, declared), None);
        assert!(
            s.findings.iter().any(|f| f.rule == RuleId::PklNotScanned),
            "{declared}: {:?}",
            s.findings
        );
    }
}

#[test]
fn one_truncation_is_one_finding_with_a_count() {
    // Three tensors of 4 bytes, the file cut after the first: the two past
    // the end are one ST-006 with a count of 2.
    let json = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},"c":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}"#;
    let json = std::format!("{json:<width$}", width = json.len().next_multiple_of(8));
    let mut v = (json.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(json.as_bytes());
    v.extend_from_slice(&[0; 4]);
    let s = run(&v, None);
    let past: Vec<&Finding> = s.findings.iter().filter(|f| f.rule == RuleId::StPastEnd).collect();
    assert_eq!(past.len(), 1, "{:?}", s.findings);
    assert_eq!(past[0].count, 2);
    assert!(past[0].message.ends_with("(and 1 more of the same cause)"), "{}", past[0].message);
    assert!(s.findings.iter().filter(|f| f.rule != RuleId::StPastEnd).all(|f| f.count == 1));
}

#[test]
fn a_pickle_behind_an_extension_or_garbage_never_passes() {
    // A protocol 0 pickle has no magic: found by walking it.
    let s = run(b"cos\nsystem\n(S'echo hi'\ntR.", Some("model.safetensors"));
    assert_eq!(s.format, Format::Pickle);
    let rules: BTreeSet<RuleId> = s.findings.iter().map(|f| f.rule).collect();
    assert!(
        rules.is_superset(&[RuleId::PklGlobal, RuleId::PklCall, RuleId::ExtensionMismatch].into())
    );
    // A ZIP behind prepended bytes is found by its end record.
    let mut v = b"junk".to_vec();
    v.extend_from_slice(&torch_zip().0);
    let s = run(&v, None);
    assert_eq!(s.format, Format::TorchZip);
    assert!(
        s.findings
            .iter()
            .any(|f| f.rule == RuleId::ZipOutside || f.rule == RuleId::ZipHeaderMismatch)
    );
    assert!(run(b"", None).findings.iter().any(|f| f.rule == RuleId::UnknownFormat));
}

#[test]
fn random_bytes_and_cuts_never_panic() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let originals =
        [tensorizer(), safetensors(), torch_zip().0, legacy(OS_SYSTEM), vector("torch/params.pt")];
    for original in &originals {
        for _ in 0..300 {
            let mut bytes = original.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
            }
            if next() % 3 == 0 {
                bytes.truncate((next() % bytes.len() as u64) as usize);
            }
            let s = run(&bytes, Some("x.pt"));
            for f in &s.findings {
                assert!(
                    f.offset.is_none_or(|o| o <= bytes.len() as u64 + 8),
                    "{f:?} in {} bytes",
                    bytes.len()
                );
            }
        }
    }
}

/// The scan of a 20,000-tensor file's index and headers (issue 27 asks
/// for at most 50 ms natively; measured in release, printed with
/// `--nocapture`). Only a generous sanity bound is asserted.
#[test]
fn a_20000_tensor_index_scans_quickly() {
    let n = 20_000;
    let names: Vec<String> =
        (0..n).map(|i| std::format!("model.layers.{}.mlp.w{}", i / 8, i % 8)).collect();
    let specs: Vec<TensorSpec> = names
        .iter()
        .map(|name| {
            TensorSpec::state_dict(name.as_str(), Dtype::from_element(ElementType::F32), vec![2, 2])
        })
        .collect();
    let data = [0u8; 16];
    let datas: Vec<&[u8]> = (0..n).map(|_| &data[..]).collect();
    let options = WriterOptions::default();
    let bytes = write::to_vec(&specs, &datas, &options, None, || [0; 24]).unwrap();
    let started = std::time::Instant::now();
    let s = run(&bytes, Some("big.tensors"));
    let took = started.elapsed();
    std::println!("scanned {n} tensors ({} bytes) in {took:?}", bytes.len());
    assert_eq!(s.tensors, n as u64);
    assert!(s.findings.is_empty(), "{:?}", s.findings.first());
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}
