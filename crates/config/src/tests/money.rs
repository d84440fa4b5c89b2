//! `money`: how a route's, or an MCP tool's, calls state their amount.

use super::{err, BASE};
use crate::{Config, Money};

#[test]
fn money_needs_an_amount_and_a_currency_it_knows() {
    let route = |extra: &str| {
        format!(
            "{BASE}[[routes]]\nname = \"refunds\"\nmethod = \"POST\"\npath = \"/v1/refunds\"\n\
             upstream = \"http://127.0.0.1:9\"\neffect = \"write\"\n{extra}"
        )
    };
    let c = Config::parse(&route(
        "subject = { amount = \"/amount\" }\nmoney = { minor_units = true, currency = \"eur\" }\n",
    ))
    .expect("money");
    let euros = Money {
        minor_units: true,
        currency: Some("EUR".into()),
    };
    assert_eq!(c.routes[0].money.as_ref(), Some(&euros));
    // The currency may come from each call instead.
    let c = Config::parse(&route(
        "subject = { amount = \"/amount\", currency = \"/currency\" }\n\
         money = { minor_units = true }\n",
    ))
    .expect("a currency subject");
    assert_eq!(
        c.routes[0].money.as_ref().map(|m| m.minor_units),
        Some(true)
    );
    for (extra, says) in [
        (
            "subject = { amount = \"/amount\" }\nmoney = { minor_units = true }\n",
            "routes[0] (refunds).money.minor_units: an amount in minor units needs its currency",
        ),
        (
            "subject = { charge = \"/charge\" }\nmoney = { minor_units = true, currency = \"USD\" }\n",
            "no subject named amount",
        ),
        (
            "subject = { amount = \"/amount\" }\nmoney = { currency = \"dollars\" }\n",
            "routes[0] (refunds).money.currency: \"dollars\" is not an ISO 4217 currency",
        ),
        (
            "subject = { amount = \"/amount\" }\nmoney = { currency = \"XAU\" }\n",
            "\"XAU\" is not an ISO 4217 currency with a minor unit",
        ),
        ("money = { cents = true }\n", "cents"),
    ] {
        let e = err(&route(extra));
        assert!(e.contains(says), "{extra}: {e}");
    }
}

#[test]
fn an_mcp_tool_states_its_amount_in_its_own_unit() {
    let mcp = |tools: &str| {
        format!(
            "{BASE}[[routes]]\nname = \"tools\"\npath = \"/mcp\"\nupstream = \"http://127.0.0.1:9\"\n\
             protocol = \"mcp\"\nsubject = {{ amount = \"/amount\" }}\n\
             money = {{ currency = \"EUR\" }}\n{tools}"
        )
    };
    let c = Config::parse(&mcp(
        "[routes.tools.\"refund\"]\nmoney = { minor_units = true, currency = \"jpy\" }\n\
         [routes.tools.\"charge\"]\nsubject = { total = \"/total\" }\n",
    ))
    .expect("a tool's money");
    let r = &c.routes[0];
    let yen = Money {
        minor_units: true,
        currency: Some("JPY".into()),
    };
    assert_eq!(r.tools["refund"].money.as_ref(), Some(&yen));
    // A tool without its own follows the route's.
    assert_eq!(r.tools["charge"].money, None);
    assert_eq!(
        r.money.as_ref().and_then(|m| m.currency.as_deref()),
        Some("EUR")
    );
    for (tools, says) in [
        (
            // The tool names its own subjects, and no amount among them.
            "[routes.tools.\"charge\"]\nsubject = { total = \"/total\" }\n\
             money = { minor_units = true, currency = \"USD\" }\n",
            "routes[0] (tools).tools.\"charge\".money.minor_units: no subject named amount",
        ),
        (
            "[routes.tools.\"refund\"]\nmoney = { minor_units = true }\n",
            "tools.\"refund\".money.minor_units: an amount in minor units needs its currency",
        ),
        (
            "[routes.tools.\"refund\"]\nmoney = { currency = \"euro\" }\n",
            "tools.\"refund\".money.currency: \"euro\" is not an ISO 4217 currency",
        ),
    ] {
        let e = err(&mcp(tools));
        assert!(e.contains(says), "{tools}: {e}");
    }
}
