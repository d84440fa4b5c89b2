//! Secrets: a configuration names where each one is (an environment variable or a file), never
//! the value, and a host reads only those it uses.

use super::{invalid, ConfigError};

/// A secret value whose Debug output is redacted.
#[derive(Clone)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Which of the secrets a configuration names its host reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Secrets {
    /// Every one: the server checks signatures, signs notifications and forwards.
    Read,
    /// The upstream credentials only: operator actions forward (a replay, a probe) but check
    /// no signature and notify no one.
    Forward,
    /// None: a host that forwards nothing (the demo, `show`, a retention run, the console
    /// finding the server's ledger).
    None,
}

/// Reads the secret `secret_env` or `secret_file` names (a file's last newline left out).
pub(super) fn read_secret(
    field: &str,
    env: Option<&str>,
    file: Option<&str>,
) -> Result<Secret, ConfigError> {
    match (env, file) {
        (Some(var), None) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(Secret(v.into_bytes())),
            _ => Err(invalid(
                field,
                format!("environment variable {var} is not set"),
            )),
        },
        (None, Some(path)) => {
            let raw = std::fs::read(path).map_err(|e| invalid(field, format!("{path}: {e}")))?;
            let s = raw.strip_suffix(b"\n").unwrap_or(&raw).to_vec();
            if s.is_empty() {
                return Err(invalid(field, format!("{path} is empty")));
            }
            Ok(Secret(s))
        }
        _ => Err(not_one_secret(field)),
    }
}

/// The secret `secret_env` or `secret_file` names, read only when the host uses it (`read`).
/// The naming is checked either way, so a host that reads nothing refuses what the server would.
pub(super) fn named_secret(
    field: &str,
    env: Option<&str>,
    file: Option<&str>,
    read: bool,
) -> Result<Option<Secret>, ConfigError> {
    if env.is_some() == file.is_some() {
        return Err(not_one_secret(field));
    }
    if !read {
        return Ok(None);
    }
    read_secret(field, env, file).map(Some)
}

/// A secret named by both or neither of `secret_env` and `secret_file`.
fn not_one_secret(field: &str) -> ConfigError {
    invalid(
        field,
        "give exactly one of secret_env or secret_file (never the secret itself)",
    )
}
