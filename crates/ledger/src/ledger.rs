//! [`Ledger`]: the one [`Storage`] implementation, over either backend. What differs between SQLite
//! and PostgreSQL (opening, migrations, locking, connections) lives in `sqlite/` and `postgres/`;
//! the state machine, the queries and group commit are shared.

use std::sync::{Arc, Mutex, Weak};

use crate::ahead::{Effects, Touch};
use crate::chain::{self, ChainHasher, VerifyReport};
use crate::db::Db;
use crate::error::{LedgerError, Result};
use crate::lead::{Lead, Leader, Sole};
use crate::model::{
    Approval, ArchivedSegment, ChainHead, Effect, EntryDetail, EntryFilter, EntrySummary, Event,
    EventFilter, Incident, Millis, Page, ResponseRecord, Review, SignedCheckpoint, Stats,
};
use crate::prepared;
use crate::read;
use crate::replays::{self, cache_key, ReplayCache};
use crate::search;
use crate::store::{
    ClaimOutcome, ClaimRequest, CompleteOutcome, CompleteRequest, DecideRequest, EventRange,
    LoopNote, OwnerReport, Progress, PurgeRequest, ReconcileNote, Redrive, RedriveRequest, Reply,
    ResolveRequest, ReviewRequest, Storage, SweepReport, Ticket, ToolsListed, WriterHealth,
};
use crate::write;
use crate::writer::{Ctx, Writer};
use replay_reads::ReplayReads;

/// How to open a ledger.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Create the ledger when it does not exist (else [`LedgerError::NotFound`]).
    pub create: bool,
    pub hasher: ChainHasher,
}

impl OpenOptions {
    /// Open an existing ledger, with the chain key from the environment.
    pub fn existing() -> Result<Self> {
        Ok(OpenOptions {
            create: false,
            hasher: ChainHasher::from_env()?,
        })
    }

    /// Open or create, with the chain key from the environment.
    pub fn create() -> Result<Self> {
        Ok(OpenOptions {
            create: true,
            hasher: ChainHasher::from_env()?,
        })
    }
}

/// A backend's read connections.
pub(crate) trait ReadPool: Send + Sync + std::fmt::Debug {
    fn backend(&self) -> &'static str;
    fn location(&self) -> String;
    /// Runs `f` on a pooled connection.
    fn with(&self, f: &mut dyn FnMut(&mut dyn Db)) -> Result<()>;
    /// Drops the pooled connections.
    fn clear(&self);
    /// Whether a short read may run on the caller's thread, even an async runtime's (SQLite: a
    /// local file; PostgreSQL's connections drive a runtime of their own and must not).
    fn inline(&self) -> bool {
        false
    }
    /// Takes the books' lead for `instance` when no one holds it ([`crate::lead`]). Blocking.
    fn lead(&self, instance: &str, at: Millis) -> Result<Option<Box<dyn Lead>>> {
        let _ = (instance, at);
        Ok(Some(Box::new(Sole)))
    }
    /// The instance leading a shared ledger's books; `None` on a ledger one process writes.
    fn leader(&self) -> Result<Option<Leader>> {
        Ok(None)
    }
}

/// A ledger. Cheap to share behind an `Arc`; dropping the last handle stops the writer after it has
/// finished every queued job.
#[derive(Debug)]
pub struct Ledger {
    /// This ledger, for the thread that writes replay counts after a while.
    me: Weak<Ledger>,
    hasher: ChainHasher,
    readers: Box<dyn ReadPool>,
    writer: Writer,
    /// Replays answered off the writer, until their counts are written.
    replays: Arc<Mutex<replay_counts::PendingReplays>>,
    /// The log search's skip index, built by the first search.
    search: Mutex<search::SearchIndex>,
    /// Completed entries' responses, for replays without a query (SQLite; see `replays`).
    cache: Option<ReplayCache>,
    /// Replays tried on reads off the caller's thread (PostgreSQL; see `replay_reads`).
    replay_reads: Option<ReplayReads>,
    /// The effects of the entries claimed here, for their completions (PostgreSQL).
    effects: Option<Arc<Effects>>,
    /// See [`Storage::released`].
    released: tokio::sync::Notify,
}

impl Ledger {
    pub(crate) fn new(
        hasher: ChainHasher,
        readers: Box<dyn ReadPool>,
        writer: Writer,
        cache: Option<ReplayCache>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Ledger {
            me: me.clone(),
            hasher,
            replay_reads: (!readers.inline()).then(|| ReplayReads::start(me)),
            effects: (!readers.inline()).then(Arc::default),
            readers,
            writer,
            replays: Arc::default(),
            search: Mutex::default(),
            cache,
            released: tokio::sync::Notify::new(),
        })
    }

    /// Replays answered from the replay cache so far (SQLite; always 0 on PostgreSQL).
    pub fn replay_cache_hits(&self) -> u64 {
        self.cache.as_ref().map_or(0, ReplayCache::hits)
    }

    /// Times the replay cache has caught up with the log (SQLite; always 0 on PostgreSQL).
    pub fn replay_cache_catch_ups(&self) -> u64 {
        self.cache.as_ref().map_or(0, ReplayCache::catch_ups)
    }

    /// What this process's writer has done so far: transactions committed (on SQLite each one an
    /// fsync) and the writes they carried (claims, completions, replay counts, sweeps, operator
    /// actions). Group commit: writes / commits is the batching factor. For tests and benches;
    /// `/metrics` has the same counts (`telemetry.rs`).
    pub fn writer_counters(&self) -> (u64, u64) {
        self.writer.counters()
    }

    /// The batches the writer ran a second time, each job in its savepoint (a job failed in the
    /// first run). For tests and benches.
    pub fn writer_reruns(&self) -> u64 {
        self.writer.reruns()
    }

    /// The writer's round trips to the database as of its last commit (PostgreSQL; 0 on SQLite):
    /// what a batch costs beyond the server's own work. For tests and benches.
    pub fn writer_round_trips(&self) -> u64 {
        self.writer.round_trips()
    }

    /// The statements the writer sent to the database as of its last commit (PostgreSQL; 0 on
    /// SQLite). For tests and benches.
    pub fn writer_statements(&self) -> u64 {
        self.writer.statements()
    }

    /// The reads the replay readers made so far (PostgreSQL; 0 on SQLite), each answering every
    /// claim that waited for it. For tests and benches.
    pub fn replay_reads(&self) -> u64 {
        self.replay_reads
            .as_ref()
            .map_or(0, |r| r.reads.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Stops accepting writes, lets the writer finish every queued job and waits for it.
    pub fn close(&self) {
        if let Some(r) = &self.replay_reads {
            r.stop();
        }
        self.count_replays_now();
        self.writer.close();
        self.readers.clear();
    }

    fn submit<T, F>(&self, f: F) -> Ticket<T>
    where
        T: Send + 'static,
        F: FnMut(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        self.submit_touching(Touch::Any, f)
    }

    /// [`Ledger::submit`] for a job that changes only what `touch` names ([`crate::ahead`]).
    fn submit_touching<T, F>(&self, touch: Touch, f: F) -> Ticket<T>
    where
        T: Send + 'static,
        F: FnMut(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        // Replays counted a while ago go first, in the same batch or an earlier one.
        self.queue_replay_counts(true);
        self.writer.submit_touching(touch, f)
    }

    /// Has the writer decide a claim, its outcome sent to `reply`; a replay it decides makes the
    /// key known to the replay readers.
    fn claim_by_writer(&self, req: ClaimRequest, reply: Reply<ClaimOutcome>) {
        // The reject policy's duplicate check reads other keys' entries: such a claim may depend
        // on anything before it.
        let touch = match req.reject_duplicates_within_ms {
            None => Touch::Key(req.route.clone(), req.scope.clone(), req.key.clone()),
            Some(_) => Touch::Any,
        };
        let known = self
            .replay_reads
            .as_ref()
            .map(|r| (r.known.clone(), replay_reads::Known::key(&req)));
        let claim = prepared::Claim::new(req);
        self.queue_replay_counts(true);
        let effects = self.effects.clone();
        self.writer.submit_replying(
            touch,
            move |ctx| {
                let out = write::claim(ctx, &claim)?;
                match (&out, &known, &effects) {
                    (ClaimOutcome::Replay { .. }, Some((known, key)), _) => known.mark(*key),
                    (ClaimOutcome::Claimed { entry_id, .. }, _, Some(effects)) => {
                        effects.claimed(*entry_id, &claim.req.route, claim.effect());
                    }
                    _ => {}
                }
                Ok(out)
            },
            reply,
        );
    }

    /// Claims the replay readers were handed: each a replay when one read finds its completed
    /// entry, else the writer's to decide (all of them, if the read fails).
    fn replay_or_claim(&self, reqs: Vec<ClaimRequest>, replies: Vec<Reply<ClaimOutcome>>) {
        if let Some(r) = &self.replay_reads {
            r.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let found = self
            .read(|db| replay_reads::replayable(db, &reqs))
            .unwrap_or_default();
        let mut found = found.into_iter();
        for (req, reply) in reqs.into_iter().zip(replies) {
            match found.next().flatten() {
                Some(entry) => {
                    self.tally_replay(entry.entry_id, req.at);
                    let _ = reply.send(Ok(ClaimOutcome::Replay {
                        entry_id: entry.entry_id,
                        response: entry.response,
                    }));
                }
                None => self.claim_by_writer(req, reply),
            }
        }
    }

    /// `f` on a reader once every event acknowledged so far is in the log (PostgreSQL: taken out
    /// of the intake first), so a read of the log shows what was written before it.
    fn read_log<T>(&self, f: impl FnOnce(&mut dyn Db) -> Result<T>) -> Result<T> {
        self.sequence()?;
        self.read(f)
    }

    fn read<T>(&self, f: impl FnOnce(&mut dyn Db) -> Result<T>) -> Result<T> {
        let mut f = Some(f);
        let mut out = None;
        self.readers.with(&mut |db| {
            if let Some(f) = f.take() {
                out = Some(f(db));
            }
        })?;
        out.unwrap_or(Err(LedgerError::Closed))
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.close();
    }
}

/// Records the chain algorithm the first time a ledger is written; returns the recorded one.
pub(crate) fn record_alg(db: &mut dyn Db, hasher: &ChainHasher) -> Result<String> {
    if let Some(a) = read::chain_alg(db)? {
        return Ok(a);
    }
    db.exec(
        "INSERT INTO meta (name, value) VALUES ('chain_alg', ?1) ON CONFLICT (name) DO NOTHING",
        crate::db::vals![hasher.alg()],
    )?;
    read::chain_alg(db)?.ok_or_else(|| LedgerError::Corrupt("no chain algorithm recorded".into()))
}

/// Whether writes must be refused for this hasher (see `Writer::refusal`).
pub(crate) fn write_refusal(hasher: &ChainHasher, recorded: &str) -> Option<bool> {
    match chain::check_alg(hasher, recorded) {
        Ok(()) => None,
        Err(LedgerError::ChainKeyRequired) => Some(true),
        Err(_) => Some(false),
    }
}

impl Storage for Ledger {
    fn backend(&self) -> &'static str {
        self.readers.backend()
    }

    fn location(&self) -> String {
        self.readers.location()
    }

    fn writer_health(&self) -> WriterHealth {
        self.writer.health()
    }

    fn chain_alg(&self) -> Result<String> {
        self.read(|db| {
            read::chain_alg(db)?
                .ok_or_else(|| LedgerError::Corrupt("no chain algorithm recorded".into()))
        })
    }

    fn cached_replay(
        &self,
        route: &str,
        scope: &str,
        key: &str,
        fingerprint: &str,
        at: Millis,
    ) -> Option<(i64, ResponseRecord)> {
        if self.writer.refuses() {
            return None;
        }
        let (entry_id, response) =
            self.cache
                .as_ref()?
                .get(&cache_key(route, scope, key), fingerprint, at, |seen| {
                    self.read(|db| replays::log_since(db, seen)).ok()
                })?;
        self.tally_replay(entry_id, at);
        Some((entry_id, response))
    }

    fn claim(&self, req: ClaimRequest) -> Ticket<ClaimOutcome> {
        // A replay of a completed key changes nothing but counters: answer it from a read, without
        // waiting for a commit (and keep its response for the next replay: `cached_replay`).
        // Everything else is decided by the writer, under the write lock.
        if self.readers.inline() && !self.writer.refuses() {
            if let Ok(Some(entry)) = self.read(|db| replays::replayable(db, &req)) {
                let (entry_id, response) = (entry.entry_id, entry.response.clone());
                if let Some(c) = &self.cache {
                    c.fill(cache_key(&req.route, &req.scope, &req.key), entry);
                }
                self.tally_replay(entry_id, req.at);
                return Ticket::ready(Ok(ClaimOutcome::Replay { entry_id, response }));
            }
        }
        let (reply, ticket) = Ticket::channel();
        // A read that must not block this thread: a key seen replayed here goes to the replay
        // readers, which answer it or hand it to the writer.
        let back = match &self.replay_reads {
            Some(r) if !self.writer.refuses() => r.offer(req, reply),
            _ => Some((req, reply)),
        };
        if let Some((req, reply)) = back {
            self.claim_by_writer(req, reply);
        }
        ticket
    }

    fn record_attempt(&self, report: OwnerReport, attempt: i64, lease_ms: i64) -> Ticket<()> {
        self.submit(move |ctx| write::record_attempt(ctx, &report, attempt, lease_ms))
    }

    fn complete(&self, req: CompleteRequest) -> Ticket<CompleteOutcome> {
        let touch = Touch::Entry(
            req.entry_id,
            req.duplicate_window_ms.map(|w| req.at - w),
            self.effects.as_ref().and_then(|e| e.take(req.entry_id)),
        );
        let completion = prepared::Completion::new(req);
        self.submit_touching(touch, move |ctx| write::complete(ctx, &completion))
    }

    fn mark_unknown(&self, report: OwnerReport) -> Ticket<()> {
        self.submit(move |ctx| write::mark_unknown(ctx, &report))
    }

    fn release(&self, report: OwnerReport) -> Ticket<()> {
        self.submit(move |ctx| write::release(ctx, &report))
    }

    fn sweep(&self, at: Millis) -> Ticket<SweepReport> {
        // The sweeper's pass writes every replay counted so far: counts are never older than it.
        if self.replay_reads.is_none() {
            self.queue_replay_counts(false);
            return self.submit(move |ctx| write::sweep(ctx, at));
        }
        // PostgreSQL writes them on the calling thread, which may be a server's task: both go to
        // a thread of their own.
        let (reply, ticket) = Ticket::channel();
        let me = self.me.clone();
        let _ = std::thread::Builder::new()
            .name("idemgate-sweep".into())
            .spawn(move || {
                if let Some(l) = me.upgrade() {
                    l.count_replays_now();
                    l.writer
                        .submit_replying(Touch::Any, move |ctx| write::sweep(ctx, at), reply);
                }
            });
        ticket
    }

    fn resolve(&self, req: ResolveRequest) -> Ticket<EntrySummary> {
        self.submit(move |ctx| write::resolve(ctx, &req))
    }

    fn purge(&self, req: PurgeRequest) -> Ticket<Vec<i64>> {
        self.submit(move |ctx| write::purge(ctx, &req))
    }

    fn redrive(&self, req: RedriveRequest) -> Ticket<Redrive> {
        self.submit(move |ctx| write::redrive(ctx, &req))
    }

    fn note_reconcile(&self, note: ReconcileNote) -> Ticket<()> {
        self.submit(move |ctx| write::note_reconcile(ctx, &note))
    }

    fn review(&self, req: ReviewRequest) -> Ticket<i64> {
        self.submit(move |ctx| write::review(ctx, &req))
    }

    fn reopen(&self, req: ReviewRequest) -> Ticket<Review> {
        self.submit(move |ctx| write::reopen(ctx, &req))
    }

    fn note_loop(&self, note: LoopNote) -> Ticket<()> {
        self.submit(move |ctx| write::note_loop(ctx, &note))
    }

    fn counts_calls(&self) -> bool {
        self.backend() == "postgres"
    }

    fn count_call(&self, name: &str, window_ms: i64, at: Millis) -> Result<(Millis, u64)> {
        if !self.counts_calls() {
            return Err(LedgerError::Unsupported(
                "a SQLite ledger counts no calls: its server counts them".into(),
            ));
        }
        // One statement in its own transaction on a reader's connection: not under the write
        // lock, and a count needs no fsync before the guard answers.
        self.read(|db| read::count_call(db, name, window_ms, at))
    }

    fn decide(&self, req: DecideRequest) -> Ticket<Approval> {
        self.submit(move |ctx| write::decide(ctx, &req))
    }

    fn released(&self) -> Option<&tokio::sync::Notify> {
        Some(&self.released)
    }

    fn lead(&self, instance: &str, at: Millis) -> Result<Option<Box<dyn Lead>>> {
        self.readers.lead(instance, at)
    }

    fn leader(&self) -> Result<Option<Leader>> {
        self.readers.leader()
    }

    fn take_approved(
        &self,
        owner: String,
        lease_ms: i64,
        at: Millis,
        limit: u32,
    ) -> Ticket<Vec<Redrive>> {
        self.submit(move |ctx| write::take_approved(ctx, &owner, lease_ms, at, limit))
    }

    fn note_tools(&self, listed: ToolsListed) -> Ticket<()> {
        self.submit(move |ctx| write::note_tools(ctx, &listed))
    }

    fn announced(&self) -> Result<Option<crate::store::Announced>> {
        self.read(|db| write::announced(db))
    }

    fn note_announced(&self, book: crate::store::Announced) -> Ticket<()> {
        self.submit(move |ctx| write::note_announced(ctx, &book))
    }

    fn extend_tree(&self, batch: crate::model::TreeBatch) -> Ticket<()> {
        if self.backend() == "postgres" {
            return Ticket::ready(self.read(|db| write::extend_tree_alone(db, &batch)));
        }
        self.submit(move |ctx| write::extend_tree(ctx, &batch))
    }

    fn note_tree_checkpoint(&self, size: u64, note: String, at: Millis) -> Ticket<()> {
        self.submit(move |ctx| write::note_tree_checkpoint(ctx, size, &note, at))
    }

    fn cosign_tree_checkpoint(&self, size: u64, line: String) -> Ticket<bool> {
        self.submit(move |ctx| write::cosign_tree_checkpoint(ctx, size, &line))
    }

    fn mark_archived(&self, seg: ArchivedSegment) -> Ticket<i64> {
        self.search
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .forget_through(seg.seq);
        self.submit(move |ctx| write::mark_archived(ctx, &seg))
    }

    fn drop_archived(&self, limit: u64) -> Ticket<u64> {
        self.submit(move |ctx| write::drop_archived(ctx, limit))
    }

    fn note_checkpoint(&self, cp: SignedCheckpoint, at: Millis, of_head: bool) -> Ticket<i64> {
        self.submit(move |ctx| write::note_checkpoint(ctx, &cp, at, of_head))
    }

    fn note_retention(&self, detail: serde_json::Value, policy: String, at: Millis) -> Ticket<i64> {
        self.submit(move |ctx| write::note_retention(ctx, &detail, &policy, at))
    }

    fn entry(&self, id: i64, now: Millis) -> Result<EntryDetail> {
        self.read_log(|db| read::entry(db, id, now))
    }

    fn entries(&self, filter: &EntryFilter, page: Page, now: Millis) -> Result<Vec<EntrySummary>> {
        self.read(|db| read::entries(db, filter, page, now))
    }

    fn approvals(&self, open: bool, page: Page, now: Millis) -> Result<Vec<EntryDetail>> {
        self.read(|db| read::approvals(db, open, page, now))
    }

    fn events(&self, filter: &EventFilter, page: Page) -> Result<Vec<Event>> {
        self.read_log(|db| search::events(db, &self.search, filter, page))
    }

    fn warm(&self) -> Result<()> {
        self.read_log(|db| search::warm(db, &self.search))
    }

    fn scan_events(
        &self,
        range: EventRange,
        f: &mut dyn FnMut(Event) -> Result<bool>,
    ) -> Result<()> {
        self.read_log(|db| read::scan_events(db, range, f))
    }

    fn incidents(&self, page: Page, now: Millis) -> Result<Vec<Incident>> {
        self.read(|db| read::incidents(db, page, now))
    }

    fn stats(&self, now: Millis, hours: u32) -> Result<Stats> {
        self.read(|db| read::stats(db, now, hours))
    }

    fn head(&self) -> Result<Option<ChainHead>> {
        self.read_log(read::head)
    }

    fn contains(&self, head: &ChainHead) -> Result<bool> {
        self.read_log(|db| read::contains(db, head))
    }

    fn scan_entries(
        &self,
        range: EventRange,
        f: &mut dyn FnMut(crate::model::EntryRow) -> Result<bool>,
    ) -> Result<()> {
        self.read_log(|db| read::scan_entries(db, range, f))
    }

    fn seq_before(&self, before: Millis) -> Result<Option<i64>> {
        self.read_log(|db| read::seq_before(db, before))
    }

    fn archived(&self) -> Result<Vec<ArchivedSegment>> {
        self.read(read::archived)
    }

    fn tree_state(&self) -> Result<crate::model::TreeState> {
        self.read(read::tree_state)
    }

    fn tree_hashes(&self, indexes: &[u64]) -> Result<Vec<[u8; 32]>> {
        self.read(|db| read::tree_hashes(db, indexes))
    }

    fn leaf_of(&self, seq: i64) -> Result<Option<u64>> {
        self.read(|db| read::leaf_of(db, seq))
    }

    fn tree_checkpoint(&self, index: u64) -> Result<Option<(u64, String)>> {
        self.read(|db| read::tree_checkpoint(db, index))
    }

    fn tool_effect(&self, route: &str, upstream: &str, tool: &str) -> Result<Option<Effect>> {
        self.read(|db| read::tool_effect(db, route, upstream, tool))
    }

    fn scan_seqs(
        &self,
        first: i64,
        last: i64,
        f: &mut dyn FnMut(Event) -> Result<bool>,
    ) -> Result<()> {
        self.read_log(|db| read::scan_seqs(db, first, last, f))
    }

    fn sequence(&self) -> Result<usize> {
        // A writer that refuses (its chain key is not the ledger's) must not chain either.
        if self.backend() != "postgres" || self.writer.refuses() {
            return Ok(0);
        }
        let mut total = 0;
        loop {
            let n = self.read(|db| {
                // One statement when there is nothing to take: a read need not wait for the lock.
                if db
                    .opt("SELECT CAST(1 AS BIGINT) FROM intake LIMIT 1", &[], |r| {
                        r.int(0)
                    })?
                    .is_some()
                {
                    write::intake::sequence(db, &self.hasher, write::intake::STEP)
                } else {
                    Ok(0)
                }
            })?;
            total += n;
            if n < write::intake::STEP {
                return Ok(total);
            }
        }
    }

    fn verify(&self, progress: Progress<'_>) -> Result<VerifyReport> {
        self.sequence()?;
        verify::verify(self, progress)
    }
}

mod replay_counts;
mod replay_reads;
#[cfg(test)]
mod tests;
mod verify;
