//! Plain `http://` range reads through both transports of the HTTP source,
//! in one run against the same server and object: `wire` (the hand-written
//! HTTP/1.1 client, bodies read from the socket into the caller's buffers)
//! and ureq (the library that carries TLS, proxies and redirects); with the
//! `cloud` feature also reqwest (hyper, async, on tokio), the stack
//! object_store links, each reader thread `block_on` one ranged `GET`
//! whose body chunks are copied into its share.
//!
//! Run (nginx serving a file on 127.0.0.1, see spec/ "Protocol libraries"):
//! `TZR_BENCH_URL=http://127.0.0.1:PORT/FILE cargo bench -p tensorizer-native --bench http_stacks`
//! (`TZR_BENCH_READERS`, default one per core; `TZR_BENCH_REPS`, default 7).
//!
//! Each contender reads the whole object as a load does: N threads, each
//! filling its contiguous share of one pre-faulted buffer with one
//! `read_exact_at` (one range request per thread). ureq is chosen by putting user info in the URL
//! (`wire` leaves such URLs to ureq; nginx ignores the credentials). The
//! contenders alternate, one untimed round first; medians are reported.

mod common;

use std::time::Duration;

use common::{Read, env_usize, race};

use tensorizer_native::RangeSource;
use tensorizer_native::default_readers;
use tensorizer_native::store::http::{HttpOptions, HttpSource};

/// `http://user:pass@host/...`: the same object, read through ureq.
fn through_ureq(url: &str) -> String {
    url.replacen("http://", "http://bench:bench@", 1)
}

/// reqwest on a tokio runtime: one ranged `GET` of `part`'s bytes.
#[cfg(feature = "cloud")]
struct Reqwest {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    url: String,
}

#[cfg(feature = "cloud")]
impl Reqwest {
    fn new(url: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let client = reqwest::Client::builder().build().expect("reqwest client");
        Self { runtime, client, url: url.to_string() }
    }

    fn read(&self, offset: u64, part: &mut [u8]) {
        let range = format!("bytes={offset}-{}", offset + part.len() as u64 - 1);
        self.runtime.block_on(async {
            let mut reply =
                self.client.get(&self.url).header("range", range).send().await.expect("GET");
            assert_eq!(reply.status().as_u16(), 206);
            let mut filled = 0usize;
            while let Some(chunk) = reply.chunk().await.expect("body") {
                part[filled..filled + chunk.len()].copy_from_slice(&chunk);
                filled += chunk.len();
            }
            assert_eq!(filled, part.len());
        });
    }
}

fn main() {
    let Ok(url) = std::env::var("TZR_BENCH_URL") else {
        eprintln!("http_stacks: set TZR_BENCH_URL to an http:// URL served on 127.0.0.1; skipped");
        return;
    };
    let readers = env_usize("TZR_BENCH_READERS", default_readers());
    let reps = env_usize("TZR_BENCH_REPS", 7);
    let options = HttpOptions { read_all: true, ..HttpOptions::default() };
    let urls = [("wire", url.clone()), ("ureq", through_ureq(&url))];
    let sources: Vec<HttpSource> =
        urls.iter().map(|(_, u)| HttpSource::open(u, options.clone()).expect("open")).collect();
    let len = usize::try_from(sources[0].len()).expect("object fits in memory");
    let mut buf = vec![1u8; len];
    let by_source = |k: usize| {
        let src = &sources[k];
        move |offset: u64, part: &mut [u8]| src.read_exact_at(offset, part).expect("range read")
    };
    let (wire, ureq) = (by_source(0), by_source(1));
    #[cfg_attr(not(feature = "cloud"), allow(unused_mut))]
    let mut contenders: Vec<(&str, Read<'_>)> = vec![("wire", &wire), ("ureq", &ureq)];
    #[cfg(feature = "cloud")]
    let reqwest = Reqwest::new(&url);
    #[cfg(feature = "cloud")]
    let by_reqwest = |offset: u64, part: &mut [u8]| reqwest.read(offset, part);
    #[cfg(feature = "cloud")]
    contenders.push(("reqwest", &by_reqwest));
    let reads: Vec<Read<'_>> = contenders.iter().map(|(_, read)| *read).collect();
    let medians = race(&mut buf, readers, reps, &reads);
    let gbps = |d: Duration| len as f64 / d.as_secs_f64() / 1e9;
    println!("{len} bytes, {readers} readers, {reps} reps, one range per reader");
    for ((name, _), m) in contenders.iter().zip(&medians) {
        let ratio = m.as_secs_f64() / medians[0].as_secs_f64();
        let ms = m.as_secs_f64() * 1e3;
        println!("{name:7} median {ms:8.1} ms  {:6.2} GB/s  {ratio:.2} x wire", gbps(*m));
    }
}
