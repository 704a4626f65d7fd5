//! The idempotency store and attempt ledger the simulated containers share, with their faults.
use futures_util::future::BoxFuture;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use redrive::aws::DynamoDbStore;
use redrive::idempotency::{Claim, IdempotencyStore, MemoryStore};
use redrive::ledger::{AttemptLedger, ForwardingLedger, LedgerCall, LedgerEntry};
use redrive::testing::MemoryLedger;
use redrive::PortError;

use super::duration_ms;

/// The store the simulated containers share, and the FIFO attempt ledger in it (on DynamoDB the
/// same table holds both, as in Lambda).
pub(super) enum SharedStore {
    Memory(MemoryStore, MemoryLedger),
    /// The table, and its writes one at a time. DynamoDB applies each write atomically to the
    /// latest item, however many arrive at once ("Individual write operations such as UpdateItem
    /// are atomic", Developer Guide, BestPractices_ImplementingVersionControl); moto answers on
    /// threads of its own and checks a condition and writes without a lock, so two claims at
    /// once could both pass on moto (`claims granted twice` in the report), never on DynamoDB.
    DynamoDb(DynamoDbStore, tokio::sync::Mutex<()>),
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
            Self::DynamoDb(store, one_at_a_time) => {
                let _atomic = one_at_a_time.lock().await;
                store.claim(key, payload, lease).await
            }
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
            Self::DynamoDb(store, one_at_a_time) => {
                let _atomic = one_at_a_time.lock().await;
                store.complete(key, payload, keep).await
            }
        }
    }
    async fn abandon(&self, key: &str) -> Result<(), PortError> {
        match self {
            Self::Memory(store, _) => store.abandon(key).await,
            Self::DynamoDb(store, one_at_a_time) => {
                let _atomic = one_at_a_time.lock().await;
                IdempotencyStore::abandon(store, key).await
            }
        }
    }
}

impl SharedStore {
    pub(super) fn ledger(&self) -> &(dyn AttemptLedger + 'static) {
        match self {
            Self::Memory(_, ledger) => ledger,
            Self::DynamoDb(store, _) => store,
        }
    }
}

/// Seeded late answers: a share of calls waits (real time, which the batch's deadline counts in)
/// up to `max` before it is made. Every call yields once, so that calls interleave as they do on
/// a network.
pub(super) struct Latency {
    rng: Mutex<fastrand::Rng>,
    pub(super) share: f64,
    pub(super) max: Duration,
    pub(super) delayed: AtomicU64,
}

impl Latency {
    pub(super) fn new(seed: u64, share: f64, max: Duration) -> Self {
        Self {
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            share,
            max,
            delayed: AtomicU64::new(0),
        }
    }

    pub(super) async fn wait(&self) {
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
pub(super) struct FaultyStore {
    pub(super) inner: SharedStore,
    pub(super) latency: Latency,
    pub(super) rng: Mutex<fastrand::Rng>,
    pub(super) share: f64,
    pub(super) injected: AtomicU64,
    /// Calls begun and not yet answered (or dropped with their invocation).
    pub(super) in_flight: AtomicU64,
    /// When each key was last claimed, and for how long.
    pub(super) claimed: Mutex<HashMap<String, (tokio::time::Instant, Duration)>>,
    /// Completions that landed after their claim's lease had lapsed: a second delivery may have
    /// claimed the key meanwhile and run its effect again.
    pub(super) completions_after_lease: AtomicU64,
    /// Claims the store granted while another claim of the key was open and within its lease:
    /// a conditional write that was not atomic.
    pub(super) claims_granted_twice: AtomicU64,
}

/// Counts a call in flight until it is answered or dropped.
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn new(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FaultyStore {
    /// Waits until no call is in flight. A completion still on its way when Lambda stopped its
    /// invocation (it runs on a task of its own) lands within network time, long before the
    /// batch's visibility runs out; the soak's clock jumps over that timeout at once, so the
    /// driver waits for such writes first. One not yet sent at the stop is the crash between an
    /// effect and its completion, which the soak does not inject (docs/reliability.md).
    pub(super) async fn settled(&self) {
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

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
        let _in_flight = InFlight::new(&self.in_flight);
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

/// The ledger's calls meet the store's faults: failed (half of them after the write took effect;
/// half of the failed reads answered in part instead) and late. An operator's calls (a release,
/// the held heads) go through as they are.
impl ForwardingLedger for FaultyStore {
    type Inner = dyn AttemptLedger;

    fn inner(&self) -> &(dyn AttemptLedger + 'static) {
        self.inner.ledger()
    }

    fn read_entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Option<LedgerEntry>>, PortError>> {
        Box::pin(async move {
            let _in_flight = InFlight::new(&self.in_flight);
            self.latency.wait().await;
            let Some(partial) = self.fault() else {
                return self.inner().entries(message_ids).await;
            };
            self.injected.fetch_add(1, Ordering::Relaxed);
            if !partial {
                return Err(PortError::new(
                    "BatchGetItem",
                    "injected: ProvisionedThroughputExceededException",
                ));
            }
            // A throttled BatchGetItem answers in part: every other key left in UnprocessedKeys.
            let mut answer = self.inner().entries(message_ids).await?;
            answer
                .iter_mut()
                .skip(1)
                .step_by(2)
                .for_each(|entry| *entry = None);
            Ok(answer)
        })
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: LedgerCall<'a>,
        ask: impl FnOnce() -> BoxFuture<'a, Result<T, PortError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, PortError>> {
        if matches!(call, LedgerCall::ReleaseHold(_) | LedgerCall::Held) {
            return ask();
        }
        Box::pin(self.call("UpdateItem", async move { ask().await }))
    }
}

impl IdempotencyStore for FaultyStore {
    async fn claim(
        &self,
        key: &str,
        payload: Option<u64>,
        lease: Duration,
    ) -> Result<Claim, PortError> {
        // No later than the store reads its clock for the lease: a late answer is no second grant.
        let asked = tokio::time::Instant::now();
        let claim = self
            .call("PutItem", self.inner.claim(key, payload, lease))
            .await?;
        if claim == Claim::Claimed {
            let open = self
                .claimed
                .lock()
                .unwrap()
                .insert(key.to_owned(), (asked, lease));
            if open.is_some_and(|(at, lease)| at.elapsed() < lease) {
                self.claims_granted_twice.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(claim)
    }
    async fn complete(
        &self,
        key: &str,
        payload: Option<u64>,
        keep: Duration,
    ) -> Result<(), PortError> {
        self.call("PutItem", self.inner.complete(key, payload, keep))
            .await?;
        let claimed = self.claimed.lock().unwrap().remove(key);
        if claimed.is_some_and(|(at, lease)| at.elapsed() > lease) {
            self.completions_after_lease.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
    async fn abandon(&self, key: &str) -> Result<(), PortError> {
        // Its claim is closed even when the answer failed: the delete may have been applied.
        self.claimed.lock().unwrap().remove(key);
        self.call("DeleteItem", self.inner.abandon(key)).await
    }
}

/// The payload bucket of the large messages, in memory, failing a seeded share of its calls as a
/// throttled or failing S3 does (a failed delete leaves an orphan, which the batch counts).
pub(super) struct FaultyPayloads {
    pub(super) inner: redrive::testing::MemoryPayloads,
    rng: Mutex<fastrand::Rng>,
    share: f64,
    pub(super) injected: AtomicU64,
    /// Each key written, and the invocation (`INVOCATION`) whose put wrote it last.
    last_put_by: Mutex<HashMap<String, u64>>,
    /// Whether a put has been failed yet.
    put_failed: AtomicBool,
}

tokio::task_local! {
    /// The invocation a bucket call is made in: a put made by one that Lambda stopped has no
    /// report to count its orphan.
    pub(super) static INVOCATION: u64;
}

/// The soak's bucket.
pub(super) const PAYLOAD_BUCKET: &str = "soak-payloads";

impl FaultyPayloads {
    pub(super) fn new(seed: u64, share: f64) -> Self {
        Self {
            inner: redrive::testing::MemoryPayloads::default(),
            rng: Mutex::new(fastrand::Rng::with_seed(seed ^ 0x5335)),
            share,
            injected: AtomicU64::new(0),
            last_put_by: Mutex::new(HashMap::new()),
            put_failed: AtomicBool::new(false),
        }
    }

    /// The keys of the objects left whose last put came from one of the invocations `stopped`.
    pub(super) fn left_by(&self, stopped: &HashSet<u64>) -> Vec<String> {
        let last_put_by = self.last_put_by.lock().unwrap();
        last_put_by
            .iter()
            .filter(|(key, by)| {
                stopped.contains(by) && self.inner.object(PAYLOAD_BUCKET, key).is_some()
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// A seeded share of calls fails, and the first put too: a run with few large copies (a
    /// loaded machine cuts more invocations short) still meets a failed put.
    fn fault(&self, put: bool) -> Result<(), redrive::payload::PayloadError> {
        let first_put = put && !self.put_failed.swap(true, Ordering::Relaxed);
        if first_put || self.rng.lock().unwrap().f64() < self.share {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(redrive::payload::PayloadError::Unavailable(
                "injected: 503 SlowDown".into(),
            ));
        }
        Ok(())
    }

    /// The body a message carries: its own, or the object its pointer names (read without faults:
    /// the tally's).
    pub(super) fn body_of(&self, record_body: &str) -> String {
        match redrive::payload::Pointer::parse(record_body) {
            Ok(pointer) => self
                .inner
                .object(&pointer.bucket, &pointer.key)
                .unwrap_or_default(),
            Err(_) => record_body.to_owned(),
        }
    }
}

impl redrive::PayloadStore for FaultyPayloads {
    fn get<'a>(
        &'a self,
        pointer: &'a redrive::payload::Pointer<'a>,
    ) -> BoxFuture<'a, Result<String, redrive::payload::PayloadError>> {
        Box::pin(async move {
            self.fault(false)?;
            self.inner.get(pointer).await
        })
    }

    fn put<'a>(
        &'a self,
        pointer: &'a redrive::payload::Pointer<'a>,
        body: &'a str,
    ) -> BoxFuture<'a, Result<(), redrive::payload::PayloadError>> {
        Box::pin(async move {
            self.fault(true)?;
            self.inner.put(pointer, body).await?;
            let by = INVOCATION.try_with(|id| *id).unwrap_or_default();
            self.last_put_by
                .lock()
                .unwrap()
                .insert(pointer.key.to_string(), by);
            Ok(())
        })
    }

    fn delete<'a>(
        &'a self,
        pointer: &'a redrive::payload::Pointer<'a>,
    ) -> BoxFuture<'a, Result<(), redrive::payload::PayloadError>> {
        Box::pin(async move {
            self.fault(false)?;
            self.inner.delete(pointer).await
        })
    }
}
