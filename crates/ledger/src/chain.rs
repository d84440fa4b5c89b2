//! The hash chain over the log.
//!
//! `hash = H(prev_hash || canonical(event))`, where `H` is sha256, or HMAC-SHA256 under the chain
//! key when one is configured (then write access to the database alone cannot forge a verifying
//! event). The canonical event covers every stored column except `hash` itself; payloads enter it only
//! as digests, so a purged payload leaves the chain intact.

use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{LedgerError, Result};
use crate::model::{ChainHead, Event};

/// The `prev_hash` of the first event.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Chain algorithms, as recorded in the ledger and in export manifests.
pub const ALG_SHA256: &str = "sha256";
pub const ALG_HMAC: &str = "hmac-sha256";

type HmacSha256 = hmac::Hmac<Sha256>;

/// Computes event hashes, keyed or not.
#[derive(Clone)]
pub struct ChainHasher {
    key: Option<Vec<u8>>,
}

impl std::fmt::Debug for ChainHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never print the key
        f.debug_struct("ChainHasher")
            .field("alg", &self.alg())
            .finish()
    }
}

impl ChainHasher {
    pub fn unkeyed() -> Self {
        ChainHasher { key: None }
    }

    pub fn keyed(key: Vec<u8>) -> Self {
        ChainHasher { key: Some(key) }
    }

    /// The chain key from `IDEMGATE_CHAIN_KEY`, or from the file named by `IDEMGATE_CHAIN_KEY_FILE`
    /// (trailing newline trimmed); unkeyed when neither is set.
    pub fn from_env() -> Result<Self> {
        if let Ok(k) = std::env::var("IDEMGATE_CHAIN_KEY") {
            if !k.is_empty() {
                return Ok(ChainHasher::keyed(k.into_bytes()));
            }
        }
        if let Ok(path) = std::env::var("IDEMGATE_CHAIN_KEY_FILE") {
            let raw = std::fs::read(&path)?;
            let trimmed = raw.strip_suffix(b"\n").unwrap_or(&raw).to_vec();
            return Ok(ChainHasher::keyed(trimmed));
        }
        Ok(ChainHasher::unkeyed())
    }

    pub fn alg(&self) -> &'static str {
        if self.key.is_some() {
            ALG_HMAC
        } else {
            ALG_SHA256
        }
    }

    /// The hash of `ev` given its `prev_hash` (the event's own `hash` field is ignored).
    pub fn hash(&self, ev: &Event) -> String {
        let hex = self.hex_digest(ev, &mut Vec::new());
        String::from_utf8_lossy(&hex).into_owned()
    }

    /// [`ChainHasher::hash`] as lowercase hex bytes, with `buf` for the canonical encoding (so a
    /// walk over many events allocates nothing per event).
    fn hex_digest(&self, ev: &Event, buf: &mut Vec<u8>) -> [u8; 64] {
        buf.clear();
        canonical_event_into(ev, buf);
        let digest: [u8; 32] = match &self.key {
            None => {
                let mut h = Sha256::new();
                h.update(ev.prev_hash.as_bytes());
                h.update(&buf[..]);
                h.finalize().into()
            }
            Some(k) => {
                // HMAC accepts keys of any length; new_from_slice cannot fail for it.
                let mut m = <HmacSha256 as KeyInit>::new_from_slice(k)
                    .unwrap_or_else(|_| unreachable!("hmac accepts any key length"));
                m.update(ev.prev_hash.as_bytes());
                m.update(&buf[..]);
                m.finalize().into_bytes().into()
            }
        };
        let mut hex = [0u8; 64];
        // 64 bytes for 32: cannot fail.
        let _ = hex::encode_to_slice(digest, &mut hex);
        hex
    }
}

#[derive(Serialize)]
struct CanonicalEvent<'a> {
    v: u8,
    seq: i64,
    at: i64,
    kind: &'a str,
    entry_id: Option<i64>,
    route: &'a str,
    scope: &'a str,
    key: &'a str,
    operator: Option<&'a str>,
    reason: Option<&'a str>,
    detail: &'a str,
    payload_digest: Option<&'a str>,
}

/// The bytes an event's hash covers (besides `prev_hash`). Field order is fixed by the struct.
pub fn canonical_event(ev: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    canonical_event_into(ev, &mut out);
    out
}

fn canonical_event_into(ev: &Event, out: &mut Vec<u8>) {
    let c = CanonicalEvent {
        v: 1,
        seq: ev.seq,
        at: ev.at,
        kind: &ev.kind,
        entry_id: ev.entry_id,
        route: &ev.route,
        scope: &ev.scope,
        key: &ev.key,
        operator: ev.operator.as_deref(),
        reason: ev.reason.as_deref(),
        detail: &ev.detail,
        payload_digest: ev.payload_digest.as_deref(),
    };
    // Serializing plain strings and integers into a Vec cannot fail.
    let _ = serde_json::to_writer(out, &c);
}

/// What a verification found.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub ok: bool,
    pub alg: String,
    pub count: u64,
    pub first_seq: Option<i64>,
    pub head: Option<ChainHead>,
    /// The first sequence number that does not verify, and why.
    pub first_bad_seq: Option<i64>,
    pub problem: Option<String>,
    /// Set when verification was stopped before the end.
    #[serde(default)]
    pub cancelled: bool,
}

/// Where a verified stream must start.
#[derive(Debug, Clone)]
pub enum ChainStart {
    /// The whole log: seq 1 with the genesis `prev_hash`.
    Genesis,
    /// A range (an export): any first seq; its `prev_hash` is taken as given unless one is named.
    Anywhere { prev_hash: Option<String> },
}

/// Walks events in order and checks sequence continuity, links and hashes. Stops at the first bad
/// event. `progress` is told the count so far every 4096 events and may return `false` to cancel.
pub fn verify_events<I>(
    hasher: &ChainHasher,
    start: ChainStart,
    events: I,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<VerifyReport>
where
    I: IntoIterator<Item = Result<Event>>,
{
    let mut report = VerifyReport {
        ok: true,
        alg: hasher.alg().to_owned(),
        count: 0,
        first_seq: None,
        head: None,
        first_bad_seq: None,
        problem: None,
        cancelled: false,
    };
    let mut expect: Option<(i64, String)> = match &start {
        ChainStart::Genesis => Some((1, GENESIS.to_owned())),
        ChainStart::Anywhere { prev_hash: Some(p) } => Some((i64::MIN, p.clone())),
        ChainStart::Anywhere { prev_hash: None } => None,
    };
    let mut buf = Vec::with_capacity(512);
    for ev in events {
        let ev = ev?;
        let bad = |report: &mut VerifyReport, seq: i64, why: String| {
            report.ok = false;
            report.first_bad_seq = Some(seq);
            report.problem = Some(why);
        };
        if let Some((seq, prev)) = &expect {
            if *seq != i64::MIN && ev.seq != *seq {
                // A missing row is named by its own (missing) sequence number.
                let named = if ev.seq > *seq { *seq } else { ev.seq };
                let why = format!(
                    "sequence broken: expected seq {seq}, found {} (a row was deleted, inserted or moved)",
                    ev.seq
                );
                bad(&mut report, named, why);
                return Ok(with_head(report, expect));
            }
            if &ev.prev_hash != prev {
                let why = "prev_hash does not link to the previous event".to_owned();
                bad(&mut report, ev.seq, why);
                return Ok(with_head(report, expect));
            }
        }
        if hasher.hex_digest(&ev, &mut buf) != ev.hash.as_bytes() {
            bad(
                &mut report,
                ev.seq,
                "hash does not match the event's contents".to_owned(),
            );
            return Ok(with_head(report, expect));
        }
        if report.first_seq.is_none() {
            report.first_seq = Some(ev.seq);
        }
        report.count += 1;
        if report.count % 4096 == 0 && !progress(report.count) {
            report.cancelled = true;
            report.ok = false;
            report.problem = Some("cancelled".to_owned());
            return Ok(with_head(report, expect));
        }
        expect = Some((ev.seq + 1, ev.hash));
    }
    progress(report.count);
    Ok(with_head(report, expect))
}

/// The report with its head: the last event verified (the one `expect`ed to be linked to next).
fn with_head(mut report: VerifyReport, expect: Option<(i64, String)>) -> VerifyReport {
    if report.count > 0 {
        report.head = expect.map(|(next, hash)| ChainHead {
            seq: next - 1,
            hash,
        });
    }
    report
}

/// Checks that `alg` (recorded in a ledger or manifest) matches the hasher in use.
pub fn check_alg(hasher: &ChainHasher, alg: &str) -> Result<()> {
    match (alg, hasher.alg()) {
        (a, b) if a == b => Ok(()),
        (ALG_HMAC, _) => Err(LedgerError::ChainKeyRequired),
        _ => Err(LedgerError::ChainKeyUnexpected),
    }
}
