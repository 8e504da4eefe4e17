//! The configuration's callbacks: its metrics, its callouts and its scheduler, on the main
//! thread (`docs/envoy-facts.md#dynamic-modules`).
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr;

use super::{
    ConfigEnvoyPtr, METRICS_SUCCESS, ModuleBuffer, adjust, callout,
    envoy_dynamic_module_callback_http_filter_config_decrement_gauge,
    envoy_dynamic_module_callback_http_filter_config_define_counter,
    envoy_dynamic_module_callback_http_filter_config_define_gauge,
    envoy_dynamic_module_callback_http_filter_config_http_callout,
    envoy_dynamic_module_callback_http_filter_config_increment_counter,
    envoy_dynamic_module_callback_http_filter_config_increment_gauge,
    envoy_dynamic_module_callback_http_filter_config_scheduler_commit,
    envoy_dynamic_module_callback_http_filter_config_scheduler_delete,
    envoy_dynamic_module_callback_http_filter_config_scheduler_new,
};

/// Envoy's filter configuration, valid from `on_http_filter_config_new` to
/// `on_http_filter_config_destroy`. Metrics are defined only during the first (Envoy freezes
/// stat creation after it); the other calls are made on the main thread, in the
/// configuration's own hooks (`docs/envoy-facts.md#dynamic-modules`).
#[derive(Debug, Clone, Copy)]
pub struct EnvoyConfig(pub ConfigEnvoyPtr);

// SAFETY: the pointer is only dereferenced by Envoy, in calls this module makes on the main
// thread while the configuration lives (see the type's documentation); worker threads only
// carry it.
unsafe impl Send for EnvoyConfig {}
// SAFETY: as above.
unsafe impl Sync for EnvoyConfig {}

impl EnvoyConfig {
    /// Defines a counter (`gauge: false`) or gauge named `name`; its id, `None` when refused.
    pub fn define(&self, name: &str, gauge: bool) -> Option<usize> {
        let mut id = 0;
        let name = ModuleBuffer::of(name.as_bytes());
        // SAFETY: `self.0` is the configuration Envoy handed the hook running now; `id`
        // outlives the call.
        let result = unsafe {
            if gauge {
                envoy_dynamic_module_callback_http_filter_config_define_gauge(
                    self.0,
                    name,
                    ptr::null(),
                    0,
                    &mut id,
                )
            } else {
                envoy_dynamic_module_callback_http_filter_config_define_counter(
                    self.0,
                    name,
                    ptr::null(),
                    0,
                    &mut id,
                )
            }
        };
        (result == METRICS_SUCCESS).then_some(id)
    }

    /// Adds `value` to counter `id`, from the main thread.
    pub fn increment_counter(&self, id: usize, value: u64) {
        // SAFETY: a live configuration, on the main thread; no labels.
        unsafe {
            envoy_dynamic_module_callback_http_filter_config_increment_counter(
                self.0,
                id,
                ptr::null(),
                0,
                value,
            );
        }
    }

    /// Adds `delta` to gauge `id`, from the main thread.
    pub fn adjust_gauge(&self, id: usize, delta: i64) {
        // SAFETY: a live configuration, on the main thread.
        unsafe {
            adjust(
                self.0,
                envoy_dynamic_module_callback_http_filter_config_increment_gauge,
                envoy_dynamic_module_callback_http_filter_config_decrement_gauge,
                id,
                delta,
            );
        }
    }

    /// Sends an HTTP callout to `cluster` from the main thread; its id, or Envoy's result
    /// when refused. The answer comes to `on_http_filter_config_http_callout_done`, possibly
    /// before this returns.
    pub fn http_callout(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, i32> {
        let call = envoy_dynamic_module_callback_http_filter_config_http_callout;
        // SAFETY: a live configuration, on the main thread.
        unsafe { callout(self.0, call, cluster, headers, body, timeout_ms) }
    }

    /// A scheduler that runs `on_http_filter_config_scheduled` on the main thread; `None`
    /// when Envoy gave none. Made during `on_http_filter_config_new`.
    pub fn scheduler(&self) -> Option<ConfigScheduler> {
        // SAFETY: a live configuration, in its creation hook.
        let scheduler =
            unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_new(self.0) };
        (!scheduler.is_null()).then_some(ConfigScheduler(scheduler))
    }
}

/// Envoy's scheduler of a configuration: `commit` may be called from any thread (Envoy
/// posts the event to its main thread, and drops it once the configuration is gone).
#[derive(Debug, Clone, Copy)]
pub struct ConfigScheduler(*mut c_void);

// SAFETY: Envoy's scheduler is made to be committed from any thread; it is deleted once,
// after the only thread that commits has been joined (`config_hooks.rs`).
unsafe impl Send for ConfigScheduler {}

impl ConfigScheduler {
    /// Posts event `id` to the main thread.
    pub fn commit(&self, id: u64) {
        // SAFETY: a scheduler not yet deleted (the type's contract).
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_commit(self.0, id) }
    }

    /// Deletes the scheduler: no commit may follow.
    pub fn delete(self) {
        // SAFETY: made by `scheduler_new`, deleted once.
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_delete(self.0) }
    }
}
