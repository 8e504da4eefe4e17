//! The proxy's own lifecycle and the record outbox (F14), on Envoy 1.40 and on the oldest
//! supported Envoy, 1.36 (Istio 1.28's; `scripts/envoy.sh 1.36`): what these runs show is
//! written in `docs/envoy-facts.md#a-retired-root-context-keeps-working` and
//! `docs/envoy-facts.md#drain-and-shutdown`.
//!
//! Each scenario leaves an answer's record in the outbox (the lease-store is killed while
//! the upstream runs, so the stream's finalize fails and the caller is answered anyway),
//! then does one thing to the proxy, brings the store back and looks at the record.

use std::time::{Duration, Instant};

use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::binaries::Binaries;
use keyflight_testkit::process::Signal;
use serde_json::json;

/// A short lease, so that a record the outbox lost would be taken over within the test.
const LEASE_MS: u64 = 3000;

/// What the filter logs when a retired plugin keeps its root context for its outbox, and
/// when it lets go once the outbox is empty (`filter/src/drive/worker/root.rs`).
const RETIRED_WITH_CLAIMS: &str = "plugin retired with claims in the record outbox";
const RETIRED_SETTLED: &str = "record outbox settled; plugin retired";
/// Whether `log` holds the evidence line a retiring root context logs for a finalize
/// still in its outbox (`filter/src/log.rs`).
fn retired_finalize(log: &str) -> bool {
    log.lines()
        .any(|line| line.contains("evidence=retired ") && line.contains(" call=finalize "))
}

fn options(binaries: Binaries) -> StackOptions {
    StackOptions::default()
        .binaries(binaries)
        .reconfigurable()
        .policy(|policy| {
            policy.insert("lease_ms".into(), json!(LEASE_MS));
            policy.insert("renew_interval_ms".into(), json!(400));
            policy.insert("follower_wait_ms".into(), json!(10_000));
            // The at-least-once takeover this proves is `uncertain: retry`'s; the default
            // holds (`docs/guarantee.md#at-most-once-and-at-least-once-policies`).
            policy.insert("uncertain".into(), json!("retry"));
        })
}

fn oldest() -> Binaries {
    Binaries::locate().with_oldest_envoy()
}

/// Answers `key` through Envoy 0 while the lease-store is down: the caller gets the
/// upstream's 201 and the record waits in the outbox.
async fn answer_into_the_outbox(stack: &mut Stack, key: &str) -> keyflight_e2e::reply::Reply {
    let path = format!("/payments?hold={key}");
    let caller = stack.post(&path).key(key).json(&json!({"key": key})).send();
    let fault = async {
        stack.wait_for_gate(key, 1).await;
        stack.signal_lease_store(0, Signal::Kill);
        stack.open_gate(key).await;
    };
    let (first, ()) = tokio::join!(caller, fault);
    assert_eq!(first.status, 201, "{first}");
    first
}

/// The states of the records in the database, oldest first (`pending` while the outbox
/// holds one), comma-separated; on a partitioned stack, ordered across the partitions.
fn record_states(stack: &Stack) -> String {
    let rows = stack.sql(
        "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || ' ' || state \
           FROM keyflight_records",
    );
    let mut rows: Vec<&str> = rows.lines().filter(|line| !line.is_empty()).collect();
    rows.sort_unstable();
    let states: Vec<&str> = rows
        .iter()
        .filter_map(|row| row.rsplit_once(' ').map(|(_, state)| state))
        .collect();
    states.join(",")
}

/// Waits until Envoy 0's log holds `needle` `count` times, at most `timeout`.
async fn wait_logged(stack: &Stack, needle: &str, count: usize, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if stack.envoy_log().matches(needle).count() >= count {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A new module pushed (a release, or a rollback) while a record waits in the outbox:
/// Envoy calls the old root context's `on_done`, which asks to stay, but destroys the old
/// VM anyway once no plugin uses it (unlike a configuration push, which keeps the VM),
/// so the record is lost: no renew or settle reaches the store again, the lease runs out
/// and a same-body retry runs again, counted as `recovered_abandoned`
/// (`docs/guarantee.md#where-it-is-at-least-once`).
async fn a_module_change_drops_the_retired_outbox(binaries: Binaries) {
    let mut stack = Stack::start(options(binaries)).await;
    let rebuilt = stack.parts().rebuilt_wasm("upgrade");
    let vms_before = stack.parts().wasm_vms(0).await.expect("Envoy answers");
    assert!(vms_before.active > 0, "Envoy counts its Wasm VMs");
    answer_into_the_outbox(&mut stack, "upgraded").await;
    stack.parts_mut().upgrade_wasm(0, &rebuilt).await;
    assert!(
        wait_logged(&stack, RETIRED_WITH_CLAIMS, 1, Duration::from_secs(10)).await,
        "the old root context was told it is done, with the record in its outbox"
    );
    assert!(
        retired_finalize(&stack.envoy_log()),
        "the retired root context named the record's settle call"
    );
    stack
        .eventually(
            "new VMs were created and the old ones destroyed",
            || async {
                stack.parts().wasm_vms(0).await.is_some_and(|vms| {
                    vms.created > vms_before.created && vms.active <= vms_before.active
                })
            },
        )
        .await;
    stack.restart_lease_store().await;
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 1000)).await;
    assert!(
        !stack.envoy_log().contains(RETIRED_SETTLED),
        "the old VM never delivered"
    );
    assert_eq!(
        record_states(&stack).trim(),
        "pending",
        "the record was never settled"
    );
    let retry = stack
        .post("/payments?hold=upgraded")
        .key("upgraded")
        .json(&json!({"key": "upgraded"}))
        .send();
    let (retry, ()) = tokio::join!(retry, stack.open_gate("upgraded"));
    assert_eq!(retry.status, 201, "{retry}");
    assert_eq!(stack.upstream_executions().await, 2, "the retry ran again");
    assert_eq!(stack.store_event_total("recovered_abandoned").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_change_drops_the_retired_outbox_on_envoy_1_40() {
    a_module_change_drops_the_retired_outbox(Binaries::locate()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_change_drops_the_retired_outbox_on_envoy_1_36() {
    a_module_change_drops_the_retired_outbox(oldest()).await;
}

/// `SIGTERM` ends Envoy at once, and a record still in its outbox goes with it (the
/// first at-least-once row of `docs/guarantee.md`). `POST /drain_listeners?graceful`
/// (what Istio's agent does before it sends `SIGTERM`) leaves the plugin alive: its outbox
/// keeps renewing and delivers once the store is back.
async fn sigterm_then_drain(binaries: Binaries) {
    let mut stack = Stack::start(options(binaries)).await;
    let admin = stack.parts().envoy_ports(0).admin;

    answer_into_the_outbox(&mut stack, "terminated").await;
    let stopped = Instant::now();
    stack.parts().signal_envoy(0, Signal::Term);
    assert!(wait_exited(&stack).await, "Envoy exits on SIGTERM");
    eprintln!("Envoy exited {:?} after SIGTERM", stopped.elapsed());
    assert!(
        stack.envoy_log().contains(RETIRED_WITH_CLAIMS),
        "the root context was told it is done, and asked to stay"
    );
    assert!(
        retired_finalize(&stack.envoy_log()),
        "and named the record's settle call before the process exited"
    );
    stack.restart_lease_store().await;
    tokio::time::sleep(Duration::from_millis(LEASE_MS)).await;
    assert_eq!(
        record_states(&stack).trim(),
        "pending",
        "the outbox died with Envoy"
    );
    stack.parts_mut().start_envoy(0).await;

    answer_into_the_outbox(&mut stack, "drained").await;
    let drain = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{admin}/drain_listeners?graceful"))
        .send()
        .await
        .expect("the admin answers");
    assert!(drain.status().is_success(), "{drain:?}");
    let listener = stack.parts().envoy_ports(0).listener;
    stack
        .eventually("the drained listener stopped accepting", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", listener))
                .await
                .is_err()
        })
        .await;
    stack.restart_lease_store().await;
    stack
        .eventually(
            "the drained proxy's outbox delivered the record",
            || async { record_states(&stack).trim() == "pending,completed" },
        )
        .await;
}

/// Whether Envoy 0 stopped answering its admin port within ten seconds.
async fn wait_exited(stack: &Stack) -> bool {
    let admin = stack.parts().envoy_ports(0).admin;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if reqwest::get(format!("http://127.0.0.1:{admin}/ready"))
            .await
            .is_err()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_outbox_and_a_drain_keeps_it_on_envoy_1_40() {
    sigterm_then_drain(Binaries::locate()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_outbox_and_a_drain_keeps_it_on_envoy_1_36() {
    sigterm_then_drain(oldest()).await;
}

/// Whether a line of Envoy 0's log, logged by the process of restart epoch `epoch`, holds
/// `needle`: a hot-restarted child prefixes its messages with `epoch=N`
/// (`testkit/src/stack/parts.rs`), an epoch-0 process does not.
fn logged_by_epoch(log: &str, epoch: u32, needle: &str) -> usize {
    let mark = format!("] epoch={epoch} ");
    log.lines()
        .filter(|line| line.contains(needle))
        .filter(|line| {
            if epoch == 0 {
                !line.contains("] epoch=")
            } else {
                line.contains(&mark)
            }
        })
        .count()
}

/// What a hot restart's parent logs when the child tells it to exit (Envoy's own line).
const PARENT_TOLD_TO_EXIT: &str = "shutting down due to child request";

/// A hot restart is two processes, each with its own VMs: the parent keeps running its
/// plugin, ticks and outbox while it drains, and delivers a record once a store answers;
/// when Envoy ends it (`--parent-shutdown-time-s` after the child started) it exits as on
/// `SIGTERM`: `on_done`, `evidence=retired`, and the record still in its outbox is lost,
/// since the child starts new VMs with empty outboxes. So a record survives a hot restart
/// only if it lands within the parent's shutdown time (`docs/envoy-facts.md#hot-restart`).
async fn hot_restart(binaries: Binaries) {
    let mut stack = Stack::start(options(binaries)).await;

    // Epoch 0 → 1, the store down until the parent exited: the record is lost.
    answer_into_the_outbox(&mut stack, "restarted").await;
    stack
        .parts_mut()
        .hot_restart_envoy(0, Duration::from_secs(2))
        .await;
    stack.parts_mut().wait_envoy_parent_exit(0);
    let log = stack.envoy_log();
    assert_eq!(logged_by_epoch(&log, 0, PARENT_TOLD_TO_EXIT), 1);
    assert_eq!(
        logged_by_epoch(&log, 0, RETIRED_WITH_CLAIMS),
        1,
        "the parent's root context was told it is done, with the record in its outbox"
    );
    assert!(
        log.lines().any(|line| !line.contains("] epoch=")
            && line.contains("evidence=retired ")
            && line.contains(" call=finalize ")),
        "the parent named the record's settle call before it exited"
    );
    stack.restart_lease_store().await;
    stack
        .eventually("the lost record's lease ran out", || async {
            stack
                .sql("SELECT bool_and(lease_expires_at < now()) FROM keyflight_records")
                .trim()
                == "t"
        })
        .await;
    assert_eq!(
        record_states(&stack).trim(),
        "pending",
        "nothing delivered the record: the child's new VMs never had it"
    );
    let retry = stack
        .post("/payments?hold=restarted")
        .key("restarted")
        .json(&json!({"key": "restarted"}))
        .send();
    let (retry, ()) = tokio::join!(retry, stack.open_gate("restarted"));
    assert_eq!(retry.status, 201, "{retry}");
    assert_eq!(stack.upstream_executions().await, 2, "the retry ran again");
    assert_eq!(stack.store_event_total("recovered_abandoned").await, 1);

    // Epoch 1 → 2, the store back while the parent drains: the parent delivers.
    answer_into_the_outbox(&mut stack, "kept").await;
    stack
        .parts_mut()
        .hot_restart_envoy(0, Duration::from_secs(60))
        .await;
    stack.restart_lease_store().await;
    stack
        .eventually(
            "the draining parent's outbox delivered the record",
            || async { record_states(&stack).trim() == "completed,completed" },
        )
        .await;
    // The row commits before the store's answer reaches the parent, which logs it then.
    let landed_by_the_parent = |log: &str| {
        log.lines().any(|line| {
            line.contains("] epoch=1 ")
                && line.contains("evidence=settle_landed ")
                && line.contains(" by=outbox")
        })
    };
    stack
        .eventually("the parent (epoch 1) landed it from its outbox", || async {
            landed_by_the_parent(&stack.envoy_log())
        })
        .await;
    let log = stack.envoy_log();
    assert_eq!(
        logged_by_epoch(&log, 1, PARENT_TOLD_TO_EXIT)
            + logged_by_epoch(&log, 1, RETIRED_WITH_CLAIMS),
        0,
        "before it was told to exit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_restart_keeps_the_outbox_only_until_the_parent_exits_on_envoy_1_40() {
    hot_restart(Binaries::locate()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_restart_keeps_the_outbox_only_until_the_parent_exits_on_envoy_1_36() {
    hot_restart(oldest()).await;
}
