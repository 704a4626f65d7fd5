//! The attempt ledger: the books of FIFO attempts, held groups and the retry lane.
//!
//! **Attempts.** A FIFO record is retried in place, so its attempts are counted from SQS's
//! `ApproximateReceiveCount`. That count also rises for deliveries nobody tried: a record held
//! back behind its group's failure, one not started before the deadline, a deferral. In batches of
//! one a record is never held back by a neighbour, so the count is close; in batches of ten the
//! last of a group can be received ten times for one try. The ledger ([`AttemptLedger`]) keeps,
//! per message, the receive counts at which it was given back untried, so that its attempts are
//! the receives that are not in it. It is written only when a FIFO record is given back untried,
//! and read once for a batch with a record received before: the happy path makes no call. Every
//! error errs towards fewer attempts, never more: a receive the ledger does not know of (a lost
//! write, a throttled invocation, a function that overran its timeout) counts as a try.
//!
//! **Holds.** With [`FifoOnDeadLetter::Hold`](crate::fifo::FifoOnDeadLetter::Hold) the ledger
//! also holds a group: a head that would be dead-lettered stays in flight in its queue (given
//! back with the longest visibility SQS allows, and again each time it comes back), so SQS itself
//! keeps the rest of its group waiting, in order; the entry says why. An operator releases it
//! ([`release_head`], `dlq release`): to be tried again with a fresh set of attempts, or
//! dead-lettered so that the group goes on.
//!
//! **The retry lane** (`REDRIVE_LANE_URL`): an SQS FIFO queue the same function reads, where
//! records wait out of their source in order, so that the source goes on. Kafka sends a record
//! that fails transiently there ([`crate::kafka`]); an SQS FIFO source with a hold sends a head
//! that would hold its group there, and the group's later records follow it: a held group's
//! backlog then grows in the lane, not in the source, whose receives look at the first 120,000
//! messages only (SQS developer guide, "Avoid large message backlogs with the same message group
//! ID"). The ledger keeps, per key (a Kafka key in its partition, a FIFO group in its queue), the
//! position of the last record that left for the lane and of the last that took effect there
//! ([`KeyPositions`]): while one is out, the key's later records follow it untried.
//!
//! The processor asks the books at its phase boundaries (read once before the handlers run;
//! holds and lane departures before the sends, untried deliveries beside them, finished holds
//! and keys done after), in plain data: message ids, receive counts, receipts, positions, a
//! deadline. Which fate a record gets stays with the judge (`fate.rs`), and which record of a
//! group runs when with the processor's schedule.
mod books;
mod forwarding;
mod lane;
#[cfg(any(test, feature = "test-util"))]
mod memory;
mod store;

use std::time::Duration;

pub(crate) use books::{Books, SourceRecord};
pub use forwarding::{ForwardingLedger, LedgerCall};
pub(crate) use lane::{group_key, LaneMark, LANE_ATTRIBUTE};
pub use lane::{KeyPlace, KeyPositions, Position};
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use memory::{Counted, MemoryLedger};
pub use store::{ledger_key, AttemptLedger, Hold, LedgerEntry, Release, LEDGER_KEEP};

use crate::error::PortError;
use crate::port::{QueuePort, VisibilityChange};

/// A FIFO delivery as the books know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivery<'a> {
    /// The SQS message id.
    pub(crate) message_id: &'a str,
    /// SQS's `ApproximateReceiveCount` of this delivery.
    pub(crate) receive_count: u32,
}

/// Whether a delivery's group is held on it, as the ledger has it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum HeadStatus {
    /// Not held.
    #[default]
    Free,
    /// Held, waiting for an operator.
    Held,
    /// Released to the DLQ by an operator.
    ReleasedToDeadLetter,
    /// Released by an operator to be tried again (its hold has ended).
    ReleasedToRetry,
    /// The ledger did not answer for it (failed, slow, or a partial read): its attempts are SQS's
    /// count, which may hold receives nobody tried, and its hold is unknown.
    Unread,
}

/// Where a FIFO record stands with the retry lane (`REDRIVE_LANE_URL` with a hold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum LaneState {
    /// Nothing to do with the lane: handled where it is.
    #[default]
    Free,
    /// In its source, while its group waits in the lane: it follows there, untried.
    Follows,
    /// In its source, the head its group was held on, come back: sent to the lane again.
    HeldAgain,
    /// In its source, come back after SQS confirmed its copy in the lane (its delete lost): done
    /// here, untried.
    Sent,
    /// In its source, and the ledger did not say whether its group waits in the lane: it waits
    /// in place, untried.
    Unread,
    /// In the lane, the head its group was held on, not yet released: held there, untried.
    HeldInLane,
    /// In the lane, a second copy of a record whose first took effect there: done, untried.
    SentTwice,
}

/// What the ledger says of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recount {
    /// The tries before this delivery.
    pub(crate) attempts_before: u32,
    /// Its group's hold.
    pub(crate) head: HeadStatus,
    /// When it began to wait in place at its group's head, if it has.
    pub(crate) head_since_ms: Option<u64>,
    /// Its copy is in the retry lane: it came back to its source, its delete lost.
    pub(crate) in_lane: bool,
}

/// What the ledger is told of one delivery given back.
pub(crate) enum LedgerWrite {
    /// It was given back untried.
    Untried,
    /// It began to wait in place at its group's head (its first in-place wait); `untried` when
    /// that wait is a deferral, which is no try either.
    HeadWait { since_ms: u64, untried: bool },
}

/// What became of a hold written before its head's wait is set ([`Books::write_holds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldWritten {
    /// The group is held on the head: it may wait in place up to 11 h 40 min.
    Held,
    /// A hold an operator's release got ahead of (a renewal after any release; a new hold after
    /// a release to the DLQ the consumer did not read): nothing written, the head comes back at
    /// once instead of waiting behind a hold that no longer stands.
    Released,
    /// A hold the ledger did not confirm (failed or slow): a new one no operator sees (`dlq held`,
    /// `HeldHeads`), a renewal's hold names an earlier receipt handle no release can make visible
    /// (SQS acts on the latest: API reference, `DeleteMessage`), so the head comes back after its
    /// visibility timeout to be held again.
    NotWritten,
}

/// A held head an operator released ([`release_head`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The hold as it was.
    pub hold: Hold,
    /// The head is visible again now; false when its receipt handle is no longer the latest (it
    /// came back meanwhile, or its wait in place ends on its own).
    pub visible_now: bool,
}

/// An operator's release of the head `message_id` (`dlq release`): the ledger records `release`,
/// and the head, which waits in place up to 11 h 40 min, is made visible now through the receipt
/// handle of its latest receive. `None` when it holds no group.
pub async fn release_head<Q: QueuePort>(
    ledger: &dyn AttemptLedger,
    queue: &Q,
    message_id: &str,
    release: Release,
) -> Result<Option<Released>, PortError> {
    let Some(hold) = ledger.release_hold(message_id, release).await? else {
        return Ok(None);
    };
    let url = queue.queue_url(&hold.queue_arn).await?;
    let change = VisibilityChange {
        receipt_handle: &hold.receipt_handle,
        timeout: Duration::ZERO,
    };
    let refused = queue.change_visibility_batch(&url, &[change]).await?;
    Ok(Some(Released {
        visible_now: refused.is_empty(),
        hold,
    }))
}
