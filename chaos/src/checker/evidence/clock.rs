//! Log timestamps on the run's clock: the store's RFC 3339 stamps and Envoy's
//! `[date time.ms]` prefix (UTC: the run starts Envoy with `TZ=UTC`) become milliseconds
//! since the run started, so facts from every process compare on one axis.

use crate::history::Ms;

pub(super) fn on_run_clock(unix_ms: i64, run_start_unix_ms: u64) -> Ms {
    unix_ms - i64::try_from(run_start_unix_ms).unwrap_or(i64::MAX)
}

/// `2026-12-01T16:36:44.123456Z` → Unix milliseconds (UTC only, as the store logs).
pub(super) fn rfc3339_unix_ms(stamp: &str) -> Option<i64> {
    let stamp = stamp.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    unix_ms(date, time)
}

/// `YYYY-MM-DD` and `HH:MM:SS[.fraction]`, UTC, → Unix milliseconds. (Envoy logs its local
/// time: the run starts Envoy with `TZ=UTC`.)
pub(super) fn unix_ms(date: &str, time: &str) -> Option<i64> {
    let mut date = date.split('-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut hms = hms.split(':').map(str::parse::<i64>);
    let (hour, minute, second) = (hms.next()?.ok()?, hms.next()?.ok()?, hms.next()?.ok()?);
    let millis: i64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}
