//! Operator credentials: `[[operators]]` in the configuration (or in the file
//! `server.operators_file` names), each a name, a role and the sha256 of a token. The token
//! itself is never stored: `idemgate token new` prints it once.

use std::fmt;

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::raw::RawOperator;
use super::{invalid, ConfigError};

/// What an operator may do through the admin API. Each role can do what the one before it can.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads entries, the log, incidents, exports' status, metrics.
    Viewer,
    /// Also resolves, releases, replays and reconciles entries (one or in bulk).
    Operator,
    /// Also purges, exports and verifies.
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The sha256 of a token. Its `Debug` shows nothing of it: a hash of a token is as good as the
/// token to whoever can try candidates offline, so it stays out of logs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash(pub [u8; 32]);

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenHash(..)")
    }
}

impl TokenHash {
    /// The hash of a token as an operator sends it.
    pub fn of(token: &[u8]) -> TokenHash {
        TokenHash(Sha256::digest(token).into())
    }

    /// `sha256:` and 64 hex digits, as `idemgate token new` prints it.
    pub fn parse(s: &str) -> Option<TokenHash> {
        let hex = s.trim().strip_prefix("sha256:")?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex, &mut out).ok()?;
        Some(TokenHash(out))
    }

    /// The form [`TokenHash::parse`] reads.
    pub fn to_config(self) -> String {
        format!("sha256:{}", hex::encode(self.0))
    }
}

/// A new token: 32 random bytes (256 bits, beyond any online or offline guessing), in hex behind
/// a prefix that says what it is when it turns up in a shell history or a secret scanner.
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    format!("igt_{}", hex::encode(b))
}

/// One operator who may use the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorCred {
    /// The name the log records for what this operator does.
    pub name: String,
    pub role: Role,
    pub token_hash: TokenHash,
}

/// The operator the shared `IDEMGATE_ADMIN_TOKEN` (or `server.admin_token_file`) stands for.
pub const SHARED_ADMIN: &str = "admin";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OperatorsFile {
    #[serde(default)]
    operators: Vec<RawOperator>,
}

/// The configured operators: those of the configuration, then those of `file`. Names and token
/// hashes are unique, so that every action in the log names one person.
pub(super) fn operators(
    inline: &[RawOperator],
    file: Option<&str>,
) -> Result<Vec<OperatorCred>, ConfigError> {
    let mut raw: Vec<(String, &RawOperator)> = inline
        .iter()
        .enumerate()
        .map(|(i, o)| (format!("operators[{i}]"), o))
        .collect();
    let from_file;
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid("server.operators_file", format!("{path}: {e}")))?;
        from_file = toml::from_str::<OperatorsFile>(&text)
            .map_err(|e| invalid("server.operators_file", format!("{path}: {e}")))?;
        raw.extend(
            from_file
                .operators
                .iter()
                .enumerate()
                .map(|(i, o)| (format!("{path}: operators[{i}]"), o)),
        );
    }
    let mut out: Vec<OperatorCred> = Vec::with_capacity(raw.len());
    for (at, o) in raw {
        let name = o.name.trim();
        if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
            return Err(invalid(
                format!("{at}.name"),
                "a name of 1 to 200 characters, no control characters",
            ));
        }
        let role = Role::parse(&o.role).ok_or_else(|| {
            invalid(
                format!("{at}.role"),
                format!("{:?}: use \"viewer\", \"operator\" or \"admin\"", o.role),
            )
        })?;
        let token_hash = TokenHash::parse(&o.token_hash).ok_or_else(|| {
            invalid(
                format!("{at}.token_hash"),
                "sha256: and 64 hex digits, as `idemgate token new` prints it (never the token)",
            )
        })?;
        if out.iter().any(|p| p.name == name) {
            return Err(invalid(
                format!("{at}.name"),
                format!("{name:?} is named twice"),
            ));
        }
        if out.iter().any(|p| p.token_hash == token_hash) {
            return Err(invalid(
                format!("{at}.token_hash"),
                "two operators share one token: give each their own",
            ));
        }
        out.push(OperatorCred {
            name: name.to_owned(),
            role,
            token_hash,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_hash_reads_back_and_hides_in_debug() {
        let t = new_token();
        assert!(t.starts_with("igt_") && t.len() == 68, "{t}");
        assert_ne!(t, new_token());
        let h = TokenHash::of(t.as_bytes());
        assert_eq!(TokenHash::parse(&h.to_config()), Some(h));
        assert_eq!(format!("{h:?}"), "TokenHash(..)");
        for bad in [
            "",
            "sha256:",
            "sha256:zz",
            &hex::encode([0u8; 32]),
            "md5:00",
        ] {
            assert_eq!(TokenHash::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn roles_are_ordered_and_named() {
        assert!(Role::Viewer < Role::Operator && Role::Operator < Role::Admin);
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("root"), None);
    }
}
