//! Assembling one batch from the calls already queued: the pure part of a
//! worker's loop, so its rules (no scope twice, the call count, the byte
//! budget) are plain unit tests.

use super::Item;

/// The limits one batch is assembled under.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_items: usize,
    pub(super) max_bytes: usize,
}

/// A batch being assembled: the pure part of taking calls off a queue.
pub(super) struct Assembly<I> {
    pub(super) items: Vec<I>,
    bytes: usize,
    limits: Limits,
}

/// What became of a call offered to an [`Assembly`].
pub(super) enum Offer<I> {
    /// It is in the batch.
    Taken,
    /// The batch already acts on its scope: it must not share the statement.
    SameScope(I),
    /// It does not fit (calls or bytes): it starts the next batch.
    Full(I),
}

impl<I: Item> Assembly<I> {
    /// A batch that starts with `first`, whatever its size.
    pub(super) fn new(first: I, limits: Limits) -> Self {
        let bytes = first.bytes();
        let mut items = Vec::with_capacity(limits.max_items.min(16));
        items.push(first);
        Assembly {
            items,
            bytes,
            limits,
        }
    }

    pub(super) fn is_full(&self) -> bool {
        self.items.len() >= self.limits.max_items
    }

    pub(super) fn offer(&mut self, item: I) -> Offer<I> {
        if self.items.iter().any(|taken| taken.scope() == item.scope()) {
            return Offer::SameScope(item);
        }
        if self.is_full() || self.bytes.saturating_add(item.bytes()) > self.limits.max_bytes {
            return Offer::Full(item);
        }
        self.bytes += item.bytes();
        self.items.push(item);
        Offer::Taken
    }
}

#[cfg(test)]
mod tests {
    use keyflight_protocol::Digest;

    use super::*;

    struct Call {
        scope: Digest,
        bytes: usize,
    }

    impl Item for Call {
        fn scope(&self) -> &Digest {
            &self.scope
        }
        fn bytes(&self) -> usize {
            self.bytes
        }
        fn abandoned(&self) -> bool {
            false
        }
        fn run_singly(self) {}
    }

    fn call(scope: u8, bytes: usize) -> Call {
        Call {
            scope: Digest([scope; 32]),
            bytes,
        }
    }

    const LIMITS: Limits = Limits {
        max_items: 3,
        max_bytes: 100,
    };

    #[test]
    fn a_batch_never_holds_one_scope_twice() {
        let mut batch = Assembly::new(call(1, 0), LIMITS);
        assert!(matches!(batch.offer(call(2, 0)), Offer::Taken));
        assert!(matches!(batch.offer(call(1, 0)), Offer::SameScope(_)));
        assert!(matches!(batch.offer(call(2, 0)), Offer::SameScope(_)));
        assert_eq!(batch.items.len(), 2);
    }

    #[test]
    fn a_batch_stops_at_its_call_count_and_byte_budget() {
        let mut batch = Assembly::new(call(1, 10), LIMITS);
        assert!(matches!(batch.offer(call(2, 90)), Offer::Taken));
        assert!(
            matches!(batch.offer(call(3, 1)), Offer::Full(_)),
            "101 bytes"
        );
        assert!(matches!(batch.offer(call(4, 0)), Offer::Taken));
        assert!(batch.is_full());
        assert!(matches!(batch.offer(call(5, 0)), Offer::Full(_)));
    }

    #[test]
    fn a_call_larger_than_the_budget_still_runs_alone() {
        let mut batch = Assembly::new(call(1, 1000), LIMITS);
        assert_eq!(batch.items.len(), 1);
        assert!(matches!(batch.offer(call(2, 0)), Offer::Full(_)));
    }
}
