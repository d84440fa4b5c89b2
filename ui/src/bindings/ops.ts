// Generated from crates/ops/src/op by the ipc_bindings test; do not edit.
import type { ActionCmd } from "./ActionCmd";
import type { AgainstReport } from "./AgainstReport";
import type { Approval } from "./Approval";
import type { ApprovalsRequest } from "./ApprovalsRequest";
import type { ArchiveCmd } from "./ArchiveCmd";
import type { ArchiveReport } from "./ArchiveReport";
import type { ArchiveVerifyReport } from "./ArchiveVerifyReport";
import type { BulkCmd } from "./BulkCmd";
import type { BulkPreviewRequest } from "./BulkPreviewRequest";
import type { BulkReport } from "./BulkReport";
import type { ChainHead } from "./ChainHead";
import type { CheckpointArg } from "./CheckpointArg";
import type { DecideCmd } from "./DecideCmd";
import type { EntriesManifest } from "./EntriesManifest";
import type { EntriesRequest } from "./EntriesRequest";
import type { EntryPage } from "./EntryPage";
import type { EntryRef } from "./EntryRef";
import type { EntrySummary } from "./EntrySummary";
import type { EntryView } from "./EntryView";
import type { EventPage } from "./EventPage";
import type { EventProof } from "./EventProof";
import type { EventRef } from "./EventRef";
import type { ExportCmd } from "./ExportCmd";
import type { ExportJob } from "./ExportJob";
import type { ExportRef } from "./ExportRef";
import type { ExportVerifyReport } from "./ExportVerifyReport";
import type { HeldCall } from "./HeldCall";
import type { Incident } from "./Incident";
import type { IncidentsRequest } from "./IncidentsRequest";
import type { KeyedPathArg } from "./KeyedPathArg";
import type { LogRequest } from "./LogRequest";
import type { Manifest } from "./Manifest";
import type { NoArgs } from "./NoArgs";
import type { PathArg } from "./PathArg";
import type { Preview } from "./Preview";
import type { PurgeCmd } from "./PurgeCmd";
import type { PurgeReport } from "./PurgeReport";
import type { PurgeTarget } from "./PurgeTarget";
import type { ReconcileReport } from "./ReconcileReport";
import type { ReopenCmd } from "./ReopenCmd";
import type { ReplayReport } from "./ReplayReport";
import type { ResolveCmd } from "./ResolveCmd";
import type { ResolvePreviewRequest } from "./ResolvePreviewRequest";
import type { RetentionReport } from "./RetentionReport";
import type { RetentionStatus } from "./RetentionStatus";
import type { Review } from "./Review";
import type { ReviewCmd } from "./ReviewCmd";
import type { SegmentCheck } from "./SegmentCheck";
import type { StartExport } from "./StartExport";
import type { Stats } from "./Stats";
import type { StatsRequest } from "./StatsRequest";
import type { TreeExtension } from "./TreeExtension";
import type { VerifyReport } from "./VerifyReport";

/** Each operation: the least role that may run it, how it runs, its admin API route (none for one that reads or writes the desktop's own files), and whether the admin API records it under the token's operator. */
export const OPS = {
  stats: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/stats" }, acts: false },
  entries: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/entries" }, acts: false },
  show: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/entries/{entry_id}" }, acts: false },
  log: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/events" }, acts: false },
  incidents: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/incidents" }, acts: false },
  review_incident: { role: "operator", kind: "ledger", http: { method: "POST", path: "/admin/v1/incidents/{entry_id}/review" }, acts: true },
  reopen_incident: { role: "operator", kind: "ledger", http: { method: "POST", path: "/admin/v1/incidents/{entry_id}/reopen" }, acts: true },
  preview_resolve: { role: "operator", kind: "ledger", http: { method: "GET", path: "/admin/v1/entries/{entry_id}/resolve/preview" }, acts: false },
  resolve: { role: "operator", kind: "ledger", http: { method: "POST", path: "/admin/v1/entries/{entry_id}/resolve" }, acts: true },
  replay: { role: "operator", kind: "upstream", http: { method: "POST", path: "/admin/v1/entries/{entry_id}/replay" }, acts: true },
  reconcile: { role: "operator", kind: "upstream", http: { method: "POST", path: "/admin/v1/entries/{entry_id}/reconcile" }, acts: true },
  preview_bulk: { role: "operator", kind: "ledger", http: { method: "POST", path: "/admin/v1/bulk/preview" }, acts: false },
  bulk: { role: "operator", kind: "upstream_job", http: { method: "POST", path: "/admin/v1/bulk" }, acts: true },
  preview_purge: { role: "admin", kind: "ledger", http: { method: "POST", path: "/admin/v1/purge/preview" }, acts: false },
  purge: { role: "admin", kind: "job", http: { method: "POST", path: "/admin/v1/purge" }, acts: true },
  export: { role: "admin", kind: "job", http: null, acts: false },
  export_entries: { role: "admin", kind: "job", http: null, acts: false },
  start_export: { role: "admin", kind: "ledger", http: { method: "POST", path: "/admin/v1/exports" }, acts: false },
  export_jobs: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/exports" }, acts: false },
  export_job: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/exports/{id}" }, acts: false },
  cancel_export: { role: "admin", kind: "ledger", http: { method: "DELETE", path: "/admin/v1/exports/{id}" }, acts: false },
  verify_ledger: { role: "admin", kind: "job", http: { method: "GET", path: "/admin/v1/verify" }, acts: false },
  head: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/head" }, acts: false },
  prove: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/events/{seq}/proof" }, acts: false },
  prove_consistency: { role: "viewer", kind: "ledger", http: { method: "POST", path: "/admin/v1/proofs/consistency" }, acts: false },
  verify_against: { role: "admin", kind: "job", http: null, acts: false },
  verify_against_manifest: { role: "admin", kind: "job", http: { method: "POST", path: "/admin/v1/verify/against" }, acts: false },
  verify_export: { role: "admin", kind: "job", http: null, acts: false },
  retention_status: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/retention" }, acts: false },
  archive_segments: { role: "admin", kind: "ledger", http: null, acts: false },
  verify_archive: { role: "admin", kind: "job", http: null, acts: false },
  archived: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/archive" }, acts: false },
  verify_history: { role: "admin", kind: "job", http: { method: "GET", path: "/admin/v1/archive/verify" }, acts: false },
  archive: { role: "admin", kind: "job", http: null, acts: false },
  run_retention: { role: "admin", kind: "job", http: null, acts: false },
  approvals: { role: "viewer", kind: "ledger", http: { method: "GET", path: "/admin/v1/approvals" }, acts: false },
  approve: { role: "operator", kind: "ledger", http: { method: "POST", path: "/admin/v1/approvals/{entry_id}/approve" }, acts: true },
  reject: { role: "operator", kind: "ledger", http: { method: "POST", path: "/admin/v1/approvals/{entry_id}/reject" }, acts: true },
} as const;

export type OpName = keyof typeof OPS;

/** Runs one operation on a host: over IPC, or through the admin API. `job` names long work (its progress and Cancel); `null` for the rest. */
export type Call = (name: OpName, req: unknown, job: string | null) => Promise<unknown>;

/** The operations, typed. A job's answer is `null` when it was cancelled where its report is lost (a browser dropping the request). */
export interface Ops {
  /**
   * The ledger's counts.
   *
   * Entries by state, stuck and expired entries, collisions and duplicate suspects, and an
   * hourly series of the last `hours`.
   */
  stats(req: StatsRequest): Promise<Stats>;
  /**
   * A page of entries, newest first (or oldest first).
   *
   * Each entry as the lists show it: its key, state, route, subjects and times. The next
   * page starts below the answer's `next_before` (oldest first: above its `next_after`).
   */
  entries(req: EntriesRequest): Promise<EntryPage>;
  /**
   * One entry with its whole history.
   *
   * Its request and response as the ledger keeps them, its events in order, the
   * differences between the requests that reused its key, and each operator action with
   * why it would be refused: the entry's state, or what its route lacks for a replay or a
   * reconcile.
   */
  show(req: EntryRef): Promise<EntryView>;
  /**
   * A page of the log, newest first.
   *
   * Every claim, outcome, replay and operator action, each with its sequence number, its
   * time and its chain hash.
   */
  log(req: LogRequest): Promise<EventPage>;
  /**
   * Duplicate suspects grouped by the call they repeat, newest first.
   *
   * Each incident is its first entry (or, when it was purged, its oldest suspect's
   * subjects), the suspects that repeat it, and an operator's review if it had one.
   */
  incidents(req: IncidentsRequest): Promise<Array<Incident>>;
  /**
   * Marks an incident reviewed.
   *
   * Logged with the operator and the reason; a later suspect of the same call opens it
   * again. Refused for an entry that begins no incident.
   */
  review_incident(req: ReviewCmd): Promise<Review>;
  /**
   * Opens a reviewed incident again.
   *
   * Withdraws its review, which the answer gives back; logged with the operator and the
   * reason beside the review it withdrew. Refused for an incident no one reviewed.
   */
  reopen_incident(req: ReopenCmd): Promise<Review>;
  /**
   * What resolving an entry would touch.
   *
   * The entry, whether it may be resolved (as `as` says, when given), and whether its route
   * is destructive (a resolve then needs `confirm_destructive`).
   */
  preview_resolve(req: ResolvePreviewRequest): Promise<Preview>;
  /**
   * Resolves a stuck entry by hand.
   *
   * As `completed` (with the response retries will get, or the upstream's reference to the
   * effect) or as `released` (a retry runs the call again). Logged with the operator and
   * the reason.
   */
  resolve(req: ResolveCmd): Promise<EntrySummary>;
  /**
   * Sends a stuck, released or failed entry's stored request upstream again.
   *
   * Through the data plane built from the route configuration, with the key the first
   * attempt sent; the outcome is recorded on the entry as the proxy records one. The ledger
   * refuses an entry in another state; a destructive route needs `confirm_destructive`.
   * Runs to its recorded end even when its client goes away.
   */
  replay(req: ActionCmd): Promise<ReplayReport>;
  /**
   * Asks the upstream whether a stuck entry's effect happened, through its route's probe.
   *
   * A 2xx resolves it as completed with the probe's answer, a 404 releases it, anything
   * else is inconclusive and only noted. Every probe is logged with its decision.
   */
  reconcile(req: ActionCmd): Promise<ReconcileReport>;
  /**
   * What a bulk action would touch.
   *
   * The exact count and keys, the entries the action would refuse as they stand (and why),
   * and whether any is on a destructive route. The action itself takes the entries that match
   * when it runs.
   */
  preview_bulk(req: BulkPreviewRequest): Promise<Preview>;
  /**
   * Runs a resolve, a replay or a reconcile on many entries, one at a time.
   *
   * On every entry its target names when it starts; a long job that stops between two
   * entries when cancelled (or when its client goes away), each replay or reconcile it
   * started running to its recorded end. Nothing is done when the command is invalid, or
   * when an entry is on a destructive route and the command does not confirm it.
   */
  bulk(req: BulkCmd, job: string): Promise<BulkReport | null>;
  /**
   * What a purge would remove.
   *
   * The entries named (each must exist and not be pending) or every expired entry the
   * filter matches, and whether any is on a destructive route.
   */
  preview_purge(req: PurgeTarget): Promise<Preview>;
  /**
   * Removes entries and their stored requests and responses; their events stay in the log.
   *
   * A long job in chunks, each atomic and logged with the operator and the reason: one that
   * stops (cancelled, or its client went away) leaves what it purged purged, and a second
   * purge takes the rest.
   */
  purge(req: PurgeCmd, job: string): Promise<PurgeReport | null>;
  /**
   * Exports a range of the log to a file of this host, with its manifest beside it.
   *
   * The manifest records the ledger's chain head and, with a signing key, a signed
   * checkpoint; `null` when cancelled. (Over the admin API an export is a job of the server,
   * downloaded when done: `/admin/v1/exports`.)
   */
  export(req: ExportCmd, job: string): Promise<Manifest | null | null>;
  /**
   * Exports the entries created in a range, with their outcomes, to a file of this host.
   *
   * Each entry's state, subjects, status, the stored response's digest and its resolution;
   * `null` when cancelled.
   */
  export_entries(req: ExportCmd, job: string): Promise<EntriesManifest | null | null>;
  /**
   * Starts an export of the log (a time range of it) as a job.
   *
   * The file and its manifest are written on the server, in a private spool under
   * `server.export_dir`; follow the job, then download them. The client never names a path on
   * the server. At most two run at once (`429` with `Retry-After` past that).
   */
  start_export(req: StartExport): Promise<ExportJob>;
  /**
   * The exports of this process (running, or ended within the hour), newest first.
   */
  export_jobs(req: NoArgs): Promise<Array<ExportJob>>;
  /**
   * An export job: its state, progress, and when done its manifest and where to download it.
   */
  export_job(req: ExportRef): Promise<ExportJob>;
  /**
   * Cancels a running export, or deletes an ended one's files.
   */
  cancel_export(req: ExportRef): Promise<null>;
  /**
   * Recomputes the ledger's whole hash chain.
   *
   * A long job: the first bad event, if any, and why; it stops (`cancelled`) when cancelled
   * or when its client goes away.
   */
  verify_ledger(req: NoArgs, job: string): Promise<VerifyReport | null>;
  /**
   * The log's head: its last event's sequence number and chain hash.
   *
   * What an auditor notes to check later that the log still holds it and has only grown
   * from it (`verify --against` a manifest that recorded it). `null` while the log is
   * empty.
   */
  head(req: NoArgs): Promise<ChainHead | null>;
  /**
   * The proof, for an auditor, that one event is in the log.
   *
   * A C2SP tlog-proof: the event, its Merkle inclusion path, and a checkpoint of the log's
   * tree signed with the server's key. `idemgate verify --proof FILE --public-key KEY`
   * checks it with nothing else.
   */
  prove(req: EventRef): Promise<EventProof>;
  /**
   * The proof, for an auditor, that the log's tree now extends an older signed one.
   *
   * A C2SP consistency proof from the older checkpoint's size to a checkpoint of the tree
   * now, signed with the server's key, as a tlog-witness `add-checkpoint` body. `idemgate
   * verify --consistency OLD --to NEW --public-key KEY` checks it with nothing else. Refused
   * when the log's tree of the older size is not the one signed.
   */
  prove_consistency(req: CheckpointArg): Promise<TreeExtension>;
  /**
   * Verifies the chain, and that the ledger still holds the heads an export's manifest (a
   * file of this host) recorded.
   *
   * A cut-off tail of the log or a rewritten history shows as a missing head; with a public
   * key, the manifest's signed checkpoint must verify and name a head the ledger holds.
   */
  verify_against(req: KeyedPathArg, job: string): Promise<AgainstReport | null>;
  /**
   * Verifies the chain, and that the ledger still holds the heads a manifest recorded.
   *
   * The request is the manifest as an export wrote it (the CLI's or the admin API's). A
   * cut-off tail of the log or a rewritten history shows as a missing head.
   */
  verify_against_manifest(req: Manifest, job: string): Promise<AgainstReport | null>;
  /**
   * Verifies an export file of this host against its manifest (`FILE.manifest.json`),
   * without the ledger.
   */
  verify_export(req: PathArg, job: string): Promise<ExportVerifyReport | null>;
  /**
   * The retention policy's last run, as the log recorded it, and the archive's extent.
   */
  retention_status(req: NoArgs): Promise<RetentionStatus>;
  /**
   * The archive segments in a directory of this host or in `s3://bucket/prefix`, from their
   * manifests (not verified), each marked recorded or not by this ledger.
   */
  archive_segments(req: PathArg): Promise<Array<SegmentCheck>>;
  /**
   * Verifies an archive (a directory of this host, or `s3://bucket/prefix`) and the live log
   * after it.
   *
   * The whole history, naming each missing, altered or reordered segment; with a public key,
   * each segment's signed checkpoint too.
   */
  verify_archive(req: KeyedPathArg, job: string): Promise<ArchiveVerifyReport | null>;
  /**
   * The segments of the host's own archive (`[retention] archive_dir`), from their manifests
   * (not verified), each marked recorded or not by this ledger.
   *
   * Empty while nothing has been archived; `no-archive` when no archive is configured.
   */
  archived(req: NoArgs): Promise<Array<SegmentCheck>>;
  /**
   * Verifies the host's own archive (`[retention] archive_dir`) and the live log after it.
   *
   * The whole history, naming each missing, altered or reordered segment; `no-archive` when
   * no archive is configured.
   */
  verify_history(req: NoArgs, job: string): Promise<ArchiveVerifyReport | null>;
  /**
   * Seals the log's events before a time into archive segments in a directory of this host.
   *
   * Each segment is written, recorded by the ledger and signed when a signing key is
   * configured, and only then are its events removed from the live log. Stopped part-way,
   * every segment written so far is recorded and its events removed.
   */
  archive(req: ArchiveCmd, job: string): Promise<ArchiveReport | null>;
  /**
   * Applies the configured `[retention]` policy once, as the server does at its interval.
   *
   * Purges entries past the policy's age and archives the log's older events, for a ledger
   * no server runs on. Refused where no policy is configured.
   */
  run_retention(req: NoArgs, job: string): Promise<RetentionReport | null>;
  /**
   * The calls held for approval, newest first: the inbox.
   *
   * Each with its request, the policy it matched, who approved it so far, when it expires,
   * and whether the one who asks may approve or reject it now (`decision`); `open` lists
   * only those still waiting for a decision.
   */
  approvals(req: ApprovalsRequest): Promise<Array<HeldCall>>;
  /**
   * Approves a call held for approval.
   *
   * Logged with the operator and the reason, bound to the request's fingerprint, the
   * policy's hash and its expiry. The last approval the policy needs (distinct operators;
   * one OS account is one operator on the CLI and the desktop console) releases the call:
   * the server forwards it once, and the client's retry gets its result. Refused after
   * the call's window, twice from one operator, and from an operator the policy does not
   * name.
   */
  approve(req: DecideCmd): Promise<Approval>;
  /**
   * Rejects a call held for approval: it never runs.
   *
   * Logged with the operator and the reason; the client's retry is answered
   * `403 approval-rejected` with the reason. Refused after the call's window.
   */
  reject(req: DecideCmd): Promise<Approval>;
}

/** The typed operations over a host's `call`. */
export function opsClient(call: Call): Ops {
  return {
    stats: (req: StatsRequest) => call("stats", req, null) as Promise<Stats>,
    entries: (req: EntriesRequest) => call("entries", req, null) as Promise<EntryPage>,
    show: (req: EntryRef) => call("show", req, null) as Promise<EntryView>,
    log: (req: LogRequest) => call("log", req, null) as Promise<EventPage>,
    incidents: (req: IncidentsRequest) => call("incidents", req, null) as Promise<Array<Incident>>,
    review_incident: (req: ReviewCmd) => call("review_incident", req, null) as Promise<Review>,
    reopen_incident: (req: ReopenCmd) => call("reopen_incident", req, null) as Promise<Review>,
    preview_resolve: (req: ResolvePreviewRequest) => call("preview_resolve", req, null) as Promise<Preview>,
    resolve: (req: ResolveCmd) => call("resolve", req, null) as Promise<EntrySummary>,
    replay: (req: ActionCmd) => call("replay", req, null) as Promise<ReplayReport>,
    reconcile: (req: ActionCmd) => call("reconcile", req, null) as Promise<ReconcileReport>,
    preview_bulk: (req: BulkPreviewRequest) => call("preview_bulk", req, null) as Promise<Preview>,
    bulk: (req: BulkCmd, job: string) => call("bulk", req, job) as Promise<BulkReport | null>,
    preview_purge: (req: PurgeTarget) => call("preview_purge", req, null) as Promise<Preview>,
    purge: (req: PurgeCmd, job: string) => call("purge", req, job) as Promise<PurgeReport | null>,
    export: (req: ExportCmd, job: string) => call("export", req, job) as Promise<Manifest | null | null>,
    export_entries: (req: ExportCmd, job: string) => call("export_entries", req, job) as Promise<EntriesManifest | null | null>,
    start_export: (req: StartExport) => call("start_export", req, null) as Promise<ExportJob>,
    export_jobs: (req: NoArgs) => call("export_jobs", req, null) as Promise<Array<ExportJob>>,
    export_job: (req: ExportRef) => call("export_job", req, null) as Promise<ExportJob>,
    cancel_export: (req: ExportRef) => call("cancel_export", req, null) as Promise<null>,
    verify_ledger: (req: NoArgs, job: string) => call("verify_ledger", req, job) as Promise<VerifyReport | null>,
    head: (req: NoArgs) => call("head", req, null) as Promise<ChainHead | null>,
    prove: (req: EventRef) => call("prove", req, null) as Promise<EventProof>,
    prove_consistency: (req: CheckpointArg) => call("prove_consistency", req, null) as Promise<TreeExtension>,
    verify_against: (req: KeyedPathArg, job: string) => call("verify_against", req, job) as Promise<AgainstReport | null>,
    verify_against_manifest: (req: Manifest, job: string) => call("verify_against_manifest", req, job) as Promise<AgainstReport | null>,
    verify_export: (req: PathArg, job: string) => call("verify_export", req, job) as Promise<ExportVerifyReport | null>,
    retention_status: (req: NoArgs) => call("retention_status", req, null) as Promise<RetentionStatus>,
    archive_segments: (req: PathArg) => call("archive_segments", req, null) as Promise<Array<SegmentCheck>>,
    verify_archive: (req: KeyedPathArg, job: string) => call("verify_archive", req, job) as Promise<ArchiveVerifyReport | null>,
    archived: (req: NoArgs) => call("archived", req, null) as Promise<Array<SegmentCheck>>,
    verify_history: (req: NoArgs, job: string) => call("verify_history", req, job) as Promise<ArchiveVerifyReport | null>,
    archive: (req: ArchiveCmd, job: string) => call("archive", req, job) as Promise<ArchiveReport | null>,
    run_retention: (req: NoArgs, job: string) => call("run_retention", req, job) as Promise<RetentionReport | null>,
    approvals: (req: ApprovalsRequest) => call("approvals", req, null) as Promise<Array<HeldCall>>,
    approve: (req: DecideCmd) => call("approve", req, null) as Promise<Approval>,
    reject: (req: DecideCmd) => call("reject", req, null) as Promise<Approval>,
  };
}
