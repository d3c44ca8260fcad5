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
    /// How many findings of one cause this one stands for (1, or more when
    /// [`Findings::finish`] collapsed them).
    pub count: u64,
    /// Why the finding is accepted, when a suppression entry covers it
    /// ([`super::suppress`]): it is reported, and fails nothing.
    pub suppressed: Option<alloc::sync::Arc<str>>,
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
            count: 1,
            suppressed: None,
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

/// Rules whose findings in one file share one cause, so that
/// [`Findings::finish`] reports them as one finding with a count: data
/// ranges past the end of the file all say the file is shorter than its
/// header promises (a truncated download), however many tensors it cuts.
const ONE_CAUSE: &[RuleId] = &[RuleId::StPastEnd, RuleId::TzrTruncated];

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
    pub fn push_lazy(&mut self, rule: RuleId, make: impl FnOnce() -> Finding) {
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

    /// The same findings, placed at `offset` in the file: for findings in
    /// bytes that are not the file's (an inflated ZIP entry), whose own
    /// offset each message keeps.
    pub fn relocated(mut self, offset: u64) -> Self {
        for f in &mut self.kept {
            if let Some(at) = f.offset.replace(offset) {
                f.message = format!("{} (at byte {at} of the inflated entry)", f.message);
            }
            f.length = None;
        }
        self
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.per_rule.is_empty()
    }

    /// How many findings of `rule` were found (kept or not).
    pub fn count(&self, rule: RuleId) -> u64 {
        self.per_rule.get(&rule).copied().unwrap_or(0)
    }

    /// Replaces the sorted findings of `rule` by the first, counting all
    /// of them (those past the cap too).
    fn collapse(&mut self, rule: RuleId) {
        let total = self.count(rule);
        if total < 2 {
            return;
        }
        let mut seen = false;
        self.kept.retain(|f| f.rule != rule || !core::mem::replace(&mut seen, true));
        if let Some(f) = self.kept.iter_mut().find(|f| f.rule == rule) {
            f.count = total;
            f.message = format!("{} (and {} more of the same cause)", f.message, total - 1);
        }
    }

    /// The findings, sorted by offset (whole-file findings first), then
    /// rule, then message; then one [`RuleId::FindingsCapped`] finding per
    /// rule that went over the cap.
    pub fn finish(mut self) -> Vec<Finding> {
        self.kept
            .sort_by(|a, b| (a.offset, a.rule, &a.message).cmp(&(b.offset, b.rule, &b.message)));
        for &rule in ONE_CAUSE {
            self.collapse(rule);
        }
        for (rule, &n) in &self.per_rule {
            if n > MAX_FINDINGS_PER_RULE && !ONE_CAUSE.contains(rule) {
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
