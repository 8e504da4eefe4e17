//! The root context's driver over a fake host: configuration, the outbox's
//! calls from the tick and their answers, the operator epoch, retirement.

use std::rc::Rc;
use std::time::Duration;

use keyflight_protocol::wire::{ClaimResponse, WonHow};

use super::*;
use crate::drive::host::{CalloutAnswered, Driver, LogLevel};
use crate::drive::stream::{Callback, Stream, Verdict};
use crate::machine::Action;
use crate::metrics::{EventKind, Metric, OutboxEvent};
use crate::store_call::{Callout, StoreCall};
use crate::testing::{FakeHost, counts};

const NOW_MS: u64 = 1_000_000;

fn plugin(edge_cache: bool) -> Vec<u8> {
    serde_json::json!({
        "lease_store": {"cluster": "ls", "token": "t", "timeout_ms": 1000},
        "edge_cache": {"max_bytes": if edge_cache { 65536 } else { 0 }},
        "identity": {"principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments", "match": {"path_prefix": "/payments"}}]
    })
    .to_string()
    .into_bytes()
}

fn host(plugin_configuration: Vec<u8>) -> FakeHost {
    FakeHost {
        now_ms: NOW_MS,
        plugin_configuration,
        ..FakeHost::default()
    }
}

/// Delivers an answer to callout `token` of the root context.
fn answer(root: &mut Root, host: &mut FakeHost, token: u32, status: u16, body: &[u8]) {
    host.call_headers = vec![(":status".into(), status.to_string().into_bytes())];
    host.call_body = body.to_vec();
    let answered = CalloutAnswered {
        token,
        num_headers: 1,
        body_size: body.len(),
    };
    root.on_call_answer(answered, host);
}

/// A stream of `root` that won its claim and whose caller then left: the
/// claim is the outbox's now.
fn hand_off_one(root: &Root, host: &mut FakeHost) {
    let mut stream = Stream::for_root(root, 7);
    host.request_headers = [
        (":method", "POST"),
        (":path", "/payments"),
        (":authority", "api.example.com"),
        ("idempotency-key", "k-1"),
        ("x-user", "alice"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
    .collect();
    stream.on_callback(
        Callback::RequestHeaders {
            end_of_stream: true,
        },
        host,
    );
    let token = host.last_token().unwrap();
    let won = ClaimResponse::Won {
        claim_id: uuid::Uuid::from_u128(1),
        fence: 1,
        how: WonHow::Claimed,
        lease_ms: 30_000,
    };
    host.call_headers = vec![(":status".into(), b"200".to_vec())];
    host.call_body = serde_json::to_vec(&won).unwrap();
    let answered = CalloutAnswered {
        token,
        num_headers: 1,
        body_size: host.call_body.len(),
    };
    stream.on_call_answer(answered, host);
    stream.on_done(host);
    host.take();
}

#[test]
fn an_invalid_configuration_is_refused_naming_the_field() {
    let mut root = Root::default();
    let mut host = host(br#"{"policies": []}"#.to_vec());
    assert!(!root.configure(&mut host));
    assert!(
        host.did.iter().any(
            |a| matches!(a, Action::Log { level: LogLevel::Error, message }
            if message.starts_with("invalid plugin configuration: "))
        ),
        "{:?}",
        host.did
    );
    assert_eq!(host.tick_period, None);
    // Its streams pass everything through.
    let mut stream = Stream::for_root(&root, 7);
    let verdict = stream.on_callback(
        Callback::RequestHeaders {
            end_of_stream: true,
        },
        &mut host,
    );
    assert_eq!(verdict, Verdict::Continue);
}

#[test]
fn the_store_token_comes_from_the_vm_environment_and_inline_is_deprecated() {
    let configured = |inline: Option<&str>, env: Option<&str>| {
        let mut doc: serde_json::Value = serde_json::from_slice(&plugin(false)).unwrap();
        match inline {
            Some(token) => doc["lease_store"]["token"] = token.into(),
            None => {
                doc["lease_store"].as_object_mut().unwrap().remove("token");
            }
        }
        let mut host = host(doc.to_string().into_bytes());
        if let Some(value) = env {
            host.environment
                .insert(crate::config::DEFAULT_TOKEN_ENV.into(), value.into());
        }
        let mut root = Root::default();
        let started = root.configure(&mut host);
        let token = root
            .worker()
            .and_then(|w| w.config.lease_store.token.clone());
        let warned = host.did.iter().find_map(|a| match a {
            Action::Log { level, message } if *level != LogLevel::Error => {
                Some((*level, message.clone()))
            }
            _ => None,
        });
        (started, token, warned)
    };
    let (started, token, note) = configured(None, Some("from-env"));
    assert!(started);
    assert_eq!(token.as_deref(), Some("from-env"));
    assert_eq!(note, None, "the secure set-up says nothing");

    let (_, token, note) = configured(Some("inline"), None);
    assert_eq!(token.as_deref(), Some("inline"), "still works");
    let (level, message) = note.unwrap();
    assert_eq!(level, LogLevel::Warn);
    assert!(message.contains("deprecated"), "{message}");

    let (_, token, note) = configured(Some("inline"), Some("from-env"));
    assert_eq!(token.as_deref(), Some("from-env"), "the environment wins");
    assert!(note.unwrap().1.contains("ignored"));

    let (started, token, note) = configured(None, None);
    assert!(started);
    assert_eq!(token, None, "no token: the mesh identity is the credential");
    assert_eq!(note.unwrap().0, LogLevel::Info);

    let (started, _, _) = configured(None, Some("two words"));
    assert!(
        !started,
        "a token that is not visible ASCII fails the start"
    );
}

#[test]
fn a_reconfigured_plugin_keeps_its_outbox() {
    let mut root = Root::default();
    let mut host = host(plugin(false));
    assert!(root.configure(&mut host));
    assert_eq!(host.tick_period, Some(Duration::from_millis(250)));
    hand_off_one(&root, &mut host);
    let before = Rc::clone(root.worker().unwrap());
    assert_eq!(before.outbox().depth(), 1);
    assert!(root.configure(&mut host));
    let after = Rc::clone(root.worker().unwrap());
    assert!(
        !Rc::ptr_eq(&before, &after),
        "a new configuration, a new worker"
    );
    assert_eq!(after.outbox().depth(), 1, "the same outbox");
}

#[test]
fn the_tick_sends_due_deliveries_and_their_answers_settle_them() {
    let mut root = Root::default();
    let mut host = host(plugin(false));
    root.configure(&mut host);
    hand_off_one(&root, &mut host);
    root.on_tick(&mut host);
    let Some((token, Callout::Call { call, timeout })) = host.dispatched.last().cloned() else {
        panic!("{:?}", host.dispatched)
    };
    assert!(matches!(call, StoreCall::Release { .. }), "{call:?}");
    assert_eq!(timeout, Duration::from_millis(1000));
    assert_eq!(
        counts(&host.take()),
        vec![Metric::Outbox(OutboxEvent::Retried)]
    );
    // An answer to a token the root did not send changes nothing.
    answer(&mut root, &mut host, token + 100, 200, b"{}");
    assert!(host.take().is_empty());
    answer(&mut root, &mut host, token, 200, b"{}");
    assert_eq!(
        counts(&host.take()),
        vec![Metric::Outbox(OutboxEvent::Delivered)]
    );
    assert!(root.worker().unwrap().outbox().is_empty());
}

#[test]
fn a_delivery_the_host_refuses_to_dispatch_is_retried() {
    let mut root = Root::default();
    let mut host = host(plugin(false));
    root.configure(&mut host);
    hand_off_one(&root, &mut host);
    host.refuse_dispatch = true;
    root.on_tick(&mut host);
    assert_eq!(
        counts(&host.take()),
        vec![Metric::Outbox(OutboxEvent::Retried)]
    );
    assert_eq!(
        root.worker().unwrap().outbox().depth(),
        1,
        "kept for a retry"
    );
    host.refuse_dispatch = false;
    host.now_ms += 100;
    root.on_tick(&mut host);
    assert!(matches!(
        host.dispatched.last(),
        Some((_, Callout::Call { .. }))
    ));
}

#[test]
fn the_operator_epoch_is_asked_from_the_tick_and_heard_from_its_answer() {
    let mut root = Root::default();
    let mut host = host(plugin(true));
    root.configure(&mut host);
    let worker = Rc::clone(root.worker().unwrap());
    assert_eq!(worker.cache_epoch(NOW_MS), None, "nothing heard yet");
    root.on_tick(&mut host);
    let Some((token, Callout::Epoch { .. })) = host.dispatched.last().cloned() else {
        panic!("{:?}", host.dispatched)
    };
    answer(&mut root, &mut host, token, 200, br#"{"epoch":7}"#);
    assert_eq!(worker.cache_epoch(NOW_MS + 1), Some(7));
}

#[test]
fn a_failed_epoch_question_is_counted_and_warned_about_at_a_bounded_rate() {
    let mut root = Root::default();
    let mut host = host(plugin(true));
    root.configure(&mut host);
    let fail = |root: &mut Root, host: &mut FakeHost| {
        root.on_tick(host);
        let Some((token, Callout::Epoch { .. })) = host.dispatched.last().cloned() else {
            panic!("{:?}", host.dispatched)
        };
        host.take();
        answer(root, host, token, 403, b"RBAC: access denied");
        host.take()
    };
    let epoch_failed = Action::Count(Metric::Event(EventKind::EpochFailed));
    let warned = |did: &[Action]| {
        did.iter().any(|a| {
            matches!(a, Action::Log { level: LogLevel::Warn, message }
                if message.contains("operator epoch") && message.contains("HTTP 403"))
        })
    };
    let first = fail(&mut root, &mut host);
    assert!(first.contains(&epoch_failed), "{first:?}");
    assert!(warned(&first), "the first failure is logged: {first:?}");
    host.now_ms += 1_000;
    let second = fail(&mut root, &mut host);
    assert!(second.contains(&epoch_failed), "every failure is counted");
    assert!(
        !warned(&second),
        "but not logged again within the minute: {second:?}"
    );
    host.now_ms += 60_000;
    let later = fail(&mut root, &mut host);
    assert!(
        warned(&later),
        "a minute later it is logged again: {later:?}"
    );
    // Refused dispatches count as failures too.
    host.now_ms += 1_000;
    host.refuse_dispatch = true;
    root.on_tick(&mut host);
    assert!(host.take().contains(&epoch_failed));
}

#[test]
fn a_retired_plugin_stays_until_its_outbox_is_settled() {
    let mut host = host(plugin(false));
    assert!(
        Root::default().on_done(&mut host),
        "nothing held: done at once"
    );
    let mut root = Root::default();
    root.configure(&mut host);
    hand_off_one(&root, &mut host);
    assert!(!root.on_done(&mut host));
    root.on_tick(&mut host);
    let (token, _) = host.dispatched.last().cloned().unwrap();
    assert!(!host.finished);
    answer(&mut root, &mut host, token, 200, b"{}");
    root.on_tick(&mut host);
    assert!(host.finished, "proxy_done once the outbox is empty");
}

#[test]
fn a_retired_plugin_names_each_call_still_in_its_outbox() {
    let mut host = host(plugin(false));
    let mut root = Root::default();
    root.configure(&mut host);
    hand_off_one(&root, &mut host);
    host.take();
    assert!(!root.on_done(&mut host));
    let retired: Vec<String> = host
        .take()
        .into_iter()
        .filter_map(|action| match action {
            Action::Log { message, .. } if message.starts_with("evidence=retired ") => {
                Some(message)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        retired.len(),
        1,
        "one line for the one delivery: {retired:?}"
    );
    assert!(retired[0].contains(" fence=1 "), "{retired:?}");
    assert!(retired[0].contains(" by=outbox "), "{retired:?}");
}

/// A borrow conflict "cannot happen" (the host runs one callback of a worker at a time): one
/// is never skipped silently, but logged at error and counted, at once where a host is at
/// hand and at the next tick where none is (`docs/stream-machine.md#the-driver`).
#[test]
fn a_borrow_conflict_is_logged_at_error_and_counted() {
    let mut root = Root::default();
    let mut host = host(plugin(false));
    assert!(root.configure(&mut host));
    let worker = Rc::clone(root.worker().unwrap());
    {
        let _held = worker.outbox();
        worker.stop_renewal(uuid::Uuid::from_u128(9));
        worker.lease_lost(uuid::Uuid::from_u128(9), &mut host);
    }
    let conflicts = |host: &FakeHost| {
        counts(&host.did)
            .iter()
            .filter(|m| **m == Metric::Event(EventKind::BorrowConflict))
            .count()
    };
    assert_eq!(
        conflicts(&host),
        1,
        "lease_lost has a host: reported at once"
    );
    root.on_tick(&mut host);
    assert_eq!(
        conflicts(&host),
        2,
        "stop_renewal's is reported at the tick"
    );
    let errors: Vec<&String> = host
        .did
        .iter()
        .filter_map(|a| match a {
            Action::Log {
                level: LogLevel::Error,
                message,
            } => Some(message),
            _ => None,
        })
        .collect();
    assert!(
        errors.iter().any(|m| m.contains("stop_renewal"))
            && errors.iter().any(|m| m.contains("lease_lost")),
        "{errors:?}"
    );
    root.on_tick(&mut host);
    assert_eq!(conflicts(&host), 2, "reported once");
}
