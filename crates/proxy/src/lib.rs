//! The idemgate data plane: exactly-once forwarding in front of side-effecting HTTP tools. It owns
//! HTTP semantics (routing, keys, fingerprints, retries, the read cache, signatures); the ledger
//! owns storage; the operations layer (`idemgate-ops`) owns every operator decision, and reaches
//! upstream through [`redrive`]; `idemgate-server` runs the listeners.

mod approval;
pub mod business;
mod claim;
mod drive;
pub mod engine;
mod flights;
pub mod forward;
mod handle;
pub mod keys;
mod loop_guard;
pub mod mcp;
pub mod problem;
mod read_body;
mod read_cache;
pub mod redrive;
mod request_checks;
mod respond;
mod settle;
pub mod signature;
pub mod telemetry;

use std::sync::OnceLock;

// Routes and their settings are the configuration crate's; `crate::config` names it here.
use idemgate_config as config;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub use engine::Engine;
pub use handle::handle;

/// The process-wide Prometheus recorder (installed once).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ];
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
                .map(|b| b.build_recorder())
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_ok() {
                idemgate_ledger::register_metrics();
                engine::describe_metrics();
            }
            handle
        })
        .clone()
}

/// A lease-owner id for this process: host, pid and a random suffix.
pub fn instance_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    format!(
        "{host}:{}:{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}
