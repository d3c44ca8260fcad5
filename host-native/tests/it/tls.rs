//! HTTPS with a private certificate authority: a CA and a server
//! certificate made with the `openssl` command, nginx serving the vectors
//! over TLS on 127.0.0.1 (and proxying to moto for S3), and every way a
//! user names the CA: the options, a CA directory, the environment
//! variables (in a child process, so that no test changes this process's
//! environment), and turning verification off.

use std::path::{Path, PathBuf};
use std::process::Command;

use tensorizer_native::store::http::{HttpOptions, HttpSource};
use tensorizer_native::store::s3::{self, S3Options};
use tensorizer_native::store::tls::{CaOrigin, DefaultRoots, TlsError, TlsOptions};
use tensorizer_native::{Error, RangeSource, ReadOptions, Reader};

use crate::common::{vectors, vectors_dir};
use crate::s3::Moto;
use crate::servers::{Nginx, binary};

/// Every CA variable, removed from the child's environment before the one
/// under test is set.
const CA_VARS: [&str; 5] =
    ["AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"];

/// A private CA and a certificate it signed for 127.0.0.1, in a temporary
/// directory: `ca.pem`, `server.pem`, `server.key`, and `cadir/` holding
/// only the CA.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub(crate) fn make() -> Option<Self> {
        let openssl = binary("openssl", &["/usr/bin/openssl", "/usr/local/bin/openssl"])?;
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let out = Command::new(&openssl).args(args).current_dir(dir.path()).output().unwrap();
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        run(&[
            &["req", "-x509"],
            &ec[..],
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "3", "-subj", "/CN=tzr test CA"],
        ]
        .concat());
        // (`req -x509` adds the default v3_ca extensions: CA:TRUE.)
        run(&[
            &["req"],
            &ec[..],
            &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"],
        ]
        .concat());
        std::fs::write(
            dir.path().join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "3",
            "-extfile",
            "ext.cnf",
        ]);
        // A CA directory as c_rehash leaves it (OpenSSL finds CAs by subject hash; any name does here).
        let hash = Command::new(&openssl)
            .args(["x509", "-hash", "-noout", "-in", "ca.pem"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let hash = String::from_utf8(hash.stdout).unwrap();
        std::fs::create_dir(dir.path().join("cadir")).unwrap();
        std::fs::copy(
            dir.path().join("ca.pem"),
            dir.path().join("cadir").join(format!("{}.0", hash.trim())),
        )
        .unwrap();
        Some(Self { dir })
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The `ssl` part of an nginx `server` block listening on `port`.
    pub(crate) fn listen(&self, port: u16) -> String {
        format!(
            "listen 127.0.0.1:{port} ssl; ssl_certificate {}; ssl_certificate_key {};",
            self.path("server.pem").display(),
            self.path("server.key").display()
        )
    }
}

/// nginx serving `root` over HTTPS with the test CA's certificate.
fn https_nginx(pki: &Pki, root: &Path) -> Option<Nginx> {
    Nginx::serve_block(&|port| {
        format!("{} root {}; location / {{ }}", pki.listen(port), root.display())
    })
}

fn https_url(nginx: &Nginx, file: &str) -> String {
    format!("https://127.0.0.1:{}/{file}", nginx.port)
}

/// Options that ignore the environment, trusting `tls`.
fn options(tls: TlsOptions) -> HttpOptions {
    HttpOptions { tls: TlsOptions { from_env: false, ..tls }, ..HttpOptions::default() }
}

fn load_all<S: RangeSource>(reader: &Reader<S>) -> Vec<Vec<u8>> {
    let mut bufs: Vec<Vec<u8>> =
        reader.entries().iter().map(|e| vec![0; e.nbytes() as usize]).collect();
    reader
        .load_many(bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect())
        .unwrap();
    bufs
}

/// The local copy's tensors of the vector `name`.
fn local_tensors(name: &str) -> Vec<Vec<u8>> {
    let v = vectors().into_iter().find(|v| v.name() == name).unwrap();
    load_all(
        &Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap(),
    )
}

/// A plain (unencrypted) vector to read over the network.
fn plain_vector() -> String {
    vectors().into_iter().find(|v| v.key().is_none() && !v.name().contains("long")).unwrap().name()
}

/// The `TlsError` inside a refused connection's error.
fn untrusted(err: &Error) -> Option<&TlsError> {
    match err {
        Error::Io { source, .. } => source
            .get_ref()
            .and_then(|e| e.downcast_ref::<TlsError>())
            .filter(|e| matches!(e, TlsError::Untrusted { .. })),
        _ => None,
    }
}

#[test]
fn a_private_ca_is_refused_by_default_and_at_once() {
    let Some(pki) = Pki::make() else { return };
    let Some(nginx) = https_nginx(&pki, &vectors_dir()) else { return };
    let url = https_url(&nginx, &plain_vector());
    for roots in [DefaultRoots::System, DefaultRoots::WebPki] {
        let started = std::time::Instant::now();
        let tls = TlsOptions { default_roots: roots, ..TlsOptions::default() };
        let err = HttpSource::open(&url, options(tls)).unwrap_err();
        let Some(TlsError::Untrusted { detail, .. }) = untrusted(&err) else {
            panic!("not a TLS refusal: {err}")
        };
        assert!(detail.contains("UnknownIssuer"), "{detail}");
        let text = err.to_string();
        assert!(
            text.contains(&url) && text.contains("CURL_CA_BUNDLE") && text.contains("CAInfo"),
            "{text}"
        );
        // Not retried with backoff (6 attempts would take over 3 s).
        assert!(started.elapsed() < std::time::Duration::from_secs(3), "{:?}", started.elapsed());
    }
}

#[test]
fn a_named_ca_file_or_directory_is_trusted() {
    let Some(pki) = Pki::make() else { return };
    let Some(nginx) = https_nginx(&pki, &vectors_dir()) else { return };
    let name = plain_vector();
    let expected = local_tensors(&name);
    let by_file = TlsOptions::ca_file(pki.path("ca.pem"));
    let by_dir = TlsOptions { ca_dirs: vec![pki.path("cadir")], ..TlsOptions::default() };
    for tls in [by_file, by_dir, TlsOptions::insecure()] {
        let source = HttpSource::open(&https_url(&nginx, &name), options(tls.clone())).unwrap();
        let reader =
            Reader::new(source, ReadOptions { verify_hash: true, num_readers: 4, key: None })
                .unwrap();
        assert_eq!(load_all(&reader), expected, "{tls:?}");
    }
    // The server's own certificate is not a CA: naming it is not enough.
    let err = HttpSource::open(
        &https_url(&nginx, &name),
        options(TlsOptions::ca_file(pki.path("server.pem"))),
    );
    assert!(untrusted(&err.unwrap_err()).is_some());
}

#[test]
fn unusable_ca_paths_are_typed_errors_naming_the_path() {
    let Some(pki) = Pki::make() else { return };
    let missing = pki.path("missing.pem");
    let err = HttpSource::open("https://127.0.0.1:9/x", options(TlsOptions::ca_file(&missing)))
        .unwrap_err();
    match &err {
        Error::Tls(TlsError::Unreadable { path, origin: CaOrigin::Options, .. }) => {
            assert_eq!(path, &missing)
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("missing.pem"), "{err}");
    // A key is PEM but not a certificate.
    let err = HttpSource::open(
        "https://127.0.0.1:9/x",
        options(TlsOptions::ca_file(pki.path("server.key"))),
    );
    assert!(matches!(err, Err(Error::Tls(TlsError::NoCertificates { .. }))), "{err:?}");
}

/// Runs [`env_child`] in a child process with `vars` (and no other CA
/// variable) set; it opens `uri` and expects `expect`.
fn in_child(uri: &str, expect: &str, vars: &[(&str, &Path)], extra: &[(&str, String)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "tls::env_child", "--nocapture", "--test-threads=1"]);
    for var in CA_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(vars.iter().map(|(k, v)| (*k, v.as_os_str())));
    cmd.envs(extra.iter().map(|(k, v)| (*k, v.as_str())));
    cmd.env("TZR_TLS_CHILD_URI", uri).env("TZR_TLS_CHILD_EXPECT", expect);
    let out = cmd.output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "{vars:?} {expect}: {text}");
}

/// The child's half of the environment tests (does nothing in a normal
/// run): `Reader::open_uri` of `$TZR_TLS_CHILD_URI`, expecting
/// `$TZR_TLS_CHILD_EXPECT`: `ok`, `untrusted`, or `env:VAR` (a typed
/// error about the path `VAR` names).
#[test]
fn env_child() {
    let (Ok(uri), Ok(expect)) =
        (std::env::var("TZR_TLS_CHILD_URI"), std::env::var("TZR_TLS_CHILD_EXPECT"))
    else {
        return;
    };
    match (tensorizer_native::store::open_reader(&uri, ReadOptions::default()), expect.as_str()) {
        (Ok(reader), "ok") => assert!(!load_all(&reader).is_empty()),
        (Err(e), "untrusted") => assert!(untrusted(&e).is_some(), "{e}"),
        (Err(Error::Tls(e @ TlsError::Unreadable { origin: CaOrigin::Env(var), .. })), want) => {
            assert_eq!(Some(var), want.strip_prefix("env:"), "{e}");
            assert!(e.to_string().contains(var), "{e}");
        }
        (Ok(_), want) => panic!("{uri} opened, expected {want}"),
        (Err(e), want) => panic!("{uri}: expected {want}, got {e}"),
    }
}

#[test]
fn the_ca_variables_are_honoured_in_order() {
    let Some(pki) = Pki::make() else { return };
    let Some(nginx) = https_nginx(&pki, &vectors_dir()) else { return };
    let url = https_url(&nginx, &plain_vector());
    let (ca, dir, bad) = (pki.path("ca.pem"), pki.path("cadir"), pki.path("missing.pem"));
    let none: &[(&str, String)] = &[];
    for var in ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"] {
        in_child(&url, "ok", &[(var, &ca)], none);
        in_child(&url, &format!("env:{var}"), &[(var, &bad)], none);
    }
    in_child(&url, "ok", &[("SSL_CERT_DIR", &dir)], none);
    in_child(&url, "untrusted", &[], none);
    // AWS_CA_BUNDLE is boto's: plain HTTPS ignores it.
    in_child(&url, "untrusted", &[("AWS_CA_BUNDLE", &ca)], none);
    // The first variable set decides, even when a later one would work.
    in_child(
        &url,
        "env:REQUESTS_CA_BUNDLE",
        &[("REQUESTS_CA_BUNDLE", &bad), ("CURL_CA_BUNDLE", &ca)],
        none,
    );
    in_child(&url, "ok", &[("CURL_CA_BUNDLE", &ca), ("SSL_CERT_FILE", &bad)], none);
    // Plain http:// needs no CA: a variable naming a missing file does not matter there.
    let Some(plain) = Nginx::serve(&vectors_dir()) else { return };
    in_child(&plain.url(&plain_vector()), "ok", &[("SSL_CERT_FILE", &bad)], none);
}

#[test]
fn s3_over_https_with_a_private_ca() {
    let Some(pki) = Pki::make() else { return };
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket("secure");
    let proxy = |port| {
        format!(
            "{} client_max_body_size 0; location / {{ proxy_pass http://127.0.0.1:{}; \
             proxy_set_header Host $http_host; proxy_request_buffering off; }}",
            pki.listen(port),
            moto.port
        )
    };
    let Some(nginx) = Nginx::serve_block(&proxy) else { return };
    let endpoint = format!("https://127.0.0.1:{}", nginx.port);
    let name = plain_vector();
    let path = vectors_dir().join(&name);
    let uri = format!("s3://secure/{name}");
    let with = |tls| S3Options {
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
        endpoint: Some(endpoint.clone()),
        http: options(tls),
        ..S3Options::default()
    };
    // Uploads and reads both verify the endpoint.
    let err = s3::upload(&path, &uri, &with(TlsOptions::default())).unwrap_err();
    assert!(untrusted(&err).is_some(), "{err}");
    s3::upload(&path, &uri, &with(TlsOptions::ca_file(pki.path("ca.pem")))).unwrap();
    let err = s3::open(&uri, &with(TlsOptions::default())).unwrap_err();
    assert!(untrusted(&err).is_some(), "{err}");
    let source = s3::open(&uri, &with(TlsOptions::ca_file(pki.path("ca.pem")))).unwrap();
    let reader = Reader::new(source, ReadOptions::default()).unwrap();
    assert_eq!(load_all(&reader), local_tensors(&name));
    // From the environment: AWS_CA_BUNDLE, as boto3 has it, before the others.
    let env = [
        ("S3_ENDPOINT_URL", endpoint.clone()),
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
        ("HOME", pki.dir.path().display().to_string()),
    ];
    let (ca, bad) = (pki.path("ca.pem"), pki.path("missing.pem"));
    in_child(&uri, "ok", &[("AWS_CA_BUNDLE", &ca), ("REQUESTS_CA_BUNDLE", &bad)], &env);
    in_child(&uri, "ok", &[("CURL_CA_BUNDLE", &ca)], &env);
    in_child(
        &uri,
        "env:AWS_CA_BUNDLE",
        &[("AWS_CA_BUNDLE", &bad), ("REQUESTS_CA_BUNDLE", &ca)],
        &env,
    );
    in_child(&uri, "untrusted", &[], &env);
    #[cfg(feature = "cloud")]
    web_identity_over_https(&pki, &uri, &endpoint);
}

/// The variables that give S3 keys directly.
#[cfg(feature = "cloud")]
const KEY_VARS: [&str; 4] =
    ["S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];

/// `uri` read from `endpoint` with the keys the AWS credential chain gets
/// from STS there (moto answers both, behind the same TLS proxy): STS is
/// trusted as the S3 endpoint is.
#[cfg(feature = "cloud")]
fn web_identity_over_https(pki: &Pki, uri: &str, endpoint: &str) {
    let token = pki.path("web-identity-token");
    std::fs::write(&token, "eyJ.web-identity.token\n").unwrap();
    let mut env = vec![
        ("S3_ENDPOINT_URL", endpoint.to_string()),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/tzr-test".to_string()),
        ("AWS_ENDPOINT_URL_STS", endpoint.to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ("HOME", pki.dir.path().display().to_string()),
    ];
    // Keys the test's own environment may hold would come first (empty is unset).
    for var in KEY_VARS {
        env.push((var, String::new()));
    }
    in_child(uri, "ok", &[("AWS_CA_BUNDLE", &pki.path("ca.pem"))], &env);
    in_child(uri, "untrusted", &[], &env);
}
