//! Real servers for the remote-source tests, started on 127.0.0.1 by the
//! tests themselves: nginx serving a directory with Range support, a small
//! fault-injecting TCP proxy in front of it, and an origin with framing
//! nginx never uses.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Finds a binary, or explains why the test cannot run. With
/// `TZR_REQUIRE_SERVERS=1` (set by tests/run-all.sh) a missing server fails.
pub(crate) fn binary(name: &str, candidates: &[&str]) -> Option<PathBuf> {
    let found = candidates.iter().map(PathBuf::from).find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var("TZR_REQUIRE_SERVERS").is_err(),
            "{name} is required (install it: apt-get install {name})"
        );
        eprintln!("SKIPPED: {name} is not installed");
    }
    found
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap()
}

/// nginx serving `root` on a loopback port; stopped on drop.
pub(crate) struct Nginx {
    child: Child,
    pub(crate) port: u16,
    _dir: tempfile::TempDir,
}

impl Nginx {
    pub(crate) fn serve(root: &Path) -> Option<Self> {
        Self::serve_block(&|port| {
            format!("listen 127.0.0.1:{port}; root {}; location / {{ }}", root.display())
        })
    }

    /// nginx with one `server { … }` block, `block(port)` inside the braces.
    pub(crate) fn serve_block(block: &dyn Fn(u16) -> String) -> Option<Self> {
        let bin = binary("nginx", &["/usr/sbin/nginx", "/usr/bin/nginx"])?;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{ worker_connections 256; }}\n\
             http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n\
                     uwsgi_temp_path {d}; scgi_temp_path {d}; sendfile on; keepalive_requests 10000;\n\
               server {{ {block} }} }}\n",
            d = dir.path().display(),
            block = block(port),
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child =
            Command::new(bin).arg("-c").arg(&conf_path).arg("-p").arg(dir.path()).spawn().unwrap();
        // Owned from here on: dropping `server` kills and reaps nginx.
        let server = Self { child, port, _dir: dir };
        for _ in 0..100 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("nginx did not start on port {port}");
    }

    pub(crate) fn url(&self, file: &str) -> String {
        format!("http://127.0.0.1:{}/{file}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the proxy does to connection number `n` (counting from 0).
#[derive(Clone, Copy)]
pub(crate) enum Fault {
    /// Relay everything untouched.
    Pass,
    /// Answer every other connection with `503` without asking upstream.
    Status503,
    /// Answer every connection but the first with `503`.
    Status503AfterFirst,
    /// Answer every connection with `503`.
    Status503Always,
    /// Cut the first connection after this many response bytes.
    ResetFirstAfter(usize),
    /// Cut every third connection after this many response bytes.
    ResetAfter(usize),
    /// Cut every connection after this many response bytes.
    ResetEachAfter(usize),
    /// Hold every other connection silent after this many response bytes.
    StallAfter(usize),
    /// Hold the first connection silent after this many response bytes.
    StallFirstAfter(usize),
    /// Hold every connection silent after this many response bytes.
    StallEachAfter(usize),
    /// Answer the first this many connections with `503`, relay the rest.
    Status503First(usize),
    /// Relay the first `after` response bytes of every connection at once,
    /// then `chunk` bytes every `gap_ms` milliseconds: slow, but moving.
    Trickle { after: usize, chunk: usize, gap_ms: u64 },
    /// Relay every connection `chunk` bytes every `gap_ms` milliseconds
    /// from its first byte, and cut it after `reset` response bytes.
    TrickleThenReset { chunk: usize, gap_ms: u64, reset: usize },
    /// Lose the first `times` S3 `CompleteMultipartUpload` exchanges: pass
    /// the request on (if `forward`: the upload completes) but close the
    /// connection instead of returning the reply.
    LoseCompletion { forward: bool, times: usize },
}

/// A TCP proxy to `upstream` that injects `fault`; stopped on drop.
pub(crate) struct FaultProxy {
    pub(crate) port: u16,
    stop: Arc<AtomicBool>,
    pub(crate) connections: Arc<AtomicUsize>,
    /// Exchanges lost by [`Fault::LoseCompletion`].
    pub(crate) dropped: Arc<AtomicUsize>,
}

impl FaultProxy {
    pub(crate) fn start(upstream: u16, fault: Fault) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (s, c, d) = (stop.clone(), connections.clone(), dropped.clone());
        std::thread::spawn(move || {
            // Bounded: the proxy exits when dropped, and handles at most 10,000 connections.
            while !s.load(Ordering::Relaxed) && c.load(Ordering::Relaxed) < 10_000 {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let n = c.fetch_add(1, Ordering::Relaxed);
                        let (stop, d) = (s.clone(), d.clone());
                        std::thread::spawn(move || match fault {
                            Fault::LoseCompletion { forward, times } => {
                                lose_completions(client, upstream, forward, times, &d)
                            }
                            _ => handle(client, upstream, fault, n, stop),
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self { port, stop, connections, dropped }
    }

    pub(crate) fn url(&self, file: &str) -> String {
        format!("http://127.0.0.1:{}/{file}", self.port)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn handle(mut client: TcpStream, upstream: u16, fault: Fault, n: usize, stop: Arc<AtomicBool>) {
    if matches!((fault, n % 2), (Fault::Status503, 1))
        || matches!((fault, n), (Fault::Status503AfterFirst, 1..))
        || matches!(fault, Fault::Status503Always)
        || matches!(fault, Fault::Status503First(first) if n < first)
    {
        let mut buf = [0u8; 4096];
        let _ = client.read(&mut buf);
        let _ = client.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
    let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut s2);
        let _ = s2.shutdown(Shutdown::Write);
    });
    let limit = match fault {
        Fault::ResetAfter(bytes) if n % 3 == 1 => Some((bytes, false)),
        Fault::ResetFirstAfter(bytes) if n == 0 => Some((bytes, false)),
        Fault::ResetEachAfter(bytes) => Some((bytes, false)),
        Fault::StallAfter(bytes) if n % 2 == 1 => Some((bytes, true)),
        Fault::StallFirstAfter(bytes) if n == 0 => Some((bytes, true)),
        Fault::StallEachAfter(bytes) => Some((bytes, true)),
        Fault::TrickleThenReset { reset, .. } => Some((reset, false)),
        _ => None,
    };
    let mut server = server;
    let mut sent = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(k) = server.read(&mut buf) {
        if k == 0 {
            break;
        }
        let k = match limit {
            Some((max, _)) if sent + k > max => max - sent,
            _ => k,
        };
        if relay(&mut client, &buf[..k], sent, fault, &stop).is_err() {
            break;
        }
        sent += k;
        if let Some((max, stall)) = limit
            && sent >= max
        {
            if stall {
                // Hold the connection open and silent until the test ends.
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

/// Writes `data`, the response bytes after the first `sent`, to `client`:
/// at once, or in drips ([`Fault::Trickle`] past its `after`,
/// [`Fault::TrickleThenReset`]).
fn relay(
    client: &mut TcpStream,
    data: &[u8],
    sent: usize,
    fault: Fault,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let (after, chunk, gap_ms) = match fault {
        Fault::Trickle { after, chunk, gap_ms } => (after, chunk, gap_ms),
        Fault::TrickleThenReset { chunk, gap_ms, .. } => (0, chunk, gap_ms),
        _ => return client.write_all(data),
    };
    let fast = after.saturating_sub(sent).min(data.len());
    client.write_all(&data[..fast])?;
    for piece in data[fast..].chunks(chunk.max(1)) {
        if stop.load(Ordering::Relaxed) {
            return Err(std::io::ErrorKind::ConnectionAborted.into());
        }
        client.write_all(piece)?;
        std::thread::sleep(Duration::from_millis(gap_ms));
    }
    Ok(())
}

/// Relays HTTP/1.1 exchanges one at a time, each over a new upstream
/// connection asked to close after its reply (so the reply is read to its
/// end), and closes the client's connection instead of relaying the reply
/// to the first `times` `CompleteMultipartUpload` requests (`POST
/// ?uploadId=`), which it passes on only if `forward`.
fn lose_completions(
    mut client: TcpStream,
    upstream: u16,
    forward: bool,
    times: usize,
    lost: &AtomicUsize,
) {
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut byte = [0u8; 1];
    loop {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            match client.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        let length = text
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
            })
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if client.read_exact(&mut body).is_err() {
            return;
        }
        let request_line = text.lines().next().unwrap_or_default();
        let completion = request_line.starts_with("POST ")
            && request_line.contains("uploadId=")
            && !request_line.contains("partNumber=");
        let lose = completion && lost.fetch_add(1, Ordering::Relaxed) < times;
        if lose && !forward {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
        let mut forwarded = head[..head.len() - 2].to_vec();
        forwarded.extend_from_slice(b"Connection: close\r\n\r\n");
        forwarded.extend_from_slice(&body);
        let mut reply = Vec::new();
        if server.write_all(&forwarded).and_then(|()| server.read_to_end(&mut reply)).is_err() {
            return;
        }
        if lose {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        if client.write_all(&reply).is_err() {
            return;
        }
    }
}

/// How [`OddOrigin`] frames its range responses.
#[derive(Clone, Copy)]
pub(crate) enum Framing {
    /// `Transfer-Encoding: chunked` on every response, connections kept.
    Chunked,
    /// `Content-Length`, connections kept (as nginx does).
    Plain,
    /// As `Plain`, but a request for the whole object (`bytes=0-`) gets
    /// `200` and all of it, as some servers do.
    WholeAs200,
    /// `Content-Length`, then the connection is closed without saying so
    /// (`Connection: close` missing): pooled connections go stale.
    SilentClose,
}

/// A small HTTP/1.1 origin serving one object with `Range` support, framed
/// in ways nginx never uses; stopped on drop.
pub(crate) struct OddOrigin {
    port: u16,
    stop: Arc<AtomicBool>,
    pub(crate) requests: Arc<AtomicUsize>,
}

impl OddOrigin {
    pub(crate) fn start(body: Vec<u8>, framing: Framing) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let (s, r, body) = (stop.clone(), requests.clone(), Arc::new(body));
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) && r.load(Ordering::Relaxed) < 10_000 {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let (r, body) = (r.clone(), body.clone());
                        std::thread::spawn(move || serve_odd(client, &body, framing, &r));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self { port, stop, requests }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/object", self.port)
    }
}

impl Drop for OddOrigin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve_odd(mut client: TcpStream, body: &[u8], framing: Framing, requests: &AtomicUsize) {
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        head.clear();
        while !head.ends_with(b"\r\n\r\n") {
            match client.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        requests.fetch_add(1, Ordering::Relaxed);
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let range = text.lines().find_map(|l| l.strip_prefix("range: bytes=")).and_then(|r| {
            let (a, b) = r.trim().split_once('-')?;
            let b = b.trim();
            let last = if b.is_empty() {
                body.len() - 1
            } else {
                b.parse::<usize>().ok()?.min(body.len() - 1)
            };
            Some((a.parse::<usize>().ok()?, last))
        });
        let Some((start, end)) = range else { return };
        let part = &body[start..=end];
        let whole = start == 0 && text.contains("range: bytes=0-\r\n");
        let mut out = if whole && matches!(framing, Framing::WholeAs200) {
            "HTTP/1.1 200 OK\r\n".to_string()
        } else {
            format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{end}/{}\r\n",
                body.len()
            )
        };
        match framing {
            Framing::Chunked => {
                out.push_str("Transfer-Encoding: chunked\r\n\r\n");
                let mut out = out.into_bytes();
                for piece in part.chunks(100_000) {
                    out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    out.extend_from_slice(piece);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
                if client.write_all(&out).is_err() {
                    return;
                }
            }
            Framing::Plain | Framing::WholeAs200 => {
                out.push_str(&format!("Content-Length: {}\r\n\r\n", part.len()));
                if client.write_all(out.as_bytes()).and_then(|()| client.write_all(part)).is_err() {
                    return;
                }
            }
            Framing::SilentClose => {
                out.push_str(&format!("Content-Length: {}\r\n\r\n", part.len()));
                let _ = client.write_all(out.as_bytes()).and_then(|()| client.write_all(part));
                let _ = client.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

/// redis-server on a loopback port with persistence off, its files in a
/// temporary directory; killed on drop.
pub(crate) struct RedisServer {
    child: Child,
    pub(crate) port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub(crate) fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// A server with more arguments (`--requirepass`, `--tls-port`, …); it
    /// is ready once its plain port answers `PING` (with `PONG`, or with
    /// `NOAUTH` when it wants a password).
    pub(crate) fn start_with(extra: &[&str]) -> Option<Self> {
        let bin =
            binary("redis-server", &["/usr/bin/redis-server", "/usr/local/bin/redis-server"])?;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new(bin)
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .args(extra)
            .spawn()
            .unwrap();
        // Owned from here on: dropping `server` kills and reaps redis-server.
        let server = Self { child, port, _dir: dir };
        for _ in 0..250 {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let mut reply = [0u8; 7];
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read_exact(&mut reply).is_ok()
                    && (&reply == b"+PONG\r\n" || reply.starts_with(b"-NOAUTH"))
                {
                    return Some(server);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not start on port {port}");
    }

    /// A port nothing listens on yet (for `--tls-port`).
    pub(crate) fn free_port() -> u16 {
        free_port()
    }

    pub(crate) fn uri(&self, prefix: &str) -> String {
        format!("redis://127.0.0.1:{}/{prefix}", self.port)
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server.
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} failed");
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `f` on its own thread and fails the test if it has not returned
/// within `limit` (a hostile server must make a test fail, never hang it).
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("still running after {limit:?}: the call hangs"))
}

/// How [`SlowOrigin`] sends a body: `bytes` every `gap`.
#[derive(Clone, Copy)]
pub(crate) struct Drip {
    pub(crate) bytes: usize,
    pub(crate) gap: Duration,
}

/// An HTTP/1.1 origin serving one object with `Range` support that sends
/// the head at once and then the body of any request starting at or past
/// `slow_from` in drips (chunked framing, which sends reads through ureq,
/// or `Content-Length`); stopped on drop.
pub(crate) struct SlowOrigin {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl SlowOrigin {
    pub(crate) fn start(body: Vec<u8>, drip: Drip, slow_from: usize, chunked: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, body) = (stop.clone(), Arc::new(body));
        std::thread::spawn(move || {
            let mut served = 0;
            while !s.load(Ordering::Relaxed) && served < 1000 {
                match listener.accept() {
                    Ok((client, _)) => {
                        served += 1;
                        client.set_nonblocking(false).unwrap();
                        let (s, body) = (s.clone(), body.clone());
                        std::thread::spawn(move || {
                            serve_slow(client, &body, drip, slow_from, chunked, &s)
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self { port, stop }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/object", self.port)
    }
}

impl Drop for SlowOrigin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve_slow(
    mut client: TcpStream,
    body: &[u8],
    drip: Drip,
    slow_from: usize,
    chunked: bool,
    stop: &AtomicBool,
) {
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        head.clear();
        while !head.ends_with(b"\r\n\r\n") {
            match client.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let Some((start, end)) =
            text.lines().find_map(|l| l.strip_prefix("range: bytes=")).and_then(|r| {
                let (a, b) = r.trim().split_once('-')?;
                let last =
                    b.trim().parse::<usize>().map_or(body.len() - 1, |b| b.min(body.len() - 1));
                Some((a.parse::<usize>().ok()?, last))
            })
        else {
            return;
        };
        let part = &body[start..=end];
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_string()
        } else {
            format!("Content-Length: {}", part.len())
        };
        let out = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{end}/{}\r\nETag: \"slow\"\r\n{framing}\r\n\r\n",
            body.len()
        );
        if client.write_all(out.as_bytes()).is_err() {
            return;
        }
        let step = if start >= slow_from { drip.bytes } else { part.len().max(1) };
        for piece in part.chunks(step) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let sent = if chunked {
                let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                framed.extend_from_slice(piece);
                framed.extend_from_slice(b"\r\n");
                client.write_all(&framed)
            } else {
                client.write_all(piece)
            };
            if sent.is_err() {
                return;
            }
            if start >= slow_from {
                std::thread::sleep(drip.gap);
            }
        }
        if chunked && client.write_all(b"0\r\n\r\n").is_err() {
            return;
        }
    }
}

/// A fake Redis server on a loopback port: every command (an array of bulk
/// strings) is answered with what `answer` returns, in drips where it says
/// so and `drip` is set; stopped on drop.
pub(crate) struct FakeRedis {
    pub(crate) port: u16,
    stop: Arc<AtomicBool>,
    pub(crate) commands: Arc<AtomicUsize>,
}

/// A reply, and whether to send it in drips.
type Answer = fn(&[Vec<u8>]) -> (Vec<u8>, bool);

impl FakeRedis {
    pub(crate) fn start(answer: Answer, drip: Option<Drip>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let commands = Arc::new(AtomicUsize::new(0));
        let (s, c) = (stop.clone(), commands.clone());
        std::thread::spawn(move || {
            let mut served = 0;
            while !s.load(Ordering::Relaxed) && served < 1000 {
                match listener.accept() {
                    Ok((client, _)) => {
                        served += 1;
                        client.set_nonblocking(false).unwrap();
                        let (s, c) = (s.clone(), c.clone());
                        std::thread::spawn(move || serve_fake_redis(client, answer, drip, &s, &c));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self { port, stop, commands }
    }

    pub(crate) fn uri(&self, prefix: &str) -> String {
        format!("redis://127.0.0.1:{}/{prefix}", self.port)
    }
}

impl Drop for FakeRedis {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve_fake_redis(
    client: TcpStream,
    answer: Answer,
    drip: Option<Drip>,
    stop: &AtomicBool,
    count: &AtomicUsize,
) {
    use std::io::BufRead;
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = client.try_clone().unwrap();
    let mut input = std::io::BufReader::new(client);
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        if input.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Some(n) = line.trim_end().strip_prefix('*').and_then(|n| n.parse::<usize>().ok())
        else {
            return;
        };
        let mut args = Vec::with_capacity(n);
        for _ in 0..n {
            line.clear();
            let _ = input.read_line(&mut line);
            let Some(len) = line.trim_end().strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
            else {
                return;
            };
            let mut arg = vec![0u8; len + 2];
            if input.read_exact(&mut arg).is_err() {
                return;
            }
            arg.truncate(len);
            args.push(arg);
        }
        count.fetch_add(1, Ordering::Relaxed);
        let (reply, slow) = answer(&args);
        let drip = drip.filter(|_| slow);
        let step = drip.map_or(reply.len().max(1), |d| d.bytes);
        for piece in reply.chunks(step) {
            if stop.load(Ordering::Relaxed) || out.write_all(piece).is_err() {
                return;
            }
            if let Some(d) = drip {
                std::thread::sleep(d.gap);
            }
        }
    }
}
