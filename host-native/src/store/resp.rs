//! RESP2, the Redis protocol, without I/O: replies are decoded from the
//! bytes received so far, with hard limits, so that a reply can make its
//! reader allocate only what it has actually sent and never more than the
//! limits below. [`crate::store::redis`] does the I/O (and encodes the
//! commands: arrays of bulk strings); `fuzz/fuzz_targets/resp.rs` feeds
//! these functions any bytes.

use std::fmt;

/// Longest status, error or length line accepted.
pub const MAX_LINE: usize = 64 << 10;

/// Longest bulk string accepted in a reply decoded by [`decode`] (key
/// names, `SCAN` cursors); a bulk reply meant for a caller's buffer
/// ([`decode_bulk_head`]) is limited by that buffer instead.
pub const MAX_BULK: u64 = 1 << 20;

/// Most elements accepted in one array reply.
pub const MAX_ARRAY: u64 = 1 << 20;

/// Deepest array nesting accepted (`SCAN` and `EXEC` need two levels).
pub const MAX_DEPTH: usize = 4;

/// A decoded reply. Error replies stay replies here; the reader decides
/// what a top-level one means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and friends.
    Status(Vec<u8>),
    /// `-ERR ...`.
    Error(String),
    /// `:123`.
    Int(i64),
    /// `$n` payload, `None` for `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*n` elements, `None` for `*-1`.
    Array(Option<Vec<Self>>),
}

/// The first line of a bulk reply meant for a caller's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BulkHead {
    /// This many payload bytes follow, then CRLF.
    Bytes(usize),
    /// The server answered with an error reply instead.
    Error(String),
}

/// Bytes that are not a reply of RESP2 within the limits: what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn malformed(what: impl Into<String>) -> Malformed {
    Malformed(what.into())
}

/// Decodes the reply at the start of `input`: `Ok(None)` until all of it
/// has arrived, then the reply and the number of bytes it took.
pub fn decode(input: &[u8]) -> Result<Option<(Reply, usize)>, Malformed> {
    value(input, 0, 0)
}

/// Decodes the first line of a bulk reply of at most `room` bytes at the
/// start of `input`: `Ok(None)` until the line has arrived, then what it
/// says and where the payload begins.
pub fn decode_bulk_head(input: &[u8], room: usize) -> Result<Option<(BulkHead, usize)>, Malformed> {
    let Some((line, next)) = line(input, 0)? else { return Ok(None) };
    match line.split_first() {
        Some((b'$', rest)) => {
            let Some(len) = parse_len(rest, u64::MAX >> 1, "bulk string")? else {
                return Err(malformed("a nil reply where bytes were expected"));
            };
            match usize::try_from(len) {
                Ok(n) if n <= room => Ok(Some((BulkHead::Bytes(n), next))),
                _ => Err(malformed(format!(
                    "a bulk reply of {len} bytes where at most {room} were asked for"
                ))),
            }
        }
        Some((b'-', rest)) => {
            Ok(Some((BulkHead::Error(String::from_utf8_lossy(rest).into_owned()), next)))
        }
        _ => Err(malformed(format!(
            "{:?} where a bulk reply was expected",
            String::from_utf8_lossy(line)
        ))),
    }
}

/// The line starting at `at` (without its CRLF) and where the next one
/// begins; `Ok(None)` until its end has arrived.
fn line(input: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, Malformed> {
    let rest = input.get(at..).unwrap_or_default();
    let window = &rest[..rest.len().min(MAX_LINE + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(end) => match window[..end].strip_suffix(b"\r") {
            Some(body) => Ok(Some((body, at + end + 1))),
            None => Err(malformed("a reply line not ended by CRLF")),
        },
        None if rest.len() >= MAX_LINE + 2 => {
            Err(malformed(format!("a reply line longer than {MAX_LINE} bytes")))
        }
        None => Ok(None),
    }
}

/// The value starting at `at`, nested `depth` arrays deep, and where it
/// ends; `Ok(None)` until all of it has arrived.
fn value(input: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, Malformed> {
    let Some((line, next)) = line(input, at)? else { return Ok(None) };
    let Some((&kind, rest)) = line.split_first() else {
        return Err(malformed("an empty reply line"));
    };
    let reply = match kind {
        b'+' => Reply::Status(rest.to_vec()),
        b'-' => Reply::Error(String::from_utf8_lossy(rest).into_owned()),
        b':' => Reply::Int(parse_int(rest)?),
        b'$' => return bulk(input, next, rest),
        b'*' => return array(input, next, rest, depth),
        other => return Err(malformed(format!("an unknown reply type {:?}", char::from(other)))),
    };
    Ok(Some((reply, next)))
}

/// A bulk string of the length `digits` say, its payload at `at`.
fn bulk(input: &[u8], at: usize, digits: &[u8]) -> Result<Option<(Reply, usize)>, Malformed> {
    let Some(len) = parse_len(digits, MAX_BULK, "bulk string")? else {
        return Ok(Some((Reply::Bulk(None), at)));
    };
    // At most MAX_BULK: fits usize, and `at` lies within `input`.
    let end = at + len as usize;
    let Some(tail) = input.get(end..end + 2) else { return Ok(None) };
    if tail != b"\r\n" {
        return Err(malformed("a bulk string not ended by CRLF"));
    }
    Ok(Some((Reply::Bulk(Some(input[at..end].to_vec())), end + 2)))
}

/// An array of the length `digits` say, its first element at `at`.
fn array(
    input: &[u8],
    mut at: usize,
    digits: &[u8],
    depth: usize,
) -> Result<Option<(Reply, usize)>, Malformed> {
    if depth >= MAX_DEPTH {
        return Err(malformed("arrays nested too deeply"));
    }
    let Some(len) = parse_len(digits, MAX_ARRAY, "array")? else {
        return Ok(Some((Reply::Array(None), at)));
    };
    // Grows only as elements arrive: a false length costs nothing.
    let mut items = Vec::with_capacity(len.min(64) as usize);
    for _ in 0..len {
        let Some((item, next)) = value(input, at, depth + 1)? else { return Ok(None) };
        items.push(item);
        at = next;
    }
    Ok(Some((Reply::Array(Some(items)), at)))
}

/// Parses the signed decimal after a type byte.
fn parse_int(digits: &[u8]) -> Result<i64, Malformed> {
    std::str::from_utf8(digits)
        .ok()
        .filter(|s| !s.starts_with('+'))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            malformed(format!("{:?} is not an integer", String::from_utf8_lossy(digits)))
        })
}

/// Parses a bulk or array length: `-1` (nil) is `None`, others must lie in
/// `0..=limit`.
fn parse_len(digits: &[u8], limit: u64, what: &str) -> Result<Option<u64>, Malformed> {
    match parse_int(digits)? {
        -1 => Ok(None),
        n => match u64::try_from(n) {
            Ok(n) if n <= limit => Ok(Some(n)),
            _ => Err(malformed(format!("a {what} of {n} elements or bytes (limit {limit})"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Result<Reply, Malformed> {
        match decode(bytes)? {
            Some((reply, used)) if used == bytes.len() => Ok(reply),
            other => panic!("{other:?} from {:?}", String::from_utf8_lossy(bytes)),
        }
    }

    #[test]
    fn decodes_every_reply_type() {
        assert_eq!(whole(b"+OK\r\n").unwrap(), Reply::Status(b"OK".to_vec()));
        assert_eq!(whole(b":-42\r\n").unwrap(), Reply::Int(-42));
        assert_eq!(whole(b"$5\r\na\r\n\0b\r\n").unwrap(), Reply::Bulk(Some(b"a\r\n\0b".to_vec())));
        assert_eq!(whole(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(whole(b"*-1\r\n").unwrap(), Reply::Array(None));
        assert_eq!(whole(b"-ERR x\r\n").unwrap(), Reply::Error("ERR x".into()));
        let scan = whole(b"*2\r\n$1\r\n0\r\n*2\r\n$3\r\na:1\r\n-ERR x\r\n").unwrap();
        let items = vec![Reply::Bulk(Some(b"a:1".to_vec())), Reply::Error("ERR x".into())];
        assert_eq!(
            scan,
            Reply::Array(Some(vec![Reply::Bulk(Some(b"0".to_vec())), Reply::Array(Some(items))]))
        );
    }

    #[test]
    fn waits_for_every_byte_of_a_reply_and_takes_only_its_own() {
        let two = b"*2\r\n$3\r\nabc\r\n:7\r\n+NEXT\r\n";
        let first = two.len() - b"+NEXT\r\n".len();
        for cut in 0..first {
            assert_eq!(decode(&two[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (reply, used) = decode(two).unwrap().unwrap();
        assert_eq!(used, first);
        assert!(matches!(reply, Reply::Array(Some(items)) if items.len() == 2));
        // A claimed length the server never sends: more is awaited, nothing allocated.
        assert_eq!(decode(b"$1000000\r\nabc").unwrap(), None);
        assert_eq!(decode(b"*1000000\r\n:1\r\n").unwrap(), None);
    }

    #[test]
    fn rejects_malformed_and_oversized_replies() {
        for bad in [
            &b"?x\r\n"[..],
            b"\r\n",
            b":12a\r\n",
            b":+1\r\n",
            b":99999999999999999999\r\n",
            b"$-2\r\n",
            b"$9999999\r\n",
            b"*-5\r\n",
            b"*99999999\r\n",
            b"$1\r\nab\r\n",
            b"+OK\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let long_line = [b"+".as_slice(), &vec![b'a'; MAX_LINE + 10]].concat();
        assert!(decode(&long_line).unwrap_err().0.contains("longer than"));
        let longest = [b"+".as_slice(), &vec![b'a'; MAX_LINE - 1], b"\r\n"].concat();
        assert!(decode(&longest).unwrap().is_some());
    }

    #[test]
    fn a_bulk_head_fits_the_buffer() {
        assert_eq!(decode_bulk_head(b"$3\r\nxyz", 4).unwrap(), Some((BulkHead::Bytes(3), 4)));
        assert_eq!(decode_bulk_head(b"$0\r\n\r\n", 4).unwrap(), Some((BulkHead::Bytes(0), 4)));
        assert_eq!(decode_bulk_head(b"$3\r", 4).unwrap(), None);
        let error = decode_bulk_head(b"-ERR wrong\r\n", 4).unwrap();
        assert_eq!(error, Some((BulkHead::Error("ERR wrong".into()), 12)));
        assert!(decode_bulk_head(b"$5\r\nabcde\r\n", 4).unwrap_err().0.contains("at most 4"));
        assert!(decode_bulk_head(b"$4611686018427387903\r\n", 4).is_err());
        assert!(decode_bulk_head(b"$-1\r\n", 4).unwrap_err().0.contains("nil"));
        assert!(decode_bulk_head(b"+OK\r\n", 4).is_err());
    }
}
