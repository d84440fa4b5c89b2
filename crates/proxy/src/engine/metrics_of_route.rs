//! A route's metric handles, and what each of the proxy's metrics measures.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, histogram, Unit};
use metrics::{Counter, Histogram};

/// Gives each of the proxy's metrics its `# HELP` line on `/metrics`.
pub(crate) fn describe() {
    describe_counter!(
        "idemgate_requests_total",
        "Requests by route and outcome, each counted once: executed, replayed, forwarded, \
         cache_hit, not_executed, unknown, or the problem's code"
    );
    describe_counter!(
        "idemgate_replays_total",
        "Retries answered with the response the ledger stored, by route"
    );
    describe_counter!(
        "idemgate_collisions_total",
        "Keys reused with a different request (422 key-reuse), by route"
    );
    describe_counter!(
        "idemgate_duplicate_suspects_total",
        "Calls flagged as a probable duplicate of one completed under another key, by route"
    );
    describe_counter!(
        "idemgate_loop_suspects_total",
        "Calls past their route's loop guard: one request repeated by one scope, by route"
    );
    describe_counter!(
        "idemgate_retries_total",
        "Upstream attempts made again because the one before was not executed, by route and class"
    );
    describe_histogram!(
        "idemgate_upstream_seconds",
        Unit::Seconds,
        "One upstream attempt, from sending the request to its answer, by route"
    );
    describe_histogram!(
        "idemgate_claim_seconds",
        Unit::Seconds,
        "A claim in the ledger, from asking to its durable answer"
    );
    describe_counter!(
        "idemgate_mcp_cancels_held_total",
        "MCP cancellations of a running tool call answered 202 and not passed on, by route"
    );
    describe_counter!(
        "idemgate_mcp_session_ends_deferred_total",
        "MCP session ends passed on only once the session's calls had ended, by route"
    );
    describe_gauge!(
        "idemgate_outcomes_unrecorded",
        "Outcomes (completions, releases, unknown outcomes) this process holds because the \
         ledger could not take them; recorded when it takes writes again"
    );
    describe_counter!(
        "idemgate_outcomes_recorded_late_total",
        "Outcomes recorded after the ledger first refused them"
    );
    describe_counter!(
        "idemgate_outcomes_unrecorded_dropped_total",
        "Outcomes the ledger refused that were not recorded later (no room to keep them, or the \
         entry was decided meanwhile): each entry is left for an operator"
    );
}

/// The metric handles of one route, registered once: a `counter!` with labels looks its series up
/// (hashing the labels, allocating the route's name) on every call.
#[derive(Debug, Clone)]
pub(crate) struct RouteMetrics {
    pub(crate) executed: Counter,
    pub(crate) replayed: Counter,
    pub(crate) forwarded: Counter,
    pub(crate) cache_hit: Counter,
    pub(crate) not_executed: Counter,
    pub(crate) unknown: Counter,
    pub(crate) replays: Counter,
    pub(crate) collisions: Counter,
    pub(crate) duplicate_suspects: Counter,
    pub(crate) loop_suspects: Counter,
    pub(crate) upstream_seconds: Histogram,
}

impl RouteMetrics {
    pub(crate) fn new(route: &str) -> RouteMetrics {
        let requests = |outcome: &'static str| counter!("idemgate_requests_total", "route" => route.to_owned(), "outcome" => outcome);
        RouteMetrics {
            executed: requests("executed"),
            replayed: requests("replayed"),
            forwarded: requests("forwarded"),
            cache_hit: requests("cache_hit"),
            not_executed: requests("not_executed"),
            unknown: requests("unknown"),
            replays: counter!("idemgate_replays_total", "route" => route.to_owned()),
            collisions: counter!("idemgate_collisions_total", "route" => route.to_owned()),
            duplicate_suspects: counter!("idemgate_duplicate_suspects_total", "route" => route.to_owned()),
            loop_suspects: counter!("idemgate_loop_suspects_total", "route" => route.to_owned()),
            upstream_seconds: histogram!("idemgate_upstream_seconds", "route" => route.to_owned()),
        }
    }
}
