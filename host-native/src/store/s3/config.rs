//! Where an S3 object is and how to reach it: tensorizer's resolution of
//! keys, endpoint, region and TLS trust from options, the environment and
//! an s3cmd config file (see [`S3Options`]).

use std::path::{Path, PathBuf};

use rusty_s3::{Bucket, Credentials, UrlStyle};

use super::S3Object;
use crate::error::{Error, Result};
use crate::store::http::HttpOptions;
use crate::store::tls::Service;

/// tensorizer's default endpoint for reads when nothing else names one.
pub const DEFAULT_READ_ENDPOINT: &str = "accel-object.ord1.coreweave.com";
/// tensorizer's default endpoint for writes.
pub const DEFAULT_WRITE_ENDPOINT: &str = "object.ord1.coreweave.com";
/// Where an S3 object lives and how to reach it. Every field is optional;
/// unset ones are filled in this order (the first that has a value wins):
///
/// * keys: the explicit field → vLLM's `S3_ACCESS_KEY_ID` /
///   `S3_SECRET_ACCESS_KEY` → the `[default]` section of `config_path` (which
///   must exist) or `~/.s3cfg` (`access_key`, `secret_key`) →
///   `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN` →
///   with the `cloud` feature, the rest of the AWS credential chain (web
///   identity, `~/.aws` profiles, ECS, instance metadata) → anonymous
///   (unsigned) requests. Empty keys also mean anonymous.
/// * endpoint: the explicit field → `S3_ENDPOINT_URL` → `host_base` of the
///   s3cfg file → `AWS_ENDPOINT_URL_S3` → `AWS_ENDPOINT_URL` → tensorizer's
///   CoreWeave defaults. A bare host gets `https://` (`http://` with
///   `force_http`, or s3cfg `use_https = False`); an explicit or s3cfg
///   `http://` endpoint needs `force_http`, as in tensorizer, while one from
///   the environment may be `http://`.
/// * region: the explicit field → `AWS_REGION` → `AWS_DEFAULT_REGION` →
///   `us-east-1`.
/// * TLS trust: `http.tls` if it names CAs or disables verification →
///   `AWS_CA_BUNDLE` → `REQUESTS_CA_BUNDLE` → `CURL_CA_BUNDLE` →
///   `SSL_CERT_FILE` / `SSL_CERT_DIR` → the system's CA bundle (see
///   [`crate::store::tls`]).
///
/// Addressing is path-style (`endpoint/bucket/key`), which every
/// S3-compatible server accepts, except on `*.amazonaws.com` where
/// DNS-compatible buckets use virtual-hosted style.
#[derive(Clone, Default)]
pub struct S3Options {
    /// Access key id (`s3_access_key_id`).
    pub access_key_id: Option<String>,
    /// Secret access key (`s3_secret_access_key`).
    pub secret_access_key: Option<String>,
    /// Session token for temporary credentials.
    pub session_token: Option<String>,
    /// Endpoint URL or host (`s3_endpoint`).
    pub endpoint: Option<String>,
    /// An s3cmd config file (`s3_config_path`).
    pub config_path: Option<PathBuf>,
    /// Signing region (`s3_region_name`).
    pub region: Option<String>,
    /// Use plain HTTP (`force_http`).
    pub force_http: Option<bool>,
    /// Retries, timeouts and TLS trust of each request.
    pub http: HttpOptions,
    /// Bytes per uploaded part (default 16 MiB; raised when a file would
    /// need more than 10,000 parts).
    pub part_size: Option<u64>,
    /// Parts uploaded at once (default 8).
    pub upload_concurrency: Option<usize>,
}

impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Options")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "<redacted>"))
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// Signing credentials, with the session token of temporary ones.
fn credentials(key: String, secret: String, token: Option<String>) -> Credentials {
    match token {
        Some(token) => Credentials::new_with_token(key, secret, token),
        None => Credentials::new(key, secret),
    }
}

/// Splits `s3://bucket/key` into bucket and key.
pub fn parse_s3_uri(uri: &str) -> Result<(String, String)> {
    match crate::store::Location::parse(uri) {
        Ok(crate::store::Location::S3 { bucket, key }) => Ok((bucket, key)),
        _ => Err(Error::Invalid(format!("{uri}: not an S3 object URI (expected s3://bucket/key)"))),
    }
}

/// The `[default]` fields tensorizer reads from an s3cmd config file
/// (`~/.s3cfg`). This is the one reader of that file: Python asks it too.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct S3Cfg {
    /// Whether the file has a `[default]` section at all.
    pub has_default: bool,
    /// `access_key`.
    pub access_key: Option<String>,
    /// `secret_key`.
    pub secret_key: Option<String>,
    /// `host_base`: the endpoint.
    pub host_base: Option<String>,
    /// `use_https`, read as s3cmd reads booleans (`true`/`yes`/`on`/`1` in
    /// any case is true, anything else false).
    pub use_https: Option<bool>,
}

/// Parses an s3cmd config file with the crate's INI reader: the entries of
/// its `[default]` section(s); an empty value is absent.
pub fn parse_s3cfg(text: &str) -> S3Cfg {
    let mut cfg = S3Cfg::default();
    for (_, entries) in crate::store::ini::sections(text).iter().filter(|(s, _)| s == "default") {
        cfg.has_default = true;
        for (key, value) in entries {
            let value = (!value.is_empty()).then(|| value.clone());
            match key.as_str() {
                "access_key" => cfg.access_key = value,
                "secret_key" => cfg.secret_key = value,
                "host_base" => cfg.host_base = value,
                "use_https" => {
                    cfg.use_https = value.map(|v| {
                        matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "on" | "1")
                    })
                }
                _ => {}
            }
        }
    }
    cfg
}

impl S3Options {
    /// Resolves the object `key` of `bucket` against these options, the
    /// environment and the s3cmd config file. `for_write` picks
    /// tensorizer's default write endpoint when none is configured.
    ///
    /// With the `cloud` feature, when none of those names any keys (and
    /// none were given explicitly, not even empty ones), the rest of the
    /// AWS credential chain is tried before going anonymous: web identity,
    /// the `~/.aws` profiles, the ECS container endpoint and the instance
    /// metadata service (see `crate::store::cloud::aws_credential_chain`),
    /// whose requests trust what the S3 requests do.
    pub fn resolve(&self, bucket: &str, key: &str, for_write: bool) -> Result<S3Object> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        #[cfg_attr(not(feature = "cloud"), allow(unused_mut))]
        let mut object = self.resolve_with(
            bucket,
            key,
            for_write,
            &|name| std::env::var(name).ok().filter(|v| !v.is_empty()),
            home.as_deref(),
        )?;
        #[cfg(feature = "cloud")]
        if object.credentials.is_none()
            && self.access_key_id.is_none()
            && self.secret_access_key.is_none()
            && let Some(found) = crate::store::cloud::aws_credential_chain(
                Some(object.bucket.region()),
                &object.trust,
            )?
        {
            object.credentials = Some(credentials(found.key_id, found.secret_key, found.token));
        }
        Ok(object)
    }

    /// [`S3Options::resolve`] of an `s3://bucket/key` URI.
    pub fn resolve_uri(&self, uri: &str, for_write: bool) -> Result<S3Object> {
        let (bucket, key) = parse_s3_uri(uri)?;
        self.resolve(&bucket, &key, for_write)
    }

    /// [`S3Options::resolve`] with the environment read through `env` and
    /// `~/.s3cfg` looked for in `home` (tests give both).
    pub(super) fn resolve_with(
        &self,
        bucket: &str,
        key: &str,
        for_write: bool,
        env: &dyn Fn(&str) -> Option<String>,
        home: Option<&Path>,
    ) -> Result<S3Object> {
        let uri = format!("s3://{bucket}/{key}");
        let (bucket, key) = (bucket.to_string(), key.to_string());
        // A URL path resolves these segments, so it cannot name such a key.
        if key.split('/').any(|segment| segment == "." || segment == "..") {
            return Err(Error::Invalid(format!(
                "{uri}: S3 keys with `.` or `..` path segments are not supported"
            )));
        }
        let cfg = self.s3cfg(&uri, home)?;
        let credentials = self.credentials_of(&uri, &cfg, env)?;
        let url = self.endpoint_of(&uri, &cfg, for_write, env)?;
        let region = self
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_string());
        let (secure, host) = (url.scheme() == "https", url.host_str().unwrap_or_default());
        let dns_bucket =
            bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && (3..=63).contains(&bucket.len());
        let style = match host.ends_with(".amazonaws.com") && dns_bucket {
            true => UrlStyle::VirtualHost,
            false => UrlStyle::Path,
        };
        let trust =
            self.http.tls.resolve_for(Service::S3, secure, &|name| env(name).map(PathBuf::from))?;
        let endpoint = url.origin().ascii_serialization();
        let bucket = Bucket::new(url, style, bucket, region)
            .map_err(|e| Error::Invalid(format!("{uri}: invalid S3 endpoint {endpoint}: {e}")))?;
        Ok(S3Object { uri, endpoint, bucket, key, credentials, options: self.clone(), trust })
    }

    /// The s3cmd configuration: `config_path`'s (which must be readable),
    /// else `home`'s `.s3cfg` if there is one.
    fn s3cfg(&self, uri: &str, home: Option<&Path>) -> Result<S3Cfg> {
        Ok(match (&self.config_path, home) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::Invalid(format!(
                        "{uri}: cannot read the S3 config file {}: {e}",
                        path.display()
                    ))
                })?;
                parse_s3cfg(&text)
            }
            (None, Some(home)) => std::fs::read_to_string(home.join(".s3cfg"))
                .map(|t| parse_s3cfg(&t))
                .unwrap_or_default(),
            (None, None) => S3Cfg::default(),
        })
    }

    /// The key pair, first found of: these options, vLLM's variables,
    /// the s3cmd file, AWS's variables. Half a pair is refused.
    fn credentials_of(
        &self,
        uri: &str,
        cfg: &S3Cfg,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Credentials>> {
        let pick = |explicit: &Option<String>, vllm: &str, from_cfg: &Option<String>, aws: &str| {
            explicit.clone().or_else(|| env(vllm)).or_else(|| from_cfg.clone()).or_else(|| env(aws))
        };
        let access =
            pick(&self.access_key_id, "S3_ACCESS_KEY_ID", &cfg.access_key, "AWS_ACCESS_KEY_ID");
        let secret = pick(
            &self.secret_access_key,
            "S3_SECRET_ACCESS_KEY",
            &cfg.secret_key,
            "AWS_SECRET_ACCESS_KEY",
        );
        match (access, secret) {
            (Some(a), Some(s)) if !a.is_empty() && !s.is_empty() => Ok(Some(credentials(
                a,
                s,
                self.session_token.clone().or_else(|| env("AWS_SESSION_TOKEN")),
            ))),
            (Some(a), None) if !a.is_empty() => Err(Error::Invalid(format!(
                "{uri}: an S3 access key id was given but no secret access key"
            ))),
            _ => Ok(None),
        }
    }

    /// The endpoint's URL, first found of: these options, `S3_ENDPOINT_URL`,
    /// the s3cmd file, AWS's variables, AWS itself (reads and writes have
    /// their own defaults).
    fn endpoint_of(
        &self,
        uri: &str,
        cfg: &S3Cfg,
        for_write: bool,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<url::Url> {
        let force_http = self.force_http.or(cfg.use_https.map(|https| !https)).unwrap_or(false);
        let (endpoint, allow_http) = if let Some(e) = self.endpoint.clone() {
            (e, false)
        } else if let Some(e) = env("S3_ENDPOINT_URL") {
            (e, true)
        } else if let Some(e) = cfg.host_base.clone() {
            (e, false)
        } else if let Some(e) = env("AWS_ENDPOINT_URL_S3").or_else(|| env("AWS_ENDPOINT_URL")) {
            (e, true)
        } else {
            let default = if for_write { DEFAULT_WRITE_ENDPOINT } else { DEFAULT_READ_ENDPOINT };
            (default.to_string(), false)
        };
        endpoint_url(uri, &endpoint, allow_http, force_http)
    }
}

#[cfg(test)]
impl S3Options {
    /// [`S3Options::resolve_with`] of an `s3://bucket/key` URI.
    pub(super) fn resolve_uri_with(
        &self,
        uri: &str,
        for_write: bool,
        env: &dyn Fn(&str) -> Option<String>,
        home: Option<&Path>,
    ) -> Result<S3Object> {
        let (bucket, key) = parse_s3_uri(uri)?;
        self.resolve_with(&bucket, &key, for_write, env, home)
    }
}

/// The endpoint URL by tensorizer's scheme rules: a bare host gets
/// `https://` (or `http://` when forced); `https://` becomes `http://` when
/// forced; `http://` is refused unless forced or allowed. Only the
/// authority of `endpoint` is kept, and the URL leaves out a default port
/// (as the Host header, and so the signature, do).
fn endpoint_url(uri: &str, endpoint: &str, allow_http: bool, force_http: bool) -> Result<url::Url> {
    let (scheme, rest) = match endpoint.split_once("://") {
        Some((s, r)) => (Some(s.to_ascii_lowercase()), r),
        None => (None, endpoint),
    };
    let secure = match scheme.as_deref() {
        None | Some("https") => !force_http,
        Some("http") if force_http || allow_http => false,
        _ => {
            return Err(Error::Invalid(format!(
                "{uri}: non-HTTPS endpoint URLs are not allowed ({endpoint}); pass force_http to use plain HTTP"
            )));
        }
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let scheme = if secure { "https" } else { "http" };
    url::Url::parse(&format!("{scheme}://{authority}"))
        .ok()
        .filter(|url| url.host_str().is_some_and(|host| !host.is_empty()))
        .ok_or_else(|| Error::Invalid(format!("{uri}: invalid S3 endpoint {endpoint:?}")))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in super::super) fn env_from(
        vars: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn resolution_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".s3cfg"),
            "[other]\naccess_key = no\n[default]\naccess_key = cfg-key\nsecret_key = cfg-secret\n\
             host_base = minio.local:9000\nuse_https = False\n",
        )
        .unwrap();
        let none = S3Options::default();
        let home = Some(dir.path());
        let env = env_from(&[
            ("AWS_ACCESS_KEY_ID", "aws"),
            ("AWS_SECRET_ACCESS_KEY", "aws-s"),
            ("AWS_REGION", "eu"),
        ]);
        let o = none.resolve_uri_with("s3://b/k", false, &env, home).unwrap();
        assert_eq!(o.credentials.as_ref().unwrap().key(), "cfg-key");
        assert_eq!(o.endpoint(), "http://minio.local:9000");
        assert_eq!(o.bucket.region(), "eu");
        // vLLM's variables come before the config file.
        let vllm = env_from(&[
            ("S3_ACCESS_KEY_ID", "v"),
            ("S3_SECRET_ACCESS_KEY", "vs"),
            ("S3_ENDPOINT_URL", "http://127.0.0.1:9"),
        ]);
        let o = none.resolve_uri_with("s3://b/k", false, &vllm, home).unwrap();
        assert_eq!(o.credentials.as_ref().unwrap().key(), "v");
        assert_eq!(
            o.endpoint(),
            "http://127.0.0.1:9",
            "vLLM's endpoint variable outranks the config file"
        );
        let aws_endpoint = env_from(&[("AWS_ENDPOINT_URL", "http://aws.local")]);
        let o = none.resolve_uri_with("s3://b/k", false, &aws_endpoint, home).unwrap();
        assert_eq!(
            o.endpoint(),
            "http://minio.local:9000",
            "the config file outranks AWS_ENDPOINT_URL"
        );
        // No config file: the AWS variables, then tensorizer's defaults.
        let o = none.resolve_uri_with("s3://b/k", true, &env, None).unwrap();
        assert_eq!(o.credentials.as_ref().unwrap().key(), "aws");
        assert_eq!(o.endpoint(), "https://object.ord1.coreweave.com");
        let o = none.resolve_uri_with("s3://b/k/x y", false, &|_| None, None).unwrap();
        assert!(o.credentials.is_none());
        assert_eq!(o.presigned_get_url(60), "https://accel-object.ord1.coreweave.com/b/k/x%20y");
        // Explicit http:// endpoints need force_http, as in tensorizer.
        let http = S3Options { endpoint: Some("http://h".into()), ..S3Options::default() };
        assert!(http.resolve_uri_with("s3://b/k", false, &|_| None, None).is_err());
        let forced = S3Options { force_http: Some(true), ..http };
        assert_eq!(
            forced.resolve_uri_with("s3://b/k", false, &|_| None, None).unwrap().endpoint(),
            "http://h"
        );
        assert!(parse_s3_uri("s3://bucket").is_err() && parse_s3_uri("s3:///k").is_err());
    }
}
