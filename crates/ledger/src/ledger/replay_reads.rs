//! Replays on a ledger whose reads must not run on the caller's thread (PostgreSQL): a claim of a
//! key this instance has seen replayed is first tried as a replay on a read, by a few threads of
//! their own, and goes to the writer only when the read finds nothing to replay (the entry was
//! purged, expired, or is claimed with another body). A replay then costs one read instead of a
//! share of a write batch, and of the write lock the instances of a fleet take turns at. A first
//! call pays nothing for it: its key is not known.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{mpsc, Arc, Mutex, Weak};

use super::Ledger;
use crate::store::{ClaimOutcome, ClaimRequest, Reply};

/// Threads that try replays on reads: each waits a round trip or two per replay.
const THREADS: usize = 4;

/// The most keys remembered; past it the set starts over (a forgotten key's next replay goes
/// through the writer once, and is remembered again).
const KNOWN_MAX: usize = 1 << 16;

/// A claim waiting for a replay reader.
struct Job {
    req: ClaimRequest,
    reply: Reply<ClaimOutcome>,
}

/// The keys seen replayed here, by a hash of their route, scope and key. A hint only: a claim is
/// replayed on a read only when the read finds the completed entry with the claim's fingerprint.
#[derive(Debug, Default)]
pub(super) struct Known(Mutex<HashSet<u64>>);

impl Known {
    pub(super) fn key(req: &ClaimRequest) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&req.route, &req.scope, &req.key).hash(&mut h);
        h.finish()
    }

    fn has(&self, key: u64) -> bool {
        self.0.lock().is_ok_and(|k| k.contains(&key))
    }

    pub(super) fn mark(&self, key: u64) {
        if let Ok(mut k) = self.0.lock() {
            if k.len() >= KNOWN_MAX {
                k.clear();
            }
            k.insert(key);
        }
    }
}

/// The replay readers and what they know.
#[derive(Debug)]
pub(super) struct ReplayReads {
    pub(super) known: Arc<Known>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
}

impl ReplayReads {
    /// Starts the readers of the ledger `me` will be.
    pub(super) fn start(me: &Weak<Ledger>) -> ReplayReads {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..THREADS {
            let (me, rx) = (me.clone(), rx.clone());
            let _ = std::thread::Builder::new()
                .name("idemgate-replays".into())
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    // A job the ledger is gone for drops its reply: its ticket reads `Closed`.
                    let (Ok(job), Some(l)) = (job, me.upgrade()) else {
                        return;
                    };
                    l.replay_or_claim(job.req, job.reply);
                });
        }
        ReplayReads {
            known: Arc::default(),
            jobs: Mutex::new(Some(tx)),
        }
    }

    /// Hands the claim to the readers when its key was seen replayed here; gives it back when
    /// not (or when the readers are stopped).
    pub(super) fn offer(
        &self,
        req: ClaimRequest,
        reply: Reply<ClaimOutcome>,
    ) -> Option<(ClaimRequest, Reply<ClaimOutcome>)> {
        if !self.known.has(Known::key(&req)) {
            return Some((req, reply));
        }
        let Some(tx) = self.jobs.lock().ok().and_then(|j| j.clone()) else {
            return Some((req, reply));
        };
        match tx.send(Job { req, reply }) {
            Ok(()) => None,
            Err(mpsc::SendError(job)) => Some((job.req, job.reply)),
        }
    }

    /// Lets the readers finish what they were handed, and end.
    pub(super) fn stop(&self) {
        if let Ok(mut j) = self.jobs.lock() {
            j.take();
        }
    }
}
