//! The lead of the books (`idemgate_ledger::Lead`): on a ledger several instances share, one of
//! them at a time applies the retention policy, archives and signs checkpoints. A thread of this
//! process tries to take the lead every [`TRY_EVERY`] and, while it holds it, checks as often that
//! it still does; the upkeep tasks run only while it leads.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use idemgate_ops::ledger::{now_millis, Lead, Leader, LedgerError, Millis, Storage};
use tokio::sync::watch;

/// How often an instance tries for the lead, and the leader checks it still holds it: after a
/// leader's death, another leads within this (and its session's end).
pub(crate) const TRY_EVERY: Duration = Duration::from_secs(2);

/// This instance's part in the lead: whether it leads, since when.
#[derive(Debug, Clone)]
pub(crate) struct Books {
    instance: String,
    store: Arc<dyn Storage>,
    leading: watch::Receiver<Option<Millis>>,
}

/// Ends the lead's thread when dropped, which drops the lead: its session ends, and another
/// instance takes it at its next try.
pub(crate) struct Keeper {
    _stop: mpsc::Sender<()>,
}

impl Books {
    /// Starts trying for the lead as `instance`; returns once the first try is made (on a
    /// ledger this process alone writes, it leads from then on).
    pub(crate) async fn start(store: Arc<dyn Storage>, instance: String) -> (Books, Keeper) {
        let (tx, leading) = watch::channel(None);
        let (stop, stopped) = mpsc::channel();
        let (tried, first) = tokio::sync::oneshot::channel();
        let (s, who) = (store.clone(), instance.clone());
        // A thread, not a task: a PostgreSQL lead is a connection driving a runtime of its own,
        // which must be kept and dropped off the server's.
        std::thread::Builder::new()
            .name("idemgate-lead".into())
            .spawn(move || keep(&*s, &who, &tx, &stopped, tried))
            .expect("spawn the lead's thread");
        let _ = first.await;
        (
            Books {
                instance,
                store,
                leading,
            },
            Keeper { _stop: stop },
        )
    }

    /// This instance's id.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// Since when this instance leads, if it does.
    pub(crate) fn leading(&self) -> Option<Millis> {
        *self.leading.borrow()
    }

    /// Changes to [`Books::leading`], for the tasks that run while this instance leads.
    pub(crate) fn watch(&self) -> watch::Receiver<Option<Millis>> {
        self.leading.clone()
    }

    /// The instance that leads now: this one, or the one the ledger names. Blocking.
    pub(crate) fn leader(&self) -> Result<Option<Leader>, LedgerError> {
        match self.leading() {
            Some(since) => Ok(Some(Leader {
                instance: self.instance.clone(),
                since,
            })),
            None => self.store.leader(),
        }
    }
}

fn keep(
    store: &dyn Storage,
    instance: &str,
    leading: &watch::Sender<Option<Millis>>,
    stop: &mpsc::Receiver<()>,
    tried: tokio::sync::oneshot::Sender<()>,
) {
    let mut tried = Some(tried);
    let mut lead: Option<Box<dyn Lead>> = None;
    let mut failing = false;
    metrics::gauge!("idemgate_leader").set(0.0);
    loop {
        let held = lead.as_mut().map(|l| l.holds());
        let at = now_millis();
        match held {
            Some(true) => {}
            Some(false) => {
                lead = None;
                leading.send_replace(None);
                metrics::gauge!("idemgate_leader").set(0.0);
                tracing::warn!(
                    instance,
                    "lost the lead of the books (its database session ended)"
                );
            }
            None => match store.lead(instance, at) {
                Ok(Some(l)) => {
                    lead = Some(l);
                    failing = false;
                    leading.send_replace(Some(at));
                    metrics::gauge!("idemgate_leader").set(1.0);
                    tracing::info!(instance, "leading the books: retention, archival, signing");
                }
                Ok(None) => failing = false,
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "cannot try for the lead of the books");
                    }
                    failing = true;
                }
            },
        }
        if let Some(t) = tried.take() {
            let _ = t.send(());
        }
        match stop.recv_timeout(TRY_EVERY) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    leading.send_replace(None);
}
