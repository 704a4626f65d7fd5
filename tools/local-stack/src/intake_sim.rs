//! The virtual-clock model the tenant and intake soaks run on: a fair queue (a standard queue whose
//! messages name their tenant as `MessageGroupId`) and its DLQ on the SQS model, a producer, and
//! the event source mapping's invocations through the real processor, with the orders consumer's
//! settings as Terraform renders them. Each step of the clock the producer sends what arrived
//! during it and the consumer takes what its capacity allows.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive::envelope::OutgoingMessage;
use redrive::event::{SqsRecord, Text};
use redrive::port::{Clock, ForwardingPort, QueuePort};
use redrive::testing::ManualClock;
use redrive::{PortError, Processed, Processor, ProcessorConfig, RecordHandler};

use crate::memory::{MemorySqs, QueueSpec};
use crate::soak::{done, Shipped};

/// The clock's step.
pub(crate) const STEP_MS: u64 = 100;

/// The SQS model, counting every call made to it.
pub(crate) struct Counted {
    sqs: MemorySqs,
    calls: AtomicU64,
}

impl ForwardingPort for Counted {
    type Inner = MemorySqs;

    fn inner(&self) -> &MemorySqs {
        &self.sqs
    }

    fn on_call(&self, _action: &'static str, _queue: &str) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// Each message's effects and the time of its first, by message id.
#[derive(Default)]
pub(crate) struct Effects(Mutex<HashMap<String, (u32, u64)>>);

impl Effects {
    pub(crate) fn record(&self, id: &str, now_ms: u64) {
        let mut effects = self.0.lock().unwrap();
        effects.entry(id.to_owned()).or_insert((0, now_ms)).0 += 1;
    }
}

/// The id a soak's message carries in its body.
#[derive(serde::Deserialize)]
pub(crate) struct Body<'a> {
    pub(crate) id: &'a str,
}

/// What became of one produced message.
pub(crate) struct Fate {
    pub(crate) tenant: String,
    pub(crate) produced_ms: u64,
    /// Its effects and the time of the first.
    pub(crate) effects: Option<(u32, u64)>,
    pub(crate) dead_lettered: bool,
}

/// The queues, the producer's record and the consumer's counts.
pub(crate) struct Model {
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) queue: Counted,
    pub(crate) url: String,
    pub(crate) arn: String,
    dlq: String,
    pub(crate) orders: Shipped,
    rng: Mutex<fastrand::Rng>,
    /// By message id: its tenant and when it was produced.
    produced: Mutex<HashMap<String, (String, u64)>>,
    pub(crate) invocations: AtomicU64,
}

impl Model {
    /// The queues of `orders` (its `maxReceiveCount` and retention) on a fresh SQS model.
    pub(crate) fn new(orders: Shipped, seed: u64) -> Self {
        let clock = Arc::new(ManualClock::at(1_763_790_000_000));
        let sqs = MemorySqs::new(clock.clone());
        let (dlq, dlq_arn) = sqs.create(
            "intake-dlq",
            QueueSpec::named("intake-dlq").retaining(Duration::from_secs(14 * 86400)),
        );
        let (url, arn) = sqs.create(
            "intake",
            QueueSpec::named("intake")
                .dead_letters_to(&dlq_arn, orders.max_receive_count)
                .retaining(orders.settings.processor.source.retention),
        );
        Self {
            clock,
            queue: Counted {
                sqs,
                calls: AtomicU64::new(0),
            },
            url,
            arn,
            dlq,
            orders,
            rng: Mutex::new(fastrand::Rng::with_seed(seed ^ 0x7e4a47)),
            produced: Mutex::default(),
            invocations: AtomicU64::new(0),
        }
    }

    /// The consumer's processor, as Terraform configures it.
    pub(crate) fn processor(&self, seed: u64) -> Processor<&Counted> {
        self.processor_with(ProcessorConfig::from(&self.orders.settings), seed)
    }

    /// The processor the consumer runs the intake controller's probes with.
    pub(crate) fn probe_processor(&self, seed: u64) -> Processor<&Counted> {
        let config = ProcessorConfig::from(&self.orders.settings);
        self.processor_with(redrive::lambda::pause::probe_config(config), seed)
    }

    fn processor_with(
        &self,
        mut processor_config: ProcessorConfig,
        seed: u64,
    ) -> Processor<&Counted> {
        processor_config.dlq_url = Some(self.dlq.clone());
        processor_config.source_queue_url = Some(self.url.clone());
        Processor::new(&self.queue, processor_config)
            .with_clock(self.clock.clone())
            .with_seed(seed)
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// SQS calls so far, the producer's and the controller's included.
    pub(crate) fn sqs_calls(&self) -> u64 {
        self.queue.calls.load(Ordering::Relaxed)
    }

    pub(crate) fn depth(&self) -> usize {
        self.queue.inner().depth(&self.url)
    }

    /// Whether a message of the source is visible now: a poller's receive would return it.
    pub(crate) fn visible_now(&self) -> bool {
        self.queue
            .inner()
            .next_visible_ms(&self.url)
            .is_some_and(|at| at <= self.now_ms())
    }

    /// A queue for the consumers' pause requests: its URL.
    pub(crate) fn control_queue(&self) -> String {
        self.queue
            .inner()
            .create("intake-control", QueueSpec::named("intake-control"))
            .0
    }

    /// Sends what arrived during the step that ends now: `per_step` messages on average (a
    /// binomial count near a Poisson one: at least twice the mean's trials), each to one of
    /// `tenants`.
    pub(crate) async fn produce(&self, per_step: f64, tenants: usize) -> Result<(), PortError> {
        let now = self.now_ms();
        let batch: Vec<OutgoingMessage<'static>> = {
            let mut rng = self.rng.lock().unwrap();
            let mut produced = self.produced.lock().unwrap();
            let trials = (per_step * 2.0).ceil().max(1.0);
            let count = (0..trials as u32)
                .filter(|_| rng.f64() < per_step / trials)
                .count();
            (0..count)
                .map(|_| {
                    let n = produced.len();
                    let tenant = format!("t-{}", rng.usize(..tenants));
                    produced.insert(format!("m-{n}"), (tenant.clone(), now - rng.u64(..STEP_MS)));
                    OutgoingMessage {
                        body: Text::from(format!(r#"{{"id":"m-{n}"}}"#)),
                        attributes: Vec::new(),
                        delay_seconds: 0,
                        deduplication_id: None,
                        group_id: Some(Text::from(tenant)),
                        trace_header: None,
                    }
                })
                .collect()
        };
        for chunk in batch.chunks(10) {
            self.queue.inner().send_batch(&self.url, chunk).await?;
        }
        Ok(())
    }

    /// A receive of up to `max` messages as the mapping makes it (the function's timeout as
    /// visibility), each record naming the queue.
    pub(crate) async fn receive(&self, max: u32) -> Result<Vec<SqsRecord<'static>>, PortError> {
        let visibility = self.orders.settings.processor.source.visibility_timeout;
        let mut records = self
            .queue
            .receive(&self.url, max, visibility, Duration::ZERO)
            .await?;
        for record in &mut records {
            record.event_source_arn = Some(Text::from(self.arn.clone()));
        }
        Ok(records)
    }

    /// One invocation with `records`, and what the mapping then does: deletes what the answer does
    /// not list as failed.
    pub(crate) async fn invoke<H: RecordHandler>(
        &self,
        processor: &Processor<&Counted>,
        handler: &H,
        records: &[SqsRecord<'static>],
    ) -> Result<Processed, PortError> {
        self.invocations.fetch_add(1, Ordering::Relaxed);
        let deadline = self.now_ms() + self.orders.function_timeout.as_millis() as u64;
        let processed = processor
            .process(handler, records, deadline)
            .await
            .expect("records carry message ids");
        for chunk in done(records, &processed).chunks(10) {
            self.queue.delete_batch(&self.url, chunk).await?;
        }
        Ok(processed)
    }

    /// What became of every message produced, given the handler's effects.
    pub(crate) fn fates(&self, effects: Effects) -> Vec<Fate> {
        let mut dead: HashMap<String, usize> = HashMap::new();
        for (body, _) in self.queue.inner().contents(&self.dlq) {
            if let Ok(body) = serde_json::from_str::<Body<'_>>(&body) {
                *dead.entry(body.id.to_owned()).or_default() += 1;
            }
        }
        let effects = effects.0.into_inner().unwrap();
        self.produced
            .lock()
            .unwrap()
            .iter()
            .map(|(id, (tenant, produced_ms))| Fate {
                tenant: tenant.clone(),
                produced_ms: *produced_ms,
                effects: effects.get(id).copied(),
                dead_lettered: dead.contains_key(id),
            })
            .collect()
    }
}
