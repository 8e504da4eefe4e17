//! The connection pool (`docs/configuration.md#the-connection-pool`): the most recently
//! used connection first, and a connection idle past `pool_idle_timeout` closed.

use std::time::Duration;

use futures_util::future::join_all;
use keyflight_lease_store::store::{BatchSettings, Store, StoreSettings};
use uuid::Uuid;

use crate::support::*;

/// The store's connections, by the `application_name` its URL gives them.
async fn connections(db: &tokio_postgres::Client, app: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
        &[&app],
    )
    .await
    .unwrap()
    .get(0)
}

/// A burst opens several connections; one caller calling steadily afterwards keeps reusing
/// one of them, so the others go idle and are closed. (Handing out connections in turn
/// would keep every one of them busy, and none would close.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_a_burst_opened_close_once_steady_calls_stop_needing_them() {
    let app = format!("pool-test-{}", Uuid::now_v7().simple());
    let url = format!("{}?application_name={app}", cluster().url());
    let store = Store::connect(&StoreSettings {
        pool_idle_timeout: Duration::from_millis(300),
        batch: BatchSettings::OFF,
        ..settings(&url)
    })
    .await
    .unwrap();
    let db = raw_client(&cluster().url()).await;

    join_all((0..8).map(|caller| {
        let store = store.clone();
        async move {
            for call in 0..10 {
                let request = claim_req(fingerprint(&format!("burst {caller} {call}")), 10_000);
                store.claim(&fresh_scope(), &request).await.unwrap();
            }
        }
    }))
    .await;
    let opened = connections(&db, &app).await;
    assert!(
        opened >= 3,
        "the burst opened several connections ({opened})"
    );

    keyflight_testkit::process::eventually(
        "the connections steady calls do not need are closed",
        Duration::from_secs(20),
        || async {
            let request = claim_req(fingerprint("steady"), 10_000);
            store.claim(&fresh_scope(), &request).await.unwrap();
            connections(&db, &app).await <= 2
        },
    )
    .await;
}
