//! GGUF files, header only ([`crate::gguf`]): a header that does not
//! parse, tensor data past the end of the file, overlapping or misaligned
//! tensors, types and shapes ggml cannot size, and a Jinja chat template
//! whose code reaches for Python internals (the known template-injection
//! escapes from Jinja's sandbox).

use alloc::format;
use alloc::vec::Vec;

use super::{Finding, Findings, RuleId, error_offset, shown};
use crate::error::Result;
use crate::gguf::{self, Header, Value, ggml_type};
use crate::source::RandomAccess;

/// Patterns in a chat template's Jinja code that only a template reaching
/// for Python's object model or the operating system uses: attribute
/// walks out of Jinja's sandbox, and what they are after.
const CODE_PATTERNS: &[&str] = &[
    "__class__",
    "__globals__",
    "__subclasses__",
    "__builtins__",
    "__import__",
    "__mro__",
    "__base__",
    "__init__",
    "__getattribute__",
    "import",
    "os.",
    "popen",
    "subprocess",
    "eval",
    "exec",
    "system",
];

/// Scans the GGUF file in `src`; the parsed header when it parsed.
pub fn scan<R: RandomAccess + ?Sized>(
    src: &mut R,
    findings: &mut Findings,
) -> Result<Option<Header>> {
    let header = match gguf::read(src) {
        Ok(h) => h,
        Err(e) if super::is_scan_failure(&e) => return Err(e),
        Err(e) => {
            findings.push(Finding::new(RuleId::GgufHeader, error_offset(&e), format!("{e}")));
            return Ok(None);
        }
    };
    check_tensors(&header, src.len(), findings);
    for kv in header.kvs.iter().filter(|kv| kv.key.ends_with("chat_template")) {
        if let Value::Str(template) = &kv.value {
            check_template(&kv.key, template, kv.value_offset, findings);
        }
    }
    Ok(Some(header))
}

/// Each tensor's type and size, its alignment, its range against the
/// file, and overlaps between ranges.
fn check_tensors(h: &Header, file_len: u64, findings: &mut Findings) {
    let mut ranges: Vec<(u64, u64, usize)> = Vec::new();
    for (i, t) in h.tensors.iter().enumerate() {
        let at = Some(t.info_offset);
        let Some(n) = t.nbytes() else {
            let why = match ggml_type(t.ggml_type) {
                None => format!("ggml type {} is not one ggml defines", t.ggml_type),
                Some(ty) => format!(
                    "shape {:?} does not fit {} blocks, or its size overflows",
                    t.dims, ty.name
                ),
            };
            findings.push_lazy(RuleId::GgufTensorType, || {
                Finding::new(RuleId::GgufTensorType, at, why).in_tensor(&t.name)
            });
            continue;
        };
        if !t.offset.is_multiple_of(h.alignment) {
            let why = format!(
                "data offset {} is not a multiple of the alignment {}",
                t.offset, h.alignment
            );
            findings.push_lazy(RuleId::GgufMisaligned, || {
                Finding::new(RuleId::GgufMisaligned, at, why).in_tensor(&t.name)
            });
        }
        let start = h.data_start.checked_add(t.offset);
        match start.and_then(|s| s.checked_add(n)) {
            Some(end) if end <= file_len => ranges.push((start.unwrap_or(0), end, i)),
            _ => {
                let why = format!(
                    "{n} bytes at data offset {} end past the end of the {file_len}-byte file",
                    t.offset
                );
                findings.push_lazy(RuleId::GgufPastEnd, || {
                    Finding::new(RuleId::GgufPastEnd, at, why).in_tensor(&t.name)
                });
            }
        }
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
        if start < end {
            let (a, b) = (&h.tensors[a], &h.tensors[b]);
            let why = format!("its data overlaps {}'s", shown(&a.name));
            findings.push_lazy(RuleId::GgufOverlap, || {
                Finding::new(RuleId::GgufOverlap, Some(b.info_offset), why).in_tensor(&b.name)
            });
        }
    }
}

/// One finding per code-execution pattern in the Jinja code (inside
/// `{{ }}` and `{% %}`) of the template `key` holds at `offset`.
fn check_template(key: &str, template: &str, offset: u64, findings: &mut Findings) {
    let mut seen = Vec::new();
    for (start, code) in jinja_code(template) {
        for pattern in CODE_PATTERNS {
            if seen.contains(pattern) {
                continue;
            }
            if let Some(at) = find_word(code, pattern) {
                seen.push(*pattern);
                let why = format!(
                    "{key}: Jinja code uses {pattern:?}, a way out of the template sandbox"
                );
                let at = offset.saturating_add((start + at) as u64);
                findings.push(
                    Finding::new(RuleId::GgufChatTemplate, Some(at), why)
                        .spanning(pattern.len() as u64),
                );
            }
        }
    }
}

/// The code spans of a Jinja template (`{{ ... }}`, `{% ... %}`), each
/// with its byte position; an unterminated span runs to the end.
fn jinja_code(template: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut rest = 0;
    while let Some(open) = find_open(&template[rest..]) {
        let start = rest + open + 2;
        let close = if template[rest + open..].starts_with("{{") { "}}" } else { "%}" };
        let end = template[start..].find(close).map_or(template.len(), |e| start + e);
        out.push((start, &template[start..end]));
        rest = (end + 2).min(template.len());
    }
    out
}

fn find_open(s: &str) -> Option<usize> {
    match (s.find("{{"), s.find("{%")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Where `word` appears in `code` not inside a longer identifier (a
/// pattern ending in `.` or starting with `_` matches at its own edge).
fn find_word(code: &str, word: &str) -> Option<usize> {
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = code.as_bytes();
    code.match_indices(word).map(|(i, _)| i).find(|&i| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + word.len()).copied();
        let open_start = word.starts_with('_') || !before.is_some_and(ident);
        let open_end = word.ends_with(['.', '_']) || !after.is_some_and(ident);
        open_start && open_end
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::tests::{gguf, gstr};
    use crate::scan::{Format, ScanOptions, scan as scan_file};
    use crate::source::SliceSource;

    fn rules(bytes: &[u8]) -> Vec<RuleId> {
        let s = scan_file(&mut SliceSource::new(bytes), &ScanOptions::default()).unwrap();
        assert_eq!(s.format, Format::Gguf);
        s.findings.iter().map(|f| f.rule).collect()
    }

    const CLEAN_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim }}{% if loop.last %}important: {{ system_message }}{% endif %}{% endfor %}";

    #[test]
    fn a_clean_file_has_no_findings() {
        let kvs = [("tokenizer.chat_template", 8, gstr(CLEAN_TEMPLATE))];
        let tensors: [(&str, &[u64], u32, u64); 2] = [("a", &[8], 0, 0), ("b", &[32], 8, 32)];
        assert_eq!(rules(&gguf(&kvs, &tensors, &[0; 32 + 34])), []);
        let f = gguf(&kvs, &tensors, &[0; 32 + 34]);
        let named = ScanOptions { name: Some("model.safetensors"), ..ScanOptions::default() };
        let s = scan_file(&mut SliceSource::new(&f), &named).unwrap();
        assert_eq!(
            s.findings.iter().map(|f| f.rule).collect::<Vec<_>>(),
            [RuleId::ExtensionMismatch]
        );
    }

    #[test]
    fn structural_lies_are_findings() {
        let tensors: [(&str, &[u64], u32, u64); 5] = [
            ("a", &[16], 0, 0),
            ("over", &[8], 0, 32),
            ("odd", &[1], 0, 72),
            ("past", &[1024], 0, 96),
            ("bad", &[33], 8, 0),
        ];
        let found = rules(&gguf(&[], &tensors, &[0; 128]));
        assert_eq!(
            found,
            [
                RuleId::GgufOverlap,
                RuleId::GgufMisaligned,
                RuleId::GgufPastEnd,
                RuleId::GgufTensorType
            ]
        );
        let f = gguf(&[("k", 8, gstr("value"))], &[], &[]);
        assert_eq!(rules(&f[..40]), [RuleId::GgufHeader]);
    }

    #[test]
    fn a_chat_template_reaching_for_python_is_a_finding() {
        let evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}{% set x = cycler.__init__.__globals__.os.popen('id').read() %}";
        let f = gguf(&[("tokenizer.chat_template", 8, gstr(evil))], &[], &[]);
        let s = scan_file(&mut SliceSource::new(&f), &ScanOptions::default()).unwrap();
        let messages: Vec<&str> = s.findings.iter().map(|f| f.message.as_str()).collect();
        for p in
            ["__class__", "__mro__", "__subclasses__", "__init__", "__globals__", "os.", "popen"]
        {
            assert!(messages.iter().any(|m| m.contains(&format!("{p:?}"))), "{p}: {messages:?}");
        }
        assert!(
            s.findings.iter().all(|f| f.rule == RuleId::GgufChatTemplate && f.rule.executes_code())
        );
        let at = s.findings[0].offset.unwrap() as usize;
        assert_eq!(&f[at..at + 9], b"__class__");
        // Outside the code spans, and inside longer words, nothing.
        let text = "import os. {{ important + system_prompt + cos.x }} popen";
        assert_eq!(rules(&gguf(&[("tokenizer.chat_template", 8, gstr(text))], &[], &[])), []);
    }
}
