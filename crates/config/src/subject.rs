//! What a route's calls are about: their subjects, and how they state their amount.

/// A named value of a request, stored with its entry and searchable: from a JSON pointer into the
/// body (an MCP call's arguments), or a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub name: String,
    pub from: SubjectSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubjectSource {
    Pointer(String),
    /// Lower case.
    Header(String),
}

/// `money`: how a route's calls state their amount, so that the `amount` subject reads as money
/// ("3100.00 USD") in the console, the CLI and an approval's webhook.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Money {
    /// The amount is sent in the currency's minor unit (cents, as Stripe's API does): it is
    /// recorded in the currency's own unit, by its ISO 4217 decimals.
    pub minor_units: bool,
    /// The currency of calls that name none (ISO 4217, upper case): recorded as their
    /// `currency` subject.
    pub currency: Option<String>,
}

impl Money {
    /// How many decimals `code`'s minor unit is (2 for USD, 0 for JPY, 3 for KWD), by ISO 4217;
    /// `None` for a code it does not have, or one without a minor unit (gold, a fund's unit).
    pub fn decimals(code: &str) -> Option<u32> {
        iso_currency::Currency::from_code(&code.to_ascii_uppercase())?
            .exponent()
            .map(u32::from)
    }
}
