//! Requests written byte for byte, for request targets an HTTP client library would
//! rewrite before sending: reqwest (like every WHATWG-style URL parser) resolves
//! `/x/../payments` to `/payments`, so it cannot show what Envoy and the filter do with the
//! raw form an attacker or a `curl --path-as-is` sends.
//!
//! One HTTP/1.1 request per connection (`connection: close`); the answer is read to the
//! end and parsed into a [`Reply`] (a `content-length` or chunked body). [`send_h2`] writes
//! one HTTP/2 request (h2c, prior knowledge) the same way, for a `:path` that is not UTF-8:
//! HTTP/1.1 cannot carry one past Envoy (`docs/envoy-facts.md#request-targets`).

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
    let headers: Vec<(&[u8], &[u8])> = headers
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect();
    send_bytes(port, method.as_bytes(), target.as_bytes(), &headers, body).await
}

/// [`send`] with every part as bytes: a method, target or header that is not UTF-8.
pub async fn send_bytes(
    port: u16,
    method: &[u8],
    target: &[u8],
    headers: &[(&[u8], &[u8])],
    body: &[u8],
) -> Reply {
    let bytes = request_bytes(method, target, headers, body);
    parse(&exchange(port, &bytes).await)
}

/// The request as written: the head (with `host` if none is given, `content-length` and
/// `connection: close`), then the body.
fn request_bytes(method: &[u8], target: &[u8], headers: &[(&[u8], &[u8])], body: &[u8]) -> Vec<u8> {
    let mut bytes = [method, b" ", target, b" HTTP/1.1\r\n"].concat();
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"host")) {
        bytes.extend_from_slice(b"host: 127.0.0.1\r\n");
    }
    for (name, value) in headers {
        bytes.extend_from_slice(&[*name, b": ", *value, b"\r\n"].concat());
    }
    bytes.extend_from_slice(
        format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    bytes.extend_from_slice(body);
    bytes
}

/// A POST written but for its body's last byte: the proxy holds it, waiting for the rest,
/// until [`Held::finish`] writes it. Finishing many at once while the proxy is frozen lets
/// it find them all in one event-loop turn.
pub struct Held {
    stream: TcpStream,
    last: u8,
}

impl Held {
    /// Writes a POST of `body` (at least one byte) to `127.0.0.1:port`, all but the last byte.
    pub async fn post(port: u16, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Held {
        let headers: Vec<(&[u8], &[u8])> = headers
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        let mut bytes = request_bytes(b"POST", target.as_bytes(), &headers, body);
        let last = bytes.pop().expect("a held request has a body");
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        stream
            .write_all(&bytes)
            .await
            .unwrap_or_else(|e| panic!("write the request: {e}"));
        Held { stream, last }
    }

    /// Writes the last byte.
    pub async fn finish(&mut self) {
        self.stream
            .write_all(&[self.last])
            .await
            .unwrap_or_else(|e| panic!("write the last byte: {e}"));
    }

    /// Reads the answer to the end.
    pub async fn answer(mut self) -> Reply {
        let mut answer = Vec::new();
        let _ = self.stream.read_to_end(&mut answer).await;
        parse(&answer)
    }
}

/// Writes `bytes` to `127.0.0.1:port` and reads until the peer closes.
async fn exchange(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    stream
        .write_all(bytes)
        .await
        .unwrap_or_else(|e| panic!("write the request: {e}"));
    let mut answer = Vec::new();
    // A reset connection ends the answer like a close does.
    let _ = stream.read_to_end(&mut answer).await;
    answer
}

/// What came back on an HTTP/2 stream sent by [`send_h2`]: the answer's body (the
/// headers stay HPACK-encoded and unread), or how the stream or connection ended.
#[derive(Debug, Default)]
pub struct H2Answer {
    /// Whether a HEADERS frame answered the stream.
    pub answered: bool,
    /// The DATA frames' payloads, concatenated.
    pub body: Vec<u8>,
    /// The error code of a RST_STREAM or GOAWAY, if one came.
    pub refused: Option<u32>,
}

/// One HTTP/2 request over cleartext with prior knowledge (h2c), every header written
/// byte for byte as an HPACK literal (no Huffman, no indexing), so a `:path` that is not
/// UTF-8 reaches Envoy as sent — no client library would send one. `headers` are the
/// pseudo-headers first, then the rest; the request has no body. Reads until Envoy ends
/// the stream, closes the connection, or one second of silence after an answer.
pub async fn send_h2(port: u16, headers: &[(&[u8], &[u8])]) -> H2Answer {
    let mut block = Vec::new();
    for (name, value) in headers {
        block.push(0x00);
        hpack_string(&mut block, name);
        hpack_string(&mut block, value);
    }
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend(h2_frame(0x4, 0, 0, &[]));
    // HEADERS with END_STREAM | END_HEADERS on stream 1.
    bytes.extend(h2_frame(0x1, 0x5, 1, &block));
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    stream
        .write_all(&bytes)
        .await
        .unwrap_or_else(|e| panic!("write the request: {e}"));
    let mut answer = H2Answer::default();
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut buf));
        let n = match read.await {
            Ok(Ok(n)) if n > 0 => n,
            _ => break,
        };
        raw.extend_from_slice(&buf[..n]);
        let mut ended = false;
        while raw.len() >= 9 {
            let len = usize::from(raw[0]) << 16 | usize::from(raw[1]) << 8 | usize::from(raw[2]);
            if raw.len() < 9 + len {
                break;
            }
            let (kind, flags) = (raw[3], raw[4]);
            let stream_id = u32::from_be_bytes([raw[5], raw[6], raw[7], raw[8]]) & 0x7fff_ffff;
            let payload = raw[9..9 + len].to_vec();
            raw.drain(..9 + len);
            match (kind, stream_id) {
                (0x0, 1) => {
                    answer.body.extend_from_slice(&payload);
                    ended |= flags & 0x1 != 0;
                }
                (0x1, 1) => {
                    answer.answered = true;
                    ended |= flags & 0x1 != 0;
                }
                (0x3, 1) => {
                    answer.refused = payload
                        .get(..4)
                        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                    ended = true;
                }
                (0x7, _) => {
                    answer.refused = payload
                        .get(4..8)
                        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                    ended = true;
                }
                _ => {}
            }
        }
        if ended {
            break;
        }
    }
    answer
}

/// An HPACK string literal, not Huffman-coded (RFC 7541 §5.2), with its 7-bit prefix
/// length (§5.1).
fn hpack_string(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut len = bytes.len();
    if len < 127 {
        out.push(len as u8);
    } else {
        out.push(127);
        len -= 127;
        while len >= 128 {
            out.push((len % 128) as u8 | 0x80);
            len /= 128;
        }
        out.push(len as u8);
    }
    out.extend_from_slice(bytes);
}

fn h2_frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len().to_be_bytes();
    let mut frame = len[len.len() - 3..].to_vec();
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&stream_id.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
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
