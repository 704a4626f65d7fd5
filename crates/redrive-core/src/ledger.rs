//! The attempt ledger: which deliveries of a FIFO record were given back untried.
//!
//! A FIFO record is retried in place, so its attempts are counted from SQS's
//! `ApproximateReceiveCount`. That count also rises for deliveries nobody tried: a record held
//! back behind its group's failure, one not started before the deadline, a deferral. In batches of
//! one a record is never held back by a neighbour, so the count is close; in batches of ten the
//! last of a group can be received ten times for one try. The ledger keeps, per message, the
//! receive counts at which it was given back untried, so that its attempts are the receives that
//! are not in it. It is written only when a FIFO record is given back untried, and read once for a
//! batch with a record received before: the happy path makes no call.
//!
//! Every error errs towards fewer attempts, never more: a receive the ledger does not know of
//! (a lost write, a throttled invocation, a function that overran its timeout) counts as a try.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The future a ledger call returns (boxed: the trait is object-safe).
pub use futures_util::future::BoxFuture;

use crate::error::PortError;
use crate::lock;

/// How long a ledger entry is kept: a FIFO queue keeps a message at most 14 days.
pub const LEDGER_KEEP: Duration = Duration::from_secs(15 * 24 * 3600);

/// The ledger's key for a message id: one namespace beside the idempotency keys in a shared table.
pub fn ledger_key(message_id: &str) -> String {
    format!("attempts#{message_id}")
}

/// Where untried deliveries are written down (DynamoDB in Lambda, memory in tests and the soak).
/// Object-safe: the processor holds one behind an `Arc`, and calls it off the happy path only.
pub trait AttemptLedger: Send + Sync {
    /// For each message id, in order, the receive counts at which it was given back untried.
    fn untried<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Vec<u32>>, PortError>>;

    /// Writes down that the delivery `receive_count` of `message_id` was given back untried.
    /// Idempotent: writing the same pair twice (a retried call) counts once.
    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>>;
}

impl<L: AttemptLedger + ?Sized> AttemptLedger for Arc<L> {
    fn untried<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Vec<u32>>, PortError>> {
        (**self).untried(message_ids)
    }
    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        (**self).record_untried(message_id, receive_count)
    }
}

/// The attempts a delivery has behind it: the receives before `receive_count` not in `untried`.
pub fn attempts_before(receive_count: u32, untried: &[u32]) -> u32 {
    let mut earlier: Vec<u32> = untried
        .iter()
        .copied()
        .filter(|&r| r >= 1 && r < receive_count)
        .collect();
    earlier.sort_unstable();
    earlier.dedup();
    let untried = u32::try_from(earlier.len()).unwrap_or(u32::MAX);
    receive_count.saturating_sub(1).saturating_sub(untried)
}

/// A ledger in memory, shared by the simulated containers of a test or the soak.
#[derive(Default)]
pub struct MemoryLedger {
    entries: Mutex<HashMap<String, Vec<u32>>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }
}

impl AttemptLedger for MemoryLedger {
    fn untried<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Vec<u32>>, PortError>> {
        let entries = lock(&self.entries);
        let found = message_ids
            .iter()
            .map(|id| entries.get(*id).cloned().unwrap_or_default())
            .collect();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        let mut entries = lock(&self.entries);
        let untried = entries.entry(message_id.to_owned()).or_default();
        if !untried.contains(&receive_count) {
            untried.push(receive_count);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A ledger that counts the calls made of the one it wraps (the demo and the bench report them).
pub struct Counted<L> {
    inner: L,
    reads: AtomicU32,
    writes: AtomicU32,
}

impl<L> Counted<L> {
    /// Counts the calls of `inner`.
    pub fn new(inner: L) -> Self {
        Self {
            inner,
            reads: AtomicU32::new(0),
            writes: AtomicU32::new(0),
        }
    }

    /// The ledger counted.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// Reads made so far.
    pub fn reads(&self) -> u32 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Writes made so far.
    pub fn writes(&self) -> u32 {
        self.writes.load(Ordering::Relaxed)
    }
}

impl<L: AttemptLedger> AttemptLedger for Counted<L> {
    fn untried<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Vec<u32>>, PortError>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.untried(message_ids)
    }
    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.record_untried(message_id, receive_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_the_earlier_receives_not_written_down_as_untried() {
        assert_eq!(attempts_before(1, &[]), 0);
        assert_eq!(attempts_before(6, &[]), 5);
        // Received 10 times, 8 of them held back behind its group: this is its second try.
        assert_eq!(attempts_before(10, &[1, 2, 3, 4, 5, 6, 7, 9]), 1);
        // This delivery's own entry (a retried write), duplicates and noise do not count.
        assert_eq!(attempts_before(4, &[3, 3, 4, 0, 12]), 2);
    }

    #[tokio::test]
    async fn the_memory_ledger_counts_a_written_delivery_once() {
        let ledger = MemoryLedger::new();
        ledger.record_untried("m-1", 2).await.unwrap();
        ledger.record_untried("m-1", 2).await.unwrap();
        ledger.record_untried("m-1", 3).await.unwrap();
        let found = ledger.untried(&["m-1", "m-2"]).await.unwrap();
        assert_eq!(found, vec![vec![2, 3], vec![]]);
        assert_eq!(attempts_before(5, &found[0]), 2);
    }
}
