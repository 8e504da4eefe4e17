//! The panic barrier around every hook of a stream, and the order of what a hook does.
//!
//! A hook runs its driver call under `catch_unwind`: a panic must not unwind into Envoy's
//! C++. One that happens on a stream answers it 503 `journal_unavailable`, counted as that
//! outcome, and the stream passes through untouched afterwards; Envoy keeps serving
//! (`filter-native/README.md#panics`). What the driver asked of Envoy that can run this
//! stream's hooks again (replies, resumes) is performed once the driver call is over
//! (`docs/envoy-facts.md#dynamic-modules`).
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use keyflight_filter::coalesce::StreamId;
use keyflight_filter::drive::host::{CalloutAnswered, Driver};
use keyflight_filter::drive::stream::{Stream, Verdict};
use keyflight_filter::metrics::{Metric, Outcome};
use keyflight_filter::problem::problem_reply;
use keyflight_filter::store_call::Answer;
use keyflight_protocol::ProblemCode;

use crate::abi::{EnvoyFilter, FilterEnvoyPtr, Level};
use crate::host::{CallAnswer, NativeHost, log};
use crate::plugin::Plugin;
use crate::worker::Slot;

/// `Continue` of every status enum (`abi.h`).
pub const CONTINUE: i32 = 0;
/// `StopIteration` of the headers and trailers enums, `StopIterationAndBuffer` of the body
/// enums (`abi.h`).
pub const STOP: i32 = 1;

/// One stream's filter: its configuration, its worker's slot (whose lock every hook holds,
/// `worker.rs`), its id there and its driver, whether a panic ended the module's part in
/// it, and the answers that came in while one of its hooks was running.
///
/// Envoy runs a stream's hooks one at a time, but a hook's own calls into Envoy can run
/// another hook of the same stream before they return (a callout that fails inside its
/// dispatch answers at once). Hence shared references and a `RefCell`: a hook that finds
/// the driver busy leaves its answer in `early`, and the hook running drains it.
///
/// Envoy may even destroy the stream inside one of its hooks: a local reply or a resume
/// that ends the stream runs its destroy hook before it returns. So the filter counts the
/// hooks running through [`guarded`], and one destroyed meanwhile is dropped when the last
/// of them returns ([`destroy`]).
pub struct Filter {
    plugin: Arc<Plugin>,
    slot: Arc<Slot>,
    id: StreamId,
    stream: RefCell<Stream>,
    failed: Cell<bool>,
    early: RefCell<VecDeque<Late>>,
    running: Cell<u32>,
    destroyed: Cell<bool>,
}

/// An answer for a stream whose driver was busy.
enum Late {
    /// To one of the stream's own callouts.
    Answer(CalloutAnswered, CallAnswer),
    /// To a call the worker's root driver sent for it.
    Delivered(Answer),
}

impl Filter {
    /// The filter of a new stream `id` driven by `stream`, made from `slot`'s root driver.
    pub fn new(plugin: Arc<Plugin>, slot: Arc<Slot>, id: StreamId, stream: Stream) -> Self {
        Filter {
            plugin,
            slot,
            id,
            stream: RefCell::new(stream),
            failed: Cell::new(false),
            early: RefCell::default(),
            running: Cell::new(0),
            destroyed: Cell::new(false),
        }
    }

    /// Drops the filter holding its slot's lock: its driver shares the root driver's `Rc`s.
    fn drop_held(self: Box<Self>) {
        let slot = Arc::clone(&self.slot);
        slot.hold(|| drop(self));
    }

    /// Whether Envoy destroyed the stream: nothing may be asked of Envoy for it any more.
    fn gone(&self) -> bool {
        self.destroyed.get()
    }

    /// The stream's first hook: its worker's slot may use it from now on (`turn.rs`).
    pub fn join(&self, envoy: EnvoyFilter, module: *const c_void) {
        self.slot.joined(self.id, envoy, module);
    }

    /// The root driver's token of this stream's callout `id`, when the root driver sent it.
    pub fn carried(&self, id: u64) -> Option<u32> {
        self.slot.carried(self.id, id)
    }

    /// A turn of the worker's root driver, through this stream (`Slot::turn`). The turn
    /// holds its own references: handing this stream its answer ends it, and nothing in
    /// the turn may rest on its filter should Envoy destroy it before the turn is over.
    pub fn turn(&self, envoy: EnvoyFilter, answer: Option<(CalloutAnswered, CallAnswer)>) {
        let (slot, plugin) = (Arc::clone(&self.slot), Arc::clone(&self.plugin));
        slot.turn(&plugin, (self.id, envoy), answer);
    }
}

/// Envoy destroyed the filter behind `module`. Its worker's slot forgets the stream at once
/// (`Slot::left`); the filter is dropped now or, when Envoy destroyed it inside one of its
/// hooks, once that hook returned ([`guarded`]).
///
/// # Safety
/// `module` is a filter `on_http_filter_new` returned (by `Box::into_raw`), destroyed once.
pub unsafe fn destroy(module: *const c_void) {
    // SAFETY: the caller's contract.
    let Some(filter) = (unsafe { filter_of(module) }) else {
        return;
    };
    filter
        .slot
        .hold(|| filter.slot.left(&filter.plugin, filter.id));
    if filter.running.get() > 0 {
        filter.destroyed.set(true);
        return;
    }
    // SAFETY: made by `Box::into_raw`, no hook of it running, and Envoy destroys it once.
    unsafe { Box::from_raw(module as *mut Filter) }.drop_held();
}

/// The module's filter behind `module`, when there is one.
///
/// # Safety
/// `module` is null or a filter `on_http_filter_new` returned that Envoy has not destroyed.
pub unsafe fn filter_of<'a>(module: *const c_void) -> Option<&'a Filter> {
    // SAFETY: the caller's contract; only shared references are ever made.
    unsafe { (module as *const Filter).as_ref() }
}

/// Hands the stream behind `module` the answer to a call the root driver sent for it.
///
/// # Safety
/// As [`guarded`].
pub unsafe fn deliver(envoy: EnvoyFilter, module: *const c_void, answer: Answer) {
    type Run = fn(&mut Stream, &mut NativeHost<'_>) -> i32;
    // SAFETY: the caller's contract.
    unsafe {
        guarded::<Run>(
            envoy.0,
            module,
            AfterPanic::Reply(CONTINUE),
            Work::Delivered(answer),
        );
    }
}

/// A callback's verdict as the status Envoy takes.
pub fn verdict(verdict: Verdict) -> i32 {
    match verdict {
        Verdict::Continue => CONTINUE,
        Verdict::Pause => STOP,
    }
}

/// Runs `work` on the stream's driver behind the panic barrier, then performs what the
/// driver deferred and hands over the answers that came in meanwhile. A
/// panic answers the stream 503 and holds it (the reply is its answer now), or, once the
/// stream is over, is only logged.
///
/// # Safety
/// `module` is a filter `on_http_filter_new` returned and Envoy has not destroyed;
/// `envoy` is its Envoy filter.
pub unsafe fn guarded<F>(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    on_panic: AfterPanic,
    work: Work<F>,
) -> i32
where
    F: FnOnce(&mut Stream, &mut NativeHost<'_>) -> i32,
{
    if module.is_null() {
        // The stream has no driver (making it panicked). Envoy 1.40 answers such a stream
        // 500 itself; should an Envoy run its hooks anyway, fail closed rather than forward
        // the request unguarded.
        return match on_panic {
            AfterPanic::Reply(status) => {
                fail_closed(None, EnvoyFilter(envoy));
                status
            }
            AfterPanic::LogOnly => CONTINUE,
        };
    }
    // SAFETY: the caller's contract; only shared references are ever made.
    let filter = unsafe { &*(module as *const Filter) };
    filter.running.set(filter.running.get() + 1);
    let status = filter
        .slot
        .hold(|| held(filter, EnvoyFilter(envoy), on_panic, work));
    let running = filter.running.get().saturating_sub(1);
    filter.running.set(running);
    if running == 0 && filter.gone() {
        // SAFETY: Envoy destroyed it inside this hook (`destroy`), which left it to us: made
        // by `Box::into_raw`, and nothing refers to it past this point.
        unsafe { Box::from_raw(module as *mut Filter) }.drop_held();
    }
    status
}

/// [`guarded`], holding the stream's slot. A stream of a worker whose root driver panicked
/// fails closed, as a stream of a dead Wasm VM does.
fn held<F>(filter: &Filter, envoy: EnvoyFilter, on_panic: AfterPanic, work: Work<F>) -> i32
where
    F: FnOnce(&mut Stream, &mut NativeHost<'_>) -> i32,
{
    if filter.failed.get() || filter.gone() {
        return CONTINUE;
    }
    if filter.slot.failed() {
        return match on_panic {
            AfterPanic::Reply(_) => panicked(filter, envoy, on_panic),
            AfterPanic::LogOnly => CONTINUE,
        };
    }
    if filter.stream.try_borrow_mut().is_err() {
        // Called back from inside this stream's running hook.
        match work {
            Work::Answer(answered, answer) => {
                filter
                    .early
                    .borrow_mut()
                    .push_back(Late::Answer(answered, answer));
            }
            Work::Delivered(answer) => {
                filter.early.borrow_mut().push_back(Late::Delivered(answer));
            }
            Work::Callback(_) => log(
                Level::Warn,
                "a hook of a stream ran inside another of its hooks: passed through",
            ),
        }
        return CONTINUE;
    }
    let status = match work {
        Work::Callback(run) => drive(filter, envoy, None, run),
        Work::Answer(answered, answer) => late(filter, envoy, Late::Answer(answered, answer)),
        Work::Delivered(answer) => late(filter, envoy, Late::Delivered(answer)),
    };
    let status = status.unwrap_or_else(|()| panicked(filter, envoy, on_panic));
    loop {
        let next = filter.early.borrow_mut().pop_front();
        let Some(next) = next else {
            break;
        };
        if filter.failed.get() || filter.gone() {
            continue;
        }
        if late(filter, envoy, next).is_err() {
            panicked(filter, envoy, on_panic);
        }
    }
    status
}

/// One answer to the stream's driver.
fn late(filter: &Filter, envoy: EnvoyFilter, late: Late) -> Result<i32, ()> {
    match late {
        Late::Answer(answered, answer) => drive(filter, envoy, Some(&answer), |stream, host| {
            stream.on_call_answer(answered, host);
            CONTINUE
        }),
        Late::Delivered(answer) => drive(filter, envoy, None, |stream, host| {
            stream.on_delivered(answer, host);
            CONTINUE
        }),
    }
}

/// What a hook hands the stream's driver.
pub enum Work<F> {
    /// A callback that returns a status.
    Callback(F),
    /// The answer to one of the stream's callouts.
    Answer(CalloutAnswered, CallAnswer),
    /// The answer to a call the worker's root driver sent for the stream.
    Delivered(Answer),
}

/// A callback's work (a function, so the closure's argument types are inferred).
pub fn callback<F>(run: F) -> Work<F>
where
    F: FnOnce(&mut Stream, &mut NativeHost<'_>) -> i32,
{
    Work::Callback(run)
}

/// One driver call: `run` with the stream borrowed, then, with the borrow released, what it
/// deferred. `Err` when it panicked.
fn drive(
    filter: &Filter,
    envoy: EnvoyFilter,
    answer: Option<&CallAnswer>,
    run: impl FnOnce(&mut Stream, &mut NativeHost<'_>) -> i32,
) -> Result<i32, ()> {
    let ran = catch_unwind(AssertUnwindSafe(|| {
        let mut stream = filter.stream.borrow_mut();
        let host = NativeHost::stream(&filter.plugin, envoy, &filter.slot, filter.id);
        let mut host = match answer {
            Some(answer) => host.answering(answer),
            None => host,
        };
        let status = run(&mut stream, &mut host);
        (status, host.into_deferred())
    }));
    let (status, deferred) = ran.map_err(|_| ())?;
    for effect in deferred {
        if filter.gone() {
            break;
        }
        effect.perform(envoy);
    }
    Ok(status)
}

/// A driver call panicked: the stream is the module's no more.
fn panicked(filter: &Filter, envoy: EnvoyFilter, on_panic: AfterPanic) -> i32 {
    filter.failed.set(true);
    match on_panic {
        AfterPanic::Reply(status) if !filter.gone() => {
            fail_closed(Some(&filter.plugin), envoy);
            status
        }
        AfterPanic::Reply(_) | AfterPanic::LogOnly => {
            abi_log_only("keyflight: panic in the native module after its stream ended");
            CONTINUE
        }
    }
}

/// What a hook still can do for its stream after a panic.
#[derive(Debug, Clone, Copy)]
pub enum AfterPanic {
    /// Answer the stream 503 and return this status to Envoy.
    Reply(i32),
    /// The stream is over (no reply can go out): log only.
    LogOnly,
}

/// The stream's answer after a panic: fail closed, as the Wasm VM's failure does
/// (`FAIL_CLOSED`), and counted as the outcome it is (under its configuration's metrics,
/// when the stream has one).
fn fail_closed(plugin: Option<&Plugin>, envoy: EnvoyFilter) {
    let answered = catch_unwind(AssertUnwindSafe(|| {
        log(
            Level::Critical,
            "panic in the native module: this request is answered 503 journal_unavailable",
        );
        if let Some(plugin) = plugin {
            plugin.count(envoy, Metric::Outcome(Outcome::JournalUnavailable));
        }
        let reply = problem_reply(
            ProblemCode::JournalUnavailable,
            503,
            "the keyflight module failed on this request; it was not forwarded",
            None,
        );
        let headers: Vec<(&str, &str)> = reply
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        envoy.send_response(reply.status, &headers, &reply.body, "keyflight_panic");
    }));
    if answered.is_err() {
        abi_log_only("panic while answering a panicked request");
    }
}

/// A log line that cannot panic itself (no formatting).
pub fn abi_log_only(message: &str) {
    let _ = catch_unwind(|| crate::abi::log(Level::Critical, message));
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use keyflight_filter::drive::worker::Root;

    use super::*;
    use crate::hooks::envoy_dynamic_module_on_http_filter_destroy;

    #[test]
    fn a_filter_envoy_destroys_inside_its_own_hook_lives_until_the_hook_returns() {
        let plugin = Arc::new(Plugin::detached());
        let slot = Arc::new(Slot::new(Root::default()));
        let stream = slot.stream(1).expect("a stream");
        let filter = Filter::new(Arc::clone(&plugin), slot, 1, stream);
        let module = Box::into_raw(Box::new(filter)) as *const c_void;
        let alive = Arc::strong_count(&plugin);
        let during = Cell::new(0);
        // A local reply or a resume can end the stream inside the hook that performs it,
        // and Envoy then destroys the stream's filters before that call returns.
        let status = unsafe {
            guarded(
                std::ptr::null_mut(),
                module,
                AfterPanic::LogOnly,
                callback(|_, _| {
                    envoy_dynamic_module_on_http_filter_destroy(module);
                    during.set(Arc::strong_count(&plugin));
                    CONTINUE
                }),
            )
        };
        assert_eq!(status, CONTINUE);
        assert_eq!(during.get(), alive, "not dropped while its hook runs");
        assert_eq!(
            Arc::strong_count(&plugin),
            alive - 1,
            "dropped once it returned"
        );
    }
}
