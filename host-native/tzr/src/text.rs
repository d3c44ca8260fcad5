//! Text for people: names made safe to print, sizes in binary units.

/// `s` safe to print on a terminal: control characters (escape
/// sequences, carriage returns, C1 controls) and bidirectional overrides
/// are shown escaped, as `\u{1b}`; everything else as it is.
pub(crate) fn printable(s: &str) -> String {
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

/// Bytes in binary units.
pub(crate) fn human(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}
