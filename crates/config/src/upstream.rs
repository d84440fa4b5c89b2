//! Which hosts a route's requests go to, and so which of them carry its credential: its
//! upstream's, never another a reconcile probe names.

use super::{Reconcile, Upstream};

impl Upstream {
    /// Whether `uri` is on this upstream (its scheme and authority): the only host its route's
    /// credential is sent to.
    pub fn names(&self, uri: &http::Uri) -> bool {
        uri.authority().map(http::uri::Authority::as_str) == Some(self.authority.as_str())
            && (uri.scheme_str() == Some("https")) == self.https
    }
}

impl Reconcile {
    /// Whether a probe may go to `upstream`, and so carry its route's credential: its URL names
    /// that host, or a host a placeholder makes (which may turn out to be that one).
    pub fn may_reach(&self, upstream: &Upstream) -> bool {
        let filled = |key: &str, scope: &str| {
            let url = self.url.replace("{key}", key).replace("{scope}", scope);
            url.parse::<http::Uri>().ok()
        };
        match (filled("k", "s"), filled("k2", "s2")) {
            (Some(one), Some(two)) if one.authority() == two.authority() => upstream.names(&one),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_probe_that_may_ask_the_upstream_carries_its_credential() {
        let upstream = Upstream {
            https: true,
            authority: "api.example.com".into(),
            prefix: String::new(),
        };
        let probe = |url: &str| Reconcile {
            method: "GET".into(),
            url: url.into(),
        };
        let reaches = |url: &str| probe(url).may_reach(&upstream);
        assert!(reaches("https://api.example.com/v1/charges?key={key}"));
        assert!(!reaches("https://reports.example.com/v1/charges?key={key}"));
        assert!(!reaches("http://api.example.com/v1/charges?key={key}"));
        assert!(!reaches(
            "https://api.example.com:8443/v1/charges?key={key}"
        ));
        // A host a placeholder makes may be the upstream's.
        assert!(reaches("https://{scope}.example.com/v1/charges?key={key}"));
    }
}
