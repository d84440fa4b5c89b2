//! Exports through the admin API. An export is long work, and a file with a manifest beside it,
//! while a client of the admin API (a script, the console in a browser) has no file system on the
//! server and must never name a path there. So an export runs as a job: `POST /admin/v1/exports`
//! starts one on a thread of its own, writing into this process's spool directory (made, private,
//! in `server.export_dir`, by default the system's temporary directory); the client follows its
//! progress at `GET /admin/v1/exports/{id}`, downloads `…/file` and `…/manifest` once it is done,
//! and `DELETE`s it, which also cancels one still running. An ended job is removed an hour after
//! it ended, and the spool when the process stops.
//!
//! A process killed before it could remove its spool leaves it behind. Each spool holds a lock
//! file that its process keeps locked (`flock`) for as long as it lives, and the kernel lets go of
//! the lock however the process ends; at start, [`Exports::reclaim`] removes every spool in
//! `export_dir` whose lock nobody holds. A lock, not a pid: several processes (containers, each
//! with its own pid namespace) may share the directory, and a pid may be reused.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use idemgate_ledger::entries_export::EntriesManifest;
use idemgate_ledger::export::{manifest_path, Format, Manifest};
use idemgate_ledger::{now_millis, rfc3339, EventRange, Millis};
use serde::{Deserialize, Serialize};

use super::JobError;
use crate::{Code, ErrorBody, ExportCmd, Ops, OpsError, OpsResult};

/// Exports running at once: each holds a thread and a read of its whole range.
pub const MAX_RUNNING: usize = 2;
/// Exports kept, running or ended: a new one pushes out the one that ended first.
pub const MAX_KEPT: usize = 16;
/// How long an ended export stays to be downloaded.
pub const KEPT_FOR_MS: Millis = 3_600_000;
/// How a spool's name starts (one being made has a `.` before it).
const SPOOL_PREFIX: &str = "idemgate-exports-";
/// The file in a spool that its process holds locked.
const SPOOL_LOCK: &str = ".lock";

/// Where an export job is in its life.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportState {
    /// Being written.
    Running,
    /// Written: its file and manifest can be downloaded.
    Done,
    /// Ended without a file (failed or cancelled).
    Failed,
}

/// What an export holds: a range of the log, or the entries created in a range with their
/// outcomes.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exported {
    /// Events of the log.
    #[default]
    Events,
    /// Entries with their outcomes.
    Entries,
}

/// A done export's manifest: the log's or the entries'.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ExportManifest {
    /// An export of the log's.
    Events(Manifest),
    /// An export of entries'.
    Entries(EntriesManifest),
}

impl ExportManifest {
    fn file(&self) -> &str {
        match self {
            ExportManifest::Events(m) => &m.file,
            ExportManifest::Entries(m) => &m.file,
        }
    }

    fn format(&self) -> Format {
        match self {
            ExportManifest::Events(m) => m.format,
            ExportManifest::Entries(m) => m.format,
        }
    }

    fn count(&self) -> u64 {
        match self {
            ExportManifest::Events(m) => m.count,
            ExportManifest::Entries(m) => m.count,
        }
    }
}

/// An export job, as the admin API shows it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportJob {
    /// Its id, in its URLs.
    pub id: String,
    /// Running, done or failed.
    pub state: ExportState,
    /// Events or entries.
    pub what: Exported,
    /// NDJSON or CSV.
    pub format: Format,
    /// The range's start (RFC 3339), if it has one.
    pub since: Option<String>,
    /// The range's end (RFC 3339), if it has one.
    pub until: Option<String>,
    /// When it started (RFC 3339).
    pub created_at: String,
    /// When it ended (RFC 3339).
    pub ended_at: Option<String>,
    /// When an ended job and its files go.
    pub expires_at: Option<String>,
    /// Events (or entries) written so far (all of them, once done).
    pub done: u64,
    /// Once done: the manifest, as `…/manifest` serves it.
    pub manifest: Option<ExportManifest>,
    /// Once failed: why.
    pub error: Option<ErrorBody>,
    /// Once done: where to download the file.
    pub file_url: Option<String>,
    /// Once done: where to download its manifest.
    pub manifest_url: Option<String>,
}

#[derive(Debug)]
struct Job {
    id: String,
    what: Exported,
    format: Format,
    range: EventRange,
    created_at: Millis,
    ended_at: Option<Millis>,
    done: Arc<AtomicU64>,
    cancel: Arc<AtomicBool>,
    manifest: Option<ExportManifest>,
    error: Option<ErrorBody>,
    file: PathBuf,
}

impl Job {
    fn state(&self) -> ExportState {
        match (self.ended_at, &self.manifest) {
            (None, _) => ExportState::Running,
            (Some(_), Some(_)) => ExportState::Done,
            (Some(_), None) => ExportState::Failed,
        }
    }

    fn view(&self) -> ExportJob {
        let done = self.state() == ExportState::Done;
        let url = |tail: &str| done.then(|| format!("/admin/v1/exports/{}/{tail}", self.id));
        ExportJob {
            id: self.id.clone(),
            state: self.state(),
            what: self.what,
            format: self.format,
            since: self.range.since.map(rfc3339),
            until: self.range.until.map(rfc3339),
            created_at: rfc3339(self.created_at),
            ended_at: self.ended_at.map(rfc3339),
            expires_at: self.ended_at.map(|t| rfc3339(t + KEPT_FOR_MS)),
            done: self.done.load(Ordering::Relaxed),
            manifest: self.manifest.clone(),
            error: self.error.clone(),
            file_url: url("file"),
            manifest_url: url("manifest"),
        }
    }

    /// Its file and manifest, once nothing writes them any more.
    fn remove_files(&self) {
        remove_files(&self.file);
    }
}

fn remove_files(file: &Path) {
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(manifest_path(file));
}

/// A spool directory, and its lock held open for as long as the process keeps it.
#[derive(Debug)]
struct Spool {
    dir: PathBuf,
    _lock: File,
}

#[derive(Debug, Default)]
struct Inner {
    /// Made on the first export.
    spool: Option<Spool>,
    /// Oldest first.
    jobs: Vec<Job>,
    closed: bool,
}

/// This process's exports (see the module's documentation).
#[derive(Debug)]
pub struct Exports {
    /// Where the spool is made.
    base: PathBuf,
    inner: Mutex<Inner>,
}

/// A finished export's file or manifest, to serve.
#[derive(Debug)]
pub struct Download {
    /// The file.
    pub path: PathBuf,
    /// The name to save it under: the manifest's `file`, or that plus `.manifest.json`.
    pub name: String,
    /// Its media type.
    pub kind: &'static str,
}

fn not_found(id: &str) -> OpsError {
    JobError::NotFound(id.to_owned()).into()
}

impl Exports {
    /// Exports spooled under `base` (made there when the first one starts).
    pub fn new(base: PathBuf) -> Exports {
        Exports {
            base,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding it cannot leave a job half-changed: every change is one push,
        // removal or field store.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts exporting `range` of the log, or the entries created in it, as `format`.
    pub fn start(
        self: &Arc<Self>,
        ops: &Ops,
        what: Exported,
        format: Format,
        range: EventRange,
    ) -> OpsResult<ExportJob> {
        crate::check_range(range.since, range.until)?;
        let now = now_millis();
        let mut inner = self.lock();
        if inner.closed {
            return Err(JobError::ShuttingDown("starts no more exports").into());
        }
        prune(&mut inner, now);
        let running = inner.jobs.iter().filter(|j| j.ended_at.is_none()).count();
        if running >= MAX_RUNNING {
            return Err(JobError::TooMany(running).into());
        }
        if inner.jobs.len() >= MAX_KEPT {
            // Ended ones only: the running ones are fewer than MAX_KEPT.
            if let Some(i) = inner.jobs.iter().position(|j| j.ended_at.is_some()) {
                inner.jobs.remove(i).remove_files();
            }
        }
        let spool = self.spool(&mut inner)?;
        let id = format!("{:016x}", rand::random::<u64>());
        let file = spool.join(format!("idemgate-export-{id}.{}", format.as_str()));
        let job = Job {
            id: id.clone(),
            what,
            format,
            range,
            created_at: now,
            ended_at: None,
            done: Arc::new(AtomicU64::new(0)),
            cancel: Arc::new(AtomicBool::new(false)),
            manifest: None,
            error: None,
            file: file.clone(),
        };
        let view = job.view();
        let (done, cancel) = (job.done.clone(), job.cancel.clone());
        inner.jobs.push(job);
        drop(inner);
        let cmd = ExportCmd {
            format,
            range,
            path: file.display().to_string(),
            overwrite: false,
        };
        let ops = ops.clone();
        let this = Arc::clone(self);
        let export = move || {
            let progress = &mut |n| {
                done.store(n, Ordering::Relaxed);
                !cancel.load(Ordering::Relaxed)
            };
            // Caught, so that even an export that panicked ends its job (a job left running
            // would hold one of the MAX_RUNNING places for good).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match what {
                Exported::Events => ops
                    .export(&cmd, progress)
                    .map(|m| m.map(ExportManifest::Events)),
                Exported::Entries => ops
                    .export_entries(&cmd, progress)
                    .map(|m| m.map(ExportManifest::Entries)),
            }));
            let r = match r {
                Ok(r) => r.map_err(|e| ErrorBody::from(&e)),
                Err(_) => Err(ErrorBody {
                    code: Code::Internal,
                    message: "the export stopped: it panicked".into(),
                }),
            };
            this.finish(&id, r, &file);
        };
        if let Err(e) = std::thread::Builder::new()
            .name("idemgate-export".into())
            .spawn(export)
        {
            let mut inner = self.lock();
            if let Some(i) = inner.jobs.iter().position(|j| j.id == view.id) {
                inner.jobs.remove(i).remove_files();
            }
            return Err(OpsError::Internal(format!("cannot start the export: {e}")));
        }
        Ok(view)
    }

    /// The spool, made on first use.
    fn spool(&self, inner: &mut Inner) -> OpsResult<PathBuf> {
        if let Some(s) = &inner.spool {
            return Ok(s.dir.clone());
        }
        let s = make_spool(&self.base).map_err(|source| JobError::Spool {
            dir: self.base.display().to_string(),
            source,
        })?;
        let dir = s.dir.clone();
        inner.spool = Some(s);
        Ok(dir)
    }

    /// A private directory in the spool for an uploaded export while it is checked: removed when
    /// dropped, and with the spool (at close, or by the next start's [`Exports::reclaim`] after a
    /// kill).
    pub fn scratch(&self) -> OpsResult<tempfile::TempDir> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(JobError::ShuttingDown("checks no more uploads").into());
        }
        let spool = self.spool(&mut inner)?;
        tempfile::Builder::new()
            .prefix("upload-")
            .tempdir_in(&spool)
            .map_err(|source| {
                JobError::Spool {
                    dir: spool.display().to_string(),
                    source,
                }
                .into()
            })
    }

    /// Records how job `id` ended. A job deleted meanwhile leaves nothing behind.
    fn finish(&self, id: &str, r: Result<Option<ExportManifest>, ErrorBody>, file: &Path) {
        let mut inner = self.lock();
        let Some(job) = inner.jobs.iter_mut().find(|j| j.id == id) else {
            remove_files(file);
            return;
        };
        job.ended_at = Some(now_millis());
        match r {
            Ok(Some(m)) => {
                job.done.store(m.count(), Ordering::Relaxed);
                job.manifest = Some(m);
            }
            Ok(None) => {
                job.error = Some(ErrorBody {
                    code: Code::Cancelled,
                    message: "the export was cancelled".into(),
                });
            }
            Err(e) => {
                tracing::warn!(export = id, code = %e.code, error = %e.message, "an export through the admin API failed");
                job.error = Some(e);
                remove_files(file);
            }
        }
    }

    /// Every export kept, newest first.
    pub fn list(&self) -> Vec<ExportJob> {
        let mut inner = self.lock();
        prune(&mut inner, now_millis());
        inner.jobs.iter().rev().map(Job::view).collect()
    }

    /// Export `id`.
    pub fn get(&self, id: &str) -> OpsResult<ExportJob> {
        let mut inner = self.lock();
        prune(&mut inner, now_millis());
        inner
            .jobs
            .iter()
            .find(|j| j.id == id)
            .map(Job::view)
            .ok_or_else(|| not_found(id))
    }

    /// A done export's file (`manifest` false) or manifest.
    pub fn download(&self, id: &str, manifest: bool) -> OpsResult<Download> {
        let mut inner = self.lock();
        prune(&mut inner, now_millis());
        let job = inner
            .jobs
            .iter()
            .find(|j| j.id == id)
            .ok_or_else(|| not_found(id))?;
        let Some(m) = &job.manifest else {
            return Err(match &job.error {
                None => JobError::Running {
                    id: id.to_owned(),
                    done: job.done.load(Ordering::Relaxed),
                },
                Some(e) => JobError::Failed {
                    id: id.to_owned(),
                    why: e.message.clone(),
                },
            }
            .into());
        };
        Ok(if manifest {
            Download {
                path: manifest_path(&job.file),
                name: format!("{}.manifest.json", m.file()),
                kind: "application/json",
            }
        } else {
            Download {
                path: job.file.clone(),
                name: m.file().to_owned(),
                kind: match m.format() {
                    Format::Ndjson => "application/x-ndjson",
                    Format::Csv => "text/csv; charset=utf-8",
                },
            }
        })
    }

    /// Deletes export `id`, and cancels it if it is still running.
    pub fn delete(&self, id: &str) -> OpsResult<()> {
        let mut inner = self.lock();
        let i = inner
            .jobs
            .iter()
            .position(|j| j.id == id)
            .ok_or_else(|| not_found(id))?;
        let job = inner.jobs.remove(i);
        if job.ended_at.is_none() {
            // Its thread removes what it wrote when it ends ([`Exports::finish`]).
            job.cancel.store(true, Ordering::Relaxed);
        } else {
            job.remove_files();
        }
        Ok(())
    }

    /// At the process's end: cancels what runs, and removes the spool and every file in it.
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        for j in inner.jobs.drain(..) {
            j.cancel.store(true, Ordering::Relaxed);
        }
        if let Some(s) = inner.spool.take() {
            let _ = std::fs::remove_dir_all(&s.dir);
        }
    }

    /// Removes the spools in `export_dir` that no live process holds: those of processes that were
    /// killed before they could remove their own. Returns the ones removed. A spool whose lock
    /// cannot be opened (another user's) or that has no lock file is left.
    pub fn reclaim(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut removed = Vec::new();
        // Not the ones still being made (`.idemgate-exports-…`): their lock may not be held yet.
        for entry in std::fs::read_dir(&self.base)?.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().starts_with(SPOOL_PREFIX)
                || !entry.file_type().is_ok_and(|t| t.is_dir())
            {
                continue;
            }
            let dir = entry.path();
            let Ok(lock) = File::open(dir.join(SPOOL_LOCK)) else {
                continue;
            };
            // Held by the live process that made it (this one's own too: a lock belongs to an open
            // file, and this is another).
            if lock.try_lock().is_ok() && std::fs::remove_dir_all(&dir).is_ok() {
                removed.push(dir);
            }
        }
        Ok(removed)
    }
}

/// Removes the jobs that ended more than [`KEPT_FOR_MS`] ago, and their files.
fn prune(inner: &mut Inner, now: Millis) {
    inner.jobs.retain(|j| {
        let keep = j.ended_at.is_none_or(|t| now - t < KEPT_FOR_MS);
        if !keep {
            j.remove_files();
        }
        keep
    });
}

/// A new directory in `base`, readable by this user only (exports hold the log's keys and scopes),
/// holding its lock. It is made under a name starting with `.` and renamed once its lock is held,
/// so that no [`Exports::reclaim`] can take it for a dead process's while it is being made.
fn make_spool(base: &Path) -> std::io::Result<Spool> {
    let name = format!(
        "{SPOOL_PREFIX}{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let making = base.join(format!(".{name}"));
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(&making)?;
    let locked = File::create_new(making.join(SPOOL_LOCK)).and_then(|f| {
        f.try_lock().map_err(std::io::Error::from)?;
        Ok(f)
    });
    let dir = base.join(name);
    match locked.and_then(|lock| std::fs::rename(&making, &dir).map(|()| lock)) {
        Ok(lock) => Ok(Spool { dir, _lock: lock }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&making);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests;
