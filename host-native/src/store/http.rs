//! HTTP(S) range reads: a [`RangeSource`] over a URL served with
//! `Accept-Ranges: bytes` (nginx, object stores, CDNs).
//!
//! Each read is one `Range` request on a pooled keep-alive connection, so
//! the reader's threads are concurrent range streams. Over plain `http://`
//! the bodies are read from the socket straight into the caller's buffers
//! (see `wire`); otherwise through ureq (TLS, proxies, redirects). Each
//! socket read has a timeout (a stall), each request a minimum average
//! rate over a window (a trickle) and, optionally, each read an overall
//! deadline ([`TransferLimits`]); a failed, short or too slow read
//! re-fetches only the bytes still missing, with exponential backoff, up to
//! a bounded number of attempts. A server that ignores `Range`, or an
//! object that changes during the load, is an error naming the URL and the
//! range: its ETag is pinned by the opening response, or, when the server
//! sends none, its `Last-Modified` date; its size is pinned always.
//!
//! The opening, the prefix, resumption and change detection are the
//! shared engine's (`crate::store::ranged`); this module is its transport.
//!
//! `https://` servers are verified against the CAs that [`TlsOptions`]
//! and the environment name (see [`crate::store::tls`]); a refused certificate
//! ends the read at once, naming what was trusted.

mod client;
mod wire;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::error::Result;
use crate::source::{RangeSource, TransferLimits};
pub use crate::store::ranged::PREFIX;
use crate::store::ranged::Ranged;
pub use crate::store::retry::RetryPolicy;
pub use crate::store::tls::TlsOptions;
use crate::store::tls::{Service, Trust};

/// Retry, timeout, request and TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    /// The caller will read most of the object (a load, a copy): the
    /// opening request asks for all of it, keeps its first [`PREFIX`]
    /// bytes, and its body goes on into the first read that crosses
    /// `PREFIX`, so a load costs one request fewer. Off (the default), the
    /// opening request asks for `PREFIX` bytes only, so inspecting a header
    /// transfers no more than that.
    pub read_all: bool,
    /// How failed requests are retried.
    pub retry: RetryPolicy,
    /// Longest wait for any single socket read or write (a stalled server).
    pub read_timeout: Duration,
    /// Longest wait to connect.
    pub connect_timeout: Duration,
    /// Minimum transfer rate of each request and deadline of each read
    /// (a trickling server), on top of `read_timeout`.
    pub limits: TransferLimits,
    /// Which certificate authorities `https://` servers must be signed by.
    pub tls: TlsOptions,
    /// An `Authorization` header for every request (a store's static
    /// bearer token); none by default.
    pub authorization: Option<Authorization>,
}

/// The value of an `Authorization` header. Never shown: its `Debug` says
/// only that it is there.
#[derive(Clone, PartialEq, Eq)]
pub struct Authorization(String);

impl Authorization {
    /// `Bearer <token>`; `None` for a token a header line cannot carry
    /// (empty, or with bytes other than visible ASCII).
    pub fn bearer(token: &str) -> Option<Self> {
        let visible = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic());
        visible.then(|| Self(format!("Bearer {token}")))
    }

    pub(crate) fn value(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorization(..)")
    }
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            read_all: false,
            retry: RetryPolicy::default(),
            read_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            limits: TransferLimits::default(),
            tls: TlsOptions::default(),
            authorization: None,
        }
    }
}

/// A remote object read with HTTP range requests.
pub struct HttpSource {
    ranged: Ranged<client::HttpClient>,
}

impl std::fmt::Debug for HttpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSource")
            .field("name", &self.ranged.name())
            .field("len", &self.ranged.len())
            .finish()
    }
}

/// One agent per source: pooled keep-alive connections, a timeout on each
/// socket read and write (a stall) but none on a whole body (the caller
/// paces bodies, see [`TransferLimits`]). With a minimum rate, a response
/// head must arrive within a rate window (or the read timeout, if longer).
/// `https://` servers are verified against `trust`.
pub(crate) fn agent(options: &HttpOptions, trust: &Trust) -> ureq::Agent {
    let limits = &options.limits;
    let head = (limits.min_rate > 0).then(|| limits.rate_window.max(options.read_timeout));
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_recv_response(head)
        .timeout_per_read(Some(options.read_timeout))
        .timeout_per_write(Some(options.read_timeout))
        .timeout_connect(Some(options.connect_timeout))
        .max_idle_connections_per_host(64)
        .user_agent(concat!("tensorizer-rs/", env!("CARGO_PKG_VERSION")))
        .tls_config(trust.tls_config())
        .build()
        .new_agent()
}

impl HttpSource {
    /// Opens `url`: one request for its first [`PREFIX`] bytes (or all of
    /// it, with [`HttpOptions::read_all`]) gives the length, the ETag, proof
    /// that the server honours `Range`, and the bytes a reader needs first
    /// (kept).
    pub fn open(url: &str, options: HttpOptions) -> Result<Self> {
        Self::open_named(url, url, options)
    }

    /// Opens `url` but names it `name` in every message (a presigned URL
    /// carries a signature that must not end up in logs).
    pub fn open_named(url: &str, name: &str, options: HttpOptions) -> Result<Self> {
        let secure = url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"));
        let trust =
            options.tls.resolve_for(Service::Http, secure, &crate::store::tls::process_env)?;
        Self::open_trusted(url, name, options, trust)
    }

    /// [`open_named`](Self::open_named) with the TLS trust already resolved.
    pub(crate) fn open_trusted(
        url: &str,
        name: &str,
        options: HttpOptions,
        trust: Trust,
    ) -> Result<Self> {
        let wire = wire::Wire::for_url(
            url,
            options.read_timeout,
            options.connect_timeout,
            options.authorization.as_ref(),
        );
        let (limits, retry, all) = (options.limits, options.retry, options.read_all);
        let client = client::HttpClient {
            agent: agent(&options, &trust),
            url: url.to_string(),
            options,
            trust,
            wire,
            wire_off: AtomicBool::new(false),
        };
        Ok(Self { ranged: Ranged::open(client, name.to_string(), limits, retry, all)? })
    }
}

impl RangeSource for HttpSource {
    fn len(&self) -> u64 {
        self.ranged.len()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.ranged.read(offset, &mut [buf])
    }

    fn prefers_long_reads(&self) -> bool {
        true
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        self.ranged.read(offset, bufs)
    }

    fn name(&self) -> &str {
        self.ranged.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_is_checked_and_never_shown() {
        let a = Authorization::bearer("ya29.secret").unwrap();
        assert_eq!(a.value(), "Bearer ya29.secret");
        let options = HttpOptions { authorization: Some(a), ..HttpOptions::default() };
        assert!(!format!("{options:?}").contains("secret"));
        for bad in ["", "a b", "a\r\nX-Evil: 1", "é"] {
            assert!(Authorization::bearer(bad).is_none(), "{bad:?}");
        }
    }
}
