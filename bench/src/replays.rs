//! P2: replays against Envoy's own `direct_response` of the same answer, with the floor
//! any wasm filter puts under them (the same route with the filter loaded and no policy
//! matching) and, when the filter build knows the option, replays via the store with the
//! edge cache off; and the native adapter's replay and floor (N2, [`crate::native`]).

use std::sync::Arc;

use hyper::StatusCode;

use crate::error::BenchError;
use crate::load::UniqueSource;
use crate::procfs::Watched;
use crate::report::Row;
use crate::rotation::{self, Schedule, load};
use keyflight_testkit::stack::ExtraEnvoy;

use crate::http::Connection;
use crate::stack::BenchStack;
use crate::targets;
use crate::workload::{RequestTemplate, Workload};

/// Builds a payment request to `url` with idempotency key `key`.
pub type Payment<'a> = &'a dyn Fn(&str, &str) -> Result<RequestTemplate, BenchError>;

/// Runs the replay rotation at concurrency `c` and returns its rows; remarks go to `notes`.
/// With `native`, the native adapter's replay and floor join it (N2).
#[allow(clippy::too_many_arguments)]
pub async fn rows(
    stack: &BenchStack,
    plain: &ExtraEnvoy,
    native: Option<&ExtraEnvoy>,
    replay_answer: &str,
    payment: Payment<'_>,
    (store, postgres): (Watched, &[Watched]),
    run_id: &str,
    (c, schedule): (usize, Schedule),
    unique: &Arc<UniqueSource>,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BenchError> {
    let guarded_envoy = Watched::Process(stack.guarded.pid());
    let plain_envoy = Watched::Process(plain.pid());
    let with =
        |extra: &[Watched]| -> Vec<Watched> { extra.iter().chain(postgres).copied().collect() };
    let replay = payment(&stack.guarded.url("/payments"), &format!("replay-{run_id}"))?;
    let direct = payment(
        &plain.url(crate::envoy::DIRECT_PATH),
        &format!("replay-{run_id}"),
    )?;
    let floor_envoy = stack
        .start_filter_floor_envoy(StatusCode::CREATED.as_u16(), replay_answer)
        .await?;
    let floor = payment(
        &floor_envoy.url(crate::envoy::DIRECT_PATH),
        &format!("replay-{run_id}"),
    )?;
    let mut rows = Vec::new();
    // Replay via the store: a second guarded Envoy with the policy's edge cache off.
    let no_cache = match stack
        .start_guarded_variant("no-edge-cache", |plugin| {
            plugin["policies"][0]["edge_cache"] = serde_json::Value::Bool(false);
        })
        .await
    {
        Ok(envoy) => {
            let via_store = payment(&envoy.url("/payments"), &format!("replay-{run_id}"))?;
            prime_replay(&via_store).await?;
            Some((envoy, via_store))
        }
        Err(e) => {
            notes.push(format!(
                "replay via the store (edge cache off) not measured: {e}"
            ));
            None
        }
    };

    // The native adapter: its replay (its own edge cache, primed here) and its floor.
    let native = match native {
        Some(envoy) => {
            let replay = payment(&envoy.url("/payments"), &format!("replay-{run_id}"))?;
            prime_replay(&replay).await?;
            let floor_envoy = stack
                .start_native_envoy(
                    "native-floor",
                    Some((StatusCode::CREATED.as_u16(), replay_answer)),
                )
                .await?;
            let floor = payment(
                &floor_envoy.url(crate::envoy::DIRECT_PATH),
                &format!("replay-{run_id}"),
            )?;
            Some((envoy, replay, floor_envoy, floor))
        }
        None => None,
    };
    let admin = |port: u16| format!("127.0.0.1:{port}");
    let hits_before = edge_cache_hits(&admin(stack.guarded.ports.admin)).await?;
    let mut contenders = vec![
        load(
            "replay",
            Workload::Request(replay.clone()),
            c,
            with(&[guarded_envoy, store]),
        ),
        load(
            "direct_response",
            Workload::Request(direct),
            c,
            vec![plain_envoy],
        ),
        load(
            "direct_response behind the filter",
            Workload::Request(floor),
            c,
            vec![Watched::Process(floor_envoy.pid())],
        ),
    ];
    let via_store_slot = no_cache.as_ref().map(|(envoy, via_store)| {
        contenders.push(load(
            "replay via store",
            Workload::Request(via_store.clone()),
            c,
            with(&[Watched::Process(envoy.pid()), store]),
        ));
        contenders.len() - 1
    });
    let mut native_hits_before = 0;
    let native_slot = match &native {
        Some((envoy, replay, floor_envoy, floor)) => {
            native_hits_before = edge_cache_hits(&admin(envoy.ports.admin)).await?;
            contenders.extend([
                load(
                    "replay [native]",
                    Workload::Request(replay.clone()),
                    c,
                    with(&[Watched::Process(envoy.pid()), store]),
                ),
                load(
                    "direct_response behind the native module",
                    Workload::Request(floor.clone()),
                    c,
                    vec![Watched::Process(floor_envoy.pid())],
                ),
            ]);
            Some(contenders.len() - 2)
        }
        None => None,
    };
    let m = rotation::rotate(&contenders, schedule, unique).await?;
    let (replay_m, direct_m, floor_m) = match &m[..] {
        [replay_m, direct_m, floor_m, ..] => (replay_m, direct_m, floor_m),
        _ => return Err(BenchError::Answer("a rotation lost a contender".into())),
    };
    let hits = edge_cache_hits(&admin(stack.guarded.ports.admin))
        .await?
        .saturating_sub(hits_before);
    let p2 = Some(targets::p2());
    rows.push(Row::measured(
        "base",
        "Envoy direct_response, same request",
        direct_m,
        None,
        None,
    ));
    rows.push(Row::measured(
        "—",
        "direct_response with the filter loaded, no policy (wasm floor)",
        floor_m,
        Some(direct_m),
        None,
    ));
    if hits * 2 > replay_m.ok {
        rows.push(Row::measured(
            "P2",
            "replay served from the edge cache",
            replay_m,
            Some(direct_m),
            p2,
        ));
        if let Some(via_store_m) = via_store_slot.and_then(|slot| m.get(slot)) {
            rows.push(Row::measured(
                "—",
                "replay via the store (edge cache off)",
                via_store_m,
                Some(direct_m),
                None,
            ));
        }
    } else {
        rows.push(Row::measured(
            "P2",
            "replay via the store (no edge-cache hits: F9 not in this build)",
            replay_m,
            Some(direct_m),
            p2,
        ));
        notes.push(format!(
            "P2 measured replay via the store: {hits} of {} replays were edge-cache hits",
            replay_m.ok
        ));
    }
    if let (Some((envoy, ..)), Some(slot)) = (&native, native_slot)
        && let [native_replay_m, native_floor_m] = &m[slot..]
    {
        let native_hits = edge_cache_hits(&admin(envoy.ports.admin))
            .await?
            .saturating_sub(native_hits_before);
        crate::native::replay_rows(
            &mut rows,
            native_replay_m,
            native_floor_m,
            direct_m,
            native_hits * 2 > native_replay_m.ok,
        );
    }
    Ok(rows)
}

/// Sends the replay request twice (record, then replay) and returns the replayed body.
pub async fn prime_replay(replay: &RequestTemplate) -> Result<String, BenchError> {
    let mut connection = Connection::open(&replay.target.authority).await?;
    let mut body = String::new();
    for attempt in ["first", "replay"] {
        let answer = replay.send_for_answer(&mut connection, "").await?;
        if answer.status != StatusCode::CREATED {
            return Err(BenchError::Answer(format!(
                "the guarded path's {attempt} answer was {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            )));
        }
        body = String::from_utf8_lossy(&answer.body).into_owned();
    }
    Ok(body)
}

/// `outcome.replay_edge_cache` of the Envoy whose admin is at `admin` (`host:port`), under
/// either adapter's namespace; 0 when the filter has no such counter.
pub async fn edge_cache_hits(admin: &str) -> Result<u64, BenchError> {
    let stat = "outcome.replay_edge_cache";
    let mut connection = Connection::open(admin).await?;
    let answer = connection
        .send(
            hyper::Method::GET,
            &keyflight_testkit::metrics::filter_stat_path(stat),
            &[],
            bytes::Bytes::new(),
        )
        .await?;
    Ok(
        keyflight_testkit::metrics::filter_stat_value(&String::from_utf8_lossy(&answer.body), stat)
            .and_then(|value| value.parse().ok())
            .unwrap_or(0),
    )
}
