//! End-to-end harness: real queues on moto server, the real SDK, the local poller and the real
//! orders consumer invoked in process. `make test` starts moto and sets `AWS_ENDPOINT_URL`.
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{
    Message, MessageAttributeValue, MessageSystemAttributeName, SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;
use lambda_runtime::{Context, LambdaEvent};
use orders::payments::SimulatedPayments;
use orders::OrdersHandler;
use redrive::breaker::TenantBreakers;
use redrive::lambda::Bytes;
use redrive::port::{Clock, SystemClock};
use redrive::{
    Message as Record, Meta, Payloads, Processor, ProcessorConfig, RecordError, RecordHandler,
    SqsQueue,
};
use redrive_local::poller::{Poll, Poller};
use redrive_local::provision::{depth, provision, QueuePair};
use redrive_local::topology::{self, Topology};

pub fn require_emulator() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok_and(|url| url.starts_with("http://127.0.0.1")),
        "these tests need moto server: run them with `make test` (it starts moto and sets AWS_ENDPOINT_URL), \
         or start `.venv/bin/moto_server -p 5000` and set AWS_ENDPOINT_URL=http://127.0.0.1:5000"
    );
}

/// One test's queues (named after the test, so tests can run side by side) and consumer.
pub struct Stack {
    pub client: Client,
    pub queue: QueuePair,
    pub topology: Topology,
    pub consumer: OrdersHandler<SimulatedPayments>,
    pub processor: Processor<SqsQueue>,
    pub timeout: Duration,
    pub batch_size: u32,
    pub payloads: Option<Payloads>,
    /// The attempt ledger's table, when the options asked for one (kept by `reconfigure`).
    pub ledger: Option<std::sync::Arc<redrive::aws::DynamoDbStore>>,
}

/// What a test sets differently from what Terraform ships; everything it leaves unset is the
/// shipped configuration (`infra/rendered/infra.json`).
#[derive(Default)]
pub struct Options<'a> {
    pub fifo: bool,
    /// The source's `maxReceiveCount`, where a test is about it; otherwise what Terraform ships.
    pub max_receive_count: Option<u32>,
    /// The source's visibility timeout, where a test is about it; otherwise what Terraform ships,
    /// scaled by [`TIME_SCALE`].
    pub visibility_timeout_seconds: Option<u32>,
    /// Extra or overriding `REDRIVE_*` settings, where a test is about them; otherwise the
    /// function's environment as Terraform ships it, its waits scaled by [`TIME_SCALE`].
    pub settings: &'a [(&'a str, &'a str)],
    /// `PAYMENTS_*` fault knobs.
    pub knobs: &'a [(&'a str, &'a str)],
    /// Records per batch the poller hands over, where a test is about it; otherwise the mapping's
    /// `batch_size` as Terraform ships it.
    pub batch_size: Option<u32>,
    /// Count FIFO attempts with the attempt ledger in a DynamoDB table on moto.
    pub ledger: bool,
    /// Large messages through this S3 bucket on moto (`REDRIVE_PAYLOAD_BUCKET`).
    pub payload_bucket: Option<&'a str>,
}

/// How much faster than AWS's clock the tests run the shipped waits (visibility timeout, backoff,
/// breaker, deferral age), as the demo does: 3 minutes' visibility in 3 seconds.
pub const TIME_SCALE: f64 = 60.0;

impl Stack {
    pub async fn new(test: &str, options: Options<'_>) -> Self {
        require_emulator();
        let mut topology = Topology::load(&topology::default_path()).unwrap();
        topology.name_prefix = format!("t{}-{test}", std::process::id());
        let key = if options.fifo { "payments" } else { "orders" };
        topology.consumers.retain(|k, _| k == key);
        let consumer = topology.consumers.get_mut(key).unwrap();
        assert_eq!(
            consumer.fifo,
            options.fifo,
            "the tfvars define `{key}` as the {} consumer",
            if options.fifo { "FIFO" } else { "standard" }
        );
        topology.scale_time(TIME_SCALE);
        let consumer = topology.consumers.get_mut(key).unwrap();
        if let Some(count) = options.max_receive_count {
            consumer.max_receive_count = count;
        }
        if let Some(seconds) = options.visibility_timeout_seconds {
            consumer.visibility_timeout_seconds = seconds;
        }
        let batch_size = options.batch_size.unwrap_or(consumer.batch_size);

        let client = redrive_local::sqs_client();
        let queue = provision(&client, &topology).await.unwrap().remove(0);
        let settings = topology
            .settings(key, &queue.dlq_url, options.settings)
            .unwrap();
        let knobs = options.knobs;
        let payments = SimulatedPayments::from_lookup(|name| {
            knobs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
        .recording();
        let consumer = OrdersHandler::new(
            payments,
            TenantBreakers::new(
                "payments",
                {
                    let mut breaker_settings = settings.breaker;
                    breaker_settings.threshold = 0;
                    breaker_settings
                },
                {
                    let mut tenant_settings = settings.tenant_breaker;
                    tenant_settings.threshold = 0;
                    tenant_settings
                },
            ),
        );
        let payloads = options.payload_bucket.map(|bucket| {
            Payloads::new(
                std::sync::Arc::new(redrive::aws::S3Payloads::lazy()),
                bucket,
            )
        });
        let processor = with_payloads(
            Processor::new(
                SqsQueue::with_client(client.clone()),
                ProcessorConfig::from(&settings),
            ),
            &payloads,
        );
        let ledger = if options.ledger {
            let dynamodb = aws_sdk_dynamodb::Client::new(&redrive::aws::sdk_config_from_env());
            let table = format!("{}-{key}-idempotency", topology.name_prefix);
            redrive_local::provision::idempotency_table(&dynamodb, &table)
                .await
                .unwrap();
            Some(std::sync::Arc::new(
                redrive::aws::DynamoDbStore::with_client(dynamodb, table),
            ))
        } else {
            None
        };
        let processor = with_ledger(processor, &ledger);
        let timeout =
            Duration::from_secs(u64::from(topology.consumers[key].function_timeout_seconds));
        Self {
            client,
            queue,
            topology,
            consumer,
            processor,
            timeout,
            batch_size,
            payloads,
            ledger,
        }
    }

    /// Replaces the consumer's `REDRIVE_*` overrides (a fix deployed mid-test).
    pub fn reconfigure(&mut self, overrides: &[(&str, &str)]) {
        let table = self.ledger.as_ref().map(|ledger| ledger.table().to_owned());
        let overrides: Vec<(&str, &str)> = table
            .iter()
            .map(|table| ("REDRIVE_LEDGER_TABLE", table.as_str()))
            .chain(overrides.iter().copied())
            .collect();
        let settings = self
            .topology
            .settings(&self.queue.key, &self.queue.dlq_url, &overrides)
            .unwrap();
        let processor = with_payloads(
            Processor::new(
                SqsQueue::with_client(self.client.clone()),
                ProcessorConfig::from(&settings),
            ),
            &self.payloads,
        );
        self.processor = with_ledger(processor, &self.ledger);
    }

    /// Sends orders (or raw bodies) to the source queue; FIFO messages go to `group`.
    pub async fn send(&self, bodies: &[String], group: Option<&str>) {
        for (chunk_index, chunk) in bodies.chunks(10).enumerate() {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, body)| {
                    let tenant = MessageAttributeValue::builder()
                        .data_type("String")
                        .string_value("acme")
                        .build()
                        .unwrap();
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body)
                        .message_attributes("tenant", tenant)
                        .set_message_group_id(group.map(str::to_owned))
                        .set_message_deduplication_id(
                            group.map(|g| format!("{g}-{chunk_index}-{i}")),
                        )
                        .build()
                        .unwrap()
                })
                .collect();
            let output = self
                .client
                .send_message_batch()
                .queue_url(&self.queue.url)
                .set_entries(Some(entries))
                .send()
                .await
                .unwrap();
            assert!(output.failed().is_empty(), "{:?}", output.failed());
        }
    }

    pub fn poller(&self) -> Poller {
        Poller::new(
            self.client.clone(),
            &self.queue,
            self.batch_size,
            Duration::ZERO,
        )
    }

    /// Invokes the consumer in process, as Lambda would, with the function timeout as deadline.
    pub async fn invoke(&self, event: String) -> Result<String, String> {
        self.invoke_handler(event, &self.consumer).await
    }

    /// [`Stack::invoke`] with another handler (one that wraps the consumer).
    pub async fn invoke_handler(
        &self,
        event: String,
        handler: &impl RecordHandler,
    ) -> Result<String, String> {
        let deadline_ms = SystemClock.now_ms() + self.timeout.as_millis() as u64;
        self.invoke_with_deadline(event, deadline_ms, handler).await
    }

    pub async fn invoke_with_deadline(
        &self,
        event: String,
        deadline_ms: u64,
        handler: &impl RecordHandler,
    ) -> Result<String, String> {
        let mut context = Context::default();
        context.deadline = deadline_ms;
        let event = LambdaEvent::new(Bytes::from(event), context);
        let processed = redrive::lambda::handle_event(event, &self.processor, handler)
            .await
            .map_err(|e| e.to_string())?;
        Ok(serde_json::to_string(&processed.response).unwrap())
    }

    /// Polls until the source queue is empty (nothing visible, in flight or delayed), or `limit`.
    pub async fn drain(&self, limit: Duration) -> Vec<Poll> {
        self.drain_with(&self.consumer, limit).await
    }

    /// [`Stack::drain`] with another handler.
    pub async fn drain_with(&self, handler: &impl RecordHandler, limit: Duration) -> Vec<Poll> {
        let poller = self.poller();
        let started = Instant::now();
        let mut polls = Vec::new();
        while started.elapsed() < limit {
            let poll = poller
                .poll(Duration::from_secs(1), |event| {
                    self.invoke_handler(event, handler)
                })
                .await
                .unwrap();
            if poll.received > 0 {
                polls.push(poll);
            } else if self.source_depth().await == 0 {
                break;
            }
        }
        polls
    }

    pub async fn source_depth(&self) -> u64 {
        let (visible, in_flight, delayed) = depth(&self.client, &self.queue.url).await.unwrap();
        visible + in_flight + delayed
    }

    pub async fn delayed(&self) -> u64 {
        depth(&self.client, &self.queue.url).await.unwrap().2
    }

    /// Takes every message out of the DLQ.
    pub async fn dlq_messages(&self) -> Vec<Message> {
        let mut all = Vec::new();
        loop {
            let output = self
                .client
                .receive_message()
                .queue_url(&self.queue.dlq_url)
                .max_number_of_messages(10)
                .visibility_timeout(60)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await
                .unwrap();
            let batch = output.messages.unwrap_or_default();
            if batch.is_empty() {
                return all;
            }
            all.extend(batch);
        }
    }

    /// Makes messages taken by `dlq_messages` visible again.
    pub async fn release_dlq(&self, messages: &[Message]) {
        for message in messages {
            self.client
                .change_message_visibility()
                .queue_url(&self.queue.dlq_url)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .visibility_timeout(0)
                .send()
                .await
                .unwrap();
        }
    }

    /// The operator's forced redrive of the DLQ, now (`REDRIVE_REPROCESS_AFTER=0s`), with
    /// `command`'s choices (a destination, error kinds): what the reprocessor did.
    pub async fn redrive_dlq(
        &self,
        command: redrive::reprocess::ReprocessCommand,
    ) -> redrive::reprocess::ReprocessSummary {
        let after = "REDRIVE_REPROCESS_AFTER";
        let settings = redrive::config::ReprocessSettings::from_lookup([after], |name| {
            (name == after).then(|| "0s".to_owned())
        })
        .unwrap();
        let plan = redrive::reprocess::ReprocessCommand {
            source: Some(self.queue.dlq_url.clone()),
            force: true,
            ..command
        }
        .plan(&settings)
        .unwrap();
        redrive::reprocess::Reprocessor::new(SqsQueue::with_client(self.client.clone()), &settings)
            .run(&plan, None, |_| {})
            .await
            .unwrap()
    }

    pub fn charged(&self) -> Vec<String> {
        self.consumer
            .payments()
            .charged()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    /// Messages in = charged + still in the source + in the DLQ.
    pub async fn assert_accounted(&self, sent: usize, dead: &[Message]) {
        let charged = self.charged();
        let mut unique = charged.clone();
        unique.sort();
        unique.dedup();
        let left = self.source_depth().await as usize;
        assert_eq!(
            sent,
            unique.len() + left + dead.len(),
            "charged {charged:?}, {left} left in the source, {} in the DLQ",
            dead.len()
        );
    }
}

fn with_payloads(
    processor: Processor<SqsQueue>,
    payloads: &Option<Payloads>,
) -> Processor<SqsQueue> {
    match payloads {
        Some(payloads) => processor.with_payloads(payloads.clone()),
        None => processor,
    }
}

fn with_ledger(
    processor: Processor<SqsQueue>,
    ledger: &Option<std::sync::Arc<redrive::aws::DynamoDbStore>>,
) -> Processor<SqsQueue> {
    match ledger {
        Some(ledger) => processor.with_ledger(ledger.clone()),
        None => processor,
    }
}

pub fn order(id: &str) -> String {
    format!(r#"{{"orderId":"{id}","customerId":"c-1","amount":10.5,"currency":"EUR"}}"#)
}

pub fn meta(message: &Message) -> Option<Meta<'static>> {
    let value = message
        .message_attributes()?
        .get("redrive")?
        .string_value()?;
    Some(
        serde_json::from_str::<Meta<'_>>(value)
            .unwrap()
            .into_owned(),
    )
}

pub fn order_id(message: &Message) -> String {
    let body: serde_json::Value =
        serde_json::from_str(message.body().unwrap_or_default()).unwrap_or_default();
    body["orderId"].as_str().unwrap_or_default().to_owned()
}

/// Wraps a handler and counts the records in flight, in all and per message group.
pub struct InFlight<'h, H> {
    inner: &'h H,
    counts: std::sync::Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    now: usize,
    most: usize,
    per_group: std::collections::HashMap<String, usize>,
    most_in_a_group: usize,
}

impl<'h, H> InFlight<'h, H> {
    pub fn new(inner: &'h H) -> Self {
        Self {
            inner,
            counts: std::sync::Mutex::default(),
        }
    }

    /// The most records in flight at once, in all and in one message group.
    pub fn most(&self) -> (usize, usize) {
        let counts = self.counts.lock().unwrap();
        (counts.most, counts.most_in_a_group)
    }

    fn change(&self, group: Option<&str>, entering: bool) {
        let mut counts = self.counts.lock().unwrap();
        let step = |n: &mut usize| if entering { *n += 1 } else { *n -= 1 };
        step(&mut counts.now);
        counts.most = counts.most.max(counts.now);
        if let Some(group) = group {
            let in_group = counts.per_group.entry(group.to_owned()).or_default();
            step(in_group);
            let in_group = *in_group;
            counts.most_in_a_group = counts.most_in_a_group.max(in_group);
        }
    }
}

impl<H: RecordHandler> RecordHandler for InFlight<'_, H> {
    async fn handle(&self, message: &Record<'_>) -> Result<(), RecordError> {
        self.change(message.group_id(), true);
        let result = self.inner.handle(message).await;
        self.change(message.group_id(), false);
        result
    }
}
