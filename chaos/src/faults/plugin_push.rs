//! The plugin-push fault: what an Istio push does to a running proxy. Envoy 0 of the chaos
//! stack takes its listener from an LDS file (`StackOptions::reconfigurable`); a push
//! writes a new plugin configuration there, Envoy builds a new listener with a new plugin
//! instance, and the old one drains while its claims finish and its outbox delivers
//! (`docs/record-outbox.md#reconfiguration-and-restarts`).
//!
//! The change is harmless to the guarantee on purpose: it switches Envoy 0's edge cache
//! off, and the next push on again, so the run also spends part of its time with one edge
//! that replays from its cache and one that does not.

use keyflight_testkit::stack::Stack;
use serde_json::{Value, json};

/// Pushes Envoy 0 a plugin configuration with its edge cache toggled; returns once Envoy
/// accepted it.
pub async fn push(stack: &mut Stack) {
    stack.reconfigure(toggle_edge_cache).await;
}

/// Switches the edge cache off (`max_bytes: 0`) when it is on, and back to the
/// configuration's default when it is off.
fn toggle_edge_cache(plugin: &mut Value) {
    let off = plugin["edge_cache"]["max_bytes"].as_u64() == Some(0);
    match (off, plugin.as_object_mut()) {
        (true, Some(plugin)) => {
            plugin.remove("edge_cache");
        }
        (false, Some(plugin)) => {
            plugin.insert("edge_cache".into(), json!({"max_bytes": 0}));
        }
        (_, None) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_switches_the_edge_cache_off_and_the_next_one_on_again() {
        let mut plugin = json!({"policies": []});
        toggle_edge_cache(&mut plugin);
        assert_eq!(plugin["edge_cache"]["max_bytes"], 0);
        toggle_edge_cache(&mut plugin);
        assert_eq!(plugin, json!({"policies": []}));
    }
}
