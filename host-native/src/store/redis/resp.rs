//! A minimal, binary-safe RESP2 client over one connection (TCP, or TLS
//! over it: [`super::access`]).
//!
//! Commands go out as arrays of bulk strings, queued in a buffer and written
//! with one call (so pipelining is just queueing several). Replies are parsed
//! with hard limits: a reply can make us allocate only what it has actually
//! sent (bulk strings grow as bytes arrive) and never more than the limits
//! below, and a bulk reply meant for a caller's buffer is read straight into
//! it and must not be longer than what was asked for.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::access::{Access, Stream};
use super::fault::Fault;
use crate::store::retry::{Pace, Paced};

/// Longest status, error or length line accepted.
const MAX_LINE: usize = 64 << 10;

/// Longest bulk string accepted in a reply not read into a caller's buffer
/// (key names, SCAN cursors).
const MAX_BULK: u64 = 1 << 20;

/// Most elements accepted in one array reply.
const MAX_ARRAY: u64 = 1 << 20;

/// Deepest array nesting accepted (SCAN and EXEC need two levels).
const MAX_DEPTH: usize = 4;

/// Queued bytes written directly instead of being copied into the queue.
const DIRECT_WRITE: usize = 64 << 10;

/// A parsed reply. Error replies nested in arrays (EXEC results) stay
/// replies; a top-level error reply becomes [`Fault::Server`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK` and friends.
    Status(Vec<u8>),
    /// `-ERR ...` inside an array.
    Error(String),
    /// `:123`.
    Int(i64),
    /// `$n` payload, `None` for `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*n` elements, `None` for `*-1`.
    Array(Option<Vec<Self>>),
}

fn protocol(what: impl Into<String>) -> Fault {
    Fault::Protocol(what.into())
}

/// One connection with a queue of commands not yet written. Replies are
/// read through a [`Pace`] (none until [`Conn::pace`] sets one).
pub(crate) struct Conn {
    stream: BufReader<Paced<Stream>>,
    queued: Vec<u8>,
    io_timeout: Duration,
}

impl Conn {
    /// Connects to `host:port`, trying each address, with `connect_timeout`
    /// per address and `io_timeout` on every later socket read and write;
    /// then speaks TLS and authenticates as `access` says.
    pub(crate) fn connect(
        host: &str,
        port: u16,
        connect_timeout: Duration,
        io_timeout: Duration,
        access: &Access,
    ) -> Result<Self, Fault> {
        let mut last =
            io::Error::new(io::ErrorKind::NotFound, format!("{host} resolves to no address"));
        for addr in (host, port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, connect_timeout) {
                Ok(s) => {
                    s.set_read_timeout(Some(io_timeout))?;
                    s.set_write_timeout(Some(io_timeout))?;
                    s.set_nodelay(true)?;
                    let inner = access.wrap(host, s)?;
                    let stream =
                        BufReader::with_capacity(64 << 10, Paced { inner, pace: Pace::off() });
                    let mut conn = Self { stream, queued: Vec::new(), io_timeout };
                    conn.authenticate(access)?;
                    return Ok(conn);
                }
                Err(e) => last = e,
            }
        }
        Err(Fault::Io(last))
    }

    /// Sends `AUTH` when `access` has credentials; a refusal is
    /// [`Fault::Denied`].
    fn authenticate(&mut self, access: &Access) -> Result<(), Fault> {
        let Some((user, password)) = access.credentials() else { return Ok(()) };
        let reply = match user {
            Some(user) => self.call(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
            None => self.call(&[b"AUTH", password.as_bytes()]),
        };
        match reply {
            Ok(_) => Ok(()),
            // The server's words, which never repeat the password.
            Err(Fault::Server(m)) => Err(Fault::Denied(m)),
            Err(other) => Err(other),
        }
    }

    /// Measures the replies read from now on against `pace` (one request),
    /// with the socket timeouts shortened to the time it has left.
    pub(crate) fn pace(&mut self, pace: Pace) -> Result<(), Fault> {
        let timeout = Some(pace.io_timeout(self.io_timeout));
        let paced = self.stream.get_mut();
        paced.inner.tcp().set_read_timeout(timeout)?;
        paced.inner.tcp().set_write_timeout(timeout)?;
        paced.pace = pace;
        Ok(())
    }

    /// Queues the start of a command of `args` arguments.
    pub(crate) fn start(&mut self, args: usize) {
        self.queued.push(b'*');
        self.queued.extend_from_slice(args.to_string().as_bytes());
        self.queued.extend_from_slice(b"\r\n");
    }

    /// Queues one whole argument.
    pub(crate) fn arg(&mut self, arg: &[u8]) {
        self.arg_header(arg.len() as u64);
        self.queued.extend_from_slice(arg);
        self.queued.extend_from_slice(b"\r\n");
    }

    /// Queues the length line of an argument whose `len` bytes follow with
    /// [`Conn::raw`] and then [`Conn::end_arg`].
    pub(crate) fn arg_header(&mut self, len: u64) {
        self.queued.push(b'$');
        self.queued.extend_from_slice(len.to_string().as_bytes());
        self.queued.extend_from_slice(b"\r\n");
    }

    /// Sends argument bytes announced by [`Conn::arg_header`]; large pieces
    /// go to the socket without being copied into the queue.
    pub(crate) fn raw(&mut self, bytes: &[u8]) -> Result<(), Fault> {
        if bytes.len() < DIRECT_WRITE {
            self.queued.extend_from_slice(bytes);
            return Ok(());
        }
        self.flush()?;
        self.stream.get_mut().inner.write_all(bytes)?;
        Ok(())
    }

    /// Ends an argument sent with [`Conn::raw`].
    pub(crate) fn end_arg(&mut self) {
        self.queued.extend_from_slice(b"\r\n");
    }

    /// Queues a whole command.
    pub(crate) fn command(&mut self, args: &[&[u8]]) {
        self.start(args.len());
        for a in args {
            self.arg(a);
        }
    }

    /// Writes everything queued.
    pub(crate) fn flush(&mut self) -> Result<(), Fault> {
        if !self.queued.is_empty() {
            let result = self.stream.get_mut().inner.write_all(&self.queued);
            self.queued.clear();
            result?;
        }
        Ok(())
    }

    /// Sends one command and reads its reply.
    pub(crate) fn call(&mut self, args: &[&[u8]]) -> Result<Reply, Fault> {
        self.command(args);
        self.flush()?;
        self.reply()
    }

    /// Reads the next reply; an error reply is `Err(Fault::Server)`.
    pub(crate) fn reply(&mut self) -> Result<Reply, Fault> {
        read_reply(&mut self.stream)
    }

    /// Reads the next reply, which must be a bulk string of at most
    /// `buf.len()` bytes, into `buf`; returns its length.
    pub(crate) fn bulk_into(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        read_bulk_into(&mut self.stream, buf)
    }
}

/// Reads one `\r\n`-terminated line (without the terminator), at most
/// [`MAX_LINE`] bytes.
fn read_line(r: &mut impl BufRead) -> Result<Vec<u8>, Fault> {
    let mut line = Vec::new();
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if available.is_empty() {
            return Err(Fault::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )));
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        line.extend_from_slice(&available[..take]);
        r.consume(take);
        if line.len() > MAX_LINE + 2 {
            return Err(protocol(format!("a reply line longer than {MAX_LINE} bytes")));
        }
        if done {
            break;
        }
    }
    match line.strip_suffix(b"\r\n") {
        Some(body) => Ok(body.to_vec()),
        None => Err(protocol("a reply line not ended by CRLF")),
    }
}

/// Parses the signed decimal after a type byte.
fn parse_int(digits: &[u8]) -> Result<i64, Fault> {
    std::str::from_utf8(digits)
        .ok()
        .filter(|s| !s.starts_with('+'))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol(format!("{:?} is not an integer", String::from_utf8_lossy(digits))))
}

/// Parses a bulk or array length: `-1` (nil) is `None`, others must lie in
/// `0..=limit`.
fn parse_len(digits: &[u8], limit: u64, what: &str) -> Result<Option<u64>, Fault> {
    match parse_int(digits)? {
        -1 => Ok(None),
        n => match u64::try_from(n) {
            Ok(n) if n <= limit => Ok(Some(n)),
            _ => Err(protocol(format!("a {what} of {n} elements or bytes (limit {limit})"))),
        },
    }
}

/// `read_exact`, with an end of stream said as what it is here.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<(), Fault> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            let why = "the server closed the connection in the middle of a reply";
            Fault::Io(io::Error::new(io::ErrorKind::UnexpectedEof, why))
        }
        _ => Fault::from(e),
    })
}

fn expect_crlf(r: &mut impl Read) -> Result<(), Fault> {
    let mut end = [0u8; 2];
    read_full(r, &mut end)?;
    if &end != b"\r\n" {
        return Err(protocol("a bulk string not ended by CRLF"));
    }
    Ok(())
}

/// Reads one reply; a top-level error reply is `Err(Fault::Server)`.
pub(crate) fn read_reply(r: &mut impl BufRead) -> Result<Reply, Fault> {
    match read_value(r, 0)? {
        Reply::Error(m) if ["WRONGPASS", "NOAUTH", "NOPERM"].iter().any(|p| m.starts_with(p)) => {
            Err(Fault::Denied(m))
        }
        Reply::Error(m) => Err(Fault::Server(m)),
        reply => Ok(reply),
    }
}

fn read_value(r: &mut impl BufRead, depth: usize) -> Result<Reply, Fault> {
    let line = read_line(r)?;
    let Some((&kind, rest)) = line.split_first() else {
        return Err(protocol("an empty reply line"));
    };
    match kind {
        b'+' => Ok(Reply::Status(rest.to_vec())),
        b'-' => Ok(Reply::Error(String::from_utf8_lossy(rest).into_owned())),
        b':' => Ok(Reply::Int(parse_int(rest)?)),
        b'$' => {
            let Some(len) = parse_len(rest, MAX_BULK, "bulk string")? else {
                return Ok(Reply::Bulk(None));
            };
            // Grows only as bytes arrive: a false length costs nothing.
            let mut payload = Vec::new();
            r.take(len).read_to_end(&mut payload)?;
            if payload.len() as u64 != len {
                return Err(Fault::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection inside a reply",
                )));
            }
            expect_crlf(r)?;
            Ok(Reply::Bulk(Some(payload)))
        }
        b'*' => {
            if depth >= MAX_DEPTH {
                return Err(protocol("arrays nested too deeply"));
            }
            let Some(len) = parse_len(rest, MAX_ARRAY, "array")? else {
                return Ok(Reply::Array(None));
            };
            let mut items = Vec::with_capacity(len.min(64) as usize);
            for _ in 0..len {
                items.push(read_value(r, depth + 1)?);
            }
            Ok(Reply::Array(Some(items)))
        }
        other => Err(protocol(format!("an unknown reply type {:?}", char::from(other)))),
    }
}

/// Reads a bulk reply of at most `buf.len()` bytes into `buf`.
pub(crate) fn read_bulk_into(r: &mut impl BufRead, buf: &mut [u8]) -> Result<usize, Fault> {
    let line = read_line(r)?;
    match line.split_first() {
        Some((b'$', rest)) => {
            let Some(len) = parse_len(rest, u64::MAX >> 1, "bulk string")? else {
                return Err(protocol("a nil reply where bytes were expected"));
            };
            let Some(dest) = usize::try_from(len).ok().and_then(|n| buf.get_mut(..n)) else {
                return Err(protocol(format!(
                    "a bulk reply of {len} bytes where at most {} were asked for",
                    buf.len()
                )));
            };
            read_full(r, dest)?;
            expect_crlf(r)?;
            Ok(dest.len())
        }
        Some((b'-', rest)) => Err(Fault::Server(String::from_utf8_lossy(rest).into_owned())),
        _ => Err(protocol(format!(
            "{:?} where a bulk reply was expected",
            String::from_utf8_lossy(&line)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    fn parse(bytes: &[u8]) -> Result<Reply, Fault> {
        read_reply(&mut Cursor::new(bytes))
    }

    #[test]
    fn parses_every_reply_type() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Status(b"OK".to_vec()));
        assert_eq!(parse(b":-42\r\n").unwrap(), Reply::Int(-42));
        assert_eq!(parse(b"$5\r\na\r\n\0b\r\n").unwrap(), Reply::Bulk(Some(b"a\r\n\0b".to_vec())));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(parse(b"*-1\r\n").unwrap(), Reply::Array(None));
        let scan = parse(b"*2\r\n$1\r\n0\r\n*2\r\n$3\r\na:1\r\n-ERR x\r\n").unwrap();
        let items = vec![Reply::Bulk(Some(b"a:1".to_vec())), Reply::Error("ERR x".into())];
        assert_eq!(
            scan,
            Reply::Array(Some(vec![Reply::Bulk(Some(b"0".to_vec())), Reply::Array(Some(items))]))
        );
        assert!(
            matches!(parse(b"-LOADING wait\r\n"), Err(f @ Fault::Server(_)) if f.is_transient())
        );
        assert!(matches!(parse(b"-ERR no\r\n"), Err(f @ Fault::Server(_)) if !f.is_transient()));
    }

    #[test]
    fn rejects_malformed_and_oversized_replies() {
        for bad in [
            &b"?x\r\n"[..],
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
            assert!(
                matches!(parse(bad), Err(Fault::Protocol(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // A claimed length the server never sends: an early end, not a big allocation.
        assert!(
            matches!(parse(b"$1000000\r\nabc"), Err(Fault::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof)
        );
        assert!(matches!(parse(b"+OK"), Err(Fault::Io(_))));
        let long_line = [b"+".as_slice(), &vec![b'a'; MAX_LINE + 10], b"\r\n"].concat();
        assert!(matches!(parse(&long_line), Err(Fault::Protocol(_))));
    }

    #[test]
    fn bulk_into_reads_into_the_buffer_and_refuses_more_than_asked() {
        let mut buf = [0u8; 4];
        assert_eq!(read_bulk_into(&mut Cursor::new(b"$3\r\nxyz\r\n"), &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"xyz");
        assert_eq!(read_bulk_into(&mut Cursor::new(b"$0\r\n\r\n"), &mut buf).unwrap(), 0);
        let too_long = read_bulk_into(&mut Cursor::new(b"$5\r\nabcde\r\n"), &mut buf);
        assert!(matches!(too_long, Err(Fault::Protocol(m)) if m.contains("at most 4")));
        let huge = read_bulk_into(&mut Cursor::new(b"$4611686018427387903\r\n"), &mut buf);
        assert!(matches!(huge, Err(Fault::Protocol(_))));
        assert!(matches!(
            read_bulk_into(&mut Cursor::new(b"$-1\r\n"), &mut buf),
            Err(Fault::Protocol(_))
        ));
        assert!(matches!(
            read_bulk_into(&mut Cursor::new(b"-ERR wrong\r\n"), &mut buf),
            Err(Fault::Server(_))
        ));
        assert!(matches!(
            read_bulk_into(&mut Cursor::new(b"$4\r\nab"), &mut buf),
            Err(Fault::Io(_))
        ));
    }
}
