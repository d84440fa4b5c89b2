//! `verify` of the live log: the chain walked over pages a reader thread reads and encodes in one
//! snapshot, and the Merkle tree kept beside it recomputed on a third thread.

use super::Ledger;
use crate::chain::{self, CanonPage, VerifyReport};
use crate::db::Db;
use crate::error::{LedgerError, Result};
use crate::model::ChainHead;
use crate::read;
use crate::store::{Progress, Storage as _};

/// Events a verification reads from the log at a time, and leaf hashes it hands the tree's check
/// at a time.
const VERIFY_PAGE: usize = 2048;
/// Pages read ahead of the verification's walk.
const PAGES_AHEAD: usize = 4;

/// Recomputes the live log's chain, and its tree beside it.
pub(super) fn verify(ledger: &Ledger, progress: Progress<'_>) -> Result<VerifyReport> {
    let alg = ledger.chain_alg()?;
    chain::check_alg(&ledger.hasher, &alg)?;
    // Reading and hashing overlap: a thread reads the log in pages, encoding each event from the
    // row's own text as it reads it ([`CanonPage`]); this one hashes and checks them and hands
    // each event's leaf hash to a third, which recomputes the tree kept beside the chain. A
    // checked page goes back to the reader, which reads the next one into it: the walk
    // allocates nothing per event, and holds a few pages whatever the log's size. The reader
    // reads where the live log starts, then the log, in one snapshot: archival may remove events
    // meanwhile, and the walk must not find them gone.
    let (starts, start) = std::sync::mpsc::sync_channel::<Option<ChainHead>>(1);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<CanonPage>>(PAGES_AHEAD);
    let (back, spare) = std::sync::mpsc::channel::<CanonPage>();
    let (leaves, mut live) = crate::tree::LeafHashes::channel();
    let stop_tree = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // The hashes' receiver ends with the check's thread: a check that ends early (a
        // problem found, no tree) leaves no sender waiting for room.
        let stop = &stop_tree;
        let tree = s.spawn(move || ledger.read(|db| crate::tree::check(db, &mut live, stop)));
        s.spawn(move || {
            let read = ledger.read(|db| {
                db.in_snapshot(|db| {
                    // The live log starts after its archived part (events at or below the
                    // archived head that are still here await removal: a segment holds them).
                    let archived = read::archived_through(db)?;
                    let after = archived.as_ref().map_or(0, |h| h.seq);
                    let _ = starts.send(archived);
                    read_pages(db, after, &tx, &spare)
                })
            });
            if let Err(e) = read {
                let _ = tx.send(Err(e));
            }
        });
        let Ok(archived) = start.recv() else {
            // The reader failed before the log's start: its error is on its way.
            stop_tree.store(true, std::sync::atomic::Ordering::SeqCst);
            return Err(match rx.recv() {
                Ok(Err(e)) => e,
                _ => LedgerError::Internal("the log's reader ended early".into()),
            });
        };
        let start = archived.map_or(chain::ChainStart::Genesis, chain::ChainStart::After);
        let mut batch = Vec::with_capacity(VERIFY_PAGE);
        let mut send = |seq, bytes: &[u8]| {
            batch.push((seq, tlog_tiles::tlog::record_hash(bytes)));
            if batch.len() == VERIFY_PAGE {
                // A tree check that ended early takes no more.
                let full = std::mem::replace(&mut batch, Vec::with_capacity(VERIFY_PAGE));
                let _ = leaves.send(full);
            }
        };
        let mut walk = chain::ChainWalk::new(&ledger.hasher, start);
        let mut read = Ok(());
        // `rx` is dropped when the walk stops, which stops the reader.
        'pages: for page in rx {
            match page {
                Ok(page) => {
                    for ev in page.iter() {
                        if !walk.step_packed(&ev, progress, &mut send) {
                            break 'pages;
                        }
                    }
                    let _ = back.send(page);
                }
                Err(e) => {
                    read = Err(e);
                    break;
                }
            }
        }
        let mut report = read.map(|()| walk.finish(progress));
        if !matches!(&report, Ok(r) if r.ok && !r.cancelled) {
            stop_tree.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let _ = leaves.send(batch);
        drop(leaves);
        let tree = tree
            .join()
            .unwrap_or_else(|_| Err(LedgerError::Internal("the tree's check panicked".into())));
        // A chain that holds is checked against the tree kept beside it.
        if let Ok(r) = &mut report {
            if r.ok && !r.cancelled {
                if let Some(p) = tree? {
                    r.ok = false;
                    r.first_bad_seq = p.seq;
                    r.problem = Some(format!("the log's Merkle tree: {}", p.why));
                }
            }
        }
        report
    })
}

/// Reads the log after seq `after` in pages of [`VERIFY_PAGE`] events, into the pages `spare`
/// hands back when it has one, and sends them on `tx` until the log ends or the walk stops
/// taking them.
fn read_pages(
    db: &mut dyn Db,
    mut after: i64,
    tx: &std::sync::mpsc::SyncSender<Result<CanonPage>>,
    spare: &std::sync::mpsc::Receiver<CanonPage>,
) -> Result<()> {
    loop {
        let mut page = spare.try_recv().unwrap_or_default();
        read::canon_page_into(db, after, VERIFY_PAGE, &mut page)?;
        let Some(last) = page.last_seq() else {
            return Ok(());
        };
        after = last;
        let full = page.len() == VERIFY_PAGE;
        // A walk that stopped early dropped its end: stop reading.
        if tx.send(Ok(page)).is_err() || !full {
            return Ok(());
        }
    }
}
