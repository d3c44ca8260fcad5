//! [`Location`]: where a tensorizer file lives, parsed once from the
//! string a user gave (a path or a URI), then handed to
//! [`open_source`](super::open_source) or [`open_sink`](super::open_sink).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The port of a `redis://` URI that names none.
pub const REDIS_DEFAULT_PORT: u16 = 6379;

/// A local path or a remote object, with its scheme checked and its parts
/// split out.
///
/// | written as | variant |
/// |---|---|
/// | a path, or `file:///path` | [`Local`](Self::Local) |
/// | `http://…`, `https://…` | [`Http`](Self::Http) |
/// | `s3://bucket/key` | [`S3`](Self::S3) |
/// | `gs://bucket/object` | [`Gcs`](Self::Gcs) |
/// | `az://container/blob`, `azure://container/blob`, `abfs[s]://container@account.dfs.core.windows.net/blob` | [`Azure`](Self::Azure) |
/// | `redis://[user[:password]@]host[:port]/prefix`, `rediss://…` (TLS) | [`Redis`](Self::Redis) |
/// | `redis+cluster://…`, `rediss+cluster://…` (TLS), as `redis://` | [`RedisCluster`](Self::RedisCluster) |
///
/// Schemes are matched in any case. Object keys are taken as written
/// (no percent-decoding: `?`, `#` and spaces are part of an S3 key). A
/// string with any other `scheme://` is refused rather than read as a
/// local path.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A file on this machine.
    Local(PathBuf),
    /// An object served over HTTP(S) with range requests.
    Http {
        /// The URL (normalised: scheme and host in lower case).
        url: String,
    },
    /// An S3 or S3-compatible object (endpoint and credentials come from
    /// [`crate::store::s3::S3Options`]).
    S3 {
        /// The bucket.
        bucket: String,
        /// The object key.
        key: String,
    },
    /// A Google Cloud Storage object (feature `cloud`).
    Gcs {
        /// The bucket.
        bucket: String,
        /// The object name.
        object: String,
    },
    /// An Azure Blob Storage blob (feature `cloud`).
    Azure {
        /// The storage account, when the URI names it (`abfs://`);
        /// otherwise it comes from the environment.
        account: Option<String>,
        /// The container.
        container: String,
        /// The blob name.
        blob: String,
    },
    /// A file stored as keys under a prefix in Redis (feature `redis`).
    Redis(RedisTarget),
    /// A file stored as keys under a prefix in a Redis Cluster, reached
    /// through any of its nodes (feature `redis`); the target's host and
    /// port are the node first asked for the slots.
    RedisCluster(RedisTarget),
}

/// Where a file stored in Redis lives: the server (or a cluster node), how
/// to reach it, and the key prefix. Its `Debug` and `Display` never show
/// the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// Host name or IP address (lower case; IPv6 without brackets).
    pub host: String,
    /// TCP port ([`REDIS_DEFAULT_PORT`] unless given).
    pub port: u16,
    /// The key prefix: the URI's path without its leading slashes.
    pub prefix: String,
    /// `rediss://`: the connections speak TLS.
    pub tls: bool,
    /// The ACL user of `user:password@` (`None`: Redis's `default` user).
    pub username: Option<String>,
    /// The password of `[user]:password@` (percent-decoded).
    pub password: Option<String>,
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("prefix", &self.prefix)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl RedisTarget {
    /// A plain-text target without credentials.
    pub fn new(host: impl Into<String>, port: u16, prefix: impl Into<String>) -> Self {
        Self {
            host: host.into(),
            port,
            prefix: prefix.into(),
            tls: false,
            username: None,
            password: None,
        }
    }

    /// Writes the URI with `scheme` (`redis` or `redis+cluster`; an `s` is
    /// added for TLS) and the password masked.
    fn write_uri(&self, f: &mut fmt::Formatter<'_>, scheme: &str) -> fmt::Result {
        let (base, cluster) = match scheme.strip_suffix("+cluster") {
            Some(base) => (base, "+cluster"),
            None => (scheme, ""),
        };
        write!(f, "{base}{}{cluster}://", if self.tls { "s" } else { "" })?;
        match (&self.username, &self.password) {
            (Some(user), Some(_)) => write!(f, "{user}:***@")?,
            (Some(user), None) => write!(f, "{user}@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        if self.host.contains(':') {
            write!(f, "[{}]:{}/{}", self.host, self.port, self.prefix)
        } else {
            write!(f, "{}:{}/{}", self.host, self.port, self.prefix)
        }
    }
}

impl fmt::Display for RedisTarget {
    /// The `redis://` URI (`rediss://` for TLS), the password masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_uri(f, "redis")
    }
}

/// The scheme of `s` (lower case) and what follows `://`, if `s` starts
/// with a URI scheme.
fn split_scheme(s: &str) -> Option<(String, &str)> {
    let (scheme, rest) = s.split_once("://")?;
    let mut bytes = scheme.bytes();
    let first = bytes.next()?;
    let valid = first.is_ascii_alphabetic()
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    valid.then(|| (scheme.to_ascii_lowercase(), rest))
}

impl Location {
    /// Parses a local path or a URI (see the table on [`Location`]).
    pub fn parse(s: &str) -> Result<Self> {
        let Some((scheme, rest)) = split_scheme(s) else {
            if s.is_empty() {
                return Err(Error::Invalid("an empty string is not a path or URI".into()));
            }
            return Ok(Self::Local(PathBuf::from(s)));
        };
        let bad =
            |expected: &str, why: &str| Error::Invalid(format!("{s}: not a {expected} URI: {why}"));
        match scheme.as_str() {
            "file" => {
                let url = url::Url::parse(s).map_err(|e| bad("file:///path", &e.to_string()))?;
                let path = url
                    .to_file_path()
                    .map_err(|()| bad("file:///path", "not a local absolute path"))?;
                Ok(Self::Local(path))
            }
            "http" | "https" => {
                let url =
                    url::Url::parse(s).map_err(|e| bad("http(s)://host/path", &e.to_string()))?;
                // `url` reads `http:///x` as host `x`; a URL as written must name its host.
                if url.host_str().is_none_or(str::is_empty) || rest.starts_with(['/', '?', '#']) {
                    return Err(bad("http(s)://host/path", "no host"));
                }
                // The URL as written, scheme and host aside: a presigned
                // URL's signature covers the exact bytes of its query.
                let url = format!("{scheme}://{rest}");
                Ok(Self::Http { url })
            }
            "s3" => {
                let (bucket, key) = bucket_and_key(rest)
                    .ok_or_else(|| bad("s3://bucket/key", "no bucket or key"))?;
                Ok(Self::S3 { bucket, key })
            }
            "gs" => {
                let (bucket, object) = bucket_and_key(rest)
                    .ok_or_else(|| bad("gs://bucket/object", "no bucket or object"))?;
                Ok(Self::Gcs { bucket, object })
            }
            "az" | "azure" => {
                let (container, blob) = bucket_and_key(rest)
                    .ok_or_else(|| bad("az://container/blob", "no container or blob"))?;
                Ok(Self::Azure { account: None, container, blob })
            }
            "abfs" | "abfss" => {
                let expected = "abfs://container@account.dfs.core.windows.net/blob";
                let (authority, blob) =
                    bucket_and_key(rest).ok_or_else(|| bad(expected, "no blob"))?;
                let (container, host) =
                    authority.split_once('@').ok_or_else(|| bad(expected, "no container@"))?;
                let account =
                    host.split('.').next().filter(|a| !a.is_empty() && !container.is_empty());
                let account = account.ok_or_else(|| bad(expected, "no container or account"))?;
                Ok(Self::Azure {
                    account: Some(account.to_string()),
                    container: container.to_string(),
                    blob,
                })
            }
            "redis" => Ok(Self::Redis(parse_redis(s, rest, false)?)),
            "rediss" => Ok(Self::Redis(parse_redis(s, rest, true)?)),
            "redis+cluster" => Ok(Self::RedisCluster(parse_redis(s, rest, false)?)),
            "rediss+cluster" => Ok(Self::RedisCluster(parse_redis(s, rest, true)?)),
            other => Err(Error::Unsupported {
                location: s.to_string(),
                what: format!(
                    "unknown scheme {other}:// (expected a local path, file://, http(s)://, s3://, gs://, az://, \
                     abfs(s)://, redis(s):// or redis(s)+cluster://)"
                ),
            }),
        }
    }

    /// Whether this is a file on this machine.
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Local(_))
    }

    /// Whether this is a Redis key or a Redis Cluster's (TLS or not).
    pub fn is_redis(&self) -> bool {
        matches!(self, Self::Redis(_) | Self::RedisCluster(_))
    }

    /// Whether a file written here is written whole to a local temporary
    /// file first and uploaded as one object when it is closed (the object
    /// stores: S3, GCS, Azure: [`UPLOADED_SCHEMES`]).
    pub fn is_uploaded(&self) -> bool {
        UPLOADED_SCHEMES.contains(&self.scheme())
    }

    /// The scheme name (`"file"` for a local path, `"az"` for every Azure
    /// form).
    pub fn scheme(&self) -> &'static str {
        match self {
            Self::Local(_) => "file",
            Self::Http { url } if url.starts_with("https") => "https",
            Self::Http { .. } => "http",
            Self::S3 { .. } => "s3",
            Self::Gcs { .. } => "gs",
            Self::Azure { .. } => "az",
            Self::Redis(t) if t.tls => "rediss",
            Self::Redis(_) => "redis",
            Self::RedisCluster(t) if t.tls => "rediss+cluster",
            Self::RedisCluster(_) => "redis+cluster",
        }
    }
}

/// The schemes of the locations a written file is uploaded to on close
/// ([`Location::is_uploaded`]), as [`Location::scheme`] names them.
pub const UPLOADED_SCHEMES: [&str; 3] = ["s3", "gs", "az"];

/// `bucket/key` split at the first `/`; both non-empty.
fn bucket_and_key(rest: &str) -> Option<(String, String)> {
    match rest.split_once('/') {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => {
            Some((bucket.to_string(), key.to_string()))
        }
        _ => None,
    }
}

/// `redis://[user[:password]@]host[:port]/prefix` as tensorizer reads it
/// (default port 6379, leading slashes of the path dropped), with the
/// credentials redis-py accepts (percent-decoded); an empty prefix, a query
/// or a fragment are refused rather than silently dropped.
fn parse_redis(s: &str, rest: &str, tls: bool) -> Result<RedisTarget> {
    // Messages show the URI with any password masked.
    let shown = match rest.split('/').next().and_then(|a| a.rsplit_once('@')) {
        Some((creds, _)) if creds.contains(':') => {
            s.replacen(creds, &format!("{}:***", creds.split(':').next().unwrap_or("")), 1)
        }
        _ => s.to_string(),
    };
    let bad = |why: &str| {
        Error::Invalid(format!(
            "{shown}: not a redis://[user[:password]@]host[:port]/prefix URI: {why}"
        ))
    };
    if rest.contains(['?', '#']) {
        return Err(bad("a query or fragment is not allowed"));
    }
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    // The authority through `url`'s parser, for credentials, hosts, IPv6
    // brackets and ports.
    let url = url::Url::parse(&format!("redis://{authority}/"))
        .map_err(|_| bad("a malformed host, port or credentials"))?;
    let host = match url.host() {
        Some(url::Host::Ipv6(addr)) => addr.to_string(),
        Some(url::Host::Ipv4(addr)) => addr.to_string(),
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_ascii_lowercase(),
        _ => return Err(bad("no host")),
    };
    let port = match url.port() {
        None => REDIS_DEFAULT_PORT,
        Some(0) => return Err(bad("the port is not a number from 1 to 65535")),
        Some(p) => p,
    };
    let prefix = path.trim_start_matches('/');
    if prefix.is_empty() {
        return Err(bad("no key prefix after the host"));
    }
    let decode = |v: &str| -> Result<String> {
        percent_encoding::percent_decode_str(v)
            .decode_utf8()
            .map(|d| d.into_owned())
            .map_err(|_| bad("credentials that are not UTF-8"))
    };
    let username = Some(url.username()).filter(|u| !u.is_empty()).map(decode).transpose()?;
    let password = url.password().map(decode).transpose()?;
    Ok(RedisTarget { host, port, prefix: prefix.to_string(), tls, username, password })
}

impl FromStr for Location {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(path) => write!(f, "{}", path.display()),
            Self::Http { url } => f.write_str(url),
            Self::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
            Self::Gcs { bucket, object } => write!(f, "gs://{bucket}/{object}"),
            Self::Azure { account: None, container, blob } => write!(f, "az://{container}/{blob}"),
            Self::Azure { account: Some(account), container, blob } => {
                write!(f, "abfs://{container}@{account}.dfs.core.windows.net/{blob}")
            }
            Self::Redis(t) => t.write_uri(f, "redis"),
            Self::RedisCluster(t) => t.write_uri(f, "redis+cluster"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(s: &str) -> (String, u16, String) {
        match Location::parse(s).unwrap() {
            Location::Redis(t) => (t.host, t.port, t.prefix),
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn parses_every_scheme() {
        assert_eq!(
            Location::parse("dir/f.tensors").unwrap(),
            Location::Local("dir/f.tensors".into())
        );
        assert_eq!(
            Location::parse("file:///tmp/a%20b").unwrap(),
            Location::Local("/tmp/a b".into())
        );
        assert_eq!(
            Location::parse("HTTP://Host:8080/a?b=c").unwrap(),
            Location::Http { url: "http://Host:8080/a?b=c".into() }
        );
        assert_eq!(
            Location::parse("S3://bucket/dir/x y?#.tensors").unwrap(),
            Location::S3 { bucket: "bucket".into(), key: "dir/x y?#.tensors".into() }
        );
        assert_eq!(
            Location::parse("gs://b/o").unwrap(),
            Location::Gcs { bucket: "b".into(), object: "o".into() }
        );
        assert_eq!(
            Location::parse("az://c/d/b").unwrap(),
            Location::Azure { account: None, container: "c".into(), blob: "d/b".into() }
        );
        let abfs = Location::parse("abfss://c@acct.dfs.core.windows.net/d/b").unwrap();
        assert_eq!(
            abfs,
            Location::Azure {
                account: Some("acct".into()),
                container: "c".into(),
                blob: "d/b".into()
            }
        );
        assert_eq!(abfs.to_string(), "abfs://c@acct.dfs.core.windows.net/d/b");
        for bad in ["", "s3://bucket", "s3:///k", "gs://b/", "http:///x", "abfs://c/b", "ftp://h/f"]
        {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
        assert!(matches!(Location::parse("ftp://h/f"), Err(Error::Unsupported { .. })));
    }

    #[test]
    fn names_its_kind_once() {
        let kinds = |uri: &str| {
            let l = Location::parse(uri).unwrap();
            (l.is_redis(), l.is_uploaded())
        };
        for uri in ["redis://h/p", "REDIS://h/p", "rediss://h/p", "redis+cluster://h/p"] {
            assert_eq!(kinds(uri), (true, false), "{uri}");
        }
        for uri in ["s3://b/k", "gs://b/k", "az://acct/c/b", "abfs://c@acct.dfs.core.windows.net/b"]
        {
            assert_eq!(kinds(uri), (false, true), "{uri}");
        }
        for uri in ["/tmp/f", "https://h/f", "http://h/f"] {
            assert_eq!(kinds(uri), (false, false), "{uri}");
        }
    }

    #[test]
    fn parses_redis_uris_like_tensorizer() {
        assert_eq!(
            redis("REDIS://LocalHost/models/llama:7b"),
            ("localhost".into(), 6379, "models/llama:7b".into())
        );
        assert_eq!(redis("redis://10.0.0.1:7000//p"), ("10.0.0.1".into(), 7000, "p".into()));
        assert_eq!(redis("redis://[::1]:7001/p"), ("::1".into(), 7001, "p".into()));
        assert_eq!(
            Location::parse("redis://[::1]:7001/p").unwrap().to_string(),
            "redis://[::1]:7001/p"
        );
        assert_eq!(redis("redis://h:/p").1, 6379);
        let cluster = Location::parse("Redis+Cluster://H:7000/m:1").unwrap();
        assert_eq!(cluster, Location::RedisCluster(RedisTarget::new("h", 7000, "m:1")));
        assert_eq!(
            (cluster.to_string().as_str(), cluster.scheme()),
            ("redis+cluster://h:7000/m:1", "redis+cluster")
        );
        // TLS and credentials (percent-decoded), never shown.
        let Location::RedisCluster(t) =
            Location::parse("rediss+cluster://app:p%40ss:w@h:7000/m").unwrap()
        else {
            panic!("not a cluster")
        };
        assert!(t.tls);
        assert_eq!((t.username.as_deref(), t.password.as_deref()), (Some("app"), Some("p@ss:w")));
        let shown = Location::RedisCluster(t.clone()).to_string();
        assert_eq!(shown, "rediss+cluster://app:***@h:7000/m");
        assert!(!format!("{t:?}").contains("p@ss"));
        let Location::Redis(t) = Location::parse("rediss://:secret@h/p").unwrap() else {
            panic!("not redis")
        };
        assert_eq!((t.tls, t.username, t.password.as_deref()), (true, None, Some("secret")));
        let err = Location::parse("redis://u:secret@h").unwrap_err().to_string();
        assert!(!err.contains("secret") && err.contains("u:***@h"), "{err}");
        for bad in [
            "redis://h",
            "redis://h/",
            "redis:///p",
            "redis://h:0/p",
            "redis://h:65536/p",
            "redis://h:+1/p",
            "redis://h:x/p",
            "redis://h/p?db=1",
            "redis://::1/p",
            "redis://[::1/p",
            "rediss://h",
            "redis+cluster://h",
            "redis+cluster://u@/p",
        ] {
            let err = Location::parse(bad).unwrap_err();
            assert!(matches!(&err, Error::Invalid(m) if m.starts_with(bad)), "{bad}: {err}");
        }
    }
}
