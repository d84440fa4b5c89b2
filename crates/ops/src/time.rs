//! Times as operators write them, the same in the CLI (`--since`, `--until`) and the admin API
//! (`?since=`, `?until=`): RFC 3339 (`2026-11-20T10:00:00Z`), a date (`2026-11-20`, midnight UTC),
//! a duration ago (`90s`, `15m`, `2h`, `7d`), or Unix milliseconds (`1795168800000`).

use thiserror::Error;

/// A string that is none of the forms [`parse_time`] takes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{text:?} is not a time: {why}")]
pub struct BadTime {
    text: String,
    why: &'static str,
}

const FORMS: &str = "use RFC 3339 (2026-11-20T10:00:00Z), a date (2026-11-20), a duration ago \
                     (90m, 2h, 7d) or Unix milliseconds (1795168800000)";

/// Smallest Unix time taken in milliseconds (2001-09-09): a shorter number is more likely seconds
/// or a duration without its unit than a time in 1970.
const MIN_UNIX_MS: i64 = 1_000_000_000_000;

/// The time `s` names, in Unix milliseconds.
pub fn parse_time(s: &str) -> Result<i64, BadTime> {
    let s = s.trim();
    let bad = |why| BadTime {
        text: s.to_owned(),
        why,
    };
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    if let Ok(ms) = s.parse::<i64>() {
        return match ms {
            0 | MIN_UNIX_MS.. => Ok(ms),
            _ => Err(bad(
                "Unix time is taken in milliseconds, 13 digits (for seconds, append 000; for a \
                 duration ago, add its unit: 90m, 2h, 7d)",
            )),
        };
    }
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad(FORMS)),
    };
    let ago = num
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(ms))
        .ok_or_else(|| bad(FORMS))?;
    Ok(idemgate_ledger::now_millis() - ago)
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn parses_every_form_and_refuses_the_rest() {
        assert_eq!(parse_time("2026-11-20T10:00:00Z"), Ok(1_795_168_800_000));
        assert_eq!(
            parse_time("2026-11-20T11:00:00+01:00"),
            Ok(1_795_168_800_000)
        );
        assert_eq!(parse_time("2026-11-20"), Ok(1_795_132_800_000));
        assert_eq!(parse_time("1795168800000"), Ok(1_795_168_800_000));
        assert_eq!(parse_time("0"), Ok(0));
        let ago = parse_time("2h").expect("duration");
        let expect = idemgate_ledger::now_millis() - 7_200_000;
        assert!((ago - expect).abs() < 5_000);
        for bad in ["yesterday", "5w", "", "h", "-2h", "99999999999999999999d"] {
            assert!(parse_time(bad).is_err(), "{bad:?}");
        }
        // Seconds, or a duration without its unit, are not silently a time in 1970.
        for bad in ["1795168800", "90", "-5"] {
            let e = parse_time(bad).expect_err(bad).to_string();
            assert!(e.contains("milliseconds"), "{e}");
        }
    }
}
