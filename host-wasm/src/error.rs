//! The validator's error: a kind that fixes the exit code, the byte offset
//! where the problem was found (when there is one), the scanner rule it
//! breaks (when it is a problem of the file) and a one-line message.
//!
//! The exit statuses are the embedding contract scanners share: 0 no
//! findings, 1 findings, 2 could not scan.

use std::fmt;

use serde::Serialize;

use tensorizer_core::scan::{RuleId, rule_for_error};

use crate::source::ReadError;

/// Exit status: the file was scanned and nothing was found.
pub const EXIT_OK: u8 = 0;
/// Exit status: the file was scanned and has findings (a hash or
/// authentication failure with `--verify` included).
pub const EXIT_FINDINGS: u8 = 1;
/// Exit status: the file could not be scanned (bad arguments, an
/// unreadable input or key, memory that could not be had, a report that
/// could not be written).
pub const EXIT_CANNOT_SCAN: u8 = 2;

/// What kind of failure, in the words the JSON report uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Bad arguments, a missing key for an encrypted file (exit 2).
    Usage,
    /// The input is not a valid file: a finding (exit 1).
    InvalidInput,
    /// Reading the input failed, or memory for it could not be had (exit 2).
    Io,
    /// A stored hash or MAC did not match: a finding (exit 1).
    Verification,
}

impl ErrorKind {
    /// The process exit status for this kind.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Usage | Self::Io => EXIT_CANNOT_SCAN,
            Self::InvalidInput | Self::Verification => EXIT_FINDINGS,
        }
    }
}

/// A failure with its kind, offset and message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ValidateError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// Absolute byte offset of the offending field or read, when known.
    pub offset: Option<u64>,
    /// A one-line description (control characters escaped).
    pub message: String,
    /// The scanner rule a problem of the file breaks (`None` for usage and
    /// read failures).
    #[serde(skip)]
    pub rule: Option<RuleId>,
}

impl ValidateError {
    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Usage,
            offset: None,
            message: one_line(&message.into()),
            rule: None,
        }
    }

    /// Invalid input found at `offset`.
    pub fn invalid(offset: Option<u64>, message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::InvalidInput,
            offset,
            message: one_line(&message.into()),
            rule: None,
        }
    }

    /// Memory for `what` (`bytes` long) could not be allocated.
    pub fn no_memory(offset: u64, what: &str, bytes: u64) -> Self {
        Self {
            kind: ErrorKind::Io,
            offset: Some(offset),
            message: format!(
                "cannot allocate {bytes} bytes for {what} at byte {offset} (raise the memory limit)"
            ),
            rule: None,
        }
    }

    /// The process exit status.
    pub fn exit_code(&self) -> u8 {
        self.kind.exit_code()
    }
}

impl fmt::Display for ValidateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ValidateError {}

impl From<ReadError> for ValidateError {
    fn from(e: ReadError) -> Self {
        Self {
            kind: ErrorKind::Io,
            offset: Some(e.offset),
            message: one_line(&e.to_string()),
            rule: None,
        }
    }
}

impl From<tensorizer_core::Error> for ValidateError {
    fn from(e: tensorizer_core::Error) -> Self {
        use tensorizer_core::Error as E;
        let (kind, rule) = match e {
            E::HashMismatch { .. } | E::Decryption => {
                (ErrorKind::Verification, Some(rule_for_error(&e)))
            }
            E::Read { .. } | E::OutOfMemory { .. } => (ErrorKind::Io, None),
            _ => (ErrorKind::InvalidInput, Some(rule_for_error(&e))),
        };
        // Offsets the core's message already names, and those it leaves out.
        let (offset, suffix) = match &e {
            E::Truncated { offset, .. }
            | E::Malformed { offset, .. }
            | E::LimitExceeded { offset, .. }
            | E::InvalidName { offset, .. }
            | E::UnsupportedDtype { offset, .. }
            | E::HeaderMismatch { offset, .. }
            | E::Read { offset, .. }
            | E::OutOfMemory { offset, .. } => (Some(*offset), false),
            E::NotTensorizer => (Some(0), true),
            E::UnsupportedVersion { .. } => (Some(5), true),
            E::UnsupportedFlags { .. } => (Some(9), true),
            _ => (None, false),
        };
        let mut message = e.to_string();
        if let (Some(at), true) = (offset, suffix) {
            message.push_str(&format!(" (at byte {at})"));
        }
        Self { kind, offset, message: one_line(&message), rule }
    }
}

/// `s` on one line: control characters and bidirectional overrides are
/// written as `\u{..}` escapes, so a hostile tensor name cannot break a
/// log line or a terminal.
pub fn one_line(s: &str) -> String {
    let hostile = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !s.chars().any(hostile) {
        return s.to_string();
    }
    s.chars()
        .map(|c| if hostile(c) { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_carry_offsets_and_codes() {
        let e = ValidateError::from(tensorizer_core::Error::NotTensorizer);
        assert_eq!((e.kind, e.offset, e.exit_code()), (ErrorKind::InvalidInput, Some(0), 1));
        assert_eq!(e.rule, Some(RuleId::TzrFileHeader));
        assert!(e.message.ends_with("(at byte 0)"));
        let e = ValidateError::from(tensorizer_core::Error::Truncated { offset: 99, needed: 1 });
        assert_eq!(e.offset, Some(99));
        assert_eq!(ValidateError::from(tensorizer_core::Error::Decryption).exit_code(), 1);
        assert_eq!(one_line("a\nb\u{202e}"), "a\\u{a}b\\u{202e}");
    }
}
