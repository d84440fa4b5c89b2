//! One handler for every operation ([`idemgate_ops::op`]): the route, the request and the way
//! it runs all come from the operation's declaration. The request is the operation's path
//! parameters with its query (`GET`, `DELETE`) or its JSON body (`POST`); an action's `operator`
//! is the token's ([`access::acting`]); long work answers as [`super::long_work`] says.

use std::sync::Arc;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, RawPathParams, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Extension, Json, Router};
use idemgate_ops::dispatch::{self, Args, Host, Kind, Spec};
use idemgate_ops::op::Answers;
use idemgate_proxy::problem::{Code, Problem};
use serde_json::Value;

use super::{bad_json, blocking, long_work, wants_lines, AdminState};
use crate::access::{self, Identity};

/// `router` with a route for every operation the admin API offers.
pub(super) fn routes(mut router: Router<AdminState>) -> Router<AdminState> {
    let mut by_path: Vec<(&'static str, MethodRouter<AdminState>)> = Vec::new();
    for spec in dispatch::SPECS {
        let Some(http) = spec.http else { continue };
        let filter = match http.method {
            "GET" => MethodFilter::GET,
            "DELETE" => MethodFilter::DELETE,
            _ => MethodFilter::POST,
        };
        let handler = on(
            filter,
            move |State(s): State<AdminState>,
                  Extension(who): Extension<Identity>,
                  params: Result<RawPathParams, RawPathParamsRejection>,
                  headers: HeaderMap,
                  req: Request| async move {
                call(s, spec, &who, params, &headers, req).await
            },
        )
        .layer(DefaultBodyLimit::max(spec.max_body));
        match by_path.iter_mut().find(|(p, _)| *p == http.path) {
            Some((_, r)) => *r = std::mem::take(r).merge(handler),
            None => by_path.push((http.path, handler)),
        }
    }
    for (path, r) in by_path {
        router = router.route(path, r);
    }
    router
}

/// Runs `spec` for one request.
async fn call(
    s: AdminState,
    spec: &'static Spec,
    who: &Identity,
    params: Result<RawPathParams, RawPathParamsRejection>,
    headers: &HeaderMap,
    req: Request,
) -> Result<Response, Problem> {
    let args = request(spec, who, params, req).await?;
    let name = spec.name;
    let answer = match spec.kind {
        // Under the routes a request that starts now is served under: an entry's view and the
        // previews judge a replay or a reconcile by them.
        Kind::Ledger => {
            let engine = s.live.engine();
            let who = who.clone();
            blocking(move || {
                let host = Host::routes(&engine.cfg).by(who.caller());
                dispatch::run(&s.ops, host, name, args, &mut |_| true)
            })
            .await?
        }
        Kind::Job | Kind::UpstreamJob => {
            let engine = s.live.engine();
            return long_work(wants_lines(headers), move |progress| {
                dispatch::run(&s.ops, Host::upstream(&engine), name, args, progress)
            })
            .await;
        }
        // On a task of its own, as the proxy runs a write: an operator's client that goes away
        // does not cancel it between the upstream's effect and the ledger's record of it.
        Kind::Upstream => {
            let runner = s.live.engine();
            let e = Arc::clone(&runner);
            runner
                .to_the_end(
                    async move { Ok(dispatch::run_upstream(&s.ops, &e, name, args).await?) },
                )
                .await?
        }
    };
    Ok(respond(spec, answer))
}

/// The answer as the operation declares it: `200` with it, `202` with its job's `Location`, or
/// `204`.
fn respond(spec: &Spec, answer: Value) -> Response {
    match spec.answers {
        Answers::Json => Json(answer).into_response(),
        Answers::NoContent => StatusCode::NO_CONTENT.into_response(),
        Answers::Accepted(path) => {
            let mut location = path.to_owned();
            for (k, v) in answer.as_object().into_iter().flatten() {
                if let Some(v) = v.as_str() {
                    location = location.replace(&format!("{{{k}}}"), v);
                }
            }
            let mut r = (StatusCode::ACCEPTED, Json(answer)).into_response();
            if let Ok(v) = HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
    }
}

/// The operation's request: its path parameters, then its query or its JSON body.
async fn request(
    spec: &Spec,
    who: &Identity,
    params: Result<RawPathParams, RawPathParamsRejection>,
    req: Request,
) -> Result<Args, Problem> {
    let params = params.map_err(|e| Problem::new(Code::InvalidArgument, e.body_text()))?;
    let query = req.uri().query().unwrap_or("").to_owned();
    let mut args = if [Method::GET, Method::HEAD, Method::DELETE].contains(req.method()) {
        let mut args = Args::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            args.text(k, v);
        }
        args
    } else {
        if !query.is_empty() {
            // Rather than act without it: `POST /admin/v1/purge?dry_run=true` would purge.
            return Err(Problem::new(
                Code::InvalidArgument,
                format!("{} takes no query parameters: {query}", req.uri().path()),
            ));
        }
        let Json(mut body) = Json::<Value>::from_request(req, &())
            .await
            .map_err(bad_json)?;
        if spec.acts {
            access::acting(who, &mut body)?;
        }
        Args::json(spec.name, body).map_err(Problem::from)?
    };
    for (k, v) in &params {
        if args.has(k) {
            return Err(Problem::new(
                Code::InvalidArgument,
                format!("{k} is given by the path; leave it out of the request"),
            ));
        }
        args.text(k, v);
    }
    Ok(args)
}
