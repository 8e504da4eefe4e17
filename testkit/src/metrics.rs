//! The lease-store's Prometheus counters, read as a map from series to value.
//!
//! Tests use them to assert what happened *behind* the edge: that a replay wrote nothing
//! (`finalize` unchanged), or that 31 followers are long-polling before a gate opens.

use std::collections::HashMap;

/// One scrape of `/metrics`: series text (`name{labels}`) to value.
#[derive(Debug, Clone, Default)]
pub struct StoreMetrics {
    series: HashMap<String, f64>,
}

impl StoreMetrics {
    /// Parses the Prometheus text exposition format (comments and blank lines skipped).
    pub fn parse(text: &str) -> StoreMetrics {
        let series = text
            .lines()
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .filter_map(|line| {
                let (name, value) = line.rsplit_once(' ')?;
                Some((name.to_owned(), value.parse().ok()?))
            })
            .collect();
        StoreMetrics { series }
    }

    /// The value of one series, `0` when it was never reported.
    pub fn get(&self, series: &str) -> f64 {
        self.series.get(series).copied().unwrap_or(0.0)
    }

    /// `keyflight_store_events_total{event="NAME"}` (claimed, follower_wait, finalize, …).
    pub fn event(&self, name: &str) -> u64 {
        // Counters are whole numbers; the cast only drops the `.0`.
        self.get(&format!("keyflight_store_events_total{{event=\"{name}\"}}")) as u64
    }

    /// `keyflight_store_claims_total{outcome="NAME"}` (won, completed, conflict, …).
    pub fn claims(&self, outcome: &str) -> u64 {
        self.get(&format!(
            "keyflight_store_claims_total{{outcome=\"{outcome}\"}}"
        )) as u64
    }

    /// Every claim answered, whatever the outcome.
    pub fn claims_total(&self) -> u64 {
        self.series
            .iter()
            .filter(|(name, _)| name.starts_with("keyflight_store_claims_total{"))
            .map(|(_, value)| *value as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_labelled_counters_and_defaults_to_zero() {
        let metrics = StoreMetrics::parse(
            "# HELP keyflight_store_events Events.\n\
             # TYPE keyflight_store_events counter\n\
             keyflight_store_events_total{event=\"finalize\"} 3\n\
             keyflight_store_claims_total{outcome=\"won\"} 2\n\
             keyflight_store_claims_total{outcome=\"completed\"} 5\n",
        );
        assert_eq!(metrics.event("finalize"), 3);
        assert_eq!(metrics.event("follower_wait"), 0);
        assert_eq!(metrics.claims("won"), 2);
        assert_eq!(metrics.claims_total(), 7);
    }
}
