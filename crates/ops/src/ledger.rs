//! What the hosts see of the ledger: the types operations take and give, and the few plain
//! functions a host needs with no ledger open (whether a location is PostgreSQL, a signing key
//! made or read, a time written). A host reaches `idemgate-ledger` through this module and
//! [`crate::Ops`] only, so what it may touch of the ledger is decided here.

pub use idemgate_ledger::archive::{ArchiveReport, ArchiveVerifyReport};
pub use idemgate_ledger::checkpoint::{generate as generate_key, PublicKey, Signer};
pub use idemgate_ledger::copy::CopyReport;
pub use idemgate_ledger::cosignature::WitnessKey;
pub use idemgate_ledger::entries_export::EntriesManifest;
pub use idemgate_ledger::export::{manifest_path, ExportVerifyReport, Format, Manifest};
pub use idemgate_ledger::{
    is_postgres, now_millis, rfc3339, Approval, ChainHasher, EntryDetail, EntryFilter,
    EntrySummary, Event, EventKind, EventRange, Incident, Lead, Leader, LedgerError, Millis,
    Progress, ResponseRecord, State, Storage, VerifyReport, MAX_RESPONSE_BODY,
};
