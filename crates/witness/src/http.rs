//! The witness's HTTP interface: `POST <prefix>/add-checkpoint`, as C2SP tlog-witness gives it.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use crate::{Refusal, Witness};

/// Serves `witness` on `listener` until `stop` resolves.
pub async fn serve(
    witness: Arc<Witness>,
    listener: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .with_state(witness);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await
}

async fn add_checkpoint(State(w): State<Arc<Witness>>, body: Bytes) -> Response {
    let Ok(text) = std::str::from_utf8(&body) else {
        return refused(&Refusal::BadRequest("the body is not UTF-8".into()));
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let text = text.to_owned();
    let answer = tokio::task::spawn_blocking(move || w.add_checkpoint(&text, now)).await;
    match answer {
        Ok(Ok(line)) => (StatusCode::OK, line).into_response(),
        Ok(Err(r)) => refused(&r),
        Err(e) => refused(&Refusal::Storage(e.to_string())),
    }
}

fn refused(r: &Refusal) -> Response {
    let status = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Refusal::OtherSize(size) = r {
        return (
            status,
            [(header::CONTENT_TYPE, "text/x.tlog.size")],
            format!("{size}\n"),
        )
            .into_response();
    }
    tracing::info!(status = r.status(), refusal = %r, "checkpoint refused");
    (status, format!("{r}\n")).into_response()
}
