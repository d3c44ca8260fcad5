//! `tzr view [FILE|URL] [--open]`: serves the browser inspector (the page
//! built into the binary, or a page directory: [`page`]) and the file on
//! 127.0.0.1, and prints the address to open (`--open` hands it to a
//! browser). The file never leaves the machine: the page reads it from
//! this server with Range requests, and scans it at once. Without a target
//! the page opens empty, for a file dropped on it or a URL typed in. A URL
//! is not proxied: the page reads it itself, so its server must allow CORS.
//! A local file is scanned here first too: one that would run code when
//! loaded is said so on stderr before the address.
//!
//! The server is deliberately small: std's `TcpListener`, one thread per
//! connection, `GET`/`HEAD`, single byte ranges, one request per
//! connection. It serves only the page's files and the one file named.
//!
//! Other web pages the browser has open must not read the file (spec
//! §15.12): the server listens on loopback only; answers only requests
//! whose `Host` is the address it serves (`127.0.0.1:PORT`,
//! `localhost:PORT` or `[::1]:PORT`), so a page whose own name was rebound
//! to 127.0.0.1 (DNS rebinding) gets 421; sends no CORS header, so no other
//! origin may read a response; answers only `GET` and `HEAD` (405); and
//! serves everything under a random path segment chosen per run
//! ([`SECRET_BYTES`]), which only the printed URL carries (404 without it).

mod page;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tensorizer_core::scan::{ScanOptions, scan};
use tensorizer_native::source::Positioned;
use tensorizer_native::{Error, Intent, open_uri};

use crate::Outcome;
use page::{Body, Page};

/// Longest request head read (request line and headers).
const MAX_HEAD: usize = 16 << 10;

/// Bytes copied per write of a response body.
const CHUNK: usize = 1 << 20;

/// Random bytes in the per-run path segment (hex in the URL).
const SECRET_BYTES: usize = 16;

/// `tzr view`'s arguments.
#[derive(Args)]
pub(crate) struct ViewArgs {
    /// The file to inspect (a local path), or an http(s):// URL that the
    /// page reads itself (its server must send CORS headers). Without one,
    /// the page opens empty: drop a file on it or type a URL.
    target: Option<String>,
    /// Open the address in a browser ($BROWSER, else xdg-open or open);
    /// if that fails, say so and keep serving.
    #[arg(long)]
    open: bool,
    /// Port on 127.0.0.1 (default: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// A page directory to serve instead of the page built into tzr
    /// (default: $TZR_VIEW_ASSETS, else the built-in page).
    #[arg(long)]
    assets: Option<PathBuf>,
    /// Write the built-in page to DIR and exit (for the browser tests and
    /// other web servers).
    #[arg(long, value_name = "DIR", hide = true, conflicts_with_all = ["target", "assets"])]
    write_page: Option<PathBuf>,
}

/// What the server hands out.
struct Site {
    page: Page,
    /// The local file, served under `/SECRET/file/`.
    file: Option<PathBuf>,
    /// The per-run path segment everything is served under.
    secret: String,
    /// The port served: the only one a `Host` header may name.
    port: u16,
}

impl Site {
    /// `path` with the leading `/SECRET` removed, if it has it.
    fn strip_secret<'a>(&self, path: &'a str) -> Option<&'a str> {
        path.strip_prefix('/')?
            .strip_prefix(self.secret.as_str())
            .filter(|rest| rest.starts_with('/'))
    }

    /// Whether a `Host` header names the address served.
    fn is_own_host(&self, host: &str) -> bool {
        let Some((name, port)) = host.rsplit_once(':') else { return false };
        port.parse::<u16>().is_ok_and(|p| p == self.port)
            && port.bytes().all(|b| b.is_ascii_digit())
            && (name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost") || name == "[::1]")
    }
}

/// A fresh random path segment (hex).
fn new_secret() -> Result<String, Error> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Invalid(format!("no randomness for the URL: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Runs the server until the process is stopped.
pub(crate) fn run(args: &ViewArgs) -> Outcome {
    if let Some(dir) = &args.write_page {
        return Ok(page::write(dir)?);
    }
    let page = Page::find(args.assets.as_deref())?;
    let secret = new_secret()?;
    let (file, link) = match args.target.as_deref() {
        None => (None, format!("/{secret}/")),
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            (None, format!("/{secret}/?url={}", encode(url)))
        }
        Some(target) => {
            let path = local_file(target)?;
            if let Some(line) = code_warning(&path) {
                eprintln!("tzr view: {target}: {line}");
            }
            (Some(path), local_link(&secret, target))
        }
    };
    let listener =
        TcpListener::bind(("127.0.0.1", args.port)).map_err(|e| io_error("127.0.0.1", e))?;
    let addr = listener.local_addr().map_err(|e| io_error("127.0.0.1", e))?;
    let url = format!("http://{addr}{link}");
    out!("{url}");
    let what = args.target.as_deref().unwrap_or("the empty inspector");
    eprintln!("tzr view: serving {what} on {addr} only (Ctrl-C to stop)");
    let _ = std::io::stdout().flush();
    if args.open {
        std::thread::spawn(move || {
            if let Err(why) = open_browser(&url, &opener()) {
                eprintln!("tzr view: could not open a browser ({why}); open the address above");
            }
        });
    }
    serve(listener, Arc::new(Site { page, file, secret, port: addr.port() }));
    Ok(())
}

/// `target` as the local file to serve: it must be a regular file.
fn local_file(target: &str) -> Result<PathBuf, Error> {
    let path = PathBuf::from(target);
    let meta = std::fs::metadata(&path)
        .map_err(|e| Error::Invalid(format!("{target}: {}", open_reason(&e))))?;
    if !meta.is_file() {
        return Err(Error::Invalid(format!("{target}: not a regular file")));
    }
    Ok(path)
}

/// Why a file could not be opened, in words (no errno, no offset).
fn open_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// The page's address for the local file `target`, served under
/// `/SECRET/file/NAME`: `url` is that path, `name` the path as given (the
/// page shows it, and titles itself with its last component).
fn local_link(secret: &str, target: &str) -> String {
    let name = Path::new(target)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let url = format!("/{secret}/file/{}", encode(&name));
    format!("/{secret}/?url={}&name={}", encode(&url), encode(target))
}

/// Scans `path`; for a file that would run code when loaded (a finding of
/// a rule that [executes code](tensorizer_core::scan::RuleId::executes_code)),
/// the line that says so (with the first such finding). A file that cannot
/// be scanned gets none here: the page reports it.
fn code_warning(path: &Path) -> Option<String> {
    let name = path.to_string_lossy();
    let source = open_uri(&name, Intent::ReadAll).ok()?;
    let options = ScanOptions { name: Some(&name), ..ScanOptions::default() };
    let scanned = scan(&mut Positioned(source.as_ref()), &options).ok()?;
    let first = scanned.findings.iter().find(|f| f.rule.executes_code())?;
    let count = scanned.findings.len();
    Some(format!(
        "This file would execute code when loaded: {} {} ({count} finding{}; `tzr scan` lists them)",
        first.rule,
        crate::text::printable(&first.message),
        if count == 1 { "" } else { "s" }
    ))
}

/// The command that opens a URL: `$BROWSER` when set, else the desktop's
/// opener.
fn opener() -> String {
    match std::env::var("BROWSER") {
        Ok(b) if !b.trim().is_empty() => b,
        _ if cfg!(target_os = "macos") => "open".into(),
        _ => "xdg-open".into(),
    }
}

/// Runs `opener URL` and waits for it; why it failed, if it did.
fn open_browser(url: &str, opener: &str) -> Result<(), String> {
    let status = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("{opener}: {}", open_reason(&e)))?;
    if status.success() { Ok(()) } else { Err(format!("{opener} failed, {status}")) }
}

fn io_error(file: &str, source: std::io::Error) -> Error {
    Error::File { file: file.to_string(), source }
}

/// Accepts connections until the listener fails, one thread each.
fn serve(listener: TcpListener, site: Arc<Site>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let site = Arc::clone(&site);
        std::thread::spawn(move || {
            // A client that goes away mid-response is not an error here.
            let _ = handle(stream, &site);
        });
    }
}

/// A parsed request: method, path (without the query), Host and Range
/// headers.
struct Request {
    method: String,
    path: String,
    host: Option<String>,
    range: Option<String>,
}

fn read_request(stream: &TcpStream) -> std::io::Result<Option<Request>> {
    let mut reader = BufReader::new(stream.take(MAX_HEAD as u64));
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else { return Ok(None) };
    let path = target.split(['?', '#']).next().unwrap_or("/").to_string();
    let (mut host, mut range) = (None, None);
    let mut hosts = 0;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            if name.trim().eq_ignore_ascii_case("range") {
                range = Some(value.trim().to_string());
            } else if name.trim().eq_ignore_ascii_case("host") {
                hosts += 1;
                host = Some(value.trim().to_string());
            }
        }
    }
    // Two Host headers: neither is believed.
    let host = host.filter(|_| hosts == 1);
    Ok(Some(Request { method: method.to_string(), path, host, range }))
}

fn handle(stream: TcpStream, site: &Site) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let Some(req) = read_request(&stream)? else { return Ok(()) };
    let mut out = std::io::BufWriter::new(stream);
    if !req.host.as_deref().is_some_and(|h| site.is_own_host(h)) {
        return status(
            &mut out,
            "421 Misdirected Request",
            "this server answers only for its own address",
        );
    }
    if req.method != "GET" && req.method != "HEAD" {
        return status(&mut out, "405 Method Not Allowed", "only GET and HEAD");
    }
    let head_only = req.method == "HEAD";
    let path = decode(&req.path);
    let Some(path) = site.strip_secret(&path) else {
        return status(&mut out, "404 Not Found", "not found");
    };
    let (body, content_type) = match (path.strip_prefix("/file/"), &site.file) {
        (Some(_), Some(file)) => match File::open(file) {
            Ok(f) => (Body::File(f), "application/octet-stream"),
            Err(_) => return status(&mut out, "404 Not Found", "not found"),
        },
        _ => match site.page.get(path) {
            Some(found) => found,
            None => return status(&mut out, "404 Not Found", "not found"),
        },
    };
    let len = match &body {
        #[cfg(feature = "view-page")]
        Body::Bytes(b) => b.len() as u64,
        Body::File(f) => f.metadata()?.len(),
    };
    let (code, start, end) = match req.range.as_deref().map(|r| parse_range(r, len)) {
        None | Some(Range::Ignore) => ("200 OK", 0, len),
        Some(Range::Bytes(a, b)) => ("206 Partial Content", a, b),
        Some(Range::Unsatisfiable) => {
            write!(out, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{len}\r\n")?;
            write!(out, "Content-Length: 0\r\nConnection: close\r\n\r\n")?;
            return out.flush();
        }
    };
    write!(
        out,
        "HTTP/1.1 {code}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        end - start
    )?;
    if code.starts_with("206") {
        write!(out, "Content-Range: bytes {start}-{}/{len}\r\n", end - 1)?;
    }
    write!(
        out,
        "Accept-Ranges: bytes\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
    )?;
    write!(out, "Cross-Origin-Resource-Policy: same-origin\r\n")?;
    write!(out, "Connection: close\r\n\r\n")?;
    if !head_only {
        match body {
            #[cfg(feature = "view-page")]
            Body::Bytes(b) => {
                let range = usize::try_from(start).ok().zip(usize::try_from(end).ok());
                out.write_all(range.and_then(|(a, e)| b.get(a..e)).unwrap_or_default())?;
            }
            Body::File(mut f) => {
                f.seek(SeekFrom::Start(start))?;
                let mut left = end - start;
                let mut buf = vec![0u8; CHUNK.min(usize::try_from(left).unwrap_or(CHUNK))];
                while left > 0 {
                    let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    f.read_exact(&mut buf[..n])?;
                    out.write_all(&buf[..n])?;
                    left -= n as u64;
                }
            }
        }
    }
    out.flush()
}

fn status(out: &mut impl Write, code: &str, text: &str) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 {code}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    out.flush()
}

/// A Range header's meaning for a body of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
enum Range {
    /// Not one byte range this server handles: send the whole body.
    Ignore,
    /// Bytes `start..end` (end exclusive).
    Bytes(u64, u64),
    /// No byte of the range exists (416).
    Unsatisfiable,
}

fn parse_range(value: &str, len: u64) -> Range {
    let Some(spec) = value.strip_prefix("bytes=") else { return Range::Ignore };
    if spec.contains(',') {
        return Range::Ignore; // several ranges: the whole body is a valid answer
    }
    let Some((a, b)) = spec.split_once('-') else { return Range::Ignore };
    let number = |s: &str| s.parse::<u64>().ok().filter(|_| s.bytes().all(|c| c.is_ascii_digit()));
    match (number(a), number(b)) {
        (Some(start), end) if end.is_some() || b.is_empty() => {
            if end.is_some_and(|e| e < start) {
                Range::Ignore
            } else if start >= len {
                Range::Unsatisfiable
            } else {
                Range::Bytes(start, end.map_or(len, |e| e.min(len - 1) + 1))
            }
        }
        (None, Some(suffix)) if a.is_empty() => {
            if suffix == 0 || len == 0 {
                Range::Unsatisfiable
            } else {
                Range::Bytes(len - suffix.min(len), len)
            }
        }
        _ => Range::Ignore,
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters and `/`.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes (invalid ones are kept as they are).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).and_then(|&c| hex(c)), b.get(i + 2).and_then(|&c| hex(c))) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Range::Bytes(0, 10));
        assert_eq!(parse_range("bytes=90-200", 100), Range::Bytes(90, 100));
        assert_eq!(parse_range("bytes=10-", 100), Range::Bytes(10, 100));
        assert_eq!(parse_range("bytes=-30", 100), Range::Bytes(70, 100));
        assert_eq!(parse_range("bytes=-300", 100), Range::Bytes(0, 100));
        assert_eq!(parse_range("bytes=100-", 100), Range::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-0", 0), Range::Unsatisfiable);
        assert_eq!(parse_range("bytes=5-1", 100), Range::Ignore);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), Range::Ignore);
        assert_eq!(parse_range("items=0-1", 100), Range::Ignore);
        assert_eq!(parse_range("bytes=x-1", 100), Range::Ignore);
    }

    #[test]
    fn encoding_round_trips() {
        let s = "/file/a b%c?d=é";
        assert_eq!(decode(&encode(s)), s);
        assert_eq!(encode("a b"), "a%20b");
    }

    fn vector(rel: &str) -> PathBuf {
        PathBuf::from(format!("{}/../../tests/vectors/{rel}", env!("CARGO_MANIFEST_DIR")))
    }

    #[test]
    fn the_target_is_optional_and_open_is_a_flag() {
        use clap::Parser as _;
        let cli = crate::Cli::try_parse_from(["tzr", "view"]).unwrap();
        let crate::Command::View(args) = cli.command else { panic!("not view") };
        assert!(args.target.is_none() && !args.open);
        let cli = crate::Cli::try_parse_from(["tzr", "view", "--open", "m.pt"]).unwrap();
        let crate::Command::View(args) = cli.command else { panic!("not view") };
        assert_eq!(args.target.as_deref(), Some("m.pt"));
        assert!(args.open);
    }

    #[test]
    fn a_local_file_is_linked_with_its_name() {
        let link = local_link("abc", "dir/my model.pt");
        assert_eq!(link, "/abc/?url=/abc/file/my%2520model.pt&name=dir/my%20model.pt");
        let err = local_file("no/such.pt").unwrap_err().to_string();
        assert!(err.contains("no/such.pt: no such file") && !err.contains("byte"), "{err}");
    }

    #[test]
    fn a_file_that_would_run_code_is_said_so() {
        let line = code_warning(&vector("torch/hostile_os_system.pt")).unwrap();
        assert!(line.starts_with("This file would execute code when loaded: PKL-00"), "{line}");
        assert!(line.contains("posix.system"), "{line}");
        assert_eq!(code_warning(&vector("v1_flat.tensors")), None);
        assert_eq!(code_warning(&vector("torch/params.pt")), None);
        // A global whose name is computed at load time (PKL-006) alone.
        let dir = tempfile::tempdir().unwrap();
        let computed = dir.path().join("computed.pkl");
        let p = b"\x80\x04\x8c\x0bcollections\x8c\x0bOrderedDict\x93)R\x8c\x06system\x93.";
        std::fs::write(&computed, p).unwrap();
        let line = code_warning(&computed).unwrap();
        assert!(line.starts_with("This file would execute code when loaded: PKL-006 "), "{line}");
    }

    #[test]
    fn the_browser_opener_is_run_and_its_failure_told() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("browser");
        let got = dir.path().join("got");
        std::fs::write(&script, format!("#!/bin/sh\necho \"$1\" > '{}'\n", got.display())).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        open_browser("http://127.0.0.1:1/x/", &script.to_string_lossy()).unwrap();
        assert_eq!(std::fs::read_to_string(&got).unwrap(), "http://127.0.0.1:1/x/\n");
        let err = open_browser("http://x/", "/no/such/opener").unwrap_err();
        assert_eq!(err, "/no/such/opener: no such file");
        let err = open_browser("http://x/", "false").unwrap_err();
        assert_eq!(err, "false failed, exit status: 1");
    }

    /// Starts a server of `page` and `file` on a free port: its address
    /// and the path prefix everything is served under.
    fn test_server(page: Page, file: PathBuf) -> (std::net::SocketAddr, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = new_secret().unwrap();
        let base = format!("/{secret}/");
        let site = Arc::new(Site { page, file: Some(file), secret, port: addr.port() });
        std::thread::spawn(move || serve(listener, site));
        (addr, base)
    }

    fn get(addr: std::net::SocketAddr, path: &str, range: Option<&str>) -> (String, Vec<u8>) {
        let mut s = TcpStream::connect(addr).unwrap();
        let range = range.map(|r| format!("Range: {r}\r\n")).unwrap_or_default();
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{range}\r\n").unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        (String::from_utf8_lossy(&all[..split]).into_owned(), all[split + 4..].to_vec())
    }

    /// Sends `request` as it is and returns the response head.
    fn send(addr: std::net::SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(all.len());
        String::from_utf8_lossy(&all[..split]).into_owned()
    }

    #[test]
    fn only_this_address_as_host_and_only_reads_are_answered() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "<html>").unwrap();
        let file = dir.path().join("model.tensors");
        std::fs::write(&file, b"secret weights").unwrap();
        let (addr, base) = test_server(Page::Dir(dir.path().to_path_buf()), file);
        let port = addr.port();
        let get = |host: Option<&str>, path: &str| {
            let host = host.map(|h| format!("Host: {h}\r\n")).unwrap_or_default();
            send(addr, &format!("GET {path} HTTP/1.1\r\n{host}\r\n"))
        };
        let file_path = format!("{base}file/model.tensors");
        // DNS rebinding: a page of evil.example whose name now resolves to
        // 127.0.0.1 sends its own name as Host.
        for bad in [
            "evil.example".to_string(),
            format!("evil.example:{port}"),
            format!("127.0.0.1.evil.example:{port}"),
            "127.0.0.1".to_string(),
            format!("127.0.0.1:{}", port.wrapping_add(1)),
            format!("localhost:{port}x"),
            String::new(),
        ] {
            let head = get(Some(&bad), &file_path);
            assert!(
                head.starts_with("HTTP/1.1 421") || head.starts_with("HTTP/1.1 403"),
                "Host {bad:?}: {head}"
            );
        }
        let head = get(None, &file_path);
        assert!(
            head.starts_with("HTTP/1.1 421") || head.starts_with("HTTP/1.1 403"),
            "no Host: {head}"
        );
        for good in
            [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")]
        {
            let head = get(Some(&good), &file_path);
            assert!(head.starts_with("HTTP/1.1 200"), "Host {good:?}: {head}");
            assert!(!head.to_ascii_lowercase().contains("access-control-allow"), "{head}");
        }
        // Without the per-run secret segment, or with another, nothing is served.
        let host = format!("127.0.0.1:{port}");
        for path in [
            "/file/model.tensors",
            "/index.html",
            "/",
            "/00000000000000000000000000000000/file/model.tensors",
        ] {
            let head = get(Some(&host), path);
            assert!(head.starts_with("HTTP/1.1 404"), "{path}: {head}");
        }
        assert_eq!(base.len(), 2 + 2 * SECRET_BYTES);
        assert_ne!(new_secret().unwrap(), new_secret().unwrap());
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
            let head = send(
                addr,
                &format!(
                    "{method} {file_path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"
                ),
            );
            assert!(head.starts_with("HTTP/1.1 405"), "{method}: {head}");
            assert!(!head.to_ascii_lowercase().contains("access-control-allow"), "{head}");
        }
    }

    #[test]
    fn serves_the_page_and_ranges_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("pkg")).unwrap();
        std::fs::write(dir.path().join("index.html"), "<html>").unwrap();
        std::fs::write(dir.path().join(page::BUILT_MARKER), b"\0asm").unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        let elsewhere = tempfile::tempdir().unwrap();
        let file = elsewhere.path().join("model.tensors");
        std::fs::write(&file, &data).unwrap();
        let (addr, base) = test_server(Page::Dir(dir.path().to_path_buf()), file);

        let (head, body) = get(addr, &format!("{base}?url={base}file/model.tensors"), None);
        assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/html"), "{head}");
        assert_eq!(body, b"<html>");
        let (head, body) = get(addr, &format!("{base}pkg/tensorizer_wasm_bg.wasm"), None);
        assert!(head.contains("application/wasm"), "{head}");
        assert_eq!(body, b"\0asm");
        let file = format!("{base}file/model.tensors");
        let (head, body) = get(addr, &file, Some("bytes=100-199"));
        assert!(
            head.starts_with("HTTP/1.1 206") && head.contains("Content-Range: bytes 100-199/5000"),
            "{head}"
        );
        assert_eq!(body, &data[100..200]);
        let (head, body) = get(addr, &file, None);
        assert!(head.starts_with("HTTP/1.1 200"));
        assert_eq!(body, data);
        let (head, _) = get(addr, &file, Some("bytes=9000-"));
        assert!(head.starts_with("HTTP/1.1 416") && head.contains("bytes */5000"), "{head}");
        let (head, _) = get(addr, &format!("{base}../model.tensors"), None);
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");
        let (head, _) = get(addr, &format!("{base}model.tensors"), None);
        assert!(head.starts_with("HTTP/1.1 404"), "the file is only under /file/: {head}");
    }

    #[cfg(feature = "view-page")]
    #[test]
    fn serves_the_page_built_into_the_binary() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.tensors");
        std::fs::write(&file, b"weights").unwrap();
        let (addr, base) = test_server(Page::Embedded, file);
        let (head, body) = get(addr, &base, None);
        assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/html"), "{head}");
        assert!(String::from_utf8_lossy(&body).contains("app.js"));
        let (head, body) = get(addr, &format!("{base}{}", page::BUILT_MARKER), Some("bytes=0-3"));
        assert!(head.starts_with("HTTP/1.1 206") && head.contains("application/wasm"), "{head}");
        assert_eq!(body, b"\0asm");
        let (head, _) = get(addr, &format!("{base}pkg/missing.js"), None);
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    }
}
