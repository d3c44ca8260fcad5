//! A minimal, binary-safe RESP2 client over one connection (TCP, or TLS
//! over it: [`super::access`]), doing the I/O for [`crate::store::resp`].
//!
//! Commands go out as arrays of bulk strings, queued in a buffer and written
//! with one call (so pipelining is just queueing several). Replies are read
//! into a buffer that grows only as bytes arrive and decoded from it; a bulk
//! reply meant for a caller's buffer is read straight into it (past what was
//! already buffered) and must not be longer than what was asked for.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::access::{Access, Stream};
use super::fault::Fault;
pub(crate) use crate::store::resp::Reply;
use crate::store::resp::{BulkHead, Malformed, decode, decode_bulk_head};
use crate::store::retry::{Pace, Paced};

/// Queued bytes written directly instead of being copied into the queue.
const DIRECT_WRITE: usize = 64 << 10;

/// Fewest bytes asked of the socket at once (more once more is buffered,
/// so a long reply is decoded again only as often as its size doubles).
const READ_CHUNK: usize = 64 << 10;

impl From<Malformed> for Fault {
    fn from(m: Malformed) -> Self {
        Self::Protocol(m.0)
    }
}

fn protocol(what: impl Into<String>) -> Fault {
    Fault::Protocol(what.into())
}

/// One connection with a queue of commands not yet written and the bytes
/// received but not yet decoded (`input[start..]`). Replies are read
/// through a [`Pace`] (none until [`Conn::pace`] sets one).
pub(crate) struct Conn {
    stream: Paced<Stream>,
    input: Vec<u8>,
    start: usize,
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
                    let mut conn = Self {
                        stream: Paced { inner, pace: Pace::off() },
                        input: Vec::new(),
                        start: 0,
                        queued: Vec::new(),
                        io_timeout,
                    };
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
        let paced = &mut self.stream;
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
        self.stream.inner.write_all(bytes)?;
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
            let result = self.stream.inner.write_all(&self.queued);
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

    /// Reads the next reply; a top-level error reply is
    /// `Err(Fault::Server)`, or `Err(Fault::Denied)` for a refusal of
    /// access.
    pub(crate) fn reply(&mut self) -> Result<Reply, Fault> {
        let reply = loop {
            if let Some((reply, used)) = decode(&self.input[self.start..])? {
                self.start += used;
                break reply;
            }
            self.receive()?;
        };
        match reply {
            Reply::Error(m)
                if ["WRONGPASS", "NOAUTH", "NOPERM"].iter().any(|p| m.starts_with(p)) =>
            {
                Err(Fault::Denied(m))
            }
            Reply::Error(m) => Err(Fault::Server(m)),
            reply => Ok(reply),
        }
    }

    /// Reads the next reply, which must be a bulk string of at most
    /// `buf.len()` bytes, into `buf`; returns its length.
    pub(crate) fn bulk_into(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        let head = loop {
            if let Some((head, used)) = decode_bulk_head(&self.input[self.start..], buf.len())? {
                self.start += used;
                break head;
            }
            self.receive()?;
        };
        let n = match head {
            BulkHead::Bytes(n) => n,
            BulkHead::Error(m) => return Err(Fault::Server(m)),
        };
        let have = (self.input.len() - self.start).min(n);
        buf[..have].copy_from_slice(&self.input[self.start..self.start + have]);
        self.start += have;
        if have < n {
            read_full(&mut self.stream, &mut buf[have..n])?;
        }
        while self.input.len() - self.start < 2 {
            self.receive()?;
        }
        if &self.input[self.start..self.start + 2] != b"\r\n" {
            return Err(protocol("a bulk string not ended by CRLF"));
        }
        self.start += 2;
        Ok(n)
    }

    /// Reads what the socket has (at least a byte) onto the end of the
    /// input, dropping the bytes already decoded first.
    fn receive(&mut self) -> Result<(), Fault> {
        self.input.drain(..self.start);
        self.start = 0;
        let old = self.input.len();
        self.input.resize(old + old.max(READ_CHUNK), 0);
        let got = loop {
            match self.stream.read(&mut self.input[old..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        self.input.truncate(old + *got.as_ref().unwrap_or(&0));
        match got? {
            0 => Err(closed(old > 0)),
            _ => Ok(()),
        }
    }
}

/// The end of the stream, inside a reply or before one.
fn closed(inside: bool) -> Fault {
    let why = match inside {
        true => "the server closed the connection in the middle of a reply",
        false => "the server closed the connection",
    };
    Fault::Io(io::Error::new(io::ErrorKind::UnexpectedEof, why))
}

/// `read_exact`, with an end of stream said as what it is here.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<(), Fault> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => closed(true),
        _ => Fault::from(e),
    })
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;
    use crate::store::location::RedisTarget;
    use crate::store::tls::TlsOptions;

    /// A connection to a server that sends `bytes` (in pieces of `piece`
    /// bytes) and closes.
    fn serving(bytes: &'static [u8], piece: usize) -> Conn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            for part in bytes.chunks(piece) {
                let _ = s.write_all(part);
                let _ = s.flush();
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let target = RedisTarget::parse(&format!("redis://127.0.0.1:{port}/p")).unwrap();
        let access = Access::for_target(&target, &TlsOptions::default()).unwrap();
        let t = Duration::from_secs(5);
        Conn::connect("127.0.0.1", port, t, t, &access).unwrap()
    }

    #[test]
    fn replies_map_errors_and_refusals() {
        let mut c =
            serving(b"+OK\r\n-LOADING wait\r\n-ERR no\r\n-NOAUTH x\r\n*1\r\n$1\r\na\r\n", 3);
        assert_eq!(c.reply().unwrap(), Reply::Status(b"OK".to_vec()));
        assert!(matches!(c.reply(), Err(f @ Fault::Server(_)) if f.is_transient()));
        assert!(matches!(c.reply(), Err(f @ Fault::Server(_)) if !f.is_transient()));
        assert!(matches!(c.reply(), Err(Fault::Denied(_))));
        assert_eq!(c.reply().unwrap(), Reply::Array(Some(vec![Reply::Bulk(Some(b"a".to_vec()))])));
        let end = c.reply().unwrap_err().to_string();
        assert!(end.ends_with("the server closed the connection"), "{end}");
    }

    #[test]
    fn bulk_into_reads_into_the_buffer_and_refuses_more_than_asked() {
        let body: &'static [u8] = b"$3\r\nxyz\r\n$0\r\n\r\n-ERR wrong\r\n$5\r\nabcde\r\n";
        for piece in [1, 4, 64] {
            let mut c = serving(body, piece);
            let mut buf = [0u8; 4];
            assert_eq!(c.bulk_into(&mut buf).unwrap(), 3);
            assert_eq!(&buf[..3], b"xyz");
            assert_eq!(c.bulk_into(&mut buf).unwrap(), 0);
            assert!(matches!(c.bulk_into(&mut buf), Err(Fault::Server(_))));
            let too_long = c.bulk_into(&mut buf);
            assert!(matches!(too_long, Err(Fault::Protocol(m)) if m.contains("at most 4")));
        }
    }

    #[test]
    fn a_reply_cut_short_is_an_early_end() {
        let mut buf = [0u8; 8];
        let cut = serving(b"$4\r\nab", 64).bulk_into(&mut buf).unwrap_err().to_string();
        assert!(cut.contains("in the middle of a reply"), "{cut}");
        // A claimed length the server never sends: an early end, not a big allocation.
        let cut = serving(b"$1000000\r\nabc", 64).reply().unwrap_err().to_string();
        assert!(cut.contains("in the middle of a reply"), "{cut}");
        let bad = serving(b"$2\r\nabXY", 64).bulk_into(&mut buf);
        assert!(matches!(bad, Err(Fault::Protocol(_))));
    }

    #[test]
    fn a_large_bulk_reply_is_read_past_the_buffered_bytes() {
        static BODY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let body = BODY.get_or_init(|| {
            let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
            [format!("${}\r\n", payload.len()).as_bytes(), &payload, b"\r\n:5\r\n"].concat()
        });
        let mut c = serving(body, 100_000);
        let mut buf = vec![0u8; 300_000];
        assert_eq!(c.bulk_into(&mut buf).unwrap(), 300_000);
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        assert_eq!(c.reply().unwrap(), Reply::Int(5));
    }
}
