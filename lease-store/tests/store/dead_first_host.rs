//! L10: a node that died without a trace (no RST: the machine is gone) and is listed first in
//! the multi-host URL does not keep the store from reaching the node that is up.
//!
//! tokio-postgres tries the hosts in order, each within `connect_timeout`, and the pool gives
//! a new connection `statement_timeout` in all. If each host had the whole budget, a silent
//! first host would use it up and the store would answer 503 for as long as that node stays
//! dead, although the primary answers. The dead node is emulated on loopback by a listener
//! whose accept queue is full: the kernel then drops further SYNs, as for a vanished host.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::longpoll::LongPoll;
use keyflight_lease_store::store::Store;
use keyflight_testkit::process::{eventually, free_port};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

/// A loopback port that completes no TCP handshake: its listener's accept queue is full and
/// never drained. Keep it alive for as long as the port must stay silent.
struct SilentPort {
    port: u16,
    _listener: TcpListener,
    _queued: Vec<TcpStream>,
}

async fn silent_port() -> SilentPort {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(addr).unwrap();
    let listener = socket.listen(1).unwrap();
    let mut queued = Vec::new();
    // Connect until one attempt hangs: from then on the kernel drops this port's SYNs.
    loop {
        match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await {
            Ok(stream) => queued.push(stream.unwrap()),
            Err(_elapsed) => break,
        }
        assert!(queued.len() < 64, "the accept queue never filled");
    }
    SilentPort {
        port,
        _listener: listener,
        _queued: queued,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_first_host_leaves_time_to_reach_the_next_one() {
    let silent = silent_port().await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        silent.port,
        cluster().port()
    );
    // statement_timeout 2 s (settings): the whole budget of one new connection.
    let store = Store::connect(&settings(&url)).await.unwrap();
    let started = Instant::now();
    let scope = fresh_scope();
    must_win(&store, &scope, &claim_req(fingerprint("silent"), 30_000)).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );

    // The listener, too, gets past the silent host within its connect bound.
    let (_shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(&url, shutdown_rx);
    eventually(
        "the listener connected",
        Duration::from_secs(15),
        || async { longpoll.listening() },
    )
    .await;
}
