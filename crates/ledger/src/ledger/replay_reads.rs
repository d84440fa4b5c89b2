//! Replays on a ledger whose reads must not run on the caller's thread (PostgreSQL): a claim of a
//! key this instance has seen replayed is first tried as a replay on a read, by a few threads of
//! their own, and goes to the writer only when the read finds nothing to replay (the entry was
//! purged, expired, or is claimed with another body). A replay then costs a share of one read
//! instead of a share of a write batch and its row locks: a reader takes every claim waiting (up to [`PER_READ`]) and reads their entries in one
//! statement, one round trip for all. A first call pays nothing for it: its key is not known.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex, Weak};

use std::sync::LazyLock;

use super::Ledger;
use crate::db::{Db, Dialect, Shifted, Val};
use crate::entry_row::{map_row, AFTER_ROW, ROW_COLS};
use crate::error::Result;
use crate::read;
use crate::replays::{self, Cached};
use crate::store::{ClaimOutcome, ClaimRequest, Reply};

/// Threads that try replays on reads: each waits a round trip or two per read, which answers
/// every claim waiting. Two keep up with what the cores can answer; more only add connections and
/// server processes that compete for them.
const THREADS: usize = 2;

/// The most claims one read answers.
const PER_READ: usize = 64;

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

/// The next job, and every other one waiting (up to [`PER_READ`]); `None` once the queue is
/// closed.
fn waiting(rx: &mpsc::Receiver<Job>) -> Option<Vec<Job>> {
    let mut jobs = vec![rx.recv().ok()?];
    while jobs.len() < PER_READ {
        match rx.try_recv() {
            Ok(j) => jobs.push(j),
            Err(_) => break,
        }
    }
    Some(jobs)
}

/// For each of `reqs`, its replay, or `None` when the writer must decide its claim: the entries of
/// all their keys read in one statement ([`replays::replay_of`] decides each).
pub(super) fn replayable(db: &mut dyn Db, reqs: &[ClaimRequest]) -> Result<Vec<Option<Cached>>> {
    if db.dialect() != Dialect::Postgres {
        return reqs.iter().map(|r| replays::replayable(db, r)).collect();
    }
    let routes: Vec<&str> = reqs.iter().map(|r| r.route.as_str()).collect();
    let scopes: Vec<&str> = reqs.iter().map(|r| r.scope.as_str()).collect();
    let keys: Vec<&str> = reqs.iter().map(|r| r.key.as_str()).collect();
    let mut found: Vec<Option<Cached>> = reqs.iter().map(|_| None).collect();
    db.each(
        &REPLAYS_LOOKUP,
        &[Val::Texts(&routes), Val::Texts(&scopes), Val::Texts(&keys)],
        &mut |r| {
            let i = usize::try_from(r.int(0)? - 1).unwrap_or(usize::MAX);
            let row = Shifted(r, 1);
            if let (Some(req), Some(slot)) = (reqs.get(i), found.get_mut(i)) {
                let response = read::response_cols(&row, AFTER_ROW)?;
                *slot = replays::replay_of(req, map_row(&row)?, response, 0);
            }
            Ok(true)
        },
    )?;
    Ok(found)
}

/// The entries of the keys ?1–?3 (arrays of routes, scopes and keys), each row after the
/// 1-based place of its key in the arrays.
static REPLAYS_LOOKUP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT u.i, e.* FROM unnest(?1::text[], ?2::text[], ?3::text[]) WITH ORDINALITY \
         AS u(r, s, k, i) JOIN LATERAL (SELECT {ROW_COLS}, resp_status, resp_headers, resp_body \
         FROM entries WHERE route = u.r AND scope = u.s AND key = u.k) AS e ON true"
    )
});

/// The replay readers and what they know.
#[derive(Debug)]
pub(super) struct ReplayReads {
    pub(super) known: Arc<Known>,
    /// The reads made so far.
    pub(super) reads: AtomicU64,
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
                    let jobs = match rx.lock() {
                        Ok(rx) => waiting(&rx),
                        Err(_) => return,
                    };
                    // A job the ledger is gone for drops its reply: its ticket reads `Closed`.
                    let (Some(jobs), Some(l)) = (jobs, me.upgrade()) else {
                        return;
                    };
                    let (reqs, replies) = jobs.into_iter().map(|j| (j.req, j.reply)).unzip();
                    l.replay_or_claim(reqs, replies);
                });
        }
        ReplayReads {
            known: Arc::default(),
            reads: AtomicU64::new(0),
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
