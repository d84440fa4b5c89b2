//! The storage trait every backend implements (SQLite and PostgreSQL), and the requests and
//! answers that cross it. Nothing backend-specific appears here.

use serde::{Deserialize, Serialize};

use crate::chain::VerifyReport;
use crate::error::{LedgerError, Result};
use crate::lead::{Lead, Leader};
use crate::model::{
    Approval, ArchivedSegment, ChainHead, Effect, EntryDetail, EntryFilter, EntryRow, EntrySummary,
    Event, EventFilter, Incident, Millis, Page, RequestRecord, ResponseRecord, Review,
    SignedCheckpoint, Stats, TreeBatch, TreeState,
};

/// A write that has been queued. It resolves once the batch holding it is durable (fsync'd) or has
/// failed. Wait for it synchronously with [`Ticket::wait`] or asynchronously with [`Ticket::recv`].
#[derive(Debug)]
pub struct Ticket<T>(tokio::sync::oneshot::Receiver<Result<T>>);

/// Where a job's outcome goes: the other end of a [`Ticket`].
pub type Reply<T> = tokio::sync::oneshot::Sender<Result<T>>;

impl<T> Ticket<T> {
    pub fn channel() -> (Reply<T>, Ticket<T>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (tx, Ticket(rx))
    }

    /// A ticket that is already resolved.
    pub fn ready(r: Result<T>) -> Ticket<T> {
        let (tx, t) = Ticket::channel();
        let _ = tx.send(r);
        t
    }

    /// Blocks until the write is durable. Do not call from inside an async runtime; use `recv`.
    pub fn wait(self) -> Result<T> {
        self.0.blocking_recv().unwrap_or(Err(LedgerError::Closed))
    }

    pub async fn recv(self) -> Result<T> {
        self.0.await.unwrap_or(Err(LedgerError::Closed))
    }
}

/// A proxy's claim on `(route, scope, key)`.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub route: String,
    pub scope: String,
    pub key: String,
    pub fingerprint: String,
    /// The request's fingerprint without its target ([`crate::canon::fingerprint`]), when
    /// `fingerprint` covers a target ([`crate::canon::with_target`]). An entry claimed before
    /// fingerprints covered the target has that one: it matches this request if it was also
    /// claimed at this very path and query (`request.path`), so a retry across the upgrade is
    /// replayed, not refused as a collision.
    pub legacy_fingerprint: Option<String>,
    pub effect: Effect,
    /// Redacted by the caller; the ledger redacts [`ALWAYS_REDACTED_HEADERS`] again.
    pub request: RequestRecord,
    /// Who holds the lease (an instance id).
    pub owner: String,
    pub lease_ms: i64,
    pub ttl_ms: i64,
    /// When set, a claim whose route, scope and fingerprint completed under another key within this
    /// window is refused ([`ClaimOutcome::ProbableDuplicate`]) instead of executed.
    pub reject_duplicates_within_ms: Option<i64>,
    pub at: Millis,
    /// The MCP tool a `tools/call` entry runs (its route is the MCP endpoint): listed and filtered
    /// by it. `None` for an HTTP route's entry.
    pub tool: Option<String>,
    /// The request's subjects (the route's `subject` names and their values), searchable.
    pub subjects: Vec<(String, String)>,
    /// With a route's `duplicate_on`: the digest of those values, which makes two entries the same
    /// effect (in place of the fingerprint) — in the same scope, or in any when it starts `any:`.
    pub dup_fp: Option<String>,
    /// The approval policy the request matched: a new claim is held for it, unforwarded.
    pub approval: Option<ApprovalAsk>,
}

/// The approval a claim must wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAsk {
    /// The policy's name (its route's, or `route/tool`).
    pub policy: String,
    /// The policy's hash: what operators approve is bound to it.
    pub policy_hash: String,
    /// Distinct operators who must approve.
    pub needed: u32,
    /// How long an undecided request waits before it expires.
    pub expires_ms: i64,
    /// Who may decide (by name); `None`: any operator.
    pub approvers: Option<Vec<String>>,
    /// Why the policy's condition could not be evaluated, when that is what held the call
    /// (a condition fails closed): logged with the request.
    pub unevaluated: Option<String>,
}

/// An operator's decision on a held call.
#[derive(Debug, Clone)]
pub struct DecideRequest {
    pub entry_id: i64,
    pub approve: bool,
    pub actor: Actor,
    /// The request the operator decided on; refused if the entry now holds another.
    pub fingerprint: Option<String>,
    pub at: Millis,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// New (or re-armed) claim, durable: forward the request.
    Claimed { entry_id: i64, attempt: i64 },
    /// Another request holds a live lease on the key.
    InFlight {
        entry_id: i64,
        lease_expires_at: Millis,
    },
    /// Completed with the same fingerprint: replay this response.
    Replay {
        entry_id: i64,
        response: ResponseRecord,
    },
    /// The key is bound to a different fingerprint; the rejected request was recorded.
    Collision { entry_id: i64 },
    /// PENDING with its lease passed or its outcome unknown: an operator must decide.
    Stuck { entry_id: i64 },
    /// An operator marked the entry failed; `response` is theirs, if they gave one.
    Failed {
        entry_id: i64,
        response: Option<ResponseRecord>,
    },
    /// The same effect completed under another key within the duplicate window (reject policy).
    ProbableDuplicate { entry_id: i64, key: String },
    /// Held for approval until `expires_at`: nothing was forwarded. `requested`: this claim
    /// asked for it (a retry attaches to the request already made).
    AwaitingApproval {
        entry_id: i64,
        expires_at: Millis,
        requested: bool,
    },
    /// Held for approval, and rejected (`reason` the operator's) or expired: it never runs.
    NotApproved {
        entry_id: i64,
        end: crate::model::ApprovalEnd,
        reason: Option<String>,
    },
}

/// An upstream answer to store for a claimed entry.
#[derive(Debug, Clone)]
pub struct CompleteRequest {
    pub entry_id: i64,
    pub owner: String,
    pub response: ResponseRecord,
    pub ttl_ms: i64,
    /// Flag a duplicate suspect when the same effect completed under another key within this window.
    pub duplicate_window_ms: Option<i64>,
    pub at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteOutcome {
    pub duplicate_of: Option<i64>,
}

/// A claim-holder's report on an entry it owns.
#[derive(Debug, Clone)]
pub struct OwnerReport {
    pub entry_id: i64,
    pub owner: String,
    /// What happened, for the operator (e.g. "connect refused", "upstream 503", "timeout").
    pub error: String,
    pub at: Millis,
}

/// An operator's decision on an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "as", rename_all = "lowercase")]
pub enum Resolution {
    /// It happened: replay `response` from now on.
    Completed {
        response: ResponseRecord,
        external_ref: Option<String>,
    },
    /// Permanent failure; `response` (if any) is what retries get.
    Failed { response: Option<ResponseRecord> },
    /// It definitely did not happen: the key may run again.
    Released,
}

impl Resolution {
    pub fn name(&self) -> &'static str {
        match self {
            Resolution::Completed { .. } => "completed",
            Resolution::Failed { .. } => "failed",
            Resolution::Released => "released",
        }
    }
}

/// Who did it and why: every operator action carries both, non-empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub operator: String,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct ResolveRequest {
    pub entry_id: i64,
    pub resolution: Resolution,
    pub actor: Actor,
    pub ttl_ms: i64,
    pub at: Millis,
}

#[derive(Debug, Clone)]
pub struct PurgeRequest {
    pub ids: Vec<i64>,
    /// Only purge those of `ids` that had expired by this time (the rest, pending ones included,
    /// are skipped, not an error): `at` for `purge --expired`, earlier for a retention policy.
    pub expired_by: Option<Millis>,
    pub actor: Actor,
    pub at: Millis,
}

/// Re-arm an entry so its stored request can be driven upstream again (operator replay).
#[derive(Debug, Clone)]
pub struct RedriveRequest {
    pub entry_id: i64,
    pub owner: String,
    pub lease_ms: i64,
    pub actor: Actor,
    pub at: Millis,
}

/// A re-armed entry: its stored request and the new attempt number.
#[derive(Debug, Clone)]
pub struct Redrive {
    pub entry: EntrySummary,
    pub request: RequestRecord,
    pub attempt: i64,
}

/// An operator's note of a reconcile probe's result (the resolution, if any, is a separate action).
#[derive(Debug, Clone)]
pub struct ReconcileNote {
    pub entry_id: i64,
    pub actor: Actor,
    pub detail: serde_json::Value,
    pub at: Millis,
}

/// An operator's review of the incident whose first entry is `entry_id`.
#[derive(Debug, Clone)]
pub struct ReviewRequest {
    pub entry_id: i64,
    pub actor: Actor,
    pub at: Millis,
}

/// A loop suspect the proxy saw: `key` is the key of the call that went past the guard's limit;
/// `detail` says how many calls in which window, and what it did.
#[derive(Debug, Clone)]
pub struct LoopNote {
    pub route: String,
    pub scope: String,
    pub key: String,
    pub detail: serde_json::Value,
    pub at: Millis,
}

/// What one `tools/list` answer said of an MCP route's tools: each tool's effect by its
/// annotations. The upstream is part of the key: another upstream's tools start unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsListed {
    pub route: String,
    pub upstream: String,
    pub tools: Vec<(String, Effect)>,
    pub at: Millis,
}

/// How far the approval webhooks have been told: the seq of the last decision (`approved`,
/// `rejected`, `approval_expired`) announced, and the entries approved in full whose result
/// (ran, not sent, outcome unknown) is still to be told, oldest approval first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announced {
    pub seq: i64,
    pub running: Vec<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    pub lease_expired: u64,
    pub ttl_expired: u64,
    #[serde(default)]
    pub approvals_expired: u64,
}

/// A contiguous range of the log, by time; both ends optional.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRange {
    pub since: Option<Millis>,
    pub until: Option<Millis>,
}

/// Whether this process's ledger writer can take writes (for `/healthz` and `/readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterHealth {
    /// The writer thread is there. If it is not, no write in this process will succeed again.
    pub running: bool,
    /// When a batch last failed to begin or to commit (a full disk, a lost database), if ever.
    pub last_failure_at: Option<Millis>,
}

/// Progress callback: told the count so far; returns `false` to cancel.
pub type Progress<'a> = &'a mut dyn FnMut(u64) -> bool;

/// A ledger backend. Writes return [`Ticket`]s that resolve once durable; reads are synchronous and
/// use their own connections.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// "sqlite" or "postgres".
    fn backend(&self) -> &'static str;
    /// Where the ledger lives (a path or a redacted URL).
    fn location(&self) -> String;
    /// The chain algorithm recorded in the ledger.
    fn chain_alg(&self) -> Result<String>;
    /// Whether this process's writer is running, and when a commit of its last failed.
    fn writer_health(&self) -> WriterHealth;

    // The proxy's path.
    /// The answer [`Storage::claim`] would give a replay, from memory and before a claim is even
    /// built (SQLite's replay cache): the stored response of the completed, unexpired entry of
    /// `(route, scope, key)` when it was claimed with `fingerprint`, its replay counted. `None`:
    /// claim.
    fn cached_replay(
        &self,
        route: &str,
        scope: &str,
        key: &str,
        fingerprint: &str,
        at: Millis,
    ) -> Option<(i64, ResponseRecord)> {
        let _ = (route, scope, key, fingerprint, at);
        None
    }
    fn claim(&self, req: ClaimRequest) -> Ticket<ClaimOutcome>;
    /// A retry of a claimed entry (the last try was not executed); renews the lease by `lease_ms`.
    fn record_attempt(&self, report: OwnerReport, attempt: i64, lease_ms: i64) -> Ticket<()>;
    fn complete(&self, req: CompleteRequest) -> Ticket<CompleteOutcome>;
    fn mark_unknown(&self, report: OwnerReport) -> Ticket<()>;
    fn release(&self, report: OwnerReport) -> Ticket<()>;
    fn sweep(&self, at: Millis) -> Ticket<SweepReport>;

    // Operator actions.
    fn resolve(&self, req: ResolveRequest) -> Ticket<EntrySummary>;
    fn purge(&self, req: PurgeRequest) -> Ticket<Vec<i64>>;
    fn redrive(&self, req: RedriveRequest) -> Ticket<Redrive>;
    fn note_reconcile(&self, note: ReconcileNote) -> Ticket<()>;
    /// Marks an incident reviewed; the newest suspect it covers.
    fn review(&self, req: ReviewRequest) -> Ticket<i64>;
    /// Withdraws an incident's review (it is open again); the review it withdrew.
    fn reopen(&self, req: ReviewRequest) -> Ticket<Review>;
    /// Logs a loop suspect.
    fn note_loop(&self, note: LoopNote) -> Ticket<()>;
    /// Whether [`Storage::count_call`] counts for every instance on this ledger (PostgreSQL); a
    /// ledger one server writes (SQLite) leaves its loop guard to count in memory.
    fn counts_calls(&self) -> bool {
        false
    }
    /// Counts one call of `name` in its loop-guard window of `window_ms` (a new window starts
    /// when the last one ended by `at`), at once and outside the writer: the window's end and the
    /// calls in it so far, this one included. Blocking: a round trip to PostgreSQL.
    fn count_call(&self, name: &str, window_ms: i64, at: Millis) -> Result<(Millis, u64)> {
        let _ = (name, window_ms, at);
        Err(LedgerError::Unsupported(
            "this ledger counts no calls: count them in the process".into(),
        ))
    }
    /// Approves or rejects a held call; the approval as it stands after.
    fn decide(&self, req: DecideRequest) -> Ticket<Approval>;
    /// Takes up to `limit` approved calls for `owner` to forward, each under a lease of
    /// `lease_ms`; each approved call is taken once, by whichever instance asks first.
    fn take_approved(
        &self,
        owner: String,
        lease_ms: i64,
        at: Millis,
        limit: u32,
    ) -> Ticket<Vec<Redrive>>;
    /// What a process's forwarder of approved calls waits on besides its timer: notified (by
    /// whoever wrote it) once a decision that released a call is durable, so a decision made in
    /// this process is acted on at once. Decisions of other processes are found by looking.
    fn released(&self) -> Option<&tokio::sync::Notify> {
        None
    }
    /// Takes the lead of the books (retention, archival, signing: [`crate::lead`]) for
    /// `instance` if no live instance holds it; `None` while another does. Blocking, and the lead
    /// must be kept and dropped off any async runtime.
    fn lead(&self, instance: &str, at: Millis) -> Result<Option<Box<dyn Lead>>>;
    /// The instance leading a shared ledger's books now; `None` on a ledger one process writes,
    /// and between one leader's end and the next one's start.
    fn leader(&self) -> Result<Option<Leader>>;
    /// Stores the tools' effects a `tools/list` answer gave, over what an earlier one said.
    fn note_tools(&self, listed: ToolsListed) -> Ticket<()>;
    /// How far the approval webhooks were told of decisions and results; `None` until
    /// something is recorded.
    fn announced(&self) -> Result<Option<Announced>>;
    /// Records how far the approval webhooks were told; refused, with nothing written, when
    /// `book` is behind the decision recorded (a former leader's round).
    fn note_announced(&self, book: Announced) -> Ticket<()>;
    /// Appends an integration step to the log's Merkle tree ([`crate::tree::integrate`]);
    /// refused with nothing written when the tree no longer has the size it was computed from.
    fn extend_tree(&self, batch: TreeBatch) -> Ticket<()>;
    /// Keeps a signed checkpoint (`note`) of the tree of `size` leaves; refused (conflict) unless
    /// it is larger than every one kept, so that two signers leave one.
    fn note_tree_checkpoint(&self, size: u64, note: String, at: Millis) -> Ticket<()>;
    /// Adds a witness's cosignature line (checked by the caller) to the kept checkpoint of the
    /// tree of `size`; `false` when it carries that witness's already.
    fn cosign_tree_checkpoint(&self, size: u64, line: String) -> Ticket<bool>;

    // Archival, signing, retention.
    /// Records a sealed archive segment and logs it: from then on its events may be deleted
    /// ([`Storage::drop_archived`]). Refused unless the segment starts right after the last one
    /// and ends at an event the log holds, with that event's hash. The seq of its log event.
    fn mark_archived(&self, seg: ArchivedSegment) -> Ticket<i64>;
    /// Deletes up to `limit` of the oldest events a recorded segment holds; how many went.
    fn drop_archived(&self, limit: u64) -> Ticket<u64>;
    /// Logs a signed checkpoint; the seq of its event.
    ///
    /// `of_head`: the periodic checkpoint of the log's head as it grows, refused (conflict) unless
    /// it signs past the last one, so that two signers of one head leave one such checkpoint. An
    /// export's or an archive segment's checkpoint signs any event, as often as it is made.
    fn note_checkpoint(&self, cp: SignedCheckpoint, at: Millis, of_head: bool) -> Ticket<i64>;
    /// Logs a run of the retention policy `policy` and what it did.
    fn note_retention(&self, detail: serde_json::Value, policy: String, at: Millis) -> Ticket<i64>;

    // Reads.
    fn entry(&self, id: i64, now: Millis) -> Result<EntryDetail>;
    fn entries(&self, filter: &EntryFilter, page: Page, now: Millis) -> Result<Vec<EntrySummary>>;
    /// The calls held for approval, newest first: only those still undecided with `open`.
    fn approvals(&self, open: bool, page: Page, now: Millis) -> Result<Vec<EntryDetail>>;
    fn events(&self, filter: &EventFilter, page: Page) -> Result<Vec<Event>>;
    /// Builds what makes later reads fast (the log search's index) now rather than on first use.
    /// Blocking; a console calls it on a thread of its own after opening a ledger.
    fn warm(&self) -> Result<()> {
        Ok(())
    }
    /// Streams the events of `range` in sequence order; `f` returns `false` to stop.
    fn scan_events(
        &self,
        range: EventRange,
        f: &mut dyn FnMut(Event) -> Result<bool>,
    ) -> Result<()>;
    fn incidents(&self, page: Page, now: Millis) -> Result<Vec<Incident>>;
    fn stats(&self, now: Millis, hours: u32) -> Result<Stats>;
    fn head(&self) -> Result<Option<ChainHead>>;
    /// Whether the log holds event `head.seq` with exactly `head.hash` (live, or as the last
    /// event of a recorded archive segment).
    fn contains(&self, head: &ChainHead) -> Result<bool>;
    /// Streams the entries created in `range`, oldest first, with their outcomes; `f` returns
    /// `false` to stop.
    fn scan_entries(
        &self,
        range: EventRange,
        f: &mut dyn FnMut(EntryRow) -> Result<bool>,
    ) -> Result<()>;
    /// The seq of the last live event logged before `before`.
    fn seq_before(&self, before: Millis) -> Result<Option<i64>>;
    /// The recorded archive segments, oldest first.
    fn archived(&self) -> Result<Vec<ArchivedSegment>>;
    /// The log's Merkle tree: its size and last leaf's seq.
    fn tree_state(&self) -> Result<TreeState>;
    /// The tree's stored hashes at these indexes (Go `tlog`'s `StoredHashIndex`), in order.
    fn tree_hashes(&self, indexes: &[u64]) -> Result<Vec<[u8; 32]>>;
    /// The event `seq`'s leaf index, once the tree holds it.
    fn leaf_of(&self, seq: i64) -> Result<Option<u64>>;
    /// The newest kept checkpoint of the tree that covers leaf `index`: its size and note.
    fn tree_checkpoint(&self, index: u64) -> Result<Option<(u64, String)>>;
    /// A tool's effect as its route's upstream last listed it, through any instance.
    fn tool_effect(&self, route: &str, upstream: &str, tool: &str) -> Result<Option<Effect>>;
    /// Streams the live events `first..=last` in sequence order; `f` returns `false` to stop.
    fn scan_seqs(
        &self,
        first: i64,
        last: i64,
        f: &mut dyn FnMut(Event) -> Result<bool>,
    ) -> Result<()>;
    /// Numbers and chains into the log every event written so far that is not in it yet (a
    /// PostgreSQL ledger's intake: `write/intake.rs`): how many. The log's reads do it first;
    /// the books' leader does it on its timer. A SQLite ledger's writer numbers its own events.
    fn sequence(&self) -> Result<usize>;
    /// Recomputes the whole chain.
    fn verify(&self, progress: Progress<'_>) -> Result<VerifyReport>;
}
