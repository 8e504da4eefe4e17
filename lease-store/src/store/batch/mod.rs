//! Group commit: claims and finalizes that are already queued together run as
//! one statement — one transaction, one WAL flush — instead of one each
//! (`docs/group-commit.md` has the whole argument).
//!
//! Shape: per kind (claims, finalizes), a bounded queue and a small fixed set
//! of worker tasks sharing its receiver. A worker waits for one call, then
//! takes whatever else is *already* queued (`try_recv`, never a timer), up to
//! `max_items` and a byte budget, and runs that batch on one pooled connection
//! through `Store::run`, so the answer bound, the read-only discard and the
//! takeover grace apply to a batch exactly as to a single call. Each call is
//! answered through its own oneshot channel.
//!
//! No added wait at low load: a call that finds a worker idle is taken at
//! once and runs alone, with today's single statement, so at one connection
//! every batch is one call. Calls queue only while every worker is busy
//! with the database; the next batch is exactly that backlog. The worker
//! count therefore bounds how many batch statements are in flight (each holds
//! one pooled connection), and the batch size follows the load by itself.
//!
//! Why workers rather than "the first caller leads": a leader would have to
//! run the others' batch before returning its own answer, or hand it to a
//! task anyway; fixed workers keep every caller's latency its own batch's.
//!
//! What goes together: never two calls on one scope (the second is answered
//! "run singly" at once: it takes today's path, which serializes with the
//! batch on the row), and no more body bytes than [`MAX_BATCH_BYTES`] (a call
//! that would pass it waits for the worker's next batch; a single call larger
//! than the budget runs alone). What the batch does not settle for a call —
//! the scope was not fresh, the lease was not found — that call finishes on
//! the unchanged single path (`claims.rs`, `finalizes.rs`).
//!
//! A batch statement that fails as a whole is never its calls' answer. It may
//! have failed before doing anything (a deadlock with a transaction outside the
//! store, a value the database refused, which must be the one bad call's answer,
//! not its neighbours', a partitioned database's router installed before the
//! batch functions), or it may have committed, wholly (its answer was lost) or,
//! on a partitioned database, in part (each partition commits its share). So
//! each call then runs alone, after the claims' worker released whatever the
//! batch may have won for them (`claims.rs`).

mod assembly;
mod claims;
mod finalizes;
mod sizes;

use std::sync::Arc;
use std::time::Duration;

use keyflight_protocol::Digest;
use tokio::sync::{Mutex, mpsc};

use super::{Store, StoreError};
use assembly::{Assembly, Limits, Offer};
use claims::ClaimItem;
use finalizes::FinalizeItem;

pub use sizes::{BatchLabel, BatchSizeFamily, BatchSizes, BatchTotals};

pub(super) use claims::ClaimReply;
pub(super) use finalizes::FinalizeReply;

/// Default worker tasks per kind: one, which makes each batch the whole backlog (measured
/// against two and four: `docs/group-commit.md#choosing-the-worker-count`).
pub const DEFAULT_BATCH_WORKERS: usize = 1;

/// Default largest batch, in calls.
pub const DEFAULT_BATCH_MAX: usize = 64;

/// Most response-body bytes one finalize batch carries. Large answers (hundreds
/// of KB) gain nothing from sharing a commit — their cost is the copy and the
/// TOAST write, not the flush — and a batch of them would hold a connection
/// and its row locks for longer, so they batch only while they fit this budget.
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// Calls that may wait in one kind's queue; past it, callers wait to enqueue
/// (within their answer bound), as they would wait for a pooled connection.
const QUEUE_CAPACITY: usize = 1024;

/// How claims and finalizes are grouped (`--batch-workers`, `--batch-max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSettings {
    /// Worker tasks per kind: how many batch statements of one kind may be in flight.
    pub workers: usize,
    /// Largest batch, in calls; 1 turns group commit off (every call runs alone, directly).
    pub max_items: usize,
}

impl BatchSettings {
    /// No group commit: each claim and finalize is its own statement, as before batching.
    pub const OFF: BatchSettings = BatchSettings {
        workers: 1,
        max_items: 1,
    };

    /// Whether calls go through the batch queues at all.
    pub fn enabled(&self) -> bool {
        self.max_items > 1 && self.workers > 0
    }
}

impl Default for BatchSettings {
    fn default() -> Self {
        BatchSettings {
            workers: DEFAULT_BATCH_WORKERS,
            max_items: DEFAULT_BATCH_MAX,
        }
    }
}

/// Which statement a batch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchKind {
    /// Claims of fresh scopes: one multi-row `INSERT`.
    Claim = 0,
    /// Finalizes: one multi-row `UPDATE`.
    Finalize = 1,
}

impl BatchKind {
    /// The `kind` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchKind::Claim => "claim",
            BatchKind::Finalize => "finalize",
        }
    }
}

/// A queued call, as the worker that batches it sees it.
trait Item: Send + 'static {
    /// The record it acts on.
    fn scope(&self) -> &Digest;
    /// Body bytes it adds to a batch.
    fn bytes(&self) -> usize;
    /// Its caller stopped waiting (gave up, or the request went away): skip it.
    fn abandoned(&self) -> bool;
    /// Tells its caller to take the single path itself.
    fn run_singly(self);
}

/// One kind's queue: the callers' side.
struct Queue<I> {
    sender: mpsc::Sender<I>,
}

impl<I: Item> Queue<I> {
    /// Starts `workers` tasks that take batches off a new queue and `run` them.
    fn start<F, Fut>(settings: &BatchSettings, run: F) -> Queue<I>
    where
        F: Fn(Vec<I>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let receiver = Arc::new(Mutex::new(receiver));
        let limits = Limits {
            max_items: settings.max_items,
            max_bytes: MAX_BATCH_BYTES,
        };
        for _ in 0..settings.workers {
            tokio::spawn(work(Arc::clone(&receiver), limits, run.clone()));
        }
        Queue { sender }
    }

    /// Calls waiting for a worker.
    fn queued(&self) -> usize {
        self.sender.max_capacity() - self.sender.capacity()
    }

    /// Queues `item` and waits for its answer on `reply`, at most `bound` in
    /// all; `Unavailable` when none comes (the database is not answering, or
    /// the workers are gone with the runtime).
    async fn submit<R>(
        &self,
        item: I,
        reply: tokio::sync::oneshot::Receiver<R>,
        bound: Duration,
    ) -> Result<R, StoreError> {
        let answered = tokio::time::timeout(bound, async {
            self.sender.send(item).await.ok()?;
            reply.await.ok()
        })
        .await;
        match answered {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(StoreError::Unavailable(
                "the batch workers stopped".to_owned(),
            )),
            Err(_elapsed) => Err(StoreError::Unavailable(format!(
                "no answer from the database within {} ms (queued for a batch)",
                bound.as_millis()
            ))),
        }
    }
}

/// A worker: takes a batch, runs it, again, until the queue closes (every
/// [`Store`] handle that could queue is gone).
async fn work<I, F, Fut>(receiver: Arc<Mutex<mpsc::Receiver<I>>>, limits: Limits, run: F)
where
    I: Item,
    F: Fn(Vec<I>) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut carried: Option<I> = None;
    loop {
        let batch = match carried.take().filter(|item| !item.abandoned()) {
            // A call that did not fit the last batch starts this one. If another
            // worker holds the queue, it is waiting for a call, so nothing else is
            // queued: run the carried call alone rather than wait behind it.
            Some(first) => match receiver.try_lock() {
                Ok(mut queue) => assemble(&mut queue, first, limits, &mut carried),
                Err(_) => vec![first],
            },
            None => {
                let mut queue = receiver.lock().await;
                let Some(first) = next_live(&mut queue).await else {
                    return;
                };
                assemble(&mut queue, first, limits, &mut carried)
            }
        };
        run(batch).await;
    }
}

/// The next call whose caller still waits; `None` when the queue closed.
async fn next_live<I: Item>(queue: &mut mpsc::Receiver<I>) -> Option<I> {
    loop {
        let item = queue.recv().await?;
        if !item.abandoned() {
            return Some(item);
        }
    }
}

/// `first` and whatever is already queued behind it that may share its batch.
fn assemble<I: Item>(
    queue: &mut mpsc::Receiver<I>,
    first: I,
    limits: Limits,
    carried: &mut Option<I>,
) -> Vec<I> {
    let mut assembly = Assembly::new(first, limits);
    while !assembly.is_full() {
        let Ok(item) = queue.try_recv() else { break };
        if item.abandoned() {
            continue;
        }
        match assembly.offer(item) {
            Offer::Taken => {}
            Offer::SameScope(item) => item.run_singly(),
            Offer::Full(item) => {
                *carried = Some(item);
                break;
            }
        }
    }
    assembly.items
}

/// The callers' side of both kinds' queues.
pub(super) struct Queues {
    claims: Queue<ClaimItem>,
    finalizes: Queue<FinalizeItem>,
    /// The longest a queued call waits for its answer.
    bound: Duration,
}

impl Queues {
    /// Starts the workers, on `single` (a handle that runs everything alone);
    /// `None` when `settings` turn group commit off.
    pub(super) fn start(
        single: &Store,
        settings: &BatchSettings,
        bound: Duration,
    ) -> Option<Arc<Queues>> {
        if !settings.enabled() {
            return None;
        }
        let claims = Queue::start(settings, {
            let store = single.clone();
            move |batch| {
                let store = store.clone();
                async move { store.run_claim_batch(batch).await }
            }
        });
        let finalizes = Queue::start(settings, {
            let store = single.clone();
            move |batch| {
                let store = store.clone();
                async move { store.run_finalize_batch(batch).await }
            }
        });
        Some(Arc::new(Queues {
            claims,
            finalizes,
            bound,
        }))
    }

    pub(super) fn queued(&self, kind: BatchKind) -> usize {
        match kind {
            BatchKind::Claim => self.claims.queued(),
            BatchKind::Finalize => self.finalizes.queued(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_call_per_batch_is_no_batching() {
        assert!(!BatchSettings::OFF.enabled());
        assert!(BatchSettings::default().enabled());
    }
}
