//! Resolve: an operator decides a stuck, released or failed entry — completed (with the response
//! retries will get, or an external reference), failed, or released to run again. Previewed,
//! checked before anything is written, and logged with the operator and the reason.

use idemgate_ledger::{
    is_secret_header, now_millis, Action, Actor, Effect, EntrySummary, Resolution, ResolveRequest,
    ResponseRecord, ANSWER_HEADERS, MAX_RESPONSE_BODY,
};
use serde::{Deserialize, Serialize};

use crate::{validate_actor, Ops, OpsError, OpsResult, Preview, DEFAULT_RESOLUTION_TTL_MS};

/// How an operator resolves an entry.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolveAs {
    /// It happened: retries get the given response (or one naming the external reference).
    Completed,
    /// It failed for good: retries get the given error response.
    Failed,
    /// It did not happen: the key may run again.
    Released,
}

impl ResolveAs {
    /// `completed`, `failed` or `released`.
    pub fn parse(s: &str) -> Option<ResolveAs> {
        match s {
            "completed" => Some(ResolveAs::Completed),
            "failed" => Some(ResolveAs::Failed),
            "released" => Some(ResolveAs::Released),
            _ => None,
        }
    }

    /// The operator action it is: resolving as released releases the entry.
    pub fn action(self) -> Action {
        match self {
            ResolveAs::Completed | ResolveAs::Failed => Action::Resolve,
            ResolveAs::Released => Action::Release,
        }
    }
}

/// A resolve of one entry: as what, with which response, by whom and why.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveCmd {
    /// The entry.
    pub entry_id: i64,
    /// As what.
    #[serde(rename = "as")]
    pub as_: ResolveAs,
    /// The response retries will get (completed: this or `external_ref` is required).
    pub response: Option<ResponseRecord>,
    /// A reference to the effect in the upstream system (e.g. the charge id found there).
    pub external_ref: Option<String>,
    /// Who acts, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 200), pattern(r"\S")))]
    pub operator: String,
    /// Why, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 4000), pattern(r"\S")))]
    pub reason: String,
    /// Needed when the entry is on a `destructive` route.
    #[serde(default)]
    pub confirm_destructive: bool,
}

impl ResolveCmd {
    /// Checks everything the command says without the ledger: the actor, and the response
    /// retries will get ([`check_response`]). What [`Ops::resolve`] records.
    pub fn check(&self) -> OpsResult<(Actor, Resolution)> {
        let actor = validate_actor(&self.operator, &self.reason)?;
        let external_ref = self
            .external_ref
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        if external_ref.is_some_and(|x| x.chars().count() > 500) {
            return Err(OpsError::invalid("external_ref", "at most 500 characters"));
        }
        let response = self
            .response
            .as_ref()
            .map(|r| check_response(self.as_, r))
            .transpose()?;
        let resolution = match self.as_ {
            ResolveAs::Completed => {
                let response = match (response, external_ref) {
                    (Some(r), _) => r,
                    (None, Some(x)) => ResponseRecord {
                        status: 200,
                        headers: vec![("content-type".into(), "application/json".into())],
                        body: serde_json::to_vec(&serde_json::json!({
                            "idemgate": "resolved-by-operator",
                            "external_ref": x,
                        }))
                        .unwrap_or_default(),
                    },
                    (None, None) => {
                        return Err(OpsError::invalid(
                            "response",
                            "resolving as completed needs the response to replay or an external reference",
                        ))
                    }
                };
                Resolution::Completed {
                    response,
                    external_ref: external_ref.map(str::to_owned),
                }
            }
            ResolveAs::Failed => Resolution::Failed { response },
            ResolveAs::Released => {
                if response.is_some() {
                    return Err(OpsError::invalid(
                        "response",
                        "a released entry has no response",
                    ));
                }
                Resolution::Released
            }
        };
        Ok((actor, resolution))
    }
}

/// An operator's response, as retries of the entry will get it, checked: at most
/// [`MAX_RESPONSE_BODY`], a final status (a
/// failed entry's an error, 400-599, so that no retry reads it as a success), no body where the
/// status allows none, and headers that are valid HTTP, not ones the proxy sets when it answers
/// ([`ANSWER_HEADERS`]) and not credentials (never stored). Without a `content-type`, a body
/// gets `application/json` when it is JSON and `text/plain; charset=utf-8` when not.
pub fn check_response(as_: ResolveAs, r: &ResponseRecord) -> OpsResult<ResponseRecord> {
    let (statuses, what) = match as_ {
        ResolveAs::Failed => (400..=599, "a failed entry's response is an error: 400-599"),
        _ => (200..=599, "must be a final HTTP status, 200-599"),
    };
    if !statuses.contains(&r.status) {
        return Err(OpsError::invalid("response.status", what));
    }
    if r.body.len() > MAX_RESPONSE_BODY {
        return Err(OpsError::invalid(
            "response.body",
            &format!(
                "is more than {} MiB, the most a stored response holds",
                MAX_RESPONSE_BODY >> 20
            ),
        ));
    }
    if matches!(r.status, 204 | 205 | 304) && !r.body.is_empty() {
        return Err(OpsError::invalid(
            "response.body",
            &format!("a {} response has no body", r.status),
        ));
    }
    let mut headers = Vec::with_capacity(r.headers.len() + 1);
    for (name, value) in &r.headers {
        let n = http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            OpsError::invalid(
                "response.headers",
                &format!("{name:?} is not a header name"),
            )
        })?;
        let n = n.as_str();
        if http::HeaderValue::from_str(value).is_err() {
            return Err(OpsError::invalid(
                "response.headers",
                &format!("the value of {n} is not a header value (visible ASCII)"),
            ));
        }
        if ANSWER_HEADERS.contains(&n) {
            return Err(OpsError::invalid(
                "response.headers",
                &format!("{n} is set by idemgate whenever it answers; leave it out"),
            ));
        }
        if is_secret_header(n) {
            return Err(OpsError::invalid(
                "response.headers",
                &format!("{n} carries a credential, which the ledger never stores; leave it out"),
            ));
        }
        headers.push((n.to_owned(), value.trim().to_owned()));
    }
    if !r.body.is_empty() && !headers.iter().any(|(n, _)| n == "content-type") {
        let ct = if serde_json::from_slice::<serde::de::IgnoredAny>(&r.body).is_ok() {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        headers.push(("content-type".into(), ct.into()));
    }
    Ok(ResponseRecord {
        status: r.status,
        headers,
        body: r.body.clone(),
    })
}

/// A resolution of an MCP `tools/call` entry, whose retries are answered in JSON-RPC: the
/// operator's response as the call's response. A JSON-RPC response is kept as it is; any other
/// JSON body is the tool's result (`isError: true` when the entry failed); other text becomes
/// the result's text; an external reference alone becomes a result that names it.
pub fn as_tool_call(r: Resolution) -> Resolution {
    use serde_json::{json, Value};
    let message = |body: &[u8], failed: bool| -> Vec<u8> {
        let v: Option<Value> = serde_json::from_slice(body).ok();
        let rpc = v.as_ref().is_some_and(|v| {
            v.get("jsonrpc").is_some() && (v.get("result").is_some() || v.get("error").is_some())
        });
        let m = match v {
            Some(v) if rpc => v,
            Some(Value::Object(mut result)) if result.contains_key("content") => {
                if failed {
                    result.insert("isError".into(), Value::Bool(true));
                }
                json!({"jsonrpc": "2.0", "id": null, "result": result})
            }
            other => {
                let text = match other {
                    Some(v) => v.to_string(),
                    None => String::from_utf8_lossy(body).into_owned(),
                };
                json!({"jsonrpc": "2.0", "id": null, "result": {
                    "content": [{"type": "text", "text": text}], "isError": failed}})
            }
        };
        serde_json::to_vec(&m).unwrap_or_default()
    };
    let record = |body: Vec<u8>| ResponseRecord {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body,
    };
    match r {
        Resolution::Completed {
            response,
            external_ref: Some(x),
        } if serde_json::from_slice::<Value>(&response.body)
            .ok()
            .and_then(|v| v.get("idemgate").cloned())
            == Some(json!("resolved-by-operator")) =>
        {
            let m = json!({"jsonrpc": "2.0", "id": null, "result": {
                "content": [{"type": "text", "text": format!("resolved by an operator: {x}")}],
                "structuredContent": {"idemgate": "resolved-by-operator", "external_ref": x}}});
            Resolution::Completed {
                response: record(serde_json::to_vec(&m).unwrap_or_default()),
                external_ref: Some(x),
            }
        }
        Resolution::Completed {
            response,
            external_ref,
        } => Resolution::Completed {
            response: record(message(&response.body, false)),
            external_ref,
        },
        Resolution::Failed {
            response: Some(response),
        } => Resolution::Failed {
            response: Some(record(message(&response.body, true))),
        },
        other => other,
    }
}

/// An operator's review of an incident (its first entry's id): looked at, and why.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewCmd {
    /// The incident: its first entry, which the others duplicate.
    pub entry_id: i64,
    /// Who reviewed it.
    #[cfg_attr(feature = "ts", schemars(length(max = 200), pattern(r"\S")))]
    pub operator: String,
    /// What they found.
    #[cfg_attr(feature = "ts", schemars(length(max = 4000), pattern(r"\S")))]
    pub reason: String,
}

impl Ops {
    /// Marks an incident reviewed, through its newest suspect (a later one opens it again), and
    /// logs it; refused for an entry that begins no incident.
    pub fn review_incident(&self, cmd: &ReviewCmd) -> OpsResult<idemgate_ledger::Review> {
        let actor = validate_actor(&cmd.operator, &cmd.reason)?;
        let at = now_millis();
        let through = self
            .store
            .review(idemgate_ledger::ReviewRequest {
                entry_id: cmd.entry_id,
                actor: actor.clone(),
                at,
            })
            .wait()?;
        Ok(idemgate_ledger::Review {
            operator: actor.operator,
            reason: actor.reason,
            at,
            through,
        })
    }

    /// What `resolve` would touch: as `as_` says, or as any resolve but a release.
    pub fn preview_resolve(&self, id: i64, as_: Option<ResolveAs>) -> OpsResult<Preview> {
        let e = self.store.entry(id, now_millis())?.summary;
        let action = as_.map_or(Action::Resolve, ResolveAs::action);
        let refused = action.refusal(e.state, e.stuck);
        let (ids, keys) = match refused {
            None => (vec![e.id], vec![e.key.clone()]),
            Some(_) => (vec![], vec![]),
        };
        Ok(Preview {
            action: action.as_str().into(),
            count: ids.len(),
            ids,
            keys,
            destructive: refused.is_none() && e.effect == Effect::Destructive,
            skipped: refused.map(|why| (e.id, why)).into_iter().collect(),
        })
    }

    /// Resolves a stuck, released or failed entry as `cmd` says; refused on an entry in flight,
    /// completed or held, and a release of one already released.
    pub fn resolve(&self, cmd: &ResolveCmd) -> OpsResult<EntrySummary> {
        let (actor, mut resolution) = cmd.check()?;
        let e = self.store.entry(cmd.entry_id, now_millis())?.summary;
        if e.tool.is_some() {
            resolution = as_tool_call(resolution);
        }
        if let Some(why) = cmd.as_.action().refusal(e.state, e.stuck) {
            return Err(OpsError::Conflict(format!(
                "entry {} cannot be resolved: {why}",
                cmd.entry_id
            )));
        }
        if e.effect == Effect::Destructive && !cmd.confirm_destructive {
            return Err(OpsError::ConfirmationRequired(vec![e.key]));
        }
        Ok(self
            .store
            .resolve(ResolveRequest {
                entry_id: cmd.entry_id,
                resolution,
                actor,
                ttl_ms: DEFAULT_RESOLUTION_TTL_MS,
                at: now_millis(),
            })
            .wait()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(status: u16, headers: &[(&str, &str)], body: &str) -> ResponseRecord {
        ResponseRecord {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn an_operators_response_is_one_a_replay_can_send() {
        use ResolveAs::{Completed, Failed};
        let refused = [
            (Completed, resp(999, &[], "{}"), "response.status"),
            (Completed, resp(101, &[], ""), "response.status"),
            (Failed, resp(200, &[], "{}"), "response.status"),
            (Failed, resp(302, &[], ""), "response.status"),
            (Completed, resp(204, &[], "x"), "response.body"),
            (
                Completed,
                resp(200, &[("Content-Length", "2")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("transfer-encoding", "chunked")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("connection", "close")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("idempotent-replayed", "false")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("set-cookie", "s=1")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("bad name", "x")], "{}"),
                "response.headers",
            ),
            (
                Completed,
                resp(200, &[("x-a", "line\nbreak")], "{}"),
                "response.headers",
            ),
        ];
        for (as_, r, field) in refused {
            match check_response(as_, &r) {
                Err(OpsError::Invalid { field: f, .. }) => assert_eq!(f, field, "{r:?}"),
                other => panic!("{r:?}: expected invalid {field}, got {other:?}"),
            }
        }
        let ct = |r: &ResponseRecord| {
            r.headers
                .iter()
                .filter(|(n, _)| n == "content-type")
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        };
        let json = check_response(
            Completed,
            &resp(201, &[("X-Charge", " ch_1 ")], r#"{"id":1}"#),
        )
        .expect("a JSON body");
        assert_eq!(json.headers[0], ("x-charge".into(), "ch_1".into()));
        assert_eq!(ct(&json), ["application/json"]);
        let text = check_response(Failed, &resp(402, &[], "card declined")).expect("text");
        assert_eq!(ct(&text), ["text/plain; charset=utf-8"]);
        let given = check_response(
            Completed,
            &resp(200, &[("Content-Type", "text/csv")], "a,b"),
        )
        .expect("a content type given");
        assert_eq!(ct(&given), ["text/csv"]);
        let empty = check_response(Completed, &resp(204, &[], "")).expect("no body");
        assert!(empty.headers.is_empty());
    }
}
