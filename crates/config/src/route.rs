//! One `[[routes]]` table checked into a [`Route`]: each part (name and path, key, scope, timing
//! and retries, signature, upstream credential, reconcile probe) by a function of its own, each
//! error naming its field.

use std::collections::BTreeMap;
use std::time::Duration;

use idemgate_ledger::Effect;

use super::raw::RawRoute;
use super::secret::{named_secret, read_secret};
use super::{
    invalid, is_header_name, parse_duration, parse_positive, parse_size, parse_upstream,
    query_names, ConfigError, KeySource, LoopGuard, Money, Protocol, Reconcile, Retry, Route,
    Secrets, Signature, Subject, SubjectSource, ToolRule, UpstreamAuth, NO_TTL,
};

/// What a route takes from `[defaults]` unless it sets its own.
pub(super) struct RouteDefaults {
    pub(super) ttl: Duration,
    pub(super) lease: Duration,
    pub(super) max_body: usize,
}

/// The name of a field of the route at `i`, as errors give it: `routes[2] (charges).timeout`.
mod business;
use business::{business, duplicate_on, loop_guard, money, subjects};

struct Fields<'a> {
    i: usize,
    name: &'a str,
}

impl Fields<'_> {
    fn at(&self, field: &str) -> String {
        format!("routes[{}] ({}).{field}", self.i, self.name)
    }
}

/// The route at `i`, checked; `earlier` are the routes before it.
pub(super) fn route(
    i: usize,
    r: &RawRoute,
    earlier: &[Route],
    d: &RouteDefaults,
    secrets: Secrets,
) -> Result<Route, ConfigError> {
    let f = Fields { i, name: &r.name };
    let protocol = protocol(&f, r)?;
    let method = name_method_and_path(&f, r, earlier, protocol)?;
    let upstream = parse_upstream(&f.at("upstream"), &r.upstream)?;
    let effect = effect(&f, r, protocol)?;
    mcp_only_fields(&f, r, protocol)?;
    let tools = tools(&f, r, protocol, secrets)?;
    let key = key_source(&f, r, effect)?;
    let (scope_header, scope_required) = scope(&f, r)?;
    let timeout = parse_positive(&f.at("timeout"), r.timeout.as_deref().unwrap_or("10s"), "")?;
    let lease = match &r.lease {
        Some(l) => parse_positive(&f.at("lease"), l, "")?,
        None => d.lease,
    };
    // An MCP route's retries are checked as a write's: its tools' effects are only known per call
    // (a destructive tool's call is still never retried).
    let retry_effect = match protocol {
        Protocol::Http => effect,
        Protocol::Mcp => Effect::Write,
    };
    let retry = retries(&f, r, retry_effect, timeout, lease)?;
    let reject_duplicates = reject_duplicates(&f, r)?;
    let signature = signature(&f, r, secrets)?;
    let auth_header = upstream_auth_header(&f, r)?;
    let (upstream_auth, upstream_auth_unread) =
        upstream_auth(&f, r, auth_header.as_ref(), secrets)?;
    let reconcile = reconcile(&f, r)?;
    let cache_ttl = cache_ttl(&f, r, effect)?;
    let secret_headers = secret_headers(&f, r, auth_header.as_ref())?;
    let business = business(&f, r, effect, protocol, &secret_headers)?;
    let approval = crate::approval::approval(
        &f.at("approval"),
        r,
        (effect, protocol),
        auth_header.is_some(),
        secrets,
    )?;
    Ok(Route {
        approval,
        name: r.name.clone(),
        protocol,
        tools,
        subjects: business.subjects,
        duplicate_on: business.duplicate_on,
        duplicate_any_scope: business.any_scope,
        money: business.money,
        loop_guard: business.loop_guard,
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
        upstream_auth_unread,
        reconcile,
        cache_ttl,
        ttl: match &r.ttl {
            Some(t) => parse_positive(&f.at("ttl"), t, NO_TTL)?,
            None => d.ttl,
        },
        lease,
        max_body: match &r.max_body {
            Some(m) => parse_size(&f.at("max_body"), m)?,
            None => d.max_body,
        },
        fingerprint_headers: header_names(&f, "fingerprint_headers", &r.fingerprint_headers)?,
        secret_headers,
        secret_query: query_names(&f.at("secret_query"), &r.secret_query)?,
    })
}

/// Whether a duplicate suspect is refused at its claim (`reject`) rather than flagged.
fn reject_duplicates(f: &Fields<'_>, r: &RawRoute) -> Result<bool, ConfigError> {
    match r.on_duplicate_suspect.as_deref().unwrap_or("flag") {
        "flag" => Ok(false),
        "reject" => Ok(true),
        other => Err(invalid(
            f.at("on_duplicate_suspect"),
            format!("{other:?}: use \"flag\" or \"reject\""),
        )),
    }
}

/// How long a read route keeps a result, if it does: only read routes are cached.
fn cache_ttl(
    f: &Fields<'_>,
    r: &RawRoute,
    effect: Effect,
) -> Result<Option<Duration>, ConfigError> {
    match &r.cache_ttl {
        Some(c) if effect != Effect::Read => Err(invalid(
            f.at("cache_ttl"),
            format!("{c:?}: only read routes are cached"),
        )),
        Some(c) => Ok(Some(parse_duration(&f.at("cache_ttl"), c)?)),
        None => Ok(None),
    }
}

/// The headers whose values are never stored: the configured ones, and the upstream
/// credential's header, whose client value is a secret too.
fn secret_headers(
    f: &Fields<'_>,
    r: &RawRoute,
    auth_header: Option<&http::HeaderName>,
) -> Result<Vec<String>, ConfigError> {
    let mut names = header_names(f, "secret_headers", &r.secret_headers)?;
    if let Some(h) = auth_header {
        if !names.iter().any(|n| n == h.as_str()) {
            names.push(h.as_str().to_owned());
        }
    }
    Ok(names)
}

/// The route's name (unique), its method, and its path (absolute, written decoded); returns the
/// method in upper case.
fn name_method_and_path(
    f: &Fields<'_>,
    r: &RawRoute,
    earlier: &[Route],
    protocol: Protocol,
) -> Result<String, ConfigError> {
    if r.name.trim().is_empty()
        || !r
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(invalid(
            format!("routes[{}].name", f.i),
            format!("{:?}: use letters, digits, - _ .", r.name),
        ));
    }
    if earlier.iter().any(|x| x.name == r.name) {
        return Err(invalid(f.at("name"), "used by an earlier route"));
    }
    let method = match (protocol, &r.method) {
        (Protocol::Http, None) => return Err(invalid(f.at("method"), "missing: an HTTP method")),
        (Protocol::Http, Some(m)) => m.to_ascii_uppercase(),
        // Streamable HTTP: POST for messages, GET for the server's stream, DELETE to end a session.
        (Protocol::Mcp, None) => "POST".to_owned(),
        (Protocol::Mcp, Some(_)) => {
            return Err(invalid(
                f.at("method"),
                "an MCP route takes the transport's methods (POST, GET, DELETE): leave it out",
            ))
        }
    };
    if http::Method::from_bytes(method.as_bytes()).is_err() || method.is_empty() {
        return Err(invalid(
            f.at("method"),
            format!("{method:?} is not an HTTP method"),
        ));
    }
    if !r.path.starts_with('/') {
        return Err(invalid(
            f.at("path"),
            format!("{:?} must start with /", r.path),
        ));
    }
    // Requests are routed by their decoded path (`engine::route_path`).
    let decoded = percent_encoding::percent_decode_str(&r.path).decode_utf8_lossy();
    if decoded != r.path.as_str() {
        return Err(invalid(
            f.at("path"),
            format!(
                "{:?}: write it decoded, {decoded:?}: requests are routed by their decoded path",
                r.path
            ),
        ));
    }
    Ok(method)
}

/// An HTTP route's `effect` (required). An MCP route has none of its own (its tools have theirs):
/// a tool not seen listed, and not configured, is destructive until it has been.
fn effect(f: &Fields<'_>, r: &RawRoute, protocol: Protocol) -> Result<Effect, ConfigError> {
    match (protocol, &r.effect) {
        (Protocol::Http, Some(e)) => Effect::parse(e).ok_or_else(|| {
            invalid(
                f.at("effect"),
                format!("{e:?}: use read, write, idempotent or destructive"),
            )
        }),
        (Protocol::Http, None) => Err(invalid(
            f.at("effect"),
            "missing: read, write, idempotent or destructive",
        )),
        (Protocol::Mcp, None) => Ok(Effect::Destructive),
        (Protocol::Mcp, Some(_)) => Err(invalid(
            f.at("effect"),
            "an MCP route's effects are per tool: set [routes.tools.\"NAME\"] effect, or let \
             the tools' annotations say",
        )),
    }
}

/// `protocol`: `http` (the default) or `mcp`.
fn protocol(f: &Fields<'_>, r: &RawRoute) -> Result<Protocol, ConfigError> {
    match r.protocol.as_deref().unwrap_or("http") {
        "http" => Ok(Protocol::Http),
        "mcp" => Ok(Protocol::Mcp),
        other => Err(invalid(
            f.at("protocol"),
            format!("{other:?}: use \"http\" or \"mcp\""),
        )),
    }
}

/// The fields an MCP route has no use for (its keys come from each call, its fingerprint from the
/// tool's name and arguments), and `tools`, which only an MCP route has.
fn mcp_only_fields(f: &Fields<'_>, r: &RawRoute, protocol: Protocol) -> Result<(), ConfigError> {
    if protocol == Protocol::Http {
        return match r.tools {
            Some(_) => Err(invalid(
                f.at("tools"),
                "only an MCP route (protocol = \"mcp\") has tools",
            )),
            None => Ok(()),
        };
    }
    let unused = [
        (
            "key",
            r.key.is_some(),
            "set [routes.tools.\"NAME\"] key.arg, or let the call's key or arguments make it",
        ),
        (
            "cache_ttl",
            r.cache_ttl.is_some(),
            "MCP reads are not cached",
        ),
        (
            "signature",
            r.signature.is_some(),
            "not checked on MCP routes",
        ),
        (
            "fingerprint_headers",
            r.fingerprint_headers.is_some(),
            "a tool call's fingerprint is its tool and arguments",
        ),
    ];
    match unused.into_iter().find(|(_, set, _)| *set) {
        Some((field, _, why)) => Err(invalid(f.at(field), format!("not on an MCP route: {why}"))),
        None => Ok(()),
    }
}

/// An MCP route's `[routes.tools."NAME"]`: each tool's effect and key argument.
fn tools(
    f: &Fields<'_>,
    r: &RawRoute,
    protocol: Protocol,
    secrets: Secrets,
) -> Result<BTreeMap<String, ToolRule>, ConfigError> {
    let mut out = BTreeMap::new();
    if protocol != Protocol::Mcp {
        return Ok(out);
    }
    for (name, t) in r.tools.iter().flatten() {
        let at = |field: &str| f.at(&format!("tools.{name:?}.{field}"));
        if name.is_empty() {
            return Err(invalid(f.at("tools"), "a tool's name is not empty"));
        }
        let effect = match &t.effect {
            None => None,
            Some(e) => Some(Effect::parse(e).ok_or_else(|| {
                invalid(
                    at("effect"),
                    format!("{e:?}: use read, write, idempotent or destructive"),
                )
            })?),
        };
        let key_arg = match &t.key {
            None => None,
            Some(k) if !k.arg.starts_with('/') => {
                return Err(invalid(
                    at("key.arg"),
                    format!(
                        "{:?}: a JSON pointer into the arguments starts with /",
                        k.arg
                    ),
                ))
            }
            Some(k) => Some(k.arg.clone()),
        };
        let secret_headers: Vec<String> = r
            .secret_headers
            .iter()
            .flatten()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        let subjects = subjects(&at("subject"), t.subject.as_ref(), &secret_headers)?;
        // The tool's subjects, else the route's, are those its calls name.
        let own = t.subject.as_ref().filter(|s| !s.is_empty());
        let spec = own.or(r.subject.as_ref());
        let money = money(&at("money"), t.money.as_ref(), |name| {
            spec.is_some_and(|s| s.contains_key(name))
        })?;
        let duplicate_on = duplicate_on(&at("duplicate_on"), t.duplicate_on.as_ref())?;
        let loop_guard = loop_guard(&at("loop_guard"), t.loop_guard.as_ref())?;
        let approval = match &t.approval {
            Some(_) if effect == Some(Effect::Read) => {
                return Err(invalid(at("approval"), "a read tool's calls are not held"))
            }
            Some(a) => Some(crate::approval::policy(
                &at("approval"),
                &format!("{}/{name}", r.name),
                a,
                r.upstream_auth.is_some(),
                secrets,
            )?),
            None => None,
        };
        out.insert(
            name.clone(),
            ToolRule {
                effect,
                key_arg,
                subjects,
                money,
                duplicate_on,
                loop_guard,
                approval,
            },
        );
    }
    Ok(out)
}

/// Where the idempotency key comes from: `key.header`, `key.json` or `key.derive`; a write route
/// that names none reads the standard `Idempotency-Key` header.
fn key_source(
    f: &Fields<'_>,
    r: &RawRoute,
    effect: Effect,
) -> Result<Option<KeySource>, ConfigError> {
    let key = match &r.key {
        None => None,
        Some(k) => Some(match (&k.header, &k.json, &k.derive) {
            (Some(h), None, None) => {
                if !is_header_name(h) {
                    return Err(invalid(
                        f.at("key.header"),
                        format!("{h:?} is not a header name"),
                    ));
                }
                KeySource::Header(h.to_ascii_lowercase())
            }
            (None, Some(p), None) => {
                if !p.starts_with('/') {
                    return Err(invalid(
                        f.at("key.json"),
                        format!("{p:?}: a JSON pointer starts with /"),
                    ));
                }
                KeySource::Json(p.clone())
            }
            (None, None, Some(ps)) => {
                if ps.is_empty() {
                    return Err(invalid(
                        f.at("key.derive"),
                        "name at least one JSON pointer",
                    ));
                }
                if let Some(p) = ps.iter().find(|p| !p.starts_with('/')) {
                    return Err(invalid(
                        f.at("key.derive"),
                        format!("{p:?}: a JSON pointer starts with /"),
                    ));
                }
                KeySource::Derive(ps.clone())
            }
            _ => {
                return Err(invalid(
                    f.at("key"),
                    "give exactly one of header, json or derive",
                ))
            }
        }),
    };
    Ok(match (effect, key) {
        (Effect::Read, k) => k,
        (_, Some(k)) => Some(k),
        (_, None) => Some(KeySource::Header("idempotency-key".into())),
    })
}

/// `scope.header` (lower case) and whether a request must send it.
fn scope(f: &Fields<'_>, r: &RawRoute) -> Result<(Option<String>, bool), ConfigError> {
    let header = match r.scope.as_ref().and_then(|s| s.header.clone()) {
        Some(h) if !is_header_name(&h) => {
            return Err(invalid(
                f.at("scope.header"),
                format!("{h:?} is not a header name"),
            ))
        }
        h => h.map(|h| h.to_ascii_lowercase()),
    };
    let required = r.scope.as_ref().and_then(|s| s.required) == Some(true);
    if required && header.is_none() {
        return Err(invalid(
            f.at("scope.required"),
            "needs scope.header, the header that must name the caller",
        ));
    }
    Ok((header, required))
}

/// The retries, which with the upstream's timeout must fit in the lease.
fn retries(
    f: &Fields<'_>,
    r: &RawRoute,
    effect: Effect,
    timeout: Duration,
    lease: Duration,
) -> Result<Retry, ConfigError> {
    if r.upstream_dedupes == Some(true) && r.forward_key == Some(false) {
        return Err(invalid(
            f.at("upstream_dedupes"),
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
            base: parse_duration(&f.at("retry.base"), rt.base.as_deref().unwrap_or("100ms"))?,
            max: parse_duration(&f.at("retry.max"), rt.max.as_deref().unwrap_or("2s"))?,
        },
    };
    if retry.attempts == 0 || retry.attempts > 20 {
        return Err(invalid(f.at("retry.attempts"), "between 1 and 20"));
    }
    if retry.max < retry.base {
        return Err(invalid(
            f.at("retry.max"),
            "must not be less than retry.base",
        ));
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
    // A claim's lease covers its first attempt; a retry renews it, then waits (up to retry.max,
    // as long as the upstream's Retry-After asks) and tries (up to timeout). A call still running
    // past its lease would look stuck, and an operator could release it and have it run twice.
    let retry_wait = if retry.attempts > 1 && effect != Effect::Read {
        retry.max
    } else {
        Duration::ZERO
    };
    if timeout + retry_wait >= lease {
        return Err(invalid(
            f.at("timeout"),
            if retry_wait.is_zero() {
                format!("{timeout:?} must be shorter than the lease ({lease:?}), or a live call would look stuck")
            } else {
                format!("{timeout:?}, plus a retry's wait of up to retry.max ({retry_wait:?}), must be shorter than the lease ({lease:?}), or a live call would look stuck")
            },
        ));
    }
    Ok(retry)
}

/// The request signature a route checks, with its secret. Checked by every host, kept only by
/// the server: operator actions never check a signature.
fn signature(
    f: &Fields<'_>,
    r: &RawRoute,
    secrets: Secrets,
) -> Result<Option<Signature>, ConfigError> {
    let Some(s) = &r.signature else {
        return Ok(None);
    };
    let header = s
        .header
        .clone()
        .unwrap_or_else(|| "x-idemgate-signature".into());
    if !is_header_name(&header) {
        return Err(invalid(
            f.at("signature.header"),
            format!("{header:?} is not a header name"),
        ));
    }
    let tolerance = parse_duration(
        &f.at("signature.tolerance"),
        s.tolerance.as_deref().unwrap_or("5m"),
    )?;
    let secret = named_secret(
        &f.at("signature"),
        s.secret_env.as_deref(),
        s.secret_file.as_deref(),
        secrets == Secrets::Read,
    )?;
    Ok(secret.map(|secret| Signature {
        header: header.to_ascii_lowercase(),
        secret,
        tolerance,
    }))
}

/// The header the proxy's own upstream credential goes in, when the route has one.
fn upstream_auth_header(
    f: &Fields<'_>,
    r: &RawRoute,
) -> Result<Option<http::HeaderName>, ConfigError> {
    let Some(a) = &r.upstream_auth else {
        return Ok(None);
    };
    let name = a.header.as_deref().unwrap_or("authorization");
    http::HeaderName::from_bytes(name.as_bytes())
        .map(Some)
        .map_err(|_| {
            invalid(
                f.at("upstream_auth.header"),
                format!("{name:?} is not a header name"),
            )
        })
}

/// The credential the proxy adds upstream, in `header`. Read by every host that forwards:
/// operator replays and probes send it too. A host of operator actions that cannot read it gets
/// why instead (the second member), so that the routes whose credentials it has still forward.
fn upstream_auth(
    f: &Fields<'_>,
    r: &RawRoute,
    header: Option<&http::HeaderName>,
    secrets: Secrets,
) -> Result<(Option<UpstreamAuth>, Option<String>), ConfigError> {
    let (Some(a), Some(header)) = (&r.upstream_auth, header) else {
        return Ok((None, None));
    };
    let field = f.at("upstream_auth");
    let (env, file) = (a.secret_env.as_deref(), a.secret_file.as_deref());
    // How it is named is checked by every host, so none accepts a file `serve` refuses.
    named_secret(&field, env, file, false)?;
    let read = match secrets {
        Secrets::None => return Ok((None, None)),
        Secrets::Read => read_secret(&field, env, file)?,
        Secrets::Forward => match read_secret(&field, env, file) {
            Ok(s) => s,
            Err(e) => return Ok((None, Some(e.to_string()))),
        },
    };
    let mut value = http::HeaderValue::from_bytes(&read.0).map_err(|_| {
        // Never the value itself: it is a secret.
        invalid(&field, "the secret is not a valid header value")
    })?;
    value.set_sensitive(true);
    Ok((
        Some(UpstreamAuth {
            header: header.clone(),
            value,
        }),
        None,
    ))
}

/// The probe that asks the upstream whether a stuck entry's effect happened: GET or HEAD, a URL
/// with `{key}`.
fn reconcile(f: &Fields<'_>, r: &RawRoute) -> Result<Option<Reconcile>, ConfigError> {
    let Some(rc) = &r.reconcile else {
        return Ok(None);
    };
    let m = rc
        .method
        .clone()
        .unwrap_or_else(|| "GET".into())
        .to_ascii_uppercase();
    if m != "GET" && m != "HEAD" {
        return Err(invalid(
            f.at("reconcile.method"),
            "a probe must be GET or HEAD: it must not have side effects",
        ));
    }
    parse_upstream(
        &f.at("reconcile.url"),
        rc.url.split('?').next().unwrap_or(""),
    )?;
    if !rc.url.contains("{key}") {
        return Err(invalid(f.at("reconcile.url"), "must contain {key}"));
    }
    Ok(Some(Reconcile {
        method: m,
        url: rc.url.clone(),
    }))
}

/// Header names of a list field, in lower case.
fn header_names(
    f: &Fields<'_>,
    field: &str,
    v: &Option<Vec<String>>,
) -> Result<Vec<String>, ConfigError> {
    let v = v.clone().unwrap_or_default();
    if let Some(h) = v.iter().find(|h| !is_header_name(h)) {
        return Err(invalid(f.at(field), format!("{h:?} is not a header name")));
    }
    Ok(v.into_iter().map(|h| h.to_ascii_lowercase()).collect())
}
