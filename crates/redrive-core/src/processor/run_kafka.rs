//! Running a Kafka batch: its partitions side by side, each in offset order, one record at a time,
//! each record's fate decided by the judge's Kafka rule and carried out before the next record of
//! the partition, so that a key's copies reach the lane (or the DLQ) in the partition's order.
use std::collections::{BTreeSet, HashMap};

use futures_util::stream::{self, StreamExt};

use super::{Item, Processed, Processor};
use crate::carry::Destination;
use crate::clock::Cutoff;
use crate::envelope::FailedIn;
use crate::error::{PortError, RecordError};
use crate::fate::{Judge, KafkaFate, Outcome};
use crate::handler::{Invocation, RecordHandler};
use crate::kafka::{
    KafkaBatchItemFailure, KafkaEvent, KafkaEventResponse, KafkaItemIdentifier, KafkaRecord,
    MessageText,
};
use crate::ledger::{KeyPlace, Position};
use crate::metrics::BatchReport;
use crate::port::QueuePort;

impl<Q: QueuePort> Processor<Q> {
    /// Runs a Kafka batch (the fates are in [`crate::kafka`]'s docs): its partitions side by
    /// side (at most `REDRIVE_CONCURRENCY` at once), each in offset order.
    pub(super) async fn run_kafka<H: RecordHandler>(
        &self,
        handler: &H,
        event: &KafkaEvent<'_>,
        invocation: &Invocation<'_>,
    ) -> Processed<KafkaEventResponse> {
        let mut response = KafkaEventResponse::default();
        let mut report = BatchReport::default();
        // The keys with records in the lane or the DLQ from earlier batches: their records here
        // follow them there untried.
        let waiting = match self.waiting_keys(event).await {
            Ok(waiting) => waiting,
            Err(error) => {
                tracing::error!(%error, "the attempt ledger did not say which keys wait in the lane: the batch is given back untried");
                for (partition, records) in &event.records {
                    if let Some(first) = records.first() {
                        response.batch_item_failures.push(give_back(
                            &mut report,
                            partition,
                            first.offset,
                            records.len(),
                        ));
                    }
                }
                report.records = report.given_back;
                return Processed { response, report };
            }
        };
        let run = PartitionRun {
            handler,
            invocation,
            failed_in: invocation.failed_in(),
            judge: self.judge(false),
            cutoff: self.budget(invocation.deadline_ms).cutoff(),
            lane: self.config.lane_url.as_deref(),
            waiting: &waiting,
        };
        // Made first, then run: a stream that makes them from the borrowed event leaves the
        // batch's future short of `Send`.
        let partitions: Vec<_> = event
            .records
            .iter()
            .map(|(partition, records)| self.run_partition(&run, partition, records))
            .collect();
        let ran: Vec<(Option<KafkaBatchItemFailure>, BatchReport)> = stream::iter(partitions)
            .buffered(self.config.concurrency.get())
            .collect()
            .await;
        for (given_back, partition_report) in ran {
            response.batch_item_failures.extend(given_back);
            report.absorb(&partition_report);
        }
        Processed { response, report }
    }

    /// Runs one partition's records in offset order; the record it is given back from, if any.
    async fn run_partition<H: RecordHandler>(
        &self,
        run: &PartitionRun<'_, H>,
        partition: &str,
        records: &[KafkaRecord<'_>],
    ) -> (Option<KafkaBatchItemFailure>, BatchReport) {
        let mut report = BatchReport {
            records: u32::try_from(records.len()).unwrap_or(u32::MAX),
            ..BatchReport::default()
        };
        // The keys whose records left this partition in this batch (earlier batches':
        // `run.waiting`).
        let mut left_here: HashMap<String, KeyPlace> = HashMap::new();
        let mut text = MessageText::default();
        for (index, kafka) in records.iter().enumerate() {
            text.write(kafka);
            let id = text.id();
            let mut record = kafka.as_message(&text);
            // A key is looked up only while some key has records out.
            let key_id = if left_here.is_empty() && run.waiting.is_empty() {
                None
            } else {
                kafka.key_id()
            };
            let followed = key_id
                .as_ref()
                .and_then(|key| left_here.get(key).or_else(|| run.waiting.get(key)));
            let (fate, error) = match followed {
                Some(&place) => (fate_of(place), Some(follows(place))),
                None => {
                    let item = Item::new(&record, id, 0);
                    let mut message = item.message(run.invocation);
                    message.kafka = Some(kafka);
                    let outcome = self.try_record(run.handler, &message, &run.cutoff).await;
                    if let Some(error) = outcome.error() {
                        report.count_error(error.class());
                    }
                    let fate = run.judge.decide_kafka(&outcome, run.lane.is_some());
                    let error = match outcome {
                        Outcome::Failed(error) => Some(error),
                        _ => None,
                    };
                    (fate, error)
                }
            };
            let destination = match (fate, run.lane) {
                (KafkaFate::Done, _) => {
                    report.done += 1;
                    continue;
                }
                (KafkaFate::Lane, Some(lane)) => Some(Destination::Url(lane)),
                (KafkaFate::DeadLetter, _) => Some(Destination::Dlq),
                _ => None,
            };
            let place = match fate {
                KafkaFate::Lane => KeyPlace::Lane,
                _ => KeyPlace::Dlq,
            };
            let key_id = key_id.or_else(|| kafka.key_id());
            // Its copy carries where it came from.
            kafka.mark_origin(&mut record);
            let item = Item::new(&record, id, 0);
            let sent = match (destination, error.as_deref()) {
                (Some(_), Some(_))
                    if !self.key_left(key_id.as_deref(), kafka.offset, place).await =>
                {
                    false
                }
                (Some(destination), Some(error)) => {
                    let failure = (self.now_ms(), &run.failed_in);
                    self.leave(
                        destination,
                        (fate, error),
                        &item,
                        failure,
                        run.invocation.deadline_ms,
                        &mut report,
                    )
                    .await
                }
                _ => false,
            };
            if !sent {
                let from = give_back(&mut report, partition, kafka.offset, records.len() - index);
                return (Some(from), report);
            }
            match fate {
                KafkaFate::Lane => report.sent_to_lane += 1,
                _ => report.dead_lettered += 1,
            }
            if let Some(key_id) = key_id {
                left_here.insert(key_id, place);
            }
        }
        (None, report)
    }

    /// The keys of `event` that the attempt ledger knows to have records in the lane or the DLQ
    /// (none without a ledger: a key's order is then kept within a batch only). An error when
    /// the ledger did not answer for all of them: a key it could not say for may be waiting.
    async fn waiting_keys(
        &self,
        event: &KafkaEvent<'_>,
    ) -> Result<HashMap<String, KeyPlace>, PortError> {
        let Some(books) = &self.books else {
            return Ok(HashMap::new());
        };
        let keys: BTreeSet<String> = event
            .records
            .values()
            .flatten()
            .filter_map(|record| record.key_id())
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        books.waiting_keys(&keys).await
    }

    /// Writes down, before the copy is sent, that the record at `offset` of `key_id` leaves for
    /// `place`: whether it may be sent (always, without a ledger or a key).
    async fn key_left(&self, key_id: Option<&str>, offset: i64, place: KeyPlace) -> bool {
        let (Some(books), Some(key_id)) = (&self.books, key_id) else {
            return true;
        };
        match books
            .key_leaves(key_id, Position::offset(offset), place)
            .await
        {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(key = key_id, offset, %error, "given back, with the rest of its partition");
                false
            }
        }
    }

    /// Sends a record's copy to the lane or the DLQ now: whether SQS confirmed it.
    async fn leave(
        &self,
        destination: Destination<'_>,
        (fate, error): (KafkaFate, &RecordError),
        item: &Item<'_>,
        failure: (u64, &Option<FailedIn>),
        deadline_ms: u64,
        report: &mut BatchReport,
    ) -> bool {
        let copy = match fate {
            KafkaFate::Lane => self.lane_copy(item, failure, error, 1, None),
            _ => self.dead_letter(item, failure, Some(error), 1, None),
        };
        let sent = match copy {
            Ok(copy) => self.send_now(destination, copy, deadline_ms, report).await,
            Err(too_large) => Err(too_large.to_string()),
        };
        match &sent {
            Ok(()) => tracing::warn!(
                record = item.id,
                error_class = error.class().as_str(),
                error_kind = error.kind(),
                error = error.message(),
                fate = if fate == KafkaFate::Lane {
                    "retry_lane"
                } else {
                    "dead_letter"
                },
                "Kafka record failed: its partition goes on"
            ),
            Err(reason) => {
                tracing::error!(
                    record = item.id,
                    error = %reason,
                    "Kafka record's copy not confirmed: given back, with the rest of its partition",
                );
                report.send_failures += 1;
            }
        }
        sent.is_ok()
    }
}

/// What every partition of a batch runs with.
struct PartitionRun<'a, H> {
    handler: &'a H,
    invocation: &'a Invocation<'a>,
    failed_in: Option<FailedIn>,
    judge: Judge<'a>,
    cutoff: Cutoff,
    lane: Option<&'a str>,
    /// The keys with records out from earlier batches.
    waiting: &'a HashMap<String, KeyPlace>,
}

/// The fate of a record that follows its key's earlier records to `place`.
fn fate_of(place: KeyPlace) -> KafkaFate {
    match place {
        KeyPlace::Lane | KeyPlace::Held => KafkaFate::Lane,
        KeyPlace::Dlq => KafkaFate::DeadLetter,
    }
}

/// Why a record follows an earlier one of its key untried.
fn follows(place: KeyPlace) -> Box<RecordError> {
    let (kind, place) = match place {
        KeyPlace::Lane | KeyPlace::Held => ("follows_key", "the retry lane"),
        KeyPlace::Dlq => ("follows_dead_letter", "the DLQ"),
    };
    Box::new(RecordError::transient(
        kind,
        format!("an earlier record of its key is in {place}: it keeps the key's order there"),
    ))
}

/// Names `offset` in the response: Lambda delivers `partition` again from it, and the records
/// left of the partition (`left`, the record too) are not done here.
fn give_back(
    report: &mut BatchReport,
    partition: &str,
    offset: i64,
    left: usize,
) -> KafkaBatchItemFailure {
    report.given_back += u32::try_from(left).unwrap_or(u32::MAX);
    KafkaBatchItemFailure {
        item_identifier: KafkaItemIdentifier {
            partition: partition.to_owned(),
            offset,
        },
    }
}
