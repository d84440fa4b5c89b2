//! Long work's life, whichever host runs it: [`Running`] is the work in progress that its host can
//! cancel by name (the console's verifies, purges and bulk actions), and [`exports::Exports`] the
//! exports a client without a file system on this machine starts, follows, downloads and deletes
//! (the admin API's export jobs). Hosts only carry the progress to their clients (Tauri events,
//! NDJSON lines, a progress bar).

pub mod exports;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use idemgate_ledger::Progress;
use thiserror::Error;

use crate::{Code, OpsResult};

/// Work in progress by name, each cancellable at its next progress report.
#[derive(Debug, Default)]
pub struct Running {
    flags: Mutex<HashMap<String, Arc<AtomicBool>>>,
}

impl Running {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<AtomicBool>>> {
        // Each change is one insert or removal: a panic cannot leave the map half-changed.
        self.flags.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `work` (on this thread) as `name`: `report` hears each progress report, and
    /// [`Running::cancel`] of `name` makes the next one stop the work. Another work already under
    /// `name` keeps running, but can no longer be cancelled by it.
    pub fn run<T>(
        &self,
        name: &str,
        report: impl Fn(u64),
        work: impl FnOnce(Progress<'_>) -> OpsResult<T>,
    ) -> OpsResult<T> {
        let cancel = Arc::new(AtomicBool::new(false));
        self.lock().insert(name.to_owned(), cancel.clone());
        let r = work(&mut |n| {
            report(n);
            !cancel.load(Ordering::Relaxed)
        });
        let mut flags = self.lock();
        if flags.get(name).is_some_and(|f| Arc::ptr_eq(f, &cancel)) {
            flags.remove(name);
        }
        r
    }

    /// Asks the work `name` to stop; `false` when nothing runs under that name.
    pub fn cancel(&self, name: &str) -> bool {
        self.lock()
            .get(name)
            .map(|f| f.store(true, Ordering::Relaxed))
            .is_some()
    }
}

/// Why a job could not be started, found or downloaded.
#[derive(Debug, Error)]
pub enum JobError {
    /// The process is stopping.
    #[error("this process is stopping and {0}")]
    ShuttingDown(&'static str),
    /// As many exports run as may at once.
    #[error(
        "{0} exports are running, the most at once; try again once one has ended, or delete one"
    )]
    TooMany(usize),
    /// No such job (never started here, deleted, or expired).
    #[error("no export {0:?} in this process (an ended export is kept for an hour, and none outlives the process)")]
    NotFound(String),
    /// Its file is asked for while it is still being written.
    #[error("export {id} has written {done} events so far; download it once its state is done")]
    Running {
        /// The job.
        id: String,
        /// Events (or entries) written so far.
        done: u64,
    },
    /// Its file is asked for, and it failed.
    #[error("export {id} failed, so there is nothing to download: {why}")]
    Failed {
        /// The job.
        id: String,
        /// Why it failed.
        why: String,
    },
    /// The spool (or a directory in it) could not be made.
    #[error("cannot make a directory in {dir}: {source}")]
    Spool {
        /// Where it was to be made.
        dir: String,
        /// Why it was not.
        source: std::io::Error,
    },
}

impl JobError {
    /// Its code.
    pub fn code(&self) -> Code {
        match self {
            JobError::ShuttingDown(_) => Code::ShuttingDown,
            JobError::TooMany(_) => Code::TooManyExports,
            JobError::NotFound(_) => Code::ExportNotFound,
            JobError::Running { .. } => Code::ExportRunning,
            JobError::Failed { .. } | JobError::Spool { .. } => Code::ExportFailed,
        }
    }

    /// Its HTTP status: the code's, but a failed job's file asked for is a conflict with its
    /// state, not a failure of this request.
    pub fn status(&self) -> u16 {
        match self {
            JobError::Failed { .. } => 409,
            e => e.code().status(),
        }
    }

    /// When asking again may get another answer, in seconds.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            JobError::TooMany(_) => Some(5),
            JobError::Running { .. } => Some(1),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_work_is_cancelled_by_its_name_at_its_next_report() {
        let running = Arc::new(Running::default());
        let (at_first, go_on) = (
            std::sync::mpsc::channel::<()>(),
            std::sync::mpsc::channel::<()>(),
        );
        let r = Arc::clone(&running);
        let work = std::thread::spawn(move || {
            r.run(
                "verify",
                |_| {},
                |p| {
                    assert!(p(1), "not cancelled yet");
                    at_first.0.send(()).expect("send");
                    go_on.1.recv().expect("recv");
                    Ok(p(2))
                },
            )
        });
        at_first.1.recv().expect("the first report");
        assert!(!running.cancel("another"), "no work under that name");
        assert!(running.cancel("verify"));
        go_on.0.send(()).expect("send");
        let went_on = work.join().expect("join").expect("ran");
        assert!(!went_on, "the report after the cancel stops it");
        assert!(!running.cancel("verify"), "ended work is forgotten");
    }
}
