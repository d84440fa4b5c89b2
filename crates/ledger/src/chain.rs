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

mod page;
pub(crate) use page::CanonPage;

/// The `prev_hash` of the first event.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Chain algorithms, as recorded in the ledger and in export manifests.
pub const ALG_SHA256: &str = "sha256";
pub const ALG_HMAC: &str = "hmac-sha256";

type HmacSha256 = hmac::Hmac<Sha256>;

/// Computes event hashes, keyed or not.
#[derive(Clone)]
pub struct ChainHasher {
    /// HMAC-SHA256 under the chain key, already keyed: each event's MAC starts from a copy of it
    /// (keying hashes the key's two pads, two compressions an event saved).
    key: Option<HmacSha256>,
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
        // HMAC accepts keys of any length; new_from_slice cannot fail for it.
        let mac = <HmacSha256 as KeyInit>::new_from_slice(&key)
            .unwrap_or_else(|_| unreachable!("hmac accepts any key length"));
        ChainHasher { key: Some(mac) }
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
        self.hash_with_tail(ev, None)
    }

    /// [`ChainHasher::hash`], given the event's [`canonical_tail`] if it was encoded beforehand.
    pub(crate) fn hash_with_tail(&self, ev: &Event, tail: Option<&[u8]>) -> String {
        let mut buf = Vec::with_capacity(512);
        canonical_head_into(ev, &mut buf);
        match tail {
            Some(t) => buf.extend_from_slice(t),
            None => canonical_tail_into(ev, &mut buf),
        }
        let hex = self.hex_digest_of(&ev.prev_hash, &buf);
        String::from_utf8_lossy(&hex).into_owned()
    }

    /// The hex digest of `prev_hash` followed by an event's canonical encoding.
    fn hex_digest_of(&self, prev_hash: &str, canonical: &[u8]) -> [u8; 64] {
        let digest: [u8; 32] = match &self.key {
            None => {
                let mut h = Sha256::new();
                h.update(prev_hash.as_bytes());
                h.update(canonical);
                h.finalize().into()
            }
            Some(k) => {
                let mut m = k.clone();
                m.update(prev_hash.as_bytes());
                m.update(canonical);
                m.finalize().into_bytes().into()
            }
        };
        let mut hex = [0u8; 64];
        // 64 bytes for 32: cannot fail.
        let _ = hex::encode_to_slice(digest, &mut hex);
        hex
    }
}

/// The bytes an event's hash covers (besides `prev_hash`): one compact JSON object of `v` (1),
/// `seq`, `at`, `kind`, `entry_id`, `route`, `scope`, `key`, `operator`, `reason`, `detail` and
/// `payload_digest`, in that order, an absent field `null`, strings escaped as serde_json escapes
/// them ([`crate::canon::write_string`]).
pub fn canonical_event(ev: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    canonical_event_into(ev, &mut out);
    out
}

fn canonical_event_into(ev: &Event, out: &mut Vec<u8>) {
    canonical_head_into(ev, out);
    canonical_tail_into(ev, out);
}

/// `{"v":1,…,"entry_id":…` (the object left open): the fields a writer knows only once it has
/// placed the event in the log.
fn canonical_head_into(ev: &Event, out: &mut Vec<u8>) {
    numbers_into(out, ev.seq, ev.at);
    field(out, KIND, Some(&ev.kind));
    entry_id_into(out, ev.entry_id);
}

/// The canonical encoding's name of `kind`, the field between `at` and `entry_id`.
const KIND: &[u8] = b",\"kind\":";

/// `{"v":1,"seq":…,"at":…`.
fn numbers_into(out: &mut Vec<u8>, seq: i64, at: i64) {
    out.extend_from_slice(b"{\"v\":1,\"seq\":");
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.extend_from_slice(b",\"at\":");
    out.extend_from_slice(itoa::Buffer::new().format(at).as_bytes());
}

/// `,"entry_id":…`.
fn entry_id_into(out: &mut Vec<u8>, entry_id: Option<i64>) {
    out.extend_from_slice(b",\"entry_id\":");
    match entry_id {
        Some(id) => out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

/// `name` (its quotes, colon and leading comma included) and `value` as JSON (`null` for none).
fn field(out: &mut Vec<u8>, name: &[u8], value: Option<&str>) {
    out.extend_from_slice(name);
    match value {
        Some(v) => crate::canon::write_string(v, out),
        None => out.extend_from_slice(b"null"),
    }
}

/// [`canonical_tail`] of `ev`'s fields.
pub(crate) fn event_tail(ev: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    canonical_tail_into(ev, &mut out);
    out
}

fn canonical_tail_into(ev: &Event, out: &mut Vec<u8>) {
    write_tail(
        [
            Some(ev.route.as_str()),
            Some(&ev.scope),
            Some(&ev.key),
            ev.operator.as_deref(),
            ev.reason.as_deref(),
            Some(&ev.detail),
            ev.payload_digest.as_deref(),
        ],
        out,
    );
}

/// `,"route":…}`: the rest of the canonical encoding of an event with these fields. It does not
/// depend on where the event lands in the log, so a claim's event encodes it on the caller's
/// thread, before its job is queued (the writer is one thread for every caller).
#[allow(clippy::too_many_arguments)]
pub(crate) fn canonical_tail(
    route: &str,
    scope: &str,
    key: &str,
    operator: Option<&str>,
    reason: Option<&str>,
    detail: &str,
    payload_digest: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + route.len() + scope.len() + key.len() + detail.len());
    write_tail(
        [
            Some(route),
            Some(scope),
            Some(key),
            operator,
            reason,
            Some(detail),
            payload_digest,
        ],
        &mut out,
    );
    out
}

/// The tail's fields, in their order in the encoding.
const TAIL: [&[u8]; 7] = [
    b",\"route\":",
    b",\"scope\":",
    b",\"key\":",
    b",\"operator\":",
    b",\"reason\":",
    b",\"detail\":",
    b",\"payload_digest\":",
];

fn write_tail(values: [Option<&str>; 7], out: &mut Vec<u8>) {
    for (name, value) in TAIL.iter().zip(values) {
        field(out, name, value);
    }
    out.push(b'}');
}

/// What a verification found.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
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
    /// Where the verified run started when it did not start at the genesis: the last archived
    /// event of a ledger (its earlier events are in archive segments), or the event before a range.
    #[serde(default)]
    pub started_after: Option<ChainHead>,
}

impl VerifyReport {
    /// A report of nothing verified yet, under `alg`.
    pub fn empty(alg: &str) -> VerifyReport {
        VerifyReport {
            ok: true,
            alg: alg.to_owned(),
            count: 0,
            first_seq: None,
            head: None,
            first_bad_seq: None,
            problem: None,
            cancelled: false,
            started_after: None,
        }
    }
}

/// Where a verified stream must start.
#[derive(Debug, Clone)]
pub enum ChainStart {
    /// The whole log: seq 1 with the genesis `prev_hash`.
    Genesis,
    /// A range (an export): any first seq; its `prev_hash` is taken as given unless one is named.
    Anywhere { prev_hash: Option<String> },
    /// Right after `head`: the next event is `head.seq + 1` and links to `head.hash` (the live
    /// log after its archived part, or one archive segment after another).
    After(ChainHead),
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
    let mut walk = ChainWalk::new(hasher, start);
    for ev in events {
        if !walk.step(&ev?, progress) {
            break;
        }
    }
    Ok(walk.finish(progress))
}

/// A verification in progress, event by event: what [`verify_events`] runs over an iterator,
/// for a caller that holds the events itself (pages it reads and then refills).
pub(crate) struct ChainWalk<'h> {
    hasher: &'h ChainHasher,
    report: VerifyReport,
    /// The next event's seq (`i64::MIN`: any) and the hash it must link to; `None` before the
    /// first event of a range that names no link.
    expect: Option<(i64, String)>,
    /// The canonical encoding of the event in hand (one buffer for the whole walk).
    buf: Vec<u8>,
    /// Set once the walk has stopped: a bad event, or cancelled.
    ended: bool,
}

impl<'h> ChainWalk<'h> {
    pub(crate) fn new(hasher: &'h ChainHasher, start: ChainStart) -> ChainWalk<'h> {
        let report = VerifyReport {
            started_after: match &start {
                ChainStart::After(h) => Some(h.clone()),
                _ => None,
            },
            ..VerifyReport::empty(hasher.alg())
        };
        let expect = match start {
            ChainStart::Genesis => Some((1, GENESIS.to_owned())),
            ChainStart::Anywhere { prev_hash: Some(p) } => Some((i64::MIN, p)),
            ChainStart::Anywhere { prev_hash: None } => None,
            ChainStart::After(h) => Some((h.seq + 1, h.hash)),
        };
        ChainWalk {
            hasher,
            report,
            expect,
            buf: Vec::with_capacity(512),
            ended: false,
        }
    }

    /// Checks the next event; `false` once the walk has stopped (this event or an earlier one
    /// does not hold, or `progress`, told the count every 4096 events, cancelled it).
    fn step(&mut self, ev: &Event, progress: &mut dyn FnMut(u64) -> bool) -> bool {
        if self.ended {
            return false;
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        canonical_event_into(ev, &mut buf);
        let packed = page::Packed {
            seq: ev.seq,
            canon: &buf,
            prev_hash: &ev.prev_hash,
            hash: &ev.hash,
        };
        let go = self.step_packed(&packed, progress, &mut |_, _| {});
        self.buf = buf;
        go
    }

    /// [`ChainWalk::step`] of an event already encoded (a [`CanonPage`]'s); `each` is handed each
    /// event that holds, with its canonical encoding.
    pub(crate) fn step_packed(
        &mut self,
        ev: &page::Packed<'_>,
        progress: &mut dyn FnMut(u64) -> bool,
        each: &mut dyn FnMut(i64, &[u8]),
    ) -> bool {
        if self.ended {
            return false;
        }
        if let Some((seq, prev)) = &self.expect {
            if *seq != i64::MIN && ev.seq != *seq {
                // A missing row is named by its own (missing) sequence number.
                let named = if ev.seq > *seq { *seq } else { ev.seq };
                let why = format!(
                    "sequence broken: expected seq {seq}, found {} (a row was deleted, inserted or moved)",
                    ev.seq
                );
                return self.bad(named, why);
            }
            if ev.prev_hash != prev {
                let why = "prev_hash does not link to the previous event".to_owned();
                return self.bad(ev.seq, why);
            }
        }
        if self.hasher.hex_digest_of(ev.prev_hash, ev.canon) != ev.hash.as_bytes() {
            let why = "hash does not match the event's contents".to_owned();
            return self.bad(ev.seq, why);
        }
        each(ev.seq, ev.canon);
        let report = &mut self.report;
        if report.first_seq.is_none() {
            report.first_seq = Some(ev.seq);
        }
        report.count += 1;
        match &mut self.expect {
            // The hash's buffer is reused: a walk over many events allocates nothing per event.
            Some((seq, hash)) => {
                *seq = ev.seq + 1;
                hash.clear();
                hash.push_str(ev.hash);
            }
            None => self.expect = Some((ev.seq + 1, ev.hash.to_owned())),
        }
        if report.count.is_multiple_of(4096) && !progress(report.count) {
            report.cancelled = true;
            report.ok = false;
            report.problem = Some("cancelled".to_owned());
            self.ended = true;
            return false;
        }
        true
    }

    fn bad(&mut self, seq: i64, why: String) -> bool {
        self.report.ok = false;
        self.report.first_bad_seq = Some(seq);
        self.report.problem = Some(why);
        self.ended = true;
        false
    }

    /// The report, with its head: the last event verified (the one expected to be linked to
    /// next).
    pub(crate) fn finish(self, progress: &mut dyn FnMut(u64) -> bool) -> VerifyReport {
        let mut report = self.report;
        if !self.ended {
            progress(report.count);
        }
        if report.count > 0 {
            report.head = self.expect.map(|(next, hash)| ChainHead {
                seq: next - 1,
                hash,
            });
        }
        report
    }
}

/// Checks that `alg` (recorded in a ledger or manifest) matches the hasher in use.
pub fn check_alg(hasher: &ChainHasher, alg: &str) -> Result<()> {
    match (alg, hasher.alg()) {
        (a, b) if a == b => Ok(()),
        (ALG_HMAC, _) => Err(LedgerError::ChainKeyRequired),
        _ => Err(LedgerError::ChainKeyUnexpected),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The canonical event as one struct: how every event was hashed before the encoding was
    /// split in two (and so what the split must reproduce byte for byte).
    #[derive(Serialize)]
    struct Whole<'a> {
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

    fn whole(ev: &Event) -> Vec<u8> {
        serde_json::to_vec(&Whole {
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
        })
        .unwrap()
    }

    /// The tail as a caller encodes it beforehand, from the fields alone.
    fn tail_of(ev: &Event) -> Vec<u8> {
        canonical_tail(
            &ev.route,
            &ev.scope,
            &ev.key,
            ev.operator.as_deref(),
            ev.reason.as_deref(),
            &ev.detail,
            ev.payload_digest.as_deref(),
        )
    }

    fn sample() -> (Event, Event) {
        let ev = Event {
            seq: 42,
            at: 1_764_000_000_123,
            kind: "claim".into(),
            entry_id: Some(7),
            route: "charges".into(),
            scope: "agent-\"q\"\u{e9}\n".into(),
            key: "k-\u{1F600}\\/\u{1}".into(),
            operator: None,
            reason: None,
            detail: r#"{"attempt":1,"owner":"o"}"#.into(),
            payload_digest: Some("ab".repeat(32)),
            prev_hash: "cd".repeat(32),
            hash: String::new(),
        };
        let mut other = ev.clone();
        other.kind = "resolve".into();
        other.entry_id = None;
        other.operator = Some("alice".into());
        other.reason = Some("why \"not\"".into());
        other.payload_digest = None;
        (ev, other)
    }

    /// The chain's hashes are a stored format: ledgers and exports written by earlier versions
    /// must verify. These were computed by the encoding as it was before this test existed.
    #[test]
    fn the_canonical_encoding_and_its_hashes_do_not_change() {
        let (ev, other) = sample();
        assert_eq!(
            String::from_utf8(canonical_event(&ev)).unwrap(),
            r#"{"v":1,"seq":42,"at":1764000000123,"kind":"claim","entry_id":7,"route":"charges","scope":"agent-\"q\"é\n","key":"k-😀\\/\u0001","operator":null,"reason":null,"detail":"{\"attempt\":1,\"owner\":\"o\"}","payload_digest":"abababababababababababababababababababababababababababababababab"}"#
        );
        let keyed = ChainHasher::keyed(b"k3y".to_vec());
        for (e, plain, hmac) in [
            (
                &ev,
                "8cbc6b0927dab9acc19a74b04c8bc092b3bc169c7221ccd2f1c6878158ea1c8a",
                "0fb30781f55fb16556f34ad378b0a1e2b24e028c3c27f57ad4dfeeb039e75ad2",
            ),
            (
                &other,
                "c570f67497af525655699d378f386f2c5a22148668d1f99618af760382b92c2b",
                "eb58ebe35661d77d2f5991ee65db72ef3f35d3ed1cbade3a6c5e971300979a83",
            ),
        ] {
            assert_eq!(ChainHasher::unkeyed().hash(e), plain);
            assert_eq!(keyed.hash(e), hmac);
            let tail = tail_of(e);
            assert_eq!(ChainHasher::unkeyed().hash_with_tail(e, Some(&tail)), plain);
            assert_eq!(keyed.hash_with_tail(e, Some(&tail)), hmac);
        }
    }

    fn text() -> impl Strategy<Value = String> {
        crate::canon::escape_rich_text(24)
    }

    fn opt_text() -> impl Strategy<Value = Option<String>> {
        prop::option::of(text())
    }

    proptest! {
        /// Head and tail, encoded apart, are the whole event's encoding; a tail encoded
        /// beforehand gives the same hash.
        #[test]
        fn the_split_encoding_is_the_whole_one(
            seq in any::<i64>(), at in any::<i64>(), kind in text(),
            entry_id in prop::option::of(any::<i64>()), route in text(),
            scope in text(), key in text(), operator in opt_text(),
            reason in opt_text(), detail in text(), payload_digest in opt_text(),
        ) {
            let ev = Event {
                seq, at, kind, entry_id, route, scope, key, operator, reason, detail,
                payload_digest, prev_hash: "ef".repeat(32), hash: String::new(),
            };
            prop_assert_eq!(canonical_event(&ev), whole(&ev));
            let h = ChainHasher::unkeyed();
            prop_assert_eq!(h.hash_with_tail(&ev, Some(&tail_of(&ev))), h.hash(&ev));
        }
    }
}
