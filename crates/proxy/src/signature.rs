//! HMAC-SHA256 request signatures: header `t=<unix seconds>,v1=<hex HMAC(secret, "<t>.<raw body>")>`,
//! checked in constant time within a timestamp tolerance. Several `v1=` values are accepted (secret
//! rotation: any one may match).

use hmac::{KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::config::Signature;
use crate::problem::{Code, Problem};

type HmacSha256 = hmac::Hmac<Sha256>;

/// The parts of a signature header.
#[derive(Debug, PartialEq, Eq)]
pub struct Parsed {
    pub t: i64,
    pub v1: Vec<Vec<u8>>,
}

pub fn parse(header: &str) -> Option<Parsed> {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k {
            "t" => t = Some(v.parse::<i64>().ok()?),
            "v1" => v1.push(hex::decode(v).ok().filter(|d| d.len() == 32)?),
            _ => {} // unknown schemes are ignored, as Stripe does
        }
    }
    Some(Parsed { t: t?, v1 }).filter(|p| !p.v1.is_empty())
}

pub fn sign(secret: &[u8], t: i64, body: &[u8]) -> String {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("hmac takes any key"));
    m.update(t.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    hex::encode(m.finalize().into_bytes())
}

fn unauthorized(detail: &str) -> Problem {
    Problem::new(Code::BadSignature, detail)
}

pub fn verify(
    sig: &Signature,
    header: Option<&str>,
    body: &[u8],
    now_secs: i64,
) -> Result<(), Problem> {
    let header = header.ok_or_else(|| unauthorized("the request is not signed"))?;
    let p = parse(header)
        .ok_or_else(|| unauthorized("the signature header is malformed (t=<unix>,v1=<hex>)"))?;
    if (now_secs - p.t).unsigned_abs() > sig.tolerance.as_secs() {
        return Err(unauthorized(
            "the signature timestamp is outside the tolerance",
        ));
    }
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(&sig.secret.0)
        .unwrap_or_else(|_| unreachable!("hmac takes any key"));
    m.update(p.t.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    let expected = m.finalize().into_bytes();
    let mut ok = subtle::Choice::from(0u8);
    for v in &p.v1 {
        ok |= expected.as_slice().ct_eq(v.as_slice());
    }
    if bool::from(ok) {
        Ok(())
    } else {
        Err(unauthorized("the signature does not match"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use std::time::Duration;

    fn sig() -> Signature {
        Signature {
            header: "x-idemgate-signature".into(),
            secret: Secret(b"whsec".to_vec()),
            tolerance: Duration::from_secs(300),
        }
    }

    #[test]
    fn good_bad_and_stale() {
        let body = br#"{"a":1}"#;
        let good = format!("t=1000,v1={}", sign(b"whsec", 1000, body));
        assert!(verify(&sig(), Some(&good), body, 1100).is_ok());
        assert!(
            verify(&sig(), Some(&good), br#"{"a":2}"#, 1100).is_err(),
            "body changed"
        );
        assert!(
            verify(&sig(), Some(&good), body, 1000 + 301).is_err(),
            "stale"
        );
        assert!(
            verify(&sig(), Some(&good), body, 1000 - 301).is_err(),
            "from the future"
        );
        let wrong = format!("t=1000,v1={}", sign(b"other", 1000, body));
        assert!(verify(&sig(), Some(&wrong), body, 1000).is_err());
        let rotated = format!(
            "t=1000,v1={},v1={}",
            sign(b"other", 1000, body),
            sign(b"whsec", 1000, body)
        );
        assert!(verify(&sig(), Some(&rotated), body, 1000).is_ok());
        assert!(verify(&sig(), None, body, 1000).is_err());
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,v1=zz", "garbage"] {
            assert!(verify(&sig(), Some(bad), body, 1).is_err(), "{bad}");
        }
    }
}
