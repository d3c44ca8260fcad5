//! Which certificate authorities `https://` and S3 requests trust.
//!
//! [`TlsOptions`] says it the way tensorizer users say it: a CA bundle
//! (curl's `--cacert`, tensorizer's `CAInfo(cacert=…)`), a directory of CA
//! files (`--capath`, `CAInfo(capath=…)`), or no verification at all
//! (`--insecure`, `CAInfo(allow_untrusted=True)`). When the options name
//! none of these, the usual environment variables are consulted, the first
//! one set deciding:
//!
//! * S3 only: `AWS_CA_BUNDLE` (boto3, which tensorizer uploads with);
//! * `REQUESTS_CA_BUNDLE` (requests, and boto3 after `AWS_CA_BUNDLE`);
//! * `CURL_CA_BUNDLE` (curl, which tensorizer downloads with);
//! * `SSL_CERT_FILE` and/or `SSL_CERT_DIR` (OpenSSL; both apply when both
//!   are set, and `SSL_CERT_DIR` may list several directories with `:`).
//!
//! Otherwise the system's CA bundle is trusted (the first of the usual
//! distribution paths that exists, e.g. `/etc/ssl/certs/ca-certificates.crt`,
//! which holds the CAs an administrator installed with
//! `update-ca-certificates`), or Mozilla's root certificates as compiled in
//! (webpki-root-certs) where there is none. As with curl, requests and boto3, a
//! named bundle replaces the defaults rather than adding to them.
//!
//! A bundle or directory that cannot be read, or holds no certificate, is a
//! [`TlsError`] naming the path and where it came from. A server whose
//! certificate is refused ends the read at once (no retries) with an
//! [`io::Error`] carrying [`TlsError::Untrusted`], which says what was
//! trusted and how to trust a private CA.
//!
//! Every TLS client is configured from one product, built once when the
//! trust is resolved: the trust anchors (a rustls root store and the
//! certificates in it, Mozilla's roots among them, or no verification) and
//! the rustls settings made from them with the ring provider. The Redis
//! client and the AWS credential chain's reqwest client take those
//! settings (`Trust::rustls_config`, `Trust::reqwest_builder`); ureq, whose
//! `TlsConfig` cannot be handed a rustls `ClientConfig` (it builds its own
//! from root certificates, a verification switch and a provider), is given
//! the same certificates, switch and provider (`Trust::tls_config`), and
//! `object_store` (`gs://`, `az://`, the AWS instance metadata service)
//! the same certificates with its system
//! roots switched off, or its verification off
//! (`Trust::object_store_options`), so no certificate is judged twice.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

/// Where the system keeps its CA bundle, by distribution (the paths curl,
/// Go and rustls-native-certs probe).
pub const SYSTEM_BUNDLES: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
    "/usr/local/share/certs/ca-root-nss.crt",
];

/// How Mozilla's roots are named in messages.
const MOZILLA: &str = "Mozilla's root certificates (webpki-root-certs)";

/// Files read from one CA directory at most (a runaway directory).
const MAX_DIR_FILES: usize = 10_000;
/// Largest CA file read (the Debian bundle is about 200 KiB).
const MAX_CA_FILE: u64 = 16 << 20;

/// How `https://` servers' certificates are checked. The default consults
/// the environment, then the system (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM files of CA certificates to trust (curl's `--cacert`). Set, they
    /// (with `ca_dirs`) replace the environment and the defaults.
    pub ca_files: Vec<PathBuf>,
    /// Directories whose files hold PEM CA certificates (curl's
    /// `--capath`); files without certificates are skipped.
    pub ca_dirs: Vec<PathBuf>,
    /// Accept any certificate (curl's `--insecure`): the connection is
    /// encrypted but the server is not authenticated. Outranks everything.
    pub insecure_skip_verify: bool,
    /// Consult the CA variables of the environment when no CA is named
    /// here (default `true`).
    pub from_env: bool,
    /// The roots trusted when neither these options nor the environment
    /// name any.
    pub default_roots: DefaultRoots,
}

impl Default for TlsOptions {
    fn default() -> Self {
        Self {
            ca_files: Vec::new(),
            ca_dirs: Vec::new(),
            insecure_skip_verify: false,
            from_env: true,
            default_roots: DefaultRoots::System,
        }
    }
}

/// The roots trusted when nothing names a CA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DefaultRoots {
    /// The system's CA bundle ([`SYSTEM_BUNDLES`]); Mozilla's roots if
    /// there is none or it holds no certificate.
    #[default]
    System,
    /// Mozilla's root certificates, compiled in (webpki-root-certs).
    WebPki,
}

/// Which client's environment variables apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Plain `http(s)://` URLs.
    Http,
    /// S3 endpoints: `AWS_CA_BUNDLE` comes first.
    S3,
}

/// Where a CA path came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaOrigin {
    /// [`TlsOptions`] (`certificate_handling` in Python).
    Options,
    /// This environment variable.
    Env(&'static str),
    /// The system's bundle.
    System,
}

impl fmt::Display for CaOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Options => f.write_str("the TLS options (certificate_handling)"),
            Self::Env(var) => write!(f, "the environment variable {var}"),
            Self::System => f.write_str("the system's CA bundle"),
        }
    }
}

/// Why TLS could not be set up, or a server was not trusted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A CA file or directory could not be read.
    #[error("cannot read the CA certificates at {path} (named by {origin}): {source}")]
    Unreadable {
        /// The file or directory.
        path: PathBuf,
        /// Who named it.
        origin: CaOrigin,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A CA file has a malformed PEM section.
    #[error("{path} (named by {origin}) is not valid PEM: {detail}")]
    BadPem {
        /// The file.
        path: PathBuf,
        /// Who named it.
        origin: CaOrigin,
        /// What the PEM parser said.
        detail: String,
    },
    /// A CA file or directory holds no PEM certificate.
    #[error(
        "{path} (named by {origin}) holds no PEM certificate \
         (expected \"-----BEGIN CERTIFICATE-----\" sections)"
    )]
    NoCertificates {
        /// The file or directory.
        path: PathBuf,
        /// Who named it.
        origin: CaOrigin,
    },
    /// The server's certificate was refused.
    #[error(
        "the server's certificate was not accepted ({detail}), checked against {trust}; to trust a private \
         certificate authority, name its PEM bundle (certificate_handling=CAInfo(cacert=...), \
         TlsOptions::ca_files, or one of the variables {vars})"
    )]
    Untrusted {
        /// What the TLS library said (e.g. `invalid peer certificate: UnknownIssuer`).
        detail: String,
        /// What was trusted.
        trust: String,
        /// The variables that would have been consulted.
        vars: String,
    },
    /// The TLS library refused the settings themselves.
    #[error("TLS cannot be set up: {detail}")]
    Setup {
        /// What the TLS library said.
        detail: String,
    },
}

/// Resolved trust: what a connection verifies servers against.
#[derive(Clone)]
pub struct Trust {
    anchors: Anchors,
    /// rustls's settings, made from `anchors`.
    config: Arc<rustls::ClientConfig>,
    /// Said in messages: what is trusted and why.
    description: String,
    service: Service,
}

/// What servers are verified against, as every TLS client is configured.
#[derive(Clone)]
enum Anchors {
    /// Any certificate (curl's `--insecure`).
    Any,
    /// These roots: `store` holds exactly `certs` (the certificates rustls
    /// can take as trust anchors; others are skipped, as OpenSSL skips
    /// unusable entries of a bundle), and `object_store` the same
    /// certificates as `object_store` takes them.
    Roots {
        certs: Arc<Vec<Certificate<'static>>>,
        store: Arc<rustls::RootCertStore>,
        #[cfg(feature = "cloud")]
        object_store: Arc<Vec<object_store::Certificate>>,
    },
}

impl Anchors {
    /// The trust anchors among `certs`.
    fn of(certs: Vec<Certificate<'static>>) -> Self {
        let mut store = rustls::RootCertStore::empty();
        let mut usable = Vec::with_capacity(certs.len());
        for cert in certs {
            if store.add(rustls::pki_types::CertificateDer::from(cert.der())).is_ok() {
                usable.push(cert);
            }
        }
        #[cfg(feature = "cloud")]
        let object_store = Arc::new(
            usable
                .iter()
                .filter_map(|c| object_store::Certificate::from_der(c.der()).ok())
                .collect(),
        );
        Self::Roots {
            certs: Arc::new(usable),
            store: Arc::new(store),
            #[cfg(feature = "cloud")]
            object_store,
        }
    }

    /// Mozilla's root certificates (webpki-root-certs), as anchors once per
    /// process: every client is given these same certificates.
    fn mozilla() -> Self {
        static MOZILLA_ROOTS: OnceLock<Anchors> = OnceLock::new();
        MOZILLA_ROOTS
            .get_or_init(|| {
                let certs = webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter();
                Self::of(certs.map(|c| Certificate::from_der(c.as_ref())).collect())
            })
            .clone()
    }

    /// rustls's settings for these anchors, with the ring provider.
    fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup { detail: e.to_string() })?;
        let config = match self {
            Self::Any => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth(),
            Self::Roots { store, .. } => {
                builder.with_root_certificates(Arc::clone(store)).with_no_client_auth()
            }
        };
        Ok(Arc::new(config))
    }
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trust").field("description", &self.description).finish_non_exhaustive()
    }
}

/// The environment variables consulted for `service`, in order.
pub fn env_vars(service: Service) -> &'static [&'static str] {
    match service {
        Service::Http => &["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"],
        Service::S3 => &[
            "AWS_CA_BUNDLE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
        ],
    }
}

impl TlsOptions {
    /// Options that trust the PEM bundle at `path` only.
    pub fn ca_file(path: impl Into<PathBuf>) -> Self {
        Self { ca_files: vec![path.into()], ..Self::default() }
    }

    /// Options that verify nothing (curl's `--insecure`).
    pub fn insecure() -> Self {
        Self { insecure_skip_verify: true, ..Self::default() }
    }

    /// Resolves these options against the process environment for `service`.
    pub fn resolve(&self, service: Service) -> Result<Trust, TlsError> {
        self.resolve_with(service, &process_env)
    }

    /// [`resolve`](Self::resolve) with `env` standing in for the
    /// environment (unset and empty variables are `None`).
    pub fn resolve_with(
        &self,
        service: Service,
        env: &dyn Fn(&str) -> Option<PathBuf>,
    ) -> Result<Trust, TlsError> {
        let trust = |anchors, description: String| Trust::new(anchors, description, service);
        if self.insecure_skip_verify {
            return trust(Anchors::Any, "nothing (verification disabled)".into());
        }
        let mut named: Vec<(PathBuf, CaOrigin, bool)> = Vec::new();
        for f in &self.ca_files {
            named.push((f.clone(), CaOrigin::Options, false));
        }
        for d in &self.ca_dirs {
            named.push((d.clone(), CaOrigin::Options, true));
        }
        if named.is_empty() && self.from_env {
            named = from_env(service, env);
        }
        if !named.is_empty() {
            let mut certs = Vec::new();
            for (path, origin, dir) in &named {
                let found = if *dir { load_dir(path, origin)? } else { load_file(path, origin)? };
                certs.extend(found);
            }
            dedup(&mut certs);
            let what: Vec<String> = named
                .iter()
                .map(|(p, o, d)| {
                    format!(
                        "{} {} ({o})",
                        if *d { "the CA directory" } else { "the CA bundle" },
                        p.display()
                    )
                })
                .collect();
            return trust(Anchors::of(certs), what.join(" and "));
        }
        if self.default_roots == DefaultRoots::System
            && let Some((path, anchors)) = system_bundle()
        {
            return trust(anchors.clone(), format!("the system's CA bundle {}", path.display()));
        }
        trust(Anchors::mozilla(), MOZILLA.into())
    }
}

impl TlsOptions {
    /// [`resolve_with`](Self::resolve_with) for a connection that is
    /// `secure` (`https://`) or not: for a plain `http://` one a CA path
    /// that cannot be used is no error (only a redirect to `https://` would
    /// need it; Mozilla's roots are trusted then).
    pub(crate) fn resolve_for(
        &self,
        service: Service,
        secure: bool,
        env: &dyn Fn(&str) -> Option<PathBuf>,
    ) -> Result<Trust, TlsError> {
        match self.resolve_with(service, env) {
            Err(_) if !secure => Trust::new(Anchors::mozilla(), MOZILLA.into(), service),
            other => other,
        }
    }
}

/// The process environment (unset and empty variables are `None`).
pub(crate) fn process_env(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The CA paths named by the first of `service`'s variables that is set
/// (`SSL_CERT_FILE` and `SSL_CERT_DIR` count as one).
fn from_env(
    service: Service,
    env: &dyn Fn(&str) -> Option<PathBuf>,
) -> Vec<(PathBuf, CaOrigin, bool)> {
    for &var in env_vars(service) {
        if var.starts_with("SSL_CERT_") {
            break;
        }
        if let Some(path) = env(var) {
            return vec![(path, CaOrigin::Env(var), false)];
        }
    }
    let mut named = Vec::new();
    if let Some(path) = env("SSL_CERT_FILE") {
        named.push((path, CaOrigin::Env("SSL_CERT_FILE"), false));
    }
    if let Some(dirs) = env("SSL_CERT_DIR") {
        for dir in std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()) {
            named.push((dir, CaOrigin::Env("SSL_CERT_DIR"), true));
        }
    }
    named
}

/// The certificates of the PEM file at `path`.
fn load_file(path: &Path, origin: &CaOrigin) -> Result<Vec<Certificate<'static>>, TlsError> {
    let unreadable =
        |source| TlsError::Unreadable { path: path.to_path_buf(), origin: origin.clone(), source };
    let len = std::fs::metadata(path).map_err(unreadable)?.len();
    if len > MAX_CA_FILE {
        return Err(unreadable(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} bytes, more than the {MAX_CA_FILE} a CA bundle may have"),
        )));
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    let certs = parse(&bytes).map_err(|detail| TlsError::BadPem {
        path: path.to_path_buf(),
        origin: origin.clone(),
        detail,
    })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificates { path: path.to_path_buf(), origin: origin.clone() });
    }
    Ok(certs)
}

/// The certificates of the files in the directory `path` (not recursive;
/// files that are not PEM certificates are skipped, as OpenSSL does).
fn load_dir(path: &Path, origin: &CaOrigin) -> Result<Vec<Certificate<'static>>, TlsError> {
    let unreadable =
        |source| TlsError::Unreadable { path: path.to_path_buf(), origin: origin.clone(), source };
    let mut certs = Vec::new();
    for entry in std::fs::read_dir(path).map_err(unreadable)?.take(MAX_DIR_FILES) {
        let file = entry.map_err(unreadable)?.path();
        let small = std::fs::metadata(&file).is_ok_and(|m| m.is_file() && m.len() <= MAX_CA_FILE);
        if let Some(found) =
            small.then(|| std::fs::read(&file).ok()).flatten().and_then(|b| parse(&b).ok())
        {
            certs.extend(found);
        }
    }
    if certs.is_empty() {
        return Err(TlsError::NoCertificates { path: path.to_path_buf(), origin: origin.clone() });
    }
    Ok(certs)
}

/// The certificates among PEM `bytes` (other sections, such as keys, and
/// text between sections are skipped).
fn parse(bytes: &[u8]) -> Result<Vec<Certificate<'static>>, String> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(bytes) {
        if let PemItem::Certificate(c) = item.map_err(|e| e.to_string())? {
            certs.push(c);
        }
    }
    Ok(certs)
}

fn dedup(certs: &mut Vec<Certificate<'static>>) {
    let mut seen = std::collections::HashSet::new();
    certs.retain(|c| seen.insert(c.der().to_vec()));
}

/// The system's bundle and its anchors, read once per process.
fn system_bundle() -> Option<&'static (PathBuf, Anchors)> {
    static BUNDLE: OnceLock<Option<(PathBuf, Anchors)>> = OnceLock::new();
    BUNDLE
        .get_or_init(|| {
            SYSTEM_BUNDLES.iter().map(Path::new).filter(|p| p.is_file()).find_map(|p| {
                let certs = load_file(p, &CaOrigin::System).ok()?;
                Some((p.to_path_buf(), Anchors::of(certs)))
            })
        })
        .as_ref()
}

impl Trust {
    /// What is trusted, as said in messages.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Whether certificates are not verified at all.
    pub fn is_insecure(&self) -> bool {
        matches!(self.anchors, Anchors::Any)
    }

    /// The trust of `anchors`, with rustls's settings made from them.
    fn new(anchors: Anchors, description: String, service: Service) -> Result<Self, TlsError> {
        let config = anchors.client_config()?;
        Ok(Self { anchors, config, description, service })
    }

    /// rustls's settings for this trust (the Redis client speaks TLS
    /// through rustls directly).
    pub(crate) fn rustls_config(&self) -> Arc<rustls::ClientConfig> {
        Arc::clone(&self.config)
    }

    /// ureq's TLS settings for this trust: the same anchors and provider
    /// as [`Self::rustls_config`].
    pub(crate) fn tls_config(&self) -> TlsConfig {
        let provider = Arc::clone(self.config.crypto_provider());
        let builder = TlsConfig::builder().unversioned_rustls_crypto_provider(provider);
        match &self.anchors {
            Anchors::Any => builder.disable_verification(true),
            Anchors::Roots { certs, .. } => {
                builder.root_certs(RootCerts::Specific(Arc::clone(certs)))
            }
        }
        .build()
    }

    /// `options` verifying servers as this trust does, for `object_store`'s
    /// requests: exactly these anchors (its system roots, which it would
    /// otherwise judge with rustls-platform-verifier, switched off), or no
    /// verification.
    #[cfg(feature = "cloud")]
    pub(crate) fn object_store_options(
        &self,
        options: object_store::ClientOptions,
    ) -> object_store::ClientOptions {
        match &self.anchors {
            Anchors::Any => options.with_allow_invalid_certificates(true),
            Anchors::Roots { object_store, .. } => object_store
                .iter()
                .fold(options.with_no_system_certificates(true), |options, cert| {
                    options.with_root_certificate(cert.clone())
                }),
        }
    }

    /// `builder` verifying servers with exactly these rustls settings
    /// (reqwest takes a `ClientConfig` as it is), for the requests of the
    /// AWS credential chain (STS, the container endpoint).
    #[cfg(feature = "cloud")]
    pub(crate) fn reqwest_builder(
        &self,
        builder: reqwest::ClientBuilder,
    ) -> reqwest::ClientBuilder {
        builder.tls_backend_preconfigured(rustls::ClientConfig::clone(&self.config))
    }

    /// `e` as a [`TlsError::Untrusted`] (inside an `InvalidData`
    /// `io::Error`) if it is the server's certificate being refused; else
    /// `None`. rustls's error is not a type this crate can name, so it is
    /// recognised by its message ("invalid peer certificate: …").
    pub(crate) fn untrusted(&self, e: &(dyn std::error::Error + 'static)) -> Option<io::Error> {
        let mut cause = Some(e);
        while let Some(c) = cause {
            let text = c.to_string();
            if let Some(at) = text.find("invalid peer certificate") {
                let error = TlsError::Untrusted {
                    detail: text[at..].to_string(),
                    trust: self.description.clone(),
                    vars: env_vars(self.service).join(", "),
                };
                return Some(io::Error::new(io::ErrorKind::InvalidData, error));
            }
            cause = c.source();
        }
        None
    }
}

/// The verifier of [`TlsOptions::insecure`] for rustls: any certificate
/// (signatures are still checked, with the provider's algorithms).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Whether `e` carries a [`TlsError`] (a refused certificate: retrying
/// cannot help).
pub(crate) fn is_tls_failure(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<TlsError>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<PathBuf> {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| PathBuf::from(v))
    }

    #[test]
    fn environment_precedence() {
        let all = env_of(&[
            ("AWS_CA_BUNDLE", "/aws"),
            ("REQUESTS_CA_BUNDLE", "/requests"),
            ("CURL_CA_BUNDLE", "/curl"),
            ("SSL_CERT_FILE", "/file"),
            ("SSL_CERT_DIR", "/d1:/d2"),
        ]);
        let first = |service, env: &dyn Fn(&str) -> Option<PathBuf>| from_env(service, env);
        assert_eq!(
            first(Service::S3, &all),
            vec![(PathBuf::from("/aws"), CaOrigin::Env("AWS_CA_BUNDLE"), false)]
        );
        assert_eq!(
            first(Service::Http, &all),
            vec![(PathBuf::from("/requests"), CaOrigin::Env("REQUESTS_CA_BUNDLE"), false)]
        );
        let curl = env_of(&[
            ("AWS_CA_BUNDLE", "/aws"),
            ("CURL_CA_BUNDLE", "/curl"),
            ("SSL_CERT_FILE", "/f"),
        ]);
        assert_eq!(first(Service::Http, &curl)[0].0, PathBuf::from("/curl"));
        let openssl = env_of(&[("SSL_CERT_FILE", "/file"), ("SSL_CERT_DIR", "/d1:/d2")]);
        let got = first(Service::Http, &openssl);
        assert_eq!(
            got.iter().map(|(p, _, d)| (p.to_str().unwrap(), *d)).collect::<Vec<_>>(),
            [("/file", false), ("/d1", true), ("/d2", true)]
        );
        assert!(first(Service::S3, &env_of(&[])).is_empty());
    }

    #[test]
    fn explicit_options_outrank_the_environment() {
        let env = env_of(&[("SSL_CERT_FILE", "/does/not/exist.pem")]);
        let insecure = TlsOptions::insecure().resolve_with(Service::Http, &env).unwrap();
        assert!(insecure.is_insecure());
        let err = TlsOptions::ca_file("/nope.pem").resolve_with(Service::Http, &env).unwrap_err();
        assert!(matches!(&err, TlsError::Unreadable { origin: CaOrigin::Options, .. }), "{err}");
        let err = TlsOptions::default().resolve_with(Service::Http, &env).unwrap_err();
        assert!(
            matches!(&err, TlsError::Unreadable { origin: CaOrigin::Env("SSL_CERT_FILE"), .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("/does/not/exist.pem")
                && err.to_string().contains("SSL_CERT_FILE")
        );
        // Plain http:// needs no CA: a bad path there is no error.
        assert!(TlsOptions::default().resolve_for(Service::Http, false, &env).is_ok());
        assert!(TlsOptions::default().resolve_for(Service::Http, true, &env).is_err());
        let ignored = TlsOptions {
            from_env: false,
            default_roots: DefaultRoots::WebPki,
            ..TlsOptions::default()
        };
        let trust = ignored.resolve_with(Service::Http, &env).unwrap();
        assert!(trust.description().contains("webpki"), "{}", trust.description());
    }

    #[test]
    fn every_client_is_configured_from_the_same_anchors() {
        let same_provider = |trust: &Trust| {
            let ureq = trust.tls_config();
            let provider = ureq.unversioned_rustls_crypto_provider().clone().unwrap();
            assert!(Arc::ptr_eq(&provider, trust.rustls_config().crypto_provider()));
            ureq
        };
        let insecure = TlsOptions::insecure().resolve_with(Service::Http, &|_| None).unwrap();
        assert!(same_provider(&insecure).disable_verification());
        let mozilla = TlsOptions { default_roots: DefaultRoots::WebPki, ..TlsOptions::default() };
        let mozilla = mozilla.resolve_with(Service::Http, &|_| None).unwrap();
        let Anchors::Roots { certs, .. } = &mozilla.anchors else { panic!("not a root store") };
        assert_eq!(certs.len(), webpki_root_certs::TLS_SERVER_ROOT_CERTS.len());
        assert!(
            matches!(same_provider(&mozilla).root_certs(), RootCerts::Specific(c) if Arc::ptr_eq(c, certs))
        );
        #[cfg(feature = "cloud")]
        {
            use object_store::ClientConfigKey::{AllowInvalidCertificates, NoSystemCertificates};
            let Anchors::Roots { object_store, .. } = &mozilla.anchors else { unreachable!() };
            assert_eq!(object_store.len(), certs.len(), "object_store takes every anchor");
            let options = mozilla.object_store_options(object_store::ClientOptions::new());
            assert_eq!(options.get_config_value(&NoSystemCertificates).as_deref(), Some("true"));
            assert_eq!(
                options.get_config_value(&AllowInvalidCertificates).as_deref(),
                Some("false")
            );
            let options = insecure.object_store_options(object_store::ClientOptions::new());
            assert_eq!(
                options.get_config_value(&AllowInvalidCertificates).as_deref(),
                Some("true")
            );
        }
        // A PEM certificate section that is no trust anchor: skipped once,
        // for both clients.
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            .unwrap();
        let trust = TlsOptions::ca_file(&junk).resolve_with(Service::Http, &|_| None).unwrap();
        let Anchors::Roots { certs, store, .. } = &trust.anchors else {
            panic!("not a root store")
        };
        assert!(certs.is_empty() && store.is_empty());
        let ureq = same_provider(&trust);
        assert!(matches!(ureq.root_certs(), RootCerts::Specific(c) if Arc::ptr_eq(c, certs)));
        assert!(!ureq.disable_verification());
    }

    #[test]
    fn pem_that_is_not_a_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "no certificates here\n").unwrap();
        let err = TlsOptions::ca_file(&text).resolve_with(Service::Http, &|_| None).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificates { .. }), "{err}");
        let bad = dir.path().join("bad.pem");
        std::fs::write(&bad, "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n")
            .unwrap();
        let err = TlsOptions::ca_file(&bad).resolve_with(Service::Http, &|_| None).unwrap_err();
        assert!(matches!(err, TlsError::BadPem { .. }), "{err}");
        let empty = TlsOptions { ca_dirs: vec![dir.path().into()], ..TlsOptions::default() };
        let err = empty.resolve_with(Service::Http, &|_| None).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificates { .. }), "{err}");
    }
}
