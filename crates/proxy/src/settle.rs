//! Outcomes this process knows and its ledger could not take when they became known (a full disk,
//! a PostgreSQL restart): kept in memory and recorded as soon as the ledger takes writes again.
//!
//! Without this, a request that ran upstream while the ledger was down stays PENDING under this
//! process's lease and then shows as stuck, for an operator to resolve by hand, although the
//! response that says what happened was in hand; and one that was definitely not executed stays
//! held the same way instead of being released to run again. Kept here, the first becomes
//! COMPLETED (a retry gets the upstream's response, replayed) and the second RELEASED, seconds
//! after the ledger recovers.
//!
//! Safe because only this process can still decide these entries: each is PENDING under its lease
//! owner, which the ledger checks on every write ([`LedgerError::LeaseLost`] or
//! [`LedgerError::InvalidTransition`] once an operator has resolved one meanwhile — then the
//! operator's decision stands and the kept outcome is dropped). Nothing is acknowledged to a client
//! on the strength of a kept outcome: what is only in memory is lost with the process, and the
//! entry is then stuck for an operator, as it would have been without this.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Instant;

use idemgate_ledger::{now_millis, CompleteRequest, LedgerError, Millis, OwnerReport, Storage};
use metrics::{counter, gauge, Counter, Gauge};

/// The most outcomes kept at once; beyond it a new one is not kept (its entry waits for an
/// operator, as without this module).
pub const MAX_KEPT: usize = 10_000;
/// The most response bytes kept at once.
pub const MAX_KEPT_BYTES: usize = 64 << 20;

/// A write that settles a claimed entry.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// It ran: record its response.
    Complete(CompleteRequest),
    /// It was definitely not executed: release the key to run again.
    Release(OwnerReport),
    /// It may have run: hold it for an operator, with why.
    Unknown(OwnerReport),
}

impl Outcome {
    /// What it records: `complete`, `release` or `unknown`.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Complete(_) => "complete",
            Outcome::Release(_) => "release",
            Outcome::Unknown(_) => "unknown",
        }
    }

    pub fn entry_id(&self) -> i64 {
        match self {
            Outcome::Complete(c) => c.entry_id,
            Outcome::Release(r) | Outcome::Unknown(r) => r.entry_id,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Outcome::Complete(c) => c.response.body.len(),
            Outcome::Release(r) | Outcome::Unknown(r) => r.error.len(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Outcome::Complete(_) => "completion",
            Outcome::Release(_) => "release",
            Outcome::Unknown(_) => "unknown outcome",
        }
    }

    /// It, as learnt at `at`.
    fn stamped(mut self, at: Millis) -> Outcome {
        match &mut self {
            Outcome::Complete(c) => c.at = at,
            Outcome::Release(r) | Outcome::Unknown(r) => r.at = at,
        }
        self
    }

    /// Writes it to the ledger.
    pub async fn write(self, store: &dyn Storage) -> Result<(), LedgerError> {
        match self {
            Outcome::Complete(c) => store.complete(c).recv().await.map(drop),
            Outcome::Release(r) => store.release(r).recv().await,
            Outcome::Unknown(r) => store.mark_unknown(r).recv().await,
        }
    }
}

/// Logs an outcome the ledger refused with `e`, which no retry changes.
fn refused_for_good(o: &Outcome, e: &LedgerError) {
    tracing::warn!(entry_id = o.entry_id(), error = %e, "the ledger refused the {} for good (an operator decided the entry meanwhile, or the ledger cannot take it); what the ledger holds stands, and a pending entry is left for an operator", o.kind());
}

#[derive(Debug)]
struct Kept {
    outcome: Outcome,
    since: Instant,
}

/// The outcomes waiting for the ledger, oldest first.
#[derive(Debug)]
pub struct Unsettled {
    queue: Mutex<Queue>,
    waiting: Gauge,
    recorded: Counter,
    dropped: Counter,
}

#[derive(Debug, Default)]
struct Queue {
    kept: VecDeque<Kept>,
    bytes: usize,
}

impl Default for Unsettled {
    fn default() -> Self {
        Unsettled {
            queue: Mutex::default(),
            waiting: gauge!("idemgate_outcomes_unrecorded"),
            recorded: counter!("idemgate_outcomes_recorded_late_total"),
            dropped: counter!("idemgate_outcomes_unrecorded_dropped_total"),
        }
    }
}

impl Unsettled {
    /// Keeps `outcome`, which the ledger refused with `e`, if it may be recorded later and there is
    /// room; whether it was kept.
    pub fn keep(&self, outcome: Outcome, e: &LedgerError) -> bool {
        let id = outcome.entry_id();
        if !e.is_transient() {
            refused_for_good(&outcome, e);
            return false;
        }
        let Ok(mut q) = self.queue.lock() else {
            return false;
        };
        let bytes = outcome.bytes();
        if q.kept.len() >= MAX_KEPT || q.bytes + bytes > MAX_KEPT_BYTES {
            drop(q);
            self.dropped.increment(1);
            tracing::warn!(entry_id = id, error = %e, "could not record the {}, and {MAX_KEPT} outcomes or {MAX_KEPT_BYTES} bytes already wait for the ledger; the entry is left for an operator", outcome.kind());
            return false;
        }
        tracing::warn!(entry_id = id, error = %e, "could not record the {}; it is kept, to be recorded when the ledger takes writes again", outcome.kind());
        q.bytes += bytes;
        q.kept.push_back(Kept {
            outcome,
            since: Instant::now(),
        });
        self.waiting.set(q.kept.len() as f64);
        true
    }

    /// How many outcomes wait.
    pub fn len(&self) -> usize {
        self.queue.lock().map_or(0, |q| q.kept.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn pop(&self) -> Option<Kept> {
        let mut q = self.queue.lock().ok()?;
        let k = q.kept.pop_front()?;
        q.bytes -= k.outcome.bytes();
        self.waiting.set(q.kept.len() as f64);
        Some(k)
    }

    fn push_front(&self, k: Kept) {
        if let Ok(mut q) = self.queue.lock() {
            q.bytes += k.outcome.bytes();
            q.kept.push_front(k);
            self.waiting.set(q.kept.len() as f64);
        }
    }

    /// Records what waits, oldest first, until the ledger refuses one for an outage again (it
    /// waits for the next call, with the rest). One caller at a time (the sweeper, then shutdown).
    pub async fn record(&self, store: &dyn Storage) {
        while let Some(k) = self.pop() {
            let id = k.outcome.entry_id();
            match k.outcome.clone().stamped(now_millis()).write(store).await {
                Ok(()) => {
                    self.recorded.increment(1);
                    tracing::info!(
                        entry_id = id,
                        after_ms = k.since.elapsed().as_millis() as u64,
                        "recorded the {} the ledger could not take before",
                        k.outcome.kind()
                    );
                }
                Err(e) if e.is_transient() => {
                    self.push_front(k);
                    return;
                }
                Err(e) => {
                    self.dropped.increment(1);
                    refused_for_good(&k.outcome, &e);
                }
            }
        }
    }

    /// The entries whose outcomes still wait (at shutdown: left for an operator).
    pub fn entry_ids(&self) -> Vec<i64> {
        self.queue.lock().map_or_else(
            |_| Vec::new(),
            |q| q.kept.iter().map(|k| k.outcome.entry_id()).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use idemgate_ledger::*;

    use super::*;

    fn ledger(dir: &tempfile::TempDir) -> Arc<dyn Storage> {
        let path = dir.path().join("ledger.db");
        idemgate_ledger::open(
            path.to_str().expect("utf8"),
            OpenOptions {
                create: true,
                hasher: ChainHasher::unkeyed(),
            },
        )
        .expect("open")
    }

    /// Claims `key` for owner "o", leased for `lease_ms`; its entry id.
    async fn claimed(store: &dyn Storage, key: &str, lease_ms: i64) -> i64 {
        let c = ClaimRequest {
            lease_ms,
            ..testing::charge(key, now_millis())
        };
        match store.claim(c).recv().await.expect("claim") {
            ClaimOutcome::Claimed { entry_id, .. } => entry_id,
            other => panic!("{other:?}"),
        }
    }

    fn completion(entry_id: i64, body: &[u8]) -> Outcome {
        Outcome::Complete(CompleteRequest {
            entry_id,
            owner: "o".into(),
            response: ResponseRecord {
                status: 201,
                headers: vec![],
                body: body.to_vec(),
            },
            ttl_ms: 60_000,
            duplicate_window_ms: None,
            at: 1,
        })
    }

    fn report(entry_id: i64) -> OwnerReport {
        OwnerReport {
            entry_id,
            owner: "o".into(),
            error: "upstream 503".into(),
            at: 1,
        }
    }

    fn outage() -> LedgerError {
        LedgerError::Unavailable("commit failed: disk I/O error".into())
    }

    /// An `Unsettled` whose metrics go to a recorder of its own, and that recorder's handle.
    fn counted() -> (Unsettled, metrics_exporter_prometheus::PrometheusHandle) {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let u = metrics::with_local_recorder(&recorder, Unsettled::default);
        (u, handle)
    }

    /// The value of the metric `name` in `handle`'s rendering.
    fn value(handle: &metrics_exporter_prometheus::PrometheusHandle, name: &str) -> u64 {
        let text = handle.render();
        let line = text
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("{name} not in\n{text}"));
        line.rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a whole number")
    }

    #[tokio::test]
    async fn kept_outcomes_are_recorded_in_order_and_a_decided_entry_keeps_its_decision() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ledger(&dir);
        let (done, free, held, resolved) = (
            claimed(&*store, "done", 60_000).await,
            claimed(&*store, "free", 60_000).await,
            claimed(&*store, "held", 60_000).await,
            // Its lease passes at once: stuck, for an operator.
            claimed(&*store, "resolved", 1).await,
        );
        let (u, metrics) = counted();
        assert!(u.keep(completion(done, b"charged"), &outage()));
        assert!(u.keep(Outcome::Release(report(free)), &outage()));
        assert!(u.keep(Outcome::Unknown(report(held)), &outage()));
        assert!(u.keep(Outcome::Release(report(resolved)), &outage()));
        assert_eq!(u.entry_ids(), vec![done, free, held, resolved]);
        // Meanwhile an operator decides one: the kept outcome must not overwrite that.
        store
            .resolve(ResolveRequest {
                entry_id: resolved,
                resolution: Resolution::Failed { response: None },
                actor: Actor {
                    operator: "oncall".into(),
                    reason: "refunded by hand".into(),
                },
                ttl_ms: 60_000,
                at: now_millis() + 10,
            })
            .recv()
            .await
            .expect("resolve");
        u.record(&*store).await;
        assert!(u.is_empty());
        assert_eq!(value(&metrics, "idemgate_outcomes_recorded_late_total"), 3);
        // The operator's decision stood: the kept release was dropped, and counted.
        assert_eq!(
            value(&metrics, "idemgate_outcomes_unrecorded_dropped_total"),
            1
        );
        assert_eq!(value(&metrics, "idemgate_outcomes_unrecorded"), 0);
        let state = |id| store.entry(id, now_millis()).expect("entry");
        let d = state(done);
        assert_eq!(d.summary.state, State::Completed);
        assert_eq!(d.response.expect("response").body, b"charged");
        assert_eq!(state(free).summary.state, State::Released);
        let h = state(held).summary;
        assert_eq!((h.state, h.outcome_unknown), (State::Pending, true));
        assert_eq!(state(resolved).summary.state, State::Failed);
    }

    #[tokio::test]
    async fn only_an_outage_is_kept_and_only_as_much_as_fits() {
        let (u, metrics) = counted();
        assert!(!u.keep(Outcome::Release(report(1)), &LedgerError::LeaseLost(1)));
        assert!(!u.keep(Outcome::Release(report(1)), &LedgerError::Closed));
        assert!(!u.keep(
            Outcome::Release(report(1)),
            &LedgerError::Internal("a bug".into())
        ));
        assert!(u.is_empty());
        let big = vec![b'x'; MAX_KEPT_BYTES / 2];
        assert!(u.keep(completion(1, &big), &outage()));
        // Half the room is taken: one more byte than the other half does not fit; the half does.
        let more = vec![b'x'; MAX_KEPT_BYTES - MAX_KEPT_BYTES / 2 + 1];
        assert!(!u.keep(completion(2, &more), &outage()));
        assert!(u.keep(completion(3, &more[1..]), &outage()));
        assert!(!u.keep(completion(4, b"x"), &outage()));
        // Each outage outcome with no room is counted as dropped; a refusal for good is not an
        // outage's and is only logged.
        assert_eq!(
            value(&metrics, "idemgate_outcomes_unrecorded_dropped_total"),
            2
        );
        assert_eq!(value(&metrics, "idemgate_outcomes_unrecorded"), 2);
        // Bytes aside, no more than MAX_KEPT outcomes.
        let u = Unsettled::default();
        for id in 0..MAX_KEPT as i64 {
            assert!(u.keep(Outcome::Release(report(id)), &outage()), "{id}");
        }
        assert!(!u.keep(Outcome::Release(report(-1)), &outage()));
        assert_eq!(u.len(), MAX_KEPT);
    }
}
