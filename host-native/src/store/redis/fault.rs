//! Why a Redis command failed, and whether trying again may help.

use std::fmt;
use std::io;

use crate::store::retry::too_slow;

/// Why a command failed.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The connection failed, closed or timed out: the command may be
    /// retried on a new connection.
    Io(io::Error),
    /// The server sent something that is not the reply we expected.
    Protocol(String),
    /// The server answered with an error reply.
    Server(String),
    /// The server refused the credentials, or asked for some
    /// (`WRONGPASS`, `NOAUTH`, `NOPERM`).
    Denied(String),
    /// The file was replaced since the source was opened.
    Changed(String),
}

impl Fault {
    /// Whether another attempt on a fresh connection may succeed.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            // A refused certificate is final too.
            Self::Io(e) if crate::store::tls::is_tls_failure(e) => false,
            // A passed deadline is final; a trickle is retried like a stall.
            Self::Io(e) => !too_slow(e).is_some_and(|t| t.deadline),
            Self::Protocol(_) | Self::Changed(_) | Self::Denied(_) => false,
            // The server is starting, busy with a script, or failing over.
            Self::Server(m) => {
                ["LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN"].iter().any(|p| m.starts_with(p))
            }
        }
    }

    /// The I/O error kind, for errors built from this fault.
    pub(crate) fn kind(&self) -> io::ErrorKind {
        match self {
            Self::Io(e) => e.kind(),
            Self::Protocol(_) => io::ErrorKind::InvalidData,
            Self::Denied(_) => io::ErrorKind::PermissionDenied,
            Self::Server(_) | Self::Changed(_) => io::ErrorKind::Other,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) if too_slow(e).is_some() => write!(f, "{e}"),
            Self::Io(e)
                if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
            {
                f.write_str("the server sent nothing for a whole RedisOptions::io_timeout")
            }
            Self::Io(e) => write!(f, "{e}"),
            Self::Protocol(m) => write!(f, "protocol error: {m}"),
            Self::Server(m) => write!(f, "the server answered: {m}"),
            Self::Denied(m) => write!(
                f,
                "the server refused access ({m}); give the credentials in the URI \
                 (redis://user:password@host/prefix, or redis://:password@host/prefix) or the password in {}",
                super::PASSWORD_VAR
            ),
            Self::Changed(m) => f.write_str(m),
        }
    }
}

impl From<io::Error> for Fault {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}
