//! Where tensorizer files are stored: a local path or a remote object,
//! parsed once into a [`Location`], then opened for reading with
//! [`open_source`] or for writing with [`open_sink`].
//!
//! | store | reading | writing | feature |
//! |---|---|---|---|
//! | local path | `pread` ([`LocalFile`]) | atomic rename ([`crate::write::atomic`]) | always |
//! | `http(s)://` | range requests ([`http`]) | — | `http` |
//! | `s3://` | presigned range requests ([`s3`]) | single or multipart upload | `s3` |
//! | `gs://`, `az://`, `abfs(s)://` | ranged GETs, through [`http`] where the credentials allow (`cloud`) | single or multipart upload | `cloud` |
//! | `redis://` | `GETRANGE` ([`redis`]) | keys swapped in with `MULTI`/`EXEC` | `redis` |
//! | `redis+cluster://` | `GETRANGE` per master ([`redis::ClusterSource`]) | keys renamed in per slot, behind a marker | `redis` |
//!
//! `http(s)://`, `s3://`, `gs://` and `az://` objects are read by one
//! ranged-read engine (`crate::store::ranged`: the opening, the prefix, the
//! parked opening body, resumption, change detection), each store
//! supplying only its transport.
//! Every remote store retries through one policy (`crate::store::retry`) and
//! reports failures as [`Error::Store`] (not found, permission denied,
//! changed during the read, …) naming the location and the byte range.
//! The store modules only depend on [`crate::source`] (the
//! [`RangeSource`] trait) and on each other downwards (`s3` → `http`;
//! `s3` → `cloud` for the AWS credential chain; `cloud` → `http` for
//! direct reads);
//! nothing below this module dispatches on schemes.

#[cfg(feature = "cloud")]
pub mod cloud;
#[cfg(feature = "http")]
pub mod http;
pub mod http_response;
#[cfg(any(feature = "s3", feature = "cloud"))]
mod ini;
mod location;
#[cfg(any(feature = "http", feature = "cloud"))]
pub(crate) mod ranged;
#[cfg(feature = "redis")]
pub mod redis;
pub mod resp;
pub(crate) mod retry;
#[cfg(feature = "s3")]
pub mod s3;
#[cfg(feature = "http")]
pub mod tls;

use std::path::Path;

pub use crate::store::retry::{
    DEFAULT_GIVE_UP_AFTER, DEFAULT_MAX_BACKOFF, RETRIES_VAR, RETRY_GIVE_UP_VAR, RetryPolicy,
};
pub use location::{Location, REDIS_DEFAULT_PORT, RedisTarget, UPLOADED_SCHEMES};

use crate::error::{Error, Result};
use crate::read::ReadOptions;
use crate::read::Reader;
use crate::source::{Intent, LocalFile, RangeSource, TransferLimits};

/// Settings for every store, in one place. [`intent`](Self::intent) and
/// [`limits`](Self::limits) apply to every remote store and replace the
/// copies inside the per-store options (`http.read_all`, `http.limits`,
/// `s3.http`, `redis.limits`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct StoreOptions {
    /// How much of a source the caller will read.
    pub intent: Intent,
    /// Minimum transfer rate and overall deadline of remote reads.
    pub limits: TransferLimits,
    /// A sink may replace what is already at its location (a local file, a
    /// Redis prefix). Object stores always replace, atomically.
    pub overwrite: bool,
    /// HTTP(S): retries, timeouts, TLS trust (also used by S3).
    #[cfg(feature = "http")]
    pub http: http::HttpOptions,
    /// S3: credentials, endpoint, region, part sizes.
    #[cfg(feature = "s3")]
    pub s3: s3::S3Options,
    /// Redis: retries and timeouts.
    #[cfg(feature = "redis")]
    pub redis: redis::RedisOptions,
    /// Google Cloud Storage and Azure Blob Storage.
    #[cfg(feature = "cloud")]
    pub cloud: crate::store::cloud::CloudOptions,
}

impl StoreOptions {
    /// The defaults for `intent`, with the transfer limits
    /// ([`TransferLimits::from_env`]) and the retry policy
    /// ([`RetryPolicy::from_env`]) of the environment; the policy applies
    /// to every remote store.
    #[cfg_attr(
        not(any(feature = "http", feature = "redis", feature = "cloud")),
        allow(unused_variables)
    )]
    pub fn from_env(intent: Intent) -> Result<Self> {
        let retry = RetryPolicy::from_env()?;
        #[allow(unused_mut)]
        let mut options = Self { intent, limits: TransferLimits::from_env()?, ..Self::default() };
        #[cfg(feature = "http")]
        {
            options.http.retry = retry;
        }
        #[cfg(feature = "redis")]
        {
            options.redis.retry = retry;
        }
        #[cfg(feature = "cloud")]
        {
            options.cloud.retry = retry;
        }
        Ok(options)
    }

    /// The HTTP options with this intent and these limits.
    #[cfg(feature = "http")]
    fn http(&self) -> http::HttpOptions {
        http::HttpOptions {
            read_all: self.intent == Intent::ReadAll,
            limits: self.limits,
            ..self.http.clone()
        }
    }

    /// The S3 options with [`Self::http`] as their HTTP options.
    #[cfg(feature = "s3")]
    fn s3(&self) -> s3::S3Options {
        s3::S3Options { http: self.http(), ..self.s3.clone() }
    }
}

/// The error for a location this build cannot reach: which feature it needs.
#[cfg_attr(
    all(feature = "http", feature = "s3", feature = "redis", feature = "cloud"),
    allow(dead_code)
)]
fn not_built(location: &Location, feature: &str) -> Error {
    Error::Unsupported {
        location: location.to_string(),
        what: format!(
            "this build has no {}:// support; build with feature {feature}",
            location.scheme()
        ),
    }
}

/// Opens `location` for positioned reads from any number of threads.
#[cfg_attr(not(any(feature = "http", feature = "redis")), allow(unused_variables))]
pub fn open_source(location: &Location, options: &StoreOptions) -> Result<Box<dyn RangeSource>> {
    match location {
        Location::Local(path) => Ok(Box::new(LocalFile::open(path)?)),
        #[cfg(feature = "http")]
        Location::Http { url } => Ok(Box::new(http::HttpSource::open(url, options.http())?)),
        #[cfg(feature = "s3")]
        Location::S3 { bucket, key } => {
            Ok(Box::new(options.s3().resolve(bucket, key, false)?.open()?))
        }
        #[cfg(feature = "cloud")]
        Location::Gcs { bucket, object } => {
            crate::store::cloud::open_gcs(bucket, object, &cloud_options(options))
        }
        #[cfg(feature = "cloud")]
        Location::Azure { account, container, blob } => crate::store::cloud::open_azure(
            account.as_deref(),
            container,
            blob,
            &cloud_options(options),
        ),
        #[cfg(feature = "redis")]
        Location::Redis(target) => {
            let redis = redis::RedisOptions { limits: options.limits, ..options.redis };
            Ok(Box::new(redis::RedisSource::open_target(target.clone(), redis, &options.http.tls)?))
        }
        #[cfg(feature = "redis")]
        Location::RedisCluster(target) => {
            let redis = redis::RedisOptions { limits: options.limits, ..options.redis };
            Ok(Box::new(redis::ClusterSource::open_target(
                target.clone(),
                redis,
                &options.http.tls,
            )?))
        }
        #[allow(unreachable_patterns)]
        other => Err(not_built(other, feature_for(other))),
    }
}

/// The cloud options with these limits and the TLS trust every store takes
/// (`http.tls`).
#[cfg(feature = "cloud")]
fn cloud_options(options: &StoreOptions) -> crate::store::cloud::CloudOptions {
    let mut cloud = options.cloud.clone();
    cloud.limits = options.limits;
    cloud.tls = options.http.tls.clone();
    cloud.read_all = options.intent == Intent::ReadAll;
    cloud
}

/// The feature that reads and writes `location`.
#[cfg_attr(
    all(feature = "http", feature = "s3", feature = "redis", feature = "cloud"),
    allow(dead_code)
)]
fn feature_for(location: &Location) -> &'static str {
    match location {
        Location::Http { .. } => "http",
        Location::S3 { .. } => "s3",
        Location::Gcs { .. } | Location::Azure { .. } => "cloud",
        Location::Redis(_) | Location::RedisCluster(_) => "redis",
        Location::Local(_) => "",
    }
}

/// The URIs of the objects directly under the store prefix `uri` (an
/// `s3://`, `gs://` or `az://` URI ending in `/`; one level, not
/// recursive), in name order, with the options of the environment.
/// HTTP cannot list; Redis holds one file per prefix.
#[cfg_attr(not(any(feature = "s3", feature = "cloud")), allow(unused_variables))]
pub fn list_prefix(uri: &str) -> Result<Vec<String>> {
    let location = Location::parse(uri)?;
    let options = StoreOptions::from_env(Intent::Peek)?;
    let under = |keys: Vec<String>, base: &str| -> Vec<String> {
        keys.into_iter().filter_map(|k| Some(format!("{base}{}", k.rsplit('/').next()?))).collect()
    };
    match &location {
        #[cfg(feature = "s3")]
        Location::S3 { bucket, key } => {
            Ok(under(options.s3().resolve(bucket, key, false)?.list()?, uri))
        }
        #[cfg(feature = "cloud")]
        Location::Gcs { bucket, object } => {
            Ok(under(crate::store::cloud::list_gcs(bucket, object, &cloud_options(&options))?, uri))
        }
        #[cfg(feature = "cloud")]
        Location::Azure { account, container, blob } => Ok(under(
            crate::store::cloud::list_azure(
                account.as_deref(),
                container,
                blob,
                &cloud_options(&options),
            )?,
            uri,
        )),
        Location::Http { .. } => Err(Error::Invalid(format!(
            "{uri}: HTTP cannot list a folder; pass the model's *.index.json URI"
        ))),
        #[allow(unreachable_patterns)]
        Location::S3 { .. } | Location::Gcs { .. } | Location::Azure { .. } => {
            Err(not_built(&location, feature_for(&location)))
        }
        _ => Err(Error::Invalid(format!(
            "{uri}: not a store prefix that can be listed (s3://, gs://, az://)"
        ))),
    }
}

/// Parses `uri` and opens it with the options of the environment for
/// `intent` (what `tzr` and [`open_reader`] do).
pub fn open_uri(uri: &str, intent: Intent) -> Result<Box<dyn RangeSource>> {
    let location = Location::parse(uri)?;
    let options =
        if location.is_local() { StoreOptions::default() } else { StoreOptions::from_env(intent)? };
    open_source(&location, &StoreOptions { intent, ..options })
}

/// Opens a local path or a remote URI ([`open_uri`], to be read whole) as
/// a tensorizer file.
pub fn open_reader(uri: &str, options: ReadOptions) -> Result<Reader<Box<dyn RangeSource>>> {
    Reader::new(open_uri(uri, Intent::ReadAll)?, options)
}

/// A place to write a finished tensorizer file to: see [`open_sink`].
#[derive(Debug)]
pub struct Sink {
    location: Location,
    #[cfg_attr(not(any(feature = "s3", feature = "redis")), allow(dead_code))]
    options: StoreOptions,
}

/// Checks that `location` can be written by this build (and, without
/// [`StoreOptions::overwrite`], that a local file is not already there),
/// before anything is read or written.
pub fn open_sink(location: &Location, options: &StoreOptions) -> Result<Sink> {
    match location {
        Location::Http { .. } => {
            return Err(Error::Unsupported {
                location: location.to_string(),
                what: "http(s):// locations are read-only".into(),
            });
        }
        Location::Local(path) if path.exists() && !options.overwrite => {
            return Err(Error::Store {
                location: location.to_string(),
                range: None,
                kind: crate::error::StoreErrorKind::AlreadyExists,
                detail: "a file is already there; allow overwriting to replace it".into(),
            });
        }
        #[cfg(not(feature = "s3"))]
        Location::S3 { .. } => return Err(not_built(location, "s3")),
        #[cfg(not(feature = "cloud"))]
        Location::Gcs { .. } | Location::Azure { .. } => return Err(not_built(location, "cloud")),
        #[cfg(not(feature = "redis"))]
        Location::Redis(_) | Location::RedisCluster(_) => return Err(not_built(location, "redis")),
        _ => {}
    }
    Ok(Sink { location: location.clone(), options: options.clone() })
}

impl Sink {
    /// Where this sink writes.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Stores the finished file at `path` here. Nothing partial is ever
    /// visible at the location: local files are renamed into place, object
    /// stores complete (or abort) one upload, Redis swaps its keys in with
    /// one transaction.
    pub fn put_file(&self, path: &Path) -> Result<()> {
        match &self.location {
            #[cfg(feature = "redis")]
            Location::Redis(_) | Location::RedisCluster(_) => {
                let reader =
                    Reader::new(LocalFile::open(path)?, crate::read::ReadOptions::default())?;
                self.put_reader(&reader, &mut |_| {})
            }
            Location::Local(_) => {
                let source = LocalFile::open(path)?;
                self.copy_local(&source, &mut |_| {})
            }
            _ => self.upload(path),
        }
    }

    /// Stores the file behind `reader` here, reporting the bytes written so
    /// far to `progress`. Redis and local files are written straight from
    /// the reader; object stores upload a local copy (made in the system's
    /// temporary directory unless the reader's source is already a local
    /// file named by the caller through [`put_file`](Self::put_file)).
    pub fn put_reader<S: RangeSource>(
        &self,
        reader: &Reader<S>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        match &self.location {
            #[cfg(feature = "redis")]
            Location::Redis(target) => {
                let options =
                    redis::RedisOptions { limits: self.options.limits, ..self.options.redis };
                redis::write_redis_target(
                    target.clone(),
                    reader,
                    self.options.overwrite,
                    &options,
                    &self.options.http.tls,
                )
            }
            #[cfg(feature = "redis")]
            Location::RedisCluster(target) => {
                let options =
                    redis::RedisOptions { limits: self.options.limits, ..self.options.redis };
                redis::write_cluster_target(
                    target.clone(),
                    reader,
                    self.options.overwrite,
                    &options,
                    &self.options.http.tls,
                )
            }
            Location::Local(_) => self.copy_local(reader.source(), progress),
            _ => {
                let name = self.location.to_string();
                let mut temp = tempfile::Builder::new()
                    .prefix(".tzr-upload-")
                    .tempfile()
                    .map_err(crate::error::file_err(&name))?;
                copy_bytes(reader.source(), temp.as_file_mut(), &name, progress)?;
                self.upload(temp.path())
            }
        }
    }

    /// Copies `source` into the local file, renamed into place when complete.
    fn copy_local(&self, source: &dyn RangeSource, progress: &mut dyn FnMut(u64)) -> Result<()> {
        let Location::Local(path) = &self.location else {
            unreachable!("only called for local sinks")
        };
        let mut temp = crate::write::atomic::AtomicFile::create(path)?;
        let name = self.location.to_string();
        copy_bytes(source, temp.file_mut(), &name, progress)?;
        temp.commit()
    }

    /// Uploads the local file `path` to an object store.
    #[cfg_attr(not(feature = "s3"), allow(unused_variables))]
    fn upload(&self, path: &Path) -> Result<()> {
        match &self.location {
            #[cfg(feature = "s3")]
            Location::S3 { bucket, key } => {
                self.options.s3().resolve(bucket, key, true)?.upload(path)
            }
            #[cfg(feature = "cloud")]
            Location::Gcs { bucket, object } => {
                crate::store::cloud::upload_gcs(path, bucket, object, &cloud_options(&self.options))
            }
            #[cfg(feature = "cloud")]
            Location::Azure { account, container, blob } => crate::store::cloud::upload_azure(
                path,
                account.as_deref(),
                container,
                blob,
                &cloud_options(&self.options),
            ),
            other => Err(not_built(other, feature_for(other))),
        }
    }
}

/// Bytes per read while copying a source into a file.
const COPY_STEP: u64 = 32 << 20;

/// Copies every byte of `source` into `file` (then syncs it), reporting
/// the bytes copied so far.
fn copy_bytes(
    source: &dyn RangeSource,
    file: &mut std::fs::File,
    name: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    use std::io::Write;
    let len = source.len();
    // At most COPY_STEP bytes.
    let mut buf = vec![0u8; COPY_STEP.min(len) as usize];
    let mut offset = 0u64;
    while offset < len {
        let n = (len - offset).min(COPY_STEP) as usize;
        source.read_exact_at(offset, &mut buf[..n])?;
        file.write_all(&buf[..n]).map_err(crate::error::io_err(name, offset))?;
        offset += n as u64;
        progress(offset);
    }
    file.sync_all().map_err(crate::error::io_err(name, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinks_refuse_what_cannot_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let existing = dir.path().join("f");
        std::fs::write(&existing, b"x").unwrap();
        let here = Location::Local(existing.clone());
        let err = open_sink(&here, &StoreOptions::default()).unwrap_err();
        assert_eq!(err.store_kind(), Some(crate::error::StoreErrorKind::AlreadyExists), "{err}");
        let overwrite = StoreOptions { overwrite: true, ..StoreOptions::default() };
        assert!(open_sink(&here, &overwrite).is_ok());
        let http = Location::parse("https://h/f").unwrap();
        assert!(matches!(open_sink(&http, &overwrite), Err(Error::Unsupported { .. })));
        // A local copy through the sink.
        let source = dir.path().join("src");
        std::fs::write(&source, b"bytes").unwrap();
        open_sink(&here, &overwrite).unwrap().put_file(&source).unwrap();
        assert_eq!(std::fs::read(&existing).unwrap(), b"bytes");
    }
}
