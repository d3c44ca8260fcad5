#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_native::store::http_response::{Framing, Head, Refused, decode_head};

/// The first answer other than "need more" when `input` arrives in reads
/// ending at `ends`, then the rest; the head, the bytes received by then.
fn fed(input: &[u8], ends: &[usize]) -> (Result<Option<Head>, Refused>, usize) {
    for &end in ends.iter().chain([&input.len()]) {
        let answer = decode_head(&input[..end]);
        if answer != Ok(None) {
            return (answer, end);
        }
    }
    (Ok(None), input.len())
}

// A response from any bytes, arriving in reads that end where the first
// bytes say (a count, then two bytes per end): the decoder returns, gives
// the same answer whatever the reads, takes no more bytes than it was
// given, and decodes the bytes it took alone to the same head, their
// prefixes being incomplete; the body framed from the rest, read after
// read, is never longer than its Content-Length.
fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else { return };
    let count = usize::from(count % 8);
    let Some((cuts, input)) = rest.split_at_checked(2 * count) else { return };
    let mut ends: Vec<usize> = cuts
        .chunks(2)
        .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])) % (input.len() + 1))
        .collect();
    ends.sort_unstable();
    let whole = decode_head(input);
    let (answer, received) = fed(input, &ends);
    assert_eq!(answer, whole);
    let Ok(Some(head)) = answer else { return };
    assert!(0 < head.used && head.used <= received);
    assert_eq!(decode_head(&input[..head.used]), Ok(Some(head.clone())));
    assert_eq!(decode_head(&input[..head.used - 1]), Ok(None));
    let mut framing = Framing::new(head.length);
    let mut body = 0u64;
    let mut at = head.used;
    for end in ends.iter().copied().filter(|&e| e > head.used).chain([input.len()]) {
        let read = end.saturating_sub(at);
        if read == 0 {
            continue;
        }
        let n = framing.room(read);
        assert_eq!(framing.took(n), Ok(n));
        body += n as u64;
        at = at.max(end);
    }
    assert!(body <= head.length && body <= (input.len() - head.used) as u64);
    assert_eq!(body + framing.remaining(), head.length);
    if framing.remaining() > 0 {
        assert!(framing.took(0).is_err());
    }
});
