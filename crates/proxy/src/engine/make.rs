//! An engine made for a configuration, at start or on a reload.

use std::sync::Arc;

use idemgate_ledger::Storage;
use metrics::histogram;

use super::{Engine, RouteMetrics};
use crate::config::Config;
use crate::forward;
use crate::read_cache::ReadCache;

impl Engine {
    pub fn new(cfg: Arc<Config>, store: Arc<dyn Storage>, owner: String) -> Engine {
        // The handles below bind to the recorder installed now: install it first.
        crate::metrics_handle();
        Engine {
            metrics: route_metrics(&cfg),
            claim_seconds: histogram!("idemgate_claim_seconds"),
            tools: cfg.routes.iter().map(|_| Arc::default()).collect(),
            mcp_calls: Arc::default(),
            loops: Arc::default(),
            cfg,
            store,
            client: forward::client(),
            owner,
            read_cache: ReadCache::default(),
            flights: Arc::default(),
            unsettled: Arc::default(),
            tracing: None,
            requests: tokio_util::task::TaskTracker::new(),
        }
    }

    /// This engine with its calls' spans sent where `[telemetry]` says (unchanged without it).
    pub fn traced(mut self) -> Result<Engine, crate::telemetry::TracingError> {
        if let Some(t) = &self.cfg.telemetry {
            let tracing = crate::telemetry::Tracing::start(t, self.client.clone(), &self.owner)?;
            self.tracing = Some(Arc::new(tracing));
        }
        Ok(self)
    }

    /// Sends the spans still batched and stops the exporter; at once without `[telemetry]`.
    pub async fn stop_tracing(&self) {
        if let Some(t) = self.tracing.clone() {
            let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
        }
    }

    /// This engine under `cfg`, for the requests that start from now on (a reload): what it
    /// knows of calls in flight, held MCP cancels, loop counts and outcomes waiting for the
    /// ledger is shared with it, so requests under either finish as one process's; an MCP route
    /// keeps the tools it learnt when its name and upstream stay. Read results are not carried over: the
    /// routes' upstreams, credentials or scopes may have changed.
    pub fn reloaded(&self, cfg: Arc<Config>) -> Engine {
        let tools = cfg
            .routes
            .iter()
            .map(|r| {
                self.cfg
                    .routes
                    .iter()
                    .position(|old| old.name == r.name && old.upstream == r.upstream)
                    .map_or_else(Arc::default, |i| self.tools[i].clone())
            })
            .collect();
        Engine {
            metrics: route_metrics(&cfg),
            claim_seconds: self.claim_seconds.clone(),
            tools,
            mcp_calls: self.mcp_calls.clone(),
            loops: self.loops.clone(),
            cfg,
            store: self.store.clone(),
            client: self.client.clone(),
            owner: self.owner.clone(),
            read_cache: ReadCache::default(),
            flights: self.flights.clone(),
            unsettled: self.unsettled.clone(),
            tracing: self.tracing.clone(),
            requests: self.requests.clone(),
        }
    }
}

/// Each route's metric handles, in the configuration's order.
fn route_metrics(cfg: &Config) -> Vec<RouteMetrics> {
    cfg.routes
        .iter()
        .map(|r| RouteMetrics::new(&r.name))
        .collect()
}
