//! A route's metric handles.

use metrics::{counter, histogram, Counter, Histogram};

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
