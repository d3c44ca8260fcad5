//! INI text as s3cmd's `~/.s3cfg` and the AWS CLI's `~/.aws/config` and
//! `credentials` files are written, read the way Python's `configparser`
//! (which both tensorizer and botocore use) reads them: the one INI reader
//! of the crate.

/// One `[section]` and its `key = value` entries, in file order.
pub(crate) type Section = (String, Vec<(String, String)>);

/// The sections of `text`. A section header is a line `[name]` (the name
/// as written between the brackets); an entry is `key = value` or
/// `key: value`, split at the first `=` or `:`, both sides trimmed.
/// Comment lines (`#`, `;`), indented lines (continuations, and the AWS
/// config's nested `s3 =` blocks), lines without a delimiter and entries
/// before the first section are skipped.
pub(crate) fn sections(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    for line in text.lines() {
        let indented = line.starts_with([' ', '\t']);
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((name.to_string(), Vec::new()));
            continue;
        }
        let Some(split) = line.find(['=', ':']) else { continue };
        if let (false, Some(last)) = (indented, sections.last_mut()) {
            let (key, value) = (&line[..split], &line[split + 1..]);
            last.1.push((key.trim().to_string(), value.trim().to_string()));
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_configparser_reads() {
        let text = "top = skipped\n# c\n[default]\naccess_key = A\nhost_base: h:9000\n; c\n\n\
                    [profile dev]\nregion = eu-west-1\ns3 =\n  endpoint_url = x\nno delimiter\n\
                    [ spaced ]\nurl = http://h:1/p\n";
        let parsed = sections(text);
        let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["default", "profile dev", " spaced "]);
        let entries = |k: usize| -> Vec<(&str, &str)> {
            parsed[k].1.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
        };
        assert_eq!(entries(0), [("access_key", "A"), ("host_base", "h:9000")]);
        assert_eq!(entries(1), [("region", "eu-west-1"), ("s3", "")]);
        assert_eq!(entries(2), [("url", "http://h:1/p")]);
    }
}
