//! The admin API's export jobs: a file the server writes, which its client downloads when done.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idemgate_ledger::{export, EventRange};
use idemgate_proxy::problem::{Code, Problem};
use serde::Deserialize;

use super::{bad_json, time_arg, AdminState, ExportId, Id, NoQuery};
use crate::exports::{Download, Exported};

/// An export job to start: what, in which range, in which format.
#[cfg_attr(feature = "ts", derive(schemars::JsonSchema))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportBody {
    /// The log's events in the range (the default), or the entries created in it with their
    /// outcomes.
    #[serde(default)]
    what: Exported,
    format: export::Format,
    /// As the CLI takes them ([`idemgate_ops::parse_time`]).
    since: Option<String>,
    until: Option<String>,
}

pub(super) async fn start_export(
    State(s): State<AdminState>,
    _: NoQuery,
    b: Result<Json<ExportBody>, JsonRejection>,
) -> Result<Response, Problem> {
    let Json(b) = b.map_err(bad_json)?;
    let range = EventRange {
        since: time_arg("since", b.since.as_deref())?,
        until: time_arg("until", b.until.as_deref())?,
    };
    let job = s.exports.start(&s.ops, b.what, b.format, range)?;
    let location = HeaderValue::from_str(&format!("/admin/v1/exports/{}", job.id))
        .map_err(|e| Problem::new(Code::Internal, e.to_string()))?;
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(job),
    )
        .into_response())
}

pub(super) async fn list_exports(State(s): State<AdminState>, _: NoQuery) -> Response {
    Json(s.exports.list()).into_response()
}

pub(super) async fn show_export(
    State(s): State<AdminState>,
    Id(id): ExportId,
    _: NoQuery,
) -> Result<Response, Problem> {
    Ok(Json(s.exports.get(&id)?).into_response())
}

pub(super) async fn delete_export(
    State(s): State<AdminState>,
    Id(id): ExportId,
    _: NoQuery,
) -> Result<Response, Problem> {
    s.exports.delete(&id)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) async fn export_file(
    State(s): State<AdminState>,
    Id(id): ExportId,
    _: NoQuery,
    req: Request,
) -> Result<Response, Problem> {
    serve_download(s.exports.download(&id, false)?, req).await
}

pub(super) async fn export_manifest(
    State(s): State<AdminState>,
    Id(id): ExportId,
    _: NoQuery,
    req: Request,
) -> Result<Response, Problem> {
    serve_download(s.exports.download(&id, true)?, req).await
}

/// Streams a finished export's file (ranges too, so a large download can resume), to be saved
/// under its own name.
async fn serve_download(d: Download, req: Request) -> Result<Response, Problem> {
    use tower::ServiceExt;
    let gone = || {
        Problem::new(
            Code::ExportNotFound,
            "the export's file is gone (deleted meanwhile)",
        )
    };
    let r = tower_http::services::ServeFile::new(&d.path)
        .oneshot(req)
        .await
        .map_err(|_| gone())?;
    if r.status() == StatusCode::NOT_FOUND {
        return Err(gone());
    }
    let mut r = r.map(axum::body::Body::new);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(d.kind));
    // The name is the export's own (idemgate-export-<hex id>.<format>): nothing to quote.
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{}\"", d.name)) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(r)
}
