//! Carrying a batch's fates out: the copies and dead letters the fates make, sent through the one
//! [`Courier`](crate::carry::Courier), and FIFO visibility changes; what SQS does not confirm is
//! given back.
use std::time::Duration;

use tokio::time::Instant;

use super::decide::Ruling;
use super::payloads::Fetched;
use super::prepare::{group_key_of, position_of};
use super::record::Failure;
use super::run::follows_group;
use super::{FifoOnDeadLetter, Item, Processor};
use crate::carry::Destination;
use crate::clock::by_deadline;
use crate::fate::{Fate, GiveBackReason};
use crate::handler::Invocation;
use crate::ledger::{HeadStatus, Hold, HoldWritten, KeyPlace, LaneMark, LedgerWrite, Position};
use crate::metrics::BatchReport;
use crate::port::QueuePort;

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
        if self.books.is_some() {
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
                if self.books.is_some() {
                    Box::pin(self.write_down(items, rulings, deadline)).await;
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
        if self.books.is_some() {
            Box::pin(self.close_books(items, rulings, invocation, deadline, report)).await;
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
        let (Some(books), Some(lane), &Fate::SendToLane { held }) =
            (&self.books, self.config.lane_url.as_deref(), &ruling.fate)
        else {
            return Err("no retry lane and attempt ledger".to_owned());
        };
        let position = position_of(item).ok_or("its record has no SequenceNumber")?;
        let mark = LaneMark {
            held,
            position,
            key: group_key_of(item),
        };
        let place = if held { KeyPlace::Held } else { KeyPlace::Lane };
        books.key_leaves(&mark.key, position, place).await?;
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
        books.copy_in_lane(item.id).await;
        Ok(())
    }

    /// The books after the sends: each held head whose dead letter SQS confirmed (released there
    /// by an operator, or held too long) is no longer listed; each record done from the lane
    /// frees its key; and, with a hold, the heads holding a group of this queue (or of its lane)
    /// are counted for the `HeldHeads` gauge, after any batch that held or finished a head.
    async fn close_books(
        &self,
        items: &[Item<'_>],
        rulings: &[Ruling],
        invocation: &Invocation<'_>,
        deadline: Option<Instant>,
        report: &mut BatchReport,
    ) {
        let Some(books) = &self.books else { return };
        let came_back_held = |item: &Item<'_>| {
            matches!(
                item.fifo.head,
                HeadStatus::Held | HeadStatus::ReleasedToDeadLetter
            )
        };
        let finished = items.iter().zip(rulings).filter(|(item, ruling)| {
            came_back_held(item) && matches!(ruling.fate, Fate::DeadLetter { .. })
        });
        books
            .clear_holds(finished.map(|(item, _)| item.id), deadline)
            .await;
        books
            .keys_done(self.keys_done(items, rulings, invocation), deadline)
            .await;
        if self.batch_is_from_lane(items) {
            // The source record of each FIFO copy received here the first time (a record
            // redriven to its source names its first origin, whose note then does nothing).
            let firsts = items
                .iter()
                .filter(|item| item.fifo.receive_count == 1 && LaneMark::of(item.record).is_some());
            let origins = firsts.filter_map(|item| Some(&*item.meta.as_deref()?.origin_message_id));
            books.copies_received(origins, deadline).await;
        }
        if !matches!(
            self.config.fifo_on_dead_letter,
            FifoOnDeadLetter::Hold { .. }
        ) {
            return;
        }
        let changed = items.iter().zip(rulings).any(|(item, ruling)| {
            // A head that came back held is given back held again, with no failure of its own.
            let renewal = item.fifo.receive_count > 0 && ruling.error.is_none();
            let newly_held = ruling.fate.holds_group() && !renewal;
            came_back_held(item)
                || newly_held
                || matches!(ruling.fate, Fate::SendToLane { held: true })
        });
        let queue_arn = items
            .iter()
            .find_map(|item| item.record.event_source_arn.as_deref())
            .unwrap_or_default();
        // The lane's holds count with the source's: one function reads both, under one name.
        let of_this_queue =
            |hold: &Hold| hold.queue_arn == queue_arn || self.is_lane(&hold.queue_arn);
        report.held_heads = books
            .count_held(of_this_queue, changed, self.clock.now_ms(), deadline)
            .await;
    }

    /// The lane's side: the key and position of each record done here (a Kafka record's offset,
    /// a FIFO record's sequence number in its source), for the books to free its key.
    fn keys_done<'a>(
        &self,
        items: &'a [Item<'a>],
        rulings: &'a [Ruling],
        invocation: &'a Invocation<'a>,
    ) -> impl Iterator<Item = (String, Position)> + 'a {
        // A FIFO copy's mark counts in the lane only: a dead letter redriven from the lane to its
        // source still carries it. A copy sent to the DLQ from the lane does not free its group: if
        // its delete is lost it comes back and may still take effect, which must come before its
        // group's later records in the source.
        let from_lane = self.batch_is_from_lane(items);
        items
            .iter()
            .zip(rulings)
            .filter(|(_, ruling)| matches!(ruling.fate, Fate::Done))
            .filter_map(
                move |(item, _)| match LaneMark::of(item.record).filter(|_| from_lane) {
                    Some(mark) => Some((mark.key, mark.position)),
                    None => {
                        let origin = item.message(invocation).kafka()?;
                        Some((origin.key_id()?, Position::offset(origin.offset)))
                    }
                },
            )
    }

    /// Writes the hold of each head held at this receive, or come back held, before its wait is
    /// set: a head whose hold an operator released meanwhile comes back at once
    /// ([`GiveBackReason::Released`]), and one whose hold the ledger did not confirm after its
    /// visibility timeout, to be held again, instead of waiting 11 h 40 min where no operator sees
    /// it or no release can reach it.
    async fn write_holds(
        &self,
        items: &[Item<'_>],
        rulings: &mut [Ruling],
        invocation: &Invocation<'_>,
    ) {
        let Some(books) = &self.books else { return };
        let holding: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].fifo.receive_count > 0 && rulings[i].fate.holds_group())
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
                (items[i].delivery(), items[i].hold(error, now))
            })
            .collect();
        let deadline = self.budget(invocation.deadline_ms).carry_deadline();
        let written = books.write_holds(&holds, deadline).await;
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
    /// not started, deferred) and the first wait in place of each group's head, by the carry
    /// deadline (holds were written before the sends).
    async fn write_down(&self, items: &[Item<'_>], rulings: &[Ruling], deadline: Option<Instant>) {
        let Some(books) = &self.books else { return };
        let now = self.clock.now_ms();
        let writes = items
            .iter()
            .zip(rulings)
            .filter(|(item, _)| item.fifo.receive_count > 0)
            .filter_map(|(item, ruling)| {
                let write = match ruling.fate {
                    _ if ruling.fate.holds_group() => return None,
                    // Its first wait in place at its group's head: its waits' age counts from now.
                    Fate::GiveBack {
                        reason: reason @ (GiveBackReason::FifoRetry | GiveBackReason::FifoDefer),
                        ..
                    } if item.fifo.head_since_s == 0 => LedgerWrite::HeadWait {
                        since_ms: now,
                        untried: reason == GiveBackReason::FifoDefer,
                    },
                    ref fate if fate.is_untried() => LedgerWrite::Untried,
                    _ => return None,
                };
                Some((item.delivery(), write))
            })
            .collect();
        books.write_down(writes, deadline).await;
    }
}
