//! Retrying as a client does: an attempt the filter refused with a retryable 503 ran
//! nothing, so a scenario that waits for a lease to run out or a cooldown to end sends
//! the request again until the answer is something else.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::Reply;

/// How long a scenario keeps retrying before it fails.
const RETRY_FOR: Duration = Duration::from_secs(15);

/// Pause between attempts: paces the loop, it synchronizes nothing.
const PAUSE: Duration = Duration::from_millis(50);

/// Sends `send` again while it answers 503 with one of `refusals` as its problem `code`
/// (`request_in_progress`, `retryable_cooldown`, `journal_unavailable`, …), and returns
/// the first other answer. Fails once `extra` plus 15 s have passed: `extra` is what the
/// scenario knowingly waits out (a lease, a cooldown).
pub async fn retry_while_refused<F, Fut>(refusals: &[&str], extra: Duration, send: F) -> Reply
where
    F: Fn() -> Fut,
    Fut: Future<Output = Reply>,
{
    let deadline = Instant::now() + extra + RETRY_FOR;
    loop {
        let reply = send().await;
        let refused = reply.status == 503
            && refusals
                .iter()
                .any(|code| reply.json().get("code").and_then(|c| c.as_str()) == Some(code));
        if !refused {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after {:?}: {reply}",
            extra + RETRY_FOR
        );
        tokio::time::sleep(PAUSE).await;
    }
}
