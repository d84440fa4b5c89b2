//! A separate process that claims a key on a ledger file, for the cross-process tests.
//!
//! `ledger-helper claim PATH KEY LEASE_MS [GO_FILE] [--hang]`: with GO_FILE, prints `ready` once its
//! ledger is open and waits until GO_FILE exists; claims KEY, prints the outcome as one line
//! (`claimed ID`, `in-flight ID`, `stuck ID`, ...) and exits — or, with `--hang`, sleeps until it is
//! killed.

use idemgate_ledger::{ChainHasher, ClaimOutcome, Ledger, OpenOptions, Storage};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 || args[1] != "claim" {
        eprintln!("usage: ledger-helper claim PATH KEY LEASE_MS [GO_FILE] [--hang]");
        std::process::exit(2);
    }
    let hang = args.iter().any(|a| a == "--hang");
    let go = args.get(5).filter(|a| *a != "--hang");
    let lease: i64 = args[4].parse().unwrap_or(30_000);
    let l = Ledger::sqlite(
        &args[2],
        OpenOptions {
            create: true,
            hasher: ChainHasher::unkeyed(),
        },
    )
    .unwrap_or_else(|e| {
        eprintln!("open: {e}");
        std::process::exit(1)
    });
    if let Some(go) = go {
        println!("ready");
        while !std::path::Path::new(go).exists() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let req = idemgate_tests::charge_claim(&args[3], &format!("pid-{}", std::process::id()), lease);
    let line = match l.claim(req).wait() {
        Ok(ClaimOutcome::Claimed { entry_id, .. }) => format!("claimed {entry_id}"),
        Ok(ClaimOutcome::InFlight { entry_id, .. }) => format!("in-flight {entry_id}"),
        Ok(ClaimOutcome::Stuck { entry_id }) => format!("stuck {entry_id}"),
        Ok(other) => format!("other {other:?}"),
        Err(e) => format!("error {e}"),
    };
    println!("{line}");
    if hang {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }
}
