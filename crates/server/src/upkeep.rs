//! What the server does on its own for the audit trail: it applies the retention policy (purge
//! long-expired entries, archive the log past its hot period) once at start and then at its
//! interval, and signs the chain's head at the checkpoint interval when it has a signing key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idemgate_config::Config;
use idemgate_ops::{op, Ops};

/// Starts what the configuration asks the server to do on its own: the retention policy and the
/// signing of checkpoints. Each task ends when `stop` changes.
pub(crate) fn spawn(
    cfg: &Config,
    ops: &Ops,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(r) = &cfg.retention {
        let ops = ops.clone();
        tasks.push(tokio::spawn(every(
            "retention",
            r.interval,
            stop.clone(),
            move |stopping| retention_run(&ops, stopping),
        )));
    }
    if let Some(s) = &cfg.signing {
        let (ops, last) = (ops.clone(), std::sync::Mutex::new(None));
        tasks.push(tokio::spawn(every(
            "checkpoint",
            s.interval,
            stop.clone(),
            move |_| checkpoint(&ops, &last),
        )));
    }
    tasks
}

/// Runs `work` on a blocking thread every `every` (the first at once) until `stop`; `work` is
/// told to stop early through the flag it is given.
pub(crate) async fn every(
    name: &'static str,
    every: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    work: impl Fn(&AtomicBool) + Send + Sync + 'static,
) {
    let work = Arc::new(work);
    let stopping = Arc::new(AtomicBool::new(false));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let (w, s) = (work.clone(), stopping.clone());
        let mut run = tokio::task::spawn_blocking(move || w(&s));
        tokio::select! {
            r = &mut run => {
                if let Err(e) = r {
                    tracing::error!(task = name, error = %e, "task failed");
                }
            }
            _ = stop.changed() => {
                // Between two of its atomic steps; what is done stays done.
                stopping.store(true, Ordering::SeqCst);
                let _ = run.await;
                return;
            }
        }
    }
}

/// One run of the retention policy `ops` is configured with, logged.
pub(crate) fn retention_run(ops: &Ops, stopping: &AtomicBool) {
    let stop = &mut |_| !stopping.load(Ordering::SeqCst);
    match op::run::<op::run_retention::Op>(ops, op::common::NoArgs {}, None, stop) {
        Ok(r) => {
            let archived = r.archive.as_ref().map_or(0, |a| a.segments.len());
            if r.purged > 0 || archived > 0 {
                tracing::info!(
                    purged = r.purged,
                    segments = archived,
                    archived_through = ?r.archive.as_ref().and_then(|a| a.archived_through.as_ref()).map(|h| h.seq),
                    "retention policy applied"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "retention policy could not run"),
    }
}

/// Signs the chain's head unless nothing was logged since the last checkpoint (`last`: the seq of
/// that checkpoint's own event).
pub(crate) fn checkpoint(ops: &Ops, last: &std::sync::Mutex<Option<i64>>) {
    let unless = *last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match ops.checkpoint(unless) {
        Ok(Some((cp, seq))) => {
            tracing::info!(seq = cp.seq, hash = %cp.hash, "signed checkpoint");
            *last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(seq);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "could not sign a checkpoint"),
    }
}
