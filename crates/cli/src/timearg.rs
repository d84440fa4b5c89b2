//! Time arguments: RFC 3339 (`2026-11-20T10:00:00Z`), a date (`2026-11-20`, midnight UTC), or a
//! duration ago (`90s`, `15m`, `2h`, `7d`).

pub fn parse(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num.parse().map_err(|_| bad(s))?;
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad(s)),
    };
    Ok(idemgate_ledger::now_millis() - n.checked_mul(ms).ok_or_else(|| bad(s))?)
}

fn bad(s: &str) -> String {
    format!("{s:?} is not a time: use RFC 3339 (2026-11-20T10:00:00Z), a date (2026-11-20) or a duration ago (90m, 2h, 7d)")
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(parse("2026-11-20T10:00:00Z"), Ok(1_795_168_800_000));
        assert_eq!(parse("2026-11-20"), Ok(1_795_132_800_000));
        let ago = parse("2h").expect("duration");
        let expect = idemgate_ledger::now_millis() - 7_200_000;
        assert!((ago - expect).abs() < 5_000);
        assert!(parse("yesterday").is_err());
        assert!(parse("5w").is_err());
    }
}
