//! Google Cloud Storage and Azure Blob Storage through the `object_store`
//! crate, and the AWS credential chain (profiles, web identity, ECS,
//! instance metadata) for the `s3://` store.
//!
//! `object_store` is async (tokio); this module is not. One small
//! process-wide runtime serves every store, and the synchronous functions
//! here block on it. They must not be called from inside a tokio runtime.
//!
//! Reads ([`open_gcs`], [`open_azure`]) are a [`RangeSource`]: each read is
//! one ranged `GET`, pinned to the ETag seen when the object was opened, so
//! an object replaced during a load fails with an error naming it instead of
//! mixing two versions. Writes ([`upload_gcs`], [`upload_azure`]) put small
//! files in one request and larger ones as a multipart upload (parts of
//! [`CloudOptions::part_size`], a few in flight) that is aborted on any
//! failure, so a failed upload leaves no object behind. See
//! `spec/20-cloud-stores.md`.

mod aws;
mod describe;
mod profile;
mod signed;
mod source;
mod upload;

use std::sync::OnceLock;
use std::time::Duration;

use object_store::{BackoffConfig, ClientOptions, RetryConfig};

pub use aws::{AwsCredentials, aws_credential_chain, aws_credential_chain_with};
pub use profile::{AwsProfile, read_aws_profile};
pub use source::{CloudReadOptions, CloudSource, PREFIX};
pub use upload::{upload_azure_reader, upload_gcs_reader};

use crate::error::{Error, Result, StoreErrorKind};
use crate::source::{RangeSource, TransferLimits};
use crate::store::retry::RetryPolicy;
use crate::store::tls::{Service, TlsOptions, Trust, process_env};

/// Default of [`CloudOptions::part_size`]: 8 MiB.
pub const DEFAULT_PART_SIZE: usize = 8 << 20;

/// Smallest part size a multipart upload accepts (S3, GCS: 5 MiB).
pub const MIN_PART_SIZE: usize = 5 << 20;

/// Default of [`CloudOptions::parts_in_flight`].
pub const DEFAULT_PARTS_IN_FLIGHT: usize = 4;

/// Default of [`CloudOptions::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Azurite's well-known account (public, documented by Microsoft).
const AZURITE_ACCOUNT: &str = "devstoreaccount1";

/// Azurite's well-known account key (public, documented by Microsoft).
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Shortest first wait given to `object_store` (it cannot wait zero).
const MIN_BACKOFF: Duration = Duration::from_millis(1);

/// `object_store`'s first wait, standing for the policy's immediate first
/// retry (a broken body or a lone reset is usually transient; waiting the
/// policy's whole `backoff` before every first retry made each reset of an
/// Azure read cost 100–200 ms).
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(10);

/// Bounds of `object_store`'s growth factor between waits.
const GROWTH: (f64, f64) = (2.0, 16.0);

/// Worker threads of the process-wide runtime that drives every store.
const RUNTIME_THREADS: usize = 2;

/// How to reach a cloud store. The defaults talk to the real services with
/// credentials from the environment (`GOOGLE_*`, `AZURE_*` variables, as
/// `object_store` reads them); the overrides point at emulators.
#[derive(Debug, Clone)]
pub struct CloudOptions {
    /// Rate and deadline limits for reads ([`TransferLimits`]): a read that
    /// falls below the minimum rate is retried for the bytes still
    /// missing; one past the deadline fails with `TimedOut`.
    pub limits: TransferLimits,
    /// GCS: the base URL instead of `https://storage.googleapis.com` (an
    /// emulator).
    pub gcs_base_url: Option<String>,
    /// GCS: send unsigned requests (public buckets, emulators).
    pub gcs_anonymous: bool,
    /// GCS: a static OAuth bearer token (e.g. `gcloud auth print-access-token`)
    /// instead of the `GOOGLE_*` credentials; it is not refreshed.
    pub gcs_bearer_token: Option<String>,
    /// Azure: the account URL instead of `https://<account>.blob.core.windows.net`;
    /// for Azurite, `http://127.0.0.1:10000` with [`azure_emulator`](Self::azure_emulator).
    pub azure_endpoint: Option<String>,
    /// Azure: the storage account key (else `AZURE_STORAGE_ACCOUNT_KEY` and
    /// the other `AZURE_*` credentials).
    pub azure_access_key: Option<String>,
    /// Azure: the endpoint is an emulator (Azurite): path-style URLs with the
    /// account name in the path, and Azurite's well-known account and key
    /// unless others are given.
    pub azure_emulator: bool,
    /// Size of each multipart upload part (at least [`MIN_PART_SIZE`]);
    /// files up to this size are uploaded in one request.
    pub part_size: usize,
    /// Parts uploaded at the same time (memory: this many parts).
    pub parts_in_flight: usize,
    /// Longest wait for a TCP + TLS connection.
    pub connect_timeout: Duration,
    /// How failed requests are retried: the policy every remote store
    /// shares, applied by reads themselves ([`CloudSource`]) and given to
    /// `object_store` for the requests of uploads (see [`retry_config`]).
    pub retry: RetryPolicy,
    /// The caller will read most of each object it opens (see
    /// [`CloudReadOptions::read_all`]).
    pub read_all: bool,
    /// Read with the crate's own HTTP client, whose bodies land straight in
    /// the caller's buffers (one copy fewer than `object_store`'s streams):
    /// Azure through a URL the store signs (a SAS, from the account key or
    /// a user delegation key), GCS through the object's URL with a static
    /// bearer token ([`gcs_bearer_token`](Self::gcs_bearer_token) or
    /// `GOOGLE_BEARER_TOKEN`) or none ([`gcs_anonymous`](Self::gcs_anonymous)).
    /// Other credentials (a SAS token, refreshed OAuth tokens, a refused
    /// delegation key) read through `object_store` ([`CloudSource`]). On by
    /// default.
    pub direct_reads: bool,
    /// Which certificate authorities `https://` requests trust, direct
    /// reads and `object_store`'s own requests alike, resolved as for
    /// `http(s)://` URLs (the same environment variables). Opened through
    /// `StoreOptions`, the stores take its `http.tls`.
    pub tls: TlsOptions,
}

impl Default for CloudOptions {
    fn default() -> Self {
        Self {
            limits: TransferLimits::default(),
            gcs_base_url: None,
            gcs_anonymous: false,
            gcs_bearer_token: None,
            azure_endpoint: None,
            azure_access_key: None,
            azure_emulator: false,
            part_size: DEFAULT_PART_SIZE,
            parts_in_flight: DEFAULT_PARTS_IN_FLIGHT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            retry: RetryPolicy::default(),
            read_all: false,
            direct_reads: true,
            tls: TlsOptions::default(),
        }
    }
}

impl CloudOptions {
    /// Longest silence of a connection: one rate window (a connection
    /// silent that long is below any minimum rate), at least a second.
    fn read_timeout(&self) -> Duration {
        self.limits.rate_window.max(Duration::from_secs(1))
    }

    /// How sources opened with these options read.
    fn read_options(&self) -> CloudReadOptions {
        CloudReadOptions { limits: self.limits, retry: self.retry, read_all: self.read_all }
    }

    /// HTTP client options for `endpoint` (none: the service's own, HTTPS):
    /// no whole-request timeout (a multi-GB range may take minutes), a
    /// connect timeout, a stall timeout of one rate window (a connection
    /// silent that long is below any minimum rate), and the servers'
    /// certificates judged against [`tls`](Self::tls)'s trust, which is
    /// returned with them (to word a refused certificate).
    fn client(&self, endpoint: Option<&str>) -> Result<(ClientOptions, Trust)> {
        let allow_http = endpoint.is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"));
        let trust = self.tls.resolve_for(Service::Http, !allow_http, &process_env)?;
        let options = ClientOptions::new()
            .with_timeout_disabled()
            .with_connect_timeout(self.connect_timeout)
            .with_read_timeout(self.read_timeout())
            .with_allow_http(allow_http);
        Ok((trust.object_store_options(options), trust))
    }

    fn retry(&self) -> RetryConfig {
        retry_config(&self.retry)
    }
}

/// `object_store`'s retry settings for `policy`, the retry policy every
/// remote store shares, for the requests of uploads (reads retry
/// themselves: `reads_retry`): `attempts` failed attempts become
/// `attempts - 1` retries, the first wait `FIRST_RETRY_WAIT` (the
/// policy's immediate first retry; `object_store` cannot wait zero), the
/// second up to `backoff`, the longest `max_backoff`, and `give_up_after`
/// the time after which a failing request is not retried again (none:
/// only attempts bound it).
///
/// `object_store` still picks the jitter (each wait drawn between the
/// first wait and `base` times the previous one, not from the upper half
/// of a doubling step), and decides which failures are transient
/// (connection errors, timeouts, 5xx, 429; never 4xx).
pub fn retry_config(policy: &RetryPolicy) -> RetryConfig {
    // object_store waits `init` first, then draws each wait from
    // `init..previous * base`: a short first wait, and a factor that
    // brings the second wait up to the policy's `backoff`.
    let init_backoff = policy.backoff.min(FIRST_RETRY_WAIT).max(MIN_BACKOFF);
    let base =
        (policy.backoff.as_secs_f64() / init_backoff.as_secs_f64()).clamp(GROWTH.0, GROWTH.1);
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff,
            max_backoff: policy.max_backoff.max(init_backoff),
            base,
        },
        max_retries: policy.attempts.max(1).saturating_sub(1) as usize,
        retry_timeout: policy.give_up_after.unwrap_or(Duration::MAX),
    }
}

/// `object_store`'s retry settings for reads: none. [`CloudSource`] retries
/// the requests and bodies of reads itself, under the shared
/// [`RetryPolicy`] and progress-aware, as every other remote store does:
/// `object_store`'s own resumption of a broken body waits longer after
/// each break within one request and never forgets it (with a reset every
/// 32 MiB of a 512 MiB Azurite load, its growing waits made a 0.53 s load
/// take 1.7–5.3 s).
fn reads_retry() -> RetryConfig {
    RetryConfig { max_retries: 0, retry_timeout: Duration::MAX, backoff: BackoffConfig::default() }
}

/// reqwest is built without a default TLS provider: installs ring, the one
/// the rest of the crate uses, as the process default unless the
/// application installed one. Needed before any store or client is built.
fn install_tls() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The process-wide runtime every store runs on.
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        OnceLock::new();
    install_tls();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(RUNTIME_THREADS)
                .thread_name("tzr-cloud")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Invalid(format!("cannot start the cloud store runtime: {e}")))
}

/// Runs `fut` to completion on the runtime. Fails instead of panicking when
/// called from inside a tokio runtime.
fn block_on<F: std::future::Future>(fut: F) -> Result<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::Invalid(
            "cloud stores are synchronous: call them outside an async runtime (e.g. from spawn_blocking)".into(),
        ));
    }
    Ok(runtime()?.block_on(fut))
}

/// An `object_store` error as the crate's [`Error::Store`] (kind
/// `NotFound`, `PermissionDenied`, `Changed`, `AlreadyExists`, or
/// `RetriesExhausted` for what is left after `object_store`'s retries) or
/// [`Error::Unsupported`], naming `name` and, for reads, the byte range
/// (`start`, `len`).
fn store_error(name: &str, range: Option<(u64, u64)>, e: object_store::Error) -> Error {
    use object_store::Error as E;
    let (kind, hint) = match &e {
        E::NotFound { .. } => (StoreErrorKind::NotFound, ""),
        E::PermissionDenied { .. } => {
            (StoreErrorKind::PermissionDenied, " (the credentials lack access)")
        }
        E::Unauthenticated { .. } => (
            StoreErrorKind::PermissionDenied,
            " (no valid credentials: check the store's credential variables)",
        ),
        E::Precondition { .. } => {
            (StoreErrorKind::Changed, " (its ETag differs from when it was opened; open it again)")
        }
        E::AlreadyExists { .. } => (StoreErrorKind::AlreadyExists, ""),
        E::NotSupported { .. } | E::NotImplemented { .. } => {
            return Error::Unsupported { location: name.to_string(), what: describe::describe(&e) };
        }
        _ => (StoreErrorKind::RetriesExhausted, ""),
    };
    let range = range.map(|(start, len)| start..start.saturating_add(len.max(1)));
    Error::store(name, range, kind, format!("{}{hint}", describe::describe(&e)))
}

/// The server's certificate refused by TLS in `e`, judged against `trust`,
/// as the HTTP source reports it: an [`Error::Io`] carrying a
/// [`crate::store::tls::TlsError::Untrusted`] (what was trusted, and how to
/// trust a private CA), which no retry helps; `None` for other failures.
fn refused(
    name: &str,
    range: Option<(u64, u64)>,
    e: &(dyn std::error::Error + 'static),
    trust: &Trust,
) -> Option<Error> {
    let source = trust.untrusted(e)?;
    Some(Error::Io { file: name.to_string(), offset: range.map_or(0, |(start, _)| start), source })
}

/// [`refused`]'s error for `e`, else [`store_error`]'s.
fn request_error(
    name: &str,
    range: Option<(u64, u64)>,
    e: object_store::Error,
    trust: &Trust,
) -> Error {
    refused(name, range, &e, trust).unwrap_or_else(|| store_error(name, range, e))
}

fn bad_location(what: &str, why: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("{what}: {why}"))
}

/// The store of `bucket`, and the trust its requests verify servers with.
fn gcs_store(
    bucket: &str,
    opts: &CloudOptions,
    retry: RetryConfig,
) -> Result<(object_store::gcp::GoogleCloudStorage, Trust)> {
    use object_store::gcp::GoogleCloudStorageBuilder;
    install_tls();
    // The emulator's URL may also come from GOOGLE_BASE_URL (read by
    // `from_env`): plain http:// is allowed for an http:// base URL only.
    let base_url = gcs_base_url(opts);
    let (client, trust) = opts.client(base_url.as_deref())?;
    let mut builder = GoogleCloudStorageBuilder::from_env()
        .with_bucket_name(bucket)
        .with_client_options(client)
        .with_retry(retry);
    if let Some(url) = &opts.gcs_base_url {
        builder = builder.with_base_url(url);
    }
    if let Some(token) = &opts.gcs_bearer_token {
        builder = builder.with_bearer_token(token.clone());
    }
    if opts.gcs_anonymous {
        builder = builder.with_skip_signature(true);
        if opts.gcs_bearer_token.is_none() {
            // object_store 0.14 fetches a credential for writes even when
            // told to skip signatures (and would ask the metadata server):
            // give it a placeholder, which only writes send.
            builder = builder.with_bearer_token("anonymous");
        }
    }
    let store = builder.build().map_err(|e| bad_location(&format!("gs://{bucket}"), e))?;
    Ok((store, trust))
}

/// The GCS base URL of `opts`, else of `GOOGLE_BASE_URL` (an emulator),
/// else none (the real service).
fn gcs_base_url(opts: &CloudOptions) -> Option<String> {
    opts.gcs_base_url.clone().or_else(|| std::env::var("GOOGLE_BASE_URL").ok())
}

/// The store of `container`, and the trust its requests verify servers
/// with.
fn azure_store(
    account: Option<&str>,
    container: &str,
    opts: &CloudOptions,
    retry: RetryConfig,
) -> Result<(object_store::azure::MicrosoftAzure, Trust)> {
    use object_store::azure::MicrosoftAzureBuilder;
    install_tls();
    let (client, trust) = opts.client(opts.azure_endpoint.as_deref())?;
    let mut builder = MicrosoftAzureBuilder::from_env()
        .with_container_name(container)
        .with_client_options(client)
        .with_retry(retry);
    let (default_account, default_key) = match opts.azure_emulator {
        true => (Some(AZURITE_ACCOUNT), Some(AZURITE_KEY)),
        false => (None, None),
    };
    if let Some(account) = account.or(default_account) {
        builder = builder.with_account(account);
    }
    if let Some(key) = opts.azure_access_key.as_deref().or(default_key) {
        builder = builder.with_access_key(key);
    }
    if let Some(endpoint) = &opts.azure_endpoint {
        // Azurite serves path-style URLs: the account is the first segment.
        let endpoint = match opts.azure_emulator {
            true => {
                format!("{}/{}", endpoint.trim_end_matches('/'), account.unwrap_or(AZURITE_ACCOUNT))
            }
            false => endpoint.clone(),
        };
        builder = builder.with_endpoint(endpoint);
    }
    let store =
        builder.build().map_err(|e| bad_location(&azure_name(account, container, ""), e))?;
    Ok((store, trust))
}

fn azure_name(account: Option<&str>, container: &str, blob: &str) -> String {
    match account {
        Some(account) => format!("az://{account}/{container}/{blob}"),
        None => format!("az://{container}/{blob}"),
    }
}

fn object_path(name: &str, object: &str) -> Result<object_store::path::Path> {
    object_store::path::Path::parse(object).map_err(|e| bad_location(name, e))
}

/// Opens `gs://bucket/object` for range reads (see [`CloudSource`]).
pub fn open_gcs(bucket: &str, object: &str, opts: &CloudOptions) -> Result<Box<dyn RangeSource>> {
    let name = format!("gs://{bucket}/{object}");
    let path = object_path(&name, object)?;
    if let Some(source) = signed::open_gcs(bucket, &path, &name, opts)? {
        return Ok(source);
    }
    let (store, trust) = gcs_store(bucket, opts, reads_retry())?;
    let store = std::sync::Arc::new(store);
    Ok(Box::new(CloudSource::open_trusting(store, path, name, &opts.read_options(), trust)?))
}

/// Opens blob `blob` of `container` (in `account`, else the account from
/// `AZURE_STORAGE_ACCOUNT_NAME`) for range reads (see [`CloudSource`]).
pub fn open_azure(
    account: Option<&str>,
    container: &str,
    blob: &str,
    opts: &CloudOptions,
) -> Result<Box<dyn RangeSource>> {
    let name = azure_name(account, container, blob);
    let path = object_path(&name, blob)?;
    let (store, trust) = azure_store(account, container, opts, reads_retry())?;
    if let Some(source) = signed::open_azure(&store, &path, &name, opts)? {
        return Ok(source);
    }
    let store = std::sync::Arc::new(store);
    Ok(Box::new(CloudSource::open_trusting(store, path, name, &opts.read_options(), trust)?))
}

/// Uploads the file at `from` to `gs://bucket/object` (replacing it).
pub fn upload_gcs(
    from: &std::path::Path,
    bucket: &str,
    object: &str,
    opts: &CloudOptions,
) -> Result<()> {
    let name = format!("gs://{bucket}/{object}");
    let (mut file, len) = upload::open_file(from)?;
    let (store, trust) = gcs_store(bucket, opts, opts.retry())?;
    let path = object_path(&name, object)?;
    upload::upload(&store, &trust, &name, &path, &mut file, Some(len), opts)
}

/// Uploads the file at `from` to blob `blob` of `container` (replacing it).
pub fn upload_azure(
    from: &std::path::Path,
    account: Option<&str>,
    container: &str,
    blob: &str,
    opts: &CloudOptions,
) -> Result<()> {
    let name = azure_name(account, container, blob);
    let (mut file, len) = upload::open_file(from)?;
    let (store, trust) = azure_store(account, container, opts, opts.retry())?;
    upload::upload(&store, &trust, &name, &object_path(&name, blob)?, &mut file, Some(len), opts)
}

/// The names (paths in the bucket or container) of the objects directly
/// under `prefix` (which ends in `/`), in name order; `store`'s requests
/// verify servers with `trust`.
fn list_under(
    store: &dyn object_store::ObjectStore,
    trust: &Trust,
    name: &str,
    prefix: &str,
) -> Result<Vec<String>> {
    let path = object_path(name, prefix.trim_end_matches('/'))?;
    let listed = block_on(store.list_with_delimiter(Some(&path)))?
        .map_err(|e| request_error(name, None, e, trust))?;
    let mut names: Vec<String> =
        listed.objects.into_iter().map(|o| o.location.to_string()).collect();
    names.sort();
    Ok(names)
}

/// The objects directly under `gs://bucket/prefix`, one level, in name order.
pub fn list_gcs(bucket: &str, prefix: &str, opts: &CloudOptions) -> Result<Vec<String>> {
    let name = format!("gs://{bucket}/{prefix}");
    let (store, trust) = gcs_store(bucket, opts, opts.retry())?;
    list_under(&store, &trust, &name, prefix)
}

/// The blobs directly under `prefix` in `container`, one level, in name order.
pub fn list_azure(
    account: Option<&str>,
    container: &str,
    prefix: &str,
    opts: &CloudOptions,
) -> Result<Vec<String>> {
    let name = azure_name(account, container, prefix);
    let (store, trust) = azure_store(account, container, opts, opts.retry())?;
    list_under(&store, &trust, &name, prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_inside_a_runtime_is_an_error_not_a_panic() {
        let outer = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let err = outer.block_on(async { block_on(async { 1 }) }).unwrap_err();
        assert!(err.to_string().contains("outside an async runtime"), "{err}");
        assert_eq!(block_on(async { 2 }).unwrap(), 2);
    }

    #[test]
    fn the_shared_retry_policy_maps_onto_object_store() {
        let policy = RetryPolicy {
            attempts: 4,
            backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(8),
            give_up_after: Some(Duration::from_secs(60)),
        };
        let config = retry_config(&policy);
        assert_eq!(config.max_retries, 3, "4 attempts are the first request and 3 retries");
        assert_eq!(config.backoff.init_backoff, FIRST_RETRY_WAIT);
        assert_eq!(config.backoff.max_backoff, Duration::from_secs(8));
        assert_eq!(config.backoff.base, GROWTH.1, "250 ms over a first wait of 10 ms, capped");
        let default = retry_config(&RetryPolicy::default()).backoff;
        assert_eq!(
            (default.init_backoff, default.base),
            (FIRST_RETRY_WAIT, 10.0),
            "10 ms, then up to 100 ms"
        );
        assert_eq!(config.retry_timeout, Duration::from_secs(60));
        let unbounded = RetryPolicy { attempts: 0, give_up_after: None, ..policy };
        let config = retry_config(&unbounded);
        assert_eq!((config.max_retries, config.retry_timeout), (0, Duration::MAX));
        let capped_low = RetryPolicy { max_backoff: Duration::from_millis(1), ..policy };
        assert_eq!(retry_config(&capped_low).backoff.max_backoff, FIRST_RETRY_WAIT);
        let no_wait =
            RetryPolicy { backoff: Duration::ZERO, max_backoff: Duration::ZERO, ..policy };
        assert_eq!(retry_config(&no_wait).backoff.init_backoff, MIN_BACKOFF);
        assert_eq!(
            CloudOptions::default().retry().max_retries,
            RetryPolicy::default().attempts as usize - 1
        );
    }

    #[test]
    fn store_errors_keep_their_kind() {
        let e = object_store::Error::NotFound { path: "p".into(), source: "gone".into() };
        let err = store_error("gs://b/p", Some((5, 10)), e);
        assert_eq!(err.store_kind(), Some(StoreErrorKind::NotFound));
        let e = object_store::Error::Precondition { path: "p".into(), source: "etag".into() };
        assert_eq!(store_error("gs://b/p", None, e).store_kind(), Some(StoreErrorKind::Changed));
        assert!(
            err.to_string().contains("gs://b/p") && err.to_string().contains("bytes 5-14"),
            "{err}"
        );
    }
}
