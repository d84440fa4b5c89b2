//! The configuration as TOML writes it, before any check: every field optional where the file
//! may leave it out, and no field the contract does not name (`deny_unknown_fields`).

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) defaults: RawDefaults,
    #[serde(default)]
    pub(super) routes: Vec<RawRoute>,
    #[serde(default)]
    pub(super) operators: Vec<RawOperator>,
    pub(super) retention: Option<super::audit::RawRetention>,
    pub(super) telemetry: Option<super::telemetry::RawTelemetry>,
}

/// `[[operators]]`: who may use the admin API, with which role, and the hash of their token.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOperator {
    pub(super) name: String,
    pub(super) role: String,
    pub(super) token_hash: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    #[serde(default = "default_listen")]
    pub(super) listen: String,
    #[serde(default = "default_admin_listen")]
    pub(super) admin_listen: String,
    pub(super) ledger: String,
    pub(super) admin_token_file: Option<String>,
    pub(super) operators_file: Option<String>,
    pub(super) console_dir: Option<String>,
    pub(super) export_dir: Option<String>,
    pub(super) body_timeout: Option<String>,
    pub(super) signing_key_file: Option<String>,
    pub(super) checkpoint_interval: Option<String>,
    #[serde(default)]
    pub(super) witnesses: Vec<crate::audit::RawWitness>,
}

pub(super) fn default_listen() -> String {
    "127.0.0.1:8700".into()
}
pub(super) fn default_admin_listen() -> String {
    "127.0.0.1:8701".into()
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) ttl: Option<String>,
    pub(super) lease: Option<String>,
    pub(super) in_flight: Option<String>,
    pub(super) wait: Option<String>,
    pub(super) max_body: Option<String>,
    pub(super) duplicate_window: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    pub(super) header: Option<String>,
    pub(super) json: Option<String>,
    pub(super) derive: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScope {
    pub(super) header: Option<String>,
    pub(super) required: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetry {
    pub(super) attempts: Option<u32>,
    pub(super) base: Option<String>,
    pub(super) max: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSignature {
    pub(super) header: Option<String>,
    pub(super) secret_env: Option<String>,
    pub(super) secret_file: Option<String>,
    pub(super) tolerance: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstreamAuth {
    pub(super) header: Option<String>,
    pub(super) secret_env: Option<String>,
    pub(super) secret_file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconcile {
    pub(super) method: Option<String>,
    pub(super) url: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub(super) name: String,
    /// Required on an HTTP route; an MCP route takes the transport's methods.
    pub(super) method: Option<String>,
    pub(super) path: String,
    pub(super) upstream: String,
    /// Required on an HTTP route; an MCP route's effects are per tool.
    pub(super) effect: Option<String>,
    /// `"http"` (the default) or `"mcp"`: the route is an MCP server's Streamable HTTP endpoint.
    pub(super) protocol: Option<String>,
    /// `[routes.tools."name"]`: an MCP route's per-tool settings, which win over the tool's
    /// annotations.
    pub(super) tools: Option<std::collections::BTreeMap<String, RawTool>>,
    pub(super) key: Option<RawKey>,
    pub(super) scope: Option<RawScope>,
    pub(super) forward_key: Option<bool>,
    pub(super) upstream_dedupes: Option<bool>,
    pub(super) timeout: Option<String>,
    pub(super) retry: Option<RawRetry>,
    pub(super) on_duplicate_suspect: Option<String>,
    pub(super) signature: Option<RawSignature>,
    /// A credential the proxy sends the upstream on every request of the route, replays and
    /// probes included.
    pub(super) upstream_auth: Option<RawUpstreamAuth>,
    pub(super) reconcile: Option<RawReconcile>,
    pub(super) cache_ttl: Option<String>,
    pub(super) ttl: Option<String>,
    pub(super) lease: Option<String>,
    pub(super) max_body: Option<String>,
    /// Request headers that are part of the fingerprint (besides method, route and body).
    pub(super) fingerprint_headers: Option<Vec<String>>,
    /// Request headers that carry secrets: forwarded upstream, never stored.
    pub(super) secret_headers: Option<Vec<String>>,
    /// Query parameters that carry secrets (besides the ledger's own list): forwarded upstream,
    /// never stored, not part of the fingerprint.
    pub(super) secret_query: Option<Vec<String>>,
    /// Named values of the request (`customer = "/customer"`, `agent = "header:X-Agent"`),
    /// stored with its entry and searchable.
    pub(super) subject: Option<std::collections::BTreeMap<String, String>>,
    /// Body members that make two calls the same effect (duplicate suspects).
    pub(super) duplicate_on: Option<Vec<String>>,
    /// `"same"` (the default): duplicates within one scope; `"any"`: across scopes.
    pub(super) duplicate_scope: Option<String>,
    /// `money = { minor_units, currency }`: how the calls state their amount.
    pub(super) money: Option<RawMoney>,
    pub(super) loop_guard: Option<RawLoopGuard>,
    /// `[routes.approval]`: which calls wait for operators before they run.
    pub(super) approval: Option<RawApproval>,
}

/// `[routes.approval]` and `[routes.tools."name".approval]` as written (`approval::policy`
/// checks it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApproval {
    pub(super) when: Option<String>,
    pub(super) approvals: Option<u32>,
    pub(super) expires: Option<String>,
    pub(super) hold: Option<String>,
    pub(super) approvers: Option<Vec<String>>,
    pub(super) notify: Option<String>,
    pub(super) notify_secret_env: Option<String>,
}

/// `money = { minor_units, currency }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMoney {
    pub(super) minor_units: Option<bool>,
    pub(super) currency: Option<String>,
}

/// `loop_guard = { max, window, action }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLoopGuard {
    pub(super) max: u32,
    pub(super) window: String,
    pub(super) action: Option<String>,
}

/// `[routes.tools."name"]` of an MCP route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTool {
    pub(super) effect: Option<String>,
    pub(super) key: Option<RawToolKey>,
    /// As a route's, read from the call's arguments.
    pub(super) subject: Option<std::collections::BTreeMap<String, String>>,
    /// As a route's, for this tool's calls.
    pub(super) money: Option<RawMoney>,
    pub(super) duplicate_on: Option<Vec<String>>,
    pub(super) loop_guard: Option<RawLoopGuard>,
    /// `[routes.tools."name".approval]`: which of its calls wait for operators.
    pub(super) approval: Option<RawApproval>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToolKey {
    /// A JSON pointer into the tool's arguments.
    pub(super) arg: String,
}
