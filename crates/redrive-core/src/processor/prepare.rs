//! Preparing a batch: its records as the processor handles them, their attempts recounted and
//! their standing with the retry lane read from the books (one read each, off the happy path).
use super::{FifoPlace, Item, Processor};
use crate::envelope::{Meta, Timestamp};
use crate::error::BatchError;
use crate::fifo::FifoOnDeadLetter;
use crate::handler::Invocation;
use crate::ledger::{group_key, Delivery, HeadStatus, LaneMark, LaneState, Position, SourceRecord};
use crate::port::QueuePort;
use redrive_event::SqsRecord;

impl<Q: QueuePort> Processor<Q> {
    /// The records as the processor handles them, and whether any comes from a FIFO queue (found
    /// in the same pass: each pass over a large batch's records is a cache miss per record).
    pub(super) fn prepare<'r>(
        &self,
        records: &'r [SqsRecord<'r>],
    ) -> Result<(Vec<Item<'r>>, bool), BatchError> {
        let mut items = Vec::with_capacity(records.len());
        let mut any_fifo = false;
        for (index, record) in records.iter().enumerate() {
            let id = record
                .message_id
                .as_deref()
                .filter(|id| !id.is_empty())
                .ok_or(BatchError::MissingMessageId { index })?;
            let mut meta = match Meta::of(record) {
                Some(Ok(meta)) => Some(Box::new(meta)),
                Some(Err(error)) => {
                    tracing::warn!(
                        message_id = id,
                        %error,
                        "unreadable redrive attribute: handled as a first attempt",
                    );
                    None
                }
                None => None,
            };
            let fifo = record.is_fifo();
            any_fifo |= fifo;
            // FIFO records are retried in place, so SQS's own count is the attempt count (less
            // the deliveries the ledger knows were untried: `recount`), after a follower's tries
            // in its source.
            let mut tried_in_source = 0;
            let (attempts_before, receive_count) = if fifo {
                let receive_count = record.receive_count().max(1);
                tried_in_source = self.tries_before_following(record, meta.as_deref());
                (tried_in_source + receive_count - 1, receive_count)
            } else {
                let attempts = meta.as_deref_mut().map_or(0, |meta| {
                    self.recognise_moved_back(id, meta);
                    meta.attempts
                });
                (attempts, 0)
            };
            items.push(Item {
                record,
                id,
                meta,
                attempts_before,
                fifo: FifoPlace {
                    receive_count,
                    tried_in_source,
                    ..FifoPlace::default()
                },
            });
        }
        Ok((items, any_fifo))
    }

    /// Takes the deliveries the ledger knows were untried off the attempts of each FIFO record
    /// received before (none on the happy path, where every receive count is 1), so that the
    /// attempt a handler sees is exact too: one read per batch that holds such records, which
    /// only a batch with give-backs (and their ledger writes) makes. A ledger that fails or is
    /// slow leaves SQS's count, which errs towards fewer attempts.
    pub(super) async fn recount(&self, items: &mut [Item<'_>], invocation: &Invocation<'_>) {
        let Some(books) = &self.books else { return };
        let suspects: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].fifo.receive_count >= 2)
            .collect();
        if suspects.is_empty() {
            return;
        }
        let deliveries: Vec<Delivery<'_>> = suspects.iter().map(|&i| items[i].delivery()).collect();
        let within = self.budget(invocation.deadline_ms).ledger_read();
        let counts = books.recount(&deliveries, within).await;
        for (&index, count) in suspects.iter().zip(counts) {
            match count {
                Some(count) => {
                    // An operator's release gives a fresh set, the source's tries included.
                    let carried = match count.head {
                        HeadStatus::ReleasedToRetry => 0,
                        _ => items[index].fifo.tried_in_source,
                    };
                    items[index].attempts_before = carried + count.attempts_before;
                    items[index].fifo.head = count.head;
                    items[index].fifo.head_since_s = count
                        .head_since_ms
                        .map_or(0, |ms| u32::try_from(ms / 1000).unwrap_or(u32::MAX));
                    if count.in_lane {
                        items[index].fifo.lane = LaneState::Sent;
                    }
                }
                None => items[index].fifo.head = HeadStatus::Unread,
            }
        }
    }

    /// With a retry lane and a hold ([`crate::lane`]): on a batch from the source, whether each
    /// record's group waits in the lane (one read of the batch's groups: the happy path's only
    /// extra call); on a batch from the lane, which records are heads held there, to be held
    /// until an operator releases them.
    pub(super) async fn read_lane_states(
        &self,
        items: &mut [Item<'_>],
        invocation: &Invocation<'_>,
    ) {
        let Some(books) = &self.books else { return };
        if self.sends_to_lane(items) {
            let records: Vec<SourceRecord> = items
                .iter()
                .map(|item| SourceRecord {
                    key: group_key_of(item),
                    position: position_of(item),
                    copy_unknown: item.fifo.head == HeadStatus::Unread,
                })
                .collect();
            let within = self.budget(invocation.deadline_ms).ledger_read();
            let states = books.lane_states(&records, within).await;
            for (item, state) in items.iter_mut().zip(states) {
                if item.fifo.lane != LaneState::Sent {
                    item.fifo.lane = state;
                }
            }
        } else if self.holds_in_lane() && self.batch_is_from_lane(items) {
            let marks: Vec<Option<LaneMark>> =
                items.iter().map(|item| LaneMark::of(item.record)).collect();
            let copies: Vec<(String, Position)> = marks
                .iter()
                .flatten()
                .map(|mark| (mark.key.clone(), mark.position))
                .collect();
            let within = self.budget(invocation.deadline_ms).ledger_read();
            let mut took_effect = books.took_effect_in_lane(&copies, within).await.into_iter();
            for (item, mark) in items.iter_mut().zip(marks) {
                let Some(mark) = mark else { continue };
                if took_effect.next() == Some(true) {
                    item.fifo.lane = LaneState::SentTwice;
                } else if mark.held
                    && matches!(item.fifo.head, HeadStatus::Free | HeadStatus::Unread)
                {
                    item.fifo.lane = LaneState::HeldInLane;
                }
            }
        }
    }

    /// Whether held groups wait in the retry lane: a lane, a hold and the ledger.
    fn holds_in_lane(&self) -> bool {
        self.books.is_some()
            && self.config.lane_url.is_some()
            && matches!(
                self.config.fifo_on_dead_letter,
                FifoOnDeadLetter::Hold { .. }
            )
    }

    /// Whether this FIFO batch sends held heads to the lane: it holds groups there and does not
    /// come from the lane itself (where a head is held in place).
    pub(crate) fn sends_to_lane(&self, items: &[Item<'_>]) -> bool {
        self.holds_in_lane() && !self.batch_is_from_lane(items)
    }

    /// Whether the batch comes from the retry lane (its queue's name is the lane URL's last part).
    pub(crate) fn batch_is_from_lane(&self, items: &[Item<'_>]) -> bool {
        let queue_arn = items
            .iter()
            .find_map(|item| item.record.event_source_arn.as_deref())
            .unwrap_or_default();
        self.is_lane(queue_arn)
    }

    /// Whether `queue_arn` names the retry lane.
    pub(crate) fn is_lane(&self, queue_arn: &str) -> bool {
        let name = |text: &str, separator: char| text.rsplit(separator).next().map(str::to_owned);
        self.config
            .lane_url
            .as_deref()
            .is_some_and(|url| name(url, '/') == name(queue_arn, ':'))
    }

    /// The tries a record in the lane had in its source before it followed its group there (its
    /// copy's attempts): a follower is sent there untried, but one back in its source after a
    /// later record of its group left may follow after tries in place. A held head's copy carries
    /// none: it is tried only once an operator releases it, afresh. (A dead letter redriven from
    /// the lane to its source still carries its mark, and gets a fresh set there.)
    fn tries_before_following(&self, record: &SqsRecord<'_>, meta: Option<&Meta<'_>>) -> u32 {
        match (meta, LaneMark::of(record)) {
            (Some(meta), Some(mark))
                if !mark.held
                    && self.is_lane(record.event_source_arn.as_deref().unwrap_or_default()) =>
            {
                meta.attempts
            }
            _ => 0,
        }
    }

    /// A dead letter that SQS moved back to a standard queue (a move task re-sends it as it is) is
    /// known by its `deadLetteredAt`, or, written before that mark, by its attempts used up: it
    /// gets a fresh set of attempts and counts as redriven, as if the reprocessor had sent it
    /// home, so the reprocess cap sees every round, a permanent failure's too.
    fn recognise_moved_back(&self, id: &str, meta: &mut Meta<'_>) {
        let moved_back =
            meta.dead_lettered_at.is_some() || meta.attempts >= self.config.retry.max_attempts;
        if !moved_back {
            return;
        }
        meta.dead_lettered_at = None;
        meta.attempts = 0;
        meta.reprocess_count = meta.reprocess_count.saturating_add(1);
        meta.redriven_at = Some(Timestamp(self.clock.now_ms()));
        tracing::info!(
            message_id = id,
            reprocess_count = meta.reprocess_count,
            "arrived with its attempts used up (moved back from the DLQ): a fresh set of attempts"
        );
    }
}

/// The ledger key of a FIFO record's group in its queue.
pub(super) fn group_key_of(item: &Item<'_>) -> String {
    group_key(
        item.record.event_source_arn.as_deref().unwrap_or_default(),
        item.group().unwrap_or_default(),
    )
}

/// A FIFO record's position in its source: its `SequenceNumber`.
pub(super) fn position_of(item: &Item<'_>) -> Option<Position> {
    item.record
        .attributes
        .sequence_number
        .as_deref()
        .and_then(Position::parse)
}
