#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::SliceSource;
use tensorizer_core::layout::MAX_FINDINGS_PER_RULE as CAP;
use tensorizer_core::scan::{RuleId, ScanOptions, sarif, scan};

// The scanner's entry point on any bytes, under three file names: it must
// return (a slice source never fails a read in range), its findings must be
// sorted, capped and the same on a second scan, and every offset must lie
// within the file (or at its end).
fuzz_target!(|data: &[u8]| {
    for name in [None, Some("m.safetensors"), Some("m.pt")] {
        let options = ScanOptions { name, ..ScanOptions::default() };
        let s = scan(&mut SliceSource::new(data), &options).expect("a slice never fails to read");
        let again = scan(&mut SliceSource::new(data), &options).unwrap();
        assert_eq!(s.findings, again.findings);
        let listed: Vec<_> =
            s.findings.iter().filter(|f| f.rule != RuleId::FindingsCapped).collect();
        assert!(listed.windows(2).all(|w| (w[0].offset, w[0].rule) <= (w[1].offset, w[1].rule)));
        for rule in listed.iter().map(|f| f.rule) {
            assert!(listed.iter().filter(|f| f.rule == rule).count() as u64 <= CAP);
        }
        for f in &s.findings {
            assert!(f.offset.is_none_or(|o| o <= data.len() as u64 + 8), "{f:?}");
        }
        let log = sarif::to_sarif(
            &sarif::Tool { name: "fuzz", version: "0", information_uri: None },
            "f",
            &s.findings,
        );
        assert_eq!(log["runs"][0]["results"].as_array().map(Vec::len), Some(s.findings.len()));
    }
});
