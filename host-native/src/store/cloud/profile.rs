//! The AWS CLI's shared files: `~/.aws/credentials` and `~/.aws/config`.
//!
//! Only static keys are read (`aws_access_key_id`, `aws_secret_access_key`,
//! `aws_session_token`), plus `region` and `endpoint_url`. Profiles that
//! assume a role, run a process or use SSO are not followed.

use crate::error::{Error, Result};

/// Longest shared file read (they are a few lines; a larger one is not a
/// credentials file).
const MAX_FILE: u64 = 1 << 20;

/// What one profile of the shared files says.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AwsProfile {
    /// The profile's name (`default` unless `AWS_PROFILE` says otherwise).
    pub name: String,
    /// `aws_access_key_id`.
    pub access_key_id: Option<String>,
    /// `aws_secret_access_key`.
    pub secret_access_key: Option<String>,
    /// `aws_session_token`.
    pub session_token: Option<String>,
    /// `region`.
    pub region: Option<String>,
    /// `endpoint_url`.
    pub endpoint_url: Option<String>,
}

impl std::fmt::Debug for AwsProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsProfile")
            .field("name", &self.name)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "<redacted>"))
            .field("session_token", &self.session_token.as_ref().map(|_| "<redacted>"))
            .field("region", &self.region)
            .field("endpoint_url", &self.endpoint_url)
            .finish()
    }
}

/// Reads profile `profile` (else `AWS_PROFILE`, `AWS_DEFAULT_PROFILE`,
/// `default`) from the credentials file (`AWS_SHARED_CREDENTIALS_FILE`,
/// else `~/.aws/credentials`) and the config file (`AWS_CONFIG_FILE`, else
/// `~/.aws/config`), looking variables up with `var`. The credentials file
/// wins for keys. `Ok(None)` when neither file has the profile; a file that
/// exists but cannot be read is an error.
pub fn read_aws_profile(
    var: &dyn Fn(&str) -> Option<String>,
    profile: Option<&str>,
) -> Result<Option<AwsProfile>> {
    let nonempty = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let name = profile
        .map(str::to_string)
        .or_else(|| nonempty("AWS_PROFILE"))
        .or_else(|| nonempty("AWS_DEFAULT_PROFILE"))
        .unwrap_or_else(|| "default".to_string());
    let home = nonempty("HOME");
    let path = |var_name: &str, file: &str| {
        nonempty(var_name)
            .or_else(|| home.as_ref().map(|h| format!("{}/.aws/{file}", h.trim_end_matches('/'))))
    };
    let mut found = None::<AwsProfile>;
    // The config file first, so that the credentials file overrides it.
    for (path, is_config) in [
        (path("AWS_CONFIG_FILE", "config"), true),
        (path("AWS_SHARED_CREDENTIALS_FILE", "credentials"), false),
    ] {
        let Some(path) = path else { continue };
        let Some(text) = read_small(&path)? else { continue };
        for (section, entries) in crate::store::ini::sections(&text) {
            if !section_is(&section, &name, is_config) {
                continue;
            }
            let profile = found
                .get_or_insert_with(|| AwsProfile { name: name.clone(), ..Default::default() });
            for (key, value) in entries {
                let slot = match key.to_ascii_lowercase().as_str() {
                    "aws_access_key_id" => &mut profile.access_key_id,
                    "aws_secret_access_key" => &mut profile.secret_access_key,
                    "aws_session_token" => &mut profile.session_token,
                    "region" => &mut profile.region,
                    "endpoint_url" => &mut profile.endpoint_url,
                    _ => continue,
                };
                *slot = Some(value);
            }
        }
    }
    Ok(found)
}

/// Whether INI section `section` is profile `name`: `[name]` in the
/// credentials file; `[profile name]` (or `[default]`) in the config file.
fn section_is(section: &str, name: &str, is_config: bool) -> bool {
    if !is_config || section == "default" {
        return section == name;
    }
    section
        .strip_prefix("profile")
        .is_some_and(|rest| rest.starts_with(char::is_whitespace) && rest.trim() == name)
}

/// The file's text; `None` when it does not exist.
fn read_small(path: &str) -> Result<Option<String>> {
    use std::io::Read;
    let bad = |e: std::io::Error| Error::Io { file: path.to_string(), offset: 0, source: e };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e)),
    };
    let mut text = String::new();
    file.take(MAX_FILE).read_to_string(&mut text).map_err(bad)?;
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_and_profiles() {
        assert!(section_is("profile dev", "dev", true));
        assert!(!section_is("profile dev", "dev", false));
        assert!(section_is("default", "default", true));
        assert!(!section_is("profiledev", "dev", true));
    }

    #[test]
    fn credentials_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("credentials");
        let config = dir.path().join("config");
        std::fs::write(&creds, "[dev]\naws_access_key_id = K\naws_secret_access_key = S\n")
            .unwrap();
        std::fs::write(&config, "[profile dev]\naws_access_key_id = OLD\nregion = r1\n").unwrap();
        let (creds, config) = (creds.display().to_string(), config.display().to_string());
        let var = move |name: &str| match name {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(creds.clone()),
            "AWS_CONFIG_FILE" => Some(config.clone()),
            "AWS_PROFILE" => Some("dev".into()),
            _ => None,
        };
        let profile = read_aws_profile(&var, None).unwrap().unwrap();
        assert_eq!(profile.access_key_id.as_deref(), Some("K"));
        assert_eq!(profile.secret_access_key.as_deref(), Some("S"));
        assert_eq!(profile.region.as_deref(), Some("r1"));
        assert!(!format!("{profile:?}").contains("\"S\""));
        assert_eq!(read_aws_profile(&var, Some("other")).unwrap(), None);
    }
}
