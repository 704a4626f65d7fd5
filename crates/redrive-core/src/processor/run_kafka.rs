//! Running a Kafka batch: each partition in offset order, one record at a time, each record's fate
//! decided by the judge's Kafka rule and carried out before the next record of the partition, so
//! that a key's copies reach the lane (or the DLQ) in the partition's order.
use std::collections::HashMap;

use super::{Item, Processed, Processor};
use crate::carry::Destination;
use crate::envelope::FailedIn;
use crate::error::RecordError;
use crate::fate::{KafkaFate, Outcome};
use crate::fifo::HeadStatus;
use crate::handler::{Invocation, RecordHandler};
use crate::kafka::{KafkaBatchItemFailure, KafkaEvent, KafkaEventResponse, KafkaItemIdentifier};
use crate::metrics::BatchReport;
use crate::port::QueuePort;

impl<Q: QueuePort> Processor<Q> {
    /// Runs a Kafka batch (the fates are in [`crate::kafka`]'s docs).
    pub(super) async fn run_kafka<H: RecordHandler>(
        &self,
        handler: &H,
        event: &KafkaEvent<'_>,
        invocation: &Invocation<'_>,
    ) -> Processed<KafkaEventResponse> {
        let failed_in = invocation.failed_in();
        let judge = self.judge(false);
        let cutoff = self.budget(invocation.deadline_ms).cutoff();
        let lane = self.config.kafka_lane_url.as_deref();
        let mut report = BatchReport {
            records: u32::try_from(event.records.values().map(Vec::len).sum::<usize>())
                .unwrap_or(u32::MAX),
            ..BatchReport::default()
        };
        let mut response = KafkaEventResponse::default();
        // The keys (lane groups) whose record left for the lane or the DLQ in this batch: their
        // later records follow it there untried.
        let mut left_for: HashMap<String, KafkaFate> = HashMap::new();
        for (partition, records) in &event.records {
            for (index, kafka) in records.iter().enumerate() {
                let id = kafka.id();
                let record = kafka.as_message(id.clone());
                let group = kafka.lane_group();
                let item = Item {
                    record: &record,
                    id: &id,
                    meta: None,
                    attempts_before: 0,
                    receive_count: 0,
                    head: HeadStatus::Free,
                    head_since_s: 0,
                };
                let followed = kafka.key.is_some().then(|| left_for.get(&group)).flatten();
                let (fate, error) = match followed {
                    Some(&fate) => (fate, Some(follows(fate))),
                    None => {
                        let outcome = self.try_record(handler, &item, invocation, &cutoff).await;
                        if let Some(error) = outcome.error() {
                            report.count_error(error.class());
                        }
                        let fate = judge.decide_kafka(&outcome, lane.is_some());
                        let error = match outcome {
                            Outcome::Failed(error) => Some(error),
                            _ => None,
                        };
                        (fate, error)
                    }
                };
                let destination = match (fate, lane) {
                    (KafkaFate::Done, _) => {
                        report.done += 1;
                        continue;
                    }
                    (KafkaFate::Lane, Some(lane)) => Some(Destination::Url(lane)),
                    (KafkaFate::DeadLetter, _) => Some(Destination::Dlq),
                    _ => None,
                };
                let sent = match (destination, error.as_deref()) {
                    (Some(destination), Some(error)) => {
                        let failure = (self.now_ms(), &failed_in);
                        self.leave(
                            destination,
                            (fate, error),
                            &item,
                            failure,
                            invocation.deadline_ms,
                            &mut report,
                        )
                        .await
                    }
                    _ => false,
                };
                if !sent {
                    give_back(
                        &mut response,
                        &mut report,
                        partition,
                        kafka.offset,
                        records.len() - index,
                    );
                    break;
                }
                match fate {
                    KafkaFate::Lane => report.retried += 1,
                    _ => report.dead_lettered += 1,
                }
                if kafka.key.is_some() {
                    left_for.insert(group, fate);
                }
            }
        }
        Processed { response, report }
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
            KafkaFate::Lane => self.lane_copy(item, failure, error, 1),
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

/// Why a record follows an earlier one of its key untried.
fn follows(fate: KafkaFate) -> Box<RecordError> {
    let (kind, place) = match fate {
        KafkaFate::Lane => ("follows_key", "the retry lane"),
        _ => ("follows_dead_letter", "the DLQ"),
    };
    Box::new(RecordError::transient(
        kind,
        format!("an earlier record of its key is in {place}: it keeps the key's order there"),
    ))
}

/// Names `offset` in the response: Lambda delivers `partition` again from it, and the records
/// left of the partition (`left`, the record too) are not done here.
fn give_back(
    response: &mut KafkaEventResponse,
    report: &mut BatchReport,
    partition: &str,
    offset: i64,
    left: usize,
) {
    response.batch_item_failures.push(KafkaBatchItemFailure {
        item_identifier: KafkaItemIdentifier {
            partition: partition.to_owned(),
            offset,
        },
    });
    report.given_back += u32::try_from(left).unwrap_or(u32::MAX);
}
