//! Which secrets a host reads: none for one that forwards nothing, the upstream credentials it
//! finds for operator actions; how each is named is checked by every host.

use super::{err, BASE};
use crate::Config;

/// A host that forwards nothing reads none of the secrets a configuration names, and still
/// checks everything else, how each secret is named included.
#[test]
fn a_configuration_parses_without_its_secrets_for_a_host_that_forwards_nothing() {
    let unset = "{ secret_env = \"IDEMGATE_TEST_NO_SUCH_VAR\" }";
    let route = |auth: &str, signature: &str| {
        format!(
            "{BASE}[[routes]]\nname = \"refunds\"\nmethod = \"POST\"\npath = \"/r\"\n\
             upstream = \"http://127.0.0.1:9\"\neffect = \"write\"\n\
             upstream_auth = {auth}\nsignature = {signature}\n\
             approval = {{ when = \"args.amount > 50000\", approvals = 2 }}\n"
        )
    };
    let text = route(unset, unset);
    assert!(err(&text).contains("IDEMGATE_TEST_NO_SUCH_VAR is not set"));
    let c = Config::parse_without_secrets(&text).expect("no secret read");
    let r = &c.routes[0];
    assert!(r.upstream_auth.is_none() && r.signature.is_none());
    let policy = r.approval.as_ref().expect("the policy");
    assert_eq!((policy.name.as_str(), policy.approvals), ("refunds", 2));
    // What it does not read is still checked as the server checks it.
    let both = "{ secret_env = \"A\", secret_file = \"/b\" }";
    for (text, says) in [
        (
            route("{ }", unset),
            "(refunds).upstream_auth: give exactly one of",
        ),
        (
            route(both, unset),
            "(refunds).upstream_auth: give exactly one of",
        ),
        (
            route(unset, "{ }"),
            "(refunds).signature: give exactly one of",
        ),
        (
            route(unset, both),
            "(refunds).signature: give exactly one of",
        ),
        (
            route(unset, "{ secret_env = \"A\", tolerance = \"soon\" }"),
            "(refunds).signature.tolerance: ",
        ),
        (
            route(unset, "{ secret_env = \"A\", header = \"x y\" }"),
            "(refunds).signature.header: ",
        ),
    ] {
        let e = Config::parse_without_secrets(&text).expect_err(says);
        assert!(e.to_string().contains(says), "{says}: {e}");
    }
}

/// A host of operator actions reads each upstream credential it can: a route whose credential is
/// not in its environment loads without it and says why, the others keep theirs, and a
/// credential named wrongly is refused as the server refuses it.
#[test]
fn operator_actions_load_the_credentials_their_environment_has() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good");
    std::fs::write(&good, "Bearer sk_1\n").expect("write");
    let route = |name: &str, auth: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\nmethod = \"POST\"\npath = \"/{name}\"\n\
             upstream = \"http://127.0.0.1:9\"\neffect = \"write\"\nupstream_auth = {auth}\n"
        )
    };
    let file = dir.path().join("idemgate.toml");
    let load = |text: String| {
        std::fs::write(&file, text).expect("write");
        Config::load_for_operations(&file.display().to_string())
    };
    let c = load(format!(
        "{BASE}{}{}",
        route("charges", "{ secret_env = \"IDEMGATE_TEST_NO_SUCH_VAR\" }"),
        route(
            "emails",
            &format!("{{ secret_file = {:?} }}", good.display().to_string())
        )
    ))
    .expect("loads");
    let (charges, emails) = (&c.routes[0], &c.routes[1]);
    assert!(charges.upstream_auth.is_none());
    assert_eq!(
        charges.upstream_auth_unread.as_deref(),
        Some(
            "routes[0] (charges).upstream_auth: environment variable IDEMGATE_TEST_NO_SUCH_VAR \
             is not set"
        )
    );
    assert!(emails.upstream_auth.is_some() && emails.upstream_auth_unread.is_none());
    assert!(Config::load(&file.display().to_string()).is_err());
    let e = load(format!("{BASE}{}", route("charges", "{ }"))).expect_err("named wrongly");
    assert!(
        e.to_string()
            .contains("(charges).upstream_auth: give exactly one of"),
        "{e}"
    );
}
