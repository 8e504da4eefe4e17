//! Requests written byte for byte, for request targets an HTTP client library would
//! rewrite before sending: reqwest (like every WHATWG-style URL parser) resolves
//! `/x/../payments` to `/payments`, so it cannot show what Envoy and the filter do with the
//! raw form an attacker or a `curl --path-as-is` sends.
//!
//! One HTTP/1.1 request per connection (`connection: close`); the answer is read to the
//! end and parsed into a [`Reply`] (a `content-length` or chunked body).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::reply::Reply;

/// Sends `method target` to `127.0.0.1:port` with `headers` (a `host` among them, or
/// `127.0.0.1` is used) and `body`, exactly as given.
pub async fn send(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut request = format!("{method} {target} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str("host: 127.0.0.1\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);

    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    stream
        .write_all(&bytes)
        .await
        .unwrap_or_else(|e| panic!("write the request: {e}"));
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .unwrap_or_else(|e| panic!("read the answer: {e}"));
    parse(&answer)
}

/// Parses one HTTP/1.1 answer.
fn parse(answer: &[u8]) -> Reply {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(answer)));
    let head = String::from_utf8_lossy(&answer[..split]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let raw = &answer[split + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(raw) } else { raw.to_vec() };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let Some(end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return body;
        };
        let size_text = String::from_utf8_lossy(&raw[..end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .unwrap_or_else(|e| panic!("bad chunk size {size_text:?}: {e}"));
        if size == 0 {
            return body;
        }
        let start = end + 2;
        body.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
}
