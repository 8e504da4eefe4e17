//! A `completed` claim answer with the recorded body as raw bytes after its JSON
//! (`docs/records.md#the-recorded-body-as-bytes`).
//!
//! In JSON the recorded body travels as base64: a third larger on the wire, and decoding
//! it was most of what an edge spent reading a large replay. A caller that names
//! [`MEDIA_TYPE`] in `Accept` gets a `completed` claim answer as a *frame*: the JSON
//! answer with an empty `body_b64`, one newline, then the body's bytes. Every other
//! outcome, and every caller that does not ask, gets the JSON answer as before.
//!
//! The head needs no length: serde_json writes no whitespace and escapes every control
//! character inside strings, so the first newline of a frame ends its head. The body's
//! length is the HTTP answer's.

use super::{ClaimAnswer, ClaimResponse};

/// The media type of a framed answer, as `Accept` asks for it and `Content-Type` names it.
/// The `v1` is the frame's version: another layout would be another media type.
pub const MEDIA_TYPE: &str = "application/vnd.keyflight.framed.v1";

/// Writes `answer` as a frame; gives it back, to be sent as JSON, when its outcome is
/// not `completed` (there is no body to frame).
pub fn write(answer: ClaimAnswer) -> Result<Vec<u8>, ClaimAnswer> {
    let ClaimAnswer {
        response: ClaimResponse::Completed { mut response },
        record_expires_in_ms,
        claimed_after_ms,
    } = answer
    else {
        return Err(answer);
    };
    let body = std::mem::take(&mut response.body);
    let mut head = ClaimAnswer {
        response: ClaimResponse::Completed { response },
        record_expires_in_ms,
        claimed_after_ms,
    };
    match serde_json::to_vec(&head) {
        Ok(mut frame) => {
            frame.reserve_exact(body.len() + 1);
            frame.push(b'\n');
            frame.extend_from_slice(&body);
            Ok(frame)
        }
        // Not reached (these plain structs always serialize); the JSON path reports it.
        Err(_) => {
            if let ClaimResponse::Completed { response } = &mut head.response {
                response.body = body;
            }
            Err(head)
        }
    }
}

/// A frame's JSON head and the body after it; `None` without a newline.
pub fn split(frame: &[u8]) -> Option<(&[u8], &[u8])> {
    let newline = frame.iter().position(|&b| b == b'\n')?;
    Some((frame.get(..newline)?, frame.get(newline + 1..)?))
}

/// Whether an `Accept` header value asks for frames: [`MEDIA_TYPE`] among its media
/// ranges (RFC 9110 §12.5.1; names compared case-insensitively), with no `q=0`. A
/// wildcard does not count: only an edge that reads frames names the type.
pub fn accepted(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let name = parts.next().unwrap_or_default().trim();
        name.eq_ignore_ascii_case(MEDIA_TYPE) && !parts.any(refuses)
    })
}

/// Whether a media-range parameter is `q=0` (as `0`, `0.`, `0.0`, … `0.000`).
fn refuses(parameter: &str) -> bool {
    let Some((name, value)) = parameter.split_once('=') else {
        return false;
    };
    name.trim().eq_ignore_ascii_case("q") && {
        let value = value.trim();
        let zeros = value
            .strip_prefix('0')
            .map(|rest| rest.strip_prefix('.').unwrap_or(rest));
        zeros.is_some_and(|rest| rest.len() <= 3 && rest.bytes().all(|b| b == b'0'))
    }
}

/// Whether a `Content-Type` value names a frame (parameters aside).
pub fn is_framed(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .eq_ignore_ascii_case(MEDIA_TYPE)
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::wire::StoredResponse;

    fn completed(body: &[u8]) -> ClaimAnswer {
        ClaimAnswer {
            response: ClaimResponse::Completed {
                response: StoredResponse::new(
                    201,
                    vec![("content-type".into(), "text/plain\u{1}\n".into())],
                    body,
                ),
            },
            record_expires_in_ms: Some(5),
            claimed_after_ms: None,
        }
    }

    #[test]
    fn a_frame_is_the_json_answer_without_its_body_then_the_body() {
        let body = b"line one\nline two\n\0\xff";
        let frame = write(completed(body)).unwrap();
        let (head, rest) = split(&frame).unwrap();
        assert_eq!(rest, body);
        let head: ClaimAnswer = serde_json::from_slice(head).unwrap();
        assert_eq!(head, completed(b""));
    }

    #[test]
    fn only_a_completed_answer_is_framed() {
        let conflict = ClaimAnswer {
            response: ClaimResponse::Conflict,
            record_expires_in_ms: None,
            claimed_after_ms: None,
        };
        assert_eq!(write(conflict.clone()), Err(conflict));
    }

    #[test]
    fn accept_names_the_type_without_refusing_it() {
        for yes in [
            MEDIA_TYPE,
            "application/json, application/vnd.keyflight.framed.v1",
            " Application/VND.Keyflight.Framed.V1 ;q=0.5",
            "application/vnd.keyflight.framed.v1;q=0.001, application/json",
        ] {
            assert!(accepted(yes), "{yes}");
        }
        for no in [
            "",
            "*/*",
            "application/*",
            "application/json",
            "application/vnd.keyflight.framed.v2",
            "application/vnd.keyflight.framed.v1;q=0",
            "application/vnd.keyflight.framed.v1; Q = 0.000",
            "application/vnd.keyflight.framed.v1;q=0.",
        ] {
            assert!(!accepted(no), "{no}");
        }
    }

    #[test]
    fn content_type_names_a_frame_with_or_without_parameters() {
        assert!(is_framed(MEDIA_TYPE));
        assert!(is_framed(
            "application/vnd.keyflight.framed.v1; charset=binary"
        ));
        assert!(!is_framed("application/json"));
        assert!(!is_framed("application/vnd.keyflight.framed.v10"));
    }
}
