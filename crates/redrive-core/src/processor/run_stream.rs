//! Running a stream batch (Kinesis, DynamoDB Streams): in order, one record at a time, each record's fate decided by the
//! judge's stream rule and carried out before the next record starts.
use super::{Item, Processed, Processor};
use crate::carry::Destination;
use crate::envelope::{sqs_accepts, FailedIn, OutgoingMessage};
use crate::error::{BatchError, RecordError};
use crate::fate::{Outcome, StreamFate};
use crate::handler::{Invocation, RecordHandler};
use crate::metrics::BatchReport;
use crate::port::QueuePort;
use crate::stream::sealed::AsMessage;
use crate::stream::{StreamRecord, StreamsEventResponse};
use redrive_event::SqsRecord;

impl<Q: QueuePort> Processor<Q> {
    /// Runs a stream batch in order, deciding and carrying out each record's fate before the
    /// next starts (the fates are in [`crate::stream`]'s docs).
    pub(super) async fn run_stream<H: RecordHandler, R: StreamRecord>(
        &self,
        handler: &H,
        records: &[R],
        invocation: &Invocation<'_>,
    ) -> Result<Processed<StreamsEventResponse>, BatchError> {
        let failed_in = invocation.failed_in();
        let judge = self.judge(false);
        let cutoff = self.budget(invocation.deadline_ms).cutoff();
        let mut report = BatchReport {
            records: u32::try_from(records.len()).unwrap_or(u32::MAX),
            ..BatchReport::default()
        };
        let mut checkpoint = None;
        for (index, source) in records.iter().enumerate() {
            let Some(sequence) = source.sequence_number().filter(|s| !s.is_empty()) else {
                return Err(BatchError::MissingSequenceNumber { index });
            };
            let (record, malformed) = source.as_message();
            let item = Item::new(&record, sequence, 0);
            let outcome = match malformed {
                Some(error) => Outcome::from(Err(error)),
                None => {
                    self.try_record(handler, &item.message(invocation), &cutoff)
                        .await
                }
            };
            if matches!(outcome, Outcome::NotStarted) {
                checkpoint = Some(sequence);
                break;
            }
            let fate = judge.decide_stream(&outcome);
            if let Some(error) = outcome.error() {
                report.count_error(error.class());
            }
            match fate {
                StreamFate::Done => report.done += 1,
                StreamFate::DeadLetter => match self
                    .dead_letter_now(
                        (&item, source),
                        outcome.error(),
                        (&failed_in, invocation.deadline_ms),
                        &mut report,
                    )
                    .await
                {
                    Ok(()) => report.dead_lettered += 1,
                    Err(reason) => {
                        tracing::error!(
                            sequence_number = sequence,
                            error = %reason,
                            "dead letter not confirmed: the batch stops here",
                        );
                        report.send_failures += 1;
                        checkpoint = Some(sequence);
                        break;
                    }
                },
                StreamFate::Checkpoint => {
                    let error = outcome.error();
                    tracing::warn!(
                        sequence_number = sequence,
                        error_class = error.map(|e| e.class().as_str()),
                        error_kind = error.map(RecordError::kind),
                        error = error.map(RecordError::message),
                        "record failed: the batch stops here and Lambda retries from it"
                    );
                    checkpoint = Some(sequence);
                    break;
                }
            }
        }
        let mut response = StreamsEventResponse::default();
        if let Some(sequence) = checkpoint {
            report.given_back = report.records - report.done - report.dead_lettered;
            response.add_failure(sequence);
        }
        Ok(Processed { response, report })
    }

    /// Sends one record to the DLQ through the carry-out; the reason when SQS did not confirm it.
    /// Text SQS refuses goes as the data's base64, and data too large even so as a pointer to the
    /// record in its stream: a record that cannot be dead-lettered would hold the shard.
    async fn dead_letter_now(
        &self,
        (item, source): (&Item<'_>, &impl AsMessage),
        error: Option<&RecordError>,
        (failed_in, deadline_ms): (&Option<FailedIn>, u64),
        report: &mut BatchReport,
    ) -> Result<(), String> {
        let dead_letter = |record: &SqsRecord<'_>| {
            let item = Item::new(record, item.id, item.attempts_before);
            self.dead_letter(&item, (self.now_ms(), failed_in), error, 1, None)
                .map(OutgoingMessage::into_owned)
        };
        let message = match dead_letter(item.record) {
            Ok(message) if sqs_accepts(&message.body) => message,
            _ => match dead_letter(&source.as_encoded()) {
                Ok(message) => message,
                Err(too_large) => {
                    tracing::warn!(
                        sequence_number = item.id,
                        size = too_large.size,
                        "record too large for an SQS message: dead-lettered as a pointer; its data \
                         stays in the stream for the stream's retention",
                    );
                    dead_letter(&source.as_pointer()).map_err(|too_large| too_large.to_string())?
                }
            },
        };
        self.send_now(Destination::Dlq, message, deadline_ms, report)
            .await?;
        let error = error.expect("a dead letter has an error");
        tracing::error!(
            sequence_number = item.id,
            error_class = error.class().as_str(),
            error_kind = error.kind(),
            error = error.message(),
            fate = "dead_letter",
            "record dead-lettered"
        );
        Ok(())
    }
}
