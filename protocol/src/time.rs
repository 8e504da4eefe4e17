//! Durations as the wire counts them: whole milliseconds.
//!
//! Every `*_ms` field of the API and every timer of the filter's outbox and
//! edge cache is a `u64` of milliseconds; this is the one conversion.

use std::time::Duration;

/// Whole milliseconds of `d`, saturating at `u64::MAX` (a duration that long
/// means "never" to every caller).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_milliseconds_saturating() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(millis(Duration::from_secs(3)), 3000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
