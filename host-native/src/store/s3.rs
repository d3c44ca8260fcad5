//! S3 and S3-compatible object stores (`s3://bucket/key`).
//!
//! Requests are presigned (SigV4, query-string) URLs from the `rusty-s3`
//! crate, which also writes the `CompleteMultipartUpload` body; they are
//! sent by our own HTTP client. Reads go through [`HttpSource`] on a
//! presigned GET URL, so they get the same concurrent range requests, retries and
//! ETag checks as plain HTTP, and messages name the `s3://` URI, never the
//! signature. Writes upload a finished local file: one signed PUT when it
//! fits in a part, otherwise a multipart upload with parts sent
//! concurrently, each retried on its own; any failure aborts the upload, so
//! nothing partial ever becomes visible under the key. A completion whose
//! reply is lost is checked with a `HEAD` of the object (size and the
//! multipart ETag computed from the parts' ETags) before it counts as a
//! failure.
//!
//! Configuration is resolved the way tensorizer users have it set up; see
//! [`S3Options`]. TLS trust is [`HttpOptions::tls`](crate::store::http::HttpOptions::tls) resolved for S3
//! (`AWS_CA_BUNDLE` first; see [`crate::store::tls`]), for reads and uploads alike.

use std::io::Read;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use md5::{Digest, Md5};
use rusty_s3::{Bucket, Credentials, S3Action};

mod config;

pub use config::{
    DEFAULT_READ_ENDPOINT, DEFAULT_WRITE_ENDPOINT, S3Cfg, S3Options, parse_s3_uri, parse_s3cfg,
};

use crate::error::{Error, Result, StoreErrorKind};
use crate::store::http::{HttpSource, agent};
use crate::store::retry::{Attempt, Pace, Paced, Target, retry};
use crate::store::tls::Trust;

/// Lifetime of a presigned URL.
const PRESIGN_FOR: Duration = Duration::from_secs(24 * 3600);
/// Most pages (of up to 1000 keys) a listing of a prefix reads.
pub const MAX_LISTED_PAGES: usize = 10;
/// S3's smallest part (except the last) and largest part count.
const MIN_PART: u64 = 5 << 20;
const MAX_PARTS: u64 = 10_000;

/// A resolved S3 object: endpoint, bucket (with its region and URL
/// style), key, credentials.
#[derive(Clone)]
pub struct S3Object {
    uri: String,
    /// `scheme://host[:port]`, without a default port.
    endpoint: String,
    bucket: Bucket,
    key: String,
    credentials: Option<Credentials>,
    options: S3Options,
    trust: Trust,
}

/// One S3 call on the object, signed by [`S3Object::signed`].
enum Call<'a> {
    Put,
    Head,
    CreateMultipart,
    UploadPart {
        number: u16,
        upload_id: &'a str,
    },
    CompleteMultipart {
        upload_id: &'a str,
        etags: &'a [String],
    },
    AbortMultipart {
        upload_id: &'a str,
    },
    /// One page of the objects directly under the key taken as a prefix.
    List {
        token: Option<&'a str>,
    },
}

impl std::fmt::Debug for S3Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Object")
            .field("uri", &self.uri)
            .field("endpoint", &self.endpoint())
            .field("region", &self.bucket.region())
            .field("signed", &self.credentials.is_some())
            .field("trust", &self.trust)
            .finish()
    }
}

impl S3Object {
    /// The object's `s3://` URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The endpoint in use, e.g. `http://127.0.0.1:9000`.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// A presigned GET URL for the object, valid for `expires` seconds from
    /// now (unsigned when no credentials are configured).
    pub fn presigned_get_url(&self, expires: u64) -> String {
        self.bucket
            .get_object(self.credentials.as_ref(), &self.key)
            .sign(Duration::from_secs(expires))
            .into()
    }

    /// The HTTP method and presigned URL of `call`.
    fn signed(&self, call: &Call<'_>) -> (&'static str, String) {
        let (bucket, creds, key) = (&self.bucket, self.credentials.as_ref(), self.key.as_str());
        let (method, url) = match *call {
            Call::Put => ("PUT", bucket.put_object(creds, key).sign(PRESIGN_FOR)),
            Call::Head => ("HEAD", bucket.head_object(creds, key).sign(PRESIGN_FOR)),
            Call::CreateMultipart => {
                ("POST", bucket.create_multipart_upload(creds, key).sign(PRESIGN_FOR))
            }
            Call::UploadPart { number, upload_id } => {
                ("PUT", bucket.upload_part(creds, key, number, upload_id).sign(PRESIGN_FOR))
            }
            Call::CompleteMultipart { upload_id, etags } => {
                let etags = etags.iter().map(String::as_str);
                (
                    "POST",
                    bucket
                        .complete_multipart_upload(creds, key, upload_id, etags)
                        .sign(PRESIGN_FOR),
                )
            }
            Call::AbortMultipart { upload_id } => {
                ("DELETE", bucket.abort_multipart_upload(creds, key, upload_id).sign(PRESIGN_FOR))
            }
            Call::List { token } => {
                let mut list = bucket.list_objects_v2(creds);
                list.with_prefix(key);
                list.with_delimiter("/");
                if let Some(token) = token {
                    list.with_continuation_token(token);
                }
                ("GET", list.sign(PRESIGN_FOR))
            }
        };
        (method, url.into())
    }

    /// The keys of the objects directly under this object's key taken as
    /// a prefix (`model/` lists `model/a.safetensors`, not
    /// `model/sub/b.safetensors`), in key order; at most
    /// [`MAX_LISTED_PAGES`] pages of the store's listing.
    pub fn list(&self) -> Result<Vec<String>> {
        let agent = agent(&self.options.http, &self.trust);
        let (mut keys, mut token) = (Vec::new(), None::<String>);
        for _ in 0..MAX_LISTED_PAGES {
            let call = Call::List { token: token.as_deref() };
            let reply = self.request(&agent, &call, &[], "list the prefix")?;
            let page =
                rusty_s3::actions::ListObjectsV2::parse_response(&reply.body).map_err(|e| {
                    self.fail(format!("list the prefix: the reply is not a listing: {e}"))
                })?;
            keys.extend(page.contents.into_iter().map(|c| c.key));
            match page.next_continuation_token {
                Some(next) => token = Some(next),
                None => return Ok(keys),
            }
        }
        Err(self.fail(format!(
            "list the prefix: more than MAX_LISTED_PAGES = {MAX_LISTED_PAGES} pages of objects"
        )))
    }

    /// Opens the object for concurrent range reads.
    pub fn open(&self) -> Result<HttpSource> {
        HttpSource::open_trusted(
            &self.presigned_get_url(PRESIGN_FOR.as_secs()),
            &self.uri,
            self.options.http.clone(),
            self.trust.clone(),
        )
    }

    fn fail(&self, what: impl std::fmt::Display) -> Error {
        Error::Io {
            file: self.uri.clone(),
            offset: 0,
            source: std::io::Error::other(what.to_string()),
        }
    }

    /// Uploads the local file at `path` to this object. Nothing is visible
    /// under the key unless the whole upload succeeds.
    pub fn upload(&self, path: &Path) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(crate::error::file_err(&name))?;
        let len = file.metadata().map_err(crate::error::file_err(&name))?.len();
        let part = self.part_size(len);
        let agent = agent(&self.options.http, &self.trust);
        if len <= part {
            let mut body =
                vec![0u8; usize::try_from(len).map_err(|_| self.fail("file too large"))?];
            file.read_exact_at(&mut body, 0).map_err(crate::error::io_err(&name, 0))?;
            return self.request(&agent, &Call::Put, &body, "upload").map(drop);
        }
        let reply =
            self.request(&agent, &Call::CreateMultipart, &[], "start a multipart upload")?;
        let upload_id = from_xml::<CreateMultipartUploadReply>(&reply.body)
            .map(|r| r.upload_id)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| self.fail("starting a multipart upload: no UploadId in the reply"))?;
        match self.upload_parts(&agent, &file, &name, len, part, &upload_id) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.abort(&agent, &upload_id, e)),
        }
    }

    fn part_size(&self, len: u64) -> u64 {
        let wanted = self.options.part_size.unwrap_or(16 << 20).max(MIN_PART);
        let needed = len.div_ceil(MAX_PARTS).next_multiple_of(1 << 20);
        wanted.max(needed)
    }

    fn upload_parts(
        &self,
        agent: &ureq::Agent,
        file: &std::fs::File,
        name: &str,
        len: u64,
        part: u64,
        upload_id: &str,
    ) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let count = len.div_ceil(part);
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let etags = Mutex::new(vec![String::new(); count as usize]);
        let first_error = Mutex::new(None);
        let workers = self.options.upload_concurrency.unwrap_or(8).clamp(1, 64).min(count as usize);
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    let mut body = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed) as u64;
                        if i >= count || failed.load(Ordering::Relaxed) {
                            return;
                        }
                        let start = i * part;
                        // `part` fits in memory: it is at most len / 10,000 or the configured size.
                        body.resize((part.min(len - start)) as usize, 0);
                        // At most MAX_PARTS (10,000) parts.
                        let number = u16::try_from(i + 1).unwrap_or(u16::MAX);
                        let result = file
                            .read_exact_at(&mut body, start)
                            .map_err(crate::error::io_err(name, start))
                            .and_then(|()| {
                                self.request(
                                    agent,
                                    &Call::UploadPart { number, upload_id },
                                    &body,
                                    &format!(
                                        "upload part {number} (bytes {start}-{})",
                                        start + body.len() as u64 - 1
                                    ),
                                )
                            });
                        match result.and_then(|r| {
                            r.etag.ok_or_else(|| self.fail(format!("part {number}: no ETag")))
                        }) {
                            Ok(etag) => {
                                etags.lock().unwrap_or_else(|p| p.into_inner())[i as usize] = etag
                            }
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                first_error
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .get_or_insert(e);
                                return;
                            }
                        }
                    }
                });
            }
        });
        if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        let etags = etags.into_inner().unwrap_or_else(|p| p.into_inner());
        let parts = etags.iter().map(String::as_str);
        let xml = self.bucket.complete_multipart_upload(None, &self.key, upload_id, parts).body();
        let complete = Call::CompleteMultipart { upload_id, etags: &etags };
        match self.request(agent, &complete, xml.as_bytes(), "complete the multipart upload") {
            Ok(_) => Ok(()),
            // The reply may have been lost after S3 completed the upload (a
            // retry then gets NoSuchUpload): the object itself says.
            Err(e) => match self.check_completed(agent, len, &etags) {
                Ok(()) => Ok(()),
                Err(why) => {
                    let cause = match &e {
                        Error::Io { source, .. } => source.to_string(),
                        other => other.to_string(),
                    };
                    Err(self.fail(format!(
                        "{cause}; checked afterwards, the object is not the upload: {why}"
                    )))
                }
            },
        }
    }

    /// Whether the object now is the upload of `len` bytes in parts with
    /// `etags`: a `HEAD` must show that size and the multipart ETag (MD5
    /// of the parts' binary MD5s, `-` and the part count). `Err` says why
    /// not.
    fn check_completed(
        &self,
        agent: &ureq::Agent,
        len: u64,
        etags: &[String],
    ) -> Result<(), String> {
        let expected = multipart_etag(etags)
            .ok_or("the parts' ETags are not MD5s, so the upload cannot be recognised")?;
        let head =
            self.request(agent, &Call::Head, &[], "check the object").map_err(|e| e.to_string())?;
        let etag = head.etag.as_deref().map(|t| t.trim_matches('"').to_ascii_lowercase());
        if head.len != Some(len) {
            return Err(format!(
                "it holds {} bytes, not {len}",
                head.len.map_or("an unknown number of".into(), |n| n.to_string())
            ));
        }
        if etag.as_deref() != Some(expected.as_str()) {
            return Err(format!(
                "its ETag is {}, not {expected}",
                etag.unwrap_or_else(|| "missing".into())
            ));
        }
        Ok(())
    }

    /// Aborts the multipart upload after `cause`; the error says whether
    /// the abort itself went through.
    fn abort(&self, agent: &ureq::Agent, upload_id: &str, cause: Error) -> Error {
        // The abort gets a few attempts even when the caller allowed one.
        let mut this = self.clone();
        this.options.http.retry.attempts = this.options.http.retry.attempts.max(4);
        match this.request(agent, &Call::AbortMultipart { upload_id }, &[], "abort the multipart upload") {
            Ok(_) => cause,
            Err(e) => self.fail(format!(
                "{cause}; aborting multipart upload {upload_id} also failed ({e}), so its parts stay stored \
                 (invisible) until the bucket's lifecycle rules remove them"
            )),
        }
    }

    /// One S3 call with retries on transient failures. S3 may answer 200
    /// with an `<Error>` body (CompleteMultipartUpload); that counts as a
    /// failure too.
    fn request(
        &self,
        agent: &ureq::Agent,
        call: &Call<'_>,
        body: &[u8],
        what: &str,
    ) -> Result<Reply> {
        let http = &self.options.http;
        retry(&http.retry, Target { location: &self.uri, range: None }, || {
            let (method, url) = self.signed(call);
            let sent = match method {
                "PUT" => agent.put(&url).send(body),
                "POST" => agent.post(&url).send(body),
                "DELETE" => agent.delete(&url).call(),
                "GET" => agent.get(&url).call(),
                _ => agent.head(&url).call(),
            };
            let resp = match sent {
                Ok(r) => r,
                Err(e) => match self.trust.untrusted(&e) {
                    // Retrying cannot help, and the error keeps its type.
                    Some(untrusted) => {
                        return Attempt::Final(Error::Io {
                            file: self.uri.clone(),
                            offset: 0,
                            source: untrusted,
                        });
                    }
                    None => return Attempt::Retry(self.fail(format!("{what}: {e}"))),
                },
            };
            let status = resp.status().as_u16();
            let header = |name: &str| {
                resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
            };
            let etag = header("etag");
            let len = header("content-length").and_then(|v| v.parse().ok());
            // Paced: a reply trickled byte by byte ends like a slow read.
            let mut body = resp.into_body();
            let mut reply = Paced {
                inner: body.with_config().limit(1 << 20).reader(),
                pace: Pace::new(&http.limits, None),
            };
            let mut text = String::new();
            if let Err(e) = reply.read_to_string(&mut text) {
                return Attempt::Retry(self.fail(format!("{what}: reading the reply: {e}")));
            }
            let ErrorReply { code, message } = match status {
                200..=299 if !text.contains("<Error>") => ErrorReply::default(),
                _ => from_xml(&text).unwrap_or_default(),
            };
            let error = || {
                let why = format!("{what}: HTTP {status} {code} {message}").trim_end().to_string();
                match store_error_kind(status, &code) {
                    Some(kind) => Error::store(&self.uri, None, kind, why),
                    None => self.fail(why),
                }
            };
            match status {
                200..=299 if !text.contains("<Error>") => {
                    Attempt::Ok(Reply { etag, len, body: text })
                }
                200..=299 | 408 | 429 | 500..=599 => Attempt::Retry(error()),
                _ => Attempt::Final(error()),
            }
        })
    }
}

/// The kind of failure an S3 status and error `<Code>` name, if a caller
/// can act on it.
fn store_error_kind(status: u16, code: &str) -> Option<StoreErrorKind> {
    match (status, code) {
        (_, "NoSuchKey" | "NoSuchBucket" | "NoSuchUpload") | (404, _) => {
            Some(StoreErrorKind::NotFound)
        }
        (_, "AccessDenied" | "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "ExpiredToken")
        | (401 | 403, _) => Some(StoreErrorKind::PermissionDenied),
        (412, _) | (_, "PreconditionFailed") => Some(StoreErrorKind::Changed),
        _ => None,
    }
}

/// What an S3 call answered.
struct Reply {
    etag: Option<String>,
    /// `Content-Length` (of the object, for a `HEAD`).
    len: Option<u64>,
    body: String,
}

/// The ETag S3 gives an object completed from parts with `etags` (each the
/// hex MD5 of its part, quoted or not): the hex MD5 of their binary MD5s,
/// `-`, the part count. `None` when a part ETag is not an MD5 (encrypted
/// uploads).
fn multipart_etag(etags: &[String]) -> Option<String> {
    let mut digests = Md5::new();
    for etag in etags {
        let raw = hex::decode(etag.trim_matches('"')).ok().filter(|d| d.len() == 16)?;
        digests.update(&raw);
    }
    Some(format!("{}-{}", hex::encode(digests.finalize()), etags.len()))
}

/// An S3 `<Error>` document (the fields a message needs).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ErrorReply {
    code: String,
    message: String,
}

/// The reply to `CreateMultipartUpload`.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateMultipartUploadReply {
    upload_id: String,
}

/// `xml` parsed as `T` (quick-xml, entities resolved); `None` if it is not one.
fn from_xml<T: serde::de::DeserializeOwned>(xml: &str) -> Option<T> {
    quick_xml::de::from_str(xml).ok()
}

/// Opens `s3://bucket/key` for reading with `options`.
pub fn open(uri: &str, options: &S3Options) -> Result<HttpSource> {
    options.resolve_uri(uri, false)?.open()
}

/// Uploads the local file `path` to `s3://bucket/key`.
pub fn upload(path: &Path, uri: &str, options: &S3Options) -> Result<()> {
    options.resolve_uri(uri, true)?.upload(path)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::config::tests::env_from;
    use super::*;

    /// The presigned-URL example of AWS's SigV4 documentation
    /// ("Authenticating Requests: Using Query Parameters"), signed for the
    /// virtual-hosted object our resolution picks.
    #[test]
    fn presign_matches_the_aws_example() {
        let options = S3Options {
            access_key_id: Some("AKIAIOSFODNN7EXAMPLE".into()),
            secret_access_key: Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into()),
            endpoint: Some("https://s3.amazonaws.com".into()),
            ..S3Options::default()
        };
        let object = options
            .resolve_uri_with("s3://examplebucket/test.txt", false, &|_| None, None)
            .unwrap();
        let at = jiff::Timestamp::from_second(1_369_353_600).unwrap();
        let get = object.bucket.get_object(object.credentials.as_ref(), &object.key);
        let url = get.sign_with_time(Duration::from_secs(86_400), &at);
        assert_eq!(
            url.as_str(),
            "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }

    #[test]
    fn session_tokens_are_signed_and_paths_are_path_style() {
        let env = env_from(&[
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_SESSION_TOKEN", "tok/en"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
        ]);
        let object =
            S3Options::default().resolve_uri_with("s3://b/dir/x y", false, &env, None).unwrap();
        let url = object.presigned_get_url(60);
        assert!(url.starts_with("http://127.0.0.1:9000/b/dir/x%20y?"), "{url}");
        assert!(url.contains("X-Amz-Security-Token=tok%2Fen"), "{url}");
        let (method, url) = object.signed(&Call::UploadPart { number: 3, upload_id: "u 1" });
        assert_eq!(method, "PUT");
        assert!(url.contains("partNumber=3") && url.contains("uploadId=u%201"), "{url}");
        let etags = ["\"a\"".to_string(), "\"b\"".to_string()];
        let body = object.bucket.complete_multipart_upload(
            None,
            &object.key,
            "u",
            etags.iter().map(String::as_str),
        );
        let xml = body.body();
        assert!(xml.starts_with("<CompleteMultipartUpload"), "{xml}");
        assert!(
            xml.contains("<PartNumber>1</PartNumber>")
                && xml.contains("<PartNumber>2</PartNumber>"),
            "{xml}"
        );
        for key in ["s3://b/a/../k", "s3://b/./k"] {
            assert!(
                S3Options::default().resolve_uri_with(key, false, &env, None).is_err(),
                "{key}"
            );
        }
    }

    #[test]
    fn reply_documents_are_parsed_with_entities() {
        let xml = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>a &quot;b&quot; &amp; c</Message>\
                   <Key>k</Key></Error>";
        let reply: ErrorReply = from_xml(xml).unwrap();
        assert_eq!((reply.code.as_str(), reply.message.as_str()), ("NoSuchKey", "a \"b\" & c"));
        let xml = "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u-1</UploadId>\
                   </InitiateMultipartUploadResult>";
        assert_eq!(from_xml::<CreateMultipartUploadReply>(xml).unwrap().upload_id, "u-1");
        assert!(from_xml::<CreateMultipartUploadReply>("not xml").is_none());
    }

    #[test]
    fn multipart_etags_are_md5s_of_part_md5s() {
        // Two parts, "a" and "b": md5(md5("a") ‖ md5("b")), then the count.
        let parts = [
            "\"0cc175b9c0f1b6a831c399e269772661\"".to_string(),
            "92eb5ffee6ae2fec3ad71c777531578f".to_string(),
        ];
        assert_eq!(multipart_etag(&parts).unwrap(), "96e024ba2074fe77e8e965ba43a704be-2");
        assert_eq!(multipart_etag(&["\"kms-opaque\"".to_string()]), None);
    }
}
