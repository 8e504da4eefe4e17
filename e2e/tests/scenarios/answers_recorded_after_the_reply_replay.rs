//! F7, F14: under a policy's `record: after_reply` the caller's answer does not wait for
//! its record (`docs/stream-machine.md#recording-after-the-reply`): it goes out while the
//! only lease-store is frozen, before any finalize could land, and the record outbox lands
//! it once the store runs again. A same-key retry replays it; the upstream ran once.

use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::process::Signal;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_goes_out_before_its_record_lands_and_still_replays() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("record".into(), json!("after_reply"));
    }))
    .await;
    let body = json!({"amount": 21});
    let path = "/payments?hold=after-reply";

    let caller = stack.post(path).key("after-reply").json(&body).send();
    let freeze = async {
        stack.wait_for_gate("after-reply", 1).await;
        stack.signal_lease_store(0, Signal::Stop);
        stack.open_gate("after-reply").await;
    };
    let (first, ()) = tokio::join!(caller, freeze);
    assert_eq!(first.status, 201, "{first}");
    // Under the default the stream's own finalize would have had to time out first.
    assert_eq!(
        stack.filter_counter("event.finalize_error").await,
        0,
        "the answer waited for no finalize"
    );
    assert_eq!(stack.filter_counter("event.recorded_after_reply").await, 1);
    stack.signal_lease_store(0, Signal::Cont);

    // Until the outbox lands the record the retry waits on the lease, then replays.
    let retry = stack.post(path).key("after-reply").json(&body).send().await;
    retry.assert_replayed();
    assert_eq!(retry.body, first.body, "the answer the caller got");
    assert_eq!(stack.upstream_executions().await, 1, "ran once");
    stack
        .eventually("the outbox delivered the record", || async {
            stack.filter_counter("outbox.delivered").await == 1
        })
        .await;
}
