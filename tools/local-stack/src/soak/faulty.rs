//! The SQS port with AWS's faults injected, and the queues a soak needs on either SQS.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive::envelope::OutgoingMessage;
use redrive::event::SqsRecord;
use redrive::port::{Clock, EntryFailure, ForwardingPort, QueuePort, VisibilityChange};
use redrive::PortError;

use super::stores::{FaultyPayloads, Latency};

/// The queues the soak needs, on whichever SQS.
pub trait SoakQueues: QueuePort {
    /// Messages in a queue: visible, in flight and delayed.
    fn depth(
        &self,
        url: &str,
    ) -> impl std::future::Future<Output = Result<usize, PortError>> + Send;
    /// Nothing was visible in `urls`: let time pass (sleep, or move a virtual clock on).
    fn idle(&self, urls: &[&str]) -> impl std::future::Future<Output = ()> + Send;
    /// How long a run may find nothing to receive, with messages still queued, before it is
    /// stuck (one waits longer than any wait the run sets): real time on a server; none on the
    /// virtual clock, whose idle jumps to the next visible message.
    fn stuck_after(&self) -> Option<Duration> {
        None
    }
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
    /// Messages SQS deleted from a queue at their retention. A server does not say: 0.
    fn expired(&self, _url: &str) -> usize {
        0
    }
    /// The longest a deliverable message has waited for a receive (the model's
    /// `longest_deliverable_wait`). A server does not say: zero.
    fn longest_deliverable_wait(&self, _url: &str) -> Duration {
        Duration::ZERO
    }
}

/// A port decorator that fails sends (whole calls and single entries, and calls that never answer,
/// before or after SQS took the messages), throttles visibility changes, and answers late, seeded.
pub struct Faulty<Q> {
    inner: Q,
    pub(super) latency: Latency,
    throttled_visibility: f64,
    throttle_rng: Mutex<fastrand::Rng>,
    pub(super) throttled: AtomicU64,
    rng: Mutex<fastrand::Rng>,
    failed_calls: f64,
    refused_entries: f64,
    stalled_calls: f64,
    /// The stalls' own draws, so that adding them left the other faults' sequence as it was.
    stall_rng: Mutex<fastrand::Rng>,
    enabled: AtomicBool,
    pub(super) injected: AtomicU64,
    /// Stalled calls, and those of them that SQS had carried out before they stalled.
    pub(super) stalls: AtomicU64,
    pub(super) stalls_after_delivery: AtomicU64,
    /// Copies that reached `source` per message (the `id` in its body): its chain of re-sends.
    source: String,
    chains: Mutex<HashMap<String, u32>>,
    /// Where a large copy's body is, to find its `id`.
    payloads: Option<Arc<FaultyPayloads>>,
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
            payloads: None,
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

    /// Reads large copies' bodies from `payloads` to count their chains.
    pub(super) fn resolving(mut self, payloads: Option<Arc<FaultyPayloads>>) -> Self {
        self.payloads = payloads;
        self
    }

    /// The chains counted so far, and a fresh start (a redrive begins new chains).
    pub(super) fn take_chains(&self) -> HashMap<String, u32> {
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
                let body = match &self.payloads {
                    Some(payloads) => payloads.body_of(&kept[i].body),
                    None => kept[i].body.to_string(),
                };
                let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
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

impl SoakQueues for redrive::SqsQueue {
    async fn depth(&self, url: &str) -> Result<usize, PortError> {
        let queue = self.describe(url).await?;
        Ok((queue.visible + queue.in_flight + queue.delayed) as usize)
    }

    async fn idle(&self, _urls: &[&str]) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    fn stuck_after(&self) -> Option<Duration> {
        // The runs' longest wait is a give-back's (RESEND_TO_LANE_WITHIN, 4 minutes).
        Some(Duration::from_secs(600))
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
        Arc::new(redrive::port::SystemClock)
    }
}

impl SoakQueues for crate::memory::MemorySqs {
    async fn depth(&self, url: &str) -> Result<usize, PortError> {
        Ok(crate::memory::MemorySqs::depth(self, url))
    }

    async fn idle(&self, urls: &[&str]) {
        let now = self.clock().now_ms();
        let next = urls
            .iter()
            .filter_map(|url| self.next_visible_ms(url))
            .min()
            .unwrap_or(now + 1000);
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

    fn expired(&self, url: &str) -> usize {
        crate::memory::MemorySqs::expired(self, url).len()
    }

    fn longest_deliverable_wait(&self, url: &str) -> Duration {
        crate::memory::MemorySqs::longest_deliverable_wait(self, url)
    }
}
