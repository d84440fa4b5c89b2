//! A transparency-log witness (C2SP `tlog-witness`): it keeps the latest tree it cosigned of each
//! log it is configured with, and cosigns a new checkpoint only when a consistency proof shows
//! that it extends that tree. A log that shows two histories (a fork) or goes back (a rollback)
//! gets no cosignature, so a checkpoint with a quorum of cosignatures is one every witness saw
//! grow from what it saw before.
//!
//! **Invariant:** the check of a request's old size against the stored tree and the durable write
//! of the new one happen under one lock, before the cosignature is returned; the state file is
//! replaced whole (written beside it, synced, renamed), so a crash leaves the old or the new.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use idemgate_ledger::checkpoint::PublicKey;
use idemgate_ledger::proof::{self, ConsistencyProof, ProofError};
use idemgate_ledger::tree::TreeHead;
use serde::{Deserialize, Serialize};

mod http;

pub use http::serve;
pub use idemgate_ledger::cosignature::{generate as generate_key, Cosigner, WitnessKey};

/// Why a checkpoint was not cosigned, with the HTTP status the spec gives it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("{0}")]
    BadRequest(String),
    #[error("unknown log {0:?}")]
    UnknownLog(String),
    #[error("the checkpoint is not signed by the log's key: {0}")]
    NotSigned(String),
    /// The request's old size is not the tree this witness last cosigned (its size).
    #[error("this witness last cosigned a tree of {0} events")]
    OtherSize(u64),
    #[error("fork: a tree of {0} events with another root was cosigned")]
    SameSizeFork(u64),
    #[error("{0}")]
    Inconsistent(String),
    #[error("the witness could not record the tree: {0}")]
    Storage(String),
}

impl Refusal {
    /// The status `add-checkpoint` answers with.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::BadRequest(_) => 400,
            Refusal::NotSigned(_) => 403,
            Refusal::UnknownLog(_) => 404,
            Refusal::OtherSize(_) | Refusal::SameSizeFork(_) => 409,
            Refusal::Inconsistent(_) => 422,
            Refusal::Storage(_) => 500,
        }
    }
}

/// The tree last cosigned of one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    size: u64,
    #[serde(with = "hex32")]
    root: [u8; 32],
}

mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let s = String::deserialize(d)?;
        hex::decode(&s)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| serde::de::Error::custom("not a 32-byte hex hash"))
    }
}

/// A witness: its key, the logs it watches (by origin), and what it cosigned of each.
#[derive(Debug)]
pub struct Witness {
    cosigner: Cosigner,
    logs: BTreeMap<String, PublicKey>,
    state: PathBuf,
    seen: Mutex<BTreeMap<String, Seen>>,
}

impl Witness {
    /// A witness cosigning with `cosigner` the checkpoints of `logs` (each log's origin is its
    /// key's name), keeping what it cosigned in the file `state` (created when missing).
    pub fn open(cosigner: Cosigner, logs: Vec<PublicKey>, state: &Path) -> Result<Witness, String> {
        let seen = match std::fs::read(state) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| format!("{}: not a witness's state: {e}", state.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("{}: {e}", state.display())),
        };
        Ok(Witness {
            cosigner,
            logs: logs.into_iter().map(|k| (k.name().to_owned(), k)).collect(),
            state: state.to_path_buf(),
            seen: Mutex::new(seen),
        })
    }

    pub fn name(&self) -> &str {
        self.cosigner.name()
    }

    /// `add-checkpoint`: the cosignature line of the request's checkpoint, once it is shown to
    /// extend the tree last cosigned of its log and recorded; else why not.
    pub fn add_checkpoint(&self, body: &str, now_secs: u64) -> Result<String, Refusal> {
        let req = ConsistencyProof::parse(body).map_err(|e| Refusal::BadRequest(e.to_string()))?;
        let origin = req.checkpoint.lines().next().unwrap_or_default();
        let key = self
            .logs
            .get(origin)
            .ok_or_else(|| Refusal::UnknownLog(origin.to_owned()))?;
        let new = proof::signed_tree(key, &req.checkpoint).map_err(|e| match e {
            ProofError::Checkpoint(e) => Refusal::NotSigned(e.to_string()),
            e => Refusal::BadRequest(e.to_string()),
        })?;
        if req.old > new.size {
            return Err(Refusal::BadRequest(format!(
                "old size {} is past the checkpoint's {}",
                req.old, new.size
            )));
        }
        if req.old == 0 && !req.path.is_empty() {
            return Err(Refusal::BadRequest("a proof from size 0 is empty".into()));
        }
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let last = seen.get(origin).copied().unwrap_or(Seen {
            size: 0,
            root: [0; 32],
        });
        if req.old != last.size {
            return Err(Refusal::OtherSize(last.size));
        }
        if last.size == new.size {
            if last.root != new.root {
                return Err(Refusal::SameSizeFork(new.size));
            }
        } else if last.size > 0 {
            let then = TreeHead {
                size: last.size,
                root: last.root,
            };
            proof::extends(&req.path, new, then)
                .map_err(|e| Refusal::Inconsistent(e.to_string()))?;
        }
        let mut next = seen.clone();
        next.insert(
            origin.to_owned(),
            Seen {
                size: new.size,
                root: new.root,
            },
        );
        persist(&self.state, &next).map_err(|e| Refusal::Storage(e.to_string()))?;
        *seen = next;
        drop(seen);
        tracing::info!(log = origin, size = new.size, "cosigned");
        self.cosigner
            .cosign(&req.checkpoint, now_secs)
            .map_err(|e| Refusal::BadRequest(e.to_string()))
    }
}

/// Replaces the state file whole: written beside it, synced, renamed over it, the directory
/// synced.
fn persist(path: &Path, seen: &BTreeMap<String, Seen>) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(seen).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
