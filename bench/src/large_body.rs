//! P7 and P8: a ~480 KB JSON payment whose echoed answer is recorded (too large for the
//! edge cache, so its replays come from the store), guarded against unguarded, and the
//! Envoy CPU of replaying it from the store; the native adapter's Envoy beside them (N3).

use std::sync::Arc;

use crate::error::BenchError;
use crate::load::UniqueSource;
use crate::procfs::Watched;
use crate::report::Row;
use crate::rotation::{self, Schedule, load};
use keyflight_testkit::stack::ExtraEnvoy;

use crate::replays::prime_replay;
use crate::stack::BenchStack;
use crate::targets;
use crate::workload::{RequestTemplate, UNIQUE, Workload};

/// Concurrency of the large-body comparison (the issue measured it at two connections).
const LARGE_CONCURRENCY: usize = 2;

/// A payment of about 480 KB for order `order`: 3,600 line items with numbers, strings and
/// nested objects, so the fingerprint's canonical JSON does real work. The demo upstream
/// echoes it, so the recorded answer is about as large. First-time payments name a unique
/// order, as distinct payments do: the same bytes again would be a retry, whose digest the
/// proxy remembers (`docs/stream-machine.md#the-body-digest-memo`).
fn large_payment_body(order: &str) -> String {
    let items: Vec<String> = (0..3600)
        .map(|i| {
            format!(
                r#"{{"sku":"SKU-{i:06}","qty":{},"unit_price":{}.{:02},"note":"line item {i} of a large order","tags":["a","b","c"],"dims":{{"w":{},"h":{}}}}}"#,
                i % 7 + 1,
                i % 500,
                i % 100,
                i % 30,
                i % 40
            )
        })
        .collect();
    format!(
        r#"{{"order":"{order}","amount":1,"currency":"EUR","items":[{}]}}"#,
        items.join(",")
    )
}

/// The processes the large-body contenders are charged.
pub struct Charged<'a> {
    /// The stack's lease-store.
    pub store: Watched,
    /// The demo upstream.
    pub upstream: Watched,
    /// Postgres' processes.
    pub postgres: &'a [Watched],
}

/// Runs the large-body rotation and returns its rows; with `native`, the native adapter's
/// Envoy joins it (N3).
pub async fn rows(
    stack: &BenchStack,
    plain: &ExtraEnvoy,
    native: Option<&ExtraEnvoy>,
    charged: Charged<'_>,
    run_id: &str,
    schedule: Schedule,
    unique: &Arc<UniqueSource>,
) -> Result<Vec<Row>, BenchError> {
    let Charged {
        store,
        upstream,
        postgres,
    } = charged;
    let guarded_envoy = Watched::Process(stack.guarded.pid());
    let plain_envoy = Watched::Process(plain.pid());
    let with =
        |extra: &[Watched]| -> Vec<Watched> { extra.iter().chain(postgres).copied().collect() };
    let mut rows = Vec::new();
    // Large bodies: a ~480 KB JSON payment whose echoed answer is recorded (too large for
    // the edge cache, so its replays come from the store).
    let large_body = large_payment_body(UNIQUE);
    let large = |url: &str| RequestTemplate::payment(url, UNIQUE, &large_body);
    let large_guarded = large(&stack.guarded.url("/payments"))?;
    let large_unguarded = large(&plain.url("/payments"))?;
    let replay_key = format!("large-{run_id}");
    let large_replay = RequestTemplate::payment(
        &stack.guarded.url("/payments"),
        &replay_key,
        &large_payment_body(&replay_key),
    )?;
    prime_replay(&large_replay).await?;
    let envoy_group = vec![("envoy", vec![guarded_envoy])];
    let mut contenders = vec![
        load(
            "large guarded POST",
            Workload::Request(large_guarded),
            LARGE_CONCURRENCY,
            with(&[guarded_envoy, store, upstream]),
        )
        .grouped(envoy_group.clone()),
        load(
            "large unguarded POST",
            Workload::Request(large_unguarded),
            LARGE_CONCURRENCY,
            vec![plain_envoy, upstream],
        )
        .grouped(vec![("envoy", vec![plain_envoy])]),
        load(
            "large replay via store",
            Workload::Request(large_replay),
            LARGE_CONCURRENCY,
            with(&[guarded_envoy, store]),
        )
        .grouped(envoy_group),
    ];
    if let Some(native) = native {
        let native_envoy = Watched::Process(native.pid());
        let native_group = vec![("envoy", vec![native_envoy])];
        contenders.extend([
            load(
                "large guarded POST [native]",
                Workload::Request(large(&native.url("/payments"))?),
                LARGE_CONCURRENCY,
                with(&[native_envoy, store, upstream]),
            )
            .grouped(native_group.clone()),
            load(
                "large replay via store [native]",
                Workload::Request(RequestTemplate::payment(
                    &native.url("/payments"),
                    &replay_key,
                    &large_payment_body(&replay_key),
                )?),
                LARGE_CONCURRENCY,
                with(&[native_envoy, store]),
            )
            .grouped(native_group),
        ]);
    }
    let m = rotation::rotate(&contenders, schedule, unique).await?;
    let [
        large_guarded_m,
        large_unguarded_m,
        large_replay_m,
        native_m @ ..,
    ] = &m[..]
    else {
        return Err(BenchError::Answer("a rotation lost a contender".into()));
    };
    rows.push(Row::measured(
        "base",
        &format!(
            "unguarded POST, {} KB JSON body echoed",
            large_body.len() / 1000
        ),
        large_unguarded_m,
        None,
        None,
    ));
    rows.push(Row::measured(
        "P7",
        "guarded first-time POST, a new large body each, answer recorded",
        large_guarded_m,
        Some(large_unguarded_m),
        Some(targets::p7()),
    ));
    rows.push(Row::cpu_compared(
        "—",
        "Envoy CPU per large guarded POST ÷ unguarded",
        large_guarded_m,
        large_guarded_m.group_cpu_us_per_op("envoy"),
        (
            large_unguarded_m,
            large_unguarded_m.group_cpu_us_per_op("envoy"),
        ),
        None,
    ));
    rows.push(Row::cpu_of(
        "P8",
        "replay of that large record via the store: Envoy CPU per replay",
        large_replay_m,
        large_replay_m.group_cpu_us_per_op("envoy"),
        Some(targets::p8()),
    ));
    if let [native_post_m, native_replay_m] = native_m {
        crate::native::large_body_rows(
            &mut rows,
            (native_post_m, large_guarded_m),
            (native_replay_m, large_replay_m),
        );
    }
    Ok(rows)
}
