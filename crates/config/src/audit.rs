//! `[retention]` and the signing of checkpoints (`server.signing_key_file`,
//! `server.checkpoint_interval`): what keeps the audit trail over years, checked at start-up.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use idemgate_ledger::archive::Place;
use idemgate_ledger::checkpoint::Signer;
use idemgate_ledger::cosignature::WitnessKey;
use serde::Deserialize;

use super::{invalid, parse_positive, ConfigError};

/// `[retention]` as TOML writes it.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    entries: Option<String>,
    log_hot: Option<String>,
    archive_dir: Option<String>,
    interval: Option<String>,
}

/// What the server removes from the live ledger by policy, and how often it looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Completed, released and failed entries this long past their expiry are purged.
    pub entries: Option<Duration>,
    /// Events older than this are archived into `archive_dir`, then leave the live ledger.
    pub log_hot: Option<Duration>,
    /// An absolute directory, or `s3://bucket/prefix`.
    pub archive_dir: Option<String>,
    /// How often the server applies the policy (and once at start).
    pub interval: Duration,
}

pub(super) fn retention(r: &RawRetention) -> Result<Retention, ConfigError> {
    let span = |field: &str, v: &Option<String>| {
        v.as_deref()
            .map(|s| parse_positive(field, s, ""))
            .transpose()
    };
    let entries = span("retention.entries", &r.entries)?;
    let log_hot = span("retention.log_hot", &r.log_hot)?;
    let interval = parse_positive(
        "retention.interval",
        r.interval.as_deref().unwrap_or("1h"),
        "",
    )?;
    if entries.is_none() && log_hot.is_none() {
        return Err(invalid(
            "retention",
            "set `entries` (purge entries this long past their expiry), `log_hot` (archive \
             events older than this), or both",
        ));
    }
    let archive_dir = match (&r.archive_dir, log_hot) {
        (Some(d), _) => match Place::check_name(d) {
            Err(e) => return Err(invalid("retention.archive_dir", e.to_string())),
            Ok(None) => Some(d.trim_end_matches('/').to_owned()),
            Ok(Some(p)) if !p.is_dir() => {
                return Err(invalid(
                    "retention.archive_dir",
                    format!("{d:?} is not a directory (create it, owned by the server's user)"),
                ))
            }
            Ok(Some(p)) => Some(std::path::absolute(&p).unwrap_or(p).display().to_string()),
        },
        (None, Some(_)) => {
            return Err(invalid(
                "retention.archive_dir",
                "`log_hot` archives events: name the directory they go to",
            ))
        }
        (None, None) => None,
    };
    Ok(Retention {
        entries,
        log_hot,
        archive_dir,
        interval,
    })
}

/// Signed checkpoints: the key's file (from the configuration, else `IDEMGATE_SIGNING_KEY_FILE`),
/// the key read from it, how often the server signs the chain's head and the log's tree, and the
/// witnesses each tree checkpoint is sent to.
#[derive(Debug, Clone)]
pub struct Signing {
    pub key_file: PathBuf,
    pub signer: Arc<Signer>,
    pub interval: Duration,
    pub witnesses: Vec<Witness>,
}

/// A witness as `server.witnesses` names it: where its `add-checkpoint` endpoint is (the URL of
/// its submission prefix), and its public key, which checks its cosignatures.
#[derive(Debug, Clone)]
pub struct Witness {
    pub url: String,
    pub key: WitnessKey,
}

/// `{ url, key }` in `server.witnesses`; `key` is the witness's public key file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWitness {
    url: String,
    key: String,
}

fn witnesses(raw: &[RawWitness]) -> Result<Vec<Witness>, ConfigError> {
    raw.iter()
        .enumerate()
        .map(|(i, w)| {
            let field = format!("server.witnesses[{i}]");
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                return Err(invalid(
                    format!("{field}.url"),
                    "an http:// or https:// URL",
                ));
            }
            let text = std::fs::read_to_string(&w.key)
                .map_err(|e| invalid(format!("{field}.key"), format!("{}: {e}", w.key)))?;
            let key = WitnessKey::parse(&text)
                .map_err(|e| invalid(format!("{field}.key"), e.to_string()))?;
            Ok(Witness {
                url: w.url.trim_end_matches('/').to_owned(),
                key,
            })
        })
        .collect()
}

/// The environment variable naming the signing key's file when the configuration does not.
pub const SIGNING_KEY_ENV: &str = "IDEMGATE_SIGNING_KEY_FILE";

pub(super) fn signing(
    file: Option<&str>,
    interval: Option<&str>,
    raw_witnesses: &[RawWitness],
) -> Result<Option<Signing>, ConfigError> {
    let (field, file) = match file {
        Some(f) => ("server.signing_key_file", f.to_owned()),
        None => match std::env::var(SIGNING_KEY_ENV) {
            Ok(f) if !f.is_empty() => (SIGNING_KEY_ENV, f),
            _ => {
                if interval.is_some() || !raw_witnesses.is_empty() {
                    let field = if interval.is_some() {
                        "server.checkpoint_interval"
                    } else {
                        "server.witnesses"
                    };
                    return Err(invalid(
                        field,
                        "no signing key: set server.signing_key_file (idemgate keygen makes one)",
                    ));
                }
                return Ok(None);
            }
        },
    };
    let interval = parse_positive("server.checkpoint_interval", interval.unwrap_or("1h"), "")?;
    // Read now, so that `serve --check` finds a key that will not load.
    let signer = Signer::from_file(std::path::Path::new(&file))
        .map_err(|e| invalid(field, e.to_string()))?;
    Ok(Some(Signing {
        key_file: PathBuf::from(file),
        signer: Arc::new(signer),
        interval,
        witnesses: witnesses(raw_witnesses)?,
    }))
}
