//! The batch processor: runs the user's handler over an SQS batch, gives every record one fate
//! (decided by the fate judge, `fate.rs`), carries the fates out and answers Lambda with a partial
//! batch response.
use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::{poll_fn, Future};
use std::num::NonZeroUsize;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use aws_lambda_events::sqs::SqsBatchResponse;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;

use crate::backoff::{RetryPolicy, MAX_DELAY_SECONDS};
use crate::clock::{Clock, Cutoff, SystemClock};
use crate::envelope::{
    annotate, truncate, FailedIn, Meta, OutgoingMessage, Timestamp, MAX_ERROR_MESSAGE_BYTES,
    META_ATTRIBUTE, META_VERSION,
};
use crate::error::{BatchError, ErrorClass, RecordError};
use crate::event::{MessageAttribute, MessageAttributes, SqsRecord, Text};
use crate::fate::{Fate, GiveBackReason, History, Judge, Outcome};
use crate::lock;
use crate::metrics::BatchReport;
use crate::port::{Outbox, QueuePort, VisibilityChange};

/// Handles one message. Return a [`RecordError`] saying whether the failure is transient or
/// permanent; a panic is caught and treated as permanent (class `panic`). Several records of a
/// batch are handled at once ([`ProcessorConfig::concurrency`]), all through `&self`: state shared
/// between them needs a lock or an atomic.
pub trait RecordHandler: Sync {
    /// Handles `message`; the error says whether it is worth retrying.
    fn handle(&self, message: &Message<'_>)
        -> impl Future<Output = Result<(), RecordError>> + Send;
}

/// A handler shared by reference (several idempotency guards around one handler, say).
impl<H: RecordHandler> RecordHandler for &H {
    fn handle(
        &self,
        message: &Message<'_>,
    ) -> impl Future<Output = Result<(), RecordError>> + Send {
        (**self).handle(message)
    }
}

/// Handles a whole batch at once (a bulk write). When it fails, the processor splits the batch in
/// halves and calls it again on each half until the failing records stand alone; so records of a
/// failed call may be handed over again, and the handler must be idempotent.
pub trait BatchHandler: Sync {
    /// Handles `messages` together; an error fails the call.
    fn handle_batch(
        &self,
        messages: &[Message<'_>],
    ) -> impl Future<Output = Result<(), RecordError>> + Send;
}

/// The Lambda invocation a batch arrived in. A bare deadline converts into one, for callers that
/// have nothing else (tests, a batch from elsewhere).
#[derive(Debug, Clone, Copy, Default)]
pub struct Invocation<'a> {
    /// The Lambda deadline (`Context::deadline`, ms since the epoch).
    pub deadline_ms: u64,
    /// The function, the request id and the X-Ray trace id: written into the metadata of every
    /// copy and dead letter the batch makes (`failedIn`), so an operator finds its logs and trace.
    pub function_name: Option<&'a str>,
    /// The invocation's request id.
    pub request_id: Option<&'a str>,
    /// The invocation's X-Ray trace id.
    pub trace_id: Option<&'a str>,
}

impl From<u64> for Invocation<'_> {
    fn from(deadline_ms: u64) -> Self {
        Self {
            deadline_ms,
            ..Self::default()
        }
    }
}

impl Invocation<'_> {
    /// Time left before the deadline, on the system clock (a handler that calls something slow
    /// can give up early).
    pub fn remaining(&self) -> Duration {
        let now = crate::clock::SystemClock.now_ms();
        Duration::from_millis(self.deadline_ms.saturating_sub(now))
    }

    pub(crate) fn failed_in(&self) -> Option<FailedIn> {
        Some(FailedIn {
            function: self.function_name?.to_owned(),
            request_id: self.request_id?.to_owned(),
            trace_id: self.trace_id.map(str::to_owned),
        })
    }
}

/// When a failure is recorded (ms since the epoch) and in which invocation.
pub(crate) type Failure<'f> = (u64, &'f Option<FailedIn>);

/// Attribute that marks a body as the base64 of binary data ([`Message::data`] decodes it); it
/// stays on the DLQ copy, so whoever reads the DLQ knows too.
pub const DATA_ENCODING_ATTRIBUTE: &str = "dataEncoding";

/// What a handler sees of a record.
#[derive(Debug, Clone, Copy)]
pub struct Message<'r> {
    record: &'r SqsRecord<'r>,
    id: &'r str,
    meta: Option<&'r Meta<'r>>,
    attempt: u32,
    invocation: &'r Invocation<'r>,
}

impl<'r> Message<'r> {
    /// The message id.
    pub fn id(&self) -> &'r str {
        self.id
    }

    /// The body (empty when there is none).
    pub fn body(&self) -> &'r str {
        self.record.body.as_deref().unwrap_or_default()
    }

    /// The body as bytes. A Kinesis record whose data is not UTF-8 (gzip, protobuf, a CloudWatch
    /// Logs subscription) has its data's base64 as the body and the [`DATA_ENCODING_ATTRIBUTE`]
    /// `base64`: this decodes it. Any other body is its UTF-8 bytes.
    pub fn data(&self) -> std::borrow::Cow<'r, [u8]> {
        let encoded = self
            .attribute(DATA_ENCODING_ATTRIBUTE)
            .and_then(|value| value.string_value.as_deref())
            == Some("base64");
        match encoded.then(|| BASE64.decode(self.body()).ok()) {
            Some(Some(bytes)) => std::borrow::Cow::Owned(bytes),
            _ => std::borrow::Cow::Borrowed(self.body().as_bytes()),
        }
    }

    /// Parses the body as JSON, as `serde_json::from_str(message.body())` does. A body that does
    /// not parse is a permanent `malformed_body` error.
    pub fn json<T: Deserialize<'r>>(&self) -> Result<T, RecordError> {
        // A body as Lambda writes JSON (its quotes escaped) is read where it stands, without
        // decoding it first; what that reading leaves is decoded for serde_json.
        let quoted = self
            .record
            .body
            .as_ref()
            .and_then(|body| body.quoted_json());
        if let Some(value) = quoted.and_then(|json| redrive_event::quoted_json::from_str(json).ok())
        {
            return Ok(value);
        }
        serde_json::from_str(self.body())
            .map_err(|error| RecordError::permanent("malformed_body", error))
    }

    /// The Lambda invocation the record arrived in: its request id, trace id and deadline
    /// ([`Invocation::remaining`]).
    pub fn invocation(&self) -> &'r Invocation<'r> {
        self.invocation
    }

    /// 1 on the first delivery, 2 on the first retry, ...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// An original message attribute (unpacked if redrive had to pack them).
    pub fn attribute(&self, name: &str) -> Option<&'r MessageAttribute<'r>> {
        if name == META_ATTRIBUTE {
            return None;
        }
        self.original_attributes().get(name)
    }

    /// The original message attributes; the `redrive` attribute is left out.
    pub fn attributes(&self) -> impl Iterator<Item = (&'r str, &'r MessageAttribute<'r>)> {
        self.original_attributes()
            .iter()
            .filter(|(name, _)| &***name != META_ATTRIBUTE)
            .map(|(name, value)| (&**name, value))
    }

    /// The failure context this message carries from earlier attempts, if any.
    pub fn meta(&self) -> Option<&'r Meta<'r>> {
        self.meta
    }

    /// The message group (FIFO order, or a fair queue's tenant).
    pub fn group_id(&self) -> Option<&'r str> {
        self.record.attributes.message_group_id.as_deref()
    }

    /// The record as Lambda delivered it.
    pub fn record(&self) -> &'r SqsRecord<'r> {
        self.record
    }

    fn original_attributes(&self) -> &'r MessageAttributes<'r> {
        self.meta
            .and_then(|meta| meta.attributes.as_ref())
            .unwrap_or(&self.record.message_attributes)
    }
}

/// What a processor does with failures: where they go, how often they are retried, how many records run at once.
#[derive(Debug, Clone, PartialEq)]
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
        }
    }
}

/// What [`Processor::process`] returns: the answer for Lambda and the figures of the batch.
/// (`Processed<KinesisEventResponse>` for a stream batch.)
#[derive(Debug, Clone)]
pub struct Processed<R = SqsBatchResponse> {
    /// The partial batch response for Lambda.
    pub response: R,
    /// The batch's figures (one EMF line).
    pub report: BatchReport,
}

/// Runs a batch's records through a handler and carries out their fates. One processor serves all
/// of a warm container's invocations, several at once too (Lambda Managed Instances run
/// `lambda_runtime`'s concurrent mode; share it behind an `Arc`): what it keeps between batches
/// (the jitter generator, the queue URLs it looked up) is behind locks, and each batch has a bound
/// of its own.
pub struct Processor<Q> {
    queue: Q,
    config: ProcessorConfig,
    clock: Arc<dyn Clock>,
    rng: Mutex<fastrand::Rng>,
    source_urls: Mutex<Vec<(String, String)>>,
}

/// A record ready for handling.
pub(crate) struct Item<'r> {
    pub(crate) record: &'r SqsRecord<'r>,
    pub(crate) id: &'r str,
    /// Boxed: most records carry none, and a slim item is cheap to build for a large batch.
    pub(crate) meta: Option<Box<Meta<'r>>>,
    pub(crate) attempts_before: u32,
}

impl<'r> Item<'r> {
    pub(crate) fn message(&'r self, invocation: &'r Invocation<'r>) -> Message<'r> {
        Message {
            record: self.record,
            id: self.id,
            meta: self.meta.as_deref(),
            attempt: self.attempts_before + 1,
            invocation,
        }
    }
    fn group(&self) -> Option<&'r str> {
        self.record.attributes.message_group_id.as_deref()
    }
    /// Its failures so far, counted since the first failure or the latest redrive from the DLQ,
    /// whichever came later (the metadata of re-sent copies carries both).
    fn history(&self, now_ms: u64) -> History {
        let since_ms = self.meta.as_ref().map_or(now_ms, |meta| {
            let redriven_ms = meta.redriven_at.map_or(0, |at| at.0);
            meta.first_failure_at.0.max(redriven_ms)
        });
        History {
            attempts_before: self.attempts_before,
            failing_for: Duration::from_millis(now_ms.saturating_sub(since_ms)),
        }
    }
}

/// Which record a worker starts next.
///
/// A standard queue's records are independent (a fair queue's `MessageGroupId` names a tenant, not
/// an order) and are taken in the event's order. On a FIFO queue each message group is a lane: a
/// group's next record is offered only after the one before it succeeded, since anything else
/// makes the judge give back the rest of the group ([`Judge::decide`]); of the records on offer the
/// earliest in the event goes first, so that with a bound of 1 the event's order is kept.
enum Schedule {
    InOrder { next: AtomicUsize, len: usize },
    Lanes(Mutex<Lanes>),
}

struct Lanes {
    /// For each record, the next record of its message group.
    next_in_group: Vec<Option<usize>>,
    /// The first record not yet started of each lane that may go on, earliest first.
    offered: BinaryHeap<Reverse<usize>>,
}

impl Schedule {
    fn new(items: &[Item<'_>], fifo: bool) -> Self {
        if !fifo {
            return Self::InOrder {
                next: AtomicUsize::new(0),
                len: items.len(),
            };
        }
        let mut next_in_group = vec![None; items.len()];
        let mut offered = BinaryHeap::new();
        let mut last_of_group: HashMap<&str, usize> = HashMap::new();
        for (index, item) in items.iter().enumerate() {
            // A FIFO record always has a group; one without is a lane of its own.
            let previous = item
                .group()
                .and_then(|group| last_of_group.insert(group, index));
            match previous {
                Some(previous) => next_in_group[previous] = Some(index),
                None => offered.push(Reverse(index)),
            }
        }
        Self::Lanes(Mutex::new(Lanes {
            next_in_group,
            offered,
        }))
    }

    /// How many records can run at once at the most.
    fn lanes(&self) -> usize {
        match self {
            Self::InOrder { len, .. } => *len,
            Self::Lanes(lanes) => lock(lanes).offered.len(),
        }
    }

    /// The next record to start, told of the record this worker `finished` and whether it
    /// succeeded.
    fn next(&self, finished: Option<(usize, bool)>) -> Option<usize> {
        match self {
            Self::InOrder { next, len } => {
                Some(next.fetch_add(1, Ordering::Relaxed)).filter(|index| index < len)
            }
            Self::Lanes(lanes) => {
                let mut lanes = lock(lanes);
                if let Some((index, true)) = finished {
                    if let Some(next) = lanes.next_in_group[index] {
                        lanes.offered.push(Reverse(next));
                    }
                }
                lanes.offered.pop().map(|Reverse(index)| index)
            }
        }
    }
}

/// What one worker did: how each record it took went, and the one it is still running.
#[derive(Default)]
struct WorkerLog {
    handled: Vec<(usize, Outcome)>,
    running: Option<usize>,
}

impl<Q: QueuePort> Processor<Q> {
    /// A processor that makes its SQS calls through `queue`.
    pub fn new(queue: Q, config: ProcessorConfig) -> Self {
        Self {
            queue,
            config,
            clock: Arc::new(SystemClock),
            rng: Mutex::new(fastrand::Rng::new()),
            source_urls: Mutex::new(Vec::new()),
        }
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
        self.config.dlq_url.as_deref()
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The port (tests read what it was asked).
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// The port, the processor done with.
    pub fn into_queue(self) -> Q {
        self.queue
    }

    /// Handles the records with `handler`, up to [`ProcessorConfig::concurrency`] at once, and
    /// settles every record's fate. On a FIFO queue each message group is a lane: its records run
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
        let (items, fifo) = self.prepare(records)?;
        let handled = self.handle_all(handler, &items, fifo, &invocation).await;
        let decided = self.decide_all(&items, handled, fifo);
        Ok(self.settle(&items, decided, &invocation).await)
    }

    /// How handling each record went, in the records' order. Workers, as many as the bound lets
    /// run at once, take records from the schedule and are polled together on this task (no task
    /// is spawned, so the handler need not be `'static`). One timer for the whole batch cuts off
    /// the handlers still running at the margin; no record is started past it either.
    async fn handle_all<H: RecordHandler>(
        &self,
        handler: &H,
        items: &[Item<'_>],
        fifo: bool,
        invocation: &Invocation<'_>,
    ) -> Vec<Outcome> {
        let budget = self.budget(invocation.deadline_ms);
        let cutoff = Cutoff::after(budget);
        let schedule = Schedule::new(items, fifo);
        let workers = self.config.concurrency.get().min(schedule.lanes());
        let mut logs: Vec<WorkerLog> = (0..workers).map(|_| WorkerLog::default()).collect();
        let in_time = {
            let mut running: FuturesUnordered<_> = logs
                .iter_mut()
                .map(|log| self.work(handler, items, invocation, (&schedule, cutoff), log))
                .collect();
            tokio::time::timeout(budget, async { while running.next().await.is_some() {} })
                .await
                .is_ok()
        };
        let mut handled: Vec<Outcome> = items.iter().map(|_| Outcome::NotStarted).collect();
        for log in logs {
            for (index, outcome) in log.handled {
                handled[index] = outcome;
            }
            if let (false, Some(index)) = (in_time, log.running) {
                handled[index] = Outcome::Failed(Box::new(deadline_error()));
            }
        }
        handled
    }

    /// One worker: takes the next record the schedule offers until there is none.
    async fn work<H: RecordHandler>(
        &self,
        handler: &H,
        items: &[Item<'_>],
        invocation: &Invocation<'_>,
        (schedule, cutoff): (&Schedule, Cutoff),
        log: &mut WorkerLog,
    ) {
        let mut finished = None;
        while let Some(index) = schedule.next(finished.take()) {
            let item = &items[index];
            let handled = match self.precheck(item, cutoff) {
                Some(handled) => handled,
                None => {
                    log.running = Some(index);
                    let result = caught(handler.handle(&item.message(invocation))).await;
                    log.running = None;
                    result.into()
                }
            };
            finished = Some((index, matches!(handled, Outcome::Succeeded)));
            log.handled.push((index, handled));
        }
    }

    /// Hands the whole batch to `handler`; on a permanent failure or a panic (a record may be at
    /// fault), bisects until the failing records stand alone; a transient failure or a deferral
    /// fails every record of the call alike, without halving. Then settles every record's fate as
    /// [`Processor::process`] does.
    pub async fn process_batch<'i, B: BatchHandler>(
        &self,
        handler: &B,
        records: &[SqsRecord<'_>],
        invocation: impl Into<Invocation<'i>>,
    ) -> Result<Processed, BatchError> {
        let invocation = invocation.into();
        let (items, fifo) = self.prepare(records)?;
        let cutoff = Cutoff::after(self.budget(invocation.deadline_ms));
        let mut handled: Vec<Option<Outcome>> = items
            .iter()
            .map(|item| self.precheck(item, cutoff))
            .collect();
        let eligible: Vec<usize> = (0..items.len()).filter(|&i| handled[i].is_none()).collect();
        let messages: Vec<Message<'_>> = eligible
            .iter()
            .map(|&i| items[i].message(&invocation))
            .collect();
        // Ranges of `messages` still to hand over, as a stack: the first half is taken first.
        let mut pending: Vec<Range<usize>> = Vec::with_capacity(8);
        pending.push(0..messages.len());
        while let Some(range) = pending.pop() {
            if range.is_empty() {
                continue;
            }
            let mut mark = |outcome: &dyn Fn() -> Outcome| {
                range
                    .clone()
                    .for_each(|m| handled[eligible[m]] = Some(outcome()))
            };
            let left = cutoff.left();
            if left.is_zero() {
                mark(&|| Outcome::NotStarted);
                continue;
            }
            let call = caught(handler.handle_batch(&messages[range.clone()]));
            match tokio::time::timeout(left, call)
                .await
                .unwrap_or_else(|_| Err(deadline_error()))
            {
                Ok(()) => mark(&|| Outcome::Succeeded),
                // Halving looks for records at fault. A transient failure or a deferral says the
                // downstream is (a database that is down): the range is retried as a whole.
                Err(error) if range.len() == 1 || error.class() == ErrorClass::Transient => {
                    mark(&|| Outcome::Failed(Box::new(error.clone())))
                }
                Err(_) => {
                    let middle = range.start + range.len() / 2;
                    pending.push(middle..range.end);
                    pending.push(range.start..middle);
                }
            }
        }
        let handled = handled
            .into_iter()
            .map(|handled| handled.unwrap_or(Outcome::NotStarted));
        let decided = self.decide_all(&items, handled, fifo);
        Ok(self.settle(&items, decided, &invocation).await)
    }

    /// Every record's fate, decided in the records' order (a FIFO group's first failure blocks the
    /// rest of the group, whichever finished first).
    fn decide_all(
        &self,
        items: &[Item<'_>],
        handled: impl IntoIterator<Item = Outcome>,
        fifo: bool,
    ) -> Vec<Decided> {
        let mut judge = self.judge(fifo);
        let mut rng = self.rng();
        let now = self.clock.now_ms();
        items
            .iter()
            .zip(handled)
            .map(|(item, handled)| decide(&mut judge, &mut rng, item.history(now), item, handled))
            .collect()
    }

    pub(crate) fn judge(&self, fifo: bool) -> Judge<'_> {
        Judge::new(&self.config.retry, fifo).report_only(self.config.dlq_url.is_none())
    }

    /// The records as the processor handles them, and whether any comes from a FIFO queue (found
    /// in the same pass: each pass over a large batch's records is a cache miss per record).
    fn prepare<'r>(
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
            // FIFO records are retried in place, so SQS's own count is the attempt count.
            let attempts_before = if fifo {
                record.receive_count().saturating_sub(1)
            } else {
                meta.as_deref_mut().map_or(0, |meta| {
                    self.give_fresh_attempts_if_used_up(id, meta);
                    meta.attempts
                })
            };
            items.push(Item {
                record,
                id,
                meta,
                attempts_before,
            });
        }
        Ok((items, any_fifo))
    }

    /// A record of a standard queue arrives with its attempts used up only when SQS moved it back
    /// from the DLQ (a move task re-sends a dead letter as it is): it gets a fresh set of attempts
    /// and counts as redriven, as if the reprocessor had sent it home.
    fn give_fresh_attempts_if_used_up(&self, id: &str, meta: &mut Meta<'_>) {
        if meta.attempts < self.config.retry.max_attempts {
            return;
        }
        meta.attempts = 0;
        meta.reprocess_count = meta.reprocess_count.saturating_add(1);
        meta.redriven_at = Some(Timestamp(self.clock.now_ms()));
        tracing::info!(
            message_id = id,
            reprocess_count = meta.reprocess_count,
            "arrived with its attempts used up (moved back from the DLQ): a fresh set of attempts"
        );
    }

    /// What is known about a record before calling any handler; `None` when it is to be handled.
    fn precheck(&self, item: &Item<'_>, cutoff: Cutoff) -> Option<Outcome> {
        if item.record.body.is_none() {
            return Some(Outcome::NoBody);
        }
        if let Some(due) = item.meta.as_ref().and_then(|meta| meta.due_at) {
            let now = self.clock.now_ms();
            if due.0 > now {
                return Some(Outcome::NotDue(Duration::from_millis(due.0 - now)));
            }
        }
        cutoff.passed().then_some(Outcome::NotStarted)
    }

    /// A generator for this batch's jitter, forked from the processor's (seedable) one.
    fn rng(&self) -> fastrand::Rng {
        lock(&self.rng).fork()
    }

    /// Time left for handling before the deadline margin.
    pub(crate) fn budget(&self, deadline_ms: u64) -> Duration {
        let margin = u64::try_from(self.config.deadline_margin.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(
            deadline_ms
                .saturating_sub(margin)
                .saturating_sub(self.clock.now_ms()),
        )
    }

    /// Carries the fates out: sends re-sent copies and dead letters (batched), changes FIFO
    /// visibility, and turns every send that was not confirmed into a batchItemFailure.
    async fn settle<'r>(
        &self,
        items: &'r [Item<'r>],
        mut decided: Vec<Decided>,
        invocation: &Invocation<'_>,
    ) -> Processed {
        let mut report = BatchReport {
            records: u32::try_from(items.len()).unwrap_or(u32::MAX),
            ..BatchReport::default()
        };
        let failed_in = invocation.failed_in();
        let outgoing = self.outgoing(items, &mut decided, &failed_in);
        let failed_sends = self
            .send(items, outgoing.to_source, outgoing.to_dlq, &mut report)
            .await;
        for (index, reason) in failed_sends {
            let fate = &mut decided[index].fate;
            tracing::error!(
                message_id = items[index].id,
                fate = fate_name(fate),
                error = %reason,
                "send not confirmed: record given back to SQS",
            );
            report.send_failures += 1;
            *fate = Fate::GiveBack {
                reason: GiveBackReason::SendFailed,
                visibility: None,
            };
        }
        if !outgoing.visibility.is_empty() {
            self.change_visibility(items, &outgoing.visibility, &mut report)
                .await;
        }
        Processed {
            response: respond(items, &decided, &mut report),
            report,
        }
    }

    /// What the fates send and change: copies for the source queue and the DLQ, visibility
    /// changes for FIFO records given back in place. A copy too large to annotate turns its
    /// record into a give-back.
    fn outgoing<'r>(
        &self,
        items: &'r [Item<'r>],
        decided: &mut [Decided],
        failed_in: &Option<FailedIn>,
    ) -> Outgoing<'r> {
        let now = self.clock.now_ms();
        let mut outgoing = Outgoing::default();
        for (index, (item, decided)) in items.iter().zip(decided).enumerate() {
            let error = decided.error.as_deref();
            let failure = (now, failed_in);
            let (outbox, message) = match decided.fate {
                Fate::Retry { attempts, delay } => (
                    &mut outgoing.to_source,
                    self.copy(item, failure, error, attempts, delay),
                ),
                Fate::Defer { delay } => (
                    &mut outgoing.to_source,
                    self.copy(item, failure, error, item.attempts_before, delay),
                ),
                Fate::DeadLetter { attempts } => (
                    &mut outgoing.to_dlq,
                    self.dead_letter(item, failure, error, attempts),
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
                Fate::Done | Fate::GiveBack { .. } => continue,
            };
            match message {
                Ok(message) => outbox.push(index, message),
                Err(too_large) => {
                    tracing::error!(
                        message_id = item.id,
                        size = too_large.size,
                        "cannot annotate the message within SQS's size limit: given back for the queue's redrive policy",
                    );
                    decided.fate = Fate::GiveBack {
                        reason: GiveBackReason::TooLarge,
                        visibility: None,
                    }
                }
            }
        }
        outgoing
    }

    /// Sends the copies, batched; the records whose send was not confirmed, with the reason.
    async fn send(
        &self,
        items: &[Item<'_>],
        to_source: Outbox<'_>,
        to_dlq: Outbox<'_>,
        report: &mut BatchReport,
    ) -> Vec<(usize, String)> {
        let mut failed_sends: Vec<(usize, String)> = Vec::new();
        if !to_source.is_empty() {
            match self.source_url(items).await {
                Ok(url) => {
                    report.sqs_requests +=
                        to_source.flush(&self.queue, &url, &mut failed_sends).await
                }
                Err(error) => to_source
                    .indexes
                    .iter()
                    .for_each(|&i| failed_sends.push((i, error.to_string()))),
            }
        }
        match &self.config.dlq_url {
            Some(dlq_url) => {
                report.sqs_requests += to_dlq.flush(&self.queue, dlq_url, &mut failed_sends).await
            }
            // Report-only never dead-letters; should it ever, the record is given back, not lost.
            None => to_dlq
                .indexes
                .iter()
                .for_each(|&i| failed_sends.push((i, "no DLQ is configured".to_owned()))),
        }
        failed_sends
    }

    /// The re-sent copy for a retry or a deferral.
    fn copy<'r>(
        &self,
        item: &'r Item<'r>,
        (now, failed_in): Failure<'_>,
        error: Option<&RecordError>,
        attempts: u32,
        delay: Duration,
    ) -> Result<OutgoingMessage<'r>, crate::envelope::TooLarge> {
        let wait_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        let hop = delay_seconds_of(delay) > MAX_DELAY_SECONDS;
        let due_at = hop.then(|| Timestamp(now.saturating_add(wait_ms)));
        let meta = self.meta(item, (now, failed_in), error, attempts, due_at);
        let mut message = annotate(item.record, meta)?;
        message.delay_seconds = delay_seconds_of(delay).min(MAX_DELAY_SECONDS);
        Ok(message)
    }

    pub(crate) fn dead_letter<'r>(
        &self,
        item: &'r Item<'r>,
        failure: Failure<'_>,
        error: Option<&RecordError>,
        attempts: u32,
    ) -> Result<OutgoingMessage<'r>, crate::envelope::TooLarge> {
        let mut message = annotate(item.record, self.meta(item, failure, error, attempts, None))?;
        if self
            .config
            .dlq_url
            .as_deref()
            .is_some_and(|url| url.ends_with(".fifo"))
        {
            // A FIFO DLQ needs a group and a deduplication id; the message id is unique per message.
            message.group_id = Some(Text::from(item.group().unwrap_or("redrive")));
            message.deduplication_id = Some(Text::from(item.id));
        }
        Ok(message)
    }

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
            failed_in: None,
            attributes: None,
        });
        meta.v = META_VERSION;
        meta.attempts = attempts;
        meta.due_at = due_at;
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

    async fn source_url(&self, items: &[Item<'_>]) -> Result<String, crate::error::PortError> {
        if let Some(url) = &self.config.source_queue_url {
            return Ok(url.clone());
        }
        let arn = items
            .iter()
            .find_map(|item| item.record.event_source_arn.as_deref())
            .unwrap_or_default();
        if let Some((_, url)) = lock(&self.source_urls).iter().find(|(a, _)| a == arn) {
            return Ok(url.clone());
        }
        let url = self.queue.queue_url(arn).await?;
        lock(&self.source_urls).push((arn.to_owned(), url.clone()));
        Ok(url)
    }

    async fn change_visibility(
        &self,
        items: &[Item<'_>],
        changes: &[(usize, VisibilityChange<'_>)],
        report: &mut BatchReport,
    ) {
        let url = match self.source_url(items).await {
            Ok(url) => url,
            Err(error) => {
                return tracing::warn!(
                    %error,
                    "visibility not changed: the records reappear after the visibility timeout",
                )
            }
        };
        for chunk in changes.chunks(10) {
            report.sqs_requests += 1;
            let entries: Vec<VisibilityChange<'_>> =
                chunk.iter().map(|(_, change)| *change).collect();
            match self.queue.change_visibility_batch(&url, &entries).await {
                Ok(failures) => failures.iter().for_each(|failure| {
                    tracing::warn!(
                        message_id = items[chunk[failure.index].0].id,
                        code = failure.code,
                        "visibility not changed"
                    )
                }),
                Err(error) => {
                    tracing::warn!(
                        %error,
                        "visibility not changed: the records reappear after the visibility timeout",
                    )
                }
            }
        }
    }
}

/// Runs a handler future; a panic becomes a `panic` error for this record only.
pub(crate) async fn caught(
    future: impl Future<Output = Result<(), RecordError>>,
) -> Result<(), RecordError> {
    let mut future = pin!(future);
    poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => Poll::Ready(Err(RecordError::panic(panic_message(payload.as_ref())))),
        },
    )
    .await
}

pub(crate) fn deadline_error() -> RecordError {
    RecordError::transient(
        "deadline",
        "the handler was still running at the Lambda deadline margin",
    )
}

/// What a batch's fates send and change.
#[derive(Default)]
struct Outgoing<'r> {
    to_source: Outbox<'r>,
    to_dlq: Outbox<'r>,
    visibility: Vec<(usize, VisibilityChange<'r>)>,
}

/// The partial batch response (every give-back listed), with each fate and error counted and
/// every record that did not succeed logged.
fn respond(items: &[Item<'_>], decided: &[Decided], report: &mut BatchReport) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for (item, Decided { fate, error }) in items.iter().zip(decided) {
        report.count_fate(fate, delay_seconds(fate));
        if *fate == Fate::Done && item.attempts_before > 0 {
            report.done_after_retry += 1;
        }
        if let Some(error) = error {
            report.count_error(error.class());
        }
        if let Fate::GiveBack { .. } = fate {
            response.add_failure(item.id);
        }
        if *fate != Fate::Done {
            log_fate(item, fate, error.as_deref());
        }
    }
    response
}

/// A record's fate and the error that led to it. The error is boxed: it is rare, and a slim
/// decision is cheap to keep for each record of a large batch.
struct Decided {
    fate: Fate,
    error: Option<Box<RecordError>>,
}

fn decide(
    judge: &mut Judge<'_>,
    rng: &mut fastrand::Rng,
    history: History,
    item: &Item<'_>,
    outcome: Outcome,
) -> Decided {
    let fate = judge.decide(item.group(), &outcome, history, || rng.f64());
    // A deferral dead-lettered is one that outlasted the age limit: it says so.
    let error = match outcome {
        Outcome::Failed(error)
            if error.is_deferral() && matches!(fate, Fate::DeadLetter { .. }) =>
        {
            Some(Box::new(deferred_too_long(&error, history.failing_for)))
        }
        Outcome::Failed(error) => Some(error),
        _ => None,
    };
    Decided { fate, error }
}

/// The failure a record is dead-lettered with when its deferrals outlast the age limit: transient,
/// so that the reprocessor sends it home once the downstream has healed.
fn deferred_too_long(deferral: &RecordError, failing_for: Duration) -> RecordError {
    let failing_for = humantime::format_duration(Duration::from_secs(failing_for.as_secs()));
    RecordError::transient(
        "deferred_too_long",
        format_args!(
            "still deferred ({}) {failing_for} after its first failure, past REDRIVE_DEFER_MAX_AGE",
            deferral.kind()
        ),
    )
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "panic with a non-string payload".to_owned(),
    }
}

fn delay_seconds_of(delay: Duration) -> u32 {
    u32::try_from(delay.as_millis().div_ceil(1000)).unwrap_or(u32::MAX)
}

fn delay_seconds(fate: &Fate) -> u32 {
    match fate {
        Fate::Retry { delay, .. } | Fate::Defer { delay } => delay_seconds_of(*delay),
        _ => 0,
    }
}

fn fate_name(fate: &Fate) -> &'static str {
    match fate {
        Fate::Done => "done",
        Fate::Retry { .. } => "retry",
        Fate::DeadLetter { .. } => "dead_letter",
        Fate::Defer { .. } => "defer",
        Fate::GiveBack { .. } => "give_back",
    }
}

/// One line per record that did not succeed; none on the happy path.
fn log_fate(item: &Item<'_>, fate: &Fate, error: Option<&RecordError>) {
    let (error_class, error_kind, message) = match error {
        Some(error) => (
            error.class().as_str(),
            error.kind(),
            truncate(error.message(), 512),
        ),
        None => ("", "", Default::default()),
    };
    let attempt = item.attempts_before + 1;
    match fate {
        Fate::Done => {}
        Fate::Retry { attempts, .. } => {
            tracing::warn!(
                message_id = item.id,
                attempt,
                next_attempt = attempts + 1,
                delay_s = delay_seconds(fate),
                error_class,
                error_kind,
                error = %message,
                fate = "retry",
                "record failed, retry scheduled",
            )
        }
        Fate::Defer { .. } => {
            tracing::info!(
                message_id = item.id,
                attempt,
                delay_s = delay_seconds(fate),
                error_kind,
                fate = "defer",
                "record deferred"
            )
        }
        Fate::DeadLetter { attempts } => {
            tracing::error!(
                message_id = item.id,
                attempt,
                attempts,
                error_class,
                error_kind,
                error = %message,
                fate = "dead_letter",
                "record dead-lettered",
            )
        }
        Fate::GiveBack { reason, visibility } => {
            let visibility_s = visibility.map(|v| v.as_secs());
            tracing::warn!(
                message_id = item.id,
                attempt,
                reason = reason.as_str(),
                visibility_s,
                error_class,
                error_kind,
                error = %message,
                fate = "give_back",
                "record given back to SQS",
            )
        }
    }
}
