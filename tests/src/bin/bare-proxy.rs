//! A reverse proxy with nothing but hyper in it, for bench/run.py: the same runtime, allocator,
//! server and pooled client as `idemgate serve`, and none of its work (no routes, no fingerprint,
//! no ledger, no metrics). Its row bounds what any proxy built on these crates does on the
//! benchmark's machine, which `idemgate serve`'s pass-through row is measured against.
//!
//! Usage: `bare-proxy LISTEN UPSTREAM` (`127.0.0.1:8800 http://127.0.0.1:9000`); prints
//! `listening on ADDR` once it accepts connections.

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::io::Write as _;
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Upstream = Client<HttpConnector, Full<Bytes>>;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: bare-proxy LISTEN UPSTREAM");
        return ExitCode::from(2);
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    match rt.block_on(serve(&listen, upstream.trim_end_matches('/').to_owned())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bare-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(listen: &str, upstream: String) -> std::io::Result<()> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(64)
        .build(connector);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (client, upstream) = (client.clone(), upstream.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| forward(client.clone(), upstream.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The request as it came (but its `Host`), its body read whole; the answer likewise.
async fn forward(
    client: Upstream,
    upstream: String,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = Request::builder()
        .method(parts.method)
        .uri(format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        if name != hyper::header::HOST {
            out = out.header(name, value);
        }
    }
    let (parts, body) = client
        .request(out.body(Full::new(body))?)
        .await?
        .into_parts();
    Ok(Response::from_parts(
        parts,
        Full::new(body.collect().await?.to_bytes()),
    ))
}
