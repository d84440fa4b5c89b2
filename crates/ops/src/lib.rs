//! The operations API: the one way the CLI, the admin HTTP API and the console read and change the
//! ledger. Every request and answer is a plain serde type; every mutation checks its input first
//! (nothing is written on bad input), needs an operator name and a reason, previews what it will
//! touch, and is logged by the ledger with both.

// Every host (the CLI, the admin API, the console) is written against this API: it says what
// each item does.
#![warn(missing_docs)]

mod approvals;
mod audit;
mod bulk;
pub mod commands;
mod demo;
pub mod dispatch;
mod error;
pub mod jobs;
pub mod ledger;
pub mod op;
mod proofs;
mod purge;
mod reads;
mod resolve;
mod retention;
mod time;
mod upstream;

use std::sync::Arc;

use idemgate_ledger::archive::Place;
use idemgate_ledger::checkpoint::Signer;
use idemgate_ledger::{Actor, ChainHasher, Millis, OpenOptions, Page, Storage};
use serde::{Deserialize, Serialize};

pub use approvals::{ApprovalsRequest, DecideCmd, Decision, HeldCall};
pub use audit::{copy_ledger, verify_export_extends, verify_export_file, AgainstReport, ExportCmd};
pub use bulk::{
    BulkCmd, BulkFailure, BulkKind, BulkReport, BulkTarget, MAX_BULK, MAX_BULK_FAILURES,
};
pub use demo::{seed as seed_demo, DemoOptions, DemoReport};
pub use error::{Code, ErrorBody, OpsError};
pub use proofs::{
    verify_extension_files, verify_proof_file, EventProof, ExtensionReport, ProofReport,
    TreeExtension, WitnessRequest,
};
pub use purge::{PurgeCmd, PurgeReport, PurgeTarget, PURGE_CHUNK};
pub use reads::{
    event_kind, request_diff, ActionStanding, EntryPage, EntryView, EventPage, FieldDiff, ToolCall,
};
pub use resolve::{check_response, ResolveAs, ResolveCmd, ReviewCmd};
pub use retention::{
    place as archive_place, verify_archive_files, ArchiveCmd, RetentionPolicy, RetentionReport,
    RetentionRun, RetentionStatus,
};
pub use time::{parse_time, BadTime};
pub use upstream::{ActionCmd, ReconcileReport, ReplayReport};

/// The result of an operation.
pub type OpsResult<T> = std::result::Result<T, OpsError>;

/// How long an operator-resolved entry is replayed (when no route config says otherwise).
pub const DEFAULT_RESOLUTION_TTL_MS: i64 = 24 * 3_600_000;
/// The most entries or events one page holds.
pub const MAX_PAGE: usize = 10_000;
/// The most incidents one call returns.
pub const MAX_INCIDENTS: usize = 1_000;
/// The longest hourly series `stats` gives: 90 days.
pub const MAX_HOURS: u32 = 24 * 90;

/// The operations, over one ledger.
#[derive(Debug, Clone)]
pub struct Ops {
    store: Arc<dyn Storage>,
    hasher: ChainHasher,
    /// Signs checkpoints of the chain (exports, archives, the server's interval), when configured.
    signer: Option<Arc<Signer>>,
    /// The host's `[retention]` policy, when it has one: what `run_retention` applies, and the
    /// archive it writes, which a client that may not name the host's paths (the admin API)
    /// lists and verifies.
    retention: Option<RetentionPolicy>,
    /// An archive named by the caller (the CLI's `--archive`: a directory or `s3://…`), read
    /// where the retention policy's would be.
    archive: Option<String>,
    /// The export jobs of the host that runs them (the server): a client with no file system
    /// there starts one and downloads its file.
    exports: Option<Arc<jobs::exports::Exports>>,
}

/// What an action will touch, shown before it runs.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    /// The action it previews.
    pub action: String,
    /// How many entries it will touch.
    pub count: usize,
    /// Their ids.
    pub ids: Vec<i64>,
    /// Their keys, in the order of `ids`.
    pub keys: Vec<String>,
    /// Some touched entry is on a `destructive` route: the action needs `confirm_destructive`.
    pub destructive: bool,
    /// Entries named but not touched, and why.
    pub skipped: Vec<(i64, String)>,
}

/// Which ledger a client has open, or why none is.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerInfo {
    /// The open ledger (a PostgreSQL URL without its password), if one is open.
    pub location: Option<String>,
    /// Why none is, when none is.
    pub error: Option<ErrorBody>,
}

/// Progress of a long operation (export, verify, bulk purge), identified by the client's job id.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProgress {
    /// The client's id of the job.
    pub job: String,
    /// How much is done (entries, events), as the job counts.
    pub done: u64,
    /// How much there is, when known.
    pub total: Option<u64>,
}

/// Checks an operator name and a reason (both required, trimmed, bounded) — the one rule every
/// door (CLI, admin API, console) applies before any operator action touches a ledger.
pub fn validate_actor(operator: &str, reason: &str) -> OpsResult<Actor> {
    let operator = operator.trim();
    let reason = reason.trim();
    if operator.is_empty() {
        return Err(OpsError::MissingOperator);
    }
    if reason.is_empty() {
        return Err(OpsError::MissingReason);
    }
    if operator.chars().count() > 200 {
        return Err(OpsError::invalid("operator", "at most 200 characters"));
    }
    if reason.chars().count() > 4000 {
        return Err(OpsError::invalid("reason", "at most 4000 characters"));
    }
    Ok(Actor {
        operator: operator.to_owned(),
        reason: reason.to_owned(),
    })
}

/// The operator the desktop console records: the name typed, and beside it the account the
/// console runs as (what the typed name cannot vouch for, the system has checked). An empty name
/// stays empty, for [`validate_actor`] to refuse.
pub fn desktop_operator(typed: &str, os_user: &str) -> String {
    let typed = typed.trim();
    if typed.is_empty() || os_user.is_empty() {
        return typed.to_owned();
    }
    format!("{typed}{}{os_user})", idemgate_ledger::OS_USER_MARK)
}

/// The account this process runs as: `$USER` or `$LOGNAME` when set (a desktop session sets
/// them), else the name `/etc/passwd` gives the process's user id, else `uid N`.
pub fn os_user() -> String {
    if let Some(u) = ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
    {
        return u;
    }
    let uid = rustix::process::getuid().as_raw();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
            })
        })
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// A time range, `since` before `until` when both are given (an empty range is a mistake, not a
/// question with no answer).
pub fn check_range(since: Option<Millis>, until: Option<Millis>) -> OpsResult<()> {
    match (since, until) {
        (Some(s), Some(u)) if s >= u => Err(OpsError::invalid("since", "must be before until")),
        _ => Ok(()),
    }
}

/// Refuses filters that name nothing: no route, key, tool, operator or subject is called "", so
/// such a filter would match nothing where leaving it out matches everything (a shell variable
/// left unset, say). The empty scope is a scope: the one callers without a scope header share.
fn check_named(filters: &[(&str, Option<&str>)]) -> OpsResult<()> {
    for (field, value) in filters {
        let blank = |s: &str| s.trim().is_empty();
        let empty = match (*field, value) {
            (_, None) => false,
            ("subject", Some(s)) => s
                .split_once('=')
                .map_or(blank(s), |(n, v)| blank(n) || blank(v)),
            (_, Some(s)) => blank(s),
        };
        if empty {
            return Err(OpsError::invalid(
                field,
                "names nothing, so it would match nothing: leave it out to match every one",
            ));
        }
    }
    Ok(())
}

/// A page of at most `limit` rows. A limit of 0, or over `max`, is refused rather than quietly
/// turned into another one: a caller that asked for 0 rows and got 1, or for 50,000 and got 10,000,
/// would page wrongly.
fn page(before: Option<i64>, limit: usize, max: usize) -> OpsResult<Page> {
    if !(1..=max).contains(&limit) {
        return Err(OpsError::invalid(
            "limit",
            &format!("{limit} is not between 1 and {max}"),
        ));
    }
    Ok(Page::newest(before, limit))
}

impl Ops {
    /// The operations over an open ledger and its chain hasher.
    pub fn new(store: Arc<dyn Storage>, hasher: ChainHasher) -> Ops {
        Ops {
            store,
            hasher,
            signer: None,
            retention: None,
            archive: None,
            exports: None,
        }
    }

    /// These operations, running export jobs in `exports`.
    pub fn with_exports(mut self, exports: Arc<jobs::exports::Exports>) -> Ops {
        self.exports = Some(exports);
        self
    }

    /// The host's export jobs; refused where the host runs none (they are the server's).
    pub fn exports(&self) -> OpsResult<&Arc<jobs::exports::Exports>> {
        self.exports.as_ref().ok_or_else(|| {
            OpsError::invalid(
                "command",
                "export jobs run in idemgate serve: start one through its admin API",
            )
        })
    }

    /// These operations as `cfg` configures them: its signing key and its retention policy.
    pub fn configured_by(mut self, cfg: &idemgate_config::Config) -> Ops {
        self.retention = cfg.retention.as_ref().map(RetentionPolicy::from_config);
        self.with_signer(cfg.signing.as_ref().map(|s| s.signer.clone()))
    }

    /// The archive the caller named, else the one the host's retention policy writes.
    fn archive_place(&self) -> OpsResult<Option<Place>> {
        let named = self.archive.as_deref().or_else(|| {
            self.retention
                .as_ref()
                .and_then(|r| r.archive_dir.as_deref())
        });
        Ok(named.map(Place::parse).transpose()?)
    }

    /// These operations, reading archived events from the archive `place` names (a directory
    /// or `s3://bucket/prefix`).
    pub fn with_archive(mut self, place: Option<String>) -> Ops {
        self.archive = place;
        self
    }

    /// These operations, signing checkpoints with `signer`.
    pub fn with_signer(mut self, signer: Option<Arc<Signer>>) -> Ops {
        self.signer = signer;
        self
    }

    /// Whether checkpoints are signed.
    pub fn signs(&self) -> bool {
        self.signer.is_some()
    }

    /// The log's signing key, which `what` needs: refused as bad input when none is configured.
    pub(crate) fn signing_key(&self, what: &str) -> OpsResult<&Signer> {
        self.signer.as_deref().ok_or_else(|| {
            OpsError::invalid(
                "signing_key_file",
                &format!(
                    "{what} needs the log's signing key, and none is configured \
                     (--signing-key, IDEMGATE_SIGNING_KEY_FILE, or signing_key_file in [server])"
                ),
            )
        })
    }

    /// Opens an existing ledger (never creates one), with the chain key from the environment.
    pub fn open_existing(location: &str) -> OpsResult<Ops> {
        let opts = OpenOptions::existing()?;
        let hasher = opts.hasher.clone();
        Ok(Ops::new(idemgate_ledger::open(location, opts)?, hasher))
    }

    /// Opens or creates a ledger.
    pub fn open_or_create(location: &str) -> OpsResult<Ops> {
        let opts = OpenOptions::create()?;
        let hasher = opts.hasher.clone();
        Ok(Ops::new(idemgate_ledger::open(location, opts)?, hasher))
    }

    /// Builds the ledger's read aids (the log search's index) on a thread of its own, so the
    /// console's first search is as fast as the next; errors only cost that speed.
    pub fn warm_in_background(&self) {
        let store = self.store.clone();
        let _ = std::thread::Builder::new()
            .name("idemgate-warm".into())
            .spawn(move || {
                if let Err(e) = store.warm() {
                    tracing::warn!(error = %e, "could not build the search index");
                }
            });
    }

    /// The ledger itself, for the hosts that serve it.
    pub fn store(&self) -> &Arc<dyn Storage> {
        &self.store
    }

    /// Seeds this (empty) ledger with the demo's realistic history.
    pub fn seed_demo(&self, options: DemoOptions) -> OpsResult<DemoReport> {
        demo::seed(self.store.as_ref(), options)
    }

    /// Where the ledger is (a PostgreSQL URL without its password).
    pub fn location(&self) -> String {
        self.store.location()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate_ledger::{EntryFilter, EventFilter};

    #[test]
    fn a_filter_that_names_nothing_is_refused_but_the_empty_scope_is_a_scope() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        let claim = idemgate_ledger::testing::charge("k", idemgate_ledger::now_millis());
        ops.store().claim(claim).wait().expect("claim");
        let entries = |f| ops.entries_in_order(&f, Page::newest(None, 10));
        let named = |field: &str, value: &str| {
            let mut f = EntryFilter::default();
            let slot = match field {
                "route" => &mut f.route,
                "key" => &mut f.key,
                "subject" => &mut f.subject,
                "search" => &mut f.search,
                _ => &mut f.scope,
            };
            *slot = Some(value.to_owned());
            f
        };
        for (field, value) in [
            ("route", ""),
            ("key", " "),
            ("subject", "customer="),
            ("search", ""),
        ] {
            let e = entries(named(field, value)).expect_err(field);
            assert_eq!(e.code(), "invalid-argument");
            let why = e.to_string();
            assert!(
                why.contains(field) && why.contains("names nothing"),
                "{why}"
            );
        }
        let unscoped = entries(named("scope", "")).expect("the empty scope");
        assert!(unscoped.entries.is_empty());
        assert_eq!(
            entries(EntryFilter::default()).expect("all").entries.len(),
            1
        );
        let by = |operator: &str| EventFilter {
            operator: Some(operator.to_owned()),
            ..EventFilter::default()
        };
        let e = ops.log(&by(""), None, 10).expect_err("operator");
        assert!(e.to_string().contains("operator"), "{e}");
        assert!(ops.log(&by("o"), None, 10).expect("log").events.is_empty());
    }

    #[test]
    fn the_desktop_records_the_os_user_beside_the_name_typed() {
        assert_eq!(desktop_operator(" alice ", "ada"), "alice (OS user ada)");
        assert!(!os_user().is_empty());
        assert_eq!(desktop_operator("  ", "ada"), "");
        assert_eq!(desktop_operator("alice", ""), "alice");
    }

    #[test]
    fn actor_limits_count_characters_after_trimming() {
        let ok = validate_actor(&format!("  {}  ", "é".repeat(200)), &"ü".repeat(4000))
            .expect("200 and 4000 two-byte characters are within the limits");
        assert_eq!(ok.operator.chars().count(), 200);
        for (op, why, field) in [
            ("é".repeat(201), "x".to_owned(), "operator"),
            ("o".to_owned(), "ü".repeat(4001), "reason"),
        ] {
            match validate_actor(&op, &why) {
                Err(OpsError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: expected invalid, got {other:?}"),
            }
        }
        assert!(matches!(
            validate_actor(" \t\n", "r"),
            Err(OpsError::MissingOperator)
        ));
        assert!(matches!(
            validate_actor("o", "\u{3000}"),
            Err(OpsError::MissingReason)
        ));
    }
}
