//! The codes are one list ([`Code`]): the admin API's OpenAPI document names exactly those, and
//! every error of every crate answers with one of them, its HTTP status derived from it.

use idemgate_config::ConfigError;
use idemgate_ledger::LedgerError;
use idemgate_ops::jobs::JobError;
use idemgate_ops::{Code, ErrorBody, OpsError};
use idemgate_proxy::problem::Problem;
use idemgate_proxy::telemetry::TracingError;
use idemgate_server::ServeError;

#[test]
fn the_openapi_document_lists_exactly_the_codes() {
    let doc: serde_json::Value =
        serde_json::from_str(idemgate_server::OPENAPI).expect("the OpenAPI document");
    let listed: Vec<&str> = doc["components"]["schemas"]["Problem"]["properties"]["code"]["enum"]
        .as_array()
        .expect("Problem.code lists its values")
        .iter()
        .map(|v| v.as_str().expect("a string"))
        .collect();
    let all: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(listed, all);
}

// Every variant of every error type a host answers with, its code and the status the admin API
// answers it with: a public contract, changed only on purpose.

fn io() -> std::io::Error {
    std::io::Error::other("disk")
}

fn check(what: &str, got: Code, code: &str, status: u16) {
    assert_eq!((got.as_str(), got.status()), (code, status), "{what}");
    assert!(Code::ALL.contains(&got));
}

#[test]
fn every_ledger_error_maps_to_its_code_and_status() {
    let cases = [
        (
            LedgerError::NotFound("l.db".into()),
            "ledger-not-found",
            404,
        ),
        (
            LedgerError::TooNew {
                found: 99,
                supported: 11,
            },
            "ledger-too-new",
            500,
        ),
        (LedgerError::ChainKeyRequired, "chain-key-required", 500),
        (LedgerError::ChainKeyUnexpected, "chain-key-unexpected", 500),
        (LedgerError::EntryNotFound(7), "entry-not-found", 404),
        (
            LedgerError::InvalidTransition {
                id: 7,
                state: "completed".into(),
                action: "resolve",
                needed: "pending",
            },
            "invalid-transition",
            409,
        ),
        (LedgerError::LeaseLost(7), "lease-lost", 409),
        (
            LedgerError::NotEmpty("l.db".into()),
            "ledger-not-empty",
            500,
        ),
        (LedgerError::Unsupported("x".into()), "unsupported", 500),
        (LedgerError::MissingActor, "missing-actor", 400),
        (
            LedgerError::Unavailable("x".into()),
            "ledger-unavailable",
            503,
        ),
        (LedgerError::Closed, "ledger-closed", 503),
        (
            LedgerError::Db(rusqlite::Error::QueryReturnedNoRows),
            "database",
            500,
        ),
        (LedgerError::Io(io()), "io", 500),
        (LedgerError::Corrupt("x".into()), "corrupt", 500),
        (LedgerError::BadExport("x".into()), "bad-export", 400),
        (LedgerError::Internal("x".into()), "internal", 500),
    ];
    for (e, code, status) in cases {
        check(&e.to_string(), e.code(), code, status);
        let p = Problem::from(e);
        assert_eq!((p.code.as_str(), p.status), (code, status));
    }
}

#[test]
fn every_operation_error_maps_to_its_code_and_status() {
    let cases = [
        (
            OpsError::invalid("limit", "too large"),
            "invalid-argument",
            400,
        ),
        (OpsError::MissingOperator, "missing-operator", 400),
        (OpsError::MissingReason, "missing-reason", 400),
        (OpsError::Conflict("x".into()), "conflict", 409),
        (
            OpsError::ConfirmationRequired(vec!["k".into()]),
            "confirmation-required",
            409,
        ),
        (
            OpsError::UnknownRoute {
                entry: 7,
                route: "gone".into(),
            },
            "route-not-configured",
            409,
        ),
        (OpsError::NoProbe("charges".into()), "no-probe", 409),
        (
            OpsError::StoredRequest("x".into()),
            "stored-request-unusable",
            409,
        ),
        (OpsError::BadConfig("x".into()), "bad-config", 500),
        (OpsError::Internal("x".into()), "internal", 500),
        (OpsError::NoConfig, "no-config", 409),
        (OpsError::NoArchive, "no-archive", 409),
        (
            OpsError::Ledger(LedgerError::EntryNotFound(7)),
            "entry-not-found",
            404,
        ),
    ];
    for (e, code, status) in cases {
        check(&e.to_string(), e.code(), code, status);
        assert_eq!(ErrorBody::from(&e).code, e.code());
        let p = Problem::from(e);
        assert_eq!((p.code.as_str(), p.status), (code, status));
    }
}

#[test]
fn every_job_error_maps_to_its_code_status_and_retry() {
    let cases = [
        (JobError::ShuttingDown("x"), "shutting-down", 503, None),
        (JobError::TooMany(2), "too-many-exports", 429, Some(5)),
        (
            JobError::NotFound("j".into()),
            "export-not-found",
            404,
            None,
        ),
        (
            JobError::Running {
                id: "j".into(),
                done: 7,
            },
            "export-running",
            409,
            Some(1),
        ),
        // A failed job's file asked for conflicts with its state: not the code's own 500.
        (
            JobError::Failed {
                id: "j".into(),
                why: "x".into(),
            },
            "export-failed",
            409,
            None,
        ),
        (
            JobError::Spool {
                dir: "/x".into(),
                source: io(),
            },
            "export-failed",
            500,
            None,
        ),
    ];
    for (e, code, status, retry) in cases {
        assert_eq!(e.code().as_str(), code, "{e}");
        let e = OpsError::from(e);
        assert_eq!(e.code().as_str(), code, "{e}");
        let p = Problem::from(e);
        assert_eq!(
            (p.code.as_str(), p.status, p.retry_after),
            (code, status, retry)
        );
    }
}

#[test]
fn every_server_and_configuration_error_maps_to_its_code() {
    let config = || ConfigError::Parse("x".into());
    let serve = [
        (ServeError::Config(config()), "bad-config", 500),
        (ServeError::NoAdminToken, "no-admin-token", 500),
        (
            ServeError::Bind {
                addr: "127.0.0.1:1".parse().expect("addr"),
                source: io(),
            },
            "bind",
            500,
        ),
        (ServeError::Ops(OpsError::NoConfig), "no-config", 409),
        (
            ServeError::Tracing(TracingError::Exporter {
                url: "http://127.0.0.1:4318/v1/traces".into(),
                why: "x".into(),
            }),
            "bad-config",
            500,
        ),
        (ServeError::Tracing(TracingError::NoRuntime), "runtime", 500),
    ];
    for (e, code, status) in serve {
        check(&e.to_string(), e.code(), code, status);
    }
    for e in [
        config(),
        ConfigError::Invalid {
            field: "f".into(),
            message: "m".into(),
        },
        ConfigError::Several(vec![config()]),
        ConfigError::Read {
            path: "p".into(),
            source: io(),
        },
    ] {
        check(&e.to_string(), e.code(), "bad-config", 500);
    }
}
