//! Suppressions: findings a repository has reviewed and accepts, each
//! entry a rule, a path glob and a reason (`.tzrscan.toml`: parsed here,
//! [`parse`], for every front end; found and read by
//! `walk::Suppressions::load`). A suppressed finding is still reported, marked with its reason
//! (SARIF's `suppressions`), and no longer fails a scan; an entry that
//! matched nothing is a [`RuleId::UnusedSuppression`] note, so stale
//! entries do not pile up.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::{Finding, RuleId};

/// The suppression file read when none is named, in the current directory
/// (the repository root, under pre-commit and the GitHub Action).
pub const DEFAULT_SUPPRESSION_FILE: &str = ".tzrscan.toml";

/// Longest suppression file a host reads.
pub const MAX_SUPPRESSION_FILE_LEN: u64 = 1024 * 1024;

/// Most entries a suppression file may hold.
pub const MAX_SUPPRESSIONS: usize = 10_000;

/// Longest path glob of an entry, in bytes (a glob's match costs grow
/// with its length and its `*`s).
pub const MAX_SUPPRESSION_GLOB_LEN: usize = 1024;

/// One entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppression {
    /// The rule it accepts.
    pub rule: RuleId,
    /// The files it covers ([`glob_match`]).
    pub path: String,
    /// Why the finding is accepted (required, not empty); shared by the
    /// findings it covers.
    pub reason: Arc<str>,
}

impl Suppression {
    /// An entry, or why it is not one: an unknown rule, an empty reason,
    /// a glob above [`MAX_SUPPRESSION_GLOB_LEN`].
    pub fn new(rule: &str, path: &str, reason: &str) -> Result<Self, String> {
        let rule = RuleId::from_id(rule).ok_or_else(|| format!("no rule {rule:?}"))?;
        if reason.trim().is_empty() {
            return Err("a reason is required".into());
        }
        if path.is_empty() || path.len() > MAX_SUPPRESSION_GLOB_LEN {
            return Err(format!("the path glob must be 1 to {MAX_SUPPRESSION_GLOB_LEN} bytes"));
        }
        Ok(Self { rule, path: path.into(), reason: Arc::from(reason) })
    }

    /// Whether this entry covers `finding` in the file `file`.
    pub fn covers(&self, file: &str, finding: &Finding) -> bool {
        self.rule == finding.rule && path_matches(&self.path, file)
    }
}

/// The entries of a suppression file's text, in order: `[[ignore]]`
/// tables, each with exactly the strings `rule`, `path` and `reason`
/// ([`Suppression::new`]); or why the file is not one (not TOML, another
/// key, a missing or bad field, more than [`MAX_SUPPRESSIONS`] entries).
pub fn parse(text: &str) -> Result<Vec<Suppression>, String> {
    if text.len() as u64 > MAX_SUPPRESSION_FILE_LEN {
        return Err(format!("above the {MAX_SUPPRESSION_FILE_LEN}-byte limit"));
    }
    let doc: toml::Table = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    if let Some(key) = doc.keys().find(|k| *k != "ignore") {
        return Err(format!("unknown key {key:?} (only [[ignore]] tables)"));
    }
    let Some(item) = doc.get("ignore") else { return Ok(Vec::new()) };
    let tables = item.as_array().ok_or("ignore must be [[ignore]] tables")?;
    if tables.len() > MAX_SUPPRESSIONS {
        return Err(format!("more than {MAX_SUPPRESSIONS} entries"));
    }
    tables
        .iter()
        .enumerate()
        .map(|(i, t)| entry(t).map_err(|e| format!("entry {}: {e}", i + 1)))
        .collect()
}

/// One `[[ignore]]` table.
fn entry(item: &toml::Value) -> Result<Suppression, String> {
    let table = item.as_table().ok_or("ignore must be [[ignore]] tables")?;
    if let Some(key) = table.keys().find(|k| !["rule", "path", "reason"].contains(&k.as_str())) {
        return Err(format!("unknown key {key:?} (rule, path and reason)"));
    }
    let field = |key: &str| {
        table
            .get(key)
            .and_then(toml::Value::as_str)
            .ok_or_else(|| format!("{key} (a string) is required"))
    };
    Suppression::new(field("rule")?, field("path")?, field("reason")?)
}

/// Whether `glob` names `file`. A glob with no `/` is matched against the
/// file's last component (`*.pt` anywhere); otherwise against the whole
/// path, both with any leading `./` dropped. `*` is any run within one
/// component, `?` one character but `/`, `**` any run of components.
pub fn path_matches(glob: &str, file: &str) -> bool {
    let glob = glob.trim_start_matches("./");
    let file = file.trim_start_matches("./");
    let target = if glob.contains('/') { file } else { file.rsplit('/').next().unwrap_or(file) };
    glob_match(glob.as_bytes(), target.as_bytes())
}

/// One element of a glob.
#[derive(Debug, Clone, Copy)]
enum Token {
    /// A byte that must be there.
    Byte(u8),
    /// `?`: one byte but `/`.
    One,
    /// `*`: any run within one component.
    Star,
    /// `**/`: any run of whole components (none included).
    Components,
    /// `**` not followed by `/`: any run at all.
    AnyRun,
}

fn tokens(glob: &[u8]) -> Vec<Token> {
    let mut out = Vec::with_capacity(glob.len());
    let mut rest = glob;
    while let Some(&first) = rest.first() {
        let (token, len) = match rest {
            [b'*', b'*', b'/', ..] => (Token::Components, 3),
            [b'*', b'*', ..] => (Token::AnyRun, 2),
            [b'*', ..] => (Token::Star, 1),
            [b'?', ..] => (Token::One, 1),
            _ => (Token::Byte(first), 1),
        };
        out.push(token);
        rest = &rest[len..];
    }
    out
}

/// Matches `glob` against `s` (see [`path_matches`]) in time proportional
/// to the product of their lengths: for each glob element from the last,
/// which suffixes of `s` the glob from there matches (trying each way a
/// `*` could match in turn takes exponential time on a glob of many
/// `*`s, and a suppression file comes with the repository scanned).
pub fn glob_match(glob: &[u8], s: &[u8]) -> bool {
    let n = s.len();
    // next[i]: the glob after this element matches s[i..]; n + 1 is padding.
    let mut next = alloc::vec![false; n + 2];
    next[n] = true;
    let mut cur = alloc::vec![false; n + 2];
    for token in tokens(glob).iter().rev() {
        cur[n + 1] = false;
        // Components: the rest matches after some `/` at or past i.
        let mut after_slash = false;
        for i in (0..=n).rev() {
            let here = s.get(i).copied();
            let in_component = here.is_some_and(|b| b != b'/');
            cur[i] = match *token {
                Token::Byte(c) => here == Some(c) && next[i + 1],
                Token::One => in_component && next[i + 1],
                Token::Star => next[i] || (in_component && cur[i + 1]),
                Token::AnyRun => next[i] || (here.is_some() && cur[i + 1]),
                Token::Components => {
                    after_slash |= here == Some(b'/') && next[i + 1];
                    next[i] || after_slash
                }
            };
        }
        core::mem::swap(&mut cur, &mut next);
    }
    next[0]
}

/// Marks the findings of `file` that an entry of `entries` covers (the
/// first that does), counting each entry's use in `used`.
pub fn apply(entries: &[Suppression], used: &mut [u64], file: &str, findings: &mut [Finding]) {
    for f in findings.iter_mut().filter(|f| f.suppressed.is_none()) {
        if let Some(i) = entries.iter().position(|e| e.covers(file, f)) {
            f.suppressed = Some(entries[i].reason.clone());
            if let Some(n) = used.get_mut(i) {
                *n += 1;
            }
        }
    }
}

/// One [`RuleId::UnusedSuppression`] note per entry that covered nothing
/// (`used` as [`apply`] counted), naming it by its position (from 1).
pub fn unused(entries: &[Suppression], used: &[u64]) -> Vec<Finding> {
    entries
        .iter()
        .zip(used)
        .enumerate()
        .filter(|(_, (_, n))| **n == 0)
        .map(|(i, (e, _))| {
            let why =
                format!("suppression {} ({} for {:?}) matched no finding", i + 1, e.rule, e.path);
            Finding::new(RuleId::UnusedSuppression, None, why)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_entries_each_with_a_rule_a_glob_and_a_reason() {
        let text =
            "[[ignore]]\nrule = \"PKL-007\"\npath = \"legacy/*.pt\"\nreason = \"reviewed\"\n";
        let entries = parse(text).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!((entries[0].path.as_str(), &*entries[0].reason), ("legacy/*.pt", "reviewed"));
        let missing = parse("[[ignore]]\nrule = \"PKL-007\"\npath = \"*\"\n").unwrap_err();
        assert_eq!(missing, "entry 1: reason (a string) is required");
        let extra =
            parse("[[ignore]]\nrule = \"PKL-007\"\npath = \"*\"\nreason = \"r\"\nuntil = 1\n");
        assert!(extra.unwrap_err().contains("unknown key \"until\""));
        assert!(parse("ignore = 1").unwrap_err().contains("[[ignore]]"));
        assert!(parse("ignore = [1]").unwrap_err().contains("[[ignore]]"));
        assert!(parse("x = 1").unwrap_err().contains("unknown key \"x\""));
        assert!(
            parse("[[ignore]]\nrule = \"X-1\"\npath = \"*\"\nreason = \"r\"")
                .unwrap_err()
                .contains("no rule")
        );
        assert!(parse("[x").unwrap_err().starts_with("not TOML"));
        assert!(parse("").unwrap().is_empty());
        let many = "[[ignore]]\nrule = \"PKL-007\"\npath = \"*\"\nreason = \"r\"\n"
            .repeat(MAX_SUPPRESSIONS + 1);
        assert!(parse(&many).unwrap_err().contains("more than"));
        let long = alloc::format!("# {}", "x".repeat(MAX_SUPPRESSION_FILE_LEN as usize));
        assert!(parse(&long).unwrap_err().contains("limit"));
    }

    #[test]
    fn globs_match_components_and_basenames() {
        let yes = [
            ("**/a.pt", "a.pt"),
            ("**/a.pt", "x/y/a.pt"),
            ("x/**/a.pt", "x/a.pt"),
            ("**", ""),
            ("a/**b", "a/x/b"),
            ("*.pt", "models/a.pt"),
            ("models/*.pt", "./models/a.pt"),
            ("models/**/*.pt", "models/a.pt"),
            ("models/**/*.pt", "models/x/y/a.pt"),
            ("**", "a/b"),
            ("a?c", "abc"),
            ("models/a.pt", "models/a.pt"),
        ];
        for (g, f) in yes {
            assert!(path_matches(g, f), "{g} {f}");
        }
        let no = [
            ("models/*.pt", "models/x/a.pt"),
            ("*.pt", "a.ptx"),
            ("a?c", "a/c"),
            ("models/a.pt", "other/models/a.pt"),
            ("x/**/a.pt", "xa.pt"),
            ("**/a.pt", "ba.pt"),
            ("a/*", "a/b/c"),
            ("?", ""),
        ];
        for (g, f) in no {
            assert!(!path_matches(g, f), "{g} {f}");
        }
    }

    #[test]
    fn a_glob_of_many_stars_matches_in_polynomial_time() {
        // Backtracking over each `*` in turn tries C(45, 9) splits here.
        let glob = alloc::format!("{}b", "*a".repeat(9));
        let path = "a".repeat(45);
        let start = std::time::Instant::now();
        assert!(!glob_match(glob.as_bytes(), path.as_bytes()));
        let long = "*?".repeat(MAX_SUPPRESSION_GLOB_LEN / 2 - 1) + "b";
        assert!(!glob_match(long.as_bytes(), "x".repeat(4096).as_bytes()));
        assert!(start.elapsed() < std::time::Duration::from_secs(3), "{:?}", start.elapsed());
    }

    #[test]
    fn entries_need_a_rule_and_a_reason_and_unused_ones_are_notes() {
        assert!(Suppression::new("PKL-999", "*", "r").unwrap_err().contains("no rule"));
        assert!(Suppression::new("PKL-007", "*", "  ").unwrap_err().contains("reason"));
        let long = "a".repeat(MAX_SUPPRESSION_GLOB_LEN + 1);
        assert!(Suppression::new("PKL-007", &long, "r").is_err());
        let entries = [
            Suppression::new("PKL-007", "legacy/*.pt", "a whole module, reviewed").unwrap(),
            Suppression::new("PKL-001", "*.pt", "never used").unwrap(),
        ];
        let mut used = [0; 2];
        let mut found = [
            Finding::new(RuleId::PklInert, Some(1), "torch.nn.modules.linear.Linear"),
            Finding::new(RuleId::PklTrailing, Some(2), "trailing"),
        ];
        apply(&entries, &mut used, "legacy/m.pt", &mut found);
        assert_eq!(found[0].suppressed.as_deref(), Some("a whole module, reviewed"));
        assert_eq!(found[1].suppressed, None);
        let notes = unused(&entries, &used);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].rule, RuleId::UnusedSuppression);
        assert!(notes[0].message.starts_with("suppression 2 (PKL-001"), "{}", notes[0].message);
    }
}
