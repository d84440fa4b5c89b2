//! The operations API: the one way the CLI, the admin HTTP API and the console read and change the
//! ledger. Every request and answer is a plain serde type; every mutation checks its input first
//! (nothing is written on bad input), needs an operator name and a reason, previews what it will
//! touch, and is logged by the ledger with both.

mod bulk;
mod demo;
mod error;
mod time;
mod upstream;

use std::path::Path;
use std::sync::Arc;

use idemgate_ledger::copy::CopyReport;
use idemgate_ledger::export::{self, ExportVerifyReport, Format, Manifest};
use idemgate_ledger::*;
use serde::{Deserialize, Serialize};

pub use bulk::{
    BulkCmd, BulkFailure, BulkKind, BulkReport, BulkTarget, MAX_BULK, MAX_BULK_FAILURES,
};
pub use demo::{seed as seed_demo, DemoOptions, DemoReport};
pub use error::{ErrorBody, OpsError};
pub use time::{parse_time, BadTime};
pub use upstream::{ActionCmd, ReconcileReport, ReplayReport};

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
}

/// A page of entries; pass `next_before` back as `before` for the next one.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryPage {
    pub entries: Vec<EntrySummary>,
    pub next_before: Option<i64>,
}

/// A page of events, newest first.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    pub events: Vec<Event>,
    pub next_before: Option<i64>,
}

/// One entry with its whole timeline.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryView {
    pub entry: EntryDetail,
    pub timeline: Vec<Event>,
    /// For each of `entry.collision_requests`, the fields where it differs from the stored request.
    pub collision_diffs: Vec<Vec<FieldDiff>>,
}

/// One field that differs between two requests: `field` is `method`, `path`, `header:NAME` or a
/// JSON pointer into the body (`/amount`); values are canonical JSON (or text), absent when missing.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDiff {
    pub field: String,
    pub stored: Option<String>,
    pub rejected: Option<String>,
}

fn flatten(
    v: &serde_json::Value,
    at: String,
    out: &mut std::collections::BTreeMap<String, String>,
) {
    match v {
        serde_json::Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                flatten(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        serde_json::Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                flatten(x, format!("{at}/{i}"), out);
            }
        }
        leaf => {
            out.insert(
                if at.is_empty() { "/".into() } else { at },
                canon::canonical_string(leaf),
            );
        }
    }
}

fn fields(r: &RequestRecord) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    out.insert("method".into(), r.method.clone());
    out.insert("path".into(), r.path.clone());
    for (n, v) in &r.headers {
        out.insert(format!("header:{n}"), v.clone());
    }
    match serde_json::from_slice::<serde_json::Value>(&r.body) {
        Ok(v) => flatten(&v, String::new(), &mut out),
        Err(_) if r.body.is_empty() => {}
        Err(_) => {
            out.insert("body".into(), String::from_utf8_lossy(&r.body).into_owned());
        }
    }
    out
}

/// The field-level differences between a stored request and a rejected one (key reuse), ignoring
/// headers that differ on every retry by nature.
pub fn request_diff(stored: &RequestRecord, rejected: &RequestRecord) -> Vec<FieldDiff> {
    let (a, b) = (fields(stored), fields(rejected));
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| {
            !matches!(
                n.as_str(),
                "header:x-request-id" | "header:traceparent" | "header:user-agent"
            )
        })
        .filter(|n| a.get(*n) != b.get(*n))
        .map(|n| FieldDiff {
            field: n.clone(),
            stored: a.get(n).cloned(),
            rejected: b.get(n).cloned(),
        })
        .collect()
}

/// What an action will touch, shown before it runs.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    pub action: String,
    pub count: usize,
    pub ids: Vec<i64>,
    pub keys: Vec<String>,
    /// Some touched entry is on a `destructive` route: the action needs `confirm_destructive`.
    pub destructive: bool,
    /// Entries named but not touched, and why.
    pub skipped: Vec<(i64, String)>,
}

/// How an operator resolves an entry.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolveAs {
    Completed,
    Failed,
    Released,
}

impl ResolveAs {
    pub fn parse(s: &str) -> Option<ResolveAs> {
        match s {
            "completed" => Some(ResolveAs::Completed),
            "failed" => Some(ResolveAs::Failed),
            "released" => Some(ResolveAs::Released),
            _ => None,
        }
    }
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveCmd {
    pub entry_id: i64,
    #[serde(rename = "as")]
    pub as_: ResolveAs,
    /// The response retries will get (completed: this or `external_ref` is required).
    pub response: Option<ResponseRecord>,
    /// A reference to the effect in the upstream system (e.g. the charge id found there).
    pub external_ref: Option<String>,
    pub operator: String,
    pub reason: String,
    #[serde(default)]
    pub confirm_destructive: bool,
}

impl ResolveCmd {
    /// Checks everything the command says without the ledger: the actor, and the response
    /// retries will get ([`check_response`]). What [`Ops::resolve`] records.
    pub fn check(&self) -> OpsResult<(Actor, Resolution)> {
        let actor = validate_actor(&self.operator, &self.reason)?;
        let external_ref = self
            .external_ref
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        if external_ref.is_some_and(|x| x.chars().count() > 500) {
            return Err(OpsError::invalid("external_ref", "at most 500 characters"));
        }
        let response = self
            .response
            .as_ref()
            .map(|r| check_response(self.as_, r))
            .transpose()?;
        let resolution = match self.as_ {
            ResolveAs::Completed => {
                let response = match (response, external_ref) {
                    (Some(r), _) => r,
                    (None, Some(x)) => ResponseRecord {
                        status: 200,
                        headers: vec![("content-type".into(), "application/json".into())],
                        body: serde_json::to_vec(&serde_json::json!({
                            "idemgate": "resolved-by-operator",
                            "external_ref": x,
                        }))
                        .unwrap_or_default(),
                    },
                    (None, None) => {
                        return Err(OpsError::invalid(
                            "response",
                            "resolving as completed needs the response to replay or an external reference",
                        ))
                    }
                };
                Resolution::Completed {
                    response,
                    external_ref: external_ref.map(str::to_owned),
                }
            }
            ResolveAs::Failed => Resolution::Failed { response },
            ResolveAs::Released => {
                if response.is_some() {
                    return Err(OpsError::invalid(
                        "response",
                        "a released entry has no response",
                    ));
                }
                Resolution::Released
            }
        };
        Ok((actor, resolution))
    }
}

/// An operator's response, as retries of the entry will get it, checked: at most
/// [`MAX_RESPONSE_BODY`], a final status (a
/// failed entry's an error, 400-599, so that no retry reads it as a success), no body where the
/// status allows none, and headers that are valid HTTP, not ones the proxy sets when it answers
/// ([`ANSWER_HEADERS`]) and not credentials (never stored). Without a `content-type`, a body
/// gets `application/json` when it is JSON and `text/plain; charset=utf-8` when not.
pub fn check_response(as_: ResolveAs, r: &ResponseRecord) -> OpsResult<ResponseRecord> {
    let (statuses, what) = match as_ {
        ResolveAs::Failed => (400..=599, "a failed entry's response is an error: 400-599"),
        _ => (200..=599, "must be a final HTTP status, 200-599"),
    };
    if !statuses.contains(&r.status) {
        return Err(OpsError::invalid("response.status", what));
    }
    if r.body.len() > MAX_RESPONSE_BODY {
        return Err(OpsError::invalid(
            "response.body",
            &format!(
                "is more than {} MiB, the most a stored response holds",
                MAX_RESPONSE_BODY >> 20
            ),
        ));
    }
    if matches!(r.status, 204 | 205 | 304) && !r.body.is_empty() {
        return Err(OpsError::invalid(
            "response.body",
            &format!("a {} response has no body", r.status),
        ));
    }
    let mut headers = Vec::with_capacity(r.headers.len() + 1);
    for (name, value) in &r.headers {
        let n = http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            OpsError::invalid(
                "response.headers",
                &format!("{name:?} is not a header name"),
            )
        })?;
        let n = n.as_str();
        if http::HeaderValue::from_str(value).is_err() {
            return Err(OpsError::invalid(
                "response.headers",
                &format!("the value of {n} is not a header value (visible ASCII)"),
            ));
        }
        if ANSWER_HEADERS.contains(&n) {
            return Err(OpsError::invalid(
                "response.headers",
                &format!("{n} is set by idemgate whenever it answers; leave it out"),
            ));
        }
        if is_secret_header(n) {
            return Err(OpsError::invalid(
                "response.headers",
                &format!("{n} carries a credential, which the ledger never stores; leave it out"),
            ));
        }
        headers.push((n.to_owned(), value.trim().to_owned()));
    }
    if !r.body.is_empty() && !headers.iter().any(|(n, _)| n == "content-type") {
        let ct = if serde_json::from_slice::<serde::de::IgnoredAny>(&r.body).is_ok() {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        headers.push(("content-type".into(), ct.into()));
    }
    Ok(ResponseRecord {
        status: r.status,
        headers,
        body: r.body.clone(),
    })
}

/// What a purge acts on.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "target", rename_all = "lowercase")]
pub enum PurgeTarget {
    /// These entries (each must exist and not be pending).
    Ids { ids: Vec<i64> },
    /// Every expired entry matching the filter.
    Expired { filter: EntryFilter },
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PurgeCmd {
    #[serde(flatten)]
    pub target: PurgeTarget,
    pub operator: String,
    pub reason: String,
    #[serde(default)]
    pub confirm_destructive: bool,
}

/// How many entries one purge transaction takes: short enough to leave the writer to the proxy
/// between chunks, and where a purge reports progress and can stop.
pub const PURGE_CHUNK: usize = 1000;

/// A purge read from JSON refuses a member it does not know, as every command does, rather
/// than purge without it: `"dry_run": true` (the CLI's flag) or a misspelt filter member
/// (`"rout"`) would otherwise widen or run the purge. serde cannot refuse unknown members of a
/// flattened or internally tagged type, so both read through one flat form.
mod purge_wire {
    use serde::de::{Deserializer, Error};
    use serde::Deserialize;

    use super::{EntryFilter, PurgeCmd, PurgeTarget};

    #[derive(Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Ids,
        Expired,
    }

    impl Kind {
        fn target<E: Error>(
            self,
            ids: Option<Vec<i64>>,
            filter: Option<EntryFilter>,
        ) -> Result<PurgeTarget, E> {
            match (self, ids, filter) {
                (Kind::Ids, Some(ids), None) => Ok(PurgeTarget::Ids { ids }),
                (Kind::Expired, None, Some(filter)) => Ok(PurgeTarget::Expired { filter }),
                (Kind::Ids, _, Some(_)) => Err(E::custom(
                    "`filter` goes with target \"expired\"; target \"ids\" takes `ids`",
                )),
                (Kind::Expired, Some(_), _) => Err(E::custom(
                    "`ids` goes with target \"ids\"; target \"expired\" takes `filter`",
                )),
                (Kind::Ids, None, None) => Err(E::missing_field("ids")),
                (Kind::Expired, None, None) => Err(E::missing_field("filter")),
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Target {
        target: Kind,
        ids: Option<Vec<i64>>,
        filter: Option<EntryFilter>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cmd {
        target: Kind,
        ids: Option<Vec<i64>>,
        filter: Option<EntryFilter>,
        operator: String,
        reason: String,
        #[serde(default)]
        confirm_destructive: bool,
    }

    impl<'de> Deserialize<'de> for PurgeTarget {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let t = Target::deserialize(d)?;
            t.target.target(t.ids, t.filter)
        }
    }

    impl<'de> Deserialize<'de> for PurgeCmd {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let c = Cmd::deserialize(d)?;
            Ok(PurgeCmd {
                target: c.target.target(c.ids, c.filter)?,
                operator: c.operator,
                reason: c.reason,
                confirm_destructive: c.confirm_destructive,
            })
        }
    }
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PurgeReport {
    pub purged: Vec<i64>,
    /// Stopped before the end (the console's Stop, an admin client that went away): the entries
    /// in `purged` are purged, and the rest are as they were.
    #[serde(default)]
    pub cancelled: bool,
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportCmd {
    pub format: Format,
    #[serde(default)]
    pub range: EventRange,
    pub path: String,
    /// Replace a file already at `path` (and its manifest). Without it, an existing file is
    /// refused: an earlier export is evidence, not scratch.
    #[serde(default)]
    pub overwrite: bool,
}

/// Which ledger a client has open, or why none is.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerInfo {
    pub location: Option<String>,
    pub error: Option<ErrorBody>,
}

/// Progress of a long operation (export, verify, bulk purge), identified by the client's job id.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProgress {
    pub job: String,
    pub done: u64,
    pub total: Option<u64>,
}

/// `verify --ledger PATH --against MANIFEST`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgainstReport {
    pub ok: bool,
    pub chain: VerifyReport,
    /// The manifest's heads, each with whether the ledger still holds it.
    pub heads: Vec<(ChainHead, bool)>,
    pub problems: Vec<String>,
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

/// A time range, `since` before `until` when both are given (an empty range is a mistake, not a
/// question with no answer).
pub fn check_range(since: Option<Millis>, until: Option<Millis>) -> OpsResult<()> {
    match (since, until) {
        (Some(s), Some(u)) if s >= u => Err(OpsError::invalid("since", "must be before until")),
        _ => Ok(()),
    }
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
    Ok(Page { before, limit })
}

impl Ops {
    pub fn new(store: Arc<dyn Storage>, hasher: ChainHasher) -> Ops {
        Ops { store, hasher }
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

    pub fn store(&self) -> &Arc<dyn Storage> {
        &self.store
    }

    pub fn location(&self) -> String {
        self.store.location()
    }

    // ---- reads -------------------------------------------------------------------------------

    pub fn entries(
        &self,
        filter: &EntryFilter,
        before: Option<i64>,
        limit: usize,
    ) -> OpsResult<EntryPage> {
        let entries = self
            .store
            .entries(filter, page(before, limit, MAX_PAGE)?, now_millis())?;
        let next_before = (entries.len() == limit)
            .then(|| entries.last().map(|e| e.id))
            .flatten();
        Ok(EntryPage {
            entries,
            next_before,
        })
    }

    /// Every entry matching `filter` (up to `limit` when given), page by page through `f`.
    pub fn each_entry(
        &self,
        filter: &EntryFilter,
        limit: Option<usize>,
        f: &mut dyn FnMut(&EntrySummary) -> OpsResult<()>,
    ) -> OpsResult<usize> {
        let mut before = None;
        let mut n = 0usize;
        loop {
            let want = limit.map_or(1000, |l| (l - n).min(1000));
            if want == 0 {
                return Ok(n);
            }
            let p = self.entries(filter, before, want)?;
            for e in &p.entries {
                f(e)?;
            }
            n += p.entries.len();
            match p.next_before {
                Some(b) => before = Some(b),
                None => return Ok(n),
            }
        }
    }

    pub fn show(&self, id: i64) -> OpsResult<EntryView> {
        let entry = self.store.entry(id, now_millis())?;
        let mut timeline = Vec::new();
        let mut before = None;
        loop {
            let evs = self.store.events(
                &EventFilter {
                    entry_id: Some(id),
                    ..Default::default()
                },
                Page {
                    before,
                    limit: 1000,
                },
            )?;
            let done = evs.len() < 1000;
            before = evs.last().map(|e| e.seq);
            timeline.extend(evs);
            if done {
                break;
            }
        }
        timeline.reverse();
        let collision_diffs = match &entry.request {
            Some(stored) => entry
                .collision_requests
                .iter()
                .map(|c| request_diff(stored, &c.request))
                .collect(),
            None => entry
                .collision_requests
                .iter()
                .map(|_| Vec::new())
                .collect(),
        };
        Ok(EntryView {
            entry,
            timeline,
            collision_diffs,
        })
    }

    pub fn log(
        &self,
        filter: &EventFilter,
        before: Option<i64>,
        limit: usize,
    ) -> OpsResult<EventPage> {
        if let Some(k) = &filter.kind {
            if EventKind::parse(k).is_none() {
                let kinds: Vec<_> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                return Err(OpsError::invalid(
                    "kind",
                    &format!("{k:?} is not an event kind: one of {}", kinds.join(", ")),
                ));
            }
        }
        check_range(filter.since, filter.until)?;
        let events = self.store.events(filter, page(before, limit, MAX_PAGE)?)?;
        let next_before = (events.len() == limit)
            .then(|| events.last().map(|e| e.seq))
            .flatten();
        Ok(EventPage {
            events,
            next_before,
        })
    }

    pub fn incidents(&self, before: Option<i64>, limit: usize) -> OpsResult<Vec<Incident>> {
        Ok(self
            .store
            .incidents(page(before, limit, MAX_INCIDENTS)?, now_millis())?)
    }

    /// The counts, and an hourly series of the last `hours` (0: none, at most [`MAX_HOURS`]).
    pub fn stats(&self, hours: u32) -> OpsResult<Stats> {
        if hours > MAX_HOURS {
            return Err(OpsError::invalid(
                "hours",
                &format!("{hours} is more than {MAX_HOURS} (90 days)"),
            ));
        }
        Ok(self.store.stats(now_millis(), hours)?)
    }

    // ---- actions -----------------------------------------------------------------------------

    /// What `resolve` would touch.
    pub fn preview_resolve(&self, id: i64) -> OpsResult<Preview> {
        let e = self.store.entry(id, now_millis())?.summary;
        let mut skipped = Vec::new();
        let resolvable = match e.state {
            State::Pending => e.stuck,
            State::Completed => false,
            State::Released | State::Failed => true,
        };
        if !resolvable {
            skipped.push((
                e.id,
                format!(
                    "entry is {}{}",
                    e.state,
                    if e.state == State::Pending {
                        " and in flight"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Ok(Preview {
            action: "resolve".into(),
            count: usize::from(resolvable),
            ids: if resolvable { vec![e.id] } else { vec![] },
            keys: if resolvable {
                vec![e.key.clone()]
            } else {
                vec![]
            },
            destructive: e.effect == Effect::Destructive,
            skipped,
        })
    }

    pub fn resolve(&self, cmd: &ResolveCmd) -> OpsResult<EntrySummary> {
        let (actor, resolution) = cmd.check()?;
        let preview = self.preview_resolve(cmd.entry_id)?;
        if let Some((_, why)) = preview.skipped.first() {
            return Err(OpsError::Conflict(format!(
                "entry {} cannot be resolved: {why}",
                cmd.entry_id
            )));
        }
        if preview.destructive && !cmd.confirm_destructive {
            return Err(OpsError::ConfirmationRequired(preview.keys));
        }
        Ok(self
            .store
            .resolve(ResolveRequest {
                entry_id: cmd.entry_id,
                resolution,
                actor,
                ttl_ms: DEFAULT_RESOLUTION_TTL_MS,
                at: now_millis(),
            })
            .wait()?)
    }

    /// What `purge` would touch.
    pub fn preview_purge(&self, target: &PurgeTarget) -> OpsResult<Preview> {
        let now = now_millis();
        let mut touched: Vec<EntrySummary> = Vec::new();
        let mut skipped = Vec::new();
        match target {
            PurgeTarget::Ids { ids } => {
                if ids.is_empty() {
                    return Err(OpsError::invalid("ids", "name at least one entry"));
                }
                let mut seen = std::collections::HashSet::with_capacity(ids.len());
                // An entry named twice is purged once.
                for &id in ids.iter().filter(|&&id| seen.insert(id)) {
                    let e = self.store.entry(id, now)?.summary;
                    if e.state == State::Pending {
                        skipped.push((id, "pending: resolve it first".to_owned()));
                    } else {
                        touched.push(e);
                    }
                }
            }
            PurgeTarget::Expired { filter } => {
                let f = EntryFilter {
                    expired: true,
                    ..filter.clone()
                };
                self.each_entry(&f, None, &mut |e| {
                    touched.push(e.clone());
                    Ok(())
                })?;
            }
        }
        Ok(Preview {
            action: "purge".into(),
            count: touched.len(),
            destructive: touched.iter().any(|e| e.effect == Effect::Destructive),
            ids: touched.iter().map(|e| e.id).collect(),
            keys: touched.into_iter().map(|e| e.key).collect(),
            skipped,
        })
    }

    /// Purges what `cmd` names, in chunks of [`PURGE_CHUNK`] entries, each atomic. `progress`
    /// hears the count purged after each chunk and may stop the purge there: what is purged stays
    /// purged (the log says so), and the report says it stopped.
    pub fn purge(&self, cmd: &PurgeCmd, progress: Progress<'_>) -> OpsResult<PurgeReport> {
        let actor = validate_actor(&cmd.operator, &cmd.reason)?;
        let preview = self.preview_purge(&cmd.target)?;
        if let Some((id, why)) = preview.skipped.first() {
            return Err(OpsError::Conflict(format!(
                "entry {id} cannot be purged: {why}"
            )));
        }
        if preview.destructive && !cmd.confirm_destructive {
            return Err(OpsError::ConfirmationRequired(preview.keys));
        }
        let only_expired = matches!(cmd.target, PurgeTarget::Expired { .. });
        let mut purged = Vec::with_capacity(preview.ids.len());
        // Chunks keep each transaction short; each chunk is atomic.
        let chunks = preview.ids.chunks(PURGE_CHUNK);
        let last = chunks.len().saturating_sub(1);
        for (i, chunk) in chunks.enumerate() {
            let done = self
                .store
                .purge(PurgeRequest {
                    ids: chunk.to_vec(),
                    only_expired,
                    actor: actor.clone(),
                    at: now_millis(),
                })
                .wait()?;
            purged.extend(done);
            if !progress(purged.len() as u64) && i < last {
                return Ok(PurgeReport {
                    purged,
                    cancelled: true,
                });
            }
        }
        Ok(PurgeReport {
            purged,
            cancelled: false,
        })
    }

    /// Marks lease and TTL expiries in the log (the proxy's sweeper calls this periodically).
    pub fn sweep(&self) -> OpsResult<SweepReport> {
        Ok(self.store.sweep(now_millis()).wait()?)
    }

    // ---- audit -------------------------------------------------------------------------------

    /// Exports a range of the log; `Ok(None)` when cancelled through `progress`.
    pub fn export(&self, cmd: &ExportCmd, progress: Progress<'_>) -> OpsResult<Option<Manifest>> {
        check_range(cmd.range.since, cmd.range.until)?;
        let path = Path::new(&cmd.path);
        if cmd.path.trim().is_empty() {
            return Err(OpsError::invalid("path", "name an output file"));
        }
        // An export is a file with its manifest beside it: neither goes to standard output.
        if cmd.path == "-" {
            return Err(OpsError::invalid(
                "path",
                "an export is a file with its manifest beside it: name a file, not -",
            ));
        }
        if path.is_dir() {
            return Err(OpsError::invalid(
                "path",
                &format!("{} is a directory: name a file in it", path.display()),
            ));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(OpsError::invalid(
                    "path",
                    &format!("directory {} does not exist", dir.display()),
                ));
            }
        }
        match export::export(
            self.store.as_ref(),
            cmd.format,
            cmd.range,
            path,
            cmd.overwrite,
            progress,
        ) {
            // There before it started (the file or its manifest), or made while it ran.
            Err(LedgerError::Io(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(OpsError::Conflict(format!(
                    "{} already exists: name another file, or replace it and its manifest (--overwrite; the console's \"Replace\")",
                    path.display()
                )))
            }
            r => Ok(r?),
        }
    }

    pub fn verify(&self, progress: Progress<'_>) -> OpsResult<VerifyReport> {
        Ok(self.store.verify(progress)?)
    }

    /// Verifies the chain and that the ledger still holds the heads a manifest recorded (a cut-off
    /// tail or a rewritten history shows as a missing head).
    pub fn verify_against(
        &self,
        manifest: &Path,
        progress: Progress<'_>,
    ) -> OpsResult<AgainstReport> {
        let raw = std::fs::read(manifest)
            .map_err(|e| OpsError::invalid("against", &format!("{}: {e}", manifest.display())))?;
        let m: Manifest = serde_json::from_slice(&raw).map_err(|e| {
            OpsError::invalid(
                "against",
                &format!("{}: not a manifest: {e}", manifest.display()),
            )
        })?;
        self.verify_against_manifest(&m, progress)
    }

    /// Recomputes the chain, and checks that the ledger still holds the heads manifest `m`
    /// recorded (the ledger's at export time, and the export's last event).
    pub fn verify_against_manifest(
        &self,
        m: &Manifest,
        progress: Progress<'_>,
    ) -> OpsResult<AgainstReport> {
        let chain = self.verify(progress)?;
        let mut problems = Vec::new();
        if let Some(seq) = chain.first_bad_seq {
            problems.push(format!(
                "seq {seq}: {}",
                chain.problem.clone().unwrap_or_default()
            ));
        }
        let mut heads = Vec::new();
        for h in [m.ledger_head.clone(), m.chain_head.clone()]
            .into_iter()
            .flatten()
        {
            if heads.iter().any(|(x, _): &(ChainHead, bool)| x == &h) {
                continue;
            }
            let held = self.store.contains(&h)?;
            if !held {
                problems.push(format!(
                    "the ledger no longer holds seq {} with hash {}",
                    h.seq, h.hash
                ));
            }
            heads.push((h, held));
        }
        Ok(AgainstReport {
            ok: chain.ok && heads.iter().all(|(_, h)| *h),
            chain,
            heads,
            problems,
        })
    }

    pub fn verify_export(
        &self,
        file: &Path,
        progress: Progress<'_>,
    ) -> OpsResult<ExportVerifyReport> {
        verify_export_file(file, &self.hasher, progress)
    }
}

/// Copies the ledger at `from` into a new, empty one at `to` (SQLite → PostgreSQL, or back), with
/// the chain key from the environment; see `idemgate_ledger::copy`.
pub fn copy_ledger(from: &str, to: &str, progress: Progress<'_>) -> OpsResult<CopyReport> {
    // The same file by another name (`./x.db`, a link) too: it was refused only as "not empty".
    let same_file = || {
        let canon = |p| std::fs::canonicalize(p).ok();
        !idemgate_ledger::is_postgres(from) && canon(from).is_some_and(|a| canon(to) == Some(a))
    };
    if from == to || same_file() {
        return Err(OpsError::invalid("to", "is the source ledger itself"));
    }
    let hasher = ChainHasher::from_env()?;
    Ok(idemgate_ledger::copy::copy(from, to, &hasher, progress)?)
}

/// Verifies an export without opening any ledger.
pub fn verify_export_file(
    file: &Path,
    hasher: &ChainHasher,
    progress: Progress<'_>,
) -> OpsResult<ExportVerifyReport> {
    Ok(export::verify_export(file, hasher, progress)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: &str) -> RequestRecord {
        RequestRecord {
            method: "POST".into(),
            path: "/v1/charges".into(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-request-id".into(), body.len().to_string()),
            ],
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_command_with_a_member_it_does_not_know_is_refused_not_run_without_it() {
        let expired = PurgeCmd {
            target: PurgeTarget::Expired {
                filter: EntryFilter {
                    expired: true,
                    route: Some("charges".into()),
                    ..EntryFilter::default()
                },
            },
            operator: "o".into(),
            reason: "r".into(),
            confirm_destructive: true,
        };
        let ids = PurgeCmd {
            target: PurgeTarget::Ids { ids: vec![1, 2] },
            ..expired.clone()
        };
        // What is written reads back as it was, flattened target and all.
        for cmd in [&expired, &ids] {
            let json = serde_json::to_value(cmd).expect("json");
            assert_eq!(
                &serde_json::from_value::<PurgeCmd>(json).expect("reads"),
                cmd
            );
            let target = serde_json::to_value(&cmd.target).expect("json");
            assert_eq!(
                serde_json::from_value::<PurgeTarget>(target).expect("reads"),
                cmd.target
            );
        }
        let purge = |v: serde_json::Value| serde_json::from_value::<PurgeCmd>(v).map(|_| ());
        let with = |mut v: serde_json::Value, k: &str, x: serde_json::Value| {
            v[k] = x;
            v
        };
        let base = serde_json::json!({"target": "ids", "ids": [1], "operator": "o", "reason": "r"});
        assert!(purge(base.clone()).is_ok());
        for (bad, why) in [
            (with(base.clone(), "dry_run", true.into()), "dry_run"),
            (
                with(base.clone(), "filter", serde_json::json!({})),
                "filter",
            ),
            (with(base.clone(), "target", "expired".into()), "ids"),
            (with(base.clone(), "target", "all".into()), "all"),
            (
                serde_json::json!({"target": "ids", "operator": "o", "reason": "r"}),
                "ids",
            ),
            (
                serde_json::json!({"target": "expired", "filter": {"rout": "charges"},
                                   "operator": "o", "reason": "r"}),
                "rout",
            ),
            (
                serde_json::json!({"target": "expired", "operator": "o", "reason": "r"}),
                "filter",
            ),
        ] {
            let e = purge(bad.clone()).expect_err(&bad.to_string()).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        for bad in [
            serde_json::json!({"target": "ids", "ids": [1], "dry_run": true}),
            serde_json::json!({"target": "expired", "filter": {"expired": true, "scopes": "a"}}),
        ] {
            assert!(
                serde_json::from_value::<PurgeTarget>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let resolve = serde_json::json!({"entry_id": 1, "as": "completed", "operator": "o",
            "reason": "r", "response": {"status": 200, "headers": [], "body": "x"}});
        assert!(serde_json::from_value::<ResolveCmd>(resolve.clone()).is_ok());
        let mut typo = resolve.clone();
        typo["response"]["content_type"] = "text/plain".into();
        assert!(serde_json::from_value::<ResolveCmd>(typo).is_err());
        assert!(
            serde_json::from_value::<ResolveCmd>(with(resolve, "dry_run", true.into())).is_err()
        );
        assert!(
            serde_json::from_value::<EventFilter>(serde_json::json!({"kinds": "claim"})).is_err()
        );
    }

    #[test]
    fn request_diff_names_changed_added_and_removed_fields() {
        let d = request_diff(
            &req(r#"{"amount":100,"customer":"cus_1","meta":{"order":7},"items":[1,2]}"#),
            &req(r#"{"customer":"cus_1","amount":999,"meta":{"order":7,"note":"x"},"items":[1]}"#),
        );
        let got: Vec<(&str, Option<&str>, Option<&str>)> = d
            .iter()
            .map(|f| (f.field.as_str(), f.stored.as_deref(), f.rejected.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("/amount", Some("100"), Some("999")),
                ("/items/1", Some("2"), None),
                ("/meta/note", None, Some("\"x\"")),
            ]
        );
        assert!(
            request_diff(&req(r#"{"a":1,"b":2}"#), &req(r#"{"b":2,"a":1}"#)).is_empty(),
            "key order is not a difference"
        );
        let raw = request_diff(&req("a=1"), &req("a=2"));
        assert_eq!(raw[0].field, "body");
    }

    fn resp(status: u16, headers: &[(&str, &str)], body: &str) -> ResponseRecord {
        ResponseRecord {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn an_operators_response_is_one_a_replay_can_send() {
        use ResolveAs::{Completed, Failed};
        let refused = [
            (Completed, resp(999, &[], "{}"), "response.status"),
            (Completed, resp(101, &[], ""), "response.status"),
            (Failed, resp(200, &[], "{}"), "response.status"),
            (Failed, resp(302, &[], ""), "response.status"),
            (Completed, resp(204, &[], "x"), "response.body"),
            (
                Completed,
                resp(200, &[("Content-Length", "2")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("transfer-encoding", "chunked")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("connection", "close")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("idempotent-replayed", "false")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("set-cookie", "s=1")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("bad name", "x")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("x-a", "line\nbreak")], "{}"),
                "response.headers",
            ),
        ];
        for (as_, r, field) in refused {
            match check_response(as_, &r) {
                Err(OpsError::Invalid { field: f, .. }) => assert_eq!(f, field, "{r:?}"),
                other => panic!("{r:?}: expected invalid {field}, got {other:?}"),
            }
        }
        let ct = |r: &ResponseRecord| {
            r.headers
                .iter()
                .filter(|(n, _)| n == "content-type")
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        };
        let json = check_response(
            Completed,
            &resp(201, &[("X-Charge", " ch_1 ")], r#"{"id":1}"#),
        )
        .expect("a JSON body");
        assert_eq!(json.headers[0], ("x-charge".into(), "ch_1".into()));
        assert_eq!(ct(&json), ["application/json"]);
        let text = check_response(Failed, &resp(402, &[], "card declined")).expect("text");
        assert_eq!(ct(&text), ["text/plain; charset=utf-8"]);
        let given = check_response(
            Completed,
            &resp(200, &[("Content-Type", "text/csv")], "a,b"),
        )
        .expect("a content type given");
        assert_eq!(ct(&given), ["text/csv"]);
        let empty = check_response(Completed, &resp(204, &[], "")).expect("no body");
        assert!(empty.headers.is_empty());
    }

    /// Another process can make the file while an export runs (the up-front check has passed by
    /// then): the export does not replace it, and leaves no partial file; told to, it replaces it.
    #[test]
    fn an_export_does_not_replace_a_file_made_while_it_ran() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        demo::seed(
            ops.store().as_ref(),
            demo::DemoOptions {
                events: 300,
                seed: 1,
            },
        )
        .expect("demo");
        let out = dir.path().join("audit.csv");
        let cmd = ExportCmd {
            format: Format::Csv,
            range: EventRange::default(),
            path: out.display().to_string(),
            overwrite: false,
        };
        let theirs = b"someone else's file";
        let e = ops
            .export(&cmd, &mut |_| {
                if !out.exists() {
                    std::fs::write(&out, theirs).expect("write");
                }
                true
            })
            .expect_err("made meanwhile");
        assert_eq!(e.code(), "conflict", "{e}");
        assert_eq!(std::fs::read(&out).expect("theirs"), theirs);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("l.db"))
            .collect();
        assert_eq!(names, ["audit.csv"], "no partial file, no manifest");

        let replace = ExportCmd {
            overwrite: true,
            ..cmd
        };
        let m = ops
            .export(&replace, &mut |_| true)
            .expect("export")
            .expect("done");
        assert_eq!(m.bytes, std::fs::metadata(&out).expect("file").len());
        assert!(export::manifest_path(&out).exists());
    }

    /// A purge goes in chunks, each atomic, and reports after each; told to stop, it stops between
    /// two: the chunks done stay purged, the rest stay as they were, and a second purge takes them.
    #[test]
    fn a_purge_reports_each_chunk_and_stops_between_two_when_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        let n = 2 * PURGE_CHUNK + 500;
        testing::expired_charges(ops.store().as_ref(), n);
        let expired = || {
            ops.preview_purge(&PurgeTarget::Expired {
                filter: EntryFilter::default(),
            })
            .expect("preview")
            .count
        };
        assert_eq!(expired(), n);
        let cmd = PurgeCmd {
            target: PurgeTarget::Expired {
                filter: EntryFilter::default(),
            },
            operator: "o".into(),
            reason: "r".into(),
            confirm_destructive: false,
        };

        let mut heard = Vec::new();
        let r = ops
            .purge(&cmd, &mut |done| {
                heard.push(done);
                heard.len() < 2
            })
            .expect("purge");
        assert!(r.cancelled);
        assert_eq!(heard, [PURGE_CHUNK as u64, 2 * PURGE_CHUNK as u64]);
        assert_eq!(r.purged.len(), 2 * PURGE_CHUNK);
        assert_eq!(expired(), n - 2 * PURGE_CHUNK, "the rest as they were");

        // Told to stop after the last chunk, there is nothing left to stop: it is done.
        let mut heard = Vec::new();
        let r = ops
            .purge(&cmd, &mut |done| {
                heard.push(done);
                false
            })
            .expect("purge");
        assert!(!r.cancelled);
        assert_eq!(heard, [500]);
        assert_eq!(r.purged.len(), 500);
        assert_eq!(expired(), 0);
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
