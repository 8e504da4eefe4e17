//! The lease-store token reaches the filter through the VM's environment
//! (`docs/configuration.md#caller-identity`): the launcher, like a Secret would, sets it
//! in Envoy's environment and the shipped config passes it to the VM by name, so claims
//! carry it while Envoy's `config_dump` (readable from every container of a pod) never
//! shows it.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn the_store_token_reaches_the_filter_but_not_config_dump() {
    let stack = Stack::start(StackOptions::default()).await;
    let token = stack.parts().options().filter_token();
    assert!(
        stack.parts().options().plugin["lease_store"]
            .get("token")
            .is_none(),
        "the shipped plugin configuration holds no token"
    );

    let body = json!({"amount": 5});
    let first = stack
        .post("/payments")
        .key("env-token")
        .json(&body)
        .send()
        .await;
    assert_eq!(first.status, 201, "{first}");
    let retry = stack
        .post("/payments")
        .key("env-token")
        .json(&body)
        .send()
        .await;
    retry.assert_replayed();
    // The store refuses a claim without its token, so both answers above needed it.
    assert_eq!(stack.store_metrics().await.event("claimed"), 1);

    let admin = format!(
        "http://{}:{}/config_dump",
        stack.parts().envoy_ip(0),
        stack.parts().envoy_ports(0).admin
    );
    let dump = reqwest::get(&admin).await.unwrap().text().await.unwrap();
    assert!(
        dump.contains("KEYFLIGHT_STORE_TOKEN"),
        "the VM's environment is configured by name"
    );
    assert!(!dump.contains(&token), "config_dump shows the token");
    let log = stack.envoy_log();
    assert!(
        !log.contains("lease_store.token"),
        "no deprecation warning: {log}"
    );
}
