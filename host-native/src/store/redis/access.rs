//! How a Redis connection is opened beyond TCP: TLS for `rediss://`
//! (rustls, trusting what [`TlsOptions`] says, as `https://` does) and
//! `AUTH` with the target's credentials (or `REDISCLI_AUTH`, the password
//! variable of Redis's own tools, when the URI has none). Cluster nodes
//! learned from `CLUSTER SLOTS` are reached the same way as the seed.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use super::fault::Fault;
use super::{PASSWORD_VAR, RedisTarget};
use crate::error::Result;
use crate::store::tls::{Service, TlsOptions, Trust};

/// TLS and credentials for every connection of one target.
#[derive(Clone, Default)]
pub(crate) struct Access {
    tls: Option<(Arc<rustls::ClientConfig>, Trust)>,
    username: Option<String>,
    password: Option<String>,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("tls", &self.tls.as_ref().map(|(_, t)| t.description()))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Access {
    /// What connections to `target` need: TLS trust resolved from `tls`
    /// (and the environment) for `rediss://`, the credentials of the URI or
    /// of [`PASSWORD_VAR`].
    pub(crate) fn for_target(target: &RedisTarget, tls: &TlsOptions) -> Result<Self> {
        let tls = if target.tls {
            let trust = tls.resolve(Service::Http)?;
            let config = trust.rustls_config();
            Some((config, trust))
        } else {
            None
        };
        let password = target
            .password
            .clone()
            .or_else(|| std::env::var(PASSWORD_VAR).ok().filter(|p| !p.is_empty()));
        Ok(Self { tls, username: target.username.clone(), password })
    }

    /// Wraps a connected socket to `host` in TLS when asked for.
    pub(crate) fn wrap(&self, host: &str, tcp: TcpStream) -> Result<Stream, Fault> {
        let Some((config, _)) = &self.tls else { return Ok(Stream::Plain(tcp)) };
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| Fault::Protocol(format!("{host} is not a name TLS can check: {e}")))?;
        let conn = rustls::ClientConnection::new(Arc::clone(config), name)
            .map_err(|e| Fault::Io(io::Error::other(format!("TLS: {e}"))))?;
        let mut stream = Box::new(rustls::StreamOwned::new(conn, tcp));
        // The handshake now, so a refused certificate is said as such.
        while stream.conn.is_handshaking() {
            if let Err(e) = stream.conn.complete_io(&mut stream.sock) {
                return Err(Fault::Io(self.refused(e)));
            }
        }
        Ok(Stream::Tls(stream))
    }

    /// A handshake error, as a [`crate::store::tls::TlsError::Untrusted`]
    /// when the server's certificate was refused (never retried).
    fn refused(&self, e: io::Error) -> io::Error {
        match &self.tls {
            Some((_, trust)) => trust.untrusted(&e).unwrap_or(e),
            None => e,
        }
    }

    /// The user name (if any) and password to authenticate with.
    pub(crate) fn credentials(&self) -> Option<(Option<&str>, &str)> {
        Some((self.username.as_deref(), self.password.as_deref()?))
    }
}

/// A connection's byte stream: plain TCP or TLS over it.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    /// The socket underneath (for its timeouts).
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(s) => s.flush(),
        }
    }
}
