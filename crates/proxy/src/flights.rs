//! The map of keys in flight: which keys this process is driving upstream right now.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use idemgate_ledger::Millis;

/// The keys this process has claimed and is still driving upstream, so that a concurrent duplicate
/// is answered without the ledger (docs/design.md: "an in-memory map of keys in flight answers a
/// concurrent duplicate without touching the disk"), and a duplicate that waits (`in_flight =
/// "wait"`) is woken when the first request ends instead of asking the ledger every 25 ms.
///
/// It only ever answers what the ledger would: while this process holds a key's lease, the entry is
/// PENDING and nobody else may change it (an operator can only act on a stuck entry, i.e. once the
/// lease has passed, and purge refuses pending entries). A lookup past the lease, or with another
/// fingerprint (a collision must be recorded), goes to the ledger.
#[derive(Debug, Default)]
pub(crate) struct Flights(Mutex<HashMap<String, Flight>>);

#[derive(Debug)]
pub(crate) struct Flight {
    pub(crate) entry_id: i64,
    pub(crate) fingerprint: String,
    pub(crate) lease_expires_at: Millis,
    /// Woken (all waiters) when the request ends, however it ends.
    pub(crate) done: Arc<tokio::sync::Notify>,
}

/// What the map knows of a key.
pub(crate) enum Seen {
    /// Not in flight here (or past its lease, or another request: the ledger decides).
    Unknown,
    /// In flight here with this request's fingerprint; `ended` resolves when it ends (made while
    /// the map was locked, so an end right after the lookup still wakes it).
    InFlight {
        entry_id: i64,
        lease_expires_at: Millis,
        ended: tokio::sync::futures::OwnedNotified,
    },
}

pub(crate) fn flight_key(route: &str, scope: &str, key: &str) -> String {
    let mut k = String::with_capacity(route.len() + scope.len() + key.len() + 2);
    for part in [route, "\0", scope, "\0", key] {
        k.push_str(part);
    }
    k
}

impl Flights {
    pub(crate) fn seen(&self, k: &str, fingerprint: &str, now: Millis) -> Seen {
        let Ok(map) = self.0.lock() else {
            return Seen::Unknown;
        };
        match map.get(k) {
            Some(f) if f.fingerprint == fingerprint && now < f.lease_expires_at => Seen::InFlight {
                entry_id: f.entry_id,
                lease_expires_at: f.lease_expires_at,
                ended: f.done.clone().notified_owned(),
            },
            _ => Seen::Unknown,
        }
    }

    /// Records a claimed key until the returned guard is dropped.
    pub(crate) fn take_off(&self, k: String, f: Flight) -> Landing<'_> {
        if let Ok(mut map) = self.0.lock() {
            map.insert(k.clone(), f);
        }
        Landing { flights: self, k }
    }
}

/// Removes its key from the map and wakes the waiters when the request ends — answered, failed, or
/// dropped with its connection.
pub(crate) struct Landing<'a> {
    flights: &'a Flights,
    k: String,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        if let Ok(mut map) = self.flights.0.lock() {
            if let Some(f) = map.remove(&self.k) {
                f.done.notify_waiters();
            }
        }
    }
}
