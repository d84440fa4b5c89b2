//! The TOML configuration (names are the contract in docs/design.md), parsed and validated at start-up.
//! Every error names the field it is about. Secrets never come from the TOML: only the names of the
//! environment variables or files that hold them.

use std::net::SocketAddr;
use std::time::Duration;

use idemgate_ledger::Effect;
mod operators;
mod raw;

pub use operators::{new_token, OperatorCred, Role, TokenHash, SHARED_ADMIN};
use raw::RawConfig;

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
    pub fn code(&self) -> &'static str {
        "bad-config"
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
enum Secrets {
    Read,
    Skip,
}

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

/// A secret value whose Debug output is redacted.
#[derive(Clone)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[derive(Debug, Clone)]
pub struct Reconcile {
    pub method: String,
    /// With `{key}` (and optionally `{scope}`) placeholders; `{key}` is the key the upstream was
    /// sent ([`crate::keys::upstream_key`]: for a scoped request, a UUID of the scope and key).
    pub url: String,
}

#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
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
    pub reconcile: Option<Reconcile>,
    pub cache_ttl: Option<Duration>,
    pub ttl: Duration,
    pub lease: Duration,
    pub max_body: usize,
    pub fingerprint_headers: Vec<String>,
    pub secret_headers: Vec<String>,
    /// Lower case.
    pub secret_query: Vec<String>,
}

impl Route {
    /// Whether the route serves requests with `method`: its own, and `HEAD` on a `GET` read route
    /// (RFC 9110 §9.3.2: a `GET` without the body).
    pub fn serves(&self, method: &str) -> bool {
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

fn read_secret(field: &str, env: Option<&str>, file: Option<&str>) -> Result<Secret, ConfigError> {
    match (env, file) {
        (Some(var), None) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(Secret(v.into_bytes())),
            _ => Err(invalid(
                field,
                format!("environment variable {var} is not set"),
            )),
        },
        (None, Some(path)) => {
            let raw = std::fs::read(path).map_err(|e| invalid(field, format!("{path}: {e}")))?;
            let s = raw.strip_suffix(b"\n").unwrap_or(&raw).to_vec();
            if s.is_empty() {
                return Err(invalid(field, format!("{path} is empty")));
            }
            Ok(Secret(s))
        }
        _ => Err(invalid(
            field,
            "give exactly one of secret_env or secret_file (never the secret itself)",
        )),
    }
}

impl Config {
    /// Loads and validates a configuration, reading every secret it names (for `serve`).
    pub fn load(path: &str) -> Result<Config, ConfigError> {
        Config::load_with(path, Secrets::Read)
    }

    /// Loads a configuration for operator actions (replay, reconcile), which never check request
    /// signatures: the signing secrets it names need not be present (signatures are left out).
    pub fn load_for_operations(path: &str) -> Result<Config, ConfigError> {
        Config::load_with(path, Secrets::Skip)
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

    fn parse_with(text: &str, secrets: Secrets) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let d = &raw.defaults;
        // Every [server] and [defaults] field is checked, so that one run (`serve --check`) names
        // each one in error; the routes are checked once these are right (they build on them).
        let mut errors = Vec::new();
        let dur = |field: &str, v: &Option<String>, default: &str| {
            parse_duration(field, v.as_deref().unwrap_or(default))
        };
        let ttl = take(
            &mut errors,
            parse_positive("defaults.ttl", d.ttl.as_deref().unwrap_or("24h"), NO_TTL),
        );
        let lease = take(
            &mut errors,
            parse_positive("defaults.lease", d.lease.as_deref().unwrap_or("30s"), ""),
        );
        let wait = take(&mut errors, dur("defaults.wait", &d.wait, "5s"));
        let duplicate_window = take(
            &mut errors,
            dur("defaults.duplicate_window", &d.duplicate_window, "10m"),
        );
        let max_body = take(
            &mut errors,
            parse_size("defaults.max_body", d.max_body.as_deref().unwrap_or("1MiB")),
        );
        let in_flight = take(
            &mut errors,
            match d.in_flight.as_deref().unwrap_or("reject") {
                "reject" => Ok(InFlight::Reject),
                "wait" => Ok(InFlight::Wait),
                other => Err(invalid(
                    "defaults.in_flight",
                    format!("{other:?}: use \"reject\" or \"wait\""),
                )),
            },
        );
        let listen: Option<SocketAddr> = take(
            &mut errors,
            raw.server.listen.parse().map_err(|e| {
                invalid(
                    "server.listen",
                    format!("{:?}: {e} (use IP:PORT)", raw.server.listen),
                )
            }),
        );
        let admin_listen: Option<Option<SocketAddr>> = take(
            &mut errors,
            match raw.server.admin_listen.as_str() {
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
            &mut errors,
            operators::operators(&raw.operators, raw.server.operators_file.as_deref()),
        );
        let console_dir = take(&mut errors, console_dir(raw.server.console_dir.as_deref()));
        let export_dir = take(&mut errors, export_dir(raw.server.export_dir.as_deref()));
        let body_timeout = take(
            &mut errors,
            match &raw.server.body_timeout {
                None => Ok(Duration::from_secs(30)),
                Some(s) => parse_positive("server.body_timeout", s, ""),
            },
        );
        let ledger = take(
            &mut errors,
            if raw.server.ledger.trim().is_empty() {
                Err(invalid(
                    "server.ledger",
                    "name a SQLite file or a postgres:// URL",
                ))
            } else {
                Ok(())
            },
        );
        let (
            Some(ttl),
            Some(lease),
            Some(wait),
            Some(duplicate_window),
            Some(max_body),
            Some(in_flight),
            Some(listen),
            Some(admin_listen),
            Some(console_dir),
            Some(export_dir),
            Some(body_timeout),
            Some(()),
        ) = (
            ttl,
            lease,
            wait,
            duplicate_window,
            max_body,
            in_flight,
            listen,
            admin_listen,
            console_dir,
            export_dir,
            body_timeout,
            ledger,
        )
        else {
            return Err(one_or_several(errors));
        };

        let mut routes = Vec::with_capacity(raw.routes.len());
        // Every route is checked, so that one run (`serve --check`) names each route's first error.
        for (i, r) in raw.routes.iter().enumerate() {
            let route = (|| -> Result<Route, ConfigError> {
                let f = |name: &str| format!("routes[{i}] ({}).{name}", r.name);
                if r.name.trim().is_empty()
                    || !r
                        .name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                {
                    return Err(invalid(
                        format!("routes[{i}].name"),
                        format!("{:?}: use letters, digits, - _ .", r.name),
                    ));
                }
                if routes.iter().any(|x: &Route| x.name == r.name) {
                    return Err(invalid(f("name"), "used by an earlier route"));
                }
                let method = r.method.to_ascii_uppercase();
                if http::Method::from_bytes(method.as_bytes()).is_err() || method.is_empty() {
                    return Err(invalid(
                        f("method"),
                        format!("{:?} is not an HTTP method", r.method),
                    ));
                }
                if !r.path.starts_with('/') {
                    return Err(invalid(
                        f("path"),
                        format!("{:?} must start with /", r.path),
                    ));
                }
                // Requests are routed by their decoded path (`engine::route_path`).
                let decoded = percent_encoding::percent_decode_str(&r.path).decode_utf8_lossy();
                if decoded != r.path.as_str() {
                    return Err(invalid(
                        f("path"),
                        format!(
                            "{:?}: write it decoded, {decoded:?}: requests are routed by their decoded path",
                            r.path
                        ),
                    ));
                }
                let upstream = parse_upstream(&f("upstream"), &r.upstream)?;
                let effect = Effect::parse(&r.effect).ok_or_else(|| {
                    invalid(
                        f("effect"),
                        format!("{:?}: use read, write, idempotent or destructive", r.effect),
                    )
                })?;
                let key = match &r.key {
                    None => None,
                    Some(k) => Some(match (&k.header, &k.json, &k.derive) {
                        (Some(h), None, None) => {
                            if !is_header_name(h) {
                                return Err(invalid(
                                    f("key.header"),
                                    format!("{h:?} is not a header name"),
                                ));
                            }
                            KeySource::Header(h.to_ascii_lowercase())
                        }
                        (None, Some(p), None) => {
                            if !p.starts_with('/') {
                                return Err(invalid(
                                    f("key.json"),
                                    format!("{p:?}: a JSON pointer starts with /"),
                                ));
                            }
                            KeySource::Json(p.clone())
                        }
                        (None, None, Some(ps)) => {
                            if ps.is_empty() {
                                return Err(invalid(
                                    f("key.derive"),
                                    "name at least one JSON pointer",
                                ));
                            }
                            if let Some(p) = ps.iter().find(|p| !p.starts_with('/')) {
                                return Err(invalid(
                                    f("key.derive"),
                                    format!("{p:?}: a JSON pointer starts with /"),
                                ));
                            }
                            KeySource::Derive(ps.clone())
                        }
                        _ => {
                            return Err(invalid(
                                f("key"),
                                "give exactly one of header, json or derive",
                            ))
                        }
                    }),
                };
                let key = match (effect, key) {
                    (Effect::Read, k) => k,
                    (_, Some(k)) => Some(k),
                    // Write routes default to the standard header.
                    (_, None) => Some(KeySource::Header("idempotency-key".into())),
                };
                let scope_header = match r.scope.as_ref().and_then(|s| s.header.clone()) {
                    Some(h) if !is_header_name(&h) => {
                        return Err(invalid(
                            f("scope.header"),
                            format!("{h:?} is not a header name"),
                        ))
                    }
                    h => h.map(|h| h.to_ascii_lowercase()),
                };
                let scope_required = r.scope.as_ref().and_then(|s| s.required) == Some(true);
                if scope_required && scope_header.is_none() {
                    return Err(invalid(
                        f("scope.required"),
                        "needs scope.header, the header that must name the caller",
                    ));
                }
                let timeout =
                    parse_positive(&f("timeout"), r.timeout.as_deref().unwrap_or("10s"), "")?;
                let route_lease = match &r.lease {
                    Some(l) => parse_positive(&f("lease"), l, "")?,
                    None => lease,
                };
                if r.upstream_dedupes == Some(true) && r.forward_key == Some(false) {
                    return Err(invalid(
                        f("upstream_dedupes"),
                        "the upstream can only dedupe a key it is sent: needs forward_key = true",
                    ));
                }
                let retry = match &r.retry {
                    None => Retry {
                        attempts: 3,
                        base: Duration::from_millis(100),
                        max: Duration::from_secs(2),
                    },
                    Some(rt) => Retry {
                        attempts: rt.attempts.unwrap_or(3),
                        base: parse_duration(
                            &f("retry.base"),
                            rt.base.as_deref().unwrap_or("100ms"),
                        )?,
                        max: parse_duration(&f("retry.max"), rt.max.as_deref().unwrap_or("2s"))?,
                    },
                };
                if retry.attempts == 0 || retry.attempts > 20 {
                    return Err(invalid(f("retry.attempts"), "between 1 and 20"));
                }
                if retry.max < retry.base {
                    return Err(invalid(f("retry.max"), "must not be less than retry.base"));
                }
                // Destructive calls are never retried automatically.
                let retry = if effect == Effect::Destructive {
                    Retry {
                        attempts: 1,
                        ..retry
                    }
                } else {
                    retry
                };
                // A claim's lease covers its first attempt; a retry renews it, then waits (up to
                // retry.max, as long as the upstream's Retry-After asks) and tries (up to timeout).
                // A call still running past its lease would look stuck, and an operator could
                // release it and have it run twice.
                let retry_wait = if retry.attempts > 1 && effect != Effect::Read {
                    retry.max
                } else {
                    Duration::ZERO
                };
                if timeout + retry_wait >= route_lease {
                    return Err(invalid(
                        f("timeout"),
                        if retry_wait.is_zero() {
                            format!("{timeout:?} must be shorter than the lease ({route_lease:?}), or a live call would look stuck")
                        } else {
                            format!("{timeout:?}, plus a retry's wait of up to retry.max ({retry_wait:?}), must be shorter than the lease ({route_lease:?}), or a live call would look stuck")
                        },
                    ));
                }
                let reject_duplicates = match r.on_duplicate_suspect.as_deref().unwrap_or("flag") {
                    "flag" => false,
                    "reject" => true,
                    other => {
                        return Err(invalid(
                            f("on_duplicate_suspect"),
                            format!("{other:?}: use \"flag\" or \"reject\""),
                        ))
                    }
                };
                let signature = match &r.signature {
                    None => None,
                    Some(_) if secrets == Secrets::Skip => None,
                    Some(s) => {
                        let header = s
                            .header
                            .clone()
                            .unwrap_or_else(|| "x-idemgate-signature".into());
                        if !is_header_name(&header) {
                            return Err(invalid(
                                f("signature.header"),
                                format!("{header:?} is not a header name"),
                            ));
                        }
                        Some(Signature {
                            header: header.to_ascii_lowercase(),
                            secret: read_secret(
                                &f("signature"),
                                s.secret_env.as_deref(),
                                s.secret_file.as_deref(),
                            )?,
                            tolerance: parse_duration(
                                &f("signature.tolerance"),
                                s.tolerance.as_deref().unwrap_or("5m"),
                            )?,
                        })
                    }
                };
                // Read in every mode: operator replays and probes send it too.
                let upstream_auth = match &r.upstream_auth {
                    None => None,
                    Some(a) => {
                        let name = a.header.as_deref().unwrap_or("authorization");
                        let header =
                            http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                                invalid(
                                    f("upstream_auth.header"),
                                    format!("{name:?} is not a header name"),
                                )
                            })?;
                        let secret = read_secret(
                            &f("upstream_auth"),
                            a.secret_env.as_deref(),
                            a.secret_file.as_deref(),
                        )?;
                        let mut value = http::HeaderValue::from_bytes(&secret.0).map_err(|_| {
                            // Never the value itself: it is a secret.
                            invalid(f("upstream_auth"), "the secret is not a valid header value")
                        })?;
                        value.set_sensitive(true);
                        Some(UpstreamAuth { header, value })
                    }
                };
                let reconcile = match &r.reconcile {
                    None => None,
                    Some(rc) => {
                        let m = rc
                            .method
                            .clone()
                            .unwrap_or_else(|| "GET".into())
                            .to_ascii_uppercase();
                        if m != "GET" && m != "HEAD" {
                            return Err(invalid(
                                f("reconcile.method"),
                                "a probe must be GET or HEAD: it must not have side effects",
                            ));
                        }
                        parse_upstream(
                            &f("reconcile.url"),
                            rc.url.split('?').next().unwrap_or(""),
                        )?;
                        if !rc.url.contains("{key}") {
                            return Err(invalid(f("reconcile.url"), "must contain {key}"));
                        }
                        Some(Reconcile {
                            method: m,
                            url: rc.url.clone(),
                        })
                    }
                };
                let cache_ttl = match &r.cache_ttl {
                    Some(c) if effect != Effect::Read => {
                        return Err(invalid(
                            f("cache_ttl"),
                            format!("{c:?}: only read routes are cached"),
                        ))
                    }
                    Some(c) => Some(parse_duration(&f("cache_ttl"), c)?),
                    None => None,
                };
                let headers =
                    |field: &str, v: &Option<Vec<String>>| -> Result<Vec<String>, ConfigError> {
                        let v = v.clone().unwrap_or_default();
                        if let Some(h) = v.iter().find(|h| !is_header_name(h)) {
                            return Err(invalid(f(field), format!("{h:?} is not a header name")));
                        }
                        Ok(v.into_iter().map(|h| h.to_ascii_lowercase()).collect())
                    };
                // The credential's header is a secret header too: a client's value of it is never
                // stored.
                let mut secret_headers = headers("secret_headers", &r.secret_headers)?;
                if let Some(a) = &upstream_auth {
                    if !secret_headers.iter().any(|n| n == a.header.as_str()) {
                        secret_headers.push(a.header.as_str().to_owned());
                    }
                }
                Ok(Route {
                    name: r.name.clone(),
                    method,
                    path: r.path.clone(),
                    upstream,
                    effect,
                    key,
                    scope_header,
                    scope_required,
                    forward_key: r.forward_key.unwrap_or(true),
                    upstream_dedupes: r.upstream_dedupes.unwrap_or(false),
                    timeout,
                    retry,
                    reject_duplicates,
                    signature,
                    upstream_auth,
                    reconcile,
                    cache_ttl,
                    ttl: match &r.ttl {
                        Some(t) => parse_positive(&f("ttl"), t, NO_TTL)?,
                        None => ttl,
                    },
                    lease: route_lease,
                    max_body: match &r.max_body {
                        Some(m) => parse_size(&f("max_body"), m)?,
                        None => max_body,
                    },
                    fingerprint_headers: headers("fingerprint_headers", &r.fingerprint_headers)?,
                    secret_headers,
                    secret_query: query_names(&f("secret_query"), &r.secret_query)?,
                })
            })();
            match route {
                Ok(route) => routes.push(route),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(one_or_several(errors));
        }
        // The first route that takes a request serves it: a route an earlier one takes every
        // request of would never apply its own settings (its effect, key, retries).
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
        Ok(Config {
            listen,
            admin_listen,
            ledger: raw.server.ledger,
            admin_token_file: raw.server.admin_token_file,
            operators: operators.unwrap_or_default(),
            console_dir,
            export_dir,
            body_timeout,
            in_flight,
            wait,
            duplicate_window,
            routes,
        })
    }
}

#[cfg(test)]
mod tests;
