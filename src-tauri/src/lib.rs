//! The console's Rust side: one thin adapter from Tauri commands to `idemgate-ops`, and the
//! embedded proxy started through `idemgate-server` as `idemgate serve` starts it. No logic lives
//! here: `call` runs any operation of the command table by name (`idemgate_ops::dispatch`) off
//! the async threads and returns its answer or its error as an [`ErrorBody`] with the operation's
//! stable code; the other commands are the console's own (the open ledger, jobs, the embedded
//! proxy). An action is recorded under the name typed with the OS user beside it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use idemgate_config::Config;
use idemgate_ops::ledger::Progress;
use idemgate_ops::{
    dispatch, dispatch::Decider, dispatch::Host, jobs::Running, os_user, Code, ErrorBody,
    JobProgress, LedgerInfo, Ops, OpsError, OpsResult,
};
use idemgate_proxy::Engine;
use idemgate_server::{ProxyStatus, Server};

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
        LedgerChoice::choose(args, std::path::Path::new(SERVER_CONFIG))
    }

    /// [`LedgerChoice::from_args`], with the installed server's configuration at `server_config`:
    /// `--ledger`, else `IDEMGATE_LEDGER`, else the server's SQLite ledger when this user may
    /// read and write it (a member of the group `idemgate`), else the default one.
    pub fn choose(args: &[String], server_config: &std::path::Path) -> LedgerChoice {
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
        if let Some(l) = server_ledger(server_config) {
            return LedgerChoice::Named(l);
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

/// The configuration the server package installs.
pub const SERVER_CONFIG: &str = "/etc/idemgate/idemgate.toml";

/// The SQLite ledger the configuration at `path` names, when this user may read and write it.
fn server_ledger(path: &std::path::Path) -> Option<String> {
    let cfg = Config::load_without_secrets(&path.display().to_string()).ok()?;
    let ledger = std::path::Path::new(&cfg.ledger);
    let usable = !idemgate_ops::ledger::is_postgres(&cfg.ledger)
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(ledger)
            .is_ok();
    usable.then_some(cfg.ledger)
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
    jobs: Arc<Running>,
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
        code: Code::Internal,
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
            jobs: Arc::default(),
            proxy: tokio::sync::Mutex::new(None),
        }
    }

    fn ops(&self) -> R<Ops> {
        self.ops.read().map_err(internal)?.clone()
    }

    /// Runs one blocking operation on the current ledger.
    async fn call_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Ops) -> OpsResult<T> + Send + 'static,
    ) -> R<T> {
        let ops = self.ops()?;
        tauri::async_runtime::spawn_blocking(move || f(&ops))
            .await
            .map_err(internal)?
            .map_err(|e| err(&e))
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

    /// Runs the operation `name` of the command table with `args` (`idemgate_ops::dispatch`):
    /// a ledger read or write, or long work as the job `job` (progress after each report, and
    /// [`Console::cancel_job`] stops it at the next), off the async threads; or a replay or a
    /// reconcile, through the embedded proxy's configuration. An action's operator is recorded
    /// with the OS user beside it; `operator`, the name typed in the console's header, is who
    /// asks besides that account, by which a held call's approvers are judged.
    pub async fn call(
        &self,
        name: String,
        mut args: serde_json::Value,
        job: Option<String>,
        operator: Option<String>,
        progress: impl Fn(u64) + Send + 'static,
    ) -> R<serde_json::Value> {
        let me = os_user();
        dispatch::as_desktop(&name, &mut args, &me);
        let args = dispatch::Args::json(&name, args).map_err(|e| err(&e))?;
        match dispatch::kind(&name) {
            Some(dispatch::Kind::Upstream) => {
                let e = self.engine().await?;
                dispatch::run_upstream(&self.ops()?, &e, &name, args)
                    .await
                    .map_err(|e| err(&e))
            }
            // Under the embedded proxy's routes: an entry's view and the previews judge a replay
            // or a reconcile by them, and refuse both while the proxy is stopped. Its OS account
            // and the name typed are who asks: one who approved a held call is not offered to
            // approve it again, nor one its policy's approvers do not name.
            Some(dispatch::Kind::Ledger) => {
                let routes = self.routes().await;
                self.call_blocking(move |o| {
                    let who = Decider::account(&me).named(operator.as_deref());
                    let host = routes
                        .as_deref()
                        .map_or(Host::without_routes(), Host::routes)
                        .by(who);
                    dispatch::run(o, host, &name, args, &mut |_| true)
                })
                .await
            }
            Some(_) => {
                // A bulk replay or reconcile reaches the upstream through the embedded proxy's
                // configuration, when it runs; only such work is handed the data plane.
                let upstream = match dispatch::reaches_upstream(&name, &args) {
                    Ok(true) => self.engine().await.ok(),
                    _ => None,
                };
                let job = job.unwrap_or_else(|| format!("{name}-call"));
                self.job(&job, progress, move |o, p| {
                    let host = upstream.as_ref().map_or(Host::none(), Host::upstream);
                    dispatch::run(o, host, &name, args, p)
                })
                .await
            }
            None => Err(ErrorBody {
                code: Code::InvalidArgument,
                message: format!("{name:?} is not an operation"),
            }),
        }
    }

    /// Runs a long operation as a cancellable job: `progress` hears from it, `cancel_job(job)`
    /// stops it at its next progress report.
    async fn job<T: Send + 'static>(
        &self,
        job: &str,
        progress: impl Fn(u64) + Send + 'static,
        f: impl FnOnce(&Ops, Progress<'_>) -> OpsResult<T> + Send + 'static,
    ) -> R<T> {
        let (jobs, job) = (Arc::clone(&self.jobs), job.to_owned());
        self.call_blocking(move |o| jobs.run(&job, progress, |p| f(o, p)))
            .await
    }

    /// Asks a running job to stop; `false` when there is no such job.
    pub fn cancel_job(&self, job: &str) -> bool {
        self.jobs.cancel(job)
    }

    /// The embedded proxy's configuration, while it runs.
    async fn routes(&self) -> Option<Arc<Config>> {
        self.proxy.lock().await.as_ref().map(|p| p.cfg.clone())
    }

    async fn engine(&self) -> R<Engine> {
        let cfg = self
            .routes()
            .await
            .ok_or_else(|| err(&OpsError::NoConfig))?;
        Ok(self.ops()?.upstream(cfg))
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
                code: Code::Conflict,
                message: "the embedded proxy is already running; stop it first".into(),
            });
        }
        let (cfg, server) = opened(config.clone()).await?;
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
                code: Code::ProxyStart,
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
    use super::{Console, ErrorBody, JobProgress, LedgerInfo, ProxyStatus, R};
    use tauri::{AppHandle, Emitter, State};

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
    /// Any operation of the command table, by name; `job` names long work for its progress
    /// events and `cancel_job`; `operator` is the name typed in the header.
    #[tauri::command]
    pub async fn call(
        app: AppHandle,
        c: State<'_, Console>,
        name: String,
        args: serde_json::Value,
        job: Option<String>,
        operator: Option<String>,
    ) -> R<serde_json::Value> {
        let events = progress(app, job.clone().unwrap_or_default());
        c.call(name, args, job, operator, events).await
    }
    #[tauri::command]
    pub fn cancel_job(c: State<'_, Console>, job: String) -> bool {
        c.cancel_job(&job)
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
            commands::call,
            commands::cancel_job,
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

/// A configuration file loaded and its server opened (its admin token read, its ledger open), off
/// the async runtime: both touch files.
async fn opened(config: String) -> R<(Arc<Config>, Server)> {
    tauri::async_runtime::spawn_blocking(move || -> R<_> {
        let cfg = Arc::new(Config::load(&config).map_err(|e| ErrorBody {
            code: e.code(),
            message: e.to_string(),
        })?);
        let server = Server::open(cfg.clone()).map_err(|e| ErrorBody {
            code: e.code(),
            message: e.to_string(),
        })?;
        Ok((cfg, server))
    })
    .await
    .map_err(internal)?
}
