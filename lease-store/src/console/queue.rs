//! Which listed records the queue page shows, and how old each is: pure, the time passed in.
//!
//! The queue reads what the admin API's `GET /v1/records?state=unknown` reads (the same
//! store call, the same limit), so its count is that list's; the age and workload filters
//! then narrow what is shown and the page says how many they hid. A record whose creation time cannot be
//! read (the store always writes it as `YYYY-MM-DDTHH:MM:SS.mmmZ`) is shown, never hidden.

use keyflight_protocol::wire::RecordSummary;

/// The queue's age filter, in whole minutes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgeFilter {
    /// Only records at least this old.
    pub min_minutes: Option<u64>,
    /// Only records at most this old.
    pub max_minutes: Option<u64>,
}

impl AgeFilter {
    /// Whether a record created at `created_at` passes at `now_ms` (Unix milliseconds).
    pub fn admits(&self, created_at: &str, now_ms: u64) -> bool {
        let Some(age) = age_ms(created_at, now_ms) else {
            return true;
        };
        let minutes = age / 60_000;
        self.min_minutes.is_none_or(|min| minutes >= min)
            && self.max_minutes.is_none_or(|max| minutes <= max)
    }
}

/// The queue's filters: a record's age, and the workload whose claim made it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueFilter {
    /// How old.
    pub age: AgeFilter,
    /// Only this workload's records (its SPIFFE id, as the list names it); a record made by
    /// a bearer-token caller names none and is hidden by it.
    pub workload: Option<String>,
}

impl QueueFilter {
    /// The records of `listed` that pass, in their order (newest first).
    pub fn apply<'a>(&self, listed: &'a [RecordSummary], now_ms: u64) -> Vec<&'a RecordSummary> {
        listed
            .iter()
            .filter(|record| self.age.admits(&record.created_at, now_ms))
            .filter(|record| {
                self.workload
                    .as_deref()
                    .is_none_or(|workload| record.workload.as_deref() == Some(workload))
            })
            .collect()
    }
}

/// How long before `now_ms` the store's `created_at` was; 0 for a time in the future (a
/// replica's clock behind the database's).
pub fn age_ms(created_at: &str, now_ms: u64) -> Option<u64> {
    Some(now_ms.saturating_sub(unix_ms(created_at)?))
}

/// An age as an operator reads it: `42 s`, `17 min`, `3 h 05 min`, `2 d 04 h`.
pub fn age_label(age_ms: u64) -> String {
    let seconds = age_ms / 1000;
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    match () {
        () if minutes == 0 => format!("{seconds} s"),
        () if hours == 0 => format!("{minutes} min"),
        () if days == 0 => format!("{hours} h {:02} min", minutes % 60),
        () => format!("{days} d {:02} h", hours % 24),
    }
}

/// Unix milliseconds of `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, as the store renders times).
pub fn unix_ms(time: &str) -> Option<u64> {
    let b = time.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || b[19] != b'.' || b[23] != b'Z' {
        return None;
    }
    let field = |range: std::ops::Range<usize>| -> Option<u64> { time.get(range)?.parse().ok() };
    let (year, month, day) = (field(0..4)?, field(5..7)?, field(8..10)?);
    let (hour, minute, second, milli) = (
        field(11..13)?,
        field(14..16)?,
        field(17..19)?,
        field(20..23)?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    Some((((days * 24 + hour) * 60 + minute) * 60 + second.min(60)) * 1000 + milli)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`), for dates from 1970 on.
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let year = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = year / 400;
    let year_of_era = year % 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    (era * 146_097 + day_of_era).checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_times_read_as_unix_milliseconds() {
        assert_eq!(unix_ms("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(unix_ms("2000-03-01T00:00:00.001Z"), Some(951_868_800_001));
        assert_eq!(unix_ms("2026-12-06T09:08:36.123Z"), Some(1_796_548_116_123));
        assert_eq!(unix_ms("2026-12-06 09:08:36"), None);
        assert_eq!(unix_ms("2026-13-06T09:08:36.123Z"), None);
    }

    #[test]
    fn the_age_filter_keeps_its_bounds_and_unreadable_times() {
        let created = "2026-12-06T09:00:00.000Z";
        let now = unix_ms("2026-12-06T09:30:00.000Z").unwrap_or_default();
        let older_than = |min| AgeFilter {
            min_minutes: Some(min),
            max_minutes: None,
        };
        assert!(older_than(30).admits(created, now));
        assert!(!older_than(31).admits(created, now));
        let newer_than = AgeFilter {
            min_minutes: None,
            max_minutes: Some(29),
        };
        assert!(!newer_than.admits(created, now));
        assert!(newer_than.admits("garbled", now));
        assert!(AgeFilter::default().admits(created, now));
    }

    #[test]
    fn the_workload_filter_keeps_that_workloads_records_only() {
        let record = |workload: Option<&str>| RecordSummary {
            scope: keyflight_protocol::Digest::of(b"scope"),
            state: keyflight_protocol::wire::RecordState::Unknown,
            fingerprint: keyflight_protocol::Digest::of(b"fingerprint"),
            fence: 1,
            created_at: "2026-12-06T09:00:00.000Z".into(),
            lease_expires_at: None,
            expires_at: "2026-12-13T09:00:00.000Z".into(),
            replayable: false,
            status: None,
            workload: workload.map(str::to_owned),
        };
        let checkout = "spiffe://td/ns/shop/sa/checkout";
        let listed = [
            record(Some(checkout)),
            record(Some("spiffe://td/ns/shop/sa/cart")),
            record(None),
        ];
        let now = unix_ms("2026-12-06T09:30:00.000Z").unwrap_or_default();
        assert_eq!(QueueFilter::default().apply(&listed, now).len(), 3);
        let only = QueueFilter {
            workload: Some(checkout.into()),
            ..QueueFilter::default()
        };
        let shown = only.apply(&listed, now);
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].workload.as_deref(), Some(checkout));
    }

    #[test]
    fn ages_read_in_the_largest_useful_unit() {
        assert_eq!(age_label(42_000), "42 s");
        assert_eq!(age_label(17 * 60_000), "17 min");
        assert_eq!(age_label((3 * 60 + 5) * 60_000), "3 h 05 min");
        assert_eq!(age_label((2 * 24 + 4) * 3_600_000), "2 d 04 h");
    }
}
