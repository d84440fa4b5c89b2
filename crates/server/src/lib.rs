//! The idemgate server: what `idemgate serve` and the console's embedded proxy run. The proxy
//! listener (the data plane, `idemgate-proxy`), the admin listener (the operations layer,
//! `idemgate-ops`, as JSON under `/admin/v1/`, `/metrics`, health, and the console's static
//! files for browsers), the sweeper, and a graceful drain on shutdown. Both hosts start it
//! through [`Server::open`] and [`Server::run`].

pub mod access;
pub mod admin;
mod books;
pub mod live;
#[cfg(feature = "ts")]
pub mod openapi;
pub mod parameters;
pub mod upkeep;
mod witnesses;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use idemgate_config::{Config, ConfigError, Secret};
use idemgate_ops::ledger::{now_millis, LedgerError, State};
use idemgate_ops::{Code, Ops};
use idemgate_proxy::{metrics_handle, Engine};
use tokio::net::TcpListener;
use tower::Service;

/// The admin API's OpenAPI document.
pub const OPENAPI: &str = include_str!("openapi.json");

/// How long a client may take to send its request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a graceful shutdown waits for requests in flight.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("no admin credentials: list [[operators]], or set IDEMGATE_ADMIN_TOKEN or server.admin_token_file (the admin API never runs without one)")]
    NoAdminToken,
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Ops(#[from] idemgate_ops::OpsError),
    /// A reload that changes what a running process cannot change in place.
    #[error("{0} changed, and takes a restart: nothing of the file was applied")]
    NeedsRestart(&'static str),
    #[error(transparent)]
    Tracing(#[from] idemgate_proxy::telemetry::TracingError),
}

/// A configuration made ready to serve: its admin token read and its ledger open.
#[derive(Debug)]
pub struct Server {
    cfg: Arc<Config>,
    token: Option<Secret>,
    ops: Ops,
    reload: Option<Reload>,
}

/// Where a reload reads the configuration again, and the signals that ask for one.
#[derive(Debug)]
pub struct Reload {
    pub path: std::path::PathBuf,
    pub signals: tokio::sync::mpsc::UnboundedReceiver<()>,
}

impl Server {
    /// Reads the admin token (when the admin listener is on; it never runs without one) and opens
    /// the configured ledger, creating it when missing.
    pub fn open(cfg: Arc<Config>) -> Result<Server, ServeError> {
        let token = check(&cfg)?;
        let ops = Ops::open_or_create(&cfg.ledger)?.configured_by(&cfg);
        Ok(Server {
            cfg,
            token,
            ops,
            reload: None,
        })
    }

    /// Reloads the configuration from `reload.path` on each of its signals ([`live`]).
    pub fn reload_on(mut self, reload: Reload) -> Server {
        self.reload = Some(reload);
        self
    }

    /// Where the ledger is, as logs may show it (a PostgreSQL URL without its password).
    pub fn ledger_location(&self) -> String {
        self.ops.location()
    }

    /// Serves until `shutdown` resolves, as [`serve`] does.
    pub async fn run(
        self,
        on_bound: impl FnOnce(Bound),
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        serve(
            self.cfg,
            self.ops,
            self.token,
            self.reload,
            on_bound,
            shutdown,
        )
        .await
    }
}

/// What the server checks of a configuration before it opens anything: that the admin listener,
/// when it is on, has credentials (operators, or the shared admin token, which it returns).
pub fn check(cfg: &Config) -> Result<Option<Secret>, ServeError> {
    if cfg.admin_listen.is_none() {
        return Ok(None);
    }
    match admin_token(cfg) {
        Ok(t) => Ok(Some(t)),
        Err(ServeError::NoAdminToken) if !cfg.operators.is_empty() => Ok(None),
        Err(e) => Err(e),
    }
}

impl ServeError {
    pub fn code(&self) -> Code {
        match self {
            ServeError::Config(e) => e.code(),
            ServeError::NoAdminToken => Code::NoAdminToken,
            ServeError::Bind { .. } => Code::Bind,
            ServeError::Ops(e) => e.code(),
            ServeError::NeedsRestart(_) => Code::BadConfig,
            ServeError::Tracing(e) => e.code(),
        }
    }
}

/// The admin token from `IDEMGATE_ADMIN_TOKEN` or the configured file.
pub fn admin_token(cfg: &Config) -> Result<Secret, ServeError> {
    if let Ok(t) = std::env::var("IDEMGATE_ADMIN_TOKEN") {
        if !t.trim().is_empty() {
            return Ok(Secret(t.trim().as_bytes().to_vec()));
        }
    }
    if let Some(f) = &cfg.admin_token_file {
        let raw = std::fs::read_to_string(f).map_err(|e| {
            ServeError::Config(ConfigError::Invalid {
                field: "server.admin_token_file".into(),
                message: format!("{f}: {e}"),
            })
        })?;
        if !raw.trim().is_empty() {
            return Ok(Secret(raw.trim().as_bytes().to_vec()));
        }
    }
    Err(ServeError::NoAdminToken)
}

/// A running server: its bound addresses.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub proxy: SocketAddr,
    pub admin: Option<SocketAddr>,
}

/// A listener on `addr`, and the address it is bound to (the port, when `addr`'s is 0).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ServeError> {
    let bind_error = |source| ServeError::Bind { addr, source };
    let l = TcpListener::bind(addr).await.map_err(bind_error)?;
    let bound = l.local_addr().map_err(bind_error)?;
    Ok((l, bound))
}

/// Removes the export spools that processes killed before they could left behind.
fn reclaim_spools(exports: &idemgate_ops::jobs::exports::Exports, cfg: &Config) {
    match exports.reclaim() {
        Ok(removed) if !removed.is_empty() => tracing::info!(
            spools = ?removed,
            "removed the export spools of processes that were killed before they could"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(dir = %cfg.export_dir.display(), error = %e,
            "cannot look for the export spools of killed processes"),
    }
}

/// Runs the proxy (and the admin listener) until `shutdown` resolves, then drains requests in
/// flight (up to [`DRAIN_TIMEOUT`]) and returns; the caller closes the ledger after. `on_bound` is
/// told the bound addresses once both listeners are up.
async fn serve(
    cfg: Arc<Config>,
    ops: Ops,
    token: Option<Secret>,
    reload: Option<Reload>,
    on_bound: impl FnOnce(Bound),
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let metrics = metrics_handle();
    describe_metrics();
    let engine = Arc::new(ops.upstream(cfg.clone()).traced()?);
    let exports = Arc::new(idemgate_ops::jobs::exports::Exports::new(
        cfg.export_dir.clone(),
    ));
    reclaim_spools(&exports, &cfg);
    let ops = ops.with_exports(exports.clone());
    let (proxy_listener, proxy_addr) = bind(cfg.listen).await?;
    let access = Arc::new(access::Access::new(token.as_ref(), &cfg.operators));
    if cfg.admin_listen.is_some() && access.is_empty() {
        return Err(ServeError::NoAdminToken);
    }
    let live = Arc::new(live::Live::new(engine.clone(), access));
    let (books, keeper) = books::Books::start(engine.store.clone(), engine.owner.clone()).await;
    let admin = match &cfg.admin_listen {
        Some(addr) => {
            let (l, bound) = bind(*addr).await?;
            Some((
                l,
                bound,
                admin::router(
                    live.clone(),
                    ops.clone(),
                    books.clone(),
                    metrics,
                    Bound {
                        proxy: proxy_addr,
                        admin: Some(bound),
                    },
                ),
            ))
        }
        None => None,
    };
    on_bound(Bound {
        proxy: proxy_addr,
        admin: admin.as_ref().map(|a| a.1),
    });

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = upkeep::spawn(&cfg, &ops, &books.watch(), &stop_rx);
    tasks.extend(loops(&engine, &live, &books, &stop_rx));
    let settler = engine.clone();
    if let Some(r) = reload {
        tokio::spawn(reload_loop(live.clone(), r));
    }
    // The proxy listener calls the engine directly: no router, no boxed body, no extensions. Each
    // request takes the engine current when it starts, and keeps it to its end.
    let proxy_service = move |peer: SocketAddr| {
        let live = live.clone();
        hyper::service::service_fn(move |req| {
            let engine = live.engine();
            async move { Ok::<_, Infallible>(idemgate_proxy::handle(&engine, peer, req).await) }
        })
    };
    let mut loops = vec![tokio::spawn(accept_loop(
        proxy_listener,
        proxy_service,
        stop_rx.clone(),
    ))];
    if let Some((l, _, router)) = admin {
        loops.push(serve_admin(l, router, stop_rx.clone()));
    }
    shutdown.await;
    tracing::info!("shutting down: no new connections, draining requests in flight");
    let _ = stop_tx.send(true);
    let drained_by = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    for l in loops {
        let _ = l.await;
    }
    drain_writes(&settler, drained_by).await;
    for t in tasks {
        let _ = t.await;
    }
    drop(keeper);
    exports.close();
    record_unsettled(&settler).await;
    settler.stop_tracing().await;
    Ok(())
}

/// Serves the admin API's `router` on `l` until `stop`.
fn serve_admin(
    l: TcpListener,
    router: axum::Router,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let admin_service = move |peer: SocketAddr| {
        let router = router.clone();
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let mut r = router.clone();
            let mut req = req.map(axum::body::Body::new);
            // The caller's address, for the backoff after bad tokens.
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            async move { r.call(req).await }
        })
    };
    tokio::spawn(accept_loop(l, admin_service, stop))
}

/// Waits, until `by`, for the writes whose clients went away and are still being driven: their
/// outcomes are recorded too.
async fn drain_writes(engine: &Engine, by: tokio::time::Instant) {
    engine.requests.close();
    if tokio::time::timeout_at(by, engine.requests.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            requests = engine.requests.len(),
            "writes still in flight after {DRAIN_TIMEOUT:?}; their claims stay pending and will show as stuck"
        );
    }
}

/// The last chance for outcomes the ledger could not take: after this they live only in the
/// entries' leases, stuck for an operator once they pass.
async fn record_unsettled(engine: &Engine) {
    engine.unsettled.record(&*engine.store).await;
    let left = engine.unsettled.entry_ids();
    if !left.is_empty() {
        tracing::warn!(entries = ?left, "stopping with outcomes the ledger could not take; these entries are left for an operator");
    }
}

/// Accepts connections until `stop`, then stops accepting and waits (up to [`DRAIN_TIMEOUT`]) for
/// the requests in flight on this listener. `service` makes each connection's service from its
/// peer's address.
async fn accept_loop<S, B>(
    listener: TcpListener,
    service: impl Fn(SocketAddr) -> S,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<B>,
            Error = Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        // Room above the request path's own limits (engine::MAX_HEADERS, MAX_HEADER_BYTES), so
        // oversized headers get a problem+json 431 there instead of the parser's bare one.
        .max_buf_size(256 * 1024)
        .max_headers(512);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service(peer))
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after {DRAIN_TIMEOUT:?}; their claims stay pending and will show as stuck");
    }
}

/// Reloads the configuration on each signal, one at a time, off the async threads (it reads
/// files).
async fn reload_loop(live: Arc<live::Live>, mut r: Reload) {
    while r.signals.recv().await.is_some() {
        let (live, path) = (live.clone(), r.path.clone());
        let _ = tokio::task::spawn_blocking(move || live.reload(&path)).await;
    }
}

/// Forwards the calls operators approved: at once for a decision made in this process, and five
/// times a second it looks for those made through another instance, the CLI or the desktop
/// console (each is taken once, by one instance). A server that starts forwards those approved
/// while none ran.
async fn release_loop(live: Arc<live::Live>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let store = live.engine().store.clone();
    let fallback = tokio::sync::Notify::new();
    let released = store.released().unwrap_or(&fallback);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = released.notified() => {}
            _ = stop.changed() => return,
        }
        live.engine().release_approved().await;
    }
}

/// What every instance runs until it stops: the sweep, the forwarding of approved calls, and
/// (while it leads the books) the news of decisions.
fn loops(
    engine: &Arc<Engine>,
    live: &Arc<live::Live>,
    books: &books::Books,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> [tokio::task::JoinHandle<()>; 3] {
    [
        tokio::spawn(sweep_loop(engine.clone(), stop.clone())),
        tokio::spawn(release_loop(live.clone(), stop.clone())),
        tokio::spawn(announce_loop(live.clone(), books.watch(), stop.clone())),
    ]
}

/// Every second while this instance leads the books: tells the approval webhooks of the
/// decisions logged since the last one told (by any instance, the CLI or a console), and of how
/// approved calls' runs ended.
async fn announce_loop(
    live: Arc<live::Live>,
    leading: tokio::sync::watch::Receiver<Option<idemgate_ops::ledger::Millis>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if leading.borrow().is_none() {
            continue;
        }
        // Stopped mid-round, what was told and not yet recorded is told again by the next.
        let engine = live.engine();
        tokio::select! {
            r = engine.announce_decisions() => match r {
                Ok(_) | Err(LedgerError::Unavailable(_)) => {}
                Err(e) => tracing::warn!(error = %e, "decisions could not be announced"),
            },
            _ = stop.changed() => return,
        }
    }
}

/// Every second: records the outcomes the ledger could not take when they were known, and marks
/// lease and TTL expiries in the log.
async fn sweep_loop(engine: Arc<Engine>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let store = engine.store.clone();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        // First, so that an entry whose outcome is in hand is not logged as stuck.
        engine.unsettled.record(&*store).await;
        match store.sweep(now_millis()).recv().await {
            Ok(r) if r.lease_expired + r.ttl_expired + r.approvals_expired > 0 => {
                tracing::info!(
                    lease_expired = r.lease_expired,
                    ttl_expired = r.ttl_expired,
                    approvals_expired = r.approvals_expired,
                    "sweep"
                );
            }
            Ok(_) => {}
            // A commit that failed is the writer's to log (once a minute while it lasts).
            Err(LedgerError::Unavailable(_)) => {}
            Err(e) => tracing::warn!(error = %e, "sweep failed"),
        }
        n += 1;
        if n % 5 == 1 {
            let s = store.clone();
            if let Ok(Ok(stats)) =
                tokio::task::spawn_blocking(move || s.stats(now_millis(), 0)).await
            {
                metrics::gauge!("idemgate_stuck_entries").set(stats.stuck as f64);
                metrics::gauge!("idemgate_expired_entries").set(stats.expired as f64);
                let held = stats
                    .entries_by_state
                    .iter()
                    .find(|(s, _)| *s == State::AwaitingApproval)
                    .map_or(0, |(_, n)| *n);
                metrics::gauge!("idemgate_approvals_pending").set(held as f64);
                // The ledger's totals, whichever instance, CLI or console decided.
                for (kind, decision) in [
                    ("approved", "approved"),
                    ("rejected", "rejected"),
                    ("approval_expired", "expired"),
                ] {
                    let n = stats
                        .events_by_kind
                        .iter()
                        .find(|(k, _)| k == kind)
                        .map_or(0, |(_, n)| *n);
                    metrics::counter!("idemgate_approval_decisions_total", "decision" => decision)
                        .absolute(n.max(0) as u64);
                }
            }
        }
    }
}

/// A server's state, as the console shows its embedded one.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProxyStatus {
    pub running: bool,
    pub config: Option<String>,
    pub proxy_addr: Option<String>,
    pub admin_addr: Option<String>,
    /// Why it is not running, when it failed to start or stopped with an error.
    pub error: Option<String>,
}

/// Gives each of the server's own metrics its `# HELP` line on `/metrics` (the proxy and the
/// ledger describe theirs).
fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        "idemgate_admin_denied_total",
        "Admin API requests refused, by reason: missing, invalid, role, throttled"
    );
    describe_counter!(
        "idemgate_config_reloads_total",
        "Configuration reloads (SIGHUP), by result: applied, or refused (the configuration \
         loaded before keeps serving)"
    );
    describe_gauge!(
        "idemgate_stuck_entries",
        "Pending entries past their lease or of unknown outcome: each waits for an operator"
    );
    describe_gauge!(
        "idemgate_expired_entries",
        "Entries past their TTL, no longer replayed, awaiting purge"
    );
    describe_gauge!(
        "idemgate_approvals_pending",
        "Calls held for approval, waiting for a decision"
    );
    describe_counter!(
        "idemgate_approval_decisions_total",
        "Decisions on held calls in the ledger, by decision: approved (each approval), rejected, \
         expired"
    );
    describe_histogram!(
        "idemgate_approval_wait_seconds",
        Unit::Seconds,
        "From a held call's claim to the decision that ended its wait, for decisions made \
         through this server"
    );
    describe_gauge!(
        "idemgate_leader",
        "1 while this instance keeps the books (retention, archival, signing), else 0"
    );
    describe_gauge!(
        "idemgate_tree_lag_seconds",
        "On the leader: how long the oldest event the tree's integrator last added had waited"
    );
}
