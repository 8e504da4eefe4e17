//! Link faults are real: a partition stops traffic between a namespace and the host side,
//! healing restores it, lost answers let requests through one way only, and a slow link
//! delays an answer past a call timeout. Needs root (as CI runs): without it the lab
//! refuses to start and the test fails saying so.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use keyflight_testkit::net::{LinkFault, NetLab, Peer};

/// Bytes each answer of the host-side server carries.
const ANSWER_BYTES: usize = 6000;

/// Serves one fixed HTTP answer per connection on `ip`, forever (a detached thread: the
/// test process ends with it).
fn serve(ip: Ipv4Addr) -> u16 {
    let listener = TcpListener::bind((ip, 0)).expect("bind on the lab's host side");
    let port = listener.local_addr().expect("local addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0_u8; 1024];
            let _ = stream.read(&mut request);
            let body = "x".repeat(ANSWER_BYTES);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// `curl` from inside namespace 0 with a timeout; `Some(elapsed)` when it got the answer.
fn fetch(lab: &NetLab, url: &str, timeout: Duration) -> Option<Duration> {
    let mut curl = Command::new("curl");
    curl.args(["-sf", "-o", "/dev/null", "--max-time"])
        .arg(format!("{:.1}", timeout.as_secs_f64()))
        .arg(url);
    let started = Instant::now();
    let status = lab
        .command_in(0, curl)
        .status()
        .expect("run curl in the namespace");
    status.success().then(|| started.elapsed())
}

fn lab() -> NetLab {
    let mut lab = NetLab::create().unwrap_or_else(|e| panic!("{e}"));
    lab.add_host("t0").unwrap_or_else(|e| panic!("{e}"));
    lab
}

#[test]
fn a_partition_stops_traffic_and_healing_restores_it() {
    let lab = lab();
    let port = serve(lab.host_side_ip());
    let url = format!("http://{}:{port}/", lab.host_side_ip());
    let timeout = Duration::from_secs(2);
    assert!(
        fetch(&lab, &url, timeout).is_some(),
        "reachable before the cut"
    );

    let cut = lab
        .apply(
            0,
            &LinkFault::Partition {
                peers: vec![Peer::service(lab.host_side_ip(), port)],
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fetch(&lab, &url, timeout), None, "nothing passes the cut");

    lab.heal(cut).unwrap_or_else(|e| panic!("{e}"));
    assert!(fetch(&lab, &url, timeout).is_some(), "healed");
}

#[test]
fn lost_answers_let_requests_through_one_way_only() {
    let lab = lab();
    let receiver = UdpSocket::bind((lab.host_side_ip(), 0)).expect("bind udp");
    receiver
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let udp_port = receiver.local_addr().expect("addr").port();
    let tcp_port = serve(lab.host_side_ip());

    let cut = lab
        .apply(
            0,
            &LinkFault::AnswersLost {
                peers: vec![Peer::host(lab.host_side_ip())],
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    // A datagram from the namespace still arrives…
    let mut send = Command::new("bash");
    send.arg("-c").arg(format!(
        "echo ping > /dev/udp/{}/{udp_port}",
        lab.host_side_ip()
    ));
    assert!(lab.command_in(0, send).status().expect("bash").success());
    let mut datagram = [0_u8; 16];
    let (len, _) = receiver
        .recv_from(&mut datagram)
        .expect("the datagram from the namespace arrived");
    assert_eq!(&datagram[..len], b"ping\n");
    // …while nothing comes back: not even a TCP handshake's answer.
    let url = format!("http://{}:{tcp_port}/", lab.host_side_ip());
    assert_eq!(fetch(&lab, &url, Duration::from_secs(2)), None);

    lab.heal(cut).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        fetch(&lab, &url, Duration::from_secs(2)).is_some(),
        "healed"
    );
}

#[test]
fn a_slow_link_delays_an_answer_past_a_call_timeout() {
    let lab = lab();
    let port = serve(lab.host_side_ip());
    let url = format!("http://{}:{port}/", lab.host_side_ip());
    // Unshaped, the answer comes back (how fast depends on the machine's load: no bound).
    let fast = fetch(&lab, &url, Duration::from_secs(5)).expect("reachable");

    let cut = lab
        .apply(
            0,
            &LinkFault::Slow {
                peers: vec![Peer::host(lab.host_side_ip())],
                bytes_per_s: 1000,
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    // The rate bounds it from below: the answer cannot arrive sooner than its bytes pass.
    let slow = fetch(&lab, &url, Duration::from_secs(20)).expect("slow, not cut");
    assert!(
        slow > Duration::from_millis(1500) && slow > fast,
        "{ANSWER_BYTES} bytes at 1000 B/s took only {slow:?} ({fast:?} unshaped)"
    );

    lab.heal(cut).unwrap_or_else(|e| panic!("{e}"));
    fetch(&lab, &url, Duration::from_secs(5)).expect("healed");
}

#[test]
fn a_lab_removes_its_namespaces_and_bridge_when_dropped() {
    let lab = lab();
    let netns = lab.host(0).netns.clone();
    drop(lab);
    let listed = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        !listed
            .lines()
            .any(|line| line.starts_with(&format!("{netns} ")) || line == netns),
        "{netns} left behind: {listed}"
    );
}
