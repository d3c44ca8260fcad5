#![no_main]
use std::io::Write;

use libfuzzer_sys::fuzz_target;
use tensorizer_wasm::SliceSource;
use tensorizer_wasm::cli::{Command, parse_args, parse_key, text_report, validate, write_report};
use tensorizer_wasm::report::ErrorReport;

/// Output that takes `room` bytes, then fails (a closed pipe, a host's
/// output limit).
struct Cramped {
    room: usize,
    out: Vec<u8>,
}

impl Write for Cramped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "closed"));
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        self.out.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// The WASI validator's pure paths: the command line (NUL-separated
// arguments before the first two NULs), key files, and the report of the
// bytes after them as a file (text and JSON, written whole or failing).
fuzz_target!(|data: &[u8]| {
    let Some((&room, data)) = data.split_first() else { return };
    let split = data.windows(2).position(|w| w == [0, 0]).unwrap_or(data.len());
    let (argv, file) = (&data[..split], data.get(split + 2..).unwrap_or_default());
    let args: Vec<String> =
        argv.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let parsed = parse_args(&args);
    if let Err(e) = &parsed {
        assert_eq!(e.exit_code(), 2);
        let _ = serde_json::to_string(&ErrorReport::new(&args[0], e)).unwrap();
    }
    let _ = parse_key(file);
    let verify = matches!(parsed, Ok(Command::Validate(ref a)) if a.verify);
    let text = match validate(&mut SliceSource::new(file), "fuzz", verify, None) {
        Ok(report) => {
            let json = serde_json::to_string(&report).unwrap();
            let _: serde_json::Value = serde_json::from_str(&json).unwrap();
            text_report(&report)
        }
        Err(e) => serde_json::to_string(&ErrorReport::new("fuzz", &e)).unwrap(),
    };
    let mut out = Cramped { room: usize::from(room) * 64, out: Vec::new() };
    match write_report(&mut out, &text) {
        Ok(()) => assert_eq!(out.out, [text.as_bytes(), b"\n"].concat()),
        Err(_) => assert!(text.len() + 1 > usize::from(room) * 64),
    }
});
