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
/// | `redis://host[:port]/prefix` | [`Redis`](Self::Redis) |
/// | `redis+cluster://host[:port]/prefix` | [`RedisCluster`](Self::RedisCluster) |
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
    Redis {
        /// Host name or IP address (lower case; IPv6 without brackets).
        host: String,
        /// TCP port ([`REDIS_DEFAULT_PORT`] unless given).
        port: u16,
        /// The key prefix: the URI's path without its leading slashes.
        prefix: String,
    },
    /// A file stored as keys under a prefix in a Redis Cluster, reached
    /// through any of its nodes (feature `redis`).
    RedisCluster {
        /// Host name or IP address of the node first asked for the slots.
        host: String,
        /// Its TCP port ([`REDIS_DEFAULT_PORT`] unless given).
        port: u16,
        /// The key prefix: the URI's path without its leading slashes.
        prefix: String,
    },
}

/// The scheme of `s` (lower case) and what follows `://`, if `s` starts
/// with a URI scheme.
fn split_scheme(s: &str) -> Option<(String, &str)> {
    let (scheme, rest) = s.split_once("://")?;
    let mut bytes = scheme.bytes();
    let first = bytes.next()?;
    let valid =
        first.is_ascii_alphabetic() && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
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
        let bad = |expected: &str, why: &str| Error::Invalid(format!("{s}: not a {expected} URI: {why}"));
        match scheme.as_str() {
            "file" => {
                let url = url::Url::parse(s).map_err(|e| bad("file:///path", &e.to_string()))?;
                let path = url.to_file_path().map_err(|()| bad("file:///path", "not a local absolute path"))?;
                Ok(Self::Local(path))
            }
            "http" | "https" => {
                let url = url::Url::parse(s).map_err(|e| bad("http(s)://host/path", &e.to_string()))?;
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
                let (bucket, key) = bucket_and_key(rest).ok_or_else(|| bad("s3://bucket/key", "no bucket or key"))?;
                Ok(Self::S3 { bucket, key })
            }
            "gs" => {
                let (bucket, object) =
                    bucket_and_key(rest).ok_or_else(|| bad("gs://bucket/object", "no bucket or object"))?;
                Ok(Self::Gcs { bucket, object })
            }
            "az" | "azure" => {
                let (container, blob) =
                    bucket_and_key(rest).ok_or_else(|| bad("az://container/blob", "no container or blob"))?;
                Ok(Self::Azure { account: None, container, blob })
            }
            "abfs" | "abfss" => {
                let expected = "abfs://container@account.dfs.core.windows.net/blob";
                let (authority, blob) = bucket_and_key(rest).ok_or_else(|| bad(expected, "no blob"))?;
                let (container, host) = authority.split_once('@').ok_or_else(|| bad(expected, "no container@"))?;
                let account = host.split('.').next().filter(|a| !a.is_empty() && !container.is_empty());
                let account = account.ok_or_else(|| bad(expected, "no container or account"))?;
                Ok(Self::Azure { account: Some(account.to_string()), container: container.to_string(), blob })
            }
            "redis" => parse_redis(s, rest),
            "rediss" => Err(bad("redis://host[:port]/prefix", "TLS (rediss://) is not supported")),
            "redis+cluster" => match parse_redis(s, rest)? {
                Self::Redis { host, port, prefix } => Ok(Self::RedisCluster { host, port, prefix }),
                other => Ok(other),
            },
            "rediss+cluster" => {
                Err(bad("redis+cluster://host[:port]/prefix", "TLS (rediss+cluster://) is not supported"))
            }
            other => Err(Error::Unsupported {
                location: s.to_string(),
                what: format!(
                    "unknown scheme {other}:// (expected a local path, file://, http(s)://, s3://, gs://, az://, \
                     abfs(s)://, redis:// or redis+cluster://)"
                ),
            }),
        }
    }

    /// Whether this is a file on this machine.
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Local(_))
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
            Self::Redis { .. } => "redis",
            Self::RedisCluster { .. } => "redis+cluster",
        }
    }
}

/// `bucket/key` split at the first `/`; both non-empty.
fn bucket_and_key(rest: &str) -> Option<(String, String)> {
    match rest.split_once('/') {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => Some((bucket.to_string(), key.to_string())),
        _ => None,
    }
}

/// `redis://host[:port]/prefix` as tensorizer reads it (default port 6379,
/// leading slashes of the path dropped); an empty prefix, credentials, a
/// query or a fragment are refused rather than silently dropped.
fn parse_redis(s: &str, rest: &str) -> Result<Location> {
    let bad = |why: &str| Error::Invalid(format!("{s}: not a redis://host[:port]/prefix URI: {why}"));
    if rest.contains(['?', '#']) {
        return Err(bad("a query or fragment is not allowed"));
    }
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(bad("credentials are not supported"));
    }
    // The authority through `url`'s parser, for hosts, IPv6 brackets and ports.
    let url = url::Url::parse(&format!("redis://{authority}/")).map_err(|e| bad(&e.to_string()))?;
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
    Ok(Location::Redis { host, port, prefix: prefix.to_string() })
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
            Self::Redis { host, port, prefix } if host.contains(':') => write!(f, "redis://[{host}]:{port}/{prefix}"),
            Self::Redis { host, port, prefix } => write!(f, "redis://{host}:{port}/{prefix}"),
            Self::RedisCluster { host, port, prefix } if host.contains(':') => {
                write!(f, "redis+cluster://[{host}]:{port}/{prefix}")
            }
            Self::RedisCluster { host, port, prefix } => write!(f, "redis+cluster://{host}:{port}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(s: &str) -> (String, u16, String) {
        match Location::parse(s).unwrap() {
            Location::Redis { host, port, prefix } => (host, port, prefix),
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn parses_every_scheme() {
        assert_eq!(Location::parse("dir/f.tensors").unwrap(), Location::Local("dir/f.tensors".into()));
        assert_eq!(Location::parse("file:///tmp/a%20b").unwrap(), Location::Local("/tmp/a b".into()));
        assert_eq!(
            Location::parse("HTTP://Host:8080/a?b=c").unwrap(),
            Location::Http { url: "http://Host:8080/a?b=c".into() }
        );
        assert_eq!(
            Location::parse("S3://bucket/dir/x y?#.tensors").unwrap(),
            Location::S3 { bucket: "bucket".into(), key: "dir/x y?#.tensors".into() }
        );
        assert_eq!(Location::parse("gs://b/o").unwrap(), Location::Gcs { bucket: "b".into(), object: "o".into() });
        assert_eq!(
            Location::parse("az://c/d/b").unwrap(),
            Location::Azure { account: None, container: "c".into(), blob: "d/b".into() }
        );
        let abfs = Location::parse("abfss://c@acct.dfs.core.windows.net/d/b").unwrap();
        assert_eq!(abfs, Location::Azure { account: Some("acct".into()), container: "c".into(), blob: "d/b".into() });
        assert_eq!(abfs.to_string(), "abfs://c@acct.dfs.core.windows.net/d/b");
        for bad in ["", "s3://bucket", "s3:///k", "gs://b/", "http:///x", "abfs://c/b", "ftp://h/f"] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
        assert!(matches!(Location::parse("ftp://h/f"), Err(Error::Unsupported { .. })));
    }

    #[test]
    fn parses_redis_uris_like_tensorizer() {
        assert_eq!(redis("REDIS://LocalHost/models/llama:7b"), ("localhost".into(), 6379, "models/llama:7b".into()));
        assert_eq!(redis("redis://10.0.0.1:7000//p"), ("10.0.0.1".into(), 7000, "p".into()));
        assert_eq!(redis("redis://[::1]:7001/p"), ("::1".into(), 7001, "p".into()));
        assert_eq!(Location::parse("redis://[::1]:7001/p").unwrap().to_string(), "redis://[::1]:7001/p");
        assert_eq!(redis("redis://h:/p").1, 6379);
        let cluster = Location::parse("Redis+Cluster://H:7000/m:1").unwrap();
        assert_eq!(cluster, Location::RedisCluster { host: "h".into(), port: 7000, prefix: "m:1".into() });
        assert_eq!((cluster.to_string().as_str(), cluster.scheme()), ("redis+cluster://h:7000/m:1", "redis+cluster"));
        for bad in [
            "redis://h",
            "redis://h/",
            "redis:///p",
            "redis://h:0/p",
            "redis://h:65536/p",
            "redis://h:+1/p",
            "redis://h:x/p",
            "redis://u:pw@h/p",
            "redis://h/p?db=1",
            "redis://::1/p",
            "redis://[::1/p",
            "rediss://h/p",
            "rediss+cluster://h/p",
            "redis+cluster://h",
            "redis+cluster://u@h/p",
        ] {
            let err = Location::parse(bad).unwrap_err();
            assert!(matches!(&err, Error::Invalid(m) if m.starts_with(bad)), "{bad}: {err}");
        }
    }
}
