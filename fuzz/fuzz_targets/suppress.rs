#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::scan::suppress::{glob_match, parse, path_matches};

// The suppression file (it comes with the repository being scanned): any
// text parses to entries or an error, never a panic; every glob matches in
// time the campaign's -timeout bounds (no backtracking blow-up), against
// the input itself as a path and a few fixed ones.
fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        let half = data.len() / 2;
        let _ = glob_match(&data[..half], &data[half..]);
        return;
    };
    if let Ok(entries) = parse(text) {
        for e in &entries {
            for path in [text, "models/a.pt", "./x/y/z.safetensors", ""] {
                let _ = path_matches(&e.path, path);
            }
        }
    }
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid -= 1;
    }
    let (glob, path) = text.split_at(mid);
    let _ = path_matches(glob, path);
});
