//! P1, P4, P5, P6: first-time requests and their baselines, in one rotation per concurrency.
//!
//! The rotation holds pgbench on the store's own SQL (the baseline of P1 and P4), the
//! lease-store cycle (P1; P6 is its Postgres CPU against pgbench's), the guarded first-time
//! POST (P4) and the unguarded POST (P5 divides CPU by it) — only those the selected rows
//! need. Each [`Side`] is one lease-store (with its guarded Envoy): the stack's own, and with
//! `--compare-store` a second one with other settings, whose contenders join the same
//! rotation, so both sides meet the same machine state round by round. With `redis-server`
//! installed, a durable Redis pair ([`crate::redis`]) joins the rotation too: the store a
//! team would otherwise put under an idempotency proxy, measured in the same rounds. Guarded
//! Envoys with one filter setting changed ([`FilterVariant`]: `record: after_reply`, calls
//! not coalesced) join it too, so what each setting buys is measured against the default
//! in the same rounds, and so does the native adapter's Envoy (N1: its Envoy CPU per POST
//! against the Wasm filter's).

use std::sync::Arc;

use crate::error::BenchError;
use crate::load::UniqueSource;
use crate::pgbench::Pgbench;
use crate::procfs::Watched;
use crate::redis::RedisPair;
use crate::report::Row;
use crate::rotation::{self, Contender, Drive, Measurement, Schedule, contender, load};
use crate::selection::Selection;
use crate::targets;
use crate::workload::{RequestTemplate, StoreCycle, Workload};

/// One lease-store and what runs through it.
pub struct Side {
    /// `None` for the stack's own store; the variant's label otherwise.
    pub label: Option<String>,
    /// P1's cycle against this store.
    pub cycle: StoreCycle,
    /// A guarded first-time POST through an Envoy that uses this store, and that Envoy.
    pub guarded: (RequestTemplate, Watched),
    /// The lease-store process.
    pub store: Watched,
    /// Its database's processes: the stack's Postgres, or a partitioned database's router
    /// and partitions.
    pub postgres: Vec<Watched>,
    /// How many partitions its database has; 0: one database.
    pub partitions: usize,
    /// Parts of `postgres` charged on their own as well (a partitioned database's
    /// `router` and `partitions`).
    pub groups: Vec<(&'static str, Vec<Watched>)>,
}

/// What every side shares.
pub struct Setup {
    /// The rows asked for.
    pub selection: Selection,
    /// The Postgres baseline.
    pub pgbench: Pgbench,
    /// Postgres' processes.
    pub postgres: Vec<Watched>,
    /// The upstream's process.
    pub upstream: Watched,
    /// An unguarded POST through the plain Envoy, and that Envoy (for P5).
    pub unguarded: Option<(RequestTemplate, Watched)>,
    /// The stack's store first, then the variant (if any).
    pub sides: Vec<Side>,
    /// The durable Redis baseline and its server, when `redis-server` is installed.
    pub redis: Option<(RedisPair, Watched)>,
    /// Guarded Envoys with one filter setting changed, on the stack's store.
    pub filter_variants: Vec<FilterVariant>,
    /// A guarded first-time POST through the native adapter's Envoy on the stack's store,
    /// and that Envoy (N1, [`crate::native`]).
    pub native: Option<(RequestTemplate, Watched)>,
}

/// A guarded Envoy whose filter configuration differs from the default in one setting.
pub struct FilterVariant {
    /// The setting, as the rows name it (e.g. `record: after_reply`).
    pub setting: &'static str,
    /// The rows' name for the default it is compared with.
    pub default: &'static str,
    /// A guarded first-time POST through it, and that Envoy.
    pub guarded: (RequestTemplate, Watched),
}

/// Where each side's measurements sit in the rotation's answer.
struct Slots {
    cycle: Option<usize>,
    guarded: Option<usize>,
}

impl Setup {
    /// Whether anything here is selected.
    pub fn wanted(&self) -> bool {
        self.selection.wants(&["p1", "p4", "p5", "p6", "p9", "n1"])
    }

    /// Runs the rotation at concurrency `c` and returns its rows.
    pub async fn rows(
        &self,
        c: usize,
        schedule: Schedule,
        unique: &Arc<UniqueSource>,
    ) -> Result<Vec<Row>, BenchError> {
        let wants = |ids: &[&str]| self.selection.wants(ids);
        let with = |extra: &[Watched]| -> Vec<Watched> {
            extra.iter().chain(&self.postgres).copied().collect()
        };
        let postgres_group = || vec![("postgres", self.postgres.clone())];
        let mut contenders = Vec::new();
        let mut push = |contender: Contender| {
            contenders.push(contender);
            Some(contenders.len() - 1)
        };
        let pg = if wants(&["p1", "p4", "p6"]) {
            push(
                contender(
                    "pgbench",
                    Drive::Pgbench(self.pgbench.clone()),
                    c,
                    with(&[]),
                )
                .grouped(postgres_group()),
            )
        } else {
            None
        };
        let redis = match (&self.redis, wants(&["p1", "p4"])) {
            (Some((pair, server)), true) => push(load(
                "durable Redis pair",
                Workload::RedisPair(pair.clone()),
                c,
                vec![*server],
            )),
            _ => None,
        };
        let mut slots = Vec::new();
        for side in &self.sides {
            let name = |base: &str| match &side.label {
                Some(label) => format!("{base} [{label}]"),
                None => base.to_owned(),
            };
            // Each side is charged its own database's processes.
            let with = |extra: &[Watched]| -> Vec<Watched> {
                extra.iter().chain(&side.postgres).copied().collect()
            };
            let postgres_group = || {
                let mut groups = vec![("postgres", side.postgres.clone())];
                groups.extend(side.groups.iter().cloned());
                groups
            };
            let cycle = if wants(&["p1", "p6", "p9"]) {
                push(
                    load(
                        &name("store cycle"),
                        Workload::StoreCycle(side.cycle.clone()),
                        c,
                        with(&[side.store]),
                    )
                    .grouped(postgres_group()),
                )
            } else {
                None
            };
            let guarded = if wants(&["p4", "p5", "n1"]) {
                let mut groups = postgres_group();
                groups.push(("envoy", vec![side.guarded.1]));
                groups.push(("lease-store", vec![side.store]));
                push(
                    load(
                        &name("guarded POST"),
                        Workload::Request(side.guarded.0.clone()),
                        c,
                        with(&[side.guarded.1, side.store, self.upstream]),
                    )
                    .grouped(groups),
                )
            } else {
                None
            };
            slots.push(Slots { cycle, guarded });
        }
        let unguarded = match (&self.unguarded, wants(&["p5"])) {
            (Some((request, envoy)), true) => push(load(
                "unguarded POST",
                Workload::Request(request.clone()),
                c,
                vec![*envoy, self.upstream],
            )),
            _ => None,
        };
        let mut variants = Vec::new();
        if let ([side, ..], true) = (&self.sides[..], wants(&["p4"])) {
            for variant in &self.filter_variants {
                let (request, envoy) = &variant.guarded;
                let slot = push(
                    load(
                        &format!("guarded POST [{}]", variant.setting),
                        Workload::Request(request.clone()),
                        c,
                        with(&[*envoy, side.store, self.upstream]),
                    )
                    .grouped(postgres_group()),
                );
                variants.push((variant, slot));
            }
        }
        // The native adapter on the stack's store, in the same rounds as the Wasm filter.
        let native = match (&self.native, &self.sides[..], wants(&["n1"])) {
            (Some((request, envoy)), [side, ..], true) => push(
                load(
                    "guarded POST [native]",
                    Workload::Request(request.clone()),
                    c,
                    with(&[*envoy, side.store, self.upstream]),
                )
                .grouped(vec![
                    ("postgres", self.postgres.clone()),
                    ("envoy", vec![*envoy]),
                ]),
            ),
            _ => None,
        };
        let m = rotation::rotate(&contenders, schedule, unique).await?;
        let at = |slot: Option<usize>| slot.and_then(|i| m.get(i));
        let (pg, unguarded, redis) = (at(pg), at(unguarded), at(redis));

        let mut rows = Vec::new();
        if let Some(pg) = pg {
            rows.push(Row::measured(
                "base",
                "pgbench: the store's claim+finalize SQL",
                pg,
                None,
                None,
            ));
        }
        if let Some(redis) = redis {
            rows.push(Row::measured(
                "base",
                "durable Redis pair: SET NX, then SET (appendfsync always)",
                redis,
                None,
                None,
            ));
        }
        if let Some(unguarded) = unguarded {
            rows.push(Row::measured(
                "base",
                "unguarded POST (Envoy without the filter)",
                unguarded,
                None,
                None,
            ));
        }
        for (side, slot) in self.sides.iter().zip(&slots) {
            let mark = |text: &str| match &side.label {
                Some(label) => format!("{text} [{label}]"),
                None => text.to_owned(),
            };
            side_rows(
                &mut rows,
                &mark,
                pg,
                at(slot.cycle),
                at(slot.guarded),
                unguarded,
            );
            if let Some(redis) = redis {
                redis_rows(&mut rows, &mark, at(slot.cycle), at(slot.guarded), redis);
            }
        }
        // Each filter setting against the default, through the stack's own store: the rate,
        // and the CPU of every process a request crosses.
        let default = slots.first().and_then(|first| at(first.guarded));
        for (variant, slot) in variants {
            if let (Some(changed), Some(default)) = (at(slot), default) {
                let scenario = format!(
                    "guarded first-time POST: {} ÷ {} (the default)",
                    variant.setting, variant.default
                );
                rows.push(Row::measured(
                    "A/B",
                    &scenario,
                    changed,
                    Some(default),
                    None,
                ));
                rows.push(Row::cpu_compared(
                    "A/B",
                    &format!("CPU per {scenario}"),
                    changed,
                    changed.cpu_us_per_op(),
                    (default, default.cpu_us_per_op()),
                    None,
                ));
            }
        }
        if let (Some(native), Some(wasm)) = (at(native), default) {
            crate::native::first_time_rows(&mut rows, native, wasm);
        }
        // The A/B itself: the stack's store against the variant, same rounds; a partitioned
        // store against the stack's one database (P9: the router hop's cost).
        if let ([first, ..], [_, rest @ ..]) = (&slots[..], &self.sides[..]) {
            for (side, slot) in rest.iter().zip(&slots[1..]) {
                if side.partitions > 0 {
                    partition_rows(&mut rows, side.partitions, at(slot.cycle), at(first.cycle));
                    continue;
                }
                let label = side.label.as_deref().unwrap_or("variant");
                for (what, a, b) in [
                    ("lease-store cycle", first.cycle, slot.cycle),
                    ("guarded first-time POST", first.guarded, slot.guarded),
                ] {
                    if let (Some(a), Some(b)) = (at(a), at(b)) {
                        rows.push(Row::measured(
                            "A/B",
                            &format!("{what}: this build's store ÷ [{label}]"),
                            a,
                            Some(b),
                            None,
                        ));
                    }
                }
            }
        }
        Ok(rows)
    }
}

/// P9: the store cycle on a partitioned database ÷ on one database, in rate and in the
/// databases' CPU per cycle (router and partitions against the one Postgres).
fn partition_rows(
    rows: &mut Vec<Row>,
    partitions: usize,
    partitioned: Option<&Measurement>,
    single: Option<&Measurement>,
) {
    let (Some(partitioned), Some(single)) = (partitioned, single) else {
        return;
    };
    rows.push(Row::measured(
        "P9",
        &format!("lease-store cycle on {partitions} partitions (PL/Proxy) ÷ on one database"),
        partitioned,
        Some(single),
        None,
    ));
    rows.push(Row::cpu_compared(
        "—",
        &format!("Postgres CPU per cycle: router + {partitions} partitions ÷ one database"),
        partitioned,
        partitioned.group_cpu_us_per_op("postgres"),
        (single, single.group_cpu_us_per_op("postgres")),
        None,
    ));
    for (group, what) in [
        ("router", "the router's Postgres CPU per cycle".to_owned()),
        (
            "partitions",
            format!("the {partitions} partitions' Postgres CPU per cycle"),
        ),
    ] {
        rows.push(Row::cpu_of(
            "—",
            &what,
            partitioned,
            partitioned.group_cpu_us_per_op(group),
            None,
        ));
    }
}

/// P1, P4, P5, P6 and their companions for one side, from whichever measurements ran.
fn side_rows(
    rows: &mut Vec<Row>,
    mark: &dyn Fn(&str) -> String,
    pg: Option<&Measurement>,
    cycle: Option<&Measurement>,
    guarded: Option<&Measurement>,
    unguarded: Option<&Measurement>,
) {
    if let (Some(cycle), Some(pg)) = (cycle, pg) {
        rows.push(Row::measured(
            "P1",
            &mark("lease-store claim+finalize over HTTP"),
            cycle,
            Some(pg),
            Some(targets::p1(cycle.concurrency)),
        ));
        rows.push(Row::cpu_compared(
            "P6",
            &mark("Postgres CPU per claim+finalize: store cycle ÷ pgbench"),
            cycle,
            cycle.group_cpu_us_per_op("postgres"),
            (pg, pg.group_cpu_us_per_op("postgres")),
            Some(targets::p6(cycle.concurrency)),
        ));
    }
    let Some(guarded) = guarded else { return };
    if let Some(pg) = pg {
        rows.push(Row::measured(
            "P4",
            &mark("guarded first-time POST, unique keys"),
            guarded,
            Some(pg),
            Some(targets::p4(guarded.concurrency)),
        ));
        rows.push(Row::cpu_compared(
            "—",
            &mark("Postgres CPU per guarded first-time POST ÷ pgbench pair"),
            guarded,
            guarded.group_cpu_us_per_op("postgres"),
            (pg, pg.group_cpu_us_per_op("postgres")),
            None,
        ));
    }
    // The journal tier's own CPU per request (issue 50: store + Postgres ≤ 200 µs at 16).
    let store = guarded.group_cpu_us_per_op("lease-store");
    let tier = store.zip(guarded.group_cpu_us_per_op("postgres"));
    rows.push(Row::cpu_of(
        "—",
        &mark("lease-store CPU per guarded first-time POST"),
        guarded,
        store,
        None,
    ));
    rows.push(Row::cpu_of(
        "—",
        &mark("lease-store + Postgres CPU per guarded first-time POST"),
        guarded,
        tier.map(|(store, postgres)| store + postgres),
        None,
    ));
    if let Some(unguarded) = unguarded {
        rows.push(Row::measured(
            "—",
            &mark("guarded vs unguarded POST"),
            guarded,
            Some(unguarded),
            None,
        ));
        rows.push(Row::cpu_compared(
            "P5",
            &mark("CPU per guarded first-time POST (all processes) ÷ unguarded POST's"),
            guarded,
            guarded.cpu_us_per_op(),
            (unguarded, unguarded.cpu_us_per_op()),
            Some(targets::p5(guarded.concurrency)),
        ));
    }
}

/// The side against the durable Redis pair: the store layer alone (the cycle, and the CPU
/// Postgres and the store spend on it against redis-server's), and the whole request.
fn redis_rows(
    rows: &mut Vec<Row>,
    mark: &dyn Fn(&str) -> String,
    cycle: Option<&Measurement>,
    guarded: Option<&Measurement>,
    redis: &Measurement,
) {
    if let Some(cycle) = cycle {
        rows.push(Row::measured(
            "—",
            &mark("lease-store cycle ÷ durable Redis pair"),
            cycle,
            Some(redis),
            None,
        ));
        rows.push(Row::cpu_compared(
            "—",
            &mark("CPU per lease-store cycle (store + Postgres) ÷ redis-server's per pair"),
            cycle,
            cycle.cpu_us_per_op(),
            (redis, redis.cpu_us_per_op()),
            None,
        ));
    }
    if let Some(guarded) = guarded {
        rows.push(Row::measured(
            "—",
            &mark("guarded first-time POST ÷ durable Redis pair"),
            guarded,
            Some(redis),
            None,
        ));
    }
}
