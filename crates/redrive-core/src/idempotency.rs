//! Idempotency guard: duplicates are normal (at-least-once delivery, retries, redrive), so a
//! handler whose effect must happen once is wrapped in [`Idempotent`]. The key is the message's
//! identity — its original message id (a re-sent copy keeps it in the metadata) or a business key
//! from the body — and a store remembers which keys are done.
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;

use crate::clock::{Clock, SystemClock};
use crate::error::{PortError, RecordError};
use crate::handler::{caught, Message, RecordHandler, COMPLETING};

/// What the store says when a key is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// Nobody has this key: go ahead, then `complete` (or `abandon` on failure).
    Claimed,
    /// Another delivery has a claim on it right now.
    InProgress,
    /// Already done: the effect happened.
    Done,
    /// Claimed or done for another payload: the key was reused (only when both payloads are known).
    Reused,
}

/// Where keys are remembered. [`MemoryStore`] lives as long as the Lambda container; a shared store
/// (DynamoDB with a conditional put on the key, for example) implements this trait to cover
/// duplicates that reach different containers.
pub trait IdempotencyStore: Send + Sync {
    /// Claims `key` for `lease` (after which a crashed holder's claim lapses). With `payload` (a
    /// fingerprint of the message), a key claimed or done for another payload is [`Claim::Reused`].
    fn claim(
        &self,
        key: &str,
        payload: Option<u64>,
        lease: Duration,
    ) -> impl Future<Output = Result<Claim, PortError>> + Send;
    /// Marks `key` done for `keep`, keeping the claim's `payload` fingerprint.
    fn complete(
        &self,
        key: &str,
        payload: Option<u64>,
        keep: Duration,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Gives up a claim after a failure, so that a retry may run.
    fn abandon(&self, key: &str) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// One store shared by several handlers (or simulated containers).
impl<S: IdempotencyStore> IdempotencyStore for Arc<S> {
    async fn claim(
        &self,
        key: &str,
        payload: Option<u64>,
        lease: Duration,
    ) -> Result<Claim, PortError> {
        (**self).claim(key, payload, lease).await
    }
    async fn complete(
        &self,
        key: &str,
        payload: Option<u64>,
        keep: Duration,
    ) -> Result<(), PortError> {
        (**self).complete(key, payload, keep).await
    }
    async fn abandon(&self, key: &str) -> Result<(), PortError> {
        (**self).abandon(key).await
    }
}

#[derive(Debug, Clone, Copy)]
enum KeyState {
    Claimed { until_ms: u64, payload: Option<u64> },
    Done { until_ms: u64, payload: Option<u64> },
}

/// Whether two payload fingerprints, both known, differ.
pub fn reused(claimed: Option<u64>, stored: Option<u64>) -> bool {
    matches!((claimed, stored), (Some(a), Some(b)) if a != b)
}

/// An in-memory store with expiry, bounded in size (the oldest entries go first).
pub struct MemoryStore {
    entries: Mutex<HashMap<String, KeyState>>,
    capacity: usize,
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    /// A store that keeps up to `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            clock: Arc::new(SystemClock),
        }
    }

    /// Reads the time from `clock` (tests move it by hand).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, KeyState>> {
        crate::sync::lock(&self.entries)
    }
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl IdempotencyStore for MemoryStore {
    async fn claim(
        &self,
        key: &str,
        payload: Option<u64>,
        lease: Duration,
    ) -> Result<Claim, PortError> {
        let now = self.clock.now_ms();
        let mut entries = self.entries();
        match entries.get(key) {
            Some(KeyState::Done {
                until_ms,
                payload: stored,
            })
            | Some(KeyState::Claimed {
                until_ms,
                payload: stored,
            }) if *until_ms > now && reused(payload, *stored) => return Ok(Claim::Reused),
            Some(KeyState::Done { until_ms, .. }) if *until_ms > now => return Ok(Claim::Done),
            Some(KeyState::Claimed { until_ms, .. }) if *until_ms > now => {
                return Ok(Claim::InProgress)
            }
            _ => {}
        }
        if entries.len() >= self.capacity {
            entries.retain(|_, entry| match entry {
                KeyState::Claimed { until_ms, .. } | KeyState::Done { until_ms, .. } => {
                    *until_ms > now
                }
            });
            if entries.len() >= self.capacity {
                // Still full of live entries: forget the one that expires first.
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, entry)| match entry {
                        KeyState::Claimed { until_ms, .. } | KeyState::Done { until_ms, .. } => {
                            *until_ms
                        }
                    })
                    .map(|(key, _)| key.clone());
                oldest.map(|key| entries.remove(&key));
            }
        }
        entries.insert(
            key.to_owned(),
            KeyState::Claimed {
                until_ms: now.saturating_add(ms(lease)),
                payload,
            },
        );
        Ok(Claim::Claimed)
    }

    async fn complete(
        &self,
        key: &str,
        payload: Option<u64>,
        keep: Duration,
    ) -> Result<(), PortError> {
        let until_ms = self.clock.now_ms().saturating_add(ms(keep));
        self.entries()
            .insert(key.to_owned(), KeyState::Done { until_ms, payload });
        Ok(())
    }

    async fn abandon(&self, key: &str) -> Result<(), PortError> {
        self.entries().remove(key);
        Ok(())
    }
}

/// Where the idempotency key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyFrom {
    /// The original message id: a retry copy or a redriven copy carries it in its metadata.
    MessageId,
    /// A string or number in the JSON body at this JSON pointer (`/orderId`).
    BodyField(String),
}

/// Wraps a record handler so that a message whose key is done is not handled again.
pub struct Idempotent<H, S> {
    inner: H,
    store: Arc<S>,
    key: KeyFrom,
    /// How long a claim lasts while the handler runs (longer than the function timeout).
    pub lease: Duration,
    /// How long a done key is remembered (longer than the retention of every queue it comes through).
    pub keep: Duration,
    /// Remember a fingerprint of each message's body with its key: a later message with the same
    /// key and another body fails as a permanent `idempotency_key_reused` instead of being taken
    /// for a duplicate. Off by default: a producer that retries with a fresh timestamp in the body
    /// would trip it.
    pub check_payload: bool,
    duplicates: AtomicU64,
    unconfirmed_completions: Arc<AtomicU64>,
}

/// How long a message waits when the idempotency store could not take its claim.
const STORE_UNAVAILABLE_WAIT: Duration = Duration::from_secs(10);

/// Tries of a `complete` after the effect.
const COMPLETE_TRIES: u32 = 3;

impl<H: RecordHandler, S: IdempotencyStore + 'static> Idempotent<H, S> {
    /// Wraps `inner`: its effect happens once per key read from each message by `key`, as `store` remembers.
    pub fn new(inner: H, store: S, key: KeyFrom) -> Self {
        Self {
            inner,
            store: Arc::new(store),
            key,
            lease: Duration::from_secs(15 * 60),
            keep: Duration::from_secs(14 * 24 * 3600),
            check_payload: false,
            duplicates: AtomicU64::new(0),
            unconfirmed_completions: Arc::default(),
        }
    }

    /// The wrapped handler.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// The wrapped handler, to change it between batches (heal a simulated downstream, say).
    pub fn inner_mut(&mut self) -> &mut H {
        &mut self.inner
    }

    /// Duplicates absorbed so far (messages whose key was already done).
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Completions the store did not confirm after every try: their effect happened, so the
    /// message counted as done, and a duplicate after the lease would run it again.
    pub fn unconfirmed_completions(&self) -> u64 {
        self.unconfirmed_completions.load(Ordering::Relaxed)
    }

    /// Marks `key` done after the effect, retried in place at once (the store's client backs off
    /// within each call). A write that does not finish at once goes on a task of its own: if the
    /// record is cut off at the deadline meanwhile, the key is still done (the processor waits
    /// for it before answering), where a cancelled write would let a later delivery run the
    /// effect again once the lease lapsed.
    async fn complete(&self, message: &Message<'_>, key: &str, payload: Option<u64>) {
        let (store, keep, lease) = (self.store.clone(), self.keep, self.lease);
        let unconfirmed = self.unconfirmed_completions.clone();
        // Outside a processor's invocation (a handler called on its own) nobody waits for it.
        let completing = COMPLETING.try_with(Arc::clone).unwrap_or_default();
        let (message_id, key) = (message.id().to_owned(), key.to_owned());
        completing.send_modify(|running| *running += 1);
        let mut write = Box::pin(async move {
            let mut tries = 1;
            let refused = loop {
                match store.complete(&key, payload, keep).await {
                    Ok(()) => break None,
                    Err(error) if tries == COMPLETE_TRIES => break Some(error),
                    Err(_) => tries += 1,
                }
            };
            if let Some(error) = refused {
                unconfirmed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    message_id,
                    key,
                    error = %error,
                    lease_s = lease.as_secs(),
                    "the effect happened but the idempotency store did not record it: the \
                     message is done; a duplicate arriving after the lease would run it again",
                );
            }
            completing.send_modify(|running| *running -= 1);
        });
        if (&mut write).now_or_never().is_none() {
            // A panic in the store's client ends the task; the record is done either way.
            let _ = tokio::spawn(write).await;
        }
    }

    fn key_of(&self, message: &Message<'_>) -> Result<String, RecordError> {
        match &self.key {
            KeyFrom::MessageId => Ok(message
                .meta()
                .map_or(message.id(), |meta| &meta.origin_message_id)
                .to_owned()),
            KeyFrom::BodyField(pointer) => {
                let body: serde_json::Value = message.json()?;
                match body.pointer(pointer) {
                    Some(serde_json::Value::String(key)) if !key.is_empty() => Ok(key.clone()),
                    Some(serde_json::Value::Number(key)) => Ok(key.to_string()),
                    _ => Err(RecordError::permanent(
                        "no_idempotency_key",
                        format!("the body has no string or number at {pointer}"),
                    )),
                }
            }
        }
    }
}

impl<H: RecordHandler, S: IdempotencyStore + 'static> RecordHandler for Idempotent<H, S> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let key = self.key_of(message)?;
        let payload = self.check_payload.then(|| fingerprint(message.body()));
        // A store that cannot answer says nothing of this message: wait for it without spending
        // an attempt, as a breaker defers while its downstream is down.
        let store_error = |error: PortError| {
            tracing::warn!(message_id = message.id(), key, %error, "idempotency store not answering: deferred");
            RecordError::defer("idempotency_store_unavailable", STORE_UNAVAILABLE_WAIT)
        };
        match self
            .store
            .claim(&key, payload, self.lease)
            .await
            .map_err(store_error)?
        {
            Claim::Reused => {
                return Err(RecordError::permanent(
                    "idempotency_key_reused",
                    format!("{key} was taken by a message with another body"),
                ));
            }
            Claim::Done => {
                self.duplicates.fetch_add(1, Ordering::Relaxed);
                tracing::info!(message_id = message.id(), key, "duplicate absorbed");
                return Ok(());
            }
            Claim::InProgress => {
                // Another delivery has the claim: not a failure of this one. Wait for its lease
                // without spending an attempt; by then it is done, or it crashed and the claim
                // has lapsed.
                return Err(RecordError::defer("idempotency_in_progress", self.lease));
            }
            Claim::Claimed => {}
        }
        // A panic is caught here too, so that its claim is abandoned like any failure's (the
        // processor would catch it too, but past the abandoning, leaving the key claimed for a lease).
        match caught(self.inner.handle(message)).await {
            Ok(()) => {
                self.complete(message, &key, payload).await;
                Ok(())
            }
            Err(error) => {
                if let Err(error) = self.store.abandon(&key).await {
                    tracing::warn!(
                        key,
                        error = %error,
                        "could not abandon the idempotency claim: a retry waits for the lease",
                    );
                }
                Err(error)
            }
        }
    }

    async fn flush(&self) {
        if let Ok(mut running) = COMPLETING.try_with(|completing| completing.subscribe()) {
            let _ = running.wait_for(|running| *running == 0).await;
        }
        self.inner.flush().await;
    }

    fn outage_since(&self) -> Option<u64> {
        self.inner.outage_since()
    }
}

/// A fingerprint of a message body that every container computes alike (FNV-1a, 64 bits): it
/// tells payloads apart, it is not a digest against tampering.
pub fn fingerprint(body: &str) -> u64 {
    body.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[tokio::test]
    async fn a_done_key_is_done_until_it_expires_and_a_claim_lapses_after_its_lease() {
        let clock = Arc::new(ManualClock::at(1_000));
        let store = MemoryStore::new(10).with_clock(clock.clone());
        let minute = Duration::from_secs(60);
        assert_eq!(
            store.claim("a", None, minute).await.unwrap(),
            Claim::Claimed
        );
        assert_eq!(
            store.claim("a", None, minute).await.unwrap(),
            Claim::InProgress
        );
        clock.advance(61_000);
        assert_eq!(
            store.claim("a", None, minute).await.unwrap(),
            Claim::Claimed,
            "lease lapsed"
        );
        store.complete("a", None, minute).await.unwrap();
        assert_eq!(store.claim("a", None, minute).await.unwrap(), Claim::Done);
        clock.advance(61_000);
        assert_eq!(
            store.claim("a", None, minute).await.unwrap(),
            Claim::Claimed,
            "forgotten"
        );
        store.abandon("a").await.unwrap();
        assert_eq!(
            store.claim("a", None, minute).await.unwrap(),
            Claim::Claimed
        );
    }

    #[tokio::test]
    async fn the_store_stays_within_its_capacity() {
        let store = MemoryStore::new(3);
        for key in ["a", "b", "c", "d", "e"] {
            store
                .claim(key, None, Duration::from_secs(60))
                .await
                .unwrap();
        }
        assert_eq!(store.entries().len(), 3);
    }

    struct Counting {
        effects: Mutex<HashMap<String, u32>>,
        fail_first: Mutex<bool>,
    }

    impl RecordHandler for Counting {
        async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
            if std::mem::take(&mut *self.fail_first.lock().unwrap()) {
                return Err(RecordError::transient("timeout", "slow"));
            }
            *self
                .effects
                .lock()
                .unwrap()
                .entry(message.body().to_owned())
                .or_default() += 1;
            Ok(())
        }
    }

    fn record(id: &str, body: &str, origin: Option<&str>) -> redrive_event::SqsRecord<'static> {
        let mut record = redrive_event::SqsRecord {
            message_id: Some(redrive_event::Text::from(id.to_owned())),
            receipt_handle: Some(redrive_event::Text::from(format!("rh-{id}"))),
            body: Some(redrive_event::Body::from(body.to_owned())),
            event_source_arn: Some(redrive_event::Text::from(
                "arn:aws:sqs:us-east-1:123456789012:q",
            )),
            ..Default::default()
        };
        if let Some(origin) = origin {
            let meta = format!(
                r#"{{"v":1,"attempts":1,"originQueueArn":"arn:aws:sqs:us-east-1:123456789012:q","originMessageId":"{origin}","firstFailureAt":"2026-11-22T05:00:00Z","lastFailureAt":"2026-11-22T05:00:00Z","errorClass":"transient","errorKind":"timeout","errorMessage":""}}"#
            );
            record.message_attributes.insert(
                redrive_event::Text::from("redrive"),
                redrive_event::MessageAttribute {
                    string_value: Some(redrive_event::Text::from(meta)),
                    binary_value: None,
                    data_type: redrive_event::Text::from("String"),
                },
            );
        }
        record
    }

    #[tokio::test]
    async fn duplicates_and_retry_copies_have_their_effect_once_and_a_failure_frees_the_key() {
        use crate::processor::{Processor, ProcessorConfig};
        let handler = Idempotent::new(
            Counting {
                effects: Mutex::default(),
                fail_first: Mutex::new(true),
            },
            MemoryStore::new(100),
            KeyFrom::MessageId,
        );
        let config = ProcessorConfig {
            dlq_url: Some("https://sqs.local/123456789012/dlq".into()),
            source_queue_url: Some("https://sqs.local/123456789012/q".into()),
            retry: crate::backoff::RetryPolicy::default(),
            deadline_margin: Duration::ZERO,
            ..ProcessorConfig::default()
        };
        let processor = Processor::new(crate::port::RecordingQueue::default(), config);
        let deliveries = [
            vec![record("m-1", "order-1", None)], // fails, claim abandoned, retry copy sent
            vec![record("m-9", "order-1", Some("m-1"))], // the retry copy: same key, succeeds
            vec![
                record("m-9", "order-1", Some("m-1")),
                record("m-1", "order-1", None),
            ], // duplicates
        ];
        for records in &deliveries {
            processor
                .process(&handler, records, u64::MAX / 2)
                .await
                .unwrap();
        }
        assert_eq!(handler.inner().effects.lock().unwrap()["order-1"], 1);
        assert_eq!(handler.duplicates(), 2);

        let by_field = Idempotent::new(
            Counting {
                effects: Mutex::default(),
                fail_first: Mutex::new(false),
            },
            MemoryStore::new(100),
            KeyFrom::BodyField("/orderId".into()),
        );
        let twice = [
            record("a", r#"{"orderId":"o-1"}"#, None),
            record("b", r#"{"orderId":"o-1"}"#, None),
        ];
        let processed = processor
            .process(&by_field, &twice, u64::MAX / 2)
            .await
            .unwrap();
        assert!(processed.response.batch_item_failures.is_empty());
        assert_eq!(by_field.duplicates(), 1);
        let keyless = [record("c", r#"{"id":"o-1"}"#, None)];
        let processed = processor
            .process(&by_field, &keyless, u64::MAX / 2)
            .await
            .unwrap();
        assert_eq!(
            processed.report.dead_lettered, 1,
            "no key is a permanent error"
        );
    }

    struct Panics;
    impl RecordHandler for Panics {
        async fn handle(&self, _message: &Message<'_>) -> Result<(), RecordError> {
            panic!("bug in the handler")
        }
    }

    #[tokio::test]
    async fn a_panic_abandons_its_claim_and_is_still_a_panic() {
        let store = Arc::new(MemoryStore::new(10));
        let handler = Idempotent::new(Panics, store.clone(), KeyFrom::MessageId);
        let record = record("m-1", "order-1", None);
        let invocation = crate::handler::Invocation::from(u64::MAX / 2);
        let item = crate::processor::Item::new(&record, "m-1", 0);
        let error = handler
            .handle(&item.message(&invocation))
            .await
            .unwrap_err();
        assert_eq!(error.class(), crate::error::ErrorClass::Panic);
        assert_eq!(
            store
                .claim("m-1", None, Duration::from_secs(60))
                .await
                .unwrap(),
            Claim::Claimed,
            "abandoned, not claimed for a lease"
        );
    }

    #[tokio::test]
    async fn a_key_reused_with_another_body_is_refused_when_payloads_are_checked() {
        use crate::processor::{Processor, ProcessorConfig};
        let config = ProcessorConfig {
            dlq_url: Some("https://sqs.local/123456789012/dlq".into()),
            source_queue_url: Some("https://sqs.local/123456789012/q".into()),
            ..ProcessorConfig::default()
        };
        let processor = Processor::new(crate::port::RecordingQueue::default(), config);
        let guard = |check_payload: bool| {
            let mut guard = Idempotent::new(
                Counting {
                    effects: Mutex::default(),
                    fail_first: Mutex::new(false),
                },
                MemoryStore::new(100),
                KeyFrom::BodyField("/orderId".into()),
            );
            guard.check_payload = check_payload;
            guard
        };
        let deliveries = [
            record("a", r#"{"orderId":"o-1","amount":5}"#, None),
            record("b", r#"{"orderId":"o-1","amount":7}"#, None), // the key, another order
            record("c", r#"{"orderId":"o-1","amount":5}"#, None), // a true duplicate
        ];
        let checked = guard(true);
        let processed = processor
            .process(&checked, &deliveries, u64::MAX / 2)
            .await
            .unwrap();
        assert_eq!(processed.report.dead_lettered, 1, "b: permanent");
        let sent = processor.queue().calls();
        assert!(
            format!("{sent:?}").contains("idempotency_key_reused"),
            "the dead letter names the kind: {sent:?}"
        );
        assert_eq!(checked.duplicates(), 1, "c is absorbed");
        assert_eq!(checked.inner().effects.lock().unwrap().len(), 1);

        let unchecked = guard(false);
        let processed = processor
            .process(&unchecked, &deliveries, u64::MAX / 2)
            .await
            .unwrap();
        assert_eq!(processed.report.dead_lettered, 0);
        assert_eq!(unchecked.duplicates(), 2, "b is taken for a duplicate");
    }

    fn guarded_processor() -> crate::processor::Processor<crate::port::RecordingQueue> {
        use crate::processor::{Processor, ProcessorConfig};
        let config = ProcessorConfig {
            dlq_url: Some("https://sqs.local/123456789012/dlq".into()),
            source_queue_url: Some("https://sqs.local/123456789012/q".into()),
            ..ProcessorConfig::default()
        };
        Processor::new(crate::port::RecordingQueue::default(), config)
    }

    fn counting() -> Counting {
        Counting {
            effects: Mutex::default(),
            fail_first: Mutex::new(false),
        }
    }

    /// Handles message m-1 once through `guard`, which must defer it: the deferred copy's attempts
    /// and delay.
    async fn deferred_once<S: IdempotencyStore + 'static>(
        guard: &Idempotent<Counting, S>,
    ) -> (u32, u32) {
        let processor = guarded_processor();
        let records = [record("m-1", "order-1", None)];
        let processed = processor
            .process(guard, &records, u64::MAX / 2)
            .await
            .unwrap();
        assert_eq!(
            (processed.report.deferred, processed.report.retried),
            (1, 0)
        );
        let copy = &processor
            .queue()
            .sent_to("https://sqs.local/123456789012/q")[0];
        let meta: crate::envelope::Meta<'_> =
            serde_json::from_str(copy.attribute("redrive").unwrap()).unwrap();
        (meta.attempts, copy.delay_seconds)
    }

    /// A delivery that finds the key claimed waits for the holder's lease, deferred without
    /// spending an attempt: spending them, five in about 30 s dead-lettered it while its holder
    /// could still finish, and the reprocessor later ran the effect a second time.
    #[tokio::test]
    async fn a_claim_held_by_another_delivery_is_waited_for_without_spending_an_attempt() {
        let store = Arc::new(MemoryStore::new(10));
        let mut guard = Idempotent::new(counting(), store.clone(), KeyFrom::MessageId);
        guard.lease = Duration::from_secs(90);
        let held = store.claim("m-1", None, guard.lease).await.unwrap();
        assert_eq!(held, Claim::Claimed, "another delivery holds it");
        assert_eq!(deferred_once(&guard).await, (0, 90));
        assert!(guard.inner().effects.lock().unwrap().is_empty());
    }

    /// A store that cannot take a claim (a throttled table) says nothing of the message: it is
    /// deferred without spending an attempt, and without running the effect.
    #[tokio::test]
    async fn a_store_that_cannot_take_a_claim_defers_without_spending_an_attempt() {
        struct Throttled;
        impl IdempotencyStore for Throttled {
            async fn claim(
                &self,
                _: &str,
                _: Option<u64>,
                _: Duration,
            ) -> Result<Claim, PortError> {
                Err(PortError::new(
                    "PutItem",
                    "ThrottlingException: Rate exceeded",
                ))
            }
            async fn complete(
                &self,
                _: &str,
                _: Option<u64>,
                _: Duration,
            ) -> Result<(), PortError> {
                unreachable!("nothing was claimed")
            }
            async fn abandon(&self, _: &str) -> Result<(), PortError> {
                unreachable!("nothing was claimed")
            }
        }
        let guard = Idempotent::new(counting(), Throttled, KeyFrom::MessageId);
        assert_eq!(deferred_once(&guard).await.0, 0, "no attempt spent");
        assert!(guard.inner().effects.lock().unwrap().is_empty());
    }

    /// Completes slowly: the write of `key` (of every key when `None`) takes `delay`.
    struct SlowComplete {
        store: MemoryStore,
        key: Option<&'static str>,
        delay: Duration,
    }
    impl IdempotencyStore for SlowComplete {
        async fn claim(
            &self,
            key: &str,
            payload: Option<u64>,
            lease: Duration,
        ) -> Result<Claim, PortError> {
            self.store.claim(key, payload, lease).await
        }
        async fn complete(
            &self,
            key: &str,
            payload: Option<u64>,
            keep: Duration,
        ) -> Result<(), PortError> {
            if self.key.is_none_or(|slow| slow == key) {
                tokio::time::sleep(self.delay).await;
            }
            self.store.complete(key, payload, keep).await
        }
        async fn abandon(&self, key: &str) -> Result<(), PortError> {
            self.store.abandon(key).await
        }
    }

    /// A record cut off at the deadline while its key is being marked done (the effect made) still
    /// gets its key done before the invocation answers: the soak's late store calls found the
    /// completion cancelled with the record, and a later delivery ran the effect again once the
    /// lease lapsed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_cut_off_while_its_key_is_marked_done_still_has_it_done() {
        let guard = Idempotent::new(
            counting(),
            SlowComplete {
                store: MemoryStore::new(10),
                key: None,
                delay: Duration::from_millis(50),
            },
            KeyFrom::MessageId,
        );
        let processor = crate::processor::Processor::new(
            crate::port::RecordingQueue::default(),
            crate::processor::ProcessorConfig {
                source_queue_url: Some("https://sqs.local/123456789012/q".into()),
                deadline_margin: Duration::from_millis(1000),
                ..crate::processor::ProcessorConfig::default()
            },
        );
        let records = [record("m-1", "order-1", None)];
        // 1.02 s to the deadline: the records' time ends 20 ms in, within the 50 ms write.
        let deadline = crate::clock::SystemClock.now_ms() + 1020;
        let processed = processor.process(&guard, &records, deadline).await.unwrap();
        assert_eq!(
            processed.response.batch_item_failures.len(),
            1,
            "cut off: given back"
        );
        assert_eq!(guard.inner().effects.lock().unwrap()["order-1"], 1);
        assert_eq!(
            guard
                .store
                .store
                .claim("m-1", None, guard.lease)
                .await
                .unwrap(),
            Claim::Done,
            "the key is done when the invocation answers: the redelivery is absorbed"
        );
    }

    /// Invocations that run side by side in one process (Lambda Managed Instances) share the
    /// guard: each waits for the key writes its own records left running, not for another's.
    /// Waiting for every write the guard had running, an invocation under steady load answered
    /// only when the whole process happened to be between writes.
    #[tokio::test(start_paused = true)]
    async fn an_invocation_waits_for_its_own_key_writes_not_for_those_of_one_beside_it() {
        let guard = Idempotent::new(
            counting(),
            SlowComplete {
                store: MemoryStore::new(10),
                key: Some("m-slow"),
                delay: Duration::from_secs(20),
            },
            KeyFrom::MessageId,
        );
        let processor = guarded_processor();
        let (slow, quick) = (
            [record("m-slow", "order-1", None)],
            [record("m-quick", "order-2", None)],
        );
        let beside = processor.process(&guard, &slow, u64::MAX / 2);
        let this = async {
            // The other invocation's write has started.
            tokio::time::sleep(Duration::from_millis(10)).await;
            let processed = processor.process(&guard, &quick, u64::MAX / 2).await;
            let other_key = guard.store.store.claim("m-slow", None, guard.lease).await;
            (processed, other_key)
        };
        let (beside, (this, other_key_when_answered)) = tokio::join!(beside, this);
        assert_eq!(this.unwrap().report.done, 1);
        assert_eq!(
            other_key_when_answered.unwrap(),
            Claim::InProgress,
            "answered while the other invocation's key was still being written"
        );
        assert_eq!(beside.unwrap().report.done, 1);
        assert_eq!(
            guard
                .store
                .store
                .claim("m-slow", None, guard.lease)
                .await
                .unwrap(),
            Claim::Done,
            "the other invocation waited for its own write"
        );
    }

    /// Completes nothing: the store's write fails after the effect.
    struct CompleteFails(MemoryStore, AtomicU64);
    impl IdempotencyStore for CompleteFails {
        async fn claim(
            &self,
            key: &str,
            payload: Option<u64>,
            lease: Duration,
        ) -> Result<Claim, PortError> {
            self.0.claim(key, payload, lease).await
        }
        async fn complete(&self, _: &str, _: Option<u64>, _: Duration) -> Result<(), PortError> {
            self.1.fetch_add(1, Ordering::Relaxed);
            Err(PortError::new(
                "PutItem",
                "ProvisionedThroughputExceededException",
            ))
        }
        async fn abandon(&self, key: &str) -> Result<(), PortError> {
            self.0.abandon(key).await
        }
    }

    /// The effect happened, so a `complete` the store does not confirm (tried three times) leaves
    /// the message done: failing it would have a later delivery claim the lapsed key and run the
    /// effect again.
    #[tokio::test(start_paused = true)]
    async fn a_complete_that_fails_after_the_effect_leaves_the_message_done() {
        let guard = Idempotent::new(
            counting(),
            CompleteFails(MemoryStore::new(10), AtomicU64::new(0)),
            KeyFrom::MessageId,
        );
        let processor = guarded_processor();
        let records = [record("m-1", "order-1", None)];
        let processed = processor
            .process(&guard, &records, u64::MAX / 2)
            .await
            .unwrap();
        assert_eq!(processed.report.done, 1);
        assert!(processed.response.batch_item_failures.is_empty());
        assert!(processor.queue().calls().is_empty(), "no retry copy");
        assert_eq!(
            guard.store.1.load(Ordering::Relaxed),
            3,
            "tried three times"
        );
        assert_eq!(guard.unconfirmed_completions(), 1);
        assert_eq!(guard.inner().effects.lock().unwrap()["order-1"], 1);
    }

    #[test]
    fn the_fingerprint_is_fnv_1a() {
        assert_eq!(fingerprint(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fingerprint("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(
            fingerprint(r#"{"amount":5}"#),
            fingerprint(r#"{"amount":7}"#)
        );
    }
}
