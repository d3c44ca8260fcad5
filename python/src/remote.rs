//! `RemoteOptions`: how to reach remote objects, in one typed, frozen
//! class: tensorizer's S3 arguments (credentials, endpoint, region, the
//! s3cmd config file, `force_http`) and its `CAInfo` TLS trust (a CA
//! bundle, a CA directory, or no verification). Every native entry point
//! that opens or writes a remote object takes one; `stream_io` builds it
//! from tensorizer's keyword arguments in one function. `.s3cfg` files are
//! read by the native S3 store (`tensorizer_native::store::s3`), never here.

use std::path::PathBuf;

use pyo3::prelude::*;
use tensorizer_native::store::s3::S3Options;
use tensorizer_native::store::tls::TlsOptions;
use tensorizer_native::{Intent, StoreOptions};

use crate::errors::to_py;

/// S3 and TLS settings for remote objects (unset ones: the environment,
/// `~/.s3cfg`, the system's CAs).
#[pyclass(module = "tensorizer_rs._native", frozen, eq, get_all)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteOptions {
    s3_access_key_id: Option<String>,
    s3_secret_access_key: Option<String>,
    s3_endpoint: Option<String>,
    s3_config_path: Option<PathBuf>,
    s3_region_name: Option<String>,
    force_http: Option<bool>,
    /// A CA bundle file (`CAInfo(cacert=...)`).
    cacert: Option<PathBuf>,
    /// A directory of CA certificates (`CAInfo(capath=...)`).
    capath: Option<PathBuf>,
    /// No certificate verification (`CAInfo(allow_untrusted=True)`).
    allow_untrusted: bool,
}

impl RemoteOptions {
    /// The TLS trust: the CA bundle, the CA directory, or no verification;
    /// none of them: the environment, then the system's CAs.
    fn tls(&self) -> TlsOptions {
        TlsOptions {
            ca_files: self.cacert.iter().cloned().collect(),
            ca_dirs: self.capath.iter().cloned().collect(),
            insecure_skip_verify: self.allow_untrusted,
            ..TlsOptions::default()
        }
    }

    /// The store options for `intent`, with the environment's
    /// `TZR_MIN_RATE` / `TZR_DEADLINE` overrides, as every remote read has.
    pub(crate) fn store_options(&self, intent: Intent) -> PyResult<StoreOptions> {
        let mut options = StoreOptions::from_env(intent).map_err(to_py)?;
        options.s3 = S3Options {
            access_key_id: self.s3_access_key_id.clone(),
            secret_access_key: self.s3_secret_access_key.clone(),
            endpoint: self.s3_endpoint.clone(),
            config_path: self.s3_config_path.clone(),
            region: self.s3_region_name.clone(),
            force_http: self.force_http,
            ..S3Options::default()
        };
        options.http.tls = self.tls();
        Ok(options)
    }

    /// The options given, or the defaults.
    pub(crate) fn or_default(options: Option<PyRef<'_, Self>>) -> Self {
        options.map(|o| o.clone()).unwrap_or_default()
    }
}

#[pymethods]
impl RemoteOptions {
    /// Settings for remote objects; every argument is optional. At most one
    /// of `cacert`, `capath` and `allow_untrusted` (as `CAInfo` takes them).
    #[new]
    #[pyo3(signature = (*, s3_access_key_id=None, s3_secret_access_key=None, s3_endpoint=None,
                        s3_config_path=None, s3_region_name=None, force_http=None,
                        cacert=None, capath=None, allow_untrusted=false))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn new(
        s3_access_key_id: Option<String>,
        s3_secret_access_key: Option<String>,
        s3_endpoint: Option<String>,
        s3_config_path: Option<PathBuf>,
        s3_region_name: Option<String>,
        force_http: Option<bool>,
        cacert: Option<PathBuf>,
        capath: Option<PathBuf>,
        allow_untrusted: bool,
    ) -> PyResult<Self> {
        let trusts = usize::from(cacert.is_some())
            + usize::from(capath.is_some())
            + usize::from(allow_untrusted);
        if trusts > 1 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "give at most one of cacert, capath and allow_untrusted (as CAInfo takes them)",
            ));
        }
        Ok(Self {
            s3_access_key_id,
            s3_secret_access_key,
            s3_endpoint,
            s3_config_path,
            s3_region_name,
            force_http,
            cacert,
            capath,
            allow_untrusted,
        })
    }

    /// A copy with the S3 endpoint and `force_http` replaced (after
    /// tensorizer's endpoint scheme rule: `stream_io._enforce_scheme`).
    fn with_endpoint(&self, s3_endpoint: Option<String>, force_http: Option<bool>) -> Self {
        Self { s3_endpoint, force_http, ..self.clone() }
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            &self.s3_access_key_id,
            &self.s3_endpoint,
            &self.s3_region_name,
            &self.cacert,
            &self.capath,
        )
            .hash(&mut h);
        h.finish()
    }

    fn __repr__(&self) -> String {
        let text = |v: Option<&str>| v.map_or("None".to_string(), |s| format!("'{s}'"));
        let path = |v: &Option<PathBuf>| text(v.as_ref().map(|p| p.to_string_lossy()).as_deref());
        let secret = if self.s3_secret_access_key.is_some() { "<secret hidden>" } else { "None" };
        let truth = |b: bool| if b { "True" } else { "False" };
        format!(
            "RemoteOptions(s3_access_key_id={}, s3_secret_access_key={secret}, s3_endpoint={}, s3_config_path={}, \
             s3_region_name={}, force_http={}, cacert={}, capath={}, allow_untrusted={})",
            text(self.s3_access_key_id.as_deref()),
            text(self.s3_endpoint.as_deref()),
            path(&self.s3_config_path),
            text(self.s3_region_name.as_deref()),
            self.force_http.map_or("None", truth),
            path(&self.cacert),
            path(&self.capath),
            truth(self.allow_untrusted),
        )
    }
}
