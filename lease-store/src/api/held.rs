//! An answer's body that holds what the call was granted (its answer-budget reservation, its
//! concurrency slot) until the answer's last bytes are handed to the connection
//! (`docs/configuration.md#limits`).
//!
//! hyper takes a body's frames as fast as its write buffer has room, and drops the body
//! once it took the last one. An answer built whole is one frame: hyper would take all of
//! it at once, drop the body (and with it the grant) and keep the bytes in its buffer for as
//! long as the reader takes to read them. So the answer is handed on in copied chunks: hyper
//! asks for the next only once its buffer has room, the answer stays here (and counted)
//! until its last chunk, and what hyper still holds after that is its buffer, not the answer.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, SizeHint};

/// The most of an answer handed to the connection at a time.
const CHUNK: usize = 64 * 1024;

/// `inner`, handed on in chunks of [`CHUNK`], holding `grant` until the last one is taken.
pub struct Held<G> {
    inner: Body,
    /// What is left of the frame being handed on.
    pending: Bytes,
    grant: Option<G>,
}

impl<G> Held<G> {
    /// `body`, holding `grant` until its last bytes are taken.
    pub fn new(body: Body, grant: G) -> Self {
        Held {
            inner: body,
            pending: Bytes::new(),
            grant: Some(grant),
        }
    }
}

impl<G: Unpin> HttpBody for Held<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        loop {
            if !self.pending.is_empty() {
                let n = CHUNK.min(self.pending.len());
                let chunk = Bytes::copy_from_slice(&self.pending[..n]);
                // Past the last chunk the frame is let go, so the answer is freed here.
                self.pending = if n == self.pending.len() {
                    Bytes::new()
                } else {
                    self.pending.slice(n..)
                };
                if self.is_end_stream() {
                    self.grant = None;
                }
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => {
                    self.grant = None;
                    return Poll::Ready(other);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let pending = self.pending.len() as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + pending);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + pending);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn the_grant_is_held_until_the_last_chunk_is_taken() {
        let grant = Arc::new(());
        let mut body = Held::new(Body::from(vec![7u8; 2 * CHUNK + 1]), Arc::clone(&grant));
        let mut sizes = Vec::new();
        while !body.is_end_stream() {
            assert_eq!(Arc::strong_count(&grant), 2, "held while bytes are left");
            let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx))
                .await
                .expect("a frame")
                .expect("no error");
            sizes.push(frame.into_data().expect("data").len());
        }
        assert_eq!(sizes, [CHUNK, CHUNK, 1]);
        assert_eq!(
            Arc::strong_count(&grant),
            1,
            "given back with the last chunk"
        );
    }
}
