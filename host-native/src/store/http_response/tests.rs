use super::*;

const OK: &[u8] = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/10\r\n\
ETag: \"e1\" \r\nContent-Length: 5\r\nServer: x\r\n\r\nhello";

/// The first definite answer when `input` arrives in reads ending at
/// `ends` (ascending), then the rest.
fn fed(input: &[u8], ends: &[usize]) -> Result<Option<Head>, Refused> {
    for &end in ends.iter().chain([&input.len()]) {
        let answer = decode_head(&input[..end]);
        if answer != Ok(None) {
            return answer;
        }
    }
    Ok(None)
}

#[test]
fn decodes_a_partial_content_head() {
    let head = decode_head(OK).unwrap().unwrap();
    assert_eq!(head.status, 206);
    assert_eq!(head.header("content-range"), Some("bytes 0-4/10"));
    assert_eq!(head.header("etag"), Some("\"e1\""));
    assert_eq!(head.header("server"), None, "only the kept headers");
    assert_eq!((head.length, head.keep_alive), (5, true));
    assert_eq!(&OK[head.used..], b"hello");
    for end in 0..head.used {
        assert_eq!(decode_head(&OK[..end]), Ok(None), "prefix of {end} bytes");
    }
}

#[test]
fn same_answer_whatever_the_read_boundaries() {
    let cases: [&[u8]; 7] = [
        OK,
        b"HTTP/1.1 206 P\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
        b"HTTP/1.1 206 P\r\n\r\nabc",
        b"HTTP/1.1 206 P\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 206 P\r\nContent-Le",
    ];
    for input in cases {
        let whole = decode_head(input);
        for cut in 0..=input.len() {
            assert_eq!(fed(input, &[cut]), whole, "{cut}");
        }
        let every: Vec<usize> = (0..input.len()).collect();
        assert_eq!(fed(input, &every), whole);
    }
}

#[test]
fn refuses_what_the_direct_client_does_not_frame() {
    let refused = |input: &[u8]| decode_head(input).unwrap_err();
    assert_eq!(refused(b"HTTP/1.1 206 P\r\nTransfer-Encoding: chunked\r\n\r\n"), Refused::Chunked);
    assert_eq!(refused(b"HTTP/1.1 206 P\r\n\r\nabc"), Refused::NoLength);
    for length in ["-1", "+5", "1 2", "0x10", "", "18446744073709551616", "5,5"] {
        let input = format!("HTTP/1.1 206 P\r\nContent-Length: {length}\r\n\r\n");
        assert_eq!(refused(input.as_bytes()), Refused::BadLength, "{length:?}");
    }
    let twice = b"HTTP/1.1 206 P\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(refused(twice), Refused::BadLength);
    assert!(matches!(refused(b"SSH-2.0-OpenSSH\r\n\r\n"), Refused::Malformed(_)));
}

#[test]
fn takes_the_largest_lengths_and_repeated_equal_ones() {
    let max = b"HTTP/1.1 206 P\r\nContent-Length:  18446744073709551615 \r\n\r\n";
    assert_eq!(decode_head(max).unwrap().unwrap().length, u64::MAX);
    let twice = b"HTTP/1.1 206 P\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n";
    assert_eq!(decode_head(twice).unwrap().unwrap().length, 3);
}

#[test]
fn limits_the_head() {
    let long = [&b"HTTP/1.1 206 P\r\nX-Pad: "[..], &[b'a'; MAX_HEAD]].concat();
    assert_eq!(decode_head(&long[..MAX_HEAD - 1]), Ok(None));
    assert_eq!(decode_head(&long[..MAX_HEAD]), Err(Refused::TooLong));
    assert_eq!(decode_head(&long), Err(Refused::TooLong));
    let head = |n| {
        [&b"HTTP/1.1 206 P\r\n"[..], &b"A: b\r\n".repeat(n), b"Content-Length: 0\r\n\r\n"].concat()
    };
    assert!(decode_head(&head(MAX_HEADERS - 1)).unwrap().is_some());
    assert_eq!(decode_head(&head(MAX_HEADERS)), Err(Refused::TooManyHeaders));
}

#[test]
fn keeps_alive_only_http11_without_close_and_without_extra_bytes() {
    let keep = |input: &[u8]| decode_head(input).unwrap().unwrap().keep_alive;
    assert!(keep(b"HTTP/1.1 206 P\r\nContent-Length: 2\r\n\r\n"));
    assert!(!keep(b"HTTP/1.1 206 P\r\nConnection: Close\r\nContent-Length: 2\r\n\r\n"));
    assert!(!keep(b"HTTP/1.0 206 P\r\nContent-Length: 2\r\n\r\n"));
    let head = decode_head(b"HTTP/1.1 206 P\r\nContent-Length: 2\r\n\r\n").unwrap().unwrap();
    assert!(head.reusable(0) && head.reusable(2) && !head.reusable(3));
}

#[test]
fn framing_never_passes_the_declared_length() {
    let mut body = Framing::new(5);
    assert_eq!(body.room(3), 3);
    assert_eq!(body.took(3), Ok(3));
    assert_eq!(body.room(100), 2);
    assert_eq!(body.took(3), Err(BodyError::Overrun));
    assert_eq!(body.took(2), Ok(2));
    assert_eq!((body.remaining(), body.room(100), body.took(0)), (0, 0, Ok(0)));
    let mut short = Framing::new(4);
    assert_eq!(short.took(1), Ok(1));
    assert_eq!(short.took(0), Err(BodyError::Short(3)));
    assert_eq!(Framing::new(u64::MAX).room(usize::MAX), usize::MAX);
}
