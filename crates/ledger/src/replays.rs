//! The replay cache (SQLite): completed entries' stored responses in memory, so that a replay
//! needs no query (docs/design.md: "a bounded cache of recent completed responses serves replays
//! without a query"). A replay's read cost a read transaction — two file locks, a statement, a row
//! decoded — about a quarter of a replay's CPU (BENCHMARKS.md).
//!
//! It is exact, across connections and processes. A cached entry is served only while nothing has
//! been committed to the ledger since the cache last caught up with the log:
//!
//! - **Any commit is seen.** Every write transaction, by any connection of any process, rewrites
//!   the WAL-index header, the first 48 bytes of the `-shm` file, incrementing its change counter
//!   (<https://www.sqlite.org/walformat.html>, "The WAL-Index Header"). A hit reads those bytes (one
//!   `pread`) and compares them with the header it last caught up at.
//! - **Catching up** reads the log since the last event it saw, in one statement (one snapshot,
//!   taken after the header was read): every entry an event names is dropped from the cache. That
//!   covers the one change a completed, unexpired entry can undergo — a purge, always logged — and
//!   anything a later version adds, as long as it is logged (every state change is; ARCHITECTURE.md).
//!   An expiry needs no event: a hit checks `expires_at` itself.
//! - **A fill cannot undo a catch-up.** An entry enters the cache from a read whose snapshot also
//!   gave the log's head; it is kept only if that head is not behind what the cache has caught up
//!   to, so a purge the read did not see is one the next catch-up will.
//!
//! Under a steady stream of writes the header changes at every commit and the cache catches up
//! before serving (or lets the read serve): it pays off when replays come while little is written —
//! a client retrying in a loop, a retry storm after an outage.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use std::sync::LazyLock;

use crate::db::{vals, Db};
use crate::entry_row::{map_row, Row, AFTER_ROW, ROW_COLS};
use crate::error::Result;
use crate::model::{self, Millis, ResponseRecord};
use crate::read;
use crate::store::ClaimRequest;

/// The WAL-index header's length: its first copy (of two) in the `-shm` file.
const HEADER: usize = 48;
/// The most entries kept; past it the cache starts over.
const MAX_ENTRIES: usize = 16_384;
/// The most response bytes kept; past it the cache starts over.
const MAX_BYTES: usize = 32 << 20;
/// Larger responses are not kept (a replay of one is dominated by sending it anyway).
const MAX_BODY: usize = 64 << 10;
/// A catch-up that finds more events than this starts the cache over instead of reading them.
pub(crate) const CATCH_UP_MAX: usize = 4_096;

/// A completed entry as a replay needs it.
#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub entry_id: i64,
    pub fingerprint: String,
    pub expires_at: Option<Millis>,
    pub response: ResponseRecord,
    /// The log's head in the snapshot it was read from: later events naming it drop it.
    pub as_of: i64,
}

/// What a catch-up read, in one snapshot: the log's last sequence number, and the entries named by
/// the events after the one it started from, each with the last such event — or `overflow` when
/// there were more than [`CATCH_UP_MAX`] of those (the cache then starts over at `head`).
#[derive(Debug, Default)]
pub(crate) struct Caught {
    pub head: i64,
    pub entries: HashMap<i64, i64>,
    pub overflow: bool,
}

#[derive(Debug)]
struct State {
    /// The WAL-index header when the cache last caught up; `None` before the first catch-up.
    header: Option<[u8; HEADER]>,
    /// The log's last sequence number at that catch-up.
    seen: i64,
    map: HashMap<String, Cached>,
    bytes: usize,
}

impl State {
    /// The cached entry of `key` if a request with `fingerprint` at `at` may be answered from it.
    fn servable(&self, key: &str, fingerprint: &str, at: Millis) -> Option<&Cached> {
        self.map
            .get(key)
            .filter(|c| c.fingerprint == fingerprint && c.expires_at.is_none_or(|e| e > at))
    }
}

#[derive(Debug)]
pub(crate) struct ReplayCache {
    shm: File,
    state: Mutex<State>,
    /// Held while catching up: one catch-up at a time; other hits meanwhile go to the ledger.
    catching_up: Mutex<()>,
    hits: AtomicU64,
    catch_ups: AtomicU64,
}

/// The cache's key of `(route, scope, key)`.
pub(crate) fn cache_key(route: &str, scope: &str, key: &str) -> String {
    let mut k = String::with_capacity(route.len() + scope.len() + key.len() + 2);
    for part in [route, "\0", scope, "\0", key] {
        k.push_str(part);
    }
    k
}

impl ReplayCache {
    /// A cache over the WAL-mode ledger at `db` whose log ends at `head`; `None` when its `-shm`
    /// file cannot be read (then every replay is read from the ledger).
    pub fn open(db: &Path, head: i64) -> Option<ReplayCache> {
        let mut shm = db.as_os_str().to_owned();
        shm.push("-shm");
        let shm = File::open(shm).ok()?;
        let cache = ReplayCache {
            shm,
            state: Mutex::new(State {
                header: None,
                seen: head,
                map: HashMap::new(),
                bytes: 0,
            }),
            catching_up: Mutex::new(()),
            hits: AtomicU64::new(0),
            catch_ups: AtomicU64::new(0),
        };
        cache.header()?;
        Some(cache)
    }

    fn header(&self) -> Option<[u8; HEADER]> {
        let mut h = [0u8; HEADER];
        self.shm.read_exact_at(&mut h, 0).ok()?;
        Some(h)
    }

    /// Replays served so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Catch-ups so far (each read the log since the last one).
    pub fn catch_ups(&self) -> u64 {
        self.catch_ups.load(Ordering::Relaxed)
    }

    /// The stored response of `key` when its entry is completed, unexpired at `at`, was claimed
    /// with `fingerprint`, and nothing was committed since the cache last caught up — catching up
    /// first (with `catch_up(seen)`) when something was. `None`: ask the ledger.
    pub fn get(
        &self,
        key: &str,
        fingerprint: &str,
        at: Millis,
        catch_up: impl FnOnce(i64) -> Option<Caught>,
    ) -> Option<(i64, ResponseRecord)> {
        // Only a hit needs the cache to be current: anything else (a first call, another request
        // under the key, an expired entry) goes to the ledger without a catch-up, which reads the
        // log — under first calls the header changes at every commit.
        let known = {
            let s = self.state.lock().ok()?;
            s.servable(key, fingerprint, at)?;
            s.header
        };
        let header = self.header()?;
        if known != Some(header) {
            // One catch-up at a time; a hit that would wait goes to the ledger instead.
            let _one = self.catching_up.try_lock().ok()?;
            let seen = self.state.lock().ok()?.seen;
            // Read after the header: the catch-up's snapshot holds every commit the header counts.
            let caught = catch_up(seen)?;
            self.catch_ups.fetch_add(1, Ordering::Relaxed);
            let mut s = self.state.lock().ok()?;
            if caught.overflow {
                s.map.clear();
                s.bytes = 0;
            } else if !caught.entries.is_empty() {
                let mut freed = 0;
                s.map.retain(|_, c| {
                    // An event the entry's own read already saw changes nothing.
                    let keep = caught
                        .entries
                        .get(&c.entry_id)
                        .is_none_or(|&seq| seq <= c.as_of);
                    if !keep {
                        freed += size(c);
                    }
                    keep
                });
                s.bytes -= freed;
            }
            s.seen = caught.head.max(seen);
            s.header = Some(header);
        }
        let s = self.state.lock().ok()?;
        if s.header != Some(header) {
            return None;
        }
        let c = s.servable(key, fingerprint, at)?;
        let hit = (c.entry_id, c.response.clone());
        drop(s);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(hit)
    }

    /// Keeps `entry`, read in one snapshot with the log's head (`entry.as_of`), unless the cache has
    /// caught up past that snapshot (then a purge the read missed may already be behind the cache).
    pub fn fill(&self, key: String, entry: Cached) {
        if entry.response.body.len() > MAX_BODY {
            return;
        }
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        if entry.as_of < s.seen {
            return;
        }
        if s.map.len() >= MAX_ENTRIES || s.bytes + size(&entry) > MAX_BYTES {
            s.map.clear();
            s.bytes = 0;
        }
        s.bytes += size(&entry);
        if let Some(old) = s.map.insert(key, entry) {
            s.bytes -= size(&old);
        }
    }
}

fn size(c: &Cached) -> usize {
    c.response.body.len()
        + c.response
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum::<usize>()
        + c.fingerprint.len()
}

/// The read of a replay (SQLite): [`LOOKUP`] and, from the same snapshot, the log's last sequence
/// number (what the replay cache has then seen).
static REPLAY_LOOKUP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {ROW_COLS}, resp_status, resp_headers, resp_body, \
         (SELECT seq FROM events ORDER BY seq DESC LIMIT 1) FROM entries \
         WHERE route = ?1 AND scope = ?2 AND key = ?3"
    )
});

/// The read-only half of a claim (`write::claim`), for answering replays without the writer: the entry of a
/// completed, unexpired key claimed with this very request (its stored response and expiry), and
/// the log's head in the same snapshot. Anything else (`None`) is the claim's to decide under the
/// write lock. The caller counts the replay (`write::count_replays`, with a later batch).
pub(crate) fn replayable(db: &mut dyn Db, req: &ClaimRequest) -> Result<Option<Cached>> {
    let found = db.opt(
        &REPLAY_LOOKUP,
        vals![&req.route, &req.scope, &req.key],
        |r| {
            Ok((
                map_row(r)?,
                read::response_cols(r, AFTER_ROW)?,
                r.opt_int(AFTER_ROW + 3)?,
            ))
        },
    )?;
    Ok(found.and_then(|(row, response, head)| replay_of(req, row, response, head.unwrap_or(0))))
}

/// The replay `req` gets from its key's entry `row` (with its stored `response`, read in a
/// snapshot whose log ended at `as_of`): only a completed, unexpired entry claimed with this very
/// request has one.
pub(crate) fn replay_of(
    req: &ClaimRequest,
    row: Row,
    response: Option<ResponseRecord>,
    as_of: i64,
) -> Option<Cached> {
    match response {
        Some(response)
            if row.state == model::State::Completed
                && !row.expired(req.at)
                && row.fingerprint == req.fingerprint =>
        {
            Some(Cached {
                entry_id: row.id,
                fingerprint: row.fingerprint,
                expires_at: row.expires_at,
                response,
                as_of,
            })
        }
        _ => None,
    }
}

/// The replay cache's catch-up: the log's head and the entries named by the events after `seen`
/// (each with the last of them), in one statement (one snapshot); at most [`CATCH_UP_MAX`] events
/// are read (more: `overflow`).
pub(crate) fn log_since(db: &mut dyn Db, seen: i64) -> Result<Caught> {
    let mut caught = Caught {
        head: seen,
        ..Caught::default()
    };
    let mut n = 0;
    db.each(
        "SELECT (SELECT seq FROM events ORDER BY seq DESC LIMIT 1), entry_id, seq FROM events \
         WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        vals![seen, CATCH_UP_MAX as i64 + 1],
        &mut |r| {
            caught.head = r.int(0)?;
            n += 1;
            if let Some(id) = r.opt_int(1)? {
                caught.entries.insert(id, r.int(2)?);
            }
            Ok(true)
        },
    )?;
    caught.overflow = n > CATCH_UP_MAX;
    Ok(caught)
}
