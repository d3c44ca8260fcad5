//! Key options shared by the commands: a key file, a passphrase from the
//! environment, or a passphrase typed at a prompt.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use tensorizer_core::crypto::{KdfLimits, Key, Passphrase, presets};
use tensorizer_core::layout::SALT_LEN;
use tensorizer_core::{KdfParams, KeySource};

use crate::Failure;

#[derive(Args, Clone, Default)]
pub(crate) struct KeyArgs {
    /// File holding the 32-byte key, raw or as 64 hex digits.
    #[arg(long)]
    pub(crate) key_file: Option<PathBuf>,
    /// Read the passphrase from this environment variable.
    #[arg(long, value_name = "VAR", conflicts_with = "key_file")]
    pub(crate) passphrase_env: Option<String>,
    /// Prompt for the passphrase on the terminal.
    #[arg(long, conflicts_with_all = ["key_file", "passphrase_env"])]
    pub(crate) passphrase: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum KdfPreset {
    Interactive,
    Moderate,
    Sensitive,
}

impl KdfPreset {
    fn costs(self) -> (u64, u64) {
        match self {
            Self::Interactive => presets::INTERACTIVE,
            Self::Moderate => presets::MODERATE,
            Self::Sensitive => presets::SENSITIVE,
        }
    }
}

impl KeyArgs {
    pub(crate) fn given(&self) -> bool {
        self.key_file.is_some() || self.passphrase_env.is_some() || self.passphrase
    }

    fn passphrase_bytes(&self, confirm: bool) -> Result<Option<Passphrase>, Failure> {
        if let Some(var) = &self.passphrase_env {
            let value = std::env::var(var)
                .map_err(|_| Failure::Usage(format!("environment variable {var} is not set")))?;
            if value.is_empty() {
                return Err(Failure::Usage(format!("environment variable {var} is empty")));
            }
            return Ok(Some(Passphrase::new(value.into_bytes())));
        }
        if !self.passphrase {
            return Ok(None);
        }
        let first = rpassword::prompt_password("Passphrase: ").map_err(|e| {
            Failure::Usage(format!("cannot read a passphrase from the terminal: {e}"))
        })?;
        if confirm {
            let again = rpassword::prompt_password("Repeat passphrase: ").map_err(|e| {
                Failure::Usage(format!("cannot read a passphrase from the terminal: {e}"))
            })?;
            if again != first {
                return Err(Failure::Usage("the passphrases do not match".into()));
            }
        }
        if first.is_empty() {
            return Err(Failure::Usage("the passphrase is empty".into()));
        }
        Ok(Some(Passphrase::new(first.into_bytes())))
    }

    /// The key source for reading, if any option was given.
    pub(crate) fn for_reading(&self) -> Result<Option<KeySource>, Failure> {
        if let Some(path) = &self.key_file {
            return Ok(Some(KeySource::Key(read_key_file(path)?)));
        }
        Ok(self.passphrase_bytes(false)?.map(|p| KeySource::Passphrase(p, KdfLimits::default())))
    }

    /// The key to encrypt with, and the KDF parameters to record when it
    /// came from a passphrase.
    pub(crate) fn for_writing(
        &self,
        preset: KdfPreset,
    ) -> Result<Option<(Key, Option<KdfParams>)>, Failure> {
        if let Some(path) = &self.key_file {
            return Ok(Some((read_key_file(path)?, None)));
        }
        let Some(pass) = self.passphrase_bytes(true)? else {
            return Ok(None);
        };
        let (opslimit, memlimit) = preset.costs();
        let salt = tensorizer_native::write::random_bytes::<SALT_LEN>()?.to_vec();
        let params = KdfParams::argon2id(opslimit, memlimit, salt);
        let limits =
            KdfLimits { max_memlimit: memlimit, max_opslimit: opslimit, ..KdfLimits::default() };
        let key = tensorizer_native::kernels::kdf::derive(pass.expose_secret(), &params, &limits)
            .map_err(|e| Failure::Usage(format!("key derivation failed: {e}")))?;
        Ok(Some((key, Some(params))))
    }
}

fn read_key_file(path: &Path) -> Result<Key, Failure> {
    let raw = std::fs::read(path)
        .map_err(|e| Failure::Usage(format!("{}: cannot read key file: {e}", path.display())))?;
    let text = std::str::from_utf8(&raw).map(str::trim).unwrap_or("");
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(text).unwrap_or_default()
    } else {
        raw
    };
    Key::from_slice(&bytes).map_err(|_| {
        Failure::Usage(format!(
            "{}: a key file must hold exactly 32 bytes or 64 hex digits",
            path.display()
        ))
    })
}

/// Writes a new random key as hex, readable by the owner only.
pub(crate) fn generate_key_file(path: &Path) -> Result<Key, Failure> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let key = Key::from_bytes(tensorizer_native::write::random_bytes::<32>()?);
    let mut f =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(
            |e| Failure::Usage(format!("{}: cannot create key file: {e}", path.display())),
        )?;
    writeln!(f, "{}", hex::encode(key.expose_secret()))
        .map_err(|e| Failure::Usage(format!("{}: cannot write key file: {e}", path.display())))?;
    Ok(key)
}
