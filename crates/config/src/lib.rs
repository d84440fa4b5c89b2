//! The TOML configuration (names are the contract in docs/design.md), parsed and validated at start-up.
//! Every error names the field it is about. Secrets never come from the TOML: only the names of the
//! environment variables or files that hold them.

use std::net::SocketAddr;
use std::time::Duration;

use idemgate_ledger::Effect;

use idemgate_code::Code;
mod approval;
mod audit;
mod operators;
mod raw;
mod route;
mod secret;
mod subject;
mod telemetry;
mod upstream;

pub use approval::{Approval, Condition, Notify};
pub use audit::{Retention, Signing, Witness, SIGNING_KEY_ENV};
pub use operators::{new_token, OperatorCred, Role, TokenHash, SHARED_ADMIN};
use raw::RawConfig;
pub use secret::Secret;
use secret::{read_secret, Secrets};
pub use subject::{Money, Subject, SubjectSource};
pub use telemetry::Telemetry;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Parse(String),
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// More than one error: every `[server]` and `[defaults]` field in error, or else each route's
    /// first.
    #[error("{} errors:{}", .0.len(), .0.iter().map(|e| format!("\n  {e}")).collect::<String>())]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    pub fn code(&self) -> Code {
        Code::BadConfig
    }

    /// The error, saying which file it is in.
    fn in_file(self, path: &str) -> ConfigError {
        match self {
            ConfigError::Parse(m) => ConfigError::Parse(format!("{path}: {m}")),
            ConfigError::Invalid { field, message } => ConfigError::Invalid {
                field: format!("{path}: {field}"),
                message,
            },
            ConfigError::Several(errors) => {
                ConfigError::Several(errors.into_iter().map(|e| e.in_file(path)).collect())
            }
            e @ ConfigError::Read { .. } => e,
        }
    }
}

/// `server.console_dir`: a built UI, if one is named.
fn console_dir(d: Option<&str>) -> Result<Option<std::path::PathBuf>, ConfigError> {
    let Some(d) = d else { return Ok(None) };
    let p = std::path::PathBuf::from(d);
    if !p.join("index.html").is_file() {
        return Err(invalid(
            "server.console_dir",
            format!("{d:?} has no index.html (build the UI: cd ui && npm run build)"),
        ));
    }
    Ok(Some(p))
}

/// `server.export_dir`, absolute: a directory, or the system's temporary one.
fn export_dir(d: Option<&str>) -> Result<std::path::PathBuf, ConfigError> {
    let Some(d) = d else {
        return Ok(std::env::temp_dir());
    };
    let p = std::path::PathBuf::from(d);
    if !p.is_dir() {
        return Err(invalid(
            "server.export_dir",
            format!("{d:?} is not a directory"),
        ));
    }
    Ok(std::path::absolute(&p).unwrap_or(p))
}

/// A field's value, or `None` with its error kept, so that one run names every field in error.
fn take<T>(errors: &mut Vec<ConfigError>, r: Result<T, ConfigError>) -> Option<T> {
    r.map_err(|e| errors.push(e)).ok()
}

/// The error of a check that found at least one: itself when alone.
fn one_or_several(mut errors: Vec<ConfigError>) -> ConfigError {
    match errors.len() {
        1 => errors.remove(0),
        _ => ConfigError::Several(errors),
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

// ---- validated ----------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    Reject,
    Wait,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Header(String),
    /// A JSON pointer into the body.
    Json(String),
    /// sha256 over scope, route and the canonical values at these JSON pointers.
    Derive(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

#[derive(Debug, Clone)]
pub struct Signature {
    pub header: String,
    /// The secret itself, read from the environment or a file at start-up. Never logged.
    pub secret: Secret,
    pub tolerance: Duration,
}

/// The credential a route sends its upstream (`upstream_auth`): one header, its value a secret.
#[derive(Debug, Clone)]
pub struct UpstreamAuth {
    pub header: http::HeaderName,
    /// Marked sensitive (HTTP/2 never indexes it).
    pub value: http::HeaderValue,
}

impl UpstreamAuth {
    /// Sets the credential in `headers`, in place of any value of its header there.
    pub fn set_in(&self, headers: &mut http::HeaderMap) {
        headers.insert(self.header.clone(), self.value.clone());
    }
}

#[derive(Debug, Clone)]
pub struct Reconcile {
    pub method: String,
    /// With `{key}` (and optionally `{scope}`) placeholders; `{key}` is the key the upstream was
    /// sent (the proxy's `keys::upstream_key`: for a scoped request, a UUID of the scope and key).
    pub url: String,
}

/// What a route speaks to its clients and its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Plain HTTP: one operation per request, its key in a header or the body.
    Http,
    /// The Model Context Protocol over Streamable HTTP: JSON-RPC messages POSTed to one endpoint,
    /// where a non-read `tools/call` is the operation.
    Mcp,
}

/// An MCP route's settings for one tool, which win over its annotations and the route's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolRule {
    pub effect: Option<Effect>,
    /// A JSON pointer into the call's arguments that holds its key.
    pub key_arg: Option<String>,
    /// The call's subjects, from its arguments (the route's when empty).
    pub subjects: Vec<Subject>,
    /// How the call states its amount (the route's when `None`).
    pub money: Option<Money>,
    /// The arguments that make two calls the same effect (the route's when `None`).
    pub duplicate_on: Option<Vec<String>>,
    pub loop_guard: Option<LoopGuard>,
    /// Which of its calls wait for operators' approval (policy `route/tool`).
    pub approval: Option<Approval>,
}

/// `loop_guard`: more than `max` calls of one request (or of one set of `duplicate_on` values)
/// from one scope within `window` are a loop suspect: flagged, or refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopGuard {
    pub max: u32,
    pub window: Duration,
    pub reject: bool,
}

#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub protocol: Protocol,
    /// An MCP route's per-tool settings (empty on an HTTP route).
    pub tools: std::collections::BTreeMap<String, ToolRule>,
    /// An HTTP route's method; `POST` on an MCP route (which also serves `GET` and `DELETE`).
    pub method: String,
    pub path: String,
    pub upstream: Upstream,
    pub effect: Effect,
    pub key: Option<KeySource>,
    pub scope_header: Option<String>,
    /// A request without a (non-empty) scope header is refused, instead of sharing the empty
    /// scope with every other caller that sends none.
    pub scope_required: bool,
    pub forward_key: bool,
    pub upstream_dedupes: bool,
    pub timeout: Duration,
    pub retry: Retry,
    pub reject_duplicates: bool,
    pub signature: Option<Signature>,
    /// Sent upstream on every request of the route (the client's header of that name replaced),
    /// operator replays and reconcile probes included; never stored.
    pub upstream_auth: Option<UpstreamAuth>,
    /// Why this host could not read the route's `upstream_auth`: a host of operator actions
    /// ([`Config::load_for_operations`]) reads each credential it can, so that a replay through
    /// one route does not need every route's credential, and refuses what would go through this
    /// route with this. The server reads every one or does not start.
    pub upstream_auth_unread: Option<String>,
    pub reconcile: Option<Reconcile>,
    pub cache_ttl: Option<Duration>,
    pub ttl: Duration,
    pub lease: Duration,
    pub max_body: usize,
    pub fingerprint_headers: Vec<String>,
    pub secret_headers: Vec<String>,
    /// Lower case.
    pub secret_query: Vec<String>,
    /// The request's named values (an MCP route: of the call's arguments, unless its tool has its
    /// own).
    pub subjects: Vec<Subject>,
    /// Body members (an MCP route: arguments) that make two calls the same effect, in place of
    /// the whole request.
    pub duplicate_on: Option<Vec<String>>,
    /// Duplicates are looked for in every scope, not only the call's.
    pub duplicate_any_scope: bool,
    /// How its calls (an MCP route: its tools' calls) state their amount.
    pub money: Option<Money>,
    pub loop_guard: Option<LoopGuard>,
    /// Which calls wait for operators' approval before they run.
    pub approval: Option<Approval>,
}

impl Route {
    /// Whether the route serves requests with `method`: its own, and `HEAD` on a `GET` read route
    /// (RFC 9110 §9.3.2: a `GET` without the body).
    pub fn serves(&self, method: &str) -> bool {
        if self.protocol == Protocol::Mcp {
            return matches!(method, "POST" | "GET" | "DELETE");
        }
        self.method == method
            || method == "HEAD" && self.method == "GET" && self.effect == Effect::Read
    }

    /// Whether the route's path is a prefix of `path` at a segment boundary.
    pub fn takes(&self, path: &str) -> bool {
        path.starts_with(&self.path)
            && (path.len() == self.path.len()
                || self.path.ends_with('/')
                || path.as_bytes()[self.path.len()] == b'/')
    }
}

/// An upstream base URL: `http[s]://host:port[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `https://`: TLS, verified against the system's CA certificates.
    pub https: bool,
    pub authority: String,
    pub prefix: String,
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority, self.prefix)
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// `None` when configured as "off".
    pub admin_listen: Option<SocketAddr>,
    pub ledger: String,
    pub admin_token_file: Option<String>,
    /// Who may use the admin API besides the shared admin token, from `[[operators]]` and
    /// `server.operators_file`.
    pub operators: Vec<OperatorCred>,
    /// A built console UI (`ui/dist`) the admin listener serves at `/console/` for browsers.
    pub console_dir: Option<std::path::PathBuf>,
    /// Where exports made through the admin API are spooled (a private directory of this
    /// process is made in it): the system's temporary directory unless configured.
    pub export_dir: std::path::PathBuf,
    /// How long a client may take to send a request body (slow bodies get 408).
    pub body_timeout: Duration,
    pub in_flight: InFlight,
    pub wait: Duration,
    pub duplicate_window: Duration,
    pub routes: Vec<Route>,
    /// `[retention]`, when the server applies a policy.
    pub retention: Option<Retention>,
    /// Signed checkpoints, when a signing key is configured.
    pub signing: Option<Signing>,
    /// `[telemetry]`: spans of proxied calls over OTLP, when configured.
    pub telemetry: Option<Telemetry>,
}

impl Config {
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.name == name)
    }
}

/// What a ttl of zero would do.
const NO_TTL: &str = ": a completed call would not be replayed, and its retry would run again";

pub fn parse_duration(field: &str, s: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        invalid(
            field,
            format!("{s:?} is not a duration ({e}); use e.g. 500ms, 10s, 5m, 24h"),
        )
    })
}

/// Sizes: `1048576`, `512KiB`, `1MiB`, `2MB`, `64kb` (KB/MB are powers of ten, KiB/MiB of two).
/// [`parse_duration`] of a duration that must be more than zero; `why` (after a `:`, or empty)
/// says what zero would do.
fn parse_positive(field: &str, s: &str, why: &str) -> Result<Duration, ConfigError> {
    match parse_duration(field, s)? {
        d if d.is_zero() => Err(invalid(field, format!("must be more than zero{why}"))),
        d => Ok(d),
    }
}

pub fn parse_size(field: &str, s: &str) -> Result<usize, ConfigError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| invalid(field, format!("{s:?} is not a size; use e.g. 1MiB")))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        _ => {
            return Err(invalid(
                field,
                format!("{s:?}: unknown unit {unit:?}; use B, KiB, MiB, KB or MB"),
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| invalid(field, "too large"))
}

fn parse_upstream(field: &str, s: &str) -> Result<Upstream, ConfigError> {
    let (https, rest) = match (s.strip_prefix("https://"), s.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        (None, None) => {
            return Err(invalid(
                field,
                format!("{s:?}: an upstream is http:// or https://"),
            ))
        }
    };
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(invalid(
            field,
            format!("{s:?}: needs a host[:port] and no credentials"),
        ));
    }
    authority
        .parse::<http::uri::Authority>()
        .map_err(|e| invalid(field, format!("{s:?}: {e}")))?;
    Ok(Upstream {
        https,
        authority: authority.to_owned(),
        prefix: prefix.to_owned(),
    })
}

fn is_header_name(s: &str) -> bool {
    http::HeaderName::from_bytes(s.as_bytes()).is_ok()
}

/// Query parameter names, as sent (no `&`, `=`, `?`, `#` or space), in lower case.
fn query_names(field: &str, v: &Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    let v = v.clone().unwrap_or_default();
    let bad = |n: &String| n.is_empty() || n.contains(['&', '=', '?', '#', ' ']);
    if let Some(n) = v.iter().find(|n| bad(n)) {
        return Err(invalid(
            field,
            format!("{n:?} is not a query parameter name"),
        ));
    }
    Ok(v.into_iter().map(|n| n.to_ascii_lowercase()).collect())
}

impl Config {
    /// Loads and validates a configuration, reading every secret it names (for `serve`).
    pub fn load(path: &str) -> Result<Config, ConfigError> {
        Config::load_with(path, Secrets::Read)
    }

    /// Loads a configuration for operator actions (replay, reconcile), which never check request
    /// signatures: the signing secrets it names need not be present (signatures are checked and
    /// left out), and a route whose upstream credential cannot be read here loads without it,
    /// saying why ([`Route::upstream_auth_unread`]).
    pub fn load_for_operations(path: &str) -> Result<Config, ConfigError> {
        Config::load_with(path, Secrets::Forward)
    }

    /// Loads a configuration for a host that forwards nothing and checks no request (the
    /// retention policy's run, `show`'s judgement of what an entry's route offers, the console
    /// finding the server's ledger): it reads none of the secrets the file names, which the
    /// server's environment holds and the host's need not.
    pub fn load_without_secrets(path: &str) -> Result<Config, ConfigError> {
        Config::load_with(path, Secrets::None)
    }

    fn load_with(path: &str, secrets: Secrets) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse_with(&text, secrets).map_err(|e| e.in_file(path))
    }

    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with(text, Secrets::Read)
    }

    /// Parses a configuration for a host that forwards nothing and checks no request (the demo,
    /// which records calls as the proxy would): every field is checked, no secret is read, and
    /// the routes carry no signature and no upstream credential.
    pub fn parse_without_secrets(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with(text, Secrets::None)
    }

    fn parse_with(text: &str, secrets: Secrets) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        // Every [server] and [defaults] field is checked, so that one run (`serve --check`) names
        // each one in error; the routes are checked once these are right (they build on them).
        let mut errors = Vec::new();
        let d = defaults(&raw.defaults, &mut errors);
        let server = server(&raw, &mut errors);
        let retention = raw
            .retention
            .as_ref()
            .map(|r| take(&mut errors, audit::retention(r)));
        let telemetry = raw
            .telemetry
            .as_ref()
            .map(|t| take(&mut errors, telemetry::telemetry(t)));
        let signing = take(
            &mut errors,
            audit::signing(
                raw.server.signing_key_file.as_deref(),
                raw.server.checkpoint_interval.as_deref(),
                &raw.server.witnesses,
            ),
        );
        let (Some(d), Some(server)) = (d, server) else {
            return Err(one_or_several(errors));
        };
        let route_defaults = route::RouteDefaults {
            ttl: d.ttl,
            lease: d.lease,
            max_body: d.max_body,
        };
        let mut routes = Vec::with_capacity(raw.routes.len());
        // Every route is checked, so that one run (`serve --check`) names each route's first error.
        for (i, r) in raw.routes.iter().enumerate() {
            match route::route(i, r, &routes, &route_defaults, secrets) {
                Ok(route) => routes.push(route),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(one_or_several(errors));
        }
        each_route_serves_something(&routes)?;
        Ok(Config {
            retention: retention.flatten(),
            signing: signing.flatten(),
            telemetry: telemetry.flatten(),
            listen: server.listen,
            admin_listen: server.admin_listen,
            ledger: raw.server.ledger,
            admin_token_file: raw.server.admin_token_file,
            operators: server.operators,
            console_dir: server.console_dir,
            export_dir: server.export_dir,
            body_timeout: server.body_timeout,
            in_flight: d.in_flight,
            wait: d.wait,
            duplicate_window: d.duplicate_window,
            routes,
        })
    }
}

/// `[defaults]`, checked.
struct Defaults {
    ttl: Duration,
    lease: Duration,
    wait: Duration,
    duplicate_window: Duration,
    max_body: usize,
    in_flight: InFlight,
}

/// `[defaults]`, or `None` with every field in error added to `errors`.
fn defaults(d: &raw::RawDefaults, errors: &mut Vec<ConfigError>) -> Option<Defaults> {
    let dur = |field: &str, v: &Option<String>, default: &str| {
        parse_duration(field, v.as_deref().unwrap_or(default))
    };
    let ttl = take(
        errors,
        parse_positive("defaults.ttl", d.ttl.as_deref().unwrap_or("24h"), NO_TTL),
    );
    let lease = take(
        errors,
        parse_positive("defaults.lease", d.lease.as_deref().unwrap_or("30s"), ""),
    );
    let wait = take(errors, dur("defaults.wait", &d.wait, "5s"));
    let duplicate_window = take(
        errors,
        dur("defaults.duplicate_window", &d.duplicate_window, "10m"),
    );
    let max_body = take(
        errors,
        parse_size("defaults.max_body", d.max_body.as_deref().unwrap_or("1MiB")),
    );
    let in_flight = take(
        errors,
        match d.in_flight.as_deref().unwrap_or("reject") {
            "reject" => Ok(InFlight::Reject),
            "wait" => Ok(InFlight::Wait),
            other => Err(invalid(
                "defaults.in_flight",
                format!("{other:?}: use \"reject\" or \"wait\""),
            )),
        },
    );
    Some(Defaults {
        ttl: ttl?,
        lease: lease?,
        wait: wait?,
        duplicate_window: duplicate_window?,
        max_body: max_body?,
        in_flight: in_flight?,
    })
}

/// `[server]` (and the operators it names), checked.
struct Server {
    listen: SocketAddr,
    admin_listen: Option<SocketAddr>,
    operators: Vec<OperatorCred>,
    console_dir: Option<std::path::PathBuf>,
    export_dir: std::path::PathBuf,
    body_timeout: Duration,
}

/// `[server]` and `[[operators]]`, or `None` with every field in error added to `errors`.
fn server(raw: &RawConfig, errors: &mut Vec<ConfigError>) -> Option<Server> {
    let s = &raw.server;
    let listen = take(
        errors,
        s.listen.parse().map_err(|e| {
            invalid(
                "server.listen",
                format!("{:?}: {e} (use IP:PORT)", s.listen),
            )
        }),
    );
    let admin_listen = take(
        errors,
        match s.admin_listen.as_str() {
            "off" => Ok(None),
            a => a.parse().map(Some).map_err(|e| {
                invalid(
                    "server.admin_listen",
                    format!("{a:?}: {e} (use IP:PORT, or \"off\")"),
                )
            }),
        },
    );
    let operators = take(
        errors,
        operators::operators(&raw.operators, s.operators_file.as_deref()),
    );
    let console_dir = take(errors, console_dir(s.console_dir.as_deref()));
    let export_dir = take(errors, export_dir(s.export_dir.as_deref()));
    let body_timeout = take(
        errors,
        match &s.body_timeout {
            None => Ok(Duration::from_secs(30)),
            Some(t) => parse_positive("server.body_timeout", t, ""),
        },
    );
    let ledger = take(
        errors,
        if s.ledger.trim().is_empty() {
            Err(invalid(
                "server.ledger",
                "name a SQLite file or a postgres:// URL",
            ))
        } else {
            Ok(())
        },
    );
    ledger?;
    Some(Server {
        listen: listen?,
        admin_listen: admin_listen?,
        operators: operators?,
        console_dir: console_dir?,
        export_dir: export_dir?,
        body_timeout: body_timeout?,
    })
}

/// The first route that takes a request serves it: a route an earlier one takes every request of
/// would never apply its own settings (its effect, key, retries).
fn each_route_serves_something(routes: &[Route]) -> Result<(), ConfigError> {
    for (j, r) in routes.iter().enumerate() {
        if let Some((i, e)) = routes[..j]
            .iter()
            .enumerate()
            .find(|(_, e)| e.serves(&r.method) && e.takes(&r.path))
        {
            return Err(invalid(
                format!("routes[{j}] ({}).path", r.name),
                format!(
                    "never used: routes[{i}] ({}) takes every {} {}; list the more specific \
                     route first",
                    e.name, r.method, r.path
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
