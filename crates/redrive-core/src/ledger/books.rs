//! The books as the processor asks them, at its phase boundaries, in plain data: one read before
//! the handlers run, holds and lane departures before the sends, untried deliveries beside them,
//! finished holds, keys done and the held heads' count after.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::lane::{KeyPlace, KeyPositions, Position};
use super::store::{AttemptLedger, Hold, Release};
use super::{Delivery, HeadStatus, HoldWritten, LaneState, LedgerWrite, Recount};
use crate::clock::by_deadline;
use crate::envelope::{truncate, MAX_ERROR_MESSAGE_BYTES};
use crate::error::{PortError, RecordError};
use crate::sync::lock;

/// How often a container counts the held heads for the `HeldHeads` gauge, at the most (the
/// alarm's period is a minute).
const HELD_COUNT_EVERY_MS: u64 = 60_000;

/// How many times a confirmed copy in the lane is written down before the processor gives up
/// (each write already retried by the SDK).
const IN_LANE_WRITES: u32 = 3;

/// The attempt ledger as one processor keeps its books in it.
pub(crate) struct Books {
    store: Arc<dyn AttemptLedger>,
    /// When this container last counted the held heads (ms), for the `HeldHeads` gauge.
    held_counted_at: Mutex<Option<u64>>,
}

impl Books {
    pub(crate) fn new(store: Arc<dyn AttemptLedger>) -> Self {
        Self {
            store,
            held_counted_at: Mutex::new(None),
        }
    }

    /// Reads what the ledger knows of `deliveries` (one call) within `within`: their attempts and
    /// holds, in order; `None` for a delivery the ledger did not answer for (it failed, was slow,
    /// or read only part), whose attempts are then SQS's count: a try is never refused on that
    /// count alone.
    pub(crate) async fn recount(
        &self,
        deliveries: &[Delivery<'_>],
        within: Duration,
    ) -> Vec<Option<Recount>> {
        let ids: Vec<&str> = deliveries.iter().map(|d| d.message_id).collect();
        let entries = match tokio::time::timeout(within, self.store.entries(&ids)).await {
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

    /// Where each source record stands with the lane, given its group's key, its position and
    /// whether the ledger said if its copy is there (one read of the distinct groups within
    /// `within`). A held head back in its source (its copy's send not confirmed) is sent to the
    /// lane again as the head; any other record of a group waiting there follows; a record whose
    /// group the ledger did not answer for waits, and so does one that left before when the
    /// ledger did not say whether its copy is there.
    pub(crate) async fn lane_states(
        &self,
        records: &[SourceRecord],
        within: Duration,
    ) -> Vec<LaneState> {
        let states = self
            .key_states(
                records.iter().map(|record| record.key.as_str()),
                within,
                "their records wait in place untried",
            )
            .await;
        records
            .iter()
            .zip(states)
            .map(|(record, state)| lane_state(state, record))
            .collect()
    }

    /// Which of the lane's FIFO copies (their group's key and position) are second copies of a
    /// record whose first took effect in the lane, the last of its group to: a record whose copy's
    /// answer was lost and that came back to its source past SQS's 5-minute deduplication
    /// interval is sent there twice. One read of the distinct groups within `within`; a group not
    /// read says no.
    pub(crate) async fn took_effect_in_lane(
        &self,
        copies: &[(String, Position)],
        within: Duration,
    ) -> Vec<bool> {
        let states = self
            .key_states(
                copies.iter().map(|(key, _)| key.as_str()),
                within,
                "a copy sent twice is tried",
            )
            .await;
        copies
            .iter()
            .zip(states)
            .map(|((_, position), state)| {
                state
                    .flatten()
                    .is_some_and(|key| key.done == Some(*position))
            })
            .collect()
    }

    /// What the ledger says of each key of `keys` (one read of the distinct ones within `within`),
    /// in order: `None` for a key it did not answer for, `Some(None)` for a key with nothing out.
    async fn key_states<'k>(
        &self,
        keys: impl Iterator<Item = &'k str> + Clone,
        within: Duration,
        unread: &str,
    ) -> Vec<Option<Option<KeyPositions>>> {
        let mut distinct: Vec<&str> = keys.clone().collect();
        if distinct.is_empty() {
            return Vec::new();
        }
        distinct.sort_unstable();
        distinct.dedup();
        let entries = match tokio::time::timeout(within, self.store.entries(&distinct)).await {
            Ok(Ok(entries)) => entries,
            Ok(Err(error)) => {
                tracing::warn!(%error, groups = distinct.len(), "attempt ledger not read: where these groups stand with the retry lane is unknown, and {unread}");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!(groups = distinct.len(), "attempt ledger not read in time: where these groups stand with the retry lane is unknown, and {unread}");
                Vec::new()
            }
        };
        let mut entries = entries.into_iter();
        let states: Vec<Option<Option<KeyPositions>>> = distinct
            .iter()
            .map(|_| Some(entries.next().flatten()?.key))
            .collect();
        keys.map(|key| {
            let found = distinct.binary_search(&key).ok();
            found.and_then(|found| states[found])
        })
        .collect()
    }

    /// The keys of `keys` that have records out in the lane or the DLQ, and where. An error when
    /// the ledger did not answer for all of them: a key it could not say for may be waiting.
    pub(crate) async fn waiting_keys(
        &self,
        keys: &[&str],
    ) -> Result<HashMap<String, KeyPlace>, PortError> {
        let entries = self.store.entries(keys).await?;
        let mut waiting = HashMap::new();
        for (key, entry) in keys.iter().zip(entries) {
            let entry = entry.ok_or_else(|| {
                PortError::new("BatchGetItem", "keys left unprocessed (throttled)")
            })?;
            if let Some(place) = entry.key.and_then(|positions| positions.waiting()) {
                waiting.insert((*key).to_owned(), place);
            }
        }
        Ok(waiting)
    }

    /// Writes the holds of a batch's heads, side by side and before their waits are set: a new
    /// hold (`Hold` with an error) or a renewal of one (a head that came back held, `Hold`
    /// without). One the ledger did not confirm in time is not written: a renewal's hold still
    /// names an earlier receipt handle, through which a release cannot make the head visible.
    pub(crate) async fn write_holds(
        &self,
        holds: &[(Delivery<'_>, Hold)],
        deadline: Option<Instant>,
    ) -> Vec<HoldWritten> {
        let all = futures_util::future::join_all(holds.iter().map(|(delivery, hold)| async move {
            let renewal = hold.error_kind.is_empty();
            match self.store.hold(delivery.message_id, hold, renewal).await {
                Ok(true) => HoldWritten::Held,
                Ok(false) => HoldWritten::Released,
                Err(error) => {
                    tracing::warn!(
                        message_id = delivery.message_id,
                        renewal,
                        %error,
                        "hold not written to the attempt ledger",
                    );
                    HoldWritten::NotWritten
                }
            }
        }));
        by_deadline(deadline, all)
            .await
            .unwrap_or_else(|| vec![HoldWritten::NotWritten; holds.len()])
    }

    /// Writes down that the record at `position` of key `key` leaves for `place`, before its copy
    /// is sent (a key never looks free while a record of it is out): the reason when it did not.
    pub(crate) async fn key_leaves(
        &self,
        key: &str,
        position: Position,
        place: KeyPlace,
    ) -> Result<(), String> {
        self.store
            .record_key_left(key, position, place)
            .await
            .map_err(|error| format!("the attempt ledger did not write its key down: {error}"))
    }

    /// Writes down that SQS confirmed the copy of `message_id` in the lane: should its delete be
    /// lost, it comes back to its source done. Asked up to [`IN_LANE_WRITES`] times: without the
    /// note a record whose delete is lost comes back past SQS's 5-minute deduplication interval
    /// and is sent there again, a second copy tried with attempts of its own.
    pub(crate) async fn copy_in_lane(&self, message_id: &str) {
        let mut writes = 1;
        while let Err(error) = self.store.record_in_lane(message_id).await {
            if writes == IN_LANE_WRITES {
                tracing::warn!(message_id, %error, "its copy in the retry lane not written down: should it come back to its source, it is sent there again");
                return;
            }
            writes += 1;
        }
    }

    /// Writes down, side by side by `deadline`, that copies of `message_ids` reached the lane (the
    /// lane's first receive of each): a record whose send SQS did not confirm but took, back in
    /// its source past SQS's 5-minute deduplication interval (its give-back refused), is then
    /// done there instead of sent a second time.
    pub(crate) async fn copies_received(
        &self,
        message_ids: impl Iterator<Item = &str>,
        deadline: Option<Instant>,
    ) {
        let writes = futures_util::future::join_all(message_ids.map(|id| self.copy_in_lane(id)));
        let _ = by_deadline(deadline, writes).await;
    }

    /// Writes a batch's deliveries given back down, side by side, by `deadline`. A write that
    /// fails leaves that receive counted as an attempt (fewer tries, never more).
    pub(crate) async fn write_down(
        &self,
        writes: Vec<(Delivery<'_>, LedgerWrite)>,
        deadline: Option<Instant>,
    ) {
        if writes.is_empty() {
            return;
        }
        let ledger = &self.store;
        let all = futures_util::future::join_all(writes.into_iter().map(
            |(delivery, write)| async move {
                let id = delivery.message_id;
                let (written, what) = match write {
                    LedgerWrite::Untried => (
                        ledger.record_untried(id, delivery.receive_count).await,
                        "untried delivery not written to the attempt ledger: it counts as an attempt",
                    ),
                    LedgerWrite::HeadWait { since_ms, untried } => {
                        let untried_written = if untried {
                            ledger.record_untried(id, delivery.receive_count).await
                        } else {
                            Ok(())
                        };
                        let head_written = ledger.record_head_wait(id, since_ms).await;
                        (
                            untried_written.and(head_written),
                            "head's wait not written to the attempt ledger: its age counts from its next wait",
                        )
                    }
                };
                if let Err(error) = written {
                    tracing::warn!(message_id = id, %error, "{what}");
                }
            },
        ));
        if by_deadline(deadline, all).await.is_none() {
            tracing::warn!(
                "attempt ledger writes cut off at the deadline: those receives count as attempts"
            );
        }
    }

    /// Ends the holds of `message_ids`, heads whose dead letter SQS confirmed (released there by
    /// an operator, or held too long): `dlq held` no longer lists them. A clear that fails or is
    /// cut off leaves a stale listing, dropped when the next `dlq held` finds the head gone.
    pub(crate) async fn clear_holds(
        &self,
        message_ids: impl Iterator<Item = &str>,
        deadline: Option<Instant>,
    ) {
        let clears = futures_util::future::join_all(message_ids.map(|message_id| async move {
            if let Err(error) = self.store.clear_hold(message_id).await {
                tracing::warn!(message_id, %error, "finished hold not cleared from the attempt ledger");
            }
        }));
        let _ = by_deadline(deadline, clears).await;
    }

    /// Writes down the position of each record that took effect from the lane (its key and
    /// position), so that its key's later records stop following once none is out. A write that
    /// fails or is cut off at `deadline` leaves the key following until its next record is done.
    pub(crate) async fn keys_done(
        &self,
        done: impl Iterator<Item = (String, Position)>,
        deadline: Option<Instant>,
    ) {
        let writes = futures_util::future::join_all(done.map(|(key, position)| async move {
            if let Err(error) = self.store.record_key_done(&key, position).await {
                tracing::warn!(key, position = position.0.to_string(), %error, "the key's record done not written down: its later records follow it to the lane until the next one is done");
            }
        }));
        let _ = by_deadline(deadline, writes).await;
    }

    /// The held heads `counts` counts, for the `HeldHeads` gauge the Held alarm watches. A held
    /// head comes back only every 11 h 40 min, so a count from the batches that hold would fall
    /// to zero at the next batch of another group: the ledger is asked instead, at most once a
    /// minute per container, and after any batch that `changed` a hold. `None` when this batch
    /// did not count (or the ledger did not answer in time): the line leaves the gauge out and
    /// the alarm keeps its state.
    pub(crate) async fn count_held(
        &self,
        counts: impl Fn(&Hold) -> bool,
        changed: bool,
        now_ms: u64,
        deadline: Option<Instant>,
    ) -> Option<u32> {
        let due = lock(&self.held_counted_at)
            .is_none_or(|at| now_ms.saturating_sub(at) >= HELD_COUNT_EVERY_MS);
        if !changed && !due {
            return None;
        }
        match by_deadline(deadline, self.store.held()).await {
            Some(Ok(held)) => {
                *lock(&self.held_counted_at) = Some(now_ms);
                let counted = held.iter().filter(|(_, hold)| counts(hold)).count();
                Some(u32::try_from(counted).unwrap_or(u32::MAX))
            }
            Some(Err(error)) => {
                tracing::warn!(%error, "held heads not counted: the HeldHeads gauge is left out of this batch's figures");
                None
            }
            None => None,
        }
    }
}

/// A source record as the books place it with the lane.
pub(crate) struct SourceRecord {
    /// Its group's ledger key.
    pub(crate) key: String,
    /// Its `SequenceNumber`.
    pub(crate) position: Option<Position>,
    /// The ledger did not answer for the record itself: whether SQS confirmed a copy of it in
    /// the lane (`in_lane`) is not known.
    pub(crate) copy_unknown: bool,
}

/// Where `record` stands with the lane, its group in the state `state`. The record at the last
/// position its group sent out, once that position took effect from the lane, is back in its source
/// with its delete lost (and the ledger's note of its copy): done there. A record at or before
/// that position whose own entry was not read may have its copy in the lane: it waits for a read
/// rather than run again in place or follow twice. One before it is not taken for done: a queue
/// that hands out a group's records out of order (LocalStack does) would lose it; it follows (its
/// copy carries its tries), or runs in place once its group is back.
fn lane_state(state: Option<Option<KeyPositions>>, record: &SourceRecord) -> LaneState {
    let Some(state) = state else {
        return LaneState::Unread;
    };
    let Some(key) = state else {
        return LaneState::Free;
    };
    let last_out = record.position == Some(key.left);
    let left_before = record.position.is_some_and(|position| position <= key.left);
    match key.waiting() {
        None if last_out => LaneState::Sent,
        _ if left_before && record.copy_unknown => LaneState::Unread,
        None => LaneState::Free,
        Some(KeyPlace::Held) if last_out => LaneState::HeldAgain,
        Some(_) => LaneState::Follows,
    }
}

impl Hold {
    /// A hold on the delivery `receive_count` (its receipt handle and queue), for `error`: none
    /// when the head came back held, which keeps the failure written first.
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
