//! Reads of cloud objects through a URL the store signs, with the crate's
//! own HTTP client ([`HttpSource`]): the data path of `http://` and
//! `s3://`, whose bodies land straight in the caller's buffers, fed by the
//! store's credentials.

use std::time::Duration;

use object_store::path::Path;
use object_store::signer::{Method, Signer};

use super::{CloudOptions, block_on};
use crate::error::Result;
use crate::source::RangeSource;
use crate::store::http::{HttpOptions, HttpSource};

/// Lifetime of a signed URL (as for `s3://`'s presigned ones): longer than
/// any load.
const SIGNED_FOR: Duration = Duration::from_secs(24 * 3600);

/// `path` in `store` opened over a signed URL, or `None` where the
/// credentials cannot sign one (anonymous access, a SAS token, a user
/// delegation key refused or not granted within the connect timeout), or
/// where the object is one the HTTP client does not open (an empty one):
/// the caller then reads through `object_store`. Errors of the object
/// itself (not found, permission denied, retries exhausted) are returned.
pub(super) fn open(
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
    let http = HttpOptions {
        read_all: opts.read_all,
        retry: opts.retry,
        connect_timeout: opts.connect_timeout,
        read_timeout: opts.read_timeout(),
        limits: opts.limits,
        ..HttpOptions::default()
    };
    match HttpSource::open_named(url.as_str(), name, http) {
        Ok(source) => Ok(Some(Box::new(source))),
        Err(e) if e.store_kind().is_some() => Err(e),
        Err(_) => Ok(None),
    }
}
