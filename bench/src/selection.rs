//! Running part of the suite, and comparing lease-store settings within one run.
//!
//! `--only p1,p4,p6` runs just the contenders those rows need (here pgbench, the store
//! cycle and the guarded POST, in one rotation), so a change to one part can be measured
//! in a minute or two instead of the whole suite's ten. `--compare-store 'LABEL:ENV=VALUE,…'`
//! starts a second lease-store on the same Postgres with those environment variables (and
//! a second guarded Envoy in front of it), and adds its store cycle and guarded POST to
//! the same rotation as the first: an A/B whose two sides share every round's machine
//! state, which is what makes a ratio trustworthy on a shared machine.

use std::collections::BTreeSet;
use std::str::FromStr;

use crate::error::BenchError;

/// The row ids `--only` knows (`floor`: the physical floor, issue 50).
const IDS: [&str; 14] = [
    "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "n1", "n2", "n3", "floor",
];

/// Which of the suite's rows to measure.
#[derive(Debug, Clone, Default)]
pub struct Selection(Option<BTreeSet<&'static str>>);

impl Selection {
    /// Every row (the default, `make bench`).
    pub fn all() -> Selection {
        Selection(None)
    }

    /// The rows named in `ids` (case-insensitive); an empty list means every row.
    pub fn of(ids: &[String]) -> Result<Selection, BenchError> {
        if ids.is_empty() {
            return Ok(Selection::all());
        }
        let mut wanted = BTreeSet::new();
        for id in ids {
            let id = id.trim().to_ascii_lowercase();
            let known = IDS.iter().find(|known| **known == id).ok_or_else(|| {
                BenchError::Input(format!(
                    "--only: unknown row `{id}` (known: {})",
                    IDS.join(", ")
                ))
            })?;
            wanted.insert(*known);
        }
        Ok(Selection(Some(wanted)))
    }

    /// Whether any of `ids` is to be measured.
    pub fn wants(&self, ids: &[&str]) -> bool {
        self.0
            .as_ref()
            .is_none_or(|wanted| ids.iter().any(|id| wanted.contains(id)))
    }
}

/// A second lease-store with other settings: `LABEL:ENV=VALUE,ENV=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreVariant {
    /// How its rows are marked in the table.
    pub label: String,
    /// The environment it starts with, on top of the first store's.
    pub env: Vec<(String, String)>,
}

impl FromStr for StoreVariant {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (label, settings) = text
            .split_once(':')
            .ok_or_else(|| format!("`{text}` is not LABEL:ENV=VALUE[,ENV=VALUE…]"))?;
        let label = label.trim();
        if label.is_empty() {
            return Err(format!("`{text}` has no label before the `:`"));
        }
        let env = settings
            .split(',')
            .map(|pair| {
                let (name, value) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("`{pair}` is not ENV=VALUE"))?;
                let name = name.trim();
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(format!("`{name}` is not an environment variable name"));
                }
                Ok((name.to_owned(), value.trim().to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StoreVariant {
            label: label.to_owned(),
            env,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selects_rows_by_id_and_refuses_unknown_ones() {
        let all = Selection::all();
        assert!(all.wants(&["p7"]));
        let some = Selection::of(&["P1".into(), "p6".into()]).expect("known ids");
        assert!(some.wants(&["p1", "p4"]));
        assert!(some.wants(&["p6"]));
        assert!(!some.wants(&["p4", "p5"]));
        assert!(Selection::of(&["p11".into()]).is_err());
        assert!(
            Selection::of(&["N2".into()])
                .expect("native ids")
                .wants(&["n2"])
        );
        assert!(Selection::of(&[]).expect("empty").wants(&["p3"]));
        assert!(
            Selection::of(&["floor".into()])
                .expect("the floor")
                .wants(&["floor"])
        );
    }

    #[test]
    fn a_store_variant_is_a_label_and_environment_pairs() {
        let variant: StoreVariant = "batch off:KEYFLIGHT_BATCH_MAX=1, RUST_LOG=warn"
            .parse()
            .expect("parses");
        assert_eq!(variant.label, "batch off");
        assert_eq!(
            variant.env,
            vec![
                ("KEYFLIGHT_BATCH_MAX".into(), "1".into()),
                ("RUST_LOG".into(), "warn".into())
            ]
        );
        assert!("KEYFLIGHT_BATCH_MAX=1".parse::<StoreVariant>().is_err());
        assert!(":A=1".parse::<StoreVariant>().is_err());
        assert!("x:A".parse::<StoreVariant>().is_err());
        assert!("x:A-B=1".parse::<StoreVariant>().is_err());
    }
}
