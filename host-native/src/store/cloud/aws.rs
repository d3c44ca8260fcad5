//! The AWS credential chain, in the AWS CLI's order: environment keys, web
//! identity (IRSA), the shared profile files, the container endpoint (ECS,
//! EKS Pod Identity), then the instance metadata service (IMDSv2).
//!
//! Web identity and the container endpoint are plain requests made here
//! (`object_store` insists on HTTPS for STS and offers no relative-URI
//! endpoint override, which local servers need); the instance metadata
//! service is `object_store`'s own provider. All of them verify servers
//! with the [`Trust`] they are given (the S3 store's), so a refused
//! certificate is the same [`crate::store::tls::TlsError::Untrusted`] as
//! for S3 itself.

use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::{ClientOptions, RetryConfig};

use super::profile::read_aws_profile;
use super::{block_on, refused};
use crate::error::{Error, Result};
use crate::store::tls::Trust;

/// Where ECS serves `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
const ECS_HOST: &str = "http://169.254.170.2";

/// The instance metadata service's default address.
const IMDS_DEFAULT: &str = "http://169.254.169.254";

/// Longest wait for STS or the container endpoint to answer.
const CREDENTIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for the instance metadata service (short: on a machine that
/// is not an EC2 instance nothing answers).
const IMDS_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest credential response read (they are a few hundred bytes).
const MAX_RESPONSE: usize = 1 << 20;

/// AWS credentials found by [`aws_credential_chain`]. `Debug` hides the
/// secret and the token.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// Access key id.
    pub key_id: String,
    /// Secret access key.
    pub secret_key: String,
    /// Session token of temporary credentials.
    pub token: Option<String>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("key_id", &self.key_id)
            .field("secret_key", &"<redacted>")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// [`aws_credential_chain_with`] over the process environment.
pub fn aws_credential_chain(region: Option<&str>, trust: &Trust) -> Result<Option<AwsCredentials>> {
    aws_credential_chain_with(&|name| std::env::var(name).ok(), region, trust)
}

/// The first credentials these sources have, tried in this order, with
/// variables looked up through `var`:
///
/// 1. `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`);
/// 2. web identity: `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`
///    (+ `AWS_ROLE_SESSION_NAME`), exchanged at STS
///    (`AWS_ENDPOINT_URL_STS`, else `https://sts.<region>.amazonaws.com`;
///    region: `region`, `AWS_REGION`, `AWS_DEFAULT_REGION`, `us-east-1`);
/// 3. the profile (`AWS_PROFILE`, else `default`) of the shared
///    credentials and config files (see [`read_aws_profile`]);
/// 4. the container endpoint: `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`
///    (ECS) or `AWS_CONTAINER_CREDENTIALS_FULL_URI`, with the token in
///    `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` or
///    `AWS_CONTAINER_AUTHORIZATION_TOKEN`;
/// 5. the instance metadata service, IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT`,
///    else `http://169.254.169.254`; off with `AWS_EC2_METADATA_DISABLED=true`).
///
/// The requests to STS, the container endpoint and the metadata service
/// verify servers with `trust` (for `s3://`, the trust its requests have,
/// from `S3Options::http.tls` and the S3 CA variables), and a
/// certificate it refuses is an [`Error::Io`] carrying
/// [`crate::store::tls::TlsError::Untrusted`].
///
/// `Ok(None)` when no source has credentials (the default metadata address
/// not answering counts as none). A source that is configured but fails
/// (half a key pair, an unreadable token file, STS refusing the token, a
/// configured endpoint not answering) is an error naming it.
pub fn aws_credential_chain_with(
    var: &dyn Fn(&str) -> Option<String>,
    region: Option<&str>,
    trust: &Trust,
) -> Result<Option<AwsCredentials>> {
    let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    match (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) {
        (Some(key_id), Some(secret_key)) => {
            return Ok(Some(AwsCredentials {
                key_id,
                secret_key,
                token: get("AWS_SESSION_TOKEN"),
            }));
        }
        (Some(_), None) => {
            return Err(Error::Invalid(
                "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(Error::Invalid(
                "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into(),
            ));
        }
        (None, None) => {}
    }
    if let (Some(token_file), Some(role_arn)) =
        (get("AWS_WEB_IDENTITY_TOKEN_FILE"), get("AWS_ROLE_ARN"))
    {
        let region = region
            .map(str::to_string)
            .or_else(|| get("AWS_REGION"))
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".into());
        let endpoint = get("AWS_ENDPOINT_URL_STS")
            .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"));
        let session = get("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "tensorizer-rs".into());
        return web_identity(&endpoint, &token_file, &role_arn, &session, trust).map(Some);
    }
    if let Some(profile) = read_aws_profile(var, None)? {
        match (profile.access_key_id, profile.secret_access_key) {
            (Some(key_id), Some(secret_key)) => {
                return Ok(Some(AwsCredentials {
                    key_id,
                    secret_key,
                    token: profile.session_token,
                }));
            }
            (None, None) => {}
            _ => {
                return Err(Error::Invalid(format!(
                    "AWS profile {:?} has only one of aws_access_key_id and aws_secret_access_key",
                    profile.name
                )));
            }
        }
    }
    let container = get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        .map(|uri| format!("{ECS_HOST}{uri}"))
        .or_else(|| get("AWS_CONTAINER_CREDENTIALS_FULL_URI"));
    if let Some(url) = container {
        let token = match get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
            Some(path) => Some(read_token(&path, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")?),
            None => get("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        };
        return container_credentials(&url, token.as_deref(), trust).map(Some);
    }
    if get("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let configured = get("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    let endpoint = configured.clone().unwrap_or_else(|| IMDS_DEFAULT.into());
    match instance_metadata(endpoint.trim_end_matches('/'), trust) {
        Ok(credentials) => Ok(Some(credentials)),
        Err(e) if configured.is_some() => Err(e),
        Err(_) => Ok(None),
    }
}

fn read_token(path: &str, what: &str) -> Result<String> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| Error::Invalid(format!("{what}={path}: cannot read the token: {e}")))?;
    Ok(token.trim().to_string())
}

/// The client of STS and the container endpoint, verifying servers with
/// `trust`.
fn http_client(trust: &Trust) -> Result<reqwest::Client> {
    super::install_tls();
    trust
        .reqwest_builder(reqwest::Client::builder())
        .connect_timeout(CREDENTIAL_TIMEOUT)
        .timeout(CREDENTIAL_TIMEOUT)
        .build()
        .map_err(|e| {
            Error::Invalid(format!("cannot build an HTTP client for AWS credentials: {e}"))
        })
}

/// Sends `request` for `what` (said in errors), returning the body of a
/// 2xx answer. A certificate `trust` refuses is [`refused`]'s typed error;
/// other failures are `fail`'s.
async fn fetch(
    request: reqwest::RequestBuilder,
    what: &str,
    trust: &Trust,
    fail: &dyn Fn(String) -> Error,
) -> Result<String> {
    let response = request
        .send()
        .await
        .map_err(|e| refused(what, None, &e, trust).unwrap_or_else(|| fail(e.to_string())))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| fail(e.to_string()))?;
    if body.len() > MAX_RESPONSE {
        return Err(fail(format!("answer of {} bytes is too long for credentials", body.len())));
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    match status.is_success() {
        true => Ok(text),
        false => {
            Err(fail(format!("HTTP {status}: {}", text.chars().take(300).collect::<String>())))
        }
    }
}

/// `AssumeRoleWithWebIdentity` at `endpoint` (an unsigned request: the token
/// is the proof).
fn web_identity(
    endpoint: &str,
    token_file: &str,
    role_arn: &str,
    session: &str,
    trust: &Trust,
) -> Result<AwsCredentials> {
    let token = read_token(token_file, "AWS_WEB_IDENTITY_TOKEN_FILE")?;
    let body = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("Action", "AssumeRoleWithWebIdentity")
        .append_pair("Version", "2011-06-15")
        .append_pair("DurationSeconds", "3600")
        .append_pair("RoleArn", role_arn)
        .append_pair("RoleSessionName", session)
        .append_pair("WebIdentityToken", &token)
        .finish();
    let request = http_client(trust)?
        .post(endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/xml")
        .body(body);
    let what = format!("web identity credentials from {endpoint} for {role_arn}");
    let fail = |why: String| Error::Invalid(format!("{what}: {why}"));
    let xml = block_on(fetch(request, &what, trust, &fail))??;
    let found = web_identity_credentials(&xml)
        .map_err(|e| fail(format!("not the expected answer: {e}")))?;
    Ok(AwsCredentials {
        key_id: found.access_key_id,
        secret_key: found.secret_access_key,
        token: Some(found.session_token),
    })
}

/// The `<Credentials>` of an `AssumeRoleWithWebIdentityResponse`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
}

/// Parses an `AssumeRoleWithWebIdentityResponse` (quick-xml, entities
/// resolved).
fn web_identity_credentials(xml: &str) -> std::result::Result<StsCredentials, quick_xml::DeError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Response {
        assume_role_with_web_identity_result: RoleResult,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct RoleResult {
        credentials: StsCredentials,
    }
    quick_xml::de::from_str::<Response>(xml)
        .map(|r| r.assume_role_with_web_identity_result.credentials)
}

/// The container credentials endpoint's JSON answer.
fn container_credentials(url: &str, token: Option<&str>, trust: &Trust) -> Result<AwsCredentials> {
    let mut request = http_client(trust)?.get(url);
    if let Some(token) = token {
        request = request.header("authorization", token);
    }
    let what = format!("container credentials from {url}");
    let fail = |why: String| Error::Invalid(format!("{what}: {why}"));
    let text = block_on(fetch(request, &what, trust, &fail))??;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| fail(format!("not JSON: {e}")))?;
    let field = |name: &str| {
        json.get(name)
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or_else(|| fail(format!("no {name:?}")))
    };
    Ok(AwsCredentials {
        key_id: field("AccessKeyId")?,
        secret_key: field("SecretAccessKey")?,
        token: json.get("Token").and_then(|v| v.as_str()).map(str::to_string),
    })
}

/// IMDSv2 through `object_store`'s instance credential provider, verifying
/// an `https://` endpoint with `trust`.
fn instance_metadata(endpoint: &str, trust: &Trust) -> Result<AwsCredentials> {
    let what = format!("instance metadata credentials from {endpoint}");
    let fail = |why: String| Error::Invalid(format!("{what}: {why}"));
    super::install_tls();
    let options =
        ClientOptions::new().with_timeout(IMDS_TIMEOUT).with_connect_timeout(IMDS_TIMEOUT);
    let store = AmazonS3Builder::new()
        .with_bucket_name("unused")
        .with_metadata_endpoint(endpoint)
        .with_client_options(trust.object_store_options(options))
        .with_retry(RetryConfig {
            max_retries: 1,
            retry_timeout: IMDS_TIMEOUT * 2,
            ..Default::default()
        })
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let provider = store.credentials().clone();
    let credential = block_on(async move { provider.get_credential().await })?
        .map_err(|e| refused(&what, None, &e, trust).unwrap_or_else(|| fail(e.to_string())))?;
    Ok(AwsCredentials {
        key_id: credential.key_id.clone(),
        secret_key: credential.secret_key.clone(),
        token: credential.token.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tls::{Service, TlsOptions};

    fn trust() -> Trust {
        TlsOptions::default().resolve_with(Service::S3, &|_| None).unwrap()
    }

    #[test]
    fn environment_keys_come_first() {
        let var = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("K".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("S".to_string()),
            "AWS_ROLE_ARN" => Some("arn".to_string()),
            _ => None,
        };
        let found = aws_credential_chain_with(&var, None, &trust()).unwrap().unwrap();
        assert_eq!(
            (found.key_id.as_str(), found.secret_key.as_str(), found.token.as_deref()),
            ("K", "S", None)
        );
        assert!(!format!("{found:?}").contains("\"S\""));
        let half = |name: &str| (name == "AWS_ACCESS_KEY_ID").then(|| "K".to_string());
        assert!(
            aws_credential_chain_with(&half, None, &trust())
                .unwrap_err()
                .to_string()
                .contains("AWS_SECRET_ACCESS_KEY")
        );
    }

    #[test]
    fn metadata_can_be_turned_off() {
        let var = |name: &str| match name {
            "AWS_EC2_METADATA_DISABLED" => Some("true".to_string()),
            "HOME" => Some("/nonexistent".to_string()),
            _ => None,
        };
        assert_eq!(aws_credential_chain_with(&var, None, &trust()).unwrap(), None);
    }

    #[test]
    fn web_identity_answers_are_parsed() {
        let xml = "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
                   <AssumeRoleWithWebIdentityResult><SubjectFromWebIdentityToken>s</SubjectFromWebIdentityToken>\
                   <Credentials><AccessKeyId>AK</AccessKeyId><SecretAccessKey>a&amp;b</SecretAccessKey>\
                   <SessionToken>t</SessionToken><Expiration>2030-01-01T00:00:00Z</Expiration></Credentials>\
                   </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
        let found = web_identity_credentials(xml).unwrap();
        assert_eq!((found.access_key_id.as_str(), found.secret_access_key.as_str()), ("AK", "a&b"));
        assert_eq!(found.session_token, "t");
        assert!(web_identity_credentials("<Error><Code>AccessDenied</Code></Error>").is_err());
    }
}
