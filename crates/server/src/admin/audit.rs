//! The admin API's file transfers: a done export job's file and manifest (the jobs themselves are
//! operations: `start_export`, `export_job`, ...), and an export the client uploads to be verified.

use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::{Multipart, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idemgate_ops::ledger::{manifest_path, ExportVerifyReport};
use idemgate_ops::op;
use idemgate_proxy::problem::{Code, Problem};

use super::{blocking_while_wanted, AdminState, ExportId, Id, NoQuery};
use idemgate_ops::jobs::exports::Download;

pub(super) async fn export_file(
    State(s): State<AdminState>,
    Id(id): ExportId,
    _: NoQuery,
    req: Request,
) -> Result<Response, Problem> {
    serve_download(s.ops.exports()?.download(&id, false)?, req).await
}

pub(super) async fn export_manifest(
    State(s): State<AdminState>,
    Id(id): ExportId,
    _: NoQuery,
    req: Request,
) -> Result<Response, Problem> {
    serve_download(s.ops.exports()?.download(&id, true)?, req).await
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

/// The most bytes an uploaded export may have; a larger one is checked where it is, with
/// `idemgate verify --export`.
pub const MAX_UPLOAD: usize = 1 << 30;
/// The most bytes of an uploaded manifest.
const MAX_MANIFEST: usize = 1 << 20;

fn bad_part(e: MultipartError) -> Problem {
    let code = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        Code::BodyTooLarge
    } else {
        Code::InvalidArgument
    };
    Problem::new(code, e.body_text())
}

fn upload_failed(e: std::io::Error) -> Problem {
    Problem::new(Code::Internal, format!("cannot keep the upload: {e}"))
}

/// A name a client gave that is a plain file name (no directory, not hidden).
fn plain_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= 200 && !n.starts_with('.') && !n.contains(['/', '\\', '\0'])
}

/// Checks an export file the client uploads (`multipart/form-data`: the file in a part named
/// `file`, its manifest in one named `manifest`) as `idemgate verify --export` checks one beside
/// its manifest, without the ledger. The upload is kept in the spool while it is checked.
pub(super) async fn verify_upload(
    State(s): State<AdminState>,
    _: NoQuery,
    mp: Result<Multipart, MultipartRejection>,
) -> Result<Response, Problem> {
    let mut mp = mp.map_err(|e| {
        Problem::new(
            Code::UnsupportedMediaType,
            format!(
                "send multipart/form-data: the export in a part named file, its manifest in one \
                 named manifest ({})",
                e.body_text()
            ),
        )
    })?;
    let scratch = s.ops.exports()?.scratch()?;
    let upload = scratch.path().join("upload");
    let (mut name, mut manifest) = (None, None);
    while let Some(mut field) = mp.next_field().await.map_err(bad_part)? {
        match field.name() {
            Some("file") if name.is_none() => {
                name = Some(field.file_name().unwrap_or_default().to_owned());
                let mut out = tokio::fs::File::create(&upload)
                    .await
                    .map_err(upload_failed)?;
                let mut n = 0;
                while let Some(chunk) = field.chunk().await.map_err(bad_part)? {
                    n += chunk.len();
                    if n > MAX_UPLOAD {
                        return Err(Problem::new(Code::BodyTooLarge, format!("an uploaded export is at most {MAX_UPLOAD} bytes: check a larger one where it is, with idemgate verify --export")));
                    }
                    tokio::io::AsyncWriteExt::write_all(&mut out, &chunk)
                        .await
                        .map_err(upload_failed)?;
                }
                // A tokio file's last write may still be on its way when `write_all` returns:
                // the check below reads the file, so it waits for the write to land.
                tokio::io::AsyncWriteExt::flush(&mut out)
                    .await
                    .map_err(upload_failed)?;
            }
            Some("manifest") if manifest.is_none() => {
                let b = field.bytes().await.map_err(bad_part)?;
                if b.len() > MAX_MANIFEST {
                    return Err(Problem::new(
                        Code::BodyTooLarge,
                        format!("a manifest is at most {MAX_MANIFEST} bytes"),
                    ));
                }
                manifest = Some(b);
            }
            other => {
                return Err(Problem::new(
                    Code::InvalidArgument,
                    format!("unexpected part {other:?}: send one part named file and at most one named manifest"),
                ))
            }
        }
    }
    let Some(name) = name else {
        return Err(Problem::new(
            Code::InvalidArgument,
            "no part named file: send the export file (and its manifest, in a part named manifest)",
        ));
    };
    let name = if plain_name(&name) {
        name
    } else {
        "export".to_owned()
    };
    let path = scratch.path().join(&name);
    std::fs::rename(&upload, &path).map_err(upload_failed)?;
    if let Some(m) = &manifest {
        std::fs::write(manifest_path(&path), m).map_err(upload_failed)?;
    }
    let report = verify_uploaded(s.ops.clone(), path, name).await?;
    drop(scratch);
    Ok(Json(report).into_response())
}

/// The uploaded export at `path` verified by the `verify_export` operation, and named in the
/// report as the client sent it, not by where the server kept it.
async fn verify_uploaded(
    ops: idemgate_ops::Ops,
    path: std::path::PathBuf,
    name: String,
) -> Result<ExportVerifyReport, Problem> {
    let mut report: ExportVerifyReport = blocking_while_wanted(move |progress| {
        let req = op::common::PathArg {
            path: path.display().to_string(),
        };
        op::run::<op::verify_export::Op>(&ops, req, op::Host::none(), progress)
    })
    .await?;
    report.file = name;
    if report.manifest.is_some() {
        report.manifest = Some(format!("{}.manifest.json", report.file));
    }
    Ok(report)
}
