//! The hooks of a filter configuration, on Envoy's main thread: made (checked, its metrics
//! defined, its ticks started), destroyed, ticked, and answered for its workers' root
//! drivers (`filter-native/README.md#the-outbox-and-renewals`).
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use keyflight_filter::drive::host::CalloutAnswered;
use keyflight_filter::drive::worker::Root;

use crate::abi::{ConfigEnvoyPtr, ConfigScheduler, EnvoyBuffer, EnvoyConfig, HttpHeader, Level};
use crate::barrier::abi_log_only;
use crate::hooks::answer_parts;
use crate::host::{CallAnswer, NativeHost, log};
use crate::plugin::Plugin;
use crate::ticker::Ticker;
use crate::unreadable::unreadable_source;

static NEXT_PLUGIN: AtomicU64 = AtomicU64::new(1);

/// What Envoy holds for a configuration: the plugin, and the ticker of its workers' root
/// drivers with the scheduler it commits to.
pub struct Configured {
    /// The plugin.
    pub plugin: Arc<Plugin>,
    ticks: Option<(Ticker, ConfigScheduler)>,
}

impl Drop for Configured {
    /// The ticker's thread is joined before its scheduler is deleted: no commit follows.
    /// The workers' root drivers are retired (`Plugin::retire`).
    fn drop(&mut self) {
        if let Some((ticker, scheduler)) = self.ticks.take() {
            drop(ticker);
            scheduler.delete();
        }
        self.plugin.retire();
    }
}

/// Every tick period, the main thread runs `on_http_filter_config_scheduled`.
fn start_ticks(envoy: EnvoyConfig, plugin: &Plugin) -> Option<(Ticker, ConfigScheduler)> {
    let period = keyflight_filter::parse_plugin_config(plugin.json_bytes())
        .ok()?
        .tick_period();
    let scheduler = envoy.scheduler()?;
    match Ticker::start(period, move || scheduler.commit(0)) {
        Some(ticker) => Some((ticker, scheduler)),
        None => {
            scheduler.delete();
            None
        }
    }
}

/// Parses the plugin JSON (the filter's `filter_config`) as a worker will, refusing an
/// invalid one, defines the metrics (only possible now), and starts the ticks. A
/// configuration whose workers could not be ticked is refused: its outbox and renewals
/// would not run.
///
/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    envoy: ConfigEnvoyPtr,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    let made = catch_unwind(AssertUnwindSafe(|| {
        let id = NEXT_PLUGIN.fetch_add(1, Ordering::Relaxed);
        let plugin = Plugin::define(id, config.bytes().to_vec(), EnvoyConfig(envoy));
        let mut check = Root::default();
        if !check.configure(&mut NativeHost::configuring(&plugin)) {
            return std::ptr::null();
        }
        let parsed = keyflight_filter::parse_plugin_config(plugin.json_bytes());
        if let Some(refused) = parsed.ok().as_ref().and_then(unreadable_source) {
            log(
                Level::Critical,
                &format!("keyflight: invalid plugin configuration: {refused}"),
            );
            return std::ptr::null();
        }
        let Some(ticks) = start_ticks(EnvoyConfig(envoy), &plugin) else {
            log(
                Level::Critical,
                "could not start the tick of the record outbox and the lease renewals: \
                 configuration refused",
            );
            return std::ptr::null();
        };
        let configured = Configured {
            plugin: Arc::new(plugin),
            ticks: Some(ticks),
        };
        Box::into_raw(Box::new(configured)) as *const c_void
    }));
    made.unwrap_or_else(|_| {
        abi_log_only("keyflight: panic while reading the plugin configuration");
        std::ptr::null()
    })
}

/// # Safety
/// A pointer `on_http_filter_config_new` returned, once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    if !config.is_null() {
        // SAFETY: made by `Box::into_raw` in `on_http_filter_config_new`; Envoy destroys once.
        let configured = unsafe { Box::from_raw(config as *mut Configured) };
        if catch_unwind(AssertUnwindSafe(|| drop(configured))).is_err() {
            abi_log_only("keyflight: panic while dropping a configuration");
        }
    }
}

/// The tick (`ticker.rs`), on the main thread: every worker's root driver renews its
/// leases, delivers its outbox and asks for the operator epoch.
///
/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _envoy: ConfigEnvoyPtr,
    config: *const c_void,
    _event: u64,
) {
    if config.is_null() {
        return;
    }
    // SAFETY: a live pointer `on_http_filter_config_new` returned.
    let configured = unsafe { &*(config as *const Configured) };
    if catch_unwind(AssertUnwindSafe(|| configured.plugin.tick())).is_err() {
        abi_log_only("keyflight: panic while ticking the root drivers");
    }
}

/// A callout a worker's root driver sent answered, on the main thread; a failed one
/// arrives with no headers.
///
/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _envoy: ConfigEnvoyPtr,
    config: *const c_void,
    callout_id: u64,
    result: i32,
    headers: *const HttpHeader,
    headers_size: usize,
    body_chunks: *const EnvoyBuffer,
    body_chunks_size: usize,
) {
    if config.is_null() {
        return;
    }
    // SAFETY: a live pointer `on_http_filter_config_new` returned.
    let plugin = &unsafe { &*(config as *const Configured) }.plugin;
    // SAFETY: Envoy's arrays and their lengths, valid during this hook.
    let (headers, body) =
        unsafe { answer_parts(result, headers, headers_size, body_chunks, body_chunks_size) };
    let delivered = catch_unwind(AssertUnwindSafe(|| {
        let Ok(token) = u32::try_from(callout_id) else {
            return;
        };
        let Some(slot) = plugin.caller(callout_id) else {
            return;
        };
        let answer = CallAnswer::copy(headers, body);
        let answered = CalloutAnswered {
            token,
            num_headers: answer.headers.len(),
            body_size: answer.body.len(),
        };
        slot.answer(plugin, answered, answer);
    }));
    if delivered.is_err() {
        abi_log_only("keyflight: panic while reading a root driver's callout answer");
    }
}
