//! What the scanner reports: one [`Finding`] per anomaly, collected in
//! [`Findings`] with a cap per rule.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::rules::{RuleId, Severity};
use crate::layout::MAX_FINDINGS_PER_RULE;

/// One anomaly found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Which rule it breaks.
    pub rule: RuleId,
    /// How serious it is (the rule's severity).
    pub severity: Severity,
    /// Absolute byte offset of the offending structure, when there is one.
    pub offset: Option<u64>,
    /// Bytes the offending structure spans from `offset`, when known.
    pub length: Option<u64>,
    /// The tensor (or archive entry) concerned, when there is one.
    pub tensor: Option<String>,
    /// One line saying what was found.
    pub message: String,
    /// What to do about it (the rule's remediation).
    pub remediation: &'static str,
}

impl Finding {
    /// A finding of `rule` at `offset`.
    pub fn new(rule: RuleId, offset: Option<u64>, message: impl Into<String>) -> Self {
        Self {
            rule,
            severity: rule.severity(),
            offset,
            length: None,
            tensor: None,
            message: message.into(),
            remediation: rule.remediation(),
        }
    }

    /// The same finding, about `tensor`.
    pub fn in_tensor(mut self, tensor: impl Into<String>) -> Self {
        self.tensor = Some(tensor.into());
        self
    }

    /// The same finding, spanning `length` bytes.
    pub fn spanning(mut self, length: u64) -> Self {
        self.length = Some(length);
        self
    }
}

/// Collects findings, keeping at most [`MAX_FINDINGS_PER_RULE`] per rule
/// and counting the rest.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    kept: Vec<Finding>,
    per_rule: BTreeMap<RuleId, u64>,
}

impl Findings {
    /// Adds `f` (counted, and kept while its rule is under the cap).
    pub fn push(&mut self, f: Finding) {
        let n = self.per_rule.entry(f.rule).or_default();
        *n += 1;
        if *n <= MAX_FINDINGS_PER_RULE {
            self.kept.push(f);
        }
    }

    /// Adds the finding `make` builds, building it only while `rule` is
    /// under the cap (a file failing the same way a million times costs a
    /// count, not a million messages).
    pub fn push_with(&mut self, rule: RuleId, make: impl FnOnce() -> Finding) {
        if self.count(rule) < MAX_FINDINGS_PER_RULE {
            self.push(make());
        } else {
            *self.per_rule.entry(rule).or_default() += 1;
        }
    }

    /// Adds every finding of `more`.
    pub fn extend(&mut self, more: impl IntoIterator<Item = Finding>) {
        for f in more {
            self.push(f);
        }
    }

    /// Adds every finding of `other`, with its counts past the cap.
    pub fn merge(&mut self, other: Self) {
        let mut kept: BTreeMap<RuleId, u64> = BTreeMap::new();
        for f in other.kept {
            *kept.entry(f.rule).or_default() += 1;
            self.push(f);
        }
        for (rule, n) in other.per_rule {
            let k = kept.get(&rule).copied().unwrap_or(0);
            *self.per_rule.entry(rule).or_default() += n.saturating_sub(k);
        }
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.per_rule.is_empty()
    }

    /// How many findings of `rule` were found (kept or not).
    pub fn count(&self, rule: RuleId) -> u64 {
        self.per_rule.get(&rule).copied().unwrap_or(0)
    }

    /// The findings, sorted by offset (whole-file findings first), then
    /// rule, then message; then one [`RuleId::FindingsCapped`] finding per
    /// rule that went over the cap.
    pub fn finish(mut self) -> Vec<Finding> {
        self.kept.sort_by(|a, b| (a.offset, a.rule, &a.message).cmp(&(b.offset, b.rule, &b.message)));
        for (rule, &n) in &self.per_rule {
            if n > MAX_FINDINGS_PER_RULE {
                self.kept.push(Finding::new(
                    RuleId::FindingsCapped,
                    None,
                    format!("{} more {rule} findings were left out", n - MAX_FINDINGS_PER_RULE),
                ));
            }
        }
        self.kept
    }
}
