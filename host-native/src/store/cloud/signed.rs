//! Reads of cloud objects with the crate's own HTTP client
//! ([`HttpSource`]), the data path of `http://` and `s3://`, whose bodies
//! land straight in the caller's buffers, fed by the store's credentials:
//! Azure blobs through a URL the store signs, GCS objects through their
//! URL with a static bearer token or none.

use std::time::Duration;

use object_store::path::Path;
use object_store::signer::{Method, Signer};

use super::{CloudOptions, block_on, gcs_base_url};
use crate::error::{Error, Result};
use crate::source::RangeSource;
use crate::store::http::{Authorization, HttpOptions, HttpSource};
use crate::store::tls::is_tls_failure;

/// Lifetime of a signed URL (as for `s3://`'s presigned ones): longer than
/// any load.
const SIGNED_FOR: Duration = Duration::from_secs(24 * 3600);

/// `path` in `store` opened over a signed URL, or `None` where the
/// credentials cannot sign one (anonymous access, a SAS token, a user
/// delegation key refused or not granted within the connect timeout), or
/// where the object is one the HTTP client does not open (an empty one):
/// the caller then reads through `object_store`. Errors of the object
/// itself (not found, permission denied, retries exhausted) are returned.
pub(super) fn open_azure(
    store: &dyn Signer,
    path: &Path,
    name: &str,
    opts: &CloudOptions,
) -> Result<Option<Box<dyn RangeSource>>> {
    if !opts.direct_reads {
        return Ok(None);
    }
    let limit = opts.connect_timeout;
    let sign = store.signed_url(Method::GET, path, SIGNED_FOR);
    let Ok(Ok(url)) = block_on(async move { tokio::time::timeout(limit, sign).await })? else {
        return Ok(None);
    };
    direct(url.as_str(), name, opts, None)
}

/// GCS's own address, where no base URL is configured.
const GCS_URL: &str = "https://storage.googleapis.com";

/// `gs://bucket/path` opened over its XML API URL, or `None` where the
/// credentials are not a static bearer token or anonymous access (tokens
/// `object_store` refreshes, from a service account or the metadata
/// server, may expire during a long load; those reads go through
/// `object_store`), or where the object is one the HTTP client does not
/// open. Errors of the object itself are returned.
pub(super) fn open_gcs(
    bucket: &str,
    path: &Path,
    name: &str,
    opts: &CloudOptions,
) -> Result<Option<Box<dyn RangeSource>>> {
    if !opts.direct_reads {
        return Ok(None);
    }
    let authorization = match opts.gcs_anonymous {
        true => None,
        false => {
            let token =
                opts.gcs_bearer_token.clone().or_else(|| std::env::var("GOOGLE_BEARER_TOKEN").ok());
            let Some(authorization) = token.as_deref().and_then(Authorization::bearer) else {
                return Ok(None);
            };
            Some(authorization)
        }
    };
    let base = gcs_base_url(opts).unwrap_or_else(|| GCS_URL.to_string());
    let url =
        format!("{}/{}/{}", base.trim_end_matches('/'), encode(bucket), encode(path.as_ref()));
    direct(&url, name, opts, authorization)
}

/// `url` opened with the crate's HTTP client under `opts`' limits and
/// policy; `None` for an object it does not open (an empty one, whose
/// ranged answer has no valid `Content-Range`), errors of the object
/// itself (a store error kind) and TLS's refusals returned.
fn direct(
    url: &str,
    name: &str,
    opts: &CloudOptions,
    authorization: Option<Authorization>,
) -> Result<Option<Box<dyn RangeSource>>> {
    let http = HttpOptions {
        read_all: opts.read_all,
        retry: opts.retry,
        connect_timeout: opts.connect_timeout,
        read_timeout: opts.read_timeout(),
        limits: opts.limits,
        authorization,
        tls: opts.tls.clone(),
    };
    match HttpSource::open_named(url, name, http) {
        Ok(source) => Ok(Some(Box::new(source))),
        Err(e) if e.store_kind().is_some() || refused(&e) => Err(e),
        Err(_) => Ok(None),
    }
}

/// Whether `e` is TLS refusing the server or the CAs named: `object_store`
/// would be refused alike (it is given the same trust).
fn refused(e: &Error) -> bool {
    match e {
        Error::Tls(_) => true,
        Error::Io { source, .. } => is_tls_failure(source),
        _ => false,
    }
}

/// `s` percent-encoded as `object_store` encodes GCS bucket and object
/// names in URLs: every byte but ASCII letters and digits.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_encoded_as_object_store_encodes_them() {
        assert_eq!(encode("a/b c.tensors"), "a%2Fb%20c%2Etensors");
        assert_eq!(encode("ü"), "%C3%BC");
    }
}
