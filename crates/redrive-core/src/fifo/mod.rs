//! FIFO bookkeeping: attempts counted right at any batch size, and a group held on its head.
//!
//! A FIFO record is retried in place, so its attempts are counted from SQS's
//! `ApproximateReceiveCount`. That count also rises for deliveries nobody tried: a record held
//! back behind its group's failure, one not started before the deadline, a deferral. In batches of
//! one a record is never held back by a neighbour, so the count is close; in batches of ten the
//! last of a group can be received ten times for one try. The attempt ledger ([`AttemptLedger`])
//! keeps, per message, the receive counts at which it was given back untried, so that its attempts
//! are the receives that are not in it. It is written only when a FIFO record is given back
//! untried (`write_down`), and read once for a batch with a record received before
//! (`recount`): the happy path makes no call.
//!
//! Every error errs towards fewer attempts, never more: a receive the ledger does not know of
//! (a lost write, a throttled invocation, a function that overran its timeout) counts as a try.
//!
//! With [`FifoOnDeadLetter::Hold`] the ledger also holds a group: a head that would be
//! dead-lettered stays in flight in its queue (given back with the longest visibility SQS allows,
//! and again each time it comes back), so SQS itself keeps the rest of its group waiting, in
//! order; the entry says why. An operator releases it ([`release_head`], `dlq release`): to be
//! tried again with a fresh set of attempts, or dead-lettered so that the group goes on.
//!
//! Which fate a FIFO record gets stays with the judge (`fate.rs`), and which record of a group runs
//! when with the processor's schedule: this module takes plain data (message ids, receive counts,
//! receipts) and keeps the books.
mod ledger;
#[cfg(any(test, feature = "test-util"))]
mod memory;

use std::time::Duration;

use tokio::time::Instant;

use crate::lane::{KeyPlace, KeyPositions, Position};
pub use ledger::{ledger_key, AttemptLedger, BoxFuture, Hold, LedgerEntry, Release, LEDGER_KEEP};
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use memory::{Counted, MemoryLedger};

use crate::clock::by_deadline;
use crate::envelope::{truncate, MAX_ERROR_MESSAGE_BYTES};
use crate::error::{PortError, RecordError};
use crate::port::{QueuePort, VisibilityChange};

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

/// A FIFO delivery as the books know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// The SQS message id.
    pub message_id: &'a str,
    /// SQS's `ApproximateReceiveCount` of this delivery.
    pub receive_count: u32,
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
}

/// What the ledger says of the groups `keys` (their [`crate::lane::group_key`]s, in order),
/// read in one call within `within`: each group's records out in the lane, if any (`Some(None)`:
/// none); `None` for a group the ledger did not answer for (failed, slow, or a partial read).
pub(crate) async fn group_states(
    ledger: &dyn AttemptLedger,
    keys: &[&str],
    within: Duration,
) -> Vec<Option<Option<KeyPositions>>> {
    let entries = match tokio::time::timeout(within, ledger.entries(keys)).await {
        Ok(Ok(entries)) => entries,
        Ok(Err(error)) => {
            tracing::warn!(%error, groups = keys.len(), "attempt ledger not read: whether these groups wait in the retry lane is unknown, and their records wait in place untried");
            Vec::new()
        }
        Err(_) => {
            tracing::warn!(groups = keys.len(), "attempt ledger not read in time: whether these groups wait in the retry lane is unknown, and their records wait in place untried");
            Vec::new()
        }
    };
    let mut entries = entries.into_iter();
    keys.iter()
        .map(|_| {
            let entry = entries.next().flatten()?;
            Some(entry.key)
        })
        .collect()
}

/// Where a source record at `position` of a group in the state `state` stands with the lane. A
/// held head back in its source (its copy's send not confirmed) is sent to the lane again as the head; any
/// other record of a group waiting there follows.
pub(crate) fn lane_state(
    state: Option<Option<KeyPositions>>,
    position: Option<Position>,
) -> LaneState {
    let Some(state) = state else {
        return LaneState::Unread;
    };
    match state {
        Some(key) if key.waiting().is_none() => LaneState::Free,
        Some(key) if key.place == KeyPlace::Held && Some(key.left) == position => {
            LaneState::HeldAgain
        }
        Some(_) => LaneState::Follows,
        None => LaneState::Free,
    }
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

/// Reads what the ledger knows of `deliveries` (one call) within `within`: their attempts and
/// holds, in order; `None` for a delivery the ledger did not answer for (it failed, was slow, or
/// read only part), whose attempts are then SQS's count: a try is never refused on that count
/// alone.
pub(crate) async fn recount(
    ledger: &dyn AttemptLedger,
    deliveries: &[Delivery<'_>],
    within: Duration,
) -> Vec<Option<Recount>> {
    let ids: Vec<&str> = deliveries.iter().map(|d| d.message_id).collect();
    let entries = match tokio::time::timeout(within, ledger.entries(&ids)).await {
        Ok(Ok(entries)) => entries,
        Ok(Err(error)) => {
            tracing::warn!(
                %error,
                records = ids.len(),
                "attempt ledger not read: SQS's receive counts stand, and no try is refused on them",
            );
            Vec::new()
        }
        Err(_) => {
            tracing::warn!(
                records = ids.len(),
                "attempt ledger not read in time: SQS's receive counts stand, and no try is refused on them",
            );
            Vec::new()
        }
    };
    let mut entries = entries.into_iter();
    deliveries
        .iter()
        .map(|delivery| {
            let entry = entries.next().flatten()?;
            Some(Recount {
                attempts_before: entry.attempts_before(delivery.receive_count),
                head: match entry.hold.map(|hold| hold.release) {
                    None if entry.attempts_from > 0 => HeadStatus::ReleasedToRetry,
                    None => HeadStatus::Free,
                    Some(Some(Release::DeadLetter)) => HeadStatus::ReleasedToDeadLetter,
                    Some(_) => HeadStatus::Held,
                },
                head_since_ms: entry.head_since_ms,
                in_lane: entry.in_lane,
            })
        })
        .collect()
}

/// What the ledger is told of one delivery.
pub(crate) enum LedgerWrite {
    /// It was given back untried.
    Untried,
    /// It began to wait in place at its group's head (its first in-place wait); `untried` when
    /// that wait is a deferral, which is no try either.
    HeadWait { since_ms: u64, untried: bool },
}

impl Hold {
    /// A hold on the delivery `receive_count` (its receipt handle and queue), for `error`: none when
    /// the head came back held, which keeps the failure written first.
    pub(crate) fn on(
        receive_count: u32,
        receipt_handle: &str,
        queue_arn: &str,
        error: Option<&RecordError>,
        now_ms: u64,
    ) -> Self {
        Self {
            since_ms: now_ms,
            receive_count,
            receipt_handle: receipt_handle.to_owned(),
            queue_arn: queue_arn.to_owned(),
            error_kind: error.map(|e| e.kind().to_owned()).unwrap_or_default(),
            error_message: error
                .map(|e| truncate(e.message(), MAX_ERROR_MESSAGE_BYTES).into_owned())
                .unwrap_or_default(),
            release: None,
        }
    }
}

/// Writes a batch's deliveries down, side by side, by `deadline`. A write that fails leaves that
/// receive counted as an attempt (fewer tries, never more).
pub(crate) async fn write_down(
    ledger: &dyn AttemptLedger,
    writes: Vec<(Delivery<'_>, LedgerWrite)>,
    deadline: Option<Instant>,
) {
    if writes.is_empty() {
        return;
    }
    let all =
        futures_util::future::join_all(writes.into_iter().map(|(delivery, write)| async move {
            let (written, what) = match &write {
            LedgerWrite::Untried => (
                ledger
                    .record_untried(delivery.message_id, delivery.receive_count)
                    .await,
                "untried delivery not written to the attempt ledger: it counts as an attempt",
            ),
            LedgerWrite::HeadWait { since_ms, untried } => {
                let untried_written = if *untried {
                    ledger
                        .record_untried(delivery.message_id, delivery.receive_count)
                        .await
                } else {
                    Ok(())
                };
                let head_written = ledger
                    .record_head_wait(delivery.message_id, *since_ms)
                    .await;
                (
                    untried_written.and(head_written),
                    "head's wait not written to the attempt ledger: its age counts from its next wait",
                )
            }
        };
            if let Err(error) = written {
                tracing::warn!(message_id = delivery.message_id, %error, "{what}");
            }
        }));
    if by_deadline(deadline, all).await.is_none() {
        tracing::warn!(
            "attempt ledger writes cut off at the deadline: those receives count as attempts"
        );
    }
}

/// What became of a hold written before its head's wait is set ([`write_holds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldWritten {
    /// The group is held on the head: it may wait in place up to 11 h 40 min.
    Held,
    /// A renewal an operator's release got ahead of: nothing written, the head comes back at once
    /// instead of waiting behind a hold that no longer stands.
    Released,
    /// A new hold the ledger did not confirm (failed or slow): no operator sees it (`dlq held`,
    /// `HeldHeads`), so the head comes back after its visibility timeout to be held again.
    NotWritten,
}

/// Writes the holds of a batch's heads, side by side and before their waits are set: a new hold
/// (`Hold` with an error) or a renewal of one (a head that came back held, `Hold` without). A
/// renewal the ledger did not answer in time counts as held: the hold written before stands.
pub(crate) async fn write_holds(
    ledger: &dyn AttemptLedger,
    holds: &[(Delivery<'_>, Hold)],
    deadline: Option<Instant>,
) -> Vec<HoldWritten> {
    let unanswered = |hold: &Hold| {
        if hold.error_kind.is_empty() {
            HoldWritten::Held
        } else {
            HoldWritten::NotWritten
        }
    };
    let all = futures_util::future::join_all(holds.iter().map(|(delivery, hold)| async move {
        let renewal = hold.error_kind.is_empty();
        match ledger.hold(delivery.message_id, hold, renewal).await {
            Ok(true) => HoldWritten::Held,
            Ok(false) => HoldWritten::Released,
            Err(error) => {
                tracing::warn!(
                    message_id = delivery.message_id,
                    renewal,
                    %error,
                    "hold not written to the attempt ledger",
                );
                unanswered(hold)
            }
        }
    }));
    by_deadline(deadline, all)
        .await
        .unwrap_or_else(|| holds.iter().map(|(_, hold)| unanswered(hold)).collect())
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
