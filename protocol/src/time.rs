//! Durations as the wire counts them: whole milliseconds.
//!
//! Every `*_ms` field of the API and every timer of the filter's outbox and
//! edge cache is a `u64` of milliseconds; this is the one conversion. Durations people
//! write (the lease-store's flags, `make chaos DURATION=…`) read as `500ms`, `2s`, `5m`,
//! `24h` or `7d` ([`parse_duration`]).

use std::time::Duration;

/// Whole milliseconds of `d`, saturating at `u64::MAX` (a duration that long
/// means "never" to every caller).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Parses a duration such as `500ms`, `2s`, `5m`, `24h` or `7d` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 500ms, 2s, 5m, 24h or 7d"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}` (use ms, s, m, h or d)"
            ));
        }
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("2 weeks").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }

    #[test]
    fn whole_milliseconds_saturating() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(millis(Duration::from_secs(3)), 3000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
