//! `[routes.approval]`: which calls of a route wait for operators before they run, how many must
//! approve, and for how long. Its condition is CEL (as agentgateway and Kubernetes write
//! policies), compiled when the configuration is checked and evaluated on each call's body.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use idemgate_ledger::{ApprovalAsk, Effect};

use super::raw::{RawApproval, RawRoute};
use super::{invalid, parse_positive, read_secret, ConfigError, Protocol, Secrets};

/// An approval policy: a call it matches is held, unforwarded, until `approvals` distinct
/// operators approve it (it then runs), one rejects it, or `expires` passes (it never runs).
#[derive(Debug, Clone)]
pub struct Approval {
    /// Its name in the ledger and the log: the route's.
    pub name: String,
    /// `None`: every call of the route is held.
    pub when: Option<Condition>,
    pub approvals: u32,
    pub expires: Duration,
    /// How long a held call's request waits for a decision before it is answered.
    pub hold: Duration,
    /// `None`: any operator (role `operator` or above) may decide.
    pub approvers: Option<Vec<String>>,
    /// sha256 over what the policy says (hex): an approval is bound to it.
    pub hash: String,
    /// Where a new request for approval, each decision on it and an approved call's result are
    /// announced.
    pub notify: Option<Notify>,
}

/// `notify`: a webhook told of each new request for approval, how it was decided and how an
/// approved call's run ended (Slack-compatible), signed with `notify_secret_env`'s secret when
/// there is one.
#[derive(Debug, Clone)]
pub struct Notify {
    pub url: http::Uri,
    /// `None`: unsigned (or a host that reads no secrets, such as the CLI).
    pub secret: Option<super::Secret>,
}

/// Two policies are the same when they say the same: the hash covers the condition, the
/// approvals, the window and the approvers.
impl PartialEq for Approval {
    fn eq(&self, other: &Approval) -> bool {
        self.name == other.name
            && self.hash == other.hash
            && self.hold == other.hold
            && self.notify.as_ref().map(|n| &n.url) == other.notify.as_ref().map(|n| &n.url)
    }
}

impl Eq for Approval {}

impl Approval {
    /// Whether operator `name` may decide under this policy (their role is checked apart).
    pub fn admits(&self, name: &str) -> bool {
        self.approvers
            .as_ref()
            .is_none_or(|a| a.iter().any(|n| n == name))
    }

    /// The approval a call must wait for, if this policy matches it: `args` its JSON body or
    /// tool arguments, `subjects` its subjects. A condition that cannot be evaluated holds the
    /// call (fails closed), and the request says why (`unevaluated`).
    pub fn ask(
        &self,
        args: Option<&serde_json::Value>,
        subjects: &[(String, String)],
    ) -> Option<ApprovalAsk> {
        let unevaluated = match self.when.as_ref().map(|c| c.matches(args, subjects)) {
            Some(Ok(false)) => return None,
            Some(Err(why)) => Some(why),
            Some(Ok(true)) | None => None,
        };
        Some(ApprovalAsk {
            policy: self.name.clone(),
            policy_hash: self.hash.clone(),
            needed: self.approvals,
            expires_ms: i64::try_from(self.expires.as_millis()).unwrap_or(i64::MAX),
            approvers: self.approvers.clone(),
            unevaluated,
        })
    }
}

/// A compiled CEL condition over `args` (the call's JSON body, or an MCP tool's arguments) and
/// `subject` (the route's subjects by name).
#[derive(Clone)]
pub struct Condition {
    pub source: String,
    program: Arc<cel::Program>,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Condition").field(&self.source).finish()
    }
}

impl Condition {
    /// Whether the call matches. `Err` says why the condition could not be evaluated (a missing
    /// field, a wrong type, a result that is not a boolean): the caller holds the call anyway.
    pub fn matches(
        &self,
        args: Option<&serde_json::Value>,
        subjects: &[(String, String)],
    ) -> Result<bool, String> {
        let mut ctx = cel::Context::default();
        ctx.add_variable_from_value("args", args.map_or(cel::Value::Null, cel_value));
        let subject: HashMap<String, cel::Value> = subjects
            .iter()
            .map(|(n, v)| (n.clone(), cel::Value::String(Arc::new(v.clone()))))
            .collect();
        ctx.add_variable_from_value("subject", subject);
        match self.program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("the condition gave {other:?}, not a boolean")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// JSON as CEL sees it: every number a double (`args.amount > 50000` compares numbers whatever
/// JSON wrote), a decimal sent as a string stays a string (`double(args.amount)` converts).
fn cel_value(v: &serde_json::Value) -> cel::Value {
    use serde_json::Value as J;
    match v {
        J::Null => cel::Value::Null,
        J::Bool(b) => cel::Value::Bool(*b),
        J::Number(n) => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        J::String(s) => cel::Value::String(Arc::new(s.clone())),
        J::Array(a) => cel::Value::List(Arc::new(a.iter().map(cel_value).collect())),
        J::Object(o) => o
            .iter()
            .map(|(k, v)| (k.clone(), cel_value(v)))
            .collect::<HashMap<String, cel::Value>>()
            .into(),
    }
}

/// Checks `[routes.approval]` of route `r` (`field` is its place in the file). A held call is
/// forwarded later by idemgate itself, without the client's credentials (never stored): the
/// route must carry its own (`has_upstream_auth`). An MCP route's approvals are per tool.
pub(super) fn approval(
    field: &str,
    r: &RawRoute,
    (effect, protocol): (Effect, Protocol),
    has_upstream_auth: bool,
    secrets: Secrets,
) -> Result<Option<Approval>, ConfigError> {
    let Some(a) = &r.approval else {
        return Ok(None);
    };
    if protocol == Protocol::Mcp {
        return Err(invalid(
            field,
            "an MCP route holds calls per tool: [routes.tools.\"NAME\".approval]",
        ));
    }
    if effect == Effect::Read {
        return Err(invalid(
            field,
            "a read route claims nothing, so it holds nothing: approvals are for write routes",
        ));
    }
    policy(field, &r.name, a, has_upstream_auth, secrets).map(Some)
}

/// An approval policy named `name` (a route's, or `route/tool`), checked.
pub(super) fn policy(
    field: &str,
    name: &str,
    a: &RawApproval,
    has_upstream_auth: bool,
    secrets: Secrets,
) -> Result<Approval, ConfigError> {
    if !has_upstream_auth {
        return Err(invalid(
            field,
            "a held call is forwarded later by idemgate, without the client's credentials \
             (which are never stored): set the route's upstream_auth",
        ));
    }
    let when = a
        .when
        .as_deref()
        .map(|src| condition(&format!("{field}.when"), src))
        .transpose()?;
    let approvals = a.approvals.unwrap_or(1);
    if approvals == 0 {
        return Err(invalid(format!("{field}.approvals"), "must be at least 1"));
    }
    let expires = parse_positive(
        &format!("{field}.expires"),
        a.expires.as_deref().unwrap_or("1h"),
        "",
    )?;
    let hold = match &a.hold {
        Some(h) => parse_positive(&format!("{field}.hold"), h, "")?,
        None => Duration::from_secs(25),
    };
    if let Some(names) = &a.approvers {
        if names.iter().any(|n| n.trim().is_empty()) || names.is_empty() {
            return Err(invalid(
                format!("{field}.approvers"),
                "name at least one operator, each non-empty",
            ));
        }
        if (names.len() as u32) < approvals {
            return Err(invalid(
                format!("{field}.approvers"),
                format!("{approvals} approvals need at least as many approvers"),
            ));
        }
    }
    let said = serde_json::json!({
        "when": a.when,
        "approvals": approvals,
        "expires_ms": expires.as_millis() as u64,
        "approvers": a.approvers,
    });
    let notify = notify(field, a, secrets)?;
    Ok(Approval {
        notify,
        name: name.to_owned(),
        when,
        approvals,
        expires,
        hold,
        approvers: a.approvers.clone(),
        hash: hex::encode(Sha256::digest(said.to_string().as_bytes())),
    })
}

/// A CEL condition, compiled; it may read only `args` and `subject`.
fn condition(field: &str, src: &str) -> Result<Condition, ConfigError> {
    let program = cel::Program::compile(src)
        .map_err(|e| invalid(field, format!("not a CEL expression: {e}")))?;
    let names = program.references();
    if let Some(v) = names
        .variables()
        .into_iter()
        .find(|v| *v != "args" && *v != "subject")
    {
        return Err(invalid(
            field,
            format!("{v:?} is not known here: a condition reads args and subject"),
        ));
    }
    Ok(Condition {
        source: src.to_owned(),
        program: Arc::new(program),
    })
}

/// `notify` and `notify_secret_env`: an `http(s)://` URL, and the name of the variable holding
/// the secret the body is signed with (read only by a host that reads secrets).
fn notify(field: &str, a: &RawApproval, secrets: Secrets) -> Result<Option<Notify>, ConfigError> {
    let Some(url) = &a.notify else {
        if a.notify_secret_env.is_some() {
            return Err(invalid(
                format!("{field}.notify_secret_env"),
                "signs what notify sends: set notify too",
            ));
        }
        return Ok(None);
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| invalid(format!("{field}.notify"), format!("{url:?}: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err(invalid(
            format!("{field}.notify"),
            format!("{url:?}: an http:// or https:// URL"),
        ));
    }
    let secret = match (&a.notify_secret_env, secrets) {
        (Some(var), Secrets::Read) => Some(read_secret(
            &format!("{field}.notify_secret_env"),
            Some(var),
            None,
        )?),
        _ => None,
    };
    Ok(Some(Notify { url: uri, secret }))
}
