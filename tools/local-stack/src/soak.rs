//! The fault-injection soak: messages with a seeded fault plan go through the real processor, a
//! Lambda-like driver and an SQS (moto through the SDK, or [`crate::memory::MemorySqs`] for volume),
//! with AWS's faults injected (failed, refused, late and stalled calls; throttling; idempotency store
//! failures; whole batches failed or stopped at the deadline; throttled invocations; batches
//! delivered to two containers at once; SQS's own move to the DLQ); then the downstream heals and
//! the DLQ is redriven as the scheduled reprocessor does. One invariant is checked at the end: every message had its effect
//! exactly once (the idempotency guard absorbs duplicates) or sits in the DLQ; none is lost; none
//! was redriven beyond the cap.
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redrive::clock::Clock;
use redrive::config::ReprocessSettings;
use redrive::dynamodb::DynamoDbStore;
use redrive::envelope::OutgoingMessage;
use redrive::event::{SqsRecord, Text};
use redrive::fifo::FifoOnDeadLetter;
use redrive::fifo::{
    release_head, AttemptLedger, BoxFuture, Hold, LedgerEntry, MemoryLedger, Release,
};
use redrive::idempotency::{Claim, IdempotencyStore, Idempotent, KeyFrom, MemoryStore};
use redrive::port::{EntryFailure, ForwardingPort, QueuePort, VisibilityChange};
use redrive::reprocess::{ReprocessCommand, Reprocessor};
use redrive::reprocess_policy::ReprocessPolicy;
use redrive::{
    CircuitBreaker, Message, Meta, PortError, Processor, ProcessorConfig, RecordError,
    RecordHandler, RetryPolicy,
};

/// What a message does when handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Ok,
    /// Times out on its first `n` attempts.
    Flaky(u32),
    /// Times out while the downstream is down (until the soak heals it).
    Down,
    Permanent,
    Panic,
    /// Runs past the deadline on its first attempt.
    Slow,
}

impl Plan {
    fn draw(rng: &mut fastrand::Rng) -> Self {
        match rng.u32(0..1000) {
            0..=849 => Self::Ok,
            850..=929 => Self::Flaky(rng.u32(1..4)),
            930..=949 => Self::Down,
            950..=969 => Self::Permanent,
            970..=979 => Self::Panic,
            980..=984 => Self::Slow,
            _ => Self::Flaky(1),
        }
    }

    fn encode(self) -> String {
        match self {
            Self::Ok => "ok".into(),
            Self::Flaky(n) => format!("flaky:{n}"),
            Self::Down => "down".into(),
            Self::Permanent => "permanent".into(),
            Self::Panic => "panic".into(),
            Self::Slow => "slow".into(),
        }
    }

    fn decode(text: &str) -> Option<Self> {
        Some(match text {
            "ok" => Self::Ok,
            "down" => Self::Down,
            "permanent" => Self::Permanent,
            "panic" => Self::Panic,
            "slow" => Self::Slow,
            flaky => Self::Flaky(flaky.strip_prefix("flaky:")?.parse().ok()?),
        })
    }
}

/// Soak parameters; every random choice comes from `seed`.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub messages: usize,
    pub seed: u64,
    /// Queue depth the producer keeps the source under.
    pub max_queued: usize,
    /// Share of SendMessageBatch calls that fail as a whole, and of entries refused.
    pub failed_calls: f64,
    pub refused_entries: f64,
    /// Share of SendMessageBatch calls that never answer (a stalled connection), half of them
    /// after SQS took the messages: the carry-out's deadline must cut them off.
    pub stalled_calls: f64,
    /// Share of idempotency store calls (claim, complete, release) that fail, half of them after
    /// the write took effect (the answer lost), as a throttled or timed-out DynamoDB call does.
    pub store_faults: f64,
    /// Share of SQS and store calls that answer late: a real wait of up to half the batch's time,
    /// while records run and while their fates are carried out.
    pub slow_calls: f64,
    /// Share of ChangeMessageVisibilityBatch calls throttled as a whole.
    pub throttled_visibility: f64,
    /// Share of receives Lambda invokes nothing with (throttled): the messages come back after
    /// their visibility timeout with their receive count raised and no try.
    pub throttled_invocations: f64,
    /// Share of batches whose visibility runs out while they are handled: another container
    /// receives them while the first still runs.
    pub overlapping_deliveries: f64,
    /// Share of handled batches whose delete is lost, as when the function errors: the whole
    /// batch is delivered again, records already done and copies already sent included.
    pub lost_deletes: f64,
    pub max_receive_count: u32,
    pub visibility: Duration,
    pub retry: RetryPolicy,
    /// Time the handler of a `Slow` message takes, and the time a batch gets.
    pub slow_for: Duration,
    pub budget: Duration,
    pub reprocess_cap: u32,
    /// Records the processor handles at once.
    pub concurrency: NonZeroUsize,
    /// A FIFO source (and DLQ) with the messages dealt round this many message groups.
    pub fifo_groups: Option<usize>,
    /// Simulated Lambda containers: idempotency guards of their own over one shared store.
    pub containers: NonZeroUsize,
    /// A long outage: every message calls a downstream, behind a circuit breaker, that is down
    /// this long from the start (longer than the retry policy's deferral age limit).
    pub outage: Option<Outage>,
    /// The containers share this DynamoDB table (on the moto run) instead of a store in memory
    /// with DynamoDB's conditional semantics.
    pub idempotency_table: Option<String>,
    /// Whether effects out of their FIFO group's order break the invariant. Not on moto: when
    /// several in-flight messages of a group become visible at once, moto 5.x hands out the
    /// group's last one first (docs/reliability.md), which SQS does not; there the order is
    /// counted and shown, and the in-memory runs hold the engine to it.
    pub order_checked: bool,
    /// A second source queue shares the DLQ; the messages are dealt between the two, and the
    /// scheduled redrive must send each dead letter home to its own.
    pub second_source: bool,
    /// FIFO: what a head that would be dead-lettered means for its group. With `Hold`, an
    /// operator releases the held heads from time to time, and the order of every group's
    /// effects is checked to the end, the redrive included.
    pub fifo_on_dead_letter: FifoOnDeadLetter,
}

/// The store the simulated containers share, and the FIFO attempt ledger in it (on DynamoDB the
/// same table holds both, as in Lambda).
enum SharedStore {
    Memory(MemoryStore, MemoryLedger),
    DynamoDb(DynamoDbStore),
}

impl IdempotencyStore for SharedStore {
    async fn claim(
        &self,
        key: &str,
        payload: Option<u64>,
        lease: Duration,
    ) -> Result<Claim, PortError> {
        match self {
            Self::Memory(store, _) => store.claim(key, payload, lease).await,
            Self::DynamoDb(store) => store.claim(key, payload, lease).await,
        }
    }
    async fn complete(
        &self,
        key: &str,
        payload: Option<u64>,
        keep: Duration,
    ) -> Result<(), PortError> {
        match self {
            Self::Memory(store, _) => store.complete(key, payload, keep).await,
            Self::DynamoDb(store) => store.complete(key, payload, keep).await,
        }
    }
    async fn abandon(&self, key: &str) -> Result<(), PortError> {
        match self {
            Self::Memory(store, _) => store.abandon(key).await,
            Self::DynamoDb(store) => IdempotencyStore::abandon(store, key).await,
        }
    }
}

impl SharedStore {
    fn ledger(&self) -> &dyn AttemptLedger {
        match self {
            Self::Memory(_, ledger) => ledger,
            Self::DynamoDb(store) => store,
        }
    }
}

/// Seeded late answers: a share of calls waits (real time, which the batch's deadline counts in)
/// up to `max` before it is made. Every call yields once, so that calls interleave as they do on
/// a network.
struct Latency {
    rng: Mutex<fastrand::Rng>,
    share: f64,
    max: Duration,
    delayed: AtomicU64,
}

impl Latency {
    fn new(seed: u64, share: f64, max: Duration) -> Self {
        Self {
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            share,
            max,
            delayed: AtomicU64::new(0),
        }
    }

    async fn wait(&self) {
        let wait = {
            let mut rng = self.rng.lock().unwrap();
            (rng.f64() < self.share).then(|| rng.u64(1..=duration_ms(self.max).max(1)))
        };
        match wait {
            Some(ms) => {
                self.delayed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            None => tokio::task::yield_now().await,
        }
    }
}

/// The shared store behind seeded faults: a call answers late, or fails before or after its write
/// took effect.
struct FaultyStore {
    inner: SharedStore,
    latency: Latency,
    rng: Mutex<fastrand::Rng>,
    share: f64,
    injected: AtomicU64,
}

impl FaultyStore {
    /// `None` to go ahead; else whether the write is to take effect before the failure.
    fn fault(&self) -> Option<bool> {
        let mut rng = self.rng.lock().unwrap();
        (rng.f64() < self.share).then(|| rng.bool())
    }

    async fn call<T>(
        &self,
        operation: &'static str,
        call: impl std::future::Future<Output = Result<T, PortError>>,
    ) -> Result<T, PortError> {
        self.latency.wait().await;
        let Some(applied) = self.fault() else {
            return call.await;
        };
        self.injected.fetch_add(1, Ordering::Relaxed);
        if applied {
            call.await?;
        }
        Err(PortError::new(
            operation,
            "injected: ProvisionedThroughputExceededException",
        ))
    }
}

/// The ledger's calls meet the store's faults: failed (half of them after the write took effect)
/// and late.
impl AttemptLedger for FaultyStore {
    fn entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<LedgerEntry>, PortError>> {
        Box::pin(self.call("BatchGetItem", self.inner.ledger().entries(message_ids)))
    }
    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(
            self.call(
                "UpdateItem",
                self.inner
                    .ledger()
                    .record_untried(message_id, receive_count),
            ),
        )
    }
    fn hold<'a>(
        &'a self,
        message_id: &'a str,
        hold: &'a Hold,
        untried: bool,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(self.call(
            "UpdateItem",
            self.inner.ledger().hold(message_id, hold, untried),
        ))
    }
    fn release_hold<'a>(
        &'a self,
        message_id: &'a str,
        release: Release,
    ) -> BoxFuture<'a, Result<Option<Hold>, PortError>> {
        self.inner.ledger().release_hold(message_id, release)
    }
    fn held(&self) -> BoxFuture<'_, Result<Vec<(String, Hold)>, PortError>> {
        self.inner.ledger().held()
    }
}

impl IdempotencyStore for FaultyStore {
    async fn claim(
        &self,
        key: &str,
        payload: Option<u64>,
        lease: Duration,
    ) -> Result<Claim, PortError> {
        self.call("PutItem", self.inner.claim(key, payload, lease))
            .await
    }
    async fn complete(
        &self,
        key: &str,
        payload: Option<u64>,
        keep: Duration,
    ) -> Result<(), PortError> {
        self.call("PutItem", self.inner.complete(key, payload, keep))
            .await
    }
    async fn abandon(&self, key: &str) -> Result<(), PortError> {
        self.call("DeleteItem", self.inner.abandon(key)).await
    }
}

/// The long-outage scenario's downstream.
#[derive(Debug, Clone)]
pub struct Outage {
    pub down_for: Duration,
    pub breaker: redrive::BreakerSettings,
}

/// The figures the soak prints; `lost` must be 0.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SoakReport {
    pub messages: usize,
    pub processed: usize,
    pub in_dlq: usize,
    pub in_dlq_without_metadata: usize,
    pub still_queued: usize,
    pub lost: usize,
    pub effects_more_than_once: usize,
    pub duplicates_absorbed: u64,
    pub duplicate_dead_letters: usize,
    /// Messages in the DLQ that also took effect: on FIFO the attempt is the receive count, so a
    /// dead-lettered record delivered again after a lost delete is a later attempt, and may
    /// succeed (its dead letter, a panic's, stays for review; redriven, the guard absorbs it).
    pub dead_and_processed: usize,
    pub redriven: u32,
    pub beyond_cap: usize,
    pub invocations: u64,
    pub injected_send_failures: u64,
    /// SendMessageBatch calls that never answered, and those of them SQS had carried out.
    pub stalled_calls: u64,
    pub stalled_after_delivery: u64,
    /// Idempotency store calls failed, and completions the store never confirmed (the message
    /// counted as done).
    pub store_faults: u64,
    pub unconfirmed_completions: u64,
    pub lost_deletes: u64,
    /// Calls that answered late (SQS and the store), and visibility changes throttled.
    pub slow_calls: u64,
    pub throttled_visibility: u64,
    /// Batches Lambda did not invoke with, and batches received again while still handled.
    pub throttled_invocations: u64,
    pub overlapping_deliveries: u64,
    /// Invocations Lambda stopped at their deadline (the whole batch delivered again): the
    /// processor is to answer before it, whatever the calls do.
    pub timed_out: u64,
    /// FIFO: effects that came before an earlier message of their group's (before the redrive,
    /// which brings dead letters home out of order by nature).
    pub out_of_order: u64,
    /// The first effect that came out of order, to say where.
    pub first_out_of_order: Option<String>,
    /// Whether the order is part of the invariant ([`SoakConfig::order_checked`]).
    pub order_checked: bool,
    /// With hold: the order is checked to the end, the redrive included.
    pub order_end_to_end: bool,
    /// With hold: held heads the operator released to be tried again, and to the DLQ.
    pub released_to_retry: u32,
    pub released_to_dlq: u32,
    /// Effects of a message that arrived from a source queue other than its own (two sources
    /// sharing one DLQ: a dead letter redriven to the wrong one).
    pub wrong_source: u64,
    /// Re-sends of one message in one chain (from the source until it is done or dead-lettered;
    /// a redrive starts a new chain), as Lambda's recursive loop detection counts them.
    pub longest_chain: u32,
    pub chains_past_16: usize,
    /// Dead letters whose deferral outlasted `REDRIVE_DEFER_MAX_AGE` (kind `deferred_too_long`).
    pub deferred_too_long: usize,
    /// The most tries one message had in one chain, and the chains with more than
    /// `REDRIVE_MAX_ATTEMPTS`.
    pub most_tries: u32,
    pub tries_beyond_limit: usize,
    /// Whether tries beyond the limit break the invariant: on FIFO, whose attempts the ledger
    /// counts, yes; on a standard queue a lost delete brings back a copy already re-sent, which is
    /// tried again with the attempt it carries.
    pub tries_checked: bool,
    /// Per minute of the run's clock: records deferred and transient errors (the EMF figures
    /// the consumer's alarms watch).
    pub minutes: Vec<(u32, u32)>,
    pub elapsed: Duration,
}

/// The consumer's default alarm thresholds (`infra/redrive.auto.tfvars.json`).
const DEFERRED_THRESHOLD: u32 = 0;
const TRANSIENT_ERRORS_THRESHOLD: u32 = 10;
/// Lambda stops a chain of invocations through the same queue after about this many.
const LAMBDA_LOOP_LIMIT: u32 = 16;

impl SoakReport {
    /// Minutes the Deferred alarm and the TransientErrors alarm were in ALARM, and whether both
    /// were back to OK in the last minute.
    pub fn alarms(&self) -> (usize, usize, bool) {
        let fires = |value: u32, threshold: u32| value > threshold;
        let deferred = |(d, _): &(u32, u32)| fires(*d, DEFERRED_THRESHOLD);
        let transient = |(_, t): &(u32, u32)| fires(*t, TRANSIENT_ERRORS_THRESHOLD);
        let ok_at_end = self
            .minutes
            .last()
            .is_none_or(|minute| !deferred(minute) && !transient(minute));
        (
            self.minutes.iter().filter(|m| deferred(m)).count(),
            self.minutes.iter().filter(|m| transient(m)).count(),
            ok_at_end,
        )
    }

    /// The invariant: nothing lost, no effect twice, nobody redriven beyond the cap.
    pub fn holds(&self) -> bool {
        self.lost == 0
            && self.effects_more_than_once == 0
            && self.beyond_cap == 0
            && self.still_queued == 0
            && (self.out_of_order == 0 || !self.order_checked)
            && (self.tries_beyond_limit == 0 || !self.tries_checked)
            && self.wrong_source == 0
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "  messages in                 {:>8}", self.messages)?;
        writeln!(f, "  processed (effect once)     {:>8}", self.processed)?;
        writeln!(
            f,
            "  in the DLQ                  {:>8}  ({} moved there by SQS without metadata)",
            self.in_dlq, self.in_dlq_without_metadata
        )?;
        writeln!(f, "  still queued                {:>8}", self.still_queued)?;
        writeln!(f, "  lost                        {:>8}", self.lost)?;
        writeln!(
            f,
            "  taken from another source   {:>8}  (two sources sharing the DLQ: redriven to the wrong one)",
            self.wrong_source
        )?;
        writeln!(
            f,
            "  effects more than once      {:>8}",
            self.effects_more_than_once
        )?;
        writeln!(
            f,
            "  duplicates absorbed         {:>8}  (deliveries of a message already done)",
            self.duplicates_absorbed
        )?;
        writeln!(f, "  duplicate dead letters      {:>8}  (one message dead-lettered twice after a lost delete)", self.duplicate_dead_letters)?;
        writeln!(
            f,
            "  dead letters also processed {:>8}  (delivered again after a lost delete, and done)",
            self.dead_and_processed
        )?;
        writeln!(
            f,
            "  redriven from the DLQ       {:>8}  (beyond the cap: {})",
            self.redriven, self.beyond_cap
        )?;
        writeln!(f, "  invocations                 {:>8}", self.invocations)?;
        writeln!(
            f,
            "  injected send failures      {:>8}  (whole calls and refused entries)",
            self.injected_send_failures
        )?;
        writeln!(
            f,
            "  stalled sends               {:>8}  (never answered, {} after SQS took them: cut off at the deadline, given back)",
            self.stalled_calls, self.stalled_after_delivery
        )?;
        writeln!(
            f,
            "  store calls failed          {:>8}  (claim, complete, release; completions never confirmed: {})",
            self.store_faults, self.unconfirmed_completions
        )?;
        writeln!(
            f,
            "  whole batches failed        {:>8}  (deletes lost: delivered again, done records too)",
            self.lost_deletes
        )?;
        writeln!(
            f,
            "  late calls                  {:>8}  (SQS and store, up to half the batch's time; visibility changes throttled: {})",
            self.slow_calls, self.throttled_visibility
        )?;
        writeln!(
            f,
            "  throttled invocations       {:>8}  (received, not tried: the receive count rises)",
            self.throttled_invocations
        )?;
        writeln!(
            f,
            "  overlapping deliveries      {:>8}  (visibility ran out mid-batch: two containers at once)",
            self.overlapping_deliveries
        )?;
        writeln!(
            f,
            "  timed out by Lambda         {:>8}  (the processor answered after its deadline)",
            self.timed_out
        )?;
        if self.order_end_to_end {
            writeln!(
                f,
                "  held heads released         {:>8}  ({} to be tried again, {} to the DLQ by the operator)",
                self.released_to_retry + self.released_to_dlq,
                self.released_to_retry,
                self.released_to_dlq
            )?;
        }
        writeln!(
            f,
            "  most tries of one message   {:>8}  ({} chains past REDRIVE_MAX_ATTEMPTS{})",
            self.most_tries,
            self.tries_beyond_limit,
            if self.tries_checked {
                "; FIFO, counted by the attempt ledger: in the invariant"
            } else {
                "; a copy whose delete was lost is tried again: not in the invariant"
            }
        )?;
        writeln!(
            f,
            "  effects out of group order  {:>8}  (FIFO, {}{}){}",
            self.out_of_order,
            if self.order_end_to_end {
                "end to end, the redrive included"
            } else {
                "before the redrive"
            },
            if self.order_checked {
                ""
            } else {
                "; moto's own FIFO order is not SQS's, so not in the invariant"
            },
            self.first_out_of_order
                .as_deref()
                .map_or_else(String::new, |first| format!("; the first: {first}"))
        )?;
        writeln!(
            f,
            "  longest re-send chain       {:>8}  (chains past Lambda's {LAMBDA_LOOP_LIMIT}: {}; the consumer's recursive_loop is Allow)",
            self.longest_chain, self.chains_past_16
        )?;
        let (deferred, transient, ok_at_end) = self.alarms();
        writeln!(
            f,
            "  deferred past the age limit {:>8}  (dead-lettered deferred_too_long, then redriven)",
            self.deferred_too_long
        )?;
        writeln!(
            f,
            "  alarms over {} minutes       Deferred > {DEFERRED_THRESHOLD}: ALARM {deferred} min; TransientErrors > {TRANSIENT_ERRORS_THRESHOLD}: ALARM {transient} min; {} in the last",
            self.minutes.len(),
            if ok_at_end { "OK" } else { "ALARM" }
        )?;
        write!(
            f,
            "  invariant                   {:>8}  ({:.1} s)",
            if self.holds() { "holds" } else { "BROKEN" },
            self.elapsed.as_secs_f64()
        )
    }
}

/// The queues the soak needs, on whichever SQS.
pub trait SoakQueues: QueuePort {
    /// Messages in a queue: visible, in flight and delayed.
    fn depth(
        &self,
        url: &str,
    ) -> impl std::future::Future<Output = Result<usize, PortError>> + Send;
    /// Nothing was visible: let time pass (sleep, or move a virtual clock on).
    fn idle(&self, url: &str) -> impl std::future::Future<Output = ()> + Send;
    /// Messages of a queue, read without consuming them. On SQS a FIFO queue shows only what is
    /// not behind a message in flight of its group, so this is for counts that may fall short.
    fn read_all(
        &self,
        url: &str,
    ) -> impl std::future::Future<Output = Result<Vec<SqsRecord<'static>>, PortError>> + Send;
    /// Every message of a queue, taken out of it: the final tally (a FIFO queue cannot be read
    /// whole without it).
    fn take_all(
        &self,
        url: &str,
    ) -> impl std::future::Future<Output = Result<Vec<SqsRecord<'static>>, PortError>> + Send;
    fn clock(&self) -> Arc<dyn Clock>;
}

/// A port decorator that fails sends (whole calls and single entries, and calls that never answer,
/// before or after SQS took the messages), throttles visibility changes, and answers late, seeded.
pub struct Faulty<Q> {
    inner: Q,
    latency: Latency,
    throttled_visibility: f64,
    throttle_rng: Mutex<fastrand::Rng>,
    throttled: AtomicU64,
    rng: Mutex<fastrand::Rng>,
    failed_calls: f64,
    refused_entries: f64,
    stalled_calls: f64,
    /// The stalls' own draws, so that adding them left the other faults' sequence as it was.
    stall_rng: Mutex<fastrand::Rng>,
    enabled: AtomicBool,
    injected: AtomicU64,
    /// Stalled calls, and those of them that SQS had carried out before they stalled.
    stalls: AtomicU64,
    stalls_after_delivery: AtomicU64,
    /// Copies that reached `source` per message (the `id` in its body): its chain of re-sends.
    source: String,
    chains: Mutex<HashMap<String, u32>>,
}

impl<Q: QueuePort> Faulty<Q> {
    pub fn new(inner: Q, seed: u64, failed_calls: f64, refused_entries: f64) -> Self {
        Self {
            inner,
            latency: Latency::new(seed ^ 0x1a7e, 0.0, Duration::ZERO),
            throttled_visibility: 0.0,
            throttle_rng: Mutex::new(fastrand::Rng::with_seed(seed ^ 0x7407)),
            throttled: AtomicU64::new(0),
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            failed_calls,
            refused_entries,
            stalled_calls: 0.0,
            stall_rng: Mutex::new(fastrand::Rng::with_seed(seed ^ 0x57a11)),
            enabled: AtomicBool::new(true),
            injected: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            stalls_after_delivery: AtomicU64::new(0),
            source: String::new(),
            chains: Mutex::default(),
        }
    }

    /// Lets this share of SendMessageBatch calls stall.
    #[must_use]
    pub fn stalling(mut self, share: f64) -> Self {
        self.stalled_calls = share;
        self
    }

    /// Lets this share of calls answer up to `max` late.
    #[must_use]
    pub fn late(mut self, share: f64, max: Duration) -> Self {
        self.latency.share = share;
        self.latency.max = max;
        self
    }

    /// Lets this share of ChangeMessageVisibilityBatch calls be throttled.
    #[must_use]
    pub fn throttling_visibility(mut self, share: f64) -> Self {
        self.throttled_visibility = share;
        self
    }

    /// Counts the copies sent to `source_url`, per message.
    #[must_use]
    pub fn counting_chains_to(mut self, source_url: &str) -> Self {
        self.source = source_url.to_owned();
        self
    }

    /// The chains counted so far, and a fresh start (a redrive begins new chains).
    fn take_chains(&self) -> HashMap<String, u32> {
        std::mem::take(&mut self.chains.lock().unwrap())
    }

    pub fn heal(&self) {
        self.enabled.store(false, Ordering::SeqCst);
    }

    fn draw(&self, share: f64) -> bool {
        self.enabled.load(Ordering::SeqCst) && self.rng.lock().unwrap().f64() < share
    }
}

impl<Q: QueuePort> ForwardingPort for Faulty<Q> {
    type Inner = Q;

    fn inner(&self) -> &Q {
        &self.inner
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        messages: &[OutgoingMessage<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.latency.wait().await;
        let stall = |share: f64| {
            self.enabled.load(Ordering::SeqCst) && self.stall_rng.lock().unwrap().f64() < share
        };
        if stall(self.stalled_calls) {
            self.stalls.fetch_add(1, Ordering::Relaxed);
            if stall(0.5) {
                self.stalls_after_delivery.fetch_add(1, Ordering::Relaxed);
                self.inner.send_batch(queue_url, messages).await?;
            }
            std::future::pending::<()>().await;
        }
        if self.draw(self.failed_calls) {
            self.injected
                .fetch_add(messages.len() as u64, Ordering::Relaxed);
            return Err(PortError::new(
                "SendMessageBatch",
                "injected: ServiceUnavailable",
            ));
        }
        let refused: Vec<usize> = (0..messages.len())
            .filter(|_| self.draw(self.refused_entries))
            .collect();
        let kept: Vec<OutgoingMessage<'_>> = messages
            .iter()
            .enumerate()
            .filter(|(i, _)| !refused.contains(i))
            .map(|(_, m)| m.clone())
            .collect();
        let kept_index: Vec<usize> = (0..messages.len())
            .filter(|i| !refused.contains(i))
            .collect();
        let mut failures = if kept.is_empty() {
            Vec::new()
        } else {
            self.inner.send_batch(queue_url, &kept).await?
        };
        for failure in &mut failures {
            failure.index = kept_index[failure.index];
        }
        if queue_url == self.source {
            let arrived =
                (0..kept.len()).filter(|i| !failures.iter().any(|f| f.index == kept_index[*i]));
            let mut chains = self.chains.lock().unwrap();
            for i in arrived {
                let body: serde_json::Value =
                    serde_json::from_str(&kept[i].body).unwrap_or_default();
                let id = body["id"].as_str().unwrap_or_default().to_owned();
                *chains.entry(id).or_default() += 1;
            }
        }
        self.injected
            .fetch_add(refused.len() as u64, Ordering::Relaxed);
        failures.extend(refused.into_iter().map(|index| EntryFailure {
            index,
            code: "InternalError".into(),
            message: "injected".into(),
        }));
        Ok(failures)
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.latency.wait().await;
        if self.enabled.load(Ordering::SeqCst)
            && self.throttle_rng.lock().unwrap().f64() < self.throttled_visibility
        {
            self.throttled.fetch_add(1, Ordering::Relaxed);
            return Err(PortError::new(
                "ChangeMessageVisibilityBatch",
                "injected: ThrottlingException: Rate exceeded",
            ));
        }
        self.inner.change_visibility_batch(queue_url, changes).await
    }
}

/// The handler under test: follows each message's plan and records its effect, and on FIFO
/// whether it came in its group's order.
pub struct PlannedHandler {
    effects: Mutex<HashMap<String, u32>>,
    down: AtomicBool,
    slow_for: Duration,
    /// The latest message number that took effect in each group, while the order is checked.
    group_order: Mutex<Option<HashMap<String, usize>>>,
    out_of_order: AtomicU64,
    first_out_of_order: Mutex<Option<String>>,
    wrong_source: AtomicU64,
    /// The long outage: a downstream behind a breaker, down until `heal_at_ms` on `clock`.
    outage: Option<DownstreamOutage>,
    /// Tries of each message per chain (its id, reprocess count and fresh sets of attempts: a
    /// redrive starts a new chain, and so does an operator's release of a held head).
    tries: Mutex<HashMap<(String, u32, u32), u32>>,
    /// Fresh sets of attempts an operator gave each held message (`dlq release`), by SQS message
    /// id (a FIFO message keeps its id while it waits in place).
    fresh_sets: Mutex<HashMap<String, u32>>,
}

struct DownstreamOutage {
    breaker: CircuitBreaker,
    heal_at_ms: u64,
    clock: Arc<dyn Clock>,
}

#[derive(serde::Deserialize)]
struct Body<'a> {
    id: &'a str,
    plan: &'a str,
    /// The message's number: within a group, a later message has a higher one.
    seq: usize,
    group: Option<&'a str>,
    /// The ARN of the source queue the message was sent to (with two sources).
    src: Option<&'a str>,
}

impl RecordHandler for PlannedHandler {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let body: Body<'_> = message.json()?;
        let plan =
            Plan::decode(body.plan).ok_or_else(|| RecordError::permanent("bad_plan", body.plan))?;
        if body.src.is_some() && message.record().event_source_arn.as_deref() != body.src {
            self.wrong_source.fetch_add(1, Ordering::Relaxed);
        }
        let chain = (
            body.id.to_owned(),
            message.meta().map_or(0, |meta| meta.reprocess_count),
            self.fresh_sets
                .lock()
                .unwrap()
                .get(message.id())
                .copied()
                .unwrap_or(0),
        );
        let tried = || {
            let mut tries = self.tries.lock().unwrap();
            let tries = tries.entry(chain.clone()).or_default();
            *tries += 1;
            *tries
        };
        let tries = if let Some(outage) = &self.outage {
            let down = outage.clock.now_ms() < outage.heal_at_ms;
            let called = outage
                .breaker
                .call(|| async move {
                    if down {
                        Err(RecordError::transient("unavailable", "downstream down"))
                    } else {
                        Ok(())
                    }
                })
                .await;
            // A deferral (the breaker open, or its probe failed) spends no attempt: not a try.
            if matches!(&called, Err(error) if error.is_deferral()) {
                return called;
            }
            let tries = tried();
            called?;
            tries
        } else {
            tried()
        };
        // The bug behind a panic is fixed before a held head is released: one panic per message.
        let first = tries == 1
            && message.attempt() == 1
            && message.meta().is_none_or(|m| m.reprocess_count == 0);
        match plan {
            Plan::Flaky(n) if message.attempt() <= n => {
                return Err(RecordError::transient("timeout", "flaky downstream"))
            }
            Plan::Down if self.down.load(Ordering::SeqCst) => {
                return Err(RecordError::transient("unavailable", "downstream down"))
            }
            Plan::Permanent => return Err(RecordError::permanent("invalid", "invalid input")),
            Plan::Panic if first => panic!("bug on {}", body.id),
            Plan::Slow if first => tokio::time::sleep(self.slow_for).await,
            _ => {}
        }
        if let (Some(group), Some(order)) = (body.group, self.group_order.lock().unwrap().as_mut())
        {
            let latest = order.entry(group.to_owned()).or_insert(body.seq);
            if body.seq < *latest && self.out_of_order.fetch_add(1, Ordering::Relaxed) == 0 {
                *self.first_out_of_order.lock().unwrap() = Some(format!(
                    "{} (seq {}) after seq {latest} of {group}, attempt {}, receive count {}",
                    body.id,
                    body.seq,
                    message.attempt(),
                    message
                        .record()
                        .attributes
                        .approximate_receive_count
                        .as_deref()
                        .unwrap_or("?"),
                ));
            }
            *latest = body.seq.max(*latest);
        }
        *self
            .effects
            .lock()
            .unwrap()
            .entry(body.id.to_owned())
            .or_default() += 1;
        Ok(())
    }
}

/// Runs the soak on `sqs` with the source queue `source` (URL and ARN; whose DLQ is `dlq`), and
/// `second`, a source sharing that DLQ, if given: produce and consume with faults until the
/// sources are empty, heal and redrive the DLQ, then tally.
pub async fn run<Q: SoakQueues>(
    sqs: Q,
    source: (&str, &str),
    second: Option<(&str, &str)>,
    dlq: &str,
    config: &SoakConfig,
) -> Result<SoakReport, PortError> {
    let started = Instant::now();
    let (source_url, source_arn) = source;
    let clock = sqs.clock();
    let queue = Faulty::new(
        sqs,
        config.seed,
        config.failed_calls,
        config.refused_entries,
    )
    .stalling(config.stalled_calls)
    .late(config.slow_calls, config.budget / 2)
    .throttling_visibility(config.throttled_visibility)
    .counting_chains_to(source_url);
    let planned = PlannedHandler::new(config, &clock);
    let store = Arc::new(FaultyStore {
        inner: match &config.idempotency_table {
            None => SharedStore::Memory(
                MemoryStore::new(config.messages * 2).with_clock(clock.clone()),
                MemoryLedger::new(),
            ),
            Some(table) => {
                SharedStore::DynamoDb(DynamoDbStore::lazy(table.as_str()).with_clock(clock.clone()))
            }
        },
        latency: Latency::new(config.seed ^ 0x1a7d, config.slow_calls, config.budget / 2),
        rng: Mutex::new(fastrand::Rng::with_seed(config.seed ^ 0xd1d0)),
        share: config.store_faults,
        injected: AtomicU64::new(0),
    });
    // FIFO attempts are counted with the ledger, as the tfvars' FIFO consumer does.
    let ledger: Option<Arc<dyn AttemptLedger>> = config
        .fifo_groups
        .map(|_| Arc::clone(&store) as Arc<dyn AttemptLedger>);
    let processor_of = |url: &str| {
        let processor = Processor::new(
            &queue,
            ProcessorConfig {
                dlq_url: Some(dlq.to_owned()),
                source_queue_url: Some(url.to_owned()),
                retry: config.retry.clone(),
                deadline_margin: Duration::from_millis(5),
                concurrency: config.concurrency,
                fifo_on_dead_letter: config.fifo_on_dead_letter,
            },
        )
        .with_clock(clock.clone())
        .with_seed(config.seed);
        match &ledger {
            Some(ledger) => processor.with_ledger(Arc::clone(ledger)),
            None => processor,
        }
    };
    let processor = processor_of(source_url);
    let second_processor = second.map(|(url, _)| processor_of(url));
    let containers = containers(&planned, &store, config);
    let mut report = SoakReport {
        messages: config.messages,
        order_checked: config.order_checked,
        order_end_to_end: matches!(config.fifo_on_dead_letter, FifoOnDeadLetter::Hold { .. }),
        ..SoakReport::default()
    };
    let sources = if second.is_some() { 2 } else { 1 };
    let mut drive = Driver {
        queue: &queue,
        processor: &processor,
        containers: &containers,
        url: source_url,
        arn: source_arn,
        share: (0, sources),
        rng: fastrand::Rng::with_seed(config.seed ^ 0xde1e7e),
        config,
        started_ms: clock.now_ms(),
        // The operator's calls are not the consumers': no faults injected in them.
        ledger: store.inner.ledger(),
        fresh_sets: &planned.fresh_sets,
    };
    let mut second = second
        .zip(second_processor.as_ref())
        .map(|((url, arn), processor)| Driver {
            processor,
            url,
            arn,
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
    report.duplicates_absorbed = containers.iter().map(Idempotent::duplicates).sum();
    report.store_faults = store.injected.load(Ordering::Relaxed);
    report.slow_calls = queue.latency.delayed.load(Ordering::Relaxed)
        + store.latency.delayed.load(Ordering::Relaxed);
    report.throttled_visibility = queue.throttled.load(Ordering::Relaxed);
    report.unconfirmed_completions = containers
        .iter()
        .map(Idempotent::unconfirmed_completions)
        .sum();
    report.elapsed = started.elapsed();
    Ok(report)
}

impl PlannedHandler {
    fn new(config: &SoakConfig, clock: &Arc<dyn Clock>) -> Self {
        Self {
            effects: Mutex::default(),
            down: AtomicBool::new(true),
            slow_for: config.slow_for,
            group_order: Mutex::new(config.fifo_groups.map(|_| HashMap::new())),
            out_of_order: AtomicU64::new(0),
            first_out_of_order: Mutex::default(),
            wrong_source: AtomicU64::new(0),
            tries: Mutex::default(),
            fresh_sets: Mutex::default(),
            outage: config.outage.as_ref().map(|outage| DownstreamOutage {
                breaker: CircuitBreaker::with_clock("downstream", outage.breaker, clock.clone()),
                heal_at_ms: clock.now_ms() + duration_ms(outage.down_for),
                clock: clock.clone(),
            }),
        }
    }
}

/// The Lambda containers: guards of their own around the one handler (whose effects are the
/// invariant's ledger), sharing one store, as Lambda containers share a DynamoDB table. Each
/// invocation goes to a container drawn at random, so the copies of a message reach different ones.
fn containers<'h>(
    planned: &'h PlannedHandler,
    store: &Arc<FaultyStore>,
    config: &SoakConfig,
) -> Vec<Idempotent<&'h PlannedHandler, Arc<FaultyStore>>> {
    (0..config.containers.get())
        .map(|_| {
            let mut guard =
                Idempotent::new(planned, store.clone(), KeyFrom::BodyField("/id".into()));
            // A handler cut off at the deadline cannot release its claim: the lease is what
            // frees it, so it is set to about the function timeout.
            guard.lease = config.budget * 2;
            guard
        })
        .collect()
}

/// The soak's messages, each with its fault plan (none in the outage: there the downstream is
/// the fault), in a message group on FIFO.
fn messages<'a>(
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
        let body = match &group {
            Some(group) => {
                format!(r#"{{"id":"m-{n}","plan":"{plan}","seq":{n},"group":"{group}"{src}}}"#)
            }
            None => format!(r#"{{"id":"m-{n}","plan":"{plan}","seq":{n}{src}}}"#),
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

struct Driver<'a, Q, H> {
    queue: &'a Faulty<Q>,
    processor: &'a Processor<&'a Faulty<Q>>,
    containers: &'a [H],
    url: &'a str,
    arn: &'a str,
    /// Which of the messages this source gets: those whose number is `.0` modulo `.1`.
    share: (usize, usize),
    rng: fastrand::Rng,
    config: &'a SoakConfig,
    started_ms: u64,
    /// The ledger the operator of a hold reads and releases held heads in.
    ledger: &'a dyn AttemptLedger,
    /// Where the operator's fresh sets of attempts are counted (the handler's).
    fresh_sets: &'a Mutex<HashMap<String, u32>>,
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

impl<Q: SoakQueues, H: RecordHandler> Driver<'_, Q, H> {
    /// Phase 1: produce (keeping the source under `max_queued`) and consume with faults until the
    /// source is empty.
    async fn produce_and_consume(&mut self, report: &mut SoakReport) -> Result<(), PortError> {
        let config = self.config;
        let mut messages = messages(config, self.share, self.arn).peekable();
        loop {
            let depth = self.queue.inner().depth(self.url).await?;
            if messages.peek().is_some() && depth < config.max_queued {
                let batch: Vec<OutgoingMessage<'static>> = messages
                    .by_ref()
                    .take((config.max_queued - depth).min(10))
                    .collect();
                let refused = self.queue.inner().send_batch(self.url, &batch).await?;
                assert!(
                    refused.is_empty(),
                    "the producer's own sends are not faulted"
                );
            }
            if !self.invoke(report).await? {
                if messages.peek().is_none() && self.queue.inner().depth(self.url).await? == 0 {
                    return Ok(());
                }
                if !self.release_held(report).await? {
                    self.queue.inner().idle(self.url).await;
                }
            }
        }
    }

    /// Whether FIFO heads hold their groups in this run.
    fn holds(&self) -> bool {
        matches!(
            self.config.fifo_on_dead_letter,
            FifoOnDeadLetter::Hold { .. }
        )
    }

    /// The operator of a hold, when nothing else is visible: every held head is released, to be
    /// tried again the first time (a fix deployed) and to the DLQ after that, or at once for a
    /// permanent failure, and made visible through its receipt handle. False when none was
    /// waiting for a release.
    async fn release_held(&mut self, report: &mut SoakReport) -> Result<bool, PortError> {
        if !self.holds() {
            return Ok(false);
        }
        let mut released = false;
        // A head released to the DLQ stays listed until it comes back and goes there.
        for (id, hold) in self.ledger.held().await? {
            if hold.release.is_some() {
                continue;
            }
            released = true;
            let id = &id;
            let released_before = self.ledger.entries(&[id.as_str()]).await?[0].attempts_from > 0;
            let release = if released_before || hold.error_kind == "invalid" {
                report.released_to_dlq += 1;
                Release::DeadLetter
            } else {
                report.released_to_retry += 1;
                *self
                    .fresh_sets
                    .lock()
                    .unwrap()
                    .entry(id.clone())
                    .or_default() += 1;
                Release::Retry
            };
            // A stale receipt (the head came back meanwhile) is refused: it is visible anyway.
            release_head(self.ledger, self.queue.inner(), id, release).await?;
        }
        Ok(released)
    }

    /// Phase 2: the downstream and SQS heal; the DLQ is redriven under the policy until nothing
    /// more can go home (permanent failures stay for review).
    async fn heal_and_redrive(
        &mut self,
        planned: &PlannedHandler,
        dlq: &str,
        mut second: Option<&mut Self>,
        report: &mut SoakReport,
    ) -> Result<(), PortError> {
        let queue = self.queue;
        report.deferred_too_long = queue
            .inner()
            .read_all(dlq)
            .await?
            .iter()
            .filter_map(|record| Meta::of(record).and_then(Result::ok))
            .filter(|meta| &*meta.error_kind == "deferred_too_long")
            .count();
        // An outage outlasts the deferrals: its messages wait in the DLQ, alarmed, until the
        // downstream is back; then the redrive brings them home.
        if let Some(outage) = &planned.outage {
            while outage.clock.now_ms() < outage.heal_at_ms {
                queue.inner().idle(self.url).await;
            }
        }
        planned.down.store(false, Ordering::SeqCst);
        // With hold nothing leaves a group's order, the redrive included: checked to the end.
        if !self.holds() {
            *planned.group_order.lock().unwrap() = None;
        }
        queue.heal();
        let settings = ReprocessSettings {
            policy: ReprocessPolicy {
                max_reprocess: self.config.reprocess_cap,
                eligible_after: Duration::ZERO,
                discard_kinds: Vec::new(),
            },
            rate_per_second: 3000.0,
            max_messages: 1_000_000,
            ..ReprocessSettings::from_lookup([], |_| None)
                .map_err(|e| PortError::new("settings", e))?
        };
        let reprocessor = Reprocessor::new(queue, &settings).with_clock(queue.inner().clock());
        for _ in 0..=self.config.reprocess_cap {
            // As the schedule runs it: the origin in each dead letter's metadata, the source queue
            // for what SQS moved without any.
            let plan = ReprocessCommand {
                source: Some(dlq.to_owned()),
                fallback_destination: Some(self.arn.to_owned()),
                ..ReprocessCommand::default()
            }
            .plan(&settings)
            .map_err(|e| PortError::new("plan", e))?;
            let summary = reprocessor.run(&plan, None, |_| {}).await?;
            report.redriven += summary.reprocessed;
            if summary.reprocessed == 0 {
                return Ok(());
            }
            loop {
                let mut waiting = queue.inner().depth(self.url).await?;
                let mut invoked = self.invoke(report).await?;
                if let Some(second) = second.as_deref_mut() {
                    waiting += queue.inner().depth(second.url).await?;
                    invoked |= second.invoke(report).await?;
                }
                if waiting == 0 {
                    break;
                }
                if !invoked && !self.release_held(report).await? {
                    queue.inner().idle(self.url).await;
                }
            }
        }
        Ok(())
    }

    /// The invariant's figures: every message processed, in the DLQ or still queued; effects
    /// counted; the longest chain of re-sends.
    async fn tally(
        &self,
        planned: &PlannedHandler,
        mut chains: HashMap<String, u32>,
        dlq: &str,
        second: Option<&Self>,
        report: &mut SoakReport,
    ) -> Result<(), PortError> {
        let (queue, config) = (self.queue, self.config);
        for (id, copies) in queue.take_chains() {
            let longest = chains.entry(id).or_default();
            *longest = (*longest).max(copies);
        }
        report.longest_chain = chains.values().copied().max().unwrap_or(0);
        report.chains_past_16 = chains.values().filter(|n| **n > LAMBDA_LOOP_LIMIT).count();
        let effects = planned.effects.lock().unwrap().clone();
        report.injected_send_failures = queue.injected.load(Ordering::Relaxed);
        report.stalled_calls = queue.stalls.load(Ordering::Relaxed);
        report.stalled_after_delivery = queue.stalls_after_delivery.load(Ordering::Relaxed);
        report.out_of_order = planned.out_of_order.load(Ordering::Relaxed);
        {
            let tries = planned.tries.lock().unwrap();
            report.most_tries = tries.values().copied().max().unwrap_or(0);
            report.tries_beyond_limit = tries
                .values()
                .filter(|&&n| n > config.retry.max_attempts)
                .count();
        }
        report.tries_checked = config.fifo_groups.is_some();
        report.first_out_of_order = planned.first_out_of_order.lock().unwrap().clone();
        report.wrong_source = planned.wrong_source.load(Ordering::Relaxed);
        report.effects_more_than_once = effects.values().filter(|n| **n > 1).count();
        report.processed = effects.len();
        let mut dead: BTreeMap<String, u32> = BTreeMap::new();
        for record in queue.inner().take_all(dlq).await? {
            let body: serde_json::Value =
                serde_json::from_str(record.body.as_deref().unwrap_or_default())
                    .unwrap_or_default();
            let id = body["id"].as_str().unwrap_or_default().to_owned();
            match Meta::of(&record).and_then(Result::ok) {
                Some(meta) if meta.reprocess_count > config.reprocess_cap => report.beyond_cap += 1,
                Some(_) => {}
                None => report.in_dlq_without_metadata += 1,
            }
            *dead.entry(id).or_default() += 1;
        }
        report.duplicate_dead_letters = dead.values().map(|n| (*n - 1) as usize).sum();
        let dead_not_processed = dead.keys().filter(|id| !effects.contains_key(*id)).count();
        report.dead_and_processed = dead.len() - dead_not_processed;
        report.in_dlq = dead.len();
        report.still_queued = queue.inner().depth(self.url).await?;
        if let Some(second) = second {
            report.still_queued += queue.inner().depth(second.url).await?;
        }
        report.lost = config
            .messages
            .saturating_sub(report.processed + dead_not_processed + report.still_queued);
        Ok(())
    }

    /// One receive as the event source mapping makes it, and the invocation with it in a container
    /// drawn at random; false when nothing was visible. Lambda's side fails too: a throttled
    /// invocation leaves the batch untried, and a batch whose visibility runs out mid-way reaches a
    /// second container while the first still handles it.
    async fn invoke(&mut self, report: &mut SoakReport) -> Result<bool, PortError> {
        let records = self.receive().await?;
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
                .change_visibility_batch(self.url, &changes)
                .await?;
            self.receive().await?
        } else {
            Vec::new()
        };
        let first = &self.containers[self.rng.usize(..self.containers.len())];
        let second = &self.containers[self.rng.usize(..self.containers.len())];
        let (first, second) =
            tokio::join!(self.handle(first, &records), self.handle(second, &again));
        self.apply_answer(report, &records, first).await?;
        self.apply_answer(report, &again, second).await?;
        Ok(true)
    }

    async fn receive(&self) -> Result<Vec<SqsRecord<'static>>, PortError> {
        let mut records = self
            .queue
            .receive(self.url, 10, self.config.visibility, Duration::ZERO)
            .await?;
        for record in &mut records {
            record.event_source_arn = Some(Text::from(self.arn.to_owned()));
        }
        Ok(records)
    }

    /// One invocation with `records` in `container`: its response, or `None` when Lambda stopped
    /// it at its deadline (or there was nothing to invoke with).
    async fn handle(
        &self,
        container: &H,
        records: &[SqsRecord<'static>],
    ) -> Option<redrive::Processed> {
        if records.is_empty() {
            return None;
        }
        let clock = self.queue.inner().clock();
        let timeout = Duration::from_millis(5) + self.config.budget;
        let deadline = clock.now_ms() + duration_ms(timeout);
        let processing = self.processor.process(container, records, deadline);
        tokio::time::timeout(timeout, processing)
            .await
            .ok()
            .map(|processed| processed.expect("records carry message ids"))
    }

    /// What the event source mapping does with an invocation's answer: deletes what did not fail;
    /// nothing after a timeout or a lost delete (the whole batch comes back).
    async fn apply_answer(
        &mut self,
        report: &mut SoakReport,
        records: &[SqsRecord<'static>],
        processed: Option<redrive::Processed>,
    ) -> Result<(), PortError> {
        if records.is_empty() {
            return Ok(());
        }
        report.invocations += 1;
        let Some(processed) = processed else {
            report.timed_out += 1;
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
        let failed: Vec<&str> = processed
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        if self.rng.f64() < self.config.lost_deletes {
            report.lost_deletes += 1;
            return Ok(());
        }
        let done: Vec<&str> = records
            .iter()
            .filter(|r| !failed.contains(&r.message_id.as_deref().unwrap_or_default()))
            .filter_map(|r| r.receipt_handle.as_deref())
            .collect();
        for chunk in done.chunks(10) {
            self.queue.delete_batch(self.url, chunk).await?;
        }
        Ok(())
    }
}

impl SoakQueues for redrive::SqsQueue {
    async fn depth(&self, url: &str) -> Result<usize, PortError> {
        let queue = self.describe(url).await?;
        Ok((queue.visible + queue.in_flight + queue.delayed) as usize)
    }

    async fn idle(&self, _url: &str) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    async fn read_all(&self, url: &str) -> Result<Vec<SqsRecord<'static>>, PortError> {
        redrive::reprocess::browse(self, url, 1_000_000).await
    }

    async fn take_all(&self, url: &str) -> Result<Vec<SqsRecord<'static>>, PortError> {
        let mut taken = Vec::new();
        loop {
            let batch = self
                .receive(url, 10, Duration::from_secs(30), Duration::from_secs(1))
                .await?;
            if batch.is_empty() {
                return Ok(taken);
            }
            let handles: Vec<&str> = batch
                .iter()
                .filter_map(|record| record.receipt_handle.as_deref())
                .collect();
            let refused = self.delete_batch(url, &handles).await?;
            if !refused.is_empty() {
                return Err(PortError::new("DeleteMessageBatch", format!("{refused:?}")));
            }
            taken.extend(batch);
        }
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(redrive::clock::SystemClock)
    }
}

impl SoakQueues for crate::memory::MemorySqs {
    async fn depth(&self, url: &str) -> Result<usize, PortError> {
        Ok(crate::memory::MemorySqs::depth(self, url))
    }

    async fn idle(&self, url: &str) {
        let now = self.clock().now_ms();
        let next = self.next_visible_ms(url).unwrap_or(now + 1000);
        self.clock().advance(next.saturating_sub(now).max(1));
    }

    async fn take_all(&self, url: &str) -> Result<Vec<SqsRecord<'static>>, PortError> {
        self.read_all(url).await
    }

    async fn read_all(&self, url: &str) -> Result<Vec<SqsRecord<'static>>, PortError> {
        Ok(self
            .contents(url)
            .into_iter()
            .map(|(body, message_attributes)| SqsRecord {
                body: Some(redrive::event::Body::from(body)),
                message_attributes,
                ..SqsRecord::default()
            })
            .collect())
    }

    fn clock(&self) -> Arc<dyn Clock> {
        crate::memory::MemorySqs::clock(self).clone()
    }
}

impl SoakConfig {
    /// The in-memory run: virtual time, so waits cost nothing but the slow handlers' real time.
    pub fn memory(messages: usize, seed: u64) -> Self {
        Self {
            messages,
            seed,
            max_queued: 200,
            failed_calls: 0.01,
            refused_entries: 0.01,
            stalled_calls: 0.005,
            store_faults: 0.01,
            slow_calls: 0.02,
            throttled_visibility: 0.01,
            throttled_invocations: 0.01,
            overlapping_deliveries: 0.01,
            lost_deletes: 0.01,
            max_receive_count: 10,
            visibility: Duration::from_secs(30),
            retry: RetryPolicy {
                backoff: redrive::Backoff::Exponential {
                    base: Duration::from_secs(1),
                    factor: 2.0,
                    cap: Duration::from_secs(60),
                },
                max_attempts: 5,
                ..RetryPolicy::default()
            },
            slow_for: Duration::from_millis(30),
            budget: Duration::from_millis(15),
            reprocess_cap: 3,
            concurrency: NonZeroUsize::new(4).expect("not zero"),
            fifo_groups: None,
            containers: NonZeroUsize::new(3).expect("not zero"),
            outage: None,
            idempotency_table: None,
            order_checked: true,
            second_source: false,
            fifo_on_dead_letter: FifoOnDeadLetter::Continue,
        }
    }

    /// The long outage in memory: the downstream is down for three hours, eighteen times the
    /// deferral age limit, behind a breaker that opens after 5 failures for 30 s. The messages
    /// themselves are sound; the AWS faults (failed and late calls, lost deletes, throttled
    /// invocations) stay.
    pub fn outage(messages: usize, seed: u64) -> Self {
        let memory = Self::memory(messages, seed);
        Self {
            retry: RetryPolicy {
                defer_max_age: Duration::from_secs(600),
                ..memory.retry.clone()
            },
            outage: Some(Outage {
                down_for: Duration::from_secs(3 * 3600),
                breaker: redrive::BreakerSettings {
                    threshold: 5,
                    open_for: Duration::from_secs(30),
                },
            }),
            ..memory
        }
    }

    /// The long outage on FIFO: the same three hours, with a deferral age limit (12 h) that
    /// outlasts them, so that every group waits the outage out in place and goes on in order.
    pub fn fifo_outage(messages: usize, seed: u64) -> Self {
        let outage = Self::outage(messages, seed).fifo(8);
        Self {
            retry: RetryPolicy {
                defer_max_age: Duration::from_secs(12 * 3600),
                ..outage.retry.clone()
            },
            ..outage
        }
    }

    /// The same FIFO run with `REDRIVE_FIFO_ON_DEAD_LETTER=hold`: a head that would be
    /// dead-lettered holds its group; an operator releases the held heads; every group's effects
    /// are in order end to end.
    #[must_use]
    pub fn holding(self) -> Self {
        Self {
            fifo_on_dead_letter: FifoOnDeadLetter::Hold {
                max_age: Duration::from_secs(13 * 86400),
            },
            max_receive_count: 120,
            ..self
        }
    }

    /// The moto run: real time, so short waits; fewer messages, so more faults.
    pub fn moto(messages: usize, seed: u64) -> Self {
        Self {
            failed_calls: 0.05,
            refused_entries: 0.05,
            stalled_calls: 0.01,
            store_faults: 0.02,
            slow_calls: 0.05,
            throttled_visibility: 0.02,
            throttled_invocations: 0.02,
            overlapping_deliveries: 0.02,
            lost_deletes: 0.05,
            visibility: Duration::from_secs(2),
            retry: RetryPolicy {
                backoff: redrive::Backoff::Sequence(vec![Duration::from_secs(1)]),
                max_attempts: 5,
                ..RetryPolicy::default()
            },
            slow_for: Duration::from_millis(600),
            budget: Duration::from_millis(300),
            order_checked: false,
            ..Self::memory(messages, seed)
        }
    }
}

impl SoakConfig {
    /// The same run on a FIFO queue whose messages are dealt round `groups` message groups, in
    /// batches of ten with the attempt ledger, and the tfvars' FIFO `max_receive_count` (at least
    /// batch size x (attempts + 1) + 21, modules/sqs-consumer).
    #[must_use]
    pub fn fifo(self, groups: usize) -> Self {
        Self {
            fifo_groups: Some(groups),
            max_receive_count: 100,
            ..self
        }
    }

    /// The same run with the containers sharing the DynamoDB table `table` (moto's).
    #[must_use]
    pub fn dynamodb(self, table: impl Into<String>) -> Self {
        Self {
            idempotency_table: Some(table.into()),
            ..self
        }
    }

    /// `.fifo` on a FIFO run's queue names.
    fn suffix(&self) -> &'static str {
        match self.fifo_groups {
            Some(_) => ".fifo",
            None => "",
        }
    }
}

/// The in-memory run's queues: a source with a redrive policy to its DLQ.
pub async fn run_in_memory(config: &SoakConfig) -> Result<SoakReport, PortError> {
    let sqs =
        crate::memory::MemorySqs::new(Arc::new(redrive::clock::ManualClock::at(1_763_790_000_000)));
    let suffix = config.suffix();
    let (dlq, _) = sqs.create(&format!("soak-dlq{suffix}"), None);
    let (url, arn) = sqs.create(
        &format!("soak{suffix}"),
        Some((&dlq, config.max_receive_count)),
    );
    let second = config.second_source.then(|| {
        sqs.create(
            &format!("soak-b{suffix}"),
            Some((&dlq, config.max_receive_count)),
        )
    });
    let second = second
        .as_ref()
        .map(|(url, arn)| (url.as_str(), arn.as_str()));
    run(sqs, (&url, &arn), second, &dlq, config).await
}

/// The moto run's queues (named after `prefix`), through the real SDK.
pub async fn run_on_moto(prefix: &str, config: &SoakConfig) -> Result<SoakReport, crate::Error> {
    let client = crate::sqs_client();
    let create =
        |name: String, attributes: Vec<(aws_sdk_sqs::types::QueueAttributeName, String)>| {
            let client = client.clone();
            async move {
                let url = client
                    .create_queue()
                    .queue_name(name)
                    .set_attributes(Some(attributes.into_iter().collect()))
                    .send()
                    .await
                    .map_err(crate::Error::sdk)?
                    .queue_url
                    .unwrap_or_default();
                let arn = crate::provision::queue_arn(&client, &url).await?;
                Ok::<_, crate::Error>((url, arn))
            }
        };
    use aws_sdk_sqs::types::QueueAttributeName;
    let suffix = config.suffix();
    let fifo: Vec<(QueueAttributeName, String)> = match config.fifo_groups {
        Some(_) => vec![(QueueAttributeName::FifoQueue, "true".to_owned())],
        None => Vec::new(),
    };
    let (dlq, dlq_arn) = create(format!("{prefix}-dlq{suffix}"), fifo.clone()).await?;
    let policy = serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": config.max_receive_count });
    let mut attributes = fifo;
    attributes.push((QueueAttributeName::RedrivePolicy, policy.to_string()));
    let (url, arn) = create(format!("{prefix}{suffix}"), attributes).await?;
    if let Some(table) = &config.idempotency_table {
        let dynamodb = aws_sdk_dynamodb::Client::new(&redrive::sqs::sdk_config_from_env());
        crate::provision::idempotency_table(&dynamodb, table).await?;
    }
    run(
        redrive::SqsQueue::with_client(client),
        (&url, &arn),
        None,
        &dlq,
        config,
    )
    .await
    .map_err(|e| crate::Error::Emulator(e.to_string()))
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
