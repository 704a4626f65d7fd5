//! The batch processor: runs the user's handler over a batch, gives every record one fate and
//! answers Lambda. A batch goes through phases, a file each, and the entry points below read as
//! that pipeline: prepare (here) → run (`run.rs`: schedule, lanes, panics, the deadline,
//! bisection; `run_stream.rs` for Kinesis) → decide (`decide.rs`, by the judge of `fate.rs`) →
//! carry out (`carry_out.rs`, the copies of `record.rs` through the one [`Courier`], the books
//! kept in [`crate::ledger`]) → answer (`answer.rs`).
mod answer;
mod carry_out;
mod decide;
mod payloads;
mod prepare;
mod record;
mod run;
mod run_kafka;
mod run_stream;

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::SqsBatchResponse;

use crate::backoff::RetryPolicy;
use crate::carry::Courier;
use crate::clock::{Budget, Clock, SystemClock};
use crate::envelope::Meta;
use crate::error::{BatchError, RecordError};
use crate::fate::{History, Outcome, SourceQueue};
use crate::fifo::FifoOnDeadLetter;
use crate::handler::{with_own_completions, BatchHandler, Invocation, Message, RecordHandler};
use crate::kafka::{KafkaEvent, KafkaEventResponse};
use crate::ledger::{AttemptLedger, Books, Delivery, HeadStatus, Hold, LaneState};
use crate::metrics::BatchReport;
use crate::payload::Payloads;
use crate::port::QueuePort;
use crate::stream::{StreamRecord, StreamsEventResponse};
use crate::sync::lock;
use answer::answer;
use payloads::Fetched;
use redrive_event::SqsRecord;

/// What a processor does with failures: where they go, how often they are retried, how many records run at once.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProcessorConfig {
    /// `None`: report-only; failures are given back to SQS and nothing is re-sent.
    pub dlq_url: Option<String>,
    /// Where re-sent copies go; looked up from the event source ARN (once per warm container) when unset.
    pub source_queue_url: Option<String>,
    /// Attempts and backoff.
    pub retry: RetryPolicy,
    /// Records are not started later than this before the Lambda deadline, which leaves time to
    /// send retries and dead letters.
    pub deadline_margin: Duration,
    /// Records handled at once. On a FIFO queue one record of each message group at a time, in
    /// order. 1 handles the records one after the other.
    pub concurrency: NonZeroUsize,
    /// What a FIFO record that would be dead-lettered means for its group.
    pub fifo_on_dead_letter: FifoOnDeadLetter,
    /// The source queue's retention and visibility timeout, which bound FIFO waits in place.
    pub source: SourceQueue,
    /// The retry lane, an SQS FIFO queue this function also reads ([`crate::ledger`]): where a
    /// Kafka record that fails transiently goes instead of holding its partition
    /// ([`crate::kafka`]; `None` gives it back to Lambda), and, with
    /// [`FifoOnDeadLetter::Hold`], where an SQS FIFO head that would hold its group waits, with
    /// the group's later records (`None` holds it in place).
    pub lane_url: Option<String>,
}

/// The default bound on records in flight: a whole batch of Lambda's default size (10) and any
/// batch without a batching window run at once, and a larger batch holds at most this many
/// downstream calls open, well under the 1,024 file descriptors a Lambda function may hold.
pub const DEFAULT_CONCURRENCY: NonZeroUsize = match NonZeroUsize::new(100) {
    Some(bound) => bound,
    None => unreachable!(),
};

impl Default for ProcessorConfig {
    /// Report-only, the default retry policy, a 2 s deadline margin, [`DEFAULT_CONCURRENCY`].
    fn default() -> Self {
        Self {
            dlq_url: None,
            source_queue_url: None,
            retry: RetryPolicy::default(),
            deadline_margin: Duration::from_secs(2),
            concurrency: DEFAULT_CONCURRENCY,
            fifo_on_dead_letter: FifoOnDeadLetter::Continue,
            source: SourceQueue::default(),
            lane_url: None,
        }
    }
}

/// What [`Processor::process`] returns: the answer for Lambda and the figures of the batch.
/// (`Processed<StreamsEventResponse>` for a stream batch.)
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Processed<R = SqsBatchResponse> {
    /// The partial batch response for Lambda.
    pub response: R,
    /// The batch's figures (one EMF line).
    pub report: BatchReport,
}

impl<R> Processed<R> {
    /// The same batch with its response put in another form (one response type for every source).
    pub fn map_response<S>(self, into: impl FnOnce(R) -> S) -> Processed<S> {
        Processed {
            response: into(self.response),
            report: self.report,
        }
    }
}

/// Runs a batch's records through a handler and carries out their fates. One processor serves all
/// of a warm container's invocations, several at once too (Lambda Managed Instances run
/// `lambda_runtime`'s concurrent mode; share it behind an `Arc`): what it keeps between batches
/// (the jitter generator, the queue URLs it looked up) is behind locks, and each batch has a bound
/// of its own.
pub struct Processor<Q> {
    carry: Courier<Q>,
    config: ProcessorConfig,
    clock: Arc<dyn Clock>,
    rng: Mutex<fastrand::Rng>,
    books: Option<Books>,
    payloads: Option<Payloads>,
}

/// A record ready for handling.
pub(crate) struct Item<'r> {
    pub(crate) record: &'r SqsRecord<'r>,
    pub(crate) id: &'r str,
    /// Boxed: most records carry none, and a slim item is cheap to build for a large batch.
    pub(crate) meta: Option<Box<Meta<'r>>>,
    pub(crate) attempts_before: u32,
    /// Where a FIFO record stands (nothing for any other source).
    pub(crate) fifo: FifoPlace,
}

/// Where a FIFO record stands: its receives, its group's hold and the retry lane, as SQS and the
/// books have them. Plain values, so that an item of a large batch stays slim.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FifoPlace {
    /// SQS's receive count (its attempts are counted from it); 0 on a standard queue, whose
    /// copies carry their attempts.
    pub(crate) receive_count: u32,
    /// Whether the ledger holds its group on it, and what an operator decided.
    pub(crate) head: HeadStatus,
    /// With the ledger: when it began to wait in place at its group's head, in seconds since the
    /// epoch; 0 when it has not, or the ledger did not say.
    pub(crate) head_since_s: u32,
    /// With a retry lane: whether it follows its group there, or holds it there.
    pub(crate) lane: LaneState,
    /// In the lane, a record that followed its group there: the tries it had in its source,
    /// which its attempts there go on from.
    pub(crate) tried_in_source: u32,
}

impl<'r> Item<'r> {
    /// An item of a source without FIFO books (a stream, Kafka, a copy being re-made).
    pub(crate) fn new(record: &'r SqsRecord<'r>, id: &'r str, attempts_before: u32) -> Self {
        Self {
            record,
            id,
            meta: None,
            attempts_before,
            fifo: FifoPlace::default(),
        }
    }
    pub(crate) fn message(&'r self, invocation: &'r Invocation<'r>) -> Message<'r> {
        Message {
            record: self.record,
            id: self.id,
            meta: self.meta.as_deref(),
            attempt: self.attempts_before + 1,
            invocation,
            kafka: None,
        }
    }
    pub(crate) fn delivery(&self) -> Delivery<'r> {
        Delivery {
            message_id: self.id,
            receive_count: self.fifo.receive_count,
        }
    }
    /// The hold its group is held on at this receive, for `error` (none for a renewal).
    pub(crate) fn hold(&self, error: Option<&RecordError>, now_ms: u64) -> Hold {
        Hold::on(
            self.fifo.receive_count,
            self.record.receipt_handle.as_deref().unwrap_or_default(),
            self.record.event_source_arn.as_deref().unwrap_or_default(),
            error,
            now_ms,
        )
    }
    pub(crate) fn group(&self) -> Option<&'r str> {
        self.record.attributes.message_group_id.as_deref()
    }
    /// Its failures so far, and how long it has been failing: since the first failure or the
    /// latest redrive from the DLQ, whichever came later (the metadata of re-sent copies carries
    /// both). A FIFO record waits in place: with the ledger, since it began to wait at its group's
    /// head (its first receive is the one of the head it arrived behind, so a follower would
    /// inherit the head's age); without it, since it was first received (batches of one, where
    /// no record arrives behind another).
    pub(crate) fn history(&self, now_ms: u64, ledger: bool) -> History {
        if self.fifo.receive_count > 0 {
            let since = |ms: Option<u64>| {
                Duration::from_millis(now_ms.saturating_sub(ms.unwrap_or(now_ms)))
            };
            let sent_ms = self.record.sent_ms();
            let waiting_since = if ledger {
                (self.fifo.head_since_s > 0).then_some(u64::from(self.fifo.head_since_s) * 1000)
            } else {
                self.record.first_received_ms()
            };
            return History {
                attempts_before: self.attempts_before,
                failing_for: since(waiting_since),
                in_queue_for: since(sent_ms),
            };
        }
        let since_ms = self.meta.as_ref().map_or(now_ms, |meta| {
            let redriven_ms = meta.redriven_at.map_or(0, |at| at.0);
            meta.first_failure_at.0.max(redriven_ms)
        });
        History {
            attempts_before: self.attempts_before,
            failing_for: Duration::from_millis(now_ms.saturating_sub(since_ms)),
            in_queue_for: Duration::ZERO,
        }
    }
}

impl<Q: QueuePort> Processor<Q> {
    /// A processor that makes its SQS calls through `queue`.
    pub fn new(queue: Q, config: ProcessorConfig) -> Self {
        Self {
            carry: Courier::new(queue, config.dlq_url.clone()),
            config,
            clock: Arc::new(SystemClock),
            rng: Mutex::new(fastrand::Rng::new()),
            books: None,
            payloads: None,
        }
    }

    /// Reads Extended Client pointers and offloads copies too large for SQS through `payloads`
    /// ([`crate::payload`]). Without it a pointer reaches the handler as it came, and a copy too
    /// large to carry its failure context is given back for the queue's redrive policy.
    #[must_use]
    pub fn with_payloads(mut self, payloads: Payloads) -> Self {
        self.payloads = Some(payloads);
        self
    }

    /// Counts FIFO attempts with `ledger`: deliveries given back untried are written down there
    /// and do not count ([`crate::ledger`]). Without one, every receive of a FIFO record counts as
    /// an attempt, which is right in batches of one.
    #[must_use]
    pub fn with_ledger(mut self, ledger: Arc<dyn AttemptLedger>) -> Self {
        self.books = Some(Books::new(ledger));
        self
    }

    /// Reads the time from `clock` (tests move it by hand).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Fixes the jitter's random sequence (tests, reproducible runs).
    #[must_use]
    pub fn with_seed(self, seed: u64) -> Self {
        *lock(&self.rng) = fastrand::Rng::with_seed(seed);
        self
    }

    pub(crate) fn dlq_url(&self) -> Option<&str> {
        self.carry.dlq_url()
    }

    /// The invocation's time from now, sliced for the batch's phases.
    pub(crate) fn budget(&self, deadline_ms: u64) -> Budget {
        Budget::new(
            deadline_ms,
            self.config.deadline_margin,
            self.clock.now_ms(),
        )
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The port (tests read what it was asked).
    pub fn queue(&self) -> &Q {
        self.carry.queue()
    }

    /// The port, the processor done with.
    pub fn into_queue(self) -> Q {
        self.carry.into_queue()
    }

    /// Handles the records with `handler`, up to [`ProcessorConfig::concurrency`] at once, and
    /// carries out every record's fate. On a FIFO queue each message group is a lane: its records run
    /// one at a time in the event's order, and the lanes run side by side.
    /// `invocation` is the Lambda invocation, or only its deadline (`Context::deadline`, ms since
    /// the epoch).
    pub async fn process<'i, H: RecordHandler>(
        &self,
        handler: &H,
        records: &[SqsRecord<'_>],
        invocation: impl Into<Invocation<'i>>,
    ) -> Result<Processed, BatchError> {
        let invocation = invocation.into();
        let (mut items, fifo) = self.prepare(records)?;
        self.recount(&mut items, &invocation).await;
        if fifo {
            self.read_lane_states(&mut items, &invocation).await;
        }
        let fetched = self.fetch_payloads(&items, &invocation).await;
        fetched.lend(&mut items);
        // Boxed: the whole batch's future, nested once more in the task-local scope, is large
        // enough to overflow a 2 MiB thread stack in unoptimised builds.
        with_own_completions(Box::pin(async {
            let mut handled = self.handle_all(handler, &items, fifo, &invocation).await;
            self.wait_for_flush(handler, &invocation).await;
            fetched.restore(&mut items, &mut handled);
            Ok(self
                .conclude(&items, &fetched, handled, fifo, &invocation)
                .await)
        }))
        .await
    }

    /// Hands the whole batch to `handler`; on a permanent failure or a panic (a record may be at
    /// fault), bisects until the failing records stand alone; a transient failure or a deferral
    /// fails every record of the call alike, without halving. Then carries out every record's fate as
    /// [`Processor::process`] does.
    pub async fn process_batch<'i, B: BatchHandler>(
        &self,
        handler: &B,
        records: &[SqsRecord<'_>],
        invocation: impl Into<Invocation<'i>>,
    ) -> Result<Processed, BatchError> {
        let invocation = invocation.into();
        let (mut items, fifo) = self.prepare(records)?;
        self.recount(&mut items, &invocation).await;
        if fifo {
            self.read_lane_states(&mut items, &invocation).await;
        }
        let fetched = self.fetch_payloads(&items, &invocation).await;
        fetched.lend(&mut items);
        let mut handled = self.handle_batch(handler, &items, fifo, &invocation).await;
        fetched.restore(&mut items, &mut handled);
        Ok(self
            .conclude(&items, &fetched, handled, fifo, &invocation)
            .await)
    }

    /// Handles a Kinesis or DynamoDB Streams batch in order: a permanent failure is dead-lettered
    /// and the batch goes on; any other failure, or the deadline, ends the batch at that record,
    /// whose sequence number is the checkpoint ([`crate::stream`]).
    pub async fn process_stream<'i, H: RecordHandler, R: StreamRecord>(
        &self,
        handler: &H,
        records: &[R],
        invocation: impl Into<Invocation<'i>>,
    ) -> Result<Processed<StreamsEventResponse>, BatchError> {
        self.run_stream(handler, records, &invocation.into()).await
    }

    /// Handles a Kafka batch: each partition in offset order; a record that fails transiently goes
    /// to the retry lane and the partition goes on, a later record of its key follows it there,
    /// a permanent failure goes to the DLQ, and what cannot be sent is given back with the rest
    /// of its partition ([`crate::kafka`]).
    pub async fn process_kafka<'i, H: RecordHandler>(
        &self,
        handler: &H,
        event: &KafkaEvent<'_>,
        invocation: impl Into<Invocation<'i>>,
    ) -> Result<Processed<KafkaEventResponse>, BatchError> {
        Ok(self.run_kafka(handler, event, &invocation.into()).await)
    }

    /// The phases after running: every fate decided, carried out, and the answer for Lambda.
    async fn conclude(
        &self,
        items: &[Item<'_>],
        fetched: &Fetched<'_>,
        handled: impl IntoIterator<Item = Outcome>,
        fifo: bool,
        invocation: &Invocation<'_>,
    ) -> Processed {
        let mut rulings = self.decide_all(items, handled, fifo);
        let mut report = BatchReport {
            records: u32::try_from(items.len()).unwrap_or(u32::MAX),
            ..BatchReport::default()
        };
        self.carry_out(items, fetched, &mut rulings, invocation, &mut report)
            .await;
        answer(items, &rulings, report)
    }
}
