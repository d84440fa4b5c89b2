//! Proofs for auditors: one event's inclusion in the log's Merkle tree, as a C2SP tlog-proof
//! signed by the log's key ([`idemgate_ledger::proof`]), and its check with the public key alone.

use std::path::Path;

use idemgate_ledger::checkpoint::PublicKey;
use idemgate_ledger::cosignature::WitnessKey;
use idemgate_ledger::proof::{self, ConsistencyProof, InclusionProof, ProofError};
use idemgate_ledger::tree::TreeHead;
use idemgate_ledger::{archive, now_millis, tree, Event, LedgerError, Storage};
use serde::{Deserialize, Serialize};

use crate::{Ops, OpsError, OpsResult};

/// An event's inclusion proof.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventProof {
    /// The event's sequence number.
    pub seq: i64,
    /// Its leaf index in the tree.
    pub index: u64,
    /// The size of the tree the checkpoint signs.
    pub size: u64,
    /// That tree's root, base64.
    pub root: String,
    /// The proof itself, in the C2SP tlog-proof format (a `.tlog-proof` file).
    pub proof: String,
}

/// A newer signed tree and the proof that it extends an older one.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeExtension {
    /// The older tree's size.
    pub old: u64,
    /// The newer tree's size.
    pub size: u64,
    /// The newer tree's root, base64.
    pub root: String,
    /// The proof and the newer checkpoint, as the body of a C2SP tlog-witness `add-checkpoint`
    /// request.
    pub proof: String,
}

/// A kept checkpoint of the log's tree as it goes to a witness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessRequest {
    /// The tree's size.
    pub size: u64,
    /// The checkpoint, as kept.
    pub note: String,
    /// The `add-checkpoint` request's body.
    pub body: String,
}

/// What checking a proof found.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofReport {
    /// The checkpoint is the key's, the event is in the tree it signs, and enough of the
    /// witnesses asked for cosigned it.
    pub ok: bool,
    /// The event's leaf index, as the proof gives it.
    pub index: u64,
    /// The signed tree's size, once the signature checks.
    pub size: Option<u64>,
    /// That tree's root, base64, when the proof checks.
    pub root: Option<String>,
    /// When the checkpoint was signed, when the proof checks.
    pub signed_at: Option<String>,
    /// The witnesses asked for whose cosignature the checkpoint carries.
    pub cosigned_by: Vec<String>,
    /// The event the proof carries, as logged (its fields without the chain's hashes).
    pub event: serde_json::Value,
    /// Why it does not check.
    pub problem: Option<String>,
}

impl Ops {
    /// Adds the events committed since the tree's last leaf to the log's tree, in batches,
    /// while `keep_going` says so: how many, and when the oldest of them was logged. Refused
    /// (conflict) when another integrator added some of them meanwhile.
    pub fn integrate(&self, keep_going: &dyn Fn() -> bool) -> OpsResult<tree::Integrated> {
        Ok(tree::catch_up(self.store.as_ref(), keep_going)?)
    }

    /// Signs the tree as it stands and keeps the checkpoint, unless one of this size is kept
    /// already (nothing was logged since, or another instance signed it): the tree signed.
    pub fn sign_tree(&self) -> OpsResult<Option<TreeHead>> {
        let signer = self.signing_key("signing the tree")?;
        let store: &dyn Storage = self.store.as_ref();
        tree::catch_up(store, &|| true)?;
        let head = tree::head(store)?;
        let kept = store.tree_checkpoint(0)?.map_or(0, |(size, _)| size);
        if head.size <= kept {
            return Ok(None);
        }
        let cp = signer.sign(&head.signed_head(), now_millis());
        match store
            .note_tree_checkpoint(head.size, cp.note, now_millis())
            .wait()
        {
            Ok(()) => Ok(Some(head)),
            Err(LedgerError::AlreadySigned { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The inclusion proof of event `seq`, under the newest kept checkpoint of the tree that
    /// covers it (with the cosignatures witnesses gave it), else under one freshly signed with
    /// this host's key. The tree is brought up to date first.
    pub fn prove(&self, seq: i64) -> OpsResult<EventProof> {
        let store: &dyn Storage = self.store.as_ref();
        tree::catch_up(store, &|| true)?;
        let index = store.leaf_of(seq)?.ok_or(LedgerError::NotInTree(seq))?;
        let mut event = None;
        store.scan_seqs(seq, seq, &mut |e| {
            event = Some(e);
            Ok(false)
        })?;
        let event = match event {
            Some(e) => e,
            None => self.archived_event(seq)?,
        };
        let (head, checkpoint) = match store.tree_checkpoint(index)? {
            Some((size, note)) => (tree::root_at(store, size)?, note),
            None => {
                let signer = self.signing_key("a proof's checkpoint")?;
                let head = tree::head(store)?;
                (head, signer.sign(&head.signed_head(), now_millis()).note)
            }
        };
        let path = tree::prove_leaf(store, head.size, index)?;
        let proof = InclusionProof {
            leaf: tree::leaf_bytes(&event),
            index,
            path,
            checkpoint,
        };
        Ok(EventProof {
            seq,
            index,
            size: head.size,
            root: head.root_base64(),
            proof: proof.encode(),
        })
    }
}

impl Ops {
    /// The proof that the log's tree now extends the one `old` (a checkpoint this log's key
    /// signed, a proof file carrying one, or an export's manifest) commits to, under a freshly signed checkpoint.
    /// Refused when the tree of that size is not the one signed: the log was rewritten since.
    pub fn prove_extension(&self, old: &str) -> OpsResult<TreeExtension> {
        let signer = self.signing_key("a consistency proof")?;
        let then = proof::signed_tree(&signer.public(), &proof::checkpoint_of(old))
            .map_err(|e| OpsError::invalid("checkpoint", &e.to_string()))?;
        let store: &dyn Storage = self.store.as_ref();
        tree::catch_up(store, &|| true)?;
        let head = tree::head(store)?;
        if then.size > head.size {
            return Err(OpsError::Conflict(format!(
                "the checkpoint signs {} events, this log's tree holds {}: it is another log's, \
                 or this one was cut back",
                then.size, head.size
            )));
        }
        if tree::root_at(store, then.size)?.root != then.root {
            return Err(OpsError::Conflict(format!(
                "this log's tree of {} events is not the one the checkpoint signs: the log was \
                 rewritten since",
                then.size
            )));
        }
        let path = if then.size == 0 || then.size == head.size {
            Vec::new()
        } else {
            tree::prove_extends(store, head.size, then.size)?
        };
        let cp = signer.sign(&head.signed_head(), now_millis());
        Ok(TreeExtension {
            old: then.size,
            size: head.size,
            root: head.root_base64(),
            proof: ConsistencyProof {
                old: then.size,
                path,
                checkpoint: cp.note,
            }
            .encode(),
        })
    }

    /// Event `seq` as its sealed archive segment holds it.
    fn archived_event(&self, seq: i64) -> OpsResult<Event> {
        let segments = self.store.archived()?;
        let seg = segments
            .iter()
            .find(|s| s.first_seq <= seq && seq <= s.seq)
            .ok_or(LedgerError::NotInTree(seq))?;
        let place = self.archive_place()?.ok_or_else(|| {
            OpsError::invalid(
                "archive",
                &format!(
                    "event {seq} is archived in {}: name the archive (--archive DIR, or \
                     [retention] archive_dir)",
                    seg.file
                ),
            )
        })?;
        archive::archived_event(&place, seg, seq)?.ok_or_else(|| {
            OpsError::Ledger(LedgerError::Corrupt(format!(
                "{} does not hold event {seq}",
                seg.file
            )))
        })
    }

    /// What to send a witness that last cosigned the tree of `old` leaves: the newest kept
    /// checkpoint with the proof that it extends that tree, as an `add-checkpoint` body, and its
    /// size and note. `None` when no kept checkpoint is larger.
    pub fn witness_request(&self, old: u64) -> OpsResult<Option<WitnessRequest>> {
        let store: &dyn Storage = self.store.as_ref();
        let Some((size, note)) = store.tree_checkpoint(0)? else {
            return Ok(None);
        };
        if size <= old {
            return Ok(None);
        }
        let path = if old == 0 {
            Vec::new()
        } else {
            tree::prove_extends(store, size, old)?
        };
        let body = ConsistencyProof {
            old,
            path,
            checkpoint: note.clone(),
        }
        .encode();
        Ok(Some(WitnessRequest { size, note, body }))
    }

    /// Keeps `witness`'s cosignature `line` of the kept checkpoint of the tree of `size` (`note`,
    /// as it was sent), once it checks: whether it was added.
    pub fn note_cosignature(
        &self,
        size: u64,
        note: &str,
        witness: &WitnessKey,
        line: &str,
    ) -> OpsResult<bool> {
        let line = line.trim_end();
        if witness.cosigned(&format!("{note}{line}\n")).is_none() {
            return Err(OpsError::invalid(
                "cosignature",
                &format!(
                    "{line:?} is not {}'s cosignature of the tree of {size}",
                    witness.name()
                ),
            ));
        }
        Ok(self
            .store
            .cosign_tree_checkpoint(size, line.to_owned())
            .wait()?)
    }
}

/// What checking a consistency proof found.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtensionReport {
    /// Both checkpoints are the key's and the newer tree extends the older one.
    pub ok: bool,
    /// The older and the newer tree's sizes, once their signatures check.
    pub old: Option<u64>,
    /// The newer tree's size.
    pub size: Option<u64>,
    /// Why it does not check: a rollback, a fork, another key.
    pub problem: Option<String>,
}

/// Checks with `key` alone that the tree `new_file` signs (an `add-checkpoint` body from
/// `prove --consistency`) extends the one `old_file` signs (a checkpoint, or a proof carrying
/// one).
pub fn verify_extension_files(
    old_file: &Path,
    new_file: &Path,
    key: &PublicKey,
) -> OpsResult<ExtensionReport> {
    let read = |f: &Path, what: &str| {
        std::fs::read_to_string(f)
            .map_err(|e| OpsError::invalid(what, &format!("{}: {e}", f.display())))
    };
    let old_text = read(old_file, "consistency")?;
    let new_text = read(new_file, "to")?;
    let ext =
        ConsistencyProof::parse(&new_text).map_err(|e| OpsError::invalid("to", &e.to_string()))?;
    let mut report = ExtensionReport {
        ok: false,
        old: None,
        size: None,
        problem: None,
    };
    let checked = proof::signed_tree(key, &proof::checkpoint_of(&old_text)).and_then(|old| {
        report.old = Some(old.size);
        ext.verify_from(key, old)
    });
    match checked {
        Ok(new) => {
            report.ok = true;
            report.size = Some(new.size);
        }
        Err(e) => report.problem = Some(e.to_string()),
    }
    Ok(report)
}

/// Checks the tlog-proof in `file` with `key` alone: no ledger, no secret. With `witnesses`, the
/// checkpoint must also carry the cosignatures of at least `quorum` of them (C2SP tlog-policy's
/// `quorum` over a group of witnesses).
pub fn verify_proof_file(
    file: &Path,
    key: &PublicKey,
    witnesses: &[WitnessKey],
    quorum: usize,
) -> OpsResult<ProofReport> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| OpsError::invalid("proof", &format!("{}: {e}", file.display())))?;
    let proof =
        InclusionProof::parse(&text).map_err(|e| OpsError::invalid("proof", &e.to_string()))?;
    let event = serde_json::from_slice(&proof.leaf).unwrap_or(serde_json::Value::Null);
    let mut report = ProofReport {
        ok: false,
        index: proof.index,
        size: None,
        root: None,
        signed_at: None,
        event,
        cosigned_by: witnesses
            .iter()
            .filter(|w| w.cosigned(&proof.checkpoint).is_some())
            .map(|w| w.name().to_owned())
            .collect(),
        problem: None,
    };
    match proof.verify(key) {
        Ok((head, time)) => {
            report.size = Some(head.size);
            report.root = Some(head.root_base64());
            report.signed_at = Some(time);
            report.ok = report.cosigned_by.len() >= quorum;
            if !report.ok {
                report.problem = Some(format!(
                    "the checkpoint is cosigned by {} of the {} witnesses given ({}); at least \
                     {quorum} must",
                    report.cosigned_by.len(),
                    witnesses.len(),
                    report.cosigned_by.join(", ")
                ));
            }
        }
        Err(e) => {
            if let ProofError::NotIncluded { size, .. } = e {
                report.size = Some(size);
            }
            report.problem = Some(e.to_string());
        }
    }
    Ok(report)
}
