//! [`Root`]: the driver of one worker's root context. `configure` builds a new
//! [`Worker`] (the outbox stays: a reconfigured plugin keeps its claims), `on_tick` asks for
//! the epoch and runs the outbox's due calls, the wake-up sends the calls streams queued,
//! `on_http_call_response` reads every answer, and `on_done` keeps a retired plugin alive
//! until its outbox is empty.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use super::shared::{Worker, perform, report_conflicts};
use crate::coalesce::{self, CallQueue, Delivery, Queued, Send, StreamId};
use crate::config::{TokenSource, parse_plugin_config};
use crate::drive::herd::{self, Herds};
use crate::drive::host::{Buffer, CalloutAnswered, Driver, Host, LogLevel, read_answer};
use crate::epoch::EpochWatch;
use crate::metrics::{EventKind, Metric};
use crate::outbox::{CallId, Outbox, OutboxAction};
use crate::store_call::{Answer, CallError, Callout, parse_ack_answer, parse_epoch_answer};

/// The most answers the root context hands to streams in one host callback. Envoy runs the
/// resume or reply each stream makes after the callback returns, each nested in the one
/// before, so hundreds at once (a herd's followers) overflow V8's stack
/// (`docs/envoy-facts.md#waking-the-root-context`).
pub const MAX_HANDED_PER_CALLBACK: usize = 64;

/// How long a worker sends its calls alone after the lease-store refused a batch route
/// as unknown (a store from before batches, `docs/stream-machine.md#coalesced-calls`).
const BATCHES_UNSUPPORTED_MS: u64 = 60_000;

/// Counts a failed epoch question, and warns about it at a bounded rate: an
/// epoch that is never heard turns the edge cache off (F9), which is
/// otherwise invisible (`docs/stream-machine.md#the-edge-cache`).
fn epoch_failed(watch: &mut EpochWatch, error: CallError, host: &mut impl Host) {
    host.count(Metric::Event(EventKind::EpochFailed));
    if let Some(failures) = watch.failed(host.now_ms()) {
        host.log(
            LogLevel::Warn,
            &format!(
                "operator epoch question failed: {error} ({failures} failure(s) since the last \
                 warning); the edge cache is off once the last epoch heard is older than \
                 edge_cache.max_staleness_ms: the lease-store must admit GET /v1/epoch"
            ),
        );
    }
}

/// Says where the lease-store token came from; an inline one is deprecated, because every
/// `config_dump` prints the plugin configuration (`docs/configuration.md#caller-identity`).
fn log_token_source(host: &mut impl Host, source: TokenSource, token_env: &str) {
    let (level, message) = match source {
        TokenSource::Environment => return,
        TokenSource::EnvironmentInlineIgnored => (
            LogLevel::Warn,
            format!(
                "lease_store.token is ignored: the VM environment sets {token_env}; remove the \
                 inline token, which config_dump prints"
            ),
        ),
        TokenSource::Inline => (
            LogLevel::Warn,
            format!(
                "lease_store.token is deprecated: config_dump prints it; deliver the token in \
                 the VM environment ({token_env}, vm_config.environment_variables.host_env_keys)"
            ),
        ),
        TokenSource::None => (
            LogLevel::Info,
            format!(
                "no lease-store token ({token_env} is not in the VM environment): callouts \
                 carry none, so the lease-store must authenticate the mesh identity"
            ),
        ),
    };
    host.log(level, &message);
}

/// A callout the root context sent for streams' calls.
#[derive(Debug)]
enum Flight {
    Alone(Queued),
    Batch(Vec<Queued>),
}

/// The root context of one worker.
#[derive(Debug, Default)]
pub struct Root {
    worker: Option<Rc<Worker>>,
    outbox: Option<Rc<RefCell<Outbox>>>,
    /// Streams' calls waiting for the next wake-up: the root context's, not the
    /// configuration's, so calls queued under a replaced configuration still go out.
    stream_calls: Rc<RefCell<CallQueue>>,
    /// The wake-up queue, registered once.
    wake_queue: Option<u32>,
    /// Streams' calls in flight: token → which.
    flights: BTreeMap<u32, Flight>,
    /// The long-polls among them, and the same claims that wait on each
    /// (`docs/stream-machine.md#herds`).
    herds: Herds,
    /// Answers for streams, for the adapter to hand over.
    deliveries: VecDeque<Delivery>,
    /// Answers handed over in the host callback running now ([`MAX_HANDED_PER_CALLBACK`]).
    handed: usize,
    /// This callback asked for a wake-up to hand over the answers left.
    woken_for_more: bool,
    /// Until when (host clock, ms) calls go alone: the store refused a batch route.
    batches_unsupported_until_ms: u64,
    /// Outbox calls in flight: token → which call.
    calls: BTreeMap<u32, CallId>,
    /// The epoch question in flight.
    epoch_call: Option<u32>,
    /// The host asked this root context to finish while the outbox still
    /// held claims: it keeps ticking until they are settled.
    draining: bool,
}

impl Root {
    /// `on_configure`: parses the plugin configuration (F12). An invalid one
    /// is logged, naming the field, and refused: the plugin does not start.
    pub fn configure(&mut self, host: &mut impl Host) -> bool {
        let json = host.buffer(Buffer::PluginConfiguration, usize::MAX);
        let parsed = parse_plugin_config(&json).and_then(|mut config| {
            let env = host.environment(&config.lease_store.token_env);
            let source = config.lease_store.take_token_from(env)?;
            log_token_source(host, source, &config.lease_store.token_env);
            Ok(config)
        });
        match parsed {
            Ok(config) => {
                host.set_tick_period(config.tick_period());
                let outbox = Rc::clone(
                    self.outbox
                        .get_or_insert_with(|| Rc::new(RefCell::new(Outbox::new(0)))),
                );
                match outbox.try_borrow_mut() {
                    Ok(mut held) => held.set_max_bytes(config.outbox.max_bytes),
                    Err(_) => report_conflicts(host, 1, "configure"),
                }
                if config.lease_store.coalesce_calls && self.wake_queue.is_none() {
                    self.wake_queue = host.register_wake_queue();
                }
                let coalesce = self
                    .wake_queue
                    .filter(|_| config.lease_store.coalesce_calls);
                let worker = Worker::new(Rc::new(config), outbox);
                let worker = match coalesce {
                    Some(queue) => worker.coalescing(Rc::clone(&self.stream_calls), queue),
                    None => worker,
                };
                self.worker = Some(Rc::new(worker));
                true
            }
            Err(error) => {
                host.log(
                    LogLevel::Error,
                    &format!("invalid plugin configuration: {error}"),
                );
                false
            }
        }
    }

    /// The worker's state, once a configuration was accepted.
    pub(crate) fn worker(&self) -> Option<&Rc<Worker>> {
        self.worker.as_ref()
    }

    /// `on_tick`: asks for the operator epoch when it is due, runs the
    /// outbox's due renewals and deliveries, and finishes a retired plugin
    /// once its outbox is settled. Streams' calls still queued (a wake-up the host
    /// lost) go out too.
    pub fn on_tick(&mut self, host: &mut impl Host) {
        let Some(worker) = self.worker.clone() else {
            return;
        };
        worker.report_noted_conflicts(host);
        self.on_wake(host);
        let watch = match worker.epoch.as_ref().map(RefCell::try_borrow_mut) {
            Some(Ok(watch)) => Some(watch),
            Some(Err(_)) => {
                report_conflicts(host, 1, "on_tick (epoch)");
                None
            }
            None => None,
        };
        if let Some(mut watch) = watch
            && watch.due(host.now_ms())
        {
            let store = &worker.config.lease_store;
            let callout = Callout::Epoch {
                timeout: store.timeout,
            };
            match host.dispatch(store, &callout) {
                Some(token) => self.epoch_call = Some(token),
                None => {
                    watch.not_sent();
                    epoch_failed(&mut watch, CallError::Dispatch, host);
                }
            }
        }
        let actions = match worker.outbox.try_borrow_mut() {
            Ok(mut outbox) => outbox.on_tick(host.now_ms()),
            Err(_) => return report_conflicts(host, 1, "on_tick (outbox)"),
        };
        self.perform(&worker, actions, host);
        let settled = match worker.outbox.try_borrow() {
            Ok(outbox) => outbox.is_empty(),
            Err(_) => {
                report_conflicts(host, 1, "on_tick (settled)");
                false
            }
        };
        if self.draining && self.calls.is_empty() && settled {
            self.draining = false;
            host.log(LogLevel::Info, "record outbox settled; plugin retired");
            host.done();
        }
    }

    /// The wake-up a stream asked for: sends every call queued since the last one,
    /// batched by kind (`docs/stream-machine.md#coalesced-calls`).
    pub fn on_wake(&mut self, host: &mut impl Host) {
        let Some(worker) = self.worker.clone() else {
            return;
        };
        let calls = match self.stream_calls.try_borrow_mut() {
            Ok(mut queue) => queue.take(),
            Err(_) => return report_conflicts(host, 1, "on_wake"),
        };
        let batches = host.now_ms() >= self.batches_unsupported_until_ms;
        let store = &worker.config.lease_store;
        for send in coalesce::pack(calls, store.max_body_bytes, batches) {
            self.send(&worker, send, host);
        }
    }

    /// The answers streams are owed, for the adapter to hand to each and then call
    /// [`Root::on_wake`]: the calls streams queue while they are handed their answers
    /// go out then, with no wake-up. A wake-up the host refused there would leave a
    /// stream to send its own call from the root context, whose answer the root
    /// would not know (`docs/stream-machine.md#coalesced-calls`).
    ///
    /// At most [`MAX_HANDED_PER_CALLBACK`] in one host callback: the rest wait for the
    /// wake-up this asks for (or the next tick), after [`Root::callback_returned`].
    pub fn take_deliveries(&mut self, host: &mut impl Host) -> Vec<Delivery> {
        let room = MAX_HANDED_PER_CALLBACK.saturating_sub(self.handed);
        let taken = room.min(self.deliveries.len());
        if taken < self.deliveries.len()
            && !self.woken_for_more
            && let Some(queue) = self.wake_queue
        {
            self.woken_for_more = host.wake(queue);
        }
        if taken > 0 {
            match self.stream_calls.try_borrow_mut() {
                Ok(mut queue) => queue.root_awake(),
                Err(_) => report_conflicts(host, 1, "take_deliveries"),
            }
        }
        self.handed += taken;
        self.deliveries.drain(..taken).collect()
    }

    /// The host callback that handed answers over returned: Envoy has run the resumes and
    /// replies it deferred, so the next callback may hand over more.
    pub fn callback_returned(&mut self) {
        self.handed = 0;
        self.woken_for_more = false;
    }

    /// Dispatches one callout for streams' calls; one the host refuses is answered
    /// at once. A long-poll claim the worker already has in flight joins it instead.
    fn send(&mut self, worker: &Worker, send: Send, host: &mut impl Host) {
        let store = &worker.config.lease_store;
        let (callout, flight) = match send {
            Send::Alone(queued) => {
                let queued = match self.herds.join(queued) {
                    Ok(()) => return host.count(Metric::Event(EventKind::HerdJoined)),
                    Err(queued) => queued,
                };
                (
                    Callout::Call {
                        call: queued.call.clone(),
                        timeout: queued.timeout,
                    },
                    Flight::Alone(queued),
                )
            }
            Send::Batch(calls) => (
                Callout::Batch {
                    calls: calls.iter().map(|queued| queued.call.clone()).collect(),
                    timeout: store.timeout,
                },
                Flight::Batch(calls),
            ),
        };
        let streams: Vec<StreamId> = match &flight {
            Flight::Alone(queued) => vec![queued.stream],
            Flight::Batch(calls) => calls.iter().map(|queued| queued.stream).collect(),
        };
        match host.dispatch_for(store, &callout, &streams) {
            Some(token) => {
                if let Flight::Alone(queued) = &flight {
                    self.herds.sent(token, queued);
                }
                self.flights.insert(token, flight);
            }
            None => self.land(worker, flight, Answer::NotSent, host),
        }
    }

    /// A callout for streams' calls answered: each call's answer is delivered, and what
    /// must go again alone goes.
    fn land(&mut self, worker: &Worker, flight: Flight, answer: Answer, host: &mut impl Host) {
        match flight {
            Flight::Alone(queued) => self.deliveries.push_back(Delivery {
                stream: queued.stream,
                answer,
            }),
            Flight::Batch(calls) => {
                let outcome = coalesce::answer_batch(calls, answer);
                if outcome.batches_unsupported {
                    self.batches_unsupported_until_ms = host.now_ms() + BATCHES_UNSUPPORTED_MS;
                    host.log(
                        LogLevel::Warn,
                        "the lease-store has no batch routes (it predates them): store calls \
                         go one by one for a minute; upgrade the lease-store, or set \
                         lease_store.coalesce_calls: false",
                    );
                }
                self.deliveries.extend(outcome.delivered);
                for queued in outcome.resend {
                    self.send(worker, Send::Alone(queued), host);
                }
            }
        }
    }

    /// A long-poll answered the calls that joined it: each gets its answer, as its own call
    /// would have, unless it was a `won` — the sender's lease alone. They then claim
    /// again, as one long-poll on the new winner (`docs/stream-machine.md#herds`).
    fn answer_herd(
        &mut self,
        worker: &Worker,
        members: Vec<Queued>,
        answer: &Answer,
        host: &mut impl Host,
    ) {
        if herd::sender_only(answer) {
            for queued in members {
                self.send(worker, Send::Alone(queued), host);
            }
        } else {
            self.deliveries
                .extend(members.into_iter().map(|queued| Delivery {
                    stream: queued.stream,
                    answer: answer.clone(),
                }));
        }
    }

    /// Performs what the outbox asked for; a call the host refuses to
    /// dispatch is answered at once, and what that answer asks runs too.
    fn perform(&mut self, worker: &Worker, actions: Vec<OutboxAction>, host: &mut impl Host) {
        let mut queue: VecDeque<OutboxAction> = actions.into();
        while let Some(action) = queue.pop_front() {
            let Some((id, call)) = perform(action, host) else {
                continue;
            };
            let store = &worker.config.lease_store;
            let callout = Callout::Call {
                call,
                timeout: store.timeout,
            };
            match host.dispatch(store, &callout) {
                Some(token) => {
                    self.calls.insert(token, id);
                }
                None => match worker.outbox.try_borrow_mut() {
                    Ok(mut outbox) => {
                        let answer = Err(CallError::Dispatch);
                        queue.extend(outbox.on_answer(id, answer, host.now_ms()));
                    }
                    Err(_) => report_conflicts(host, 1, "perform"),
                },
            }
        }
    }
}

impl Driver for Root {
    /// `on_http_call_response`: the epoch question or an outbox call answered
    /// (calls dispatched from `on_tick` answer to the root context).
    fn on_call_answer(&mut self, answered: CalloutAnswered, host: &mut impl Host) {
        let Some(worker) = self.worker.clone() else {
            return;
        };
        if let Some(flight) = self.flights.remove(&answered.token) {
            let members = self.herds.answered(answered.token);
            let answer = read_answer(host, answered);
            self.answer_herd(&worker, members, &answer, host);
            self.land(&worker, flight, answer, host);
            return;
        }
        if self.epoch_call == Some(answered.token) {
            self.epoch_call = None;
            let answer = read_answer(host, answered);
            match worker.epoch.as_ref().map(RefCell::try_borrow_mut) {
                Some(Ok(mut watch)) => {
                    let result = parse_epoch_answer(&answer);
                    if let Err(error) = result {
                        epoch_failed(&mut watch, error, host);
                    }
                    watch.answered(result);
                }
                Some(Err(_)) => report_conflicts(host, 1, "on_call_answer (epoch)"),
                None => {}
            }
            return;
        }
        let question = match self.stream_calls.try_borrow_mut() {
            Ok(mut calls) => calls.answered(answered.token),
            Err(_) => {
                report_conflicts(host, 1, "on_call_answer (question)");
                None
            }
        };
        if let Some(stream) = question {
            let answer = read_answer(host, answered);
            self.deliveries.push_back(Delivery { stream, answer });
            return;
        }
        let Some(id) = self.calls.remove(&answered.token) else {
            return;
        };
        let result = parse_ack_answer(&read_answer(host, answered));
        let actions = match worker.outbox.try_borrow_mut() {
            Ok(mut outbox) => outbox.on_answer(id, result, host.now_ms()),
            Err(_) => return report_conflicts(host, 1, "on_call_answer (outbox)"),
        };
        self.perform(&worker, actions, host);
    }

    /// `on_done`: the host retires this root context (the plugin was
    /// reconfigured or is being removed). Claims still in the outbox would be
    /// forgotten with it — each one a same-body retry that runs again — so it
    /// asks to stay until they are settled; every delivery ends by its retry
    /// budget (`docs/envoy-facts.md#a-retired-root-context-keeps-working`).
    fn on_done(&mut self, host: &mut impl Host) -> bool {
        let done = match self.outbox.as_ref().map(|outbox| outbox.try_borrow()) {
            None => true,
            Some(Ok(outbox)) => outbox.is_empty(),
            Some(Err(_)) => {
                report_conflicts(host, 1, "on_done");
                false
            }
        };
        self.draining = !done;
        if self.draining {
            host.log(
                LogLevel::Info,
                "plugin retired with claims in the record outbox: settling them first",
            );
            if let Some(worker) = self.worker.clone() {
                let actions = match worker.outbox.try_borrow() {
                    Ok(outbox) => outbox.on_retire(),
                    Err(_) => {
                        report_conflicts(host, 1, "on_done (retire)");
                        Vec::new()
                    }
                };
                self.perform(&worker, actions, host);
            }
        }
        done
    }
}
