//! Pickle scanning: walks every opcode of protocols 0 to 5 without
//! executing anything, and reports every global that is not on the
//! state-dict allow-list ([`crate::checkpoint::Global`]) and every call of a
//! callable that is not on it. Unlike [`crate::checkpoint::Pickle`], which
//! refuses a pickle at its first unknown global, the scanner goes on to the
//! end, so every global is listed.
//!
//! Values are tracked only as far as the findings need: strings (for
//! `STACK_GLOBAL`), globals and the objects calls return (so a `BUILD` or
//! a call of an object a forbidden callable made is named after it), and
//! "anything else". Memory is bounded by the pickle limits of
//! [`crate::layout`].

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::allow::Inert;
use super::{Finding, Findings, RuleId, read_vec, shown};
use crate::checkpoint::Global;
use crate::error::{Error, Result};
use crate::layout::{
    MAX_PICKLE_CONTAINER_LEN, MAX_PICKLE_DEPTH, MAX_PICKLE_GLOBAL_NAME, MAX_PICKLE_GUESS_LEN,
    MAX_PICKLE_LEN, MAX_PICKLE_MEMO, MAX_PICKLE_OPCODES, MAX_PICKLE_VALUE_BYTES,
    MAX_PICKLES_PER_STREAM,
};
use crate::source::RandomAccess;

/// Where a callable (or an object a call returned) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Callee {
    /// Index into the walk's names (`module.name`).
    name: u32,
    /// Whether the global is on the allow-list.
    allowed: bool,
    /// Whether it is a tensor rebuild function (counted as a tensor).
    rebuilds_tensor: bool,
    /// How a global that is not allowed may still be used without running
    /// code outside its library.
    inert: Inert,
}

/// A value on the scanner's stack.
#[derive(Debug, Clone, PartialEq, Eq)]
enum V {
    /// A str (cut at [`MAX_PICKLE_GLOBAL_NAME`] bytes; `true` when cut).
    Str(String, bool),
    /// A global, not yet called.
    Callable(Callee),
    /// What calling (or instantiating) a callable returned.
    Object(Callee),
    /// Anything else.
    Other,
}

/// What walking one pickle gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Walk {
    /// Offset right after the `STOP` opcode, relative to the bytes walked;
    /// `None` when the walk stopped early (malformed or out of bytes).
    pub end: Option<usize>,
    /// Whether the walk ran out of bytes (rather than meeting a malformed
    /// opcode): more bytes might let it go on.
    pub out_of_bytes: bool,
    /// Tensor rebuild calls.
    pub tensors: u64,
    /// Globals and calls reported.
    pub suspicious: u64,
    /// Opcodes walked.
    pub opcodes: u64,
}

struct Scanner<'a, 'f> {
    bytes: &'a [u8],
    pos: usize,
    base: u64,
    stack: Vec<V>,
    marks: Vec<usize>,
    memo: BTreeMap<u64, V>,
    names: Vec<String>,
    by_name: BTreeMap<String, u32>,
    held: u64,
    walk: Walk,
    findings: &'f mut Findings,
    context: &'a str,
}

/// Why a walk stopped early.
enum Stop {
    /// Malformed: the message.
    Malformed(u64, String),
    /// The bytes ended.
    OutOfBytes(u64),
    /// A limit: which.
    Limit(u64, &'static str),
}

type Step<T> = core::result::Result<T, Stop>;

/// Walks one pickle starting at `bytes[0]` (absolute offset `base`),
/// adding findings. `context` (an archive entry name, or empty) prefixes
/// messages. `complete` says whether `bytes` runs to the end of the stream
/// (when not, running out of bytes is left for the caller to retry).
pub fn walk(
    bytes: &[u8],
    base: u64,
    context: &str,
    complete: bool,
    findings: &mut Findings,
) -> Walk {
    let mut s = Scanner {
        bytes,
        pos: 0,
        base,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: BTreeMap::new(),
        names: Vec::new(),
        by_name: BTreeMap::new(),
        held: 0,
        walk: Walk::default(),
        findings,
        context,
    };
    match s.run() {
        Ok(end) => s.walk.end = Some(end),
        Err(Stop::OutOfBytes(_)) if !complete => s.walk.out_of_bytes = true,
        Err(Stop::OutOfBytes(at)) => {
            let msg = s.msg("the pickle ends without a STOP opcode");
            s.findings.push(Finding::new(RuleId::PklMalformed, Some(at), msg));
            s.walk.out_of_bytes = true;
        }
        Err(Stop::Malformed(at, why)) => {
            let msg = s.msg(&why);
            s.findings.push(Finding::new(RuleId::PklMalformed, Some(at), msg));
        }
        Err(Stop::Limit(at, what)) => {
            let msg =
                s.msg(&format!("{what} is above the scanner's limit; the rest was not scanned"));
            s.findings.push(Finding::new(RuleId::PklNotScanned, Some(at), msg));
        }
    }
    s.walk
}

impl<'a> Scanner<'a, '_> {
    fn msg(&self, m: &str) -> String {
        if self.context.is_empty() { m.into() } else { format!("{}: {m}", shown(self.context)) }
    }

    fn at(&self) -> u64 {
        self.base.saturating_add(self.pos as u64)
    }

    fn take(&mut self, n: u64) -> Step<&'a [u8]> {
        let at = self.at();
        let n = usize::try_from(n).map_err(|_| Stop::OutOfBytes(at))?;
        let end = self.pos.checked_add(n).ok_or(Stop::OutOfBytes(at))?;
        let bytes: &'a [u8] = self.bytes;
        let out = bytes.get(self.pos..end).ok_or(Stop::OutOfBytes(at))?;
        self.pos = end;
        Ok(out)
    }

    fn uint<const N: usize>(&mut self) -> Step<u64> {
        let b = self.take(N as u64)?;
        let mut buf = [0u8; 8];
        buf[..N].copy_from_slice(b);
        Ok(u64::from_le_bytes(buf))
    }

    fn line(&mut self) -> Step<&'a [u8]> {
        let at = self.at();
        let bytes: &'a [u8] = self.bytes;
        let rest = bytes.get(self.pos..).unwrap_or_default();
        let n = rest.iter().position(|&b| b == b'\n').ok_or(Stop::OutOfBytes(at))?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    fn charge(&mut self, at: u64, bytes: u64) -> Step<()> {
        self.held = self.held.saturating_add(bytes);
        if self.held > MAX_PICKLE_VALUE_BYTES {
            return Err(Stop::Limit(at, "the bytes of values held"));
        }
        Ok(())
    }

    fn push(&mut self, at: u64, v: V) -> Step<()> {
        if self.stack.len() as u64 >= MAX_PICKLE_CONTAINER_LEN {
            return Err(Stop::Limit(at, "the pickle stack length"));
        }
        let cost = 16 + if let V::Str(s, _) = &v { s.len() as u64 } else { 0 };
        self.charge(at, cost)?;
        self.stack.push(v);
        Ok(())
    }

    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self, at: u64) -> Step<V> {
        if self.stack.len() <= self.floor() {
            return Err(Stop::Malformed(at, "stack underflow (a pop below the last MARK)".into()));
        }
        self.stack.pop().ok_or(Stop::Malformed(at, "stack underflow".into()))
    }

    fn top(&self, at: u64) -> Step<&V> {
        match self.stack.last() {
            Some(v) if self.stack.len() > self.floor() => Ok(v),
            _ => Err(Stop::Malformed(at, "stack underflow (no value under the opcode)".into())),
        }
    }

    fn pop_mark(&mut self, at: u64) -> Step<Vec<V>> {
        let mark = self.marks.pop().ok_or(Stop::Malformed(at, "no MARK to pop to".into()))?;
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    /// Registers `module.name` and reports it when it is not allowed.
    fn global(&mut self, at: u64, module: &[u8], name: &[u8], cut: bool) -> Step<Callee> {
        let resolved = Global::resolve(at, module, name);
        let allowed = !cut
            && (super::allow::weights_only(module, name)
                || !matches!(
                    resolved,
                    Err(Error::ForbiddenGlobal { .. }) | Err(Error::Malformed { .. })
                ));
        let rebuilds_tensor =
            matches!(resolved, Ok(Global::RebuildTensorV2 | Global::RebuildTensorV3));
        let full = format!("{}.{}", lossy(module), lossy(name));
        let id = self.name_id(at, full)?;
        let inert = if allowed || cut { Inert::No } else { super::allow::inert(module, name) };
        if inert != Inert::No {
            let m = self.msg(&format!(
                "global {} is refused by weights_only=True; rebuilding it runs only its own library's code",
                self.names[id as usize]
            ));
            self.findings.push(Finding::new(RuleId::PklInert, Some(at), m).spanning(1));
        } else if !allowed {
            self.walk.suspicious += 1;
            let m =
                self.msg(&format!("global {} is not on the allow-list", self.names[id as usize]));
            self.findings.push(Finding::new(RuleId::PklGlobal, Some(at), m).spanning(1));
        }
        Ok(Callee { name: id, allowed, rebuilds_tensor, inert })
    }

    /// STACK_GLOBAL on operands that are not literal strings: the name is
    /// whatever earlier opcodes computed, known only when a loader runs them.
    fn computed_global(&mut self, at: u64, module: &V, name: &V) -> Step<Callee> {
        let part = |v: &V| match v {
            V::Str(s, _) => format!("{s:?}"),
            V::Callable(c) | V::Object(c) => {
                format!("a value made from {}", self.names[c.name as usize])
            }
            V::Other => "a value made at load time".into(),
        };
        let (m, n) = (part(module), part(name));
        let id = self.name_id(at, String::from("<computed global>"))?;
        self.walk.suspicious += 1;
        let text = self.msg(&format!("global name computed at load time (module: {m}; name: {n})"));
        self.findings.push(Finding::new(RuleId::PklComputedGlobal, Some(at), text).spanning(1));
        Ok(Callee { name: id, allowed: false, rebuilds_tensor: false, inert: Inert::No })
    }

    fn name_id(&mut self, at: u64, full: String) -> Step<u32> {
        if let Some(&id) = self.by_name.get(&full) {
            return Ok(id);
        }
        self.charge(at, 2 * full.len() as u64 + 64)?;
        let id = self.names.len() as u32;
        self.names.push(full.clone());
        self.by_name.insert(full, id);
        Ok(id)
    }

    /// A call (REDUCE, NEWOBJ, INST, OBJ) of `callable`: its result.
    fn call(&mut self, at: u64, op: &str, callable: &V) -> V {
        match callable {
            V::Callable(c) if inert_use(c.inert, op) => V::Object(Callee { allowed: true, ..*c }),
            V::Callable(c) | V::Object(c) => {
                let what = if matches!(callable, V::Object(_)) { "an object made by " } else { "" };
                if !c.allowed {
                    self.walk.suspicious += 1;
                    let m = self.msg(&format!("{op} calls {what}{}", self.names[c.name as usize]));
                    self.findings.push(Finding::new(RuleId::PklCall, Some(at), m).spanning(1));
                } else if c.rebuilds_tensor && matches!(callable, V::Callable(_)) {
                    self.walk.tensors += 1;
                }
                V::Object(*c)
            }
            _ => V::Other,
        }
    }

    /// BUILD (`__setstate__` or attribute updates) on `target`.
    fn build(&mut self, at: u64, target: &V) {
        let (c, what) = match target {
            V::Object(c) if !c.allowed => (c, "an object made by "),
            V::Callable(c) => (c, "the class or function "),
            _ => return,
        };
        self.walk.suspicious += 1;
        let m = self.msg(&format!("BUILD sets the state of {what}{}", self.names[c.name as usize]));
        self.findings.push(Finding::new(RuleId::PklCall, Some(at), m).spanning(1));
    }

    fn string(&mut self, at: u64, bytes: &[u8]) -> Step<()> {
        let s = lossy(bytes);
        let cut = bytes.len() > MAX_PICKLE_GLOBAL_NAME;
        self.push(at, V::Str(s, cut))
    }

    fn memo_put(&mut self, at: u64, key: u64) -> Step<()> {
        let v = self.top(at)?.clone();
        if !self.memo.contains_key(&key) && self.memo.len() as u64 >= MAX_PICKLE_MEMO {
            return Err(Stop::Limit(at, "the memo entry count"));
        }
        let cost = 32 + if let V::Str(s, _) = &v { s.len() as u64 } else { 0 };
        self.charge(at, cost)?;
        self.memo.insert(key, v);
        Ok(())
    }

    fn memo_get(&mut self, at: u64, key: u64) -> Step<()> {
        let v = self
            .memo
            .get(&key)
            .cloned()
            .ok_or(Stop::Malformed(at, format!("memo key {key} is not defined")))?;
        self.push(at, v)
    }

    fn decimal(&mut self, at: u64) -> Step<u64> {
        let line = self.line()?;
        core::str::from_utf8(line)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .ok_or(Stop::Malformed(at, "a memo key is not a decimal number".into()))
    }

    fn run(&mut self) -> Step<usize> {
        loop {
            let at = self.at();
            self.walk.opcodes += 1;
            if self.walk.opcodes > MAX_PICKLE_OPCODES {
                return Err(Stop::Limit(at, "the opcode count"));
            }
            let op = self.take(1)?[0];
            match op {
                b'.' => {
                    self.pop(at)?;
                    return Ok(self.pos);
                }
                0x80 => {
                    let p = self.take(1)?[0];
                    if p > 5 {
                        return Err(Stop::Malformed(
                            at,
                            format!("pickle protocol {p} does not exist"),
                        ));
                    }
                }
                0x95 => {
                    self.uint::<8>()?;
                }
                b'(' => {
                    if self.marks.len() >= MAX_PICKLE_DEPTH {
                        return Err(Stop::Limit(at, "the MARK nesting depth"));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    // POP with nothing above the mark pops the mark.
                    if self.stack.len() <= self.floor() && !self.marks.is_empty() {
                        self.marks.pop();
                    } else {
                        self.pop(at)?;
                    }
                }
                b'1' => {
                    self.pop_mark(at)?;
                }
                b'2' => {
                    let v = self.top(at)?.clone();
                    self.push(at, v)?;
                }
                b'c' | b'i' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let cut = module.len() > MAX_PICKLE_GLOBAL_NAME
                        || name.len() > MAX_PICKLE_GLOBAL_NAME;
                    let (module, name) = (cut_to(module), cut_to(name));
                    let c = self.global(at, module, name, cut)?;
                    if op == b'c' {
                        self.push(at, V::Callable(c))?;
                    } else {
                        self.pop_mark(at)?;
                        let r = self.call(at, "INST", &V::Callable(c));
                        self.push(at, r)?;
                    }
                }
                0x93 => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    let c = match (&module, &name) {
                        (V::Str(m, cm), V::Str(n, cn)) => {
                            self.global(at, m.as_bytes(), n.as_bytes(), *cm || *cn)?
                        }
                        _ => self.computed_global(at, &module, &name)?,
                    };
                    self.push(at, V::Callable(c))?;
                }
                0x82..=0x84 => {
                    let code = match op {
                        0x82 => self.uint::<1>()?,
                        0x83 => self.uint::<2>()?,
                        _ => self.uint::<4>()?,
                    };
                    let id = self.name_id(at, format!("copyreg extension {code}"))?;
                    self.walk.suspicious += 1;
                    let m = self.msg(&format!(
                        "global copyreg extension code {code} (whatever copyreg's registry maps it to) is not on the allow-list"
                    ));
                    self.findings.push(Finding::new(RuleId::PklGlobal, Some(at), m).spanning(1));
                    self.push(
                        at,
                        V::Callable(Callee {
                            name: id,
                            allowed: false,
                            rebuilds_tensor: false,
                            inert: Inert::No,
                        }),
                    )?;
                }
                b'R' | 0x81 => {
                    let _args = self.pop(at)?;
                    let callable = self.pop(at)?;
                    let r = self.call(at, if op == b'R' { "REDUCE" } else { "NEWOBJ" }, &callable);
                    self.push(at, r)?;
                }
                0x92 => {
                    self.pop(at)?;
                    self.pop(at)?;
                    let cls = self.pop(at)?;
                    let r = self.call(at, "NEWOBJ_EX", &cls);
                    self.push(at, r)?;
                }
                b'o' => {
                    let items = self.pop_mark(at)?;
                    let cls = items
                        .first()
                        .cloned()
                        .ok_or(Stop::Malformed(at, "OBJ without a class".into()))?;
                    let r = self.call(at, "OBJ", &cls);
                    self.push(at, r)?;
                }
                b'b' => {
                    self.pop(at)?;
                    let target = self.top(at)?.clone();
                    self.build(at, &target);
                }
                b'P' => {
                    self.line()?;
                    self.push(at, V::Other)?;
                }
                b'Q' => {
                    self.pop(at)?;
                    self.push(at, V::Other)?;
                }
                b'p' => {
                    let k = self.decimal(at)?;
                    self.memo_put(at, k)?;
                }
                b'q' => {
                    let k = self.uint::<1>()?;
                    self.memo_put(at, k)?;
                }
                b'r' => {
                    let k = self.uint::<4>()?;
                    self.memo_put(at, k)?;
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    self.memo_put(at, k)?;
                }
                b'g' => {
                    let k = self.decimal(at)?;
                    self.memo_get(at, k)?;
                }
                b'h' => {
                    let k = self.uint::<1>()?;
                    self.memo_get(at, k)?;
                }
                b'j' => {
                    let k = self.uint::<4>()?;
                    self.memo_get(at, k)?;
                }
                b'S' => {
                    let line = self.line()?;
                    let s = unquote(line)
                        .ok_or(Stop::Malformed(at, "STRING is not a quoted string".into()))?;
                    self.string(at, &s)?;
                }
                b'V' => {
                    let line = self.line()?;
                    let s = raw_unicode_escape(line);
                    self.string(at, s.as_bytes())?;
                }
                b'X' | 0x8c | 0x8d | b'T' | b'U' => {
                    let n = match op {
                        0x8c | b'U' => self.uint::<1>()?,
                        0x8d => self.uint::<8>()?,
                        _ => self.uint::<4>()?,
                    };
                    let b = self.take(n)?;
                    let b = b.get(..MAX_PICKLE_GLOBAL_NAME + 1).unwrap_or(b);
                    self.string(at, b)?;
                }
                b'B' | b'C' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => self.uint::<1>()?,
                        b'B' => self.uint::<4>()?,
                        _ => self.uint::<8>()?,
                    };
                    self.take(n)?;
                    self.push(at, V::Other)?;
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a { self.uint::<1>()? } else { self.uint::<4>()? };
                    self.take(n)?;
                    self.push(at, V::Other)?;
                }
                b'I' | b'L' | b'F' => {
                    self.line()?;
                    self.push(at, V::Other)?;
                }
                b'J' => {
                    self.take(4)?;
                    self.push(at, V::Other)?;
                }
                b'K' => {
                    self.take(1)?;
                    self.push(at, V::Other)?;
                }
                b'M' => {
                    self.take(2)?;
                    self.push(at, V::Other)?;
                }
                b'G' => {
                    self.take(8)?;
                    self.push(at, V::Other)?;
                }
                b'N' | 0x88 | 0x89 | b')' | b']' | b'}' | 0x8f | 0x97 => self.push(at, V::Other)?,
                b't' | b'l' | b'd' | 0x91 => {
                    self.pop_mark(at)?;
                    self.push(at, V::Other)?;
                }
                0x85..=0x87 => {
                    for _ in 0..(op - 0x84) {
                        self.pop(at)?;
                    }
                    self.push(at, V::Other)?;
                }
                b'a' => {
                    self.pop(at)?;
                    self.top(at)?;
                }
                b's' => {
                    self.pop(at)?;
                    self.pop(at)?;
                    self.top(at)?;
                }
                b'e' | b'u' | 0x90 => {
                    self.pop_mark(at)?;
                    self.top(at)?;
                }
                0x98 => {
                    self.top(at)?;
                }
                other => {
                    return Err(Stop::Malformed(at, format!("opcode {other:#04x} does not exist")));
                }
            }
        }
    }
}

/// Whether calling an inert global with `op` only rebuilds a value.
fn inert_use(inert: Inert, op: &str) -> bool {
    match inert {
        Inert::Call => true,
        Inert::Instantiate => matches!(op, "NEWOBJ" | "NEWOBJ_EX"),
        Inert::No => false,
    }
}

fn cut_to(b: &[u8]) -> &[u8] {
    b.get(..MAX_PICKLE_GLOBAL_NAME).unwrap_or(b)
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The bytes a protocol 0 `STRING` argument (a Python bytes repr, in
/// single or double quotes) stands for.
fn unquote(line: &[u8]) -> Option<Vec<u8>> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let (&q, rest) = line.split_first()?;
    let body = rest.strip_suffix(&[q])?;
    if q != b'\'' && q != b'"' {
        return None;
    }
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&e) = body.get(i) else {
            out.push(b'\\');
            break;
        };
        i += 1;
        match e {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'x' => {
                let v = body
                    .get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(core::str::from_utf8(h).ok()?, 16).ok())?;
                out.push(v);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match body.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            b'\\' | b'\'' | b'"' => out.push(e),
            b'\n' => {}
            _ => {
                out.push(b'\\');
                out.push(e);
            }
        }
    }
    Some(out)
}

/// Python's `raw-unicode-escape` decoding of a protocol 0 `UNICODE`
/// argument: `\uXXXX` and `\UXXXXXXXX` escapes; every other byte is a
/// Latin-1 character.
fn raw_unicode_escape(line: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while let Some(&b) = line.get(i) {
        let digits = match (b, line.get(i + 1)) {
            (b'\\', Some(b'u')) => 4,
            (b'\\', Some(b'U')) => 8,
            _ => 0,
        };
        let escaped = (digits > 0)
            .then(|| line.get(i + 2..i + 2 + digits))
            .flatten()
            .and_then(|h| u32::from_str_radix(core::str::from_utf8(h).ok()?, 16).ok())
            .and_then(char::from_u32);
        match escaped {
            Some(c) => {
                out.push(c);
                i += 2 + digits;
            }
            None => {
                out.push(char::from(b));
                i += 1;
            }
        }
    }
    out
}

/// How a stream of pickles is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// One pickle (more when each following one starts with `PROTO`).
    Bare,
    /// A legacy `torch.save` file: five pickles (magic number, protocol,
    /// system info, the object, the storage keys), then raw storage bytes.
    TorchLegacy,
}

/// First read of a pickle stream; it grows eightfold while a walk runs out
/// of bytes, up to [`MAX_PICKLE_LEN`].
const FIRST_READ: u64 = 1 << 20;

/// Scans the pickles of `src[start..end]`; returns the tensor rebuild
/// calls seen.
pub fn scan_stream<R: RandomAccess + ?Sized>(
    src: &mut R,
    start: u64,
    end: u64,
    layout: Stream,
    findings: &mut Findings,
) -> Result<u64> {
    let mut tensors = 0;
    let mut pos = start;
    let count = if layout == Stream::TorchLegacy { 5 } else { MAX_PICKLES_PER_STREAM };
    for i in 0..count {
        if pos >= end {
            break;
        }
        if i > 0 && layout == Stream::Bare {
            let mut b = [0u8; 1];
            src.read_exact_at(pos, &mut b)?;
            if b[0] != 0x80 {
                findings.push(
                    Finding::new(
                        RuleId::PklTrailing,
                        Some(pos),
                        format!("{} bytes follow the pickle", end - pos),
                    )
                    .spanning(end - pos),
                );
                break;
            }
        }
        let (w, scanned) = walk_growing(src, pos, end, "", findings)?;
        tensors += w.tensors;
        match w.end {
            Some(n) => pos = scanned.saturating_add(n as u64),
            None => break,
        }
    }
    Ok(tensors)
}

/// Walks one pickle at `start` (ending by `end`), reading more while the
/// walk runs out of bytes. Returns the walk and the offset its bytes
/// started at.
pub(crate) fn walk_growing<R: RandomAccess + ?Sized>(
    src: &mut R,
    start: u64,
    end: u64,
    context: &str,
    findings: &mut Findings,
) -> Result<(Walk, u64)> {
    let total = end.saturating_sub(start);
    let mut want = FIRST_READ.min(total);
    loop {
        let complete = want == total;
        let bytes = read_vec(src, start, want, "a pickle")?;
        // Findings of a walk that will be redone are dropped.
        let mut trial = Findings::default();
        let w = walk(&bytes, start, context, complete, &mut trial);
        if !w.out_of_bytes || complete {
            findings.merge(trial);
            return Ok((w, start));
        }
        if want >= MAX_PICKLE_LEN {
            findings.merge(trial);
            let m = format!(
                "the pickle is longer than the scan limit of {MAX_PICKLE_LEN} bytes; the rest was not scanned"
            );
            let m = if context.is_empty() { m } else { format!("{}: {m}", shown(context)) };
            findings.push(Finding::new(RuleId::PklNotScanned, Some(start), m));
            return Ok((w, start));
        }
        want = want.saturating_mul(8).min(total).min(MAX_PICKLE_LEN);
    }
}

/// Tries a file whose first bytes match no format as a protocol 0 or 1
/// pickle: `Some` (tensors and findings) when the walk reaches `STOP`, or
/// meets a global or call before it fails.
pub fn guess<R: RandomAccess + ?Sized>(
    src: &mut R,
    head: &[u8],
) -> Result<Option<(u64, Findings)>> {
    let len = src.len();
    let starts = head.first().is_some_and(|b| b"(]})cNIJKSVXUTlLdFGPi".contains(b));
    if !starts || len > MAX_PICKLE_GUESS_LEN {
        return Ok(None);
    }
    let bytes = read_vec(src, 0, len, "a pickle")?;
    let mut found = Findings::default();
    let w = walk(&bytes, 0, "", true, &mut found);
    if w.suspicious == 0 && w.end.is_none() {
        return Ok(None);
    }
    if let Some(end) = w.end
        && end < bytes.len()
    {
        let extra = (bytes.len() - end) as u64;
        found.push(
            Finding::new(
                RuleId::PklTrailing,
                Some(end as u64),
                format!("{extra} bytes follow the pickle"),
            )
            .spanning(extra),
        );
    }
    Ok(Some((w.tensors, found)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(bytes: &[u8]) -> (Walk, Vec<(RuleId, Option<u64>, String)>) {
        let mut f = Findings::default();
        let w = walk(bytes, 100, "", true, &mut f);
        (w, f.finish().into_iter().map(|f| (f.rule, f.offset, f.message)).collect())
    }

    #[test]
    fn protocol_0_os_system_is_a_global_and_a_call() {
        let (w, found) = rules(b"cos\nsystem\n(S'echo hi'\ntR.");
        assert_eq!(w.end, Some(26));
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].0, found[0].1), (RuleId::PklGlobal, Some(100)));
        assert!(found[0].2.contains("os.system"));
        assert_eq!(found[1].0, RuleId::PklCall);
        assert!(found[1].2.contains("REDUCE calls os.system"), "{}", found[1].2);
    }

    #[test]
    fn stack_global_with_escaped_names_is_seen_through() {
        // Protocol 4: SHORT_BINUNICODE 'builtins', UNICODE 'e\u0076al' (raw
        // unicode escape), STACK_GLOBAL, then a call.
        let mut p = b"\x80\x04\x8c\x08builtins".to_vec();
        p.extend_from_slice(b"Ve\\u0076al\n\x93");
        p.extend_from_slice(b"\x8c\x011\x85R.");
        let (_, found) = rules(&p);
        assert!(
            found.iter().any(|f| f.0 == RuleId::PklGlobal && f.2.contains("builtins.eval")),
            "{found:?}"
        );
        assert!(found.iter().any(|f| f.0 == RuleId::PklCall));
    }

    #[test]
    fn a_computed_global_is_its_own_finding_and_the_walk_goes_on() {
        // STACK_GLOBAL whose module is what OrderedDict() returned, then a
        // call of it, then a literal os.system the walk must still reach.
        let mut p = b"\x80\x04\x8c\x0bcollections\x8c\x0bOrderedDict\x93)R".to_vec();
        p.extend_from_slice(b"\x8c\x06system\x93\x8c\x02ls\x85R0cos\nsystem\n.");
        let (w, found) = rules(&p);
        let ids: Vec<RuleId> = found.iter().map(|f| f.0).collect();
        assert_eq!(
            ids,
            [RuleId::PklComputedGlobal, RuleId::PklCall, RuleId::PklGlobal],
            "{found:?}"
        );
        assert!(found[0].2.contains("computed at load time"), "{}", found[0].2);
        assert!(found[0].2.contains("collections.OrderedDict"), "{}", found[0].2);
        assert!(w.end.is_some());
    }

    #[test]
    fn inert_objects_are_a_warning_only_when_used_as_rebuilt() {
        // NEWOBJ + BUILD of a torch.nn class: one PKL-007, nothing else.
        let (_, found) = rules(b"\x80\x02ctorch.nn.modules.linear\nLinear\n)\x81}b.");
        let ids: Vec<RuleId> = found.iter().map(|f| f.0).collect();
        assert_eq!(ids, [RuleId::PklInert], "{found:?}");
        // REDUCE of the same class runs its __init__: an error.
        let (_, found) = rules(b"\x80\x02ctorch.nn.modules.linear\nLinear\n)R.");
        assert!(found.iter().any(|f| f.0 == RuleId::PklCall), "{found:?}");
        // A lowercase torch.nn.modules name is a function, not inert.
        let (_, found) =
            rules(b"\x80\x02ctorch.nn.modules.module\nregister_module_forward_hook\n.");
        assert_eq!(found[0].0, RuleId::PklGlobal, "{found:?}");
        // numpy's reconstructor may be called.
        let (_, found) = rules(b"\x80\x02cnumpy._core.multiarray\n_reconstruct\n)R}b.");
        assert!(found.iter().all(|f| f.0 == RuleId::PklInert), "{found:?}");
    }

    #[test]
    fn allowed_globals_and_state_dict_calls_are_clean() {
        let p = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01ctorch._utils\n_rebuild_tensor_v2\n(tR}b.";
        let (w, found) = rules(p);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(w.tensors, 1);
    }

    #[test]
    fn build_on_a_forbidden_object_newobj_inst_obj_and_ext() {
        let (_, found) = rules(b"\x80\x02cx\nY\n)\x81}b.");
        assert_eq!(found.iter().filter(|f| f.0 == RuleId::PklCall).count(), 2, "{found:?}");
        let (_, found) = rules(b"(S'ls'\nios\nsystem\n.");
        assert!(found.iter().any(|f| f.0 == RuleId::PklCall && f.2.contains("INST")));
        let (_, found) = rules(b"(cos\nsystem\nS'ls'\no.");
        assert!(found.iter().any(|f| f.0 == RuleId::PklCall && f.2.contains("OBJ")));
        let (_, found) = rules(b"\x80\x02\x82\x07)R.");
        assert!(found.iter().any(|f| f.0 == RuleId::PklGlobal && f.2.contains("extension code 7")));
    }

    #[test]
    fn malformed_and_truncated_pickles_stop_with_a_finding() {
        let (w, found) = rules(b"cos\nsystem\n(S'x'\ntR\xff");
        assert!(w.end.is_none());
        assert_eq!(found.iter().filter(|f| f.0 == RuleId::PklMalformed).count(), 1);
        assert!(
            found.iter().any(|f| f.0 == RuleId::PklCall),
            "what ran before the failure is still listed"
        );
        let (_, found) = rules(b"\x80\x02K\x01");
        assert_eq!(found[0].0, RuleId::PklMalformed);
        let (_, found) = rules(b"0.");
        assert_eq!(found[0].0, RuleId::PklMalformed);
    }

    #[test]
    fn unquote_and_raw_unicode_escape() {
        assert_eq!(unquote(b"'a\\x41\\101\\n'").unwrap(), b"aAA\n");
        assert_eq!(unquote(b"\"o\\'s\"").unwrap(), b"o's");
        assert!(unquote(b"nope").is_none());
        assert_eq!(raw_unicode_escape(b"\\u006fs\\x"), "os\\x");
    }
}
