//! What every runner (SQS, streams, Kafka) does with one record: tries it, and makes the copies
//! its fate asks for (the re-sent copy, the dead letter, the lane's copy, each with its failure
//! metadata or the pointer to its offloaded body), and sends one of them now.
use std::time::Duration;

use super::decide::Ruling;
use super::run::deadline_error;
use super::{Item, Processor};
use crate::backoff::{whole_seconds, MAX_DELAY_SECONDS};
use crate::carry::{Destination, Outbox};
use crate::clock::Cutoff;
use crate::envelope::{
    annotate, annotate_offloaded, truncate, FailedIn, Meta, OutgoingMessage, Timestamp, TooLarge,
    MAX_ERROR_MESSAGE_BYTES, META_VERSION,
};
use crate::error::{ErrorClass, RecordError};
use crate::fate::{Fate, Outcome};
use crate::handler::{caught, Message, RecordHandler};
use crate::ledger::{LaneMark, LANE_ATTRIBUTE};
use crate::metrics::BatchReport;
use crate::payload::Pointer;
use crate::port::{QueuePort, VisibilityChange};
use redrive_event::{SqsRecord, Text};

/// When a failure is recorded (ms since the epoch) and in which invocation.
pub(super) type Failure<'f> = (u64, &'f Option<FailedIn>);

impl<Q: QueuePort> Processor<Q> {
    /// Runs the handler on one message, unless the deadline came first (the stream and Kafka
    /// runners, a record at a time).
    pub(super) async fn try_record<H: RecordHandler>(
        &self,
        handler: &H,
        message: &Message<'_>,
        cutoff: &Cutoff,
    ) -> Outcome {
        let left = cutoff.left();
        if left.is_zero() {
            return Outcome::NotStarted;
        }
        let result = tokio::time::timeout(left, caught(handler.handle(message)))
            .await
            .unwrap_or_else(|_| Err(deadline_error()));
        Outcome::from(result)
    }

    /// The queue the batch came from: the configured one, else the one its records name.
    pub(super) fn source<'a>(&'a self, items: &[Item<'a>]) -> Destination<'a> {
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
    pub(super) fn outgoing<'r>(
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

/// What a batch's fates send and change.
#[derive(Default)]
pub(super) struct Outgoing<'r> {
    pub(super) to_source: Outbox<'r>,
    pub(super) to_dlq: Outbox<'r>,
    pub(super) visibility: Vec<(usize, VisibilityChange<'r>)>,
    /// Records whose copy would not fit in a message.
    pub(super) too_large: Vec<(usize, TooLarge)>,
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
