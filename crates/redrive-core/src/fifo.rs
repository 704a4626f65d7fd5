//! FIFO: attempts counted right at any batch size, and a group held on its head.
//!
//! A FIFO record is retried in place (its group waits behind it), so its attempts are counted
//! from SQS's `ApproximateReceiveCount`, less the deliveries the attempt ledger
//! ([`crate::ledger`]) knows were untried. What a head that would be dead-lettered means for its
//! group is [`FifoOnDeadLetter`]: it goes on, or it is held (in place, or in the retry lane) until
//! an operator releases it ([`crate::ledger::release_head`], `dlq release`).
use std::time::Duration;

/// What a FIFO record that would be dead-lettered means for the rest of its message group
/// (`REDRIVE_FIFO_ON_DEAD_LETTER`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FifoOnDeadLetter {
    /// It goes to the DLQ and the group goes on: its effect, once redriven, lands after its
    /// successors'.
    #[default]
    Continue,
    /// It stays in flight at the head of its group (needs the attempt ledger), which SQS keeps
    /// waiting in order, until an operator releases it (`dlq release`); a hold that outlasts
    /// `max_age` from the message's sending dead-letters it (the queue's retention would drop it
    /// and its group).
    Hold {
        /// How long a head may hold its group, from when it was sent.
        max_age: Duration,
    },
}
