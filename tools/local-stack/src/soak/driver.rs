//! The Lambda-like driver: produce, consume with faults, heal and redrive, tally.
mod end;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redrive::aws::DynamoDbStore;
use redrive::config::ReprocessSettings;
use redrive::envelope::{OutgoingMessage, MAX_MESSAGE_BYTES};
use redrive::event::{SqsRecord, Text};
use redrive::idempotency::{Idempotent, KeyFrom, MemoryStore};
use redrive::ledger::{release_head, AttemptLedger, Release};
use redrive::payload;
use redrive::port::{EntryFailure, ForwardingPort, QueuePort, VisibilityChange};
use redrive::reprocess::{ReprocessCommand, ReprocessPolicy, Reprocessor};
use redrive::retry::FifoOnDeadLetter;
use redrive::testing::MemoryLedger;
use redrive::{Meta, Payloads, PortError, Processor, ProcessorConfig, RecordHandler};

use super::config::SoakConfig;
use super::duration_ms;
use super::faulty::{Faulty, SoakQueues};
use super::handler::PlannedHandler;
use super::plan::Plan;
use super::report::{SoakReport, LAMBDA_LOOP_LIMIT};
use super::stores::{
    FaultyPayloads, FaultyStore, Latency, SharedStore, INVOCATION, PAYLOAD_BUCKET,
};

/// Runs the soak on `sqs` with the source queue `source` (URL and ARN; whose DLQ is `dlq`),
/// `second`, a source sharing that DLQ, if given, and `lane`, the retry lane where the first
/// source's held groups wait (FIFO with hold), if given: produce and consume with faults until
/// the queues are empty, heal and redrive the DLQ, then tally.
pub async fn run<Q: SoakQueues>(
    sqs: Q,
    source: (&str, &str),
    second: Option<(&str, &str)>,
    lane: Option<(&str, &str)>,
    dlq: &str,
    config: &SoakConfig,
) -> Result<SoakReport, PortError> {
    let started = Instant::now();
    let (source_url, source_arn) = source;
    let clock = sqs.clock();
    let payloads = config
        .large_every
        .map(|_| Arc::new(FaultyPayloads::new(config.seed, config.payload_faults)));
    let queue = Faulty::new(
        sqs,
        config.seed,
        config.failed_calls,
        config.refused_entries,
    )
    .stalling(config.stalled_calls)
    .late(config.slow_calls, config.budget / 2)
    .throttling_visibility(config.throttled_visibility)
    .counting_chains_to(source_url)
    .resolving(payloads.clone());
    let planned = PlannedHandler::new(config, &clock);
    let store = Arc::new(FaultyStore {
        inner: match &config.idempotency_table {
            None => SharedStore::Memory(
                MemoryStore::new(config.messages * 2).with_clock(clock.clone()),
                MemoryLedger::new(),
            ),
            Some(table) => {
                let table = DynamoDbStore::lazy(table.as_str()).with_clock(clock.clone());
                SharedStore::DynamoDb(table, tokio::sync::Mutex::default())
            }
        },
        latency: Latency::new(config.seed ^ 0x1a7d, config.slow_calls, config.budget / 2),
        rng: Mutex::new(fastrand::Rng::with_seed(config.seed ^ 0xd1d0)),
        share: config.store_faults,
        injected: AtomicU64::new(0),
        in_flight: AtomicU64::new(0),
        claimed: Mutex::default(),
        completions_after_lease: AtomicU64::new(0),
        claims_granted_twice: AtomicU64::new(0),
    });
    // FIFO attempts are counted with the ledger, as the tfvars' FIFO consumer does.
    let ledger: Option<Arc<dyn AttemptLedger>> = config
        .fifo_groups
        .map(|_| Arc::clone(&store) as Arc<dyn AttemptLedger>);
    let processor_of = |url: &str, lane_url: Option<&str>| {
        let processor = Processor::new(&queue, {
            let mut processor_config = ProcessorConfig::default();
            processor_config.dlq_url = Some(dlq.to_owned());
            processor_config.source_queue_url = Some(url.to_owned());
            processor_config.retry = config.retry.clone();
            processor_config.deadline_margin = Duration::from_millis(5);
            processor_config.concurrency = config.concurrency;
            processor_config.fifo_on_dead_letter = config.fifo_on_dead_letter;
            processor_config.source = redrive::SourceQueue {
                retention: config.engine_retention.unwrap_or(config.retention),
                visibility_timeout: config.visibility,
            };
            processor_config.lane_url = lane_url.map(str::to_owned);
            processor_config
        })
        .with_clock(clock.clone())
        .with_seed(config.seed);
        let processor = match &payloads {
            Some(bucket) => processor.with_payloads(Payloads::new(
                Arc::clone(bucket) as Arc<dyn redrive::PayloadStore>,
                PAYLOAD_BUCKET,
            )),
            None => processor,
        };
        match &ledger {
            Some(ledger) => processor.with_ledger(Arc::clone(ledger)),
            None => processor,
        }
    };
    let lane_url = lane.map(|(url, _)| url);
    let processor = processor_of(source_url, lane_url);
    let second_processor = second.map(|(url, _)| processor_of(url, None));
    let lane_processor = lane.map(|(url, _)| processor_of(url, lane_url));
    let containers = containers(&planned, &store, config);
    let mut report = SoakReport {
        messages: config.messages,
        order_checked: config.order_checked,
        order_end_to_end: matches!(config.fifo_on_dead_letter, FifoOnDeadLetter::Hold { .. }),
        ..SoakReport::default()
    };
    let sources = if second.is_some() { 2 } else { 1 };
    let longest_deliverable_wait = AtomicU64::new(0);
    let invocations = Invocations::default();
    let mut drive = Driver {
        queue: &queue,
        processor: &processor,
        containers: &containers,
        url: source_url,
        arn: source_arn,
        lane: lane
            .zip(lane_processor.as_ref())
            .map(|((url, arn), processor)| Consumed {
                url,
                arn,
                processor,
            }),
        share: (0, sources),
        rng: fastrand::Rng::with_seed(config.seed ^ 0xde1e7e),
        config,
        started_ms: clock.now_ms(),
        // The operator's calls are not the consumers': no faults injected in them.
        ledger: store.inner.ledger(),
        store: &store,
        fresh_sets: &planned.fresh_sets,
        longest_deliverable_wait: &longest_deliverable_wait,
        payloads: payloads.as_deref(),
        invocations: &invocations,
    };
    let mut second = second
        .zip(second_processor.as_ref())
        .map(|((url, arn), processor)| Driver {
            processor,
            url,
            arn,
            lane: None,
            share: (1, 2),
            rng: fastrand::Rng::with_seed(config.seed ^ 0x5ec0d),
            ..drive.clone_shared()
        });
    drive.produce_and_consume(&mut report).await?;
    if let Some(second) = &mut second {
        second.produce_and_consume(&mut report).await?;
    }
    let chains = queue.take_chains();
    drive
        .heal_and_redrive(&planned, dlq, second.as_mut(), &mut report)
        .await?;
    drive
        .tally(&planned, chains, dlq, second.as_ref(), &mut report)
        .await?;
    if let Some(bucket) = &payloads {
        report.payload_faults = bucket.injected.load(Ordering::Relaxed);
        report.payload_objects_left = bucket.inner.len();
        let stopped = invocations.stopped.lock().unwrap();
        report.payload_objects_of_stopped = bucket
            .left_by(&stopped)
            .into_iter()
            .filter(|key| !report.payload_objects_pointed_at.contains(key))
            .count();
    }
    report.duplicates_absorbed = containers.iter().map(Idempotent::duplicates).sum();
    report.store_faults = store.injected.load(Ordering::Relaxed);
    report.slow_calls = queue.latency.delayed.load(Ordering::Relaxed)
        + store.latency.delayed.load(Ordering::Relaxed);
    report.throttled_visibility = queue.throttled.load(Ordering::Relaxed);
    report.stopped_before_effect = planned.stopped_before_effect.load(Ordering::Relaxed);
    report.longest_deliverable_wait =
        Duration::from_millis(longest_deliverable_wait.load(Ordering::Relaxed));
    report.completions_after_lease = store.completions_after_lease.load(Ordering::Relaxed);
    report.claims_granted_twice = store.claims_granted_twice.load(Ordering::Relaxed);
    report.unconfirmed_completions = containers
        .iter()
        .map(Idempotent::unconfirmed_completions)
        .sum();
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The Lambda containers: guards of their own around the one handler (whose effects are the
/// invariant's ledger), sharing one store, as Lambda containers share a DynamoDB table. Each
/// invocation goes to a container drawn at random, so the copies of a message reach different ones.
pub(super) fn containers<'h>(
    planned: &'h PlannedHandler,
    store: &Arc<FaultyStore>,
    config: &SoakConfig,
) -> Vec<Idempotent<&'h PlannedHandler, Arc<FaultyStore>>> {
    (0..config.containers.get())
        .map(|_| {
            let mut guard =
                Idempotent::new(planned, store.clone(), KeyFrom::BodyField("/id".into()));
            // A handler cut off at the deadline cannot release its claim: the lease is what
            // frees it, so it is set to about the function timeout and a completion's time.
            guard.lease = config.budget * 2 + config.completion_time;
            guard
        })
        .collect()
}

/// The padding of a large message: its body is then about 1 MiB less 256 bytes, too large to
/// carry its failure context inline.
const LARGE_PAD: usize = MAX_MESSAGE_BYTES - 256 - 100;

/// The soak's messages, each with its fault plan (none in the outage: there the downstream is
/// the fault), in a message group on FIFO.
pub(super) fn messages<'a>(
    config: &'a SoakConfig,
    (index, sources): (usize, usize),
    source_arn: &'a str,
) -> impl Iterator<Item = OutgoingMessage<'static>> + 'a {
    let mut rng = fastrand::Rng::with_seed(config.seed ^ 0x5eed);
    let src = if sources > 1 {
        format!(r#","src":"{source_arn}""#)
    } else {
        String::new()
    };
    (0..config.messages).filter_map(move |n| {
        let plan = match config.outage {
            Some(_) => Plan::Ok,
            None => Plan::draw(&mut rng),
        }
        .encode();
        if n % sources != index {
            return None;
        }
        let group = config.fifo_groups.map(|groups| format!("g-{}", n % groups));
        let pad = match config.large_every {
            Some(every) if n % every == 0 => format!(r#","pad":"{}""#, "p".repeat(LARGE_PAD)),
            _ => String::new(),
        };
        let body = match &group {
            Some(group) => {
                format!(r#"{{"id":"m-{n}","plan":"{plan}","seq":{n},"group":"{group}"{src}{pad}}}"#)
            }
            None => format!(r#"{{"id":"m-{n}","plan":"{plan}","seq":{n}{src}{pad}}}"#),
        };
        Some(OutgoingMessage {
            body: Text::from(body),
            attributes: Vec::new(),
            delay_seconds: 0,
            deduplication_id: group.as_ref().map(|_| Text::from(format!("m-{n}"))),
            group_id: group.map(Text::from),
            trace_header: None,
        })
    })
}

/// A queue the function reads, and the processor its batches go to.
struct Consumed<'a, Q> {
    url: &'a str,
    arn: &'a str,
    processor: &'a Processor<&'a Faulty<Q>>,
}

impl<Q> Clone for Consumed<'_, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Q> Copy for Consumed<'_, Q> {}

struct Driver<'a, Q, H> {
    queue: &'a Faulty<Q>,
    processor: &'a Processor<&'a Faulty<Q>>,
    containers: &'a [H],
    url: &'a str,
    arn: &'a str,
    /// The retry lane the source's held groups wait in, which the same function reads.
    lane: Option<Consumed<'a, Q>>,
    /// Which of the messages this source gets: those whose number is `.0` modulo `.1`.
    share: (usize, usize),
    rng: fastrand::Rng,
    config: &'a SoakConfig,
    started_ms: u64,
    /// The ledger the operator of a hold reads and releases held heads in.
    ledger: &'a dyn AttemptLedger,
    /// The store the containers share, whose writes in flight land before the clock moves on.
    store: &'a FaultyStore,
    /// Where the operator's fresh sets of attempts are counted (the handler's).
    fresh_sets: &'a Mutex<HashMap<String, u32>>,
    /// The longest a deliverable message waited for a receive, in ms, sampled at each receive.
    longest_deliverable_wait: &'a AtomicU64,
    /// The large messages' bucket, where the tally reads the bodies of large dead letters.
    payloads: Option<&'a FaultyPayloads>,
    /// The invocations so far, and those Lambda stopped (their reports, orphans counted, lost).
    invocations: &'a Invocations,
}

/// The invocations' numbers, and those Lambda stopped.
#[derive(Default)]
struct Invocations {
    made: AtomicU64,
    stopped: Mutex<HashSet<u64>>,
}

impl<'a, Q, H> Driver<'a, Q, H> {
    /// A driver on the same SQS, containers and clock, for a second source.
    fn clone_shared(&self) -> Self {
        Self {
            rng: self.rng.clone(),
            ..*self
        }
    }
}

impl<'a, Q: SoakQueues, H: RecordHandler> Driver<'a, Q, H> {
    /// Phase 1: produce (keeping the source under `max_queued`) and consume with faults until the
    /// source is empty.
    async fn produce_and_consume(&mut self, report: &mut SoakReport) -> Result<(), PortError> {
        let config = self.config;
        let mut messages = messages(config, self.share, self.arn).peekable();
        let mut idle_since = None;
        loop {
            let depth = self.queue.inner().depth(self.url).await?;
            if messages.peek().is_some() && depth < config.max_queued {
                // SendMessageBatch takes 10 messages and 1 MiB at most: a large message goes alone.
                let mut batch: Vec<OutgoingMessage<'static>> = Vec::new();
                while batch.len() < (config.max_queued - depth).min(10) {
                    let bytes: usize = batch.iter().map(OutgoingMessage::size).sum();
                    match messages.peek() {
                        Some(next)
                            if batch.is_empty() || bytes + next.size() <= MAX_MESSAGE_BYTES =>
                        {
                            batch.extend(messages.next());
                        }
                        _ => break,
                    }
                }
                let refused = self.produce(&batch).await?;
                assert!(
                    refused.is_empty(),
                    "the producer's own sends are not faulted"
                );
            }
            if self.invoke_all(report).await? {
                idle_since = None;
            } else {
                if messages.peek().is_none() && self.depth().await? == 0 {
                    return Ok(());
                }
                if self.release_held(report).await? {
                    idle_since = None;
                } else {
                    self.idle(&self.urls(), &mut idle_since).await?;
                }
            }
        }
    }

    /// The producer's send, tried again for up to two minutes, with pauses doubling to 8 s, when
    /// a loaded server does not answer within the carry-out's timeouts: a send it took without
    /// answering arrives twice, as SQS's at-least-once delivery may hand any message out twice.
    async fn produce(
        &self,
        batch: &[OutgoingMessage<'static>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(500);
        loop {
            match self.queue.inner().send_batch(self.url, batch).await {
                Err(error) if started.elapsed() < Duration::from_secs(120) => {
                    eprintln!("the producer's send failed ({error}): sent again in {pause:?}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(8));
                }
                sent => return sent,
            }
        }
    }

    /// Nothing was received nor released: lets time pass, or fails the run once nothing has
    /// been since `idle_since` for longer than its SQS allows ([`SoakQueues::stuck_after`]).
    async fn idle(&self, urls: &[&str], idle_since: &mut Option<Instant>) -> Result<(), PortError> {
        let since = *idle_since.get_or_insert_with(Instant::now);
        if let Some(limit) = self.queue.inner().stuck_after() {
            if since.elapsed() > limit {
                let depth = self.depth().await?;
                return Err(PortError::new(
                    "soak",
                    format!(
                        "stuck: nothing to receive for {} s with {depth} messages in flight or \
                         delayed in the source and lane (one waits longer than the run sets); \
                         the ledger's holds: {}",
                        limit.as_secs(),
                        self.holds_listed().await?
                    ),
                ));
            }
        }
        self.queue.inner().idle(urls).await;
        Ok(())
    }

    /// The ledger's holds as a stuck run reports them: which head, its latest receive, in which
    /// queue, and what the operator decided.
    async fn holds_listed(&self) -> Result<String, PortError> {
        let held = self.ledger.held().await?;
        let listed: Vec<String> = held
            .iter()
            .map(|(id, hold)| {
                let queue = if hold.queue_arn == self.arn {
                    "source"
                } else {
                    "lane"
                };
                let release = hold.release.map_or("none", Release::as_str);
                format!(
                    "{id} (receive {} in the {queue}, {}, release: {release})",
                    hold.receive_count, hold.error_kind
                )
            })
            .collect();
        Ok(if listed.is_empty() {
            "none".to_owned()
        } else {
            listed.join(", ")
        })
    }

    /// The source and, if any, the lane.
    fn consumed(&self) -> impl Iterator<Item = Consumed<'a, Q>> {
        let source = Consumed {
            url: self.url,
            arn: self.arn,
            processor: self.processor,
        };
        std::iter::once(source).chain(self.lane)
    }

    /// The URLs of the queues this driver reads.
    fn urls(&self) -> Vec<&'a str> {
        self.consumed().map(|queue| queue.url).collect()
    }

    /// Messages in the source and the lane.
    async fn depth(&self) -> Result<usize, PortError> {
        let mut depth = 0;
        for url in self.urls() {
            depth += self.queue.inner().depth(url).await?;
        }
        Ok(depth)
    }

    /// One receive from the source and one from the lane: false when neither had a message.
    async fn invoke_all(&mut self, report: &mut SoakReport) -> Result<bool, PortError> {
        let mut invoked = false;
        for queue in self.consumed().collect::<Vec<_>>() {
            invoked |= self.invoke(report, queue).await?;
        }
        Ok(invoked)
    }

    /// Whether FIFO heads hold their groups in this run.
    fn holds(&self) -> bool {
        matches!(
            self.config.fifo_on_dead_letter,
            FifoOnDeadLetter::Hold { .. }
        )
    }

    /// One receive as the event source mapping makes it, and the invocation with it in a container
    /// drawn at random; false when nothing was visible. Lambda's side fails too: a throttled
    /// invocation leaves the batch untried, and a batch whose visibility runs out mid-way reaches a
    /// second container while the first still handles it.
    async fn invoke(
        &mut self,
        report: &mut SoakReport,
        on: Consumed<'a, Q>,
    ) -> Result<bool, PortError> {
        if on.url != self.url {
            let backlog = self.queue.inner().depth(on.url).await?;
            report.lane_backlog = report.lane_backlog.max(backlog);
        }
        let records = self.receive(on).await?;
        if records.is_empty() {
            return Ok(false);
        }
        if self.rng.f64() < self.config.throttled_invocations {
            // The mapping gives the batch back untried; SQS shows it again after its visibility
            // timeout, its receive count raised.
            report.throttled_invocations += 1;
            return Ok(true);
        }
        let again = if self.rng.f64() < self.config.overlapping_deliveries {
            report.overlapping_deliveries += 1;
            let changes: Vec<VisibilityChange<'_>> = records
                .iter()
                .filter_map(|record| record.receipt_handle.as_deref())
                .map(|receipt_handle| VisibilityChange {
                    receipt_handle,
                    timeout: Duration::ZERO,
                })
                .collect();
            self.queue
                .inner()
                .change_visibility_batch(on.url, &changes)
                .await?;
            self.receive(on).await?
        } else {
            Vec::new()
        };
        let first = &self.containers[self.rng.usize(..self.containers.len())];
        let second = &self.containers[self.rng.usize(..self.containers.len())];
        let (first, second) = tokio::join!(
            self.handle(first, &records, on),
            self.handle(second, &again, on)
        );
        self.store.settled().await;
        self.apply_answer(report, &records, first, on).await?;
        self.apply_answer(report, &again, second, on).await?;
        Ok(true)
    }

    /// A receive from `on`. A source's longest deliverable wait is sampled first: the other
    /// groups' wait, which a held group's backlog must not make grow (the lane holds only held
    /// groups, which wait by design).
    async fn receive(&self, on: Consumed<'a, Q>) -> Result<Vec<SqsRecord<'static>>, PortError> {
        if on.url == self.url {
            let waited = self.queue.inner().longest_deliverable_wait(on.url);
            self.longest_deliverable_wait
                .fetch_max(duration_ms(waited), Ordering::Relaxed);
        }
        let mut records = self
            .queue
            .receive(on.url, 10, self.config.visibility, Duration::ZERO)
            .await?;
        for record in &mut records {
            record.event_source_arn = Some(Text::from(on.arn.to_owned()));
        }
        Ok(records)
    }

    /// One invocation with `records` in `container`: its response, or `None` when Lambda stopped
    /// it at its deadline (or there was nothing to invoke with).
    async fn handle(
        &self,
        container: &H,
        records: &[SqsRecord<'static>],
        on: Consumed<'a, Q>,
    ) -> Option<redrive::Processed> {
        if records.is_empty() {
            return None;
        }
        let clock = self.queue.inner().clock();
        let timeout = Duration::from_millis(5) + self.config.budget;
        let deadline = clock.now_ms() + duration_ms(timeout);
        let invocation = self.invocations.made.fetch_add(1, Ordering::Relaxed) + 1;
        let processing = INVOCATION.scope(
            invocation,
            on.processor.process(container, records, deadline),
        );
        let processed = tokio::time::timeout(timeout, processing).await.ok();
        // An answer polled out only after the deadline (the timer and the answer ready together)
        // is one Lambda never got: it stopped the invocation.
        let answered = processed.filter(|_| clock.now_ms() <= deadline);
        if answered.is_none() {
            self.invocations.stopped.lock().unwrap().insert(invocation);
        }
        answered.map(|processed| processed.expect("records carry message ids"))
    }

    /// What the event source mapping does with an invocation's answer: deletes what did not fail;
    /// nothing after a timeout or a lost delete (the whole batch comes back).
    async fn apply_answer(
        &mut self,
        report: &mut SoakReport,
        records: &[SqsRecord<'static>],
        processed: Option<redrive::Processed>,
        on: Consumed<'a, Q>,
    ) -> Result<(), PortError> {
        if records.is_empty() {
            return Ok(());
        }
        report.invocations += 1;
        let Some(processed) = processed else {
            report.timed_out += 1;
            report.dead_letters_delivered_again += records.len() as u64;
            return Ok(());
        };
        let clock = self.queue.inner().clock();
        let minute = usize::try_from(clock.now_ms().saturating_sub(self.started_ms) / 60_000)
            .unwrap_or(usize::MAX);
        if report.minutes.len() <= minute {
            report.minutes.resize(minute + 1, (0, 0));
        }
        report.minutes[minute].0 += processed.report.deferred;
        report.minutes[minute].1 += processed.report.transient_errors;
        report.payloads_offloaded += u64::from(processed.report.payloads_offloaded);
        report.sent_to_lane += u64::from(processed.report.sent_to_lane);
        report.payload_orphans += u64::from(processed.report.payload_orphans);
        if self.holds() {
            let held = self.ledger.held().await?;
            // The engine's gauge counts the holds of the batch's queue and the lane's.
            let lane_arn = self.lane.map(|lane| lane.arn);
            let held = held.iter().any(|(_, hold)| {
                hold.queue_arn == on.arn || Some(hold.queue_arn.as_str()) == lane_arn
            });
            if report.held_minutes.len() <= minute {
                // Minutes without a batch: nothing counted, and the holds as they were.
                let before = report.held_minutes.last().is_some_and(|&(_, held)| held);
                report.held_minutes.resize(minute + 1, (None, before));
            }
            let (gauge, held_now) = &mut report.held_minutes[minute];
            *gauge = (*gauge).max(processed.report.held_heads);
            *held_now = held;
        }
        if self.rng.f64() < self.config.lost_deletes {
            report.lost_deletes += 1;
            report.dead_letters_delivered_again += u64::from(processed.report.dead_lettered);
            return Ok(());
        }
        for chunk in super::done(records, &processed).chunks(10) {
            self.queue.delete_batch(on.url, chunk).await?;
        }
        Ok(())
    }
}
