//! The lease-store's Prometheus counters, read as a map from series to value.
//!
//! Tests use them to assert what happened *behind* the edge: that a replay wrote nothing
//! (`finalize` unchanged), or that 31 followers are long-polling before a gate opens.

use std::collections::HashMap;

/// Where Envoy files the filter's counters, as a `/stats` filter regex: proxy-wasm's
/// `wasmcustom`, which the native adapter's shipped configs name as their
/// `metrics_namespace` too, or a dynamic module's default `dynamicmodulescustom`, where the
/// config cannot set one (Envoy Gateway). `docs/envoy-facts.md#dynamic-modules` says why.
pub const FILTER_STAT_NAMESPACES: &str = "(wasmcustom|dynamicmodulescustom)";

/// The admin path that lists the filter's counter `keyflight.NAME` under either adapter
/// (the regex percent-encoded, as Envoy's admin decodes its query).
pub fn filter_stat_path(name: &str) -> String {
    let regex = format!(
        "^{FILTER_STAT_NAMESPACES}\\.keyflight\\.{}$",
        name.replace('.', "\\.")
    );
    let encoded: String = regex
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' | '.' => c.to_string(),
            other => format!("%{:02X}", u32::from(other)),
        })
        .collect();
    format!("/stats?filter={encoded}")
}

/// The value of the filter's counter `keyflight.NAME` in an admin `/stats` answer, under
/// whichever namespace Envoy filed it; `None` when it is not listed.
pub fn filter_stat_value<'a>(stats: &'a str, name: &str) -> Option<&'a str> {
    let suffix = format!(".keyflight.{name}: ");
    stats
        .lines()
        .find_map(|line| line.split_once(&suffix).map(|(_, value)| value.trim()))
}

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
    #[test]
    fn a_filter_counter_is_found_under_either_adapters_namespace() {
        let stats = "wasmcustom.keyflight.outcome.replayed: 3\n\
                     dynamicmodulescustom.keyflight.outcome.replay_edge_cache: 7\n";
        assert_eq!(filter_stat_value(stats, "outcome.replayed"), Some("3"));
        assert_eq!(
            filter_stat_value(stats, "outcome.replay_edge_cache"),
            Some("7")
        );
        assert_eq!(filter_stat_value(stats, "outcome.replay"), None);
        assert_eq!(
            filter_stat_path("outcome.replay"),
            "/stats?filter=%5E%28wasmcustom%7Cdynamicmodulescustom%29%5C.keyflight%5C.outcome%5C.replay%24"
        );
    }

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
