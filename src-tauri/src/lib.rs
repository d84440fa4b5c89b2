//! The console's Rust side: one thin adapter from Tauri commands to `idemgate-ops`, and the
//! embedded proxy started through `idemgate-server` as `idemgate serve` starts it. No logic lives
//! here: each command checks nothing itself, calls one operation off the async threads, and
//! returns its answer or its error as an [`ErrorBody`] with the operation's stable code. An
//! action is recorded under the name typed with the OS user beside it ([`desktop_operator`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use idemgate_ledger::export::{ExportVerifyReport, Manifest};
use idemgate_ledger::{
    EntryFilter, EntrySummary, EventFilter, Incident, Progress, Result, Stats, VerifyReport,
};
use idemgate_ops::{
    desktop_operator, os_user, ActionCmd, AgainstReport, BulkCmd, BulkKind, BulkReport, BulkTarget,
    EntryPage, EntryView, ErrorBody, EventPage, ExportCmd, JobProgress, LedgerInfo, Ops, OpsError,
    OpsResult, Preview, PurgeCmd, PurgeReport, PurgeTarget, ReconcileReport, ReplayReport,
    ResolveCmd,
};
use idemgate_proxy::{Config, Engine};
use idemgate_server::{ProxyStatus, Server};
use tauri::Emitter;

/// The ledger the console opens: `--ledger PATH|URL`, else `IDEMGATE_LEDGER`, else the default one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerChoice {
    /// Named by the user: must exist.
    Named(String),
    /// `$XDG_DATA_HOME/idemgate/ledger.db` (or `~/.local/share/...`): created when missing.
    Default(String),
}

impl LedgerChoice {
    pub fn from_args(args: &[String]) -> LedgerChoice {
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--ledger" {
                if let Some(p) = it.next() {
                    return LedgerChoice::Named(p.clone());
                }
            } else if let Some(p) = a.strip_prefix("--ledger=") {
                return LedgerChoice::Named(p.to_owned());
            }
        }
        if let Ok(p) = std::env::var("IDEMGATE_LEDGER") {
            if !p.is_empty() {
                return LedgerChoice::Named(p);
            }
        }
        let base = std::env::var("XDG_DATA_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| ".".into()))
                    .join(".local/share")
            });
        LedgerChoice::Default(base.join("idemgate/ledger.db").display().to_string())
    }
}

struct Embedded {
    status: Arc<Mutex<ProxyStatus>>,
    cfg: Arc<Config>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tauri::async_runtime::JoinHandle<()>>,
}

/// The console's state: the open ledger, cancellable jobs, the embedded proxy.
pub struct Console {
    ops: RwLock<Result<Ops, ErrorBody>>,
    jobs: Mutex<HashMap<String, Arc<AtomicBool>>>,
    proxy: tokio::sync::Mutex<Option<Embedded>>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").finish_non_exhaustive()
    }
}

fn err(e: &OpsError) -> ErrorBody {
    ErrorBody::from(e)
}

fn internal(e: impl std::fmt::Display) -> ErrorBody {
    ErrorBody {
        code: "internal".into(),
        message: e.to_string(),
    }
}

type R<T> = Result<T, ErrorBody>;

impl Console {
    pub fn open(choice: &LedgerChoice) -> Console {
        let ops = match choice {
            LedgerChoice::Named(p) => Ops::open_existing(p),
            LedgerChoice::Default(p) => Ops::open_or_create(p),
        };
        if let Ok(o) = &ops {
            o.warm_in_background();
        }
        Console {
            ops: RwLock::new(ops.map_err(|e| err(&e))),
            jobs: Mutex::new(HashMap::new()),
            proxy: tokio::sync::Mutex::new(None),
        }
    }

    fn ops(&self) -> R<Ops> {
        self.ops.read().map_err(internal)?.clone()
    }

    /// Runs one blocking operation on the current ledger.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Ops) -> OpsResult<T> + Send + 'static,
    ) -> R<T> {
        let ops = self.ops()?;
        tauri::async_runtime::spawn_blocking(move || f(&ops))
            .await
            .map_err(internal)?
            .map_err(|e| err(&e))
    }

    fn job_flag(&self, id: &str) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        if let Ok(mut j) = self.jobs.lock() {
            j.insert(id.to_owned(), flag.clone());
        }
        flag
    }

    fn end_job(&self, id: &str) {
        if let Ok(mut j) = self.jobs.lock() {
            j.remove(id);
        }
    }

    // ---- the commands, callable without a webview (tests) ------------------------------------

    pub fn ledger_info(&self) -> LedgerInfo {
        match self.ops() {
            Ok(o) => LedgerInfo {
                location: Some(o.location()),
                error: None,
            },
            Err(e) => LedgerInfo {
                location: None,
                error: Some(e),
            },
        }
    }

    pub async fn open_ledger(&self, path: String) -> LedgerInfo {
        let opened = tauri::async_runtime::spawn_blocking(move || Ops::open_existing(&path))
            .await
            .map_err(internal)
            .and_then(|r| r.map_err(|e| err(&e)));
        match opened {
            Ok(o) => {
                o.warm_in_background();
                if let Ok(mut g) = self.ops.write() {
                    *g = Ok(o);
                }
                self.ledger_info()
            }
            // A failed open keeps the ledger that was open.
            Err(e) => LedgerInfo {
                location: self.ops().ok().map(|o| o.location()),
                error: Some(e),
            },
        }
    }

    pub async fn stats(&self, hours: u32) -> R<Stats> {
        self.call(move |o| o.stats(hours)).await
    }

    pub async fn entries(
        &self,
        filter: EntryFilter,
        before: Option<i64>,
        limit: usize,
    ) -> R<EntryPage> {
        self.call(move |o| o.entries(&filter, before, limit)).await
    }

    pub async fn show(&self, id: i64) -> R<EntryView> {
        self.call(move |o| o.show(id)).await
    }

    pub async fn log(
        &self,
        filter: EventFilter,
        before: Option<i64>,
        limit: usize,
    ) -> R<EventPage> {
        self.call(move |o| o.log(&filter, before, limit)).await
    }

    pub async fn incidents(&self, before: Option<i64>, limit: usize) -> R<Vec<Incident>> {
        self.call(move |o| o.incidents(before, limit)).await
    }

    pub async fn preview_resolve(&self, id: i64) -> R<Preview> {
        self.call(move |o| o.preview_resolve(id)).await
    }

    pub async fn resolve(&self, mut cmd: ResolveCmd) -> R<EntrySummary> {
        cmd.operator = desktop_operator(&cmd.operator, &os_user());
        self.call(move |o| o.resolve(&cmd)).await
    }

    pub async fn preview_purge(&self, target: PurgeTarget) -> R<Preview> {
        self.call(move |o| o.preview_purge(&target)).await
    }

    /// A purge as a job: progress after each chunk, and `cancel_job(job)` stops it between two.
    pub async fn purge(
        &self,
        mut cmd: PurgeCmd,
        job: String,
        progress: impl Fn(u64) + Send + 'static,
    ) -> R<PurgeReport> {
        cmd.operator = desktop_operator(&cmd.operator, &os_user());
        self.job(&job, progress, move |o, p| o.purge(&cmd, p)).await
    }

    /// Runs a long operation as a cancellable job: `progress` hears from it, `cancel_job(job)`
    /// stops it at its next progress report.
    async fn job<T: Send + 'static>(
        &self,
        job: &str,
        progress: impl Fn(u64) + Send + 'static,
        f: impl FnOnce(&Ops, Progress<'_>) -> OpsResult<T> + Send + 'static,
    ) -> R<T> {
        let cancel = self.job_flag(job);
        let r = self
            .call(move |o| {
                f(o, &mut |n| {
                    progress(n);
                    !cancel.load(Ordering::Relaxed)
                })
            })
            .await;
        self.end_job(job);
        r
    }

    pub async fn export(
        &self,
        cmd: ExportCmd,
        job: String,
        progress: impl Fn(u64) + Send + 'static,
    ) -> R<Option<Manifest>> {
        self.job(&job, progress, move |o, p| o.export(&cmd, p))
            .await
    }

    pub async fn verify_ledger(
        &self,
        job: String,
        progress: impl Fn(u64) + Send + 'static,
    ) -> R<VerifyReport> {
        self.job(&job, progress, |o, p| o.verify(p)).await
    }

    /// `verify --ledger --against MANIFEST`: the open ledger's chain, and whether it still holds
    /// the heads the manifest at `path` recorded.
    pub async fn verify_against(
        &self,
        path: String,
        job: String,
        progress: impl Fn(u64) + Send + 'static,
    ) -> R<AgainstReport> {
        self.job(&job, progress, move |o, p| {
            o.verify_against(std::path::Path::new(&path), p)
        })
        .await
    }

    pub async fn verify_export(
        &self,
        path: String,
        job: String,
        progress: impl Fn(u64) + Send + 'static,
    ) -> R<ExportVerifyReport> {
        self.job(&job, progress, move |o, p| {
            o.verify_export(std::path::Path::new(&path), p)
        })
        .await
    }

    /// Asks a running job to stop; `false` when there is no such job.
    pub fn cancel_job(&self, job: &str) -> bool {
        self.jobs
            .lock()
            .ok()
            .and_then(|j| j.get(job).map(|f| f.store(true, Ordering::Relaxed)))
            .is_some()
    }

    async fn engine(&self) -> R<Engine> {
        let cfg = self.proxy.lock().await.as_ref().map(|p| p.cfg.clone()).ok_or_else(|| ErrorBody {
            code: "no-config".into(),
            message: "replay and reconcile talk to the upstream: start the embedded proxy from its configuration first".into(),
        })?;
        Ok(self.ops()?.upstream(cfg))
    }

    pub async fn replay(&self, id: i64, mut cmd: ActionCmd) -> R<ReplayReport> {
        cmd.operator = desktop_operator(&cmd.operator, &os_user());
        let e = self.engine().await?;
        self.ops()?.replay(&e, id, &cmd).await.map_err(|e| err(&e))
    }

    pub async fn reconcile(&self, id: i64, mut cmd: ActionCmd) -> R<ReconcileReport> {
        cmd.operator = desktop_operator(&cmd.operator, &os_user());
        let e = self.engine().await?;
        self.ops()?
            .reconcile(&e, id, &cmd)
            .await
            .map_err(|e| err(&e))
    }

    pub async fn preview_bulk(&self, action: BulkKind, target: BulkTarget) -> R<Preview> {
        self.call(move |o| o.preview_bulk(action, &target)).await
    }

    /// A bulk action as a job: progress after each entry, and `cancel_job(job)` stops it between
    /// two. Replay and reconcile reach the upstream through the embedded proxy's configuration.
    pub async fn bulk(
        &self,
        mut cmd: BulkCmd,
        job: String,
        progress: impl Fn(u64) + Send + 'static,
    ) -> R<BulkReport> {
        cmd.operator = desktop_operator(&cmd.operator, &os_user());
        let upstream = if cmd.action.reaches_upstream() {
            Some(self.engine().await?)
        } else {
            None
        };
        self.job(&job, progress, move |o, p| {
            o.bulk(&cmd, upstream.as_ref(), p)
        })
        .await
    }

    pub async fn proxy_status(&self) -> ProxyStatus {
        match self.proxy.lock().await.as_ref() {
            Some(p) => p.status.lock().map(|s| s.clone()).unwrap_or_default(),
            None => ProxyStatus::default(),
        }
    }

    /// Starts the embedded proxy from a configuration file (its own ledger, as `idemgate serve`).
    pub async fn proxy_start(&self, config: String) -> R<ProxyStatus> {
        let mut slot = self.proxy.lock().await;
        if slot
            .as_ref()
            .is_some_and(|p| p.status.lock().map(|s| s.running).unwrap_or(false))
        {
            return Err(ErrorBody {
                code: "conflict".into(),
                message: "the embedded proxy is already running; stop it first".into(),
            });
        }
        let path = config.clone();
        let (cfg, server) = tauri::async_runtime::spawn_blocking(move || -> R<_> {
            let cfg = Arc::new(Config::load(&path).map_err(|e| ErrorBody {
                code: e.code().into(),
                message: e.to_string(),
            })?);
            let server = Server::open(cfg.clone()).map_err(|e| ErrorBody {
                code: e.code().into(),
                message: e.to_string(),
            })?;
            Ok((cfg, server))
        })
        .await
        .map_err(internal)??;
        let status = Arc::new(Mutex::new(ProxyStatus {
            running: false,
            config: Some(config),
            ..Default::default()
        }));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel::<()>();
        let st = status.clone();
        let task = tauri::async_runtime::spawn(async move {
            let st2 = st.clone();
            let r = server
                .run(
                    move |b| {
                        if let Ok(mut s) = st2.lock() {
                            s.running = true;
                            s.proxy_addr = Some(b.proxy.to_string());
                            s.admin_addr = b.admin.map(|a| a.to_string());
                        }
                        let _ = bound_tx.send(());
                    },
                    async {
                        let _ = stop_rx.await;
                    },
                )
                .await;
            if let Ok(mut s) = st.lock() {
                s.running = false;
                s.error = r.err().map(|e| e.to_string());
            }
        });
        // Wait until it listens, or has failed.
        let _ = bound_rx.await;
        let now = status.lock().map(|s| s.clone()).unwrap_or_default();
        *slot = Some(Embedded {
            status,
            cfg,
            stop: Some(stop_tx),
            task: Some(task),
        });
        if now.running {
            Ok(now)
        } else {
            // The task has finished with its error; report it.
            if let Some(e) = slot.as_mut() {
                if let Some(t) = e.task.take() {
                    let _ = t.await;
                }
            }
            let s = slot
                .as_ref()
                .and_then(|p| p.status.lock().ok().map(|s| s.clone()))
                .unwrap_or_default();
            Err(ErrorBody {
                code: "proxy-start".into(),
                message: s.error.unwrap_or_else(|| "the proxy did not start".into()),
            })
        }
    }

    /// Stops the embedded proxy: no new connections, requests in flight drained.
    pub async fn proxy_stop(&self) -> ProxyStatus {
        let mut slot = self.proxy.lock().await;
        if let Some(p) = slot.as_mut() {
            if let Some(s) = p.stop.take() {
                let _ = s.send(());
            }
            if let Some(t) = p.task.take() {
                let _ = t.await;
            }
            return p.status.lock().map(|s| s.clone()).unwrap_or_default();
        }
        ProxyStatus::default()
    }
}

/// The Tauri command wrappers: argument plumbing only.
pub mod commands {
    use super::{
        ActionCmd, AgainstReport, BulkCmd, BulkKind, BulkReport, BulkTarget, Console, Emitter,
        EntryFilter, EntryPage, EntrySummary, EntryView, ErrorBody, EventFilter, EventPage,
        ExportCmd, ExportVerifyReport, Incident, JobProgress, LedgerInfo, Manifest, Preview,
        ProxyStatus, PurgeCmd, PurgeReport, PurgeTarget, ReconcileReport, ReplayReport, ResolveCmd,
        Result, Stats, VerifyReport, R,
    };
    use tauri::{AppHandle, State};

    fn progress(app: AppHandle, job: String) -> impl Fn(u64) + Send + 'static {
        move |done| {
            let _ = app.emit(
                "job-progress",
                JobProgress {
                    job: job.clone(),
                    done,
                    total: None,
                },
            );
        }
    }

    #[tauri::command]
    pub fn ledger_info(c: State<'_, Console>) -> LedgerInfo {
        c.ledger_info()
    }
    #[tauri::command]
    pub async fn open_ledger(c: State<'_, Console>, path: String) -> Result<LedgerInfo, ErrorBody> {
        Ok(c.open_ledger(path).await)
    }
    #[tauri::command]
    pub async fn stats(c: State<'_, Console>, hours: u32) -> R<Stats> {
        c.stats(hours).await
    }
    #[tauri::command]
    pub async fn entries(
        c: State<'_, Console>,
        filter: EntryFilter,
        before: Option<i64>,
        limit: usize,
    ) -> R<EntryPage> {
        c.entries(filter, before, limit).await
    }
    #[tauri::command]
    pub async fn show(c: State<'_, Console>, id: i64) -> R<EntryView> {
        c.show(id).await
    }
    #[tauri::command]
    pub async fn log(
        c: State<'_, Console>,
        filter: EventFilter,
        before: Option<i64>,
        limit: usize,
    ) -> R<EventPage> {
        c.log(filter, before, limit).await
    }
    #[tauri::command]
    pub async fn incidents(
        c: State<'_, Console>,
        before: Option<i64>,
        limit: usize,
    ) -> R<Vec<Incident>> {
        c.incidents(before, limit).await
    }
    #[tauri::command]
    pub async fn preview_resolve(c: State<'_, Console>, id: i64) -> R<Preview> {
        c.preview_resolve(id).await
    }
    #[tauri::command]
    pub async fn resolve(c: State<'_, Console>, cmd: ResolveCmd) -> R<EntrySummary> {
        c.resolve(cmd).await
    }
    #[tauri::command]
    pub async fn preview_purge(c: State<'_, Console>, target: PurgeTarget) -> R<Preview> {
        c.preview_purge(target).await
    }
    #[tauri::command]
    pub async fn purge(
        app: AppHandle,
        c: State<'_, Console>,
        cmd: PurgeCmd,
        job: String,
    ) -> R<PurgeReport> {
        c.purge(cmd, job.clone(), progress(app, job)).await
    }
    #[tauri::command]
    pub async fn export(
        app: AppHandle,
        c: State<'_, Console>,
        cmd: ExportCmd,
        job: String,
    ) -> R<Option<Manifest>> {
        c.export(cmd, job.clone(), progress(app, job)).await
    }
    #[tauri::command]
    pub async fn verify_ledger(
        app: AppHandle,
        c: State<'_, Console>,
        job: String,
    ) -> R<VerifyReport> {
        c.verify_ledger(job.clone(), progress(app, job)).await
    }
    #[tauri::command]
    pub async fn verify_export(
        app: AppHandle,
        c: State<'_, Console>,
        path: String,
        job: String,
    ) -> R<ExportVerifyReport> {
        c.verify_export(path, job.clone(), progress(app, job)).await
    }
    #[tauri::command]
    pub async fn verify_against(
        app: AppHandle,
        c: State<'_, Console>,
        path: String,
        job: String,
    ) -> R<AgainstReport> {
        c.verify_against(path, job.clone(), progress(app, job))
            .await
    }
    #[tauri::command]
    pub fn cancel_job(c: State<'_, Console>, job: String) -> bool {
        c.cancel_job(&job)
    }
    #[tauri::command]
    pub async fn replay(c: State<'_, Console>, id: i64, cmd: ActionCmd) -> R<ReplayReport> {
        c.replay(id, cmd).await
    }
    #[tauri::command]
    pub async fn reconcile(c: State<'_, Console>, id: i64, cmd: ActionCmd) -> R<ReconcileReport> {
        c.reconcile(id, cmd).await
    }
    #[tauri::command]
    pub async fn preview_bulk(
        c: State<'_, Console>,
        action: BulkKind,
        target: BulkTarget,
    ) -> R<Preview> {
        c.preview_bulk(action, target).await
    }
    #[tauri::command]
    pub async fn bulk(
        app: AppHandle,
        c: State<'_, Console>,
        cmd: BulkCmd,
        job: String,
    ) -> R<BulkReport> {
        c.bulk(cmd, job.clone(), progress(app, job)).await
    }
    #[tauri::command]
    pub async fn proxy_status(c: State<'_, Console>) -> R<ProxyStatus> {
        Ok(c.proxy_status().await)
    }
    #[tauri::command]
    pub async fn proxy_start(c: State<'_, Console>, config: String) -> R<ProxyStatus> {
        c.proxy_start(config).await
    }
    #[tauri::command]
    pub async fn proxy_stop(c: State<'_, Console>) -> R<ProxyStatus> {
        Ok(c.proxy_stop().await)
    }
}

fn proxy_config_arg(args: &[String]) -> Option<String> {
    let i = args.iter().position(|a| a == "--proxy-config")?;
    args.get(i + 1).cloned()
}

/// Starts the console: `idemgate-console [--ledger PATH|URL] [--proxy-config FILE]`.
pub fn run() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("IDEMGATE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    let args: Vec<String> = std::env::args().collect();
    let console = Console::open(&LedgerChoice::from_args(&args));
    let proxy_config = proxy_config_arg(&args);
    let result = tauri::Builder::default()
        .manage(console)
        .setup(move |app| {
            // `--proxy-config FILE`: start the embedded proxy with the console.
            if let Some(cfg) = proxy_config {
                use tauri::Manager;
                let c = app.state::<Console>();
                if let Err(e) = tauri::async_runtime::block_on(c.proxy_start(cfg)) {
                    eprintln!(
                        "idemgate-console: the embedded proxy did not start: {} ({})",
                        e.message, e.code
                    );
                }
            }
            Ok(())
        })
        .invoke_handler(tauri::generate_handler![
            commands::ledger_info,
            commands::open_ledger,
            commands::stats,
            commands::entries,
            commands::show,
            commands::log,
            commands::incidents,
            commands::preview_resolve,
            commands::resolve,
            commands::preview_purge,
            commands::purge,
            commands::export,
            commands::verify_ledger,
            commands::verify_export,
            commands::verify_against,
            commands::cancel_job,
            commands::replay,
            commands::reconcile,
            commands::preview_bulk,
            commands::bulk,
            commands::proxy_status,
            commands::proxy_start,
            commands::proxy_stop,
        ])
        .run(tauri::generate_context!());
    if let Err(e) = result {
        eprintln!("idemgate-console: {e}");
        std::process::exit(1);
    }
}
