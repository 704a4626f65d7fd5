//! Carrying a batch's fates out: the copies and dead letters the fates make, sent through the one
//! [`Courier`](crate::carry::Courier), and FIFO visibility changes; what SQS does not confirm is
//! given back.
use std::time::Duration;

use tokio::time::Instant;

use super::decide::Ruling;
use super::payloads::Fetched;
use super::{FifoOnDeadLetter, Item, Processor};
use crate::backoff::{whole_seconds, MAX_DELAY_SECONDS};
use crate::carry::{Destination, Outbox};
use crate::clock::by_deadline;
use crate::envelope::{
    annotate, annotate_offloaded, truncate, FailedIn, Meta, OutgoingMessage, Timestamp, TooLarge,
    MAX_ERROR_MESSAGE_BYTES, META_VERSION,
};
use crate::error::{ErrorClass, RecordError};
use crate::fate::{Fate, GiveBackReason};
use crate::fifo::{self, HeadStatus, Hold, HoldWritten, LedgerWrite};
use crate::handler::{Invocation, RecordHandler};
use crate::lane::{group_key, KeyPlace, LaneMark, Position, LANE_ATTRIBUTE};
use crate::metrics::BatchReport;
use crate::payload::Pointer;
use crate::port::{QueuePort, VisibilityChange};
use crate::sync::lock;
use redrive_event::{SqsRecord, Text};

/// When a failure is recorded (ms since the epoch) and in which invocation.
type Failure<'f> = (u64, &'f Option<FailedIn>);

/// How soon a record not sent to the lane comes back to be sent again. SQS may have taken a copy whose
/// answer was lost; its copy is deduplicated by the record's id for 5 minutes from that send (SQS
/// API reference, SendMessage, MessageDeduplicationId), so the record must be back, and its copy
/// sent again, within them; Terraform's visibility timeouts (6 x the function's) are longer, and a
/// shorter one is kept. Its group's other records given back come back with it (a FIFO group waits
/// for every record in flight).
const RESEND_TO_LANE_WITHIN: Duration = Duration::from_secs(240);

impl<Q: QueuePort> Processor<Q> {
    /// Carries the fates out through the one carry-out: re-sent copies and dead letters
    /// (batched) and FIFO visibility changes, side by side and over by the carry deadline. Every
    /// send SQS did not confirm by then turns its record into a give-back (a batchItemFailure),
    /// never into a whole-batch failure.
    pub(super) async fn carry_out(
        &self,
        items: &[Item<'_>],
        fetched: &Fetched<'_>,
        rulings: &mut [Ruling],
        invocation: &Invocation<'_>,
        report: &mut BatchReport,
    ) {
        let failed_in = invocation.failed_in();
        // Boxed, and only with a ledger: the batch's future stays as small as without holds.
        if self.ledger.is_some() {
            Box::pin(self.write_holds(items, rulings, invocation)).await;
        }
        if rulings
            .iter()
            .any(|ruling| matches!(ruling.fate, Fate::SendToLane { .. }))
        {
            Box::pin(self.send_to_lane(items, rulings, invocation, report)).await;
        }
        let deadline = self.budget(invocation.deadline_ms).carry_deadline();
        let mut outgoing = self.outgoing(items, rulings, &failed_in, &[]);
        let (offloaded, cut_off) = if outgoing.too_large.is_empty() || self.payloads.is_none() {
            (Vec::new(), 0)
        } else {
            self.offload(items, &outgoing.too_large, deadline).await
        };
        report.payload_orphans += cut_off;
        if !offloaded.is_empty() {
            report.payloads_offloaded += u32::try_from(offloaded.len()).unwrap_or(u32::MAX);
            outgoing = self.outgoing(items, rulings, &failed_in, &offloaded);
        }
        for &(index, too_large) in &outgoing.too_large {
            tracing::error!(
                message_id = items[index].id,
                size = too_large.size,
                "cannot annotate the message within SQS's size limit: given back for the queue's redrive policy",
            );
            rulings[index].fate = Fate::GiveBack {
                reason: GiveBackReason::TooLarge,
                visibility: None,
            };
        }
        let source = self.source(items);
        let sends = [
            (source, &outgoing.to_source),
            (Destination::Dlq, &outgoing.to_dlq),
        ];
        let (unconfirmed, unchanged, ()) = futures_util::future::join3(
            self.carry.send(&sends, deadline),
            self.carry
                .change_visibility(source, &outgoing.visibility, deadline),
            async {
                if self.ledger.is_some() {
                    Box::pin(self.write_ledger(items, rulings, deadline)).await;
                }
            },
        )
        .await;
        report.sqs_requests += unconfirmed.requests + unchanged.requests;
        for (index, reason) in unconfirmed.records {
            let fate = &mut rulings[index].fate;
            tracing::error!(
                message_id = items[index].id,
                fate = fate.name(),
                error = %reason,
                "send not confirmed: record given back to SQS",
            );
            report.send_failures += 1;
            if offloaded.iter().any(|(offloaded, _)| *offloaded == index) {
                // Its object may be an orphan (or SQS took the copy and did not say): the
                // lifecycle rule's, unless the record's next failure offloads to it again.
                report.payload_orphans += 1;
            }
            *fate = Fate::GiveBack {
                reason: GiveBackReason::SendFailed,
                visibility: None,
            };
        }
        for (index, reason) in unchanged.records {
            tracing::warn!(
                message_id = items[index].id,
                error = %reason,
                "visibility not changed: the record reappears after its visibility timeout",
            );
        }
        if self.payloads.is_some() {
            Box::pin(self.settle_payloads(items, fetched, rulings, deadline, report)).await;
        }
        if self.ledger.is_some() {
            Box::pin(self.clear_finished_holds(items, rulings, deadline)).await;
            Box::pin(self.write_keys_done(items, rulings, invocation, deadline)).await;
            report.held_heads = Box::pin(self.count_held_heads(items, rulings, deadline)).await;
        }
    }

    /// Sends each record bound for the retry lane there, in the batch's order, one at a time: each
    /// group's position is written down in the ledger first (its later records then follow), and
    /// a record whose write or send fails is given back with the rest of its group's records bound
    /// there, so that none passes another in the lane.
    async fn send_to_lane(
        &self,
        items: &[Item<'_>],
        rulings: &mut [Ruling],
        invocation: &Invocation<'_>,
        report: &mut BatchReport,
    ) {
        let failed_in = invocation.failed_in();
        let now = self.clock.now_ms();
        let deadline = self.budget(invocation.deadline_ms).carry_deadline();
        let mut stopped: Vec<&str> = Vec::new();
        let back_within = RESEND_TO_LANE_WITHIN.min(self.config.source.visibility_timeout);
        for (item, ruling) in items.iter().zip(rulings.iter_mut()) {
            let Fate::SendToLane { held } = ruling.fate else {
                continue;
            };
            let group = item.group().unwrap_or_default();
            let sent = if stopped.contains(&group) {
                Err("an earlier record of its group was not sent to the lane".to_owned())
            } else {
                let sending =
                    self.send_one_to_lane(item, ruling, (now, &failed_in), invocation, report);
                by_deadline(deadline, sending)
                    .await
                    .unwrap_or_else(|| Err("cut off at the carry-out's deadline".to_owned()))
            };
            if let Err(reason) = sent {
                tracing::error!(
                    message_id = item.id,
                    group,
                    error = %reason,
                    "record not sent to the retry lane: given back, with its group's later records",
                );
                stopped.push(group);
                // A follower was not tried: it comes back untried, with its head.
                let reason = if held {
                    GiveBackReason::SendFailed
                } else {
                    GiveBackReason::GroupBlocked
                };
                ruling.fate = Fate::GiveBack {
                    reason,
                    visibility: Some(back_within),
                };
            }
        }
    }

    /// Writes down that `item` leaves its group for the lane, then sends its copy there, marked
    /// with its position and group ([`LaneMark`]): the reason when either failed.
    async fn send_one_to_lane(
        &self,
        item: &Item<'_>,
        ruling: &Ruling,
        failure: Failure<'_>,
        invocation: &Invocation<'_>,
        report: &mut BatchReport,
    ) -> Result<(), String> {
        let (Some(ledger), Some(lane), &Fate::SendToLane { held }) =
            (&self.ledger, self.config.lane_url.as_deref(), &ruling.fate)
        else {
            return Err("no retry lane and attempt ledger".to_owned());
        };
        let position = item
            .record
            .attributes
            .sequence_number
            .as_deref()
            .and_then(Position::parse)
            .ok_or("its record has no SequenceNumber")?;
        let mark = LaneMark {
            held,
            position,
            key: group_key(
                item.record.event_source_arn.as_deref().unwrap_or_default(),
                item.group().unwrap_or_default(),
            ),
        };
        let place = if held { KeyPlace::Held } else { KeyPlace::Lane };
        ledger
            .record_key_left(&mark.key, position, place)
            .await
            .map_err(|error| format!("the attempt ledger did not write its group down: {error}"))?;
        let error = ruling
            .error
            .as_deref()
            .cloned()
            .unwrap_or_else(follows_group);
        let copy = self
            .lane_copy(item, failure, &error, item.attempts_before, Some(&mark))
            .map_err(|too_large| too_large.to_string())?;
        self.send_now(Destination::Url(lane), copy, invocation.deadline_ms, report)
            .await?;
        // Should its delete be lost, it comes back to its source done: its copy is in the lane.
        if let Err(error) = ledger.record_in_lane(item.id).await {
            tracing::warn!(message_id = item.id, %error, "its copy in the retry lane not written down: should it come back to its source, it is sent there again");
        }
        Ok(())
    }

    /// With `hold`: the heads holding a group of this batch's queue, for the `HeldHeads` gauge
    /// the Held alarm watches. A held head comes back only every 11 h 40 min, so a count from the
    /// batches that hold would fall to zero at the next batch of another group: the ledger is
    /// asked instead, at most once a minute per container, and after any batch that held or
    /// finished a head. `None` when this batch did not count (or the ledger did not answer in
    /// time): the line leaves the gauge out and the alarm keeps its state.
    async fn count_held_heads(
        &self,
        items: &[Item<'_>],
        rulings: &[Ruling],
        deadline: Option<Instant>,
    ) -> Option<u32> {
        let Some(ledger) = &self.ledger else {
            return None;
        };
        if !matches!(
            self.config.fifo_on_dead_letter,
            FifoOnDeadLetter::Hold { .. }
        ) {
            return None;
        }
        let now = self.clock.now_ms();
        let changed = items.iter().zip(rulings).any(|(item, ruling)| {
            let came_back_held = matches!(
                item.head,
                HeadStatus::Held | HeadStatus::ReleasedToDeadLetter
            );
            let newly_held = is_held(ruling) && !is_renewal(item, ruling);
            came_back_held || newly_held || matches!(ruling.fate, Fate::SendToLane { held: true })
        });
        let due = lock(&self.held_counted_at)
            .is_none_or(|at| now.saturating_sub(at) >= HELD_COUNT_EVERY_MS);
        if !changed && !due {
            return None;
        }
        let queue_arn = items
            .iter()
            .find_map(|item| item.record.event_source_arn.as_deref())
            .unwrap_or_default();
        match by_deadline(deadline, ledger.held()).await {
            Some(Ok(held)) => {
                *lock(&self.held_counted_at) = Some(now);
                // The lane's holds count with the source's: one function reads both, under one name.
                let of_this_queue = held.iter().filter(|(_, hold)| {
                    hold.queue_arn == queue_arn || self.is_lane(&hold.queue_arn)
                });
                Some(u32::try_from(of_this_queue.count()).unwrap_or(u32::MAX))
            }
            Some(Err(error)) => {
                tracing::warn!(%error, "held heads not counted: the HeldHeads gauge is left out of this batch's figures");
                None
            }
            None => None,
        }
    }

    /// Ends the hold of each held head whose dead letter SQS confirmed (released there by an
    /// operator, or held too long): `dlq held` no longer lists it. A clear that fails leaves a
    /// stale listing, dropped when the next `dlq held` finds the head gone.
    async fn clear_finished_holds(
        &self,
        items: &[Item<'_>],
        rulings: &[Ruling],
        deadline: Option<Instant>,
    ) {
        let Some(ledger) = &self.ledger else { return };
        let finished = items.iter().zip(rulings).filter(|(item, ruling)| {
            matches!(
                item.head,
                HeadStatus::Held | HeadStatus::ReleasedToDeadLetter
            ) && matches!(ruling.fate, Fate::DeadLetter { .. })
        });
        let clears = futures_util::future::join_all(finished.map(|(item, _)| async move {
            if let Err(error) = ledger.clear_hold(item.id).await {
                tracing::warn!(message_id = item.id, %error, "finished hold not cleared from the attempt ledger");
            }
        }));
        // A clear cut off leaves a stale listing, dropped by the next `dlq held`.
        let _ = by_deadline(deadline, clears).await;
    }

    /// Writes the hold of each head held at this receive, or come back held, before its wait is
    /// set: a head whose hold an operator released meanwhile comes back at once
    /// ([`GiveBackReason::Released`]), and one whose new hold the ledger did not confirm after its
    /// visibility timeout, to be held again, instead of waiting 11 h 40 min where no operator sees
    /// it.
    async fn write_holds(
        &self,
        items: &[Item<'_>],
        rulings: &mut [Ruling],
        invocation: &Invocation<'_>,
    ) {
        let Some(ledger) = &self.ledger else { return };
        let holding: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].receive_count > 0 && is_held(&rulings[i]))
            .collect();
        if holding.is_empty() {
            return;
        }
        let now = self.clock.now_ms();
        let holds: Vec<_> = holding
            .iter()
            .map(|&i| {
                // A renewal keeps the failure written with the hold.
                let error = rulings[i].error.as_deref();
                (items[i].delivery(), hold_on(&items[i], error, now))
            })
            .collect();
        let deadline = self.budget(invocation.deadline_ms).carry_deadline();
        let written = fifo::write_holds(ledger.as_ref(), &holds, deadline).await;
        for (&index, written) in holding.iter().zip(written) {
            let message_id = items[index].id;
            rulings[index].fate = match written {
                HoldWritten::Held => continue,
                HoldWritten::Released => {
                    tracing::info!(
                        message_id,
                        "its hold was released while it was in flight: it comes back at once",
                    );
                    Fate::GiveBack {
                        reason: GiveBackReason::Released,
                        visibility: Some(Duration::ZERO),
                    }
                }
                HoldWritten::NotWritten => {
                    tracing::warn!(
                        message_id,
                        "its hold not written to the attempt ledger: it comes back after its visibility timeout to be held again",
                    );
                    Fate::GiveBack {
                        reason: GiveBackReason::Held,
                        visibility: None,
                    }
                }
            };
        }
    }

    /// Writes down in the ledger each FIFO record given back untried (held back behind its group,
    /// not started, deferred), the first wait in place of each group's head, and each hold, by the
    /// carry deadline ([`fifo::write_down`]).
    async fn write_ledger(
        &self,
        items: &[Item<'_>],
        rulings: &[Ruling],
        deadline: Option<Instant>,
    ) {
        let Some(ledger) = &self.ledger else { return };
        let now = self.clock.now_ms();
        let writes = items
            .iter()
            .zip(rulings)
            .filter(|(item, _)| item.receive_count > 0)
            .filter_map(|(item, ruling)| {
                let write = match ruling.fate {
                    // Holds were written first (`write_holds`).
                    _ if is_held(ruling) => return None,
                    // Its first wait in place at its group's head: its waits' age counts from now.
                    Fate::GiveBack {
                        reason: reason @ (GiveBackReason::FifoRetry | GiveBackReason::FifoDefer),
                        ..
                    } if item.head_since_s == 0 => LedgerWrite::HeadWait {
                        since_ms: now,
                        untried: reason == GiveBackReason::FifoDefer,
                    },
                    ref fate if untried(fate) => LedgerWrite::Untried,
                    _ => return None,
                };
                Some((item.delivery(), write))
            })
            .collect();
        fifo::write_down(ledger.as_ref(), writes, deadline).await;
    }

    /// Waits for what `handler` left running past the records' cut-off, within half the time left
    /// to carry fates out.
    pub(super) async fn wait_for_flush<H: RecordHandler>(
        &self,
        handler: &H,
        invocation: &Invocation<'_>,
    ) {
        let flushed = handler.flush();
        match self.budget(invocation.deadline_ms).pending_writes() {
            Some(within) => {
                let _ = tokio::time::timeout(within, flushed).await;
            }
            None => flushed.await,
        }
    }

    /// The queue the batch came from: the configured one, else the one its records name.
    fn source<'a>(&'a self, items: &[Item<'a>]) -> Destination<'a> {
        match &self.config.source_queue_url {
            Some(url) => Destination::Url(url),
            None => Destination::Arn(
                items
                    .iter()
                    .find_map(|item| item.record.event_source_arn.as_deref())
                    .unwrap_or_default(),
            ),
        }
    }

    /// What the fates send and change: copies for the source queue and the DLQ, visibility
    /// changes for FIFO records given back in place, and the copies too large to annotate;
    /// `offloaded` names the records whose body went to S3, whose copies carry the pointer.
    fn outgoing<'r>(
        &self,
        items: &'r [Item<'r>],
        rulings: &[Ruling],
        failed_in: &Option<FailedIn>,
        offloaded: &[(usize, Pointer<'_>)],
    ) -> Outgoing<'r> {
        let now = self.clock.now_ms();
        let mut outgoing = Outgoing::default();
        for (index, (item, ruling)) in items.iter().zip(rulings).enumerate() {
            let error = ruling.error.as_deref();
            let failure = (now, failed_in);
            let pointer = || {
                offloaded
                    .iter()
                    .find(|(offloaded, _)| *offloaded == index)
                    .map(|(_, pointer)| pointer)
            };
            let (outbox, message) = match ruling.fate {
                Fate::Retry { attempts, delay } => (
                    &mut outgoing.to_source,
                    self.copy(item, failure, error, attempts, delay, pointer()),
                ),
                Fate::Defer { delay } => (
                    &mut outgoing.to_source,
                    self.copy(item, failure, error, item.attempts_before, delay, pointer()),
                ),
                Fate::DeadLetter { attempts } => (
                    &mut outgoing.to_dlq,
                    self.dead_letter(item, failure, error, attempts, pointer()),
                ),
                Fate::GiveBack {
                    visibility: Some(timeout),
                    ..
                } => {
                    if let Some(receipt_handle) = item.record.receipt_handle.as_deref() {
                        let change = VisibilityChange {
                            receipt_handle,
                            timeout,
                        };
                        outgoing.visibility.push((index, change));
                    }
                    continue;
                }
                // Sent to the lane already, one by one (`send_to_lane`).
                Fate::Done | Fate::GiveBack { .. } | Fate::SendToLane { .. } => continue,
            };
            match message {
                Ok(message) => outbox.push(index, message),
                Err(too_large) => outgoing.too_large.push((index, too_large)),
            }
        }
        outgoing
    }

    /// The re-sent copy for a retry or a deferral (with the pointer to its body when it was
    /// offloaded).
    fn copy<'r>(
        &self,
        item: &'r Item<'r>,
        (now, failed_in): Failure<'_>,
        error: Option<&RecordError>,
        attempts: u32,
        delay: Duration,
        offloaded: Option<&Pointer<'_>>,
    ) -> Result<OutgoingMessage<'r>, TooLarge> {
        let wait_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        let hop = whole_seconds(delay) > MAX_DELAY_SECONDS;
        let due_at = hop.then(|| Timestamp(now.saturating_add(wait_ms)));
        let meta = self.meta(item, (now, failed_in), error, attempts, due_at);
        let mut message = carry(item.record, meta, offloaded)?;
        message.delay_seconds = whole_seconds(delay).min(MAX_DELAY_SECONDS);
        Ok(message)
    }

    /// The dead letter for a record: its body as it came, the failure metadata, and on a FIFO DLQ
    /// a group and a deduplication id.
    pub(crate) fn dead_letter<'r>(
        &self,
        item: &'r Item<'r>,
        failure: Failure<'_>,
        error: Option<&RecordError>,
        attempts: u32,
        offloaded: Option<&Pointer<'_>>,
    ) -> Result<OutgoingMessage<'r>, TooLarge> {
        let mut meta = self.meta(item, failure, error, attempts, None);
        meta.dead_lettered_at = Some(Timestamp(failure.0));
        let mut message = carry(item.record, meta, offloaded)?;
        if self.dlq_url().is_some_and(|url| url.ends_with(".fifo")) {
            // A FIFO DLQ needs a group and a deduplication id; the message id is unique per message.
            message.group_id = Some(Text::from(item.group().unwrap_or("redrive")));
            message.deduplication_id = Some(Text::from(item.id));
        }
        Ok(message)
    }

    /// A Kafka record's copy for the retry lane (an SQS FIFO queue): its body, origin and
    /// failure metadata, in its key's message group, deduplicated by its position (a batch Lambda
    /// delivers again sends the same copy, which SQS drops within five minutes).
    pub(crate) fn lane_copy<'r>(
        &self,
        item: &'r Item<'r>,
        failure: Failure<'_>,
        error: &RecordError,
        attempts: u32,
        mark: Option<&LaneMark>,
    ) -> Result<OutgoingMessage<'r>, TooLarge> {
        let meta = self.meta(item, failure, Some(error), attempts, None);
        let mut message = carry(item.record, meta, None)?;
        message.group_id = item.group().map(Text::from);
        message.deduplication_id = Some(Text::from(item.id));
        if let Some(mark) = mark {
            message
                .attributes
                .retain(|(name, _)| name.0 != LANE_ATTRIBUTE);
            message.attributes.push(mark.attribute());
        }
        Ok(message)
    }

    /// Sends one message to `destination` now, by the carry-out's deadline: the reason when SQS
    /// did not confirm it. The stream and Kafka runners carry out a record's fate before the
    /// next record of its shard or partition starts.
    pub(super) async fn send_now(
        &self,
        destination: Destination<'_>,
        message: OutgoingMessage<'_>,
        deadline_ms: u64,
        report: &mut BatchReport,
    ) -> Result<(), String> {
        let mut outbox = Outbox::default();
        outbox.push(0, message);
        let deadline = self.budget(deadline_ms).carry_deadline();
        let unconfirmed = self.carry.send(&[(destination, &outbox)], deadline).await;
        report.sqs_requests += unconfirmed.requests;
        match unconfirmed.records.into_iter().next() {
            Some((_, reason)) => Err(reason),
            None => Ok(()),
        }
    }

    /// The metadata a copy or a dead letter carries: the record's own, updated by this failure.
    fn meta<'r>(
        &self,
        item: &Item<'r>,
        (now, failed_in): Failure<'_>,
        error: Option<&RecordError>,
        attempts: u32,
        due_at: Option<Timestamp>,
    ) -> Meta<'r> {
        let mut meta = item.meta.as_deref().cloned().unwrap_or_else(|| Meta {
            v: META_VERSION,
            attempts: 0,
            due_at: None,
            origin_queue_arn: item.record.event_source_arn.clone().unwrap_or_default(),
            origin_message_id: Text::from(item.id),
            first_failure_at: Timestamp(now),
            last_failure_at: Timestamp(now),
            error_class: ErrorClass::Transient,
            error_kind: Text::default(),
            error_message: Text::default(),
            reprocess_count: 0,
            redriven_at: None,
            dead_lettered_at: None,
            failed_in: None,
            attributes: None,
        });
        meta.v = META_VERSION;
        meta.attempts = attempts;
        meta.due_at = due_at;
        meta.dead_lettered_at = None;
        if let Some(error) = error {
            meta.last_failure_at = Timestamp(now);
            meta.failed_in = failed_in.clone();
            meta.error_class = error.class();
            meta.error_kind = Text::from(error.kind().to_owned());
            meta.error_message =
                Text::from(truncate(error.message(), MAX_ERROR_MESSAGE_BYTES).into_owned());
        }
        meta
    }
}

/// How often a container counts the held heads for the `HeldHeads` gauge, at the most (the
/// alarm's period is a minute).
const HELD_COUNT_EVERY_MS: u64 = 60_000;

/// What a batch's fates send and change.
#[derive(Default)]
struct Outgoing<'r> {
    to_source: Outbox<'r>,
    to_dlq: Outbox<'r>,
    visibility: Vec<(usize, VisibilityChange<'r>)>,
    /// Records whose copy would not fit in a message.
    too_large: Vec<(usize, TooLarge)>,
}

/// The copy of `record` with `meta`: its own body, or the pointer to where it was offloaded.
fn carry<'r>(
    record: &'r SqsRecord<'r>,
    meta: Meta<'r>,
    offloaded: Option<&Pointer<'_>>,
) -> Result<OutgoingMessage<'r>, TooLarge> {
    match offloaded {
        Some(pointer) => annotate_offloaded(record, meta, pointer),
        None => annotate(record, meta),
    }
}

/// A FIFO head given back holding its group: held at this receive, or come back held.
fn is_held(ruling: &Ruling) -> bool {
    matches!(
        ruling.fate,
        Fate::GiveBack {
            reason: GiveBackReason::Held,
            ..
        }
    )
}

/// A FIFO head that came back held: given back held again, with no failure of its own.
fn is_renewal(item: &Item<'_>, ruling: &Ruling) -> bool {
    item.receive_count > 0 && ruling.error.is_none() && is_held(ruling)
}

/// The hold `item`'s group is held on at this receive, for `error` (none for a renewal).
fn hold_on(item: &Item<'_>, error: Option<&RecordError>, now_ms: u64) -> Hold {
    Hold::on(
        item.receive_count,
        item.record.receipt_handle.as_deref().unwrap_or_default(),
        item.record.event_source_arn.as_deref().unwrap_or_default(),
        error,
        now_ms,
    )
}

/// Why a record follows its group to the lane untried: what its copy there says.
fn follows_group() -> RecordError {
    RecordError::transient(
        "follows_group",
        "its group is held on an earlier record in the retry lane: it keeps the group's order there",
    )
}

/// Whether a fate gives its record back without having tried it.
fn untried(fate: &Fate) -> bool {
    matches!(
        fate,
        Fate::GiveBack {
            reason: GiveBackReason::GroupBlocked
                | GiveBackReason::Deadline
                | GiveBackReason::FifoDefer
                | GiveBackReason::Released,
            ..
        }
    )
}
