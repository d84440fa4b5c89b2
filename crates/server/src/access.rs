//! Who is calling the admin API, and whether their role lets them. A bearer token names one
//! operator (`[[operators]]`, or the shared admin token as the operator `admin`); each route's
//! least role comes from the command table (`idemgate_ops::commands`), so a route the table does
//! not list is refused to everyone. Bad tokens from one address are slowed down so that a token
//! cannot be guessed online.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use idemgate_config::Secret;
use idemgate_config::{OperatorCred, TokenHash, SHARED_ADMIN};
use idemgate_ops::commands::{self, Role};
use idemgate_proxy::problem::{Code, Problem};
use serde::Serialize;
use serde_json::Value;
use subtle::ConstantTimeEq;

/// The operator a request was made by, as `GET /admin/v1/whoami` answers.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// The name the log records for what they do.
    pub name: String,
    pub role: Role,
    /// Signed in with the shared admin token, which names no one: an action's `operator` member
    /// is recorded as typed, marked as a claim made with that token.
    pub shared: bool,
}

impl Identity {
    /// Who asks, as an operation judges a decision of theirs: the operator a named token is,
    /// or no one known for the shared token, whose actions each name whom they claim.
    pub fn caller(&self) -> idemgate_ops::dispatch::Decider<'_> {
        if self.shared {
            idemgate_ops::dispatch::Decider::default()
        } else {
            idemgate_ops::dispatch::Decider::operator(&self.name)
        }
    }
}

/// Why a request was refused: the label of `idemgate_admin_denied_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No `Authorization: Bearer` token.
    Missing,
    /// A token no operator has.
    Invalid,
    /// Too many bad tokens from this address lately: try again after this long.
    Throttled(Duration),
    /// A role below what the route needs.
    Role { need: Role, have: Role },
    /// A route the command table does not list: no role may call it.
    Unlisted,
}

impl Denied {
    pub fn reason(self) -> &'static str {
        match self {
            Denied::Missing => "missing",
            Denied::Invalid => "invalid",
            Denied::Throttled(_) => "throttled",
            Denied::Role { .. } => "role",
            Denied::Unlisted => "unlisted",
        }
    }
}

/// Bad tokens an address may send before it is slowed down (typos, a stale token in a script).
const FREE_FAILURES: u32 = 5;
/// The wait after the first failure past the free ones; it doubles with each one after.
const FIRST_WAIT: Duration = Duration::from_secs(1);
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Addresses remembered at most; past it, those whose wait is over are forgotten first.
const MAX_ADDRESSES: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    /// No token from this address is looked at before then.
    until: Instant,
}

/// The admin API's credentials and the addresses that sent bad ones.
#[derive(Debug)]
pub struct Access {
    creds: std::sync::RwLock<Arc<Creds>>,
    failures: Mutex<HashMap<IpAddr, Failures>>,
}

/// Who may use the admin API: the operators, and the shared admin token as the last of them.
#[derive(Debug)]
struct Creds {
    operators: Vec<OperatorCred>,
    /// Whether the last of `operators` is the shared admin token.
    shared: bool,
}

impl Creds {
    fn new(shared: Option<&Secret>, operators: &[OperatorCred]) -> Creds {
        let mut all: Vec<OperatorCred> = operators.to_vec();
        if let Some(t) = shared {
            all.push(OperatorCred {
                name: SHARED_ADMIN.to_owned(),
                role: Role::Admin,
                token_hash: TokenHash::of(&t.0),
            });
        }
        Creds {
            operators: all,
            shared: shared.is_some(),
        }
    }
}

impl Access {
    /// The configured operators, and the shared admin token (the operator `admin`) when there is
    /// one.
    pub fn new(shared: Option<&Secret>, operators: &[OperatorCred]) -> Access {
        Access {
            creds: std::sync::RwLock::new(Arc::new(Creds::new(shared, operators))),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Replaces who may use the admin API (a reload), for the requests that start from now on. The
    /// slowdown of addresses that sent bad tokens stays.
    pub fn replace(&self, shared: Option<&Secret>, operators: &[OperatorCred]) {
        let creds = Arc::new(Creds::new(shared, operators));
        *self.creds.write().unwrap_or_else(|p| p.into_inner()) = creds;
    }

    fn creds(&self) -> Arc<Creds> {
        self.creds.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether anyone can use the admin API at all.
    pub fn is_empty(&self) -> bool {
        self.creds().operators.is_empty()
    }

    /// The operator a bearer token stands for, from `from`, at `now`.
    pub fn authenticate(
        &self,
        token: Option<&str>,
        from: IpAddr,
        now: Instant,
    ) -> Result<Identity, Denied> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(Denied::Missing);
        };
        if let Some(f) = self.lock().get(&from) {
            if f.until > now {
                return Err(Denied::Throttled(f.until - now));
            }
        }
        let given = TokenHash::of(token.as_bytes());
        // Every hash is compared, each in constant time: how long this takes says nothing about
        // which operator, if any, the token is close to.
        let creds = self.creds();
        let mut found: Option<(usize, &OperatorCred)> = None;
        for (i, o) in creds.operators.iter().enumerate() {
            if bool::from(o.token_hash.0.ct_eq(&given.0)) {
                found = Some((i, o));
            }
        }
        let mut failures = self.lock();
        match found {
            Some((i, o)) => {
                failures.remove(&from);
                Ok(Identity {
                    name: o.name.clone(),
                    role: o.role,
                    shared: creds.shared && i + 1 == creds.operators.len(),
                })
            }
            None => {
                if failures.len() >= MAX_ADDRESSES && !failures.contains_key(&from) {
                    failures.retain(|_, f| f.until > now);
                    if failures.len() >= MAX_ADDRESSES {
                        failures.clear();
                    }
                }
                let f = failures.entry(from).or_insert(Failures {
                    count: 0,
                    until: now,
                });
                f.count = f.count.saturating_add(1);
                if f.count > FREE_FAILURES {
                    let doublings = (f.count - FREE_FAILURES - 1).min(16);
                    f.until = now + (FIRST_WAIT * 2u32.pow(doublings)).min(MAX_WAIT);
                }
                Err(Denied::Invalid)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Failures>> {
        // A panic while holding it left only counters behind.
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether `who` may call `method path` (the path as the router matched it). A route the
/// command table does not list needs more than any role has.
pub fn authorize(who: &Identity, method: &str, path: &str) -> Result<(), Denied> {
    // HEAD is GET without the body: the same role reads the same thing.
    let method = if method.eq_ignore_ascii_case("HEAD") {
        "GET"
    } else {
        method
    };
    match commands::for_route(method, path).map(|c| c.role) {
        Some(need) if who.role >= need => Ok(()),
        Some(need) => Err(Denied::Role {
            need,
            have: who.role,
        }),
        None => Err(Denied::Unlisted),
    }
}

/// The admin API's gate: the caller's operator from the bearer token, their role checked against
/// the route's, and the [`Identity`] handed to the handler. A refusal changes nothing, is counted
/// in `idemgate_admin_denied_total{reason}`, and is problem+json.
pub async fn guard(State(access): State<Arc<Access>>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    let from = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let checked = access
        .authenticate(token, from, Instant::now())
        .and_then(|who| authorize(&who, req.method().as_str(), &path).map(|()| who));
    match checked {
        Ok(who) => {
            req.extensions_mut().insert(who);
            next.run(req).await
        }
        // A method the path does not take: 405, as the router would answer, without reaching it
        // (so that a method the router serves but the table lacks never runs).
        Err(Denied::Unlisted) if commands::methods_of(&path).next().is_some() => {
            let allow: Vec<&str> = commands::methods_of(&path).collect();
            let mut r = Problem::new(
                Code::MethodNotAllowed,
                format!("{path} takes {}", allow.join(", ")),
            )
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&allow.join(", ")) {
                r.headers_mut().insert(header::ALLOW, v);
            }
            r
        }
        Err(d) => {
            metrics::counter!("idemgate_admin_denied_total", "reason" => d.reason()).increment(1);
            refusal(d, req.method().as_str(), &path)
        }
    }
}

fn refusal(d: Denied, method: &str, path: &str) -> Response {
    match d {
        Denied::Missing | Denied::Invalid => {
            let mut r = Problem::new(
                Code::Unauthorized,
                "send Authorization: Bearer <token> (an operator's token, or the admin token)",
            )
            .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
        Denied::Throttled(wait) => Problem::new(
            Code::TooManyAttempts,
            "too many bad tokens from this address: wait, then send the right one",
        )
        .retry_after(wait.as_secs_f64().ceil().max(1.0) as u64)
        .into_response(),
        Denied::Role { need, have } => Problem::new(
            Code::Forbidden,
            format!("{method} {path} needs the role {need}; this token's is {have}"),
        )
        .into_response(),
        Denied::Unlisted => Problem::new(
            Code::Forbidden,
            format!("{method} {path} is in no role's commands"),
        )
        .into_response(),
    }
}

/// The operator recorded for a name typed by a client of the shared admin token: the name, marked
/// as unverified. A blank name stays blank, for the operation to refuse.
pub fn claimed(typed: &str) -> String {
    let typed = typed.trim();
    if typed.is_empty() {
        return String::new();
    }
    format!("{typed} (shared admin token)")
}

/// The token of an `Authorization: Bearer <token>` value. The scheme's name is
/// case-insensitive (RFC 9110 §11.1): `bearer` is as good as `Bearer`.
fn bearer(v: &str) -> Option<&str> {
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// An action's JSON body with its operator: the authenticated one's name. A body may leave
/// `operator` out or name that operator; one naming someone else is refused rather than
/// rewritten, so that a client learns its records would not say what it meant. With the shared
/// admin token, which names no one, a name given is recorded as the claim it is ([`claimed`]).
pub fn acting(who: &Identity, body: &mut Value) -> Result<(), Problem> {
    if let Value::Object(members) = body {
        let name = match members.get("operator") {
            None | Some(Value::Null) => who.name.clone(),
            Some(Value::String(n)) if n.trim() == who.name => who.name.clone(),
            Some(Value::String(n)) if who.shared => claimed(n),
            Some(other) => {
                return Err(Problem::new(
                    Code::OperatorMismatch,
                    format!(
                        "operator {other}: this token is {:?}'s, and the log records actions \
                         under the token's operator; leave operator out",
                        who.name
                    ),
                ))
            }
        };
        members.insert("operator".into(), Value::String(name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(name: &str, role: Role, token: &str) -> OperatorCred {
        OperatorCred {
            name: name.into(),
            role,
            token_hash: TokenHash::of(token.as_bytes()),
        }
    }

    #[test]
    fn a_token_names_its_operator_and_the_shared_one_is_admin() {
        let a = Access::new(
            Some(&Secret(b"shared".to_vec())),
            &[cred("vic", Role::Viewer, "t-vic")],
        );
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let now = Instant::now();
        assert_eq!(
            a.authenticate(Some("t-vic"), ip, now),
            Ok(Identity {
                name: "vic".into(),
                role: Role::Viewer,
                shared: false,
            })
        );
        assert_eq!(
            a.authenticate(Some("shared"), ip, now)
                .map(|i| (i.name, i.role, i.shared)),
            Ok(("admin".into(), Role::Admin, true))
        );
        assert_eq!(a.authenticate(None, ip, now), Err(Denied::Missing));
        assert_eq!(a.authenticate(Some(""), ip, now), Err(Denied::Missing));
        assert_eq!(a.authenticate(Some("t-vi"), ip, now), Err(Denied::Invalid));
    }

    #[test]
    fn bad_tokens_from_one_address_are_slowed_and_others_are_not() {
        let a = Access::new(None, &[cred("ann", Role::Admin, "good")]);
        let bad: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..FREE_FAILURES + 1 {
            assert_eq!(a.authenticate(Some("nope"), bad, t0), Err(Denied::Invalid));
        }
        // Even the right token waits out the backoff: a guess that lands cannot be told apart.
        assert_eq!(
            a.authenticate(Some("good"), bad, t0),
            Err(Denied::Throttled(FIRST_WAIT))
        );
        assert!(a.authenticate(Some("good"), other, t0).is_ok());
        let later = t0 + FIRST_WAIT;
        assert!(a.authenticate(Some("good"), bad, later).is_ok());
        // A success forgets the failures.
        assert_eq!(
            a.authenticate(Some("nope"), bad, later),
            Err(Denied::Invalid)
        );
        assert!(a.authenticate(Some("good"), bad, later).is_ok());
        // Each failure past the free ones doubles the wait, up to the ceiling.
        for _ in 0..FREE_FAILURES + 1 {
            let _ = a.authenticate(Some("nope"), bad, later);
        }
        let mut at = later;
        let mut waits = Vec::new();
        for _ in 0..3 {
            match a.authenticate(Some("nope"), bad, at) {
                Err(Denied::Throttled(w)) => {
                    at += w;
                    let _ = a.authenticate(Some("nope"), bad, at);
                    waits.push(w);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(waits, [FIRST_WAIT, FIRST_WAIT * 2, FIRST_WAIT * 4]);
    }

    #[test]
    fn roles_follow_the_command_table() {
        let who = |role| Identity {
            name: "x".into(),
            role,
            shared: false,
        };
        assert!(authorize(&who(Role::Viewer), "GET", "/admin/v1/entries").is_ok());
        assert_eq!(
            authorize(&who(Role::Viewer), "POST", "/admin/v1/purge"),
            Err(Denied::Role {
                need: Role::Admin,
                have: Role::Viewer
            })
        );
        assert!(authorize(
            &who(Role::Operator),
            "POST",
            "/admin/v1/entries/{entry_id}/resolve"
        )
        .is_ok());
        assert!(authorize(&who(Role::Operator), "POST", "/admin/v1/purge").is_err());
        assert!(authorize(&who(Role::Admin), "POST", "/admin/v1/purge").is_ok());
        assert_eq!(
            authorize(&who(Role::Admin), "GET", "/admin/v1/not-in-the-table"),
            Err(Denied::Unlisted)
        );
    }
}
