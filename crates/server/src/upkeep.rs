//! What the server does on its own for the audit trail while it leads the books
//! ([`crate::books`]): it adds committed events to the log's Merkle tree, applies the retention policy (purge long-expired entries, archive the
//! log past its hot period) on taking the lead and then at its interval, and signs the chain's
//! head at the checkpoint interval when it has a signing key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idemgate_config::Config;
use idemgate_ops::ledger::{now_millis, Millis};

use crate::witnesses::Witnesses;
use idemgate_ops::{op, Ops};
use tokio::sync::watch;

/// How often the leader adds newly committed events to the log's tree: an event waits at most
/// this long (and a batch's hashing) before a proof can name it.
const TREE_EVERY: Duration = Duration::from_millis(250);

/// Starts what the server does on its own while `leading` says this instance leads: adding
/// committed events to the log's tree, and what the configuration asks for (the retention
/// policy, the signing of checkpoints). Each task ends when `stop` changes.
pub(crate) fn spawn(
    cfg: &Config,
    ops: &Ops,
    leading: &watch::Receiver<Option<Millis>>,
    stop: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let tree_ops = ops.clone();
    tasks.push(tokio::spawn(every(
        "tree",
        TREE_EVERY,
        leading.clone(),
        stop.clone(),
        move |stopping| integrate(&tree_ops, stopping),
    )));
    if let Some(r) = &cfg.retention {
        let ops = ops.clone();
        tasks.push(tokio::spawn(every(
            "retention",
            r.interval,
            leading.clone(),
            stop.clone(),
            move |stopping| retention_run(&ops, stopping),
        )));
    }
    if let Some(s) = &cfg.signing {
        let ops = ops.clone();
        let witnesses = Witnesses::new(s.witnesses.clone());
        tasks.push(tokio::spawn(every(
            "checkpoint",
            s.interval,
            leading.clone(),
            stop.clone(),
            move |_| {
                checkpoint(&ops);
                witnesses.send(&ops);
            },
        )));
    }
    tasks
}

/// While `leading` holds a time, runs `work` on a blocking thread every `every` (the first on
/// taking the lead), until `stop`; `work` is told to stop early through the flag it is given.
pub(crate) async fn every(
    name: &'static str,
    every: Duration,
    mut leading: watch::Receiver<Option<Millis>>,
    mut stop: watch::Receiver<bool>,
    work: impl Fn(&AtomicBool) + Send + Sync + 'static,
) {
    let work = Arc::new(work);
    let stopping = Arc::new(AtomicBool::new(false));
    loop {
        while leading.borrow_and_update().is_none() {
            tokio::select! {
                r = leading.changed() => if r.is_err() { return },
                _ = stop.changed() => return,
            }
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                r = leading.changed() => if r.is_err() { return } else { break },
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
}

/// Adds every event committed since the last run to the log's tree, in batches, until it holds
/// them all or the server stops.
pub(crate) fn integrate(ops: &Ops, stopping: &AtomicBool) {
    let going = || !stopping.load(Ordering::SeqCst);
    match ops.integrate(&going) {
        Ok(done) => {
            // How long the oldest event added waited for the tree: 0 when none waited.
            let lag = done.oldest_at.map_or(0, |at| (now_millis() - at).max(0));
            metrics::gauge!("idemgate_tree_lag_seconds").set(lag as f64 / 1000.0);
            if done.events > 0 {
                tracing::debug!(
                    events = done.events,
                    lag_ms = lag,
                    "added to the log's tree"
                );
            }
        }
        // Another instance's step won the race (a leader that just lost the lead): the next
        // run starts from the tree as it is.
        Err(e) if e.code() == idemgate_ops::Code::Conflict => {
            tracing::debug!(error = %e, "the log's tree moved meanwhile");
        }
        Err(e) => tracing::warn!(error = %e, "could not add events to the log's tree"),
    }
}

/// One run of the retention policy `ops` is configured with, logged.
pub(crate) fn retention_run(ops: &Ops, stopping: &AtomicBool) {
    let stop = &mut |_| !stopping.load(Ordering::SeqCst);
    match op::run::<op::run_retention::Op>(ops, op::common::NoArgs {}, op::Host::none(), stop) {
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

/// Signs the chain's head and the log's tree, each unless nothing was logged since its last
/// checkpoint.
pub(crate) fn checkpoint(ops: &Ops) {
    match ops.checkpoint() {
        Ok(Some((cp, _))) => tracing::info!(seq = cp.seq, hash = %cp.hash, "signed checkpoint"),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "could not sign a checkpoint"),
    }
    match ops.sign_tree() {
        Ok(Some(head)) => {
            tracing::info!(size = head.size, root = %head.root_base64(), "signed the log's tree");
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "could not sign the log's tree"),
    }
}
