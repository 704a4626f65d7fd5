//! The Kafka soak: orders of many customers (the key) on the partitions of a `tansu` topic, read
//! by the stand-in for Lambda's Kafka mapping ([`crate::kafka_poller`]), the mapping, the lane and
//! the lane's function as Terraform ships them (`infra/rendered/kafka-orders.json`, the waits
//! scaled), while the downstream and SQS itself have seeded outages, orders fail transiently a
//! seeded number of times and invocations fail as a whole after their effects (Lambda delivers the
//! batch again). Transient failures go to the retry lane
//! (SQS FIFO on moto, read by the same function), poison orders and their customer's later orders
//! to the DLQ (or, poisoned in the lane, held there at the head of their customer's group), the
//! attempt ledger (DynamoDB on moto) remembering the customers with orders out; then the poison is
//! fixed, the held heads released and the DLQ redriven into the lane. The invariant: every order takes
//! effect exactly once, each customer's orders in the order the topic has them, none lost.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redrive::aws::DynamoDbStore;
use redrive::envelope::OutgoingMessage;
use redrive::idempotency::{Idempotent, KeyFrom, MemoryStore};
use redrive::ledger::{release_head, AttemptLedger, Release};
use redrive::port::{EntryFailure, ForwardingPort, QueuePort as _, VisibilityChange};
use redrive::{
    Message, PortError, Processor, ProcessorConfig, RecordError, RecordHandler, SqsQueue,
};
use rskafka::client::partition::{Compression, UnknownTopicHandling};

use crate::kafka_poller::{Broker, KafkaPoller};
use crate::poller::Poller;
use crate::stream_soak::{dice, invoke, invoke_with, redrive_and_drain, Faults};
use crate::topology::{self, Topology};
use crate::Error;

/// How much faster than AWS's clock the soak runs the lane's waits (its visibility timeout, backoff,
/// breaker and deferral age), as the demo does: 6 minutes' visibility in 6 seconds.
const TIME_SCALE: f64 = 60.0;

/// A run's size and seed.
#[derive(Debug, Clone)]
pub struct KafkaSoakConfig {
    /// Orders produced to the topic.
    pub orders: usize,
    /// Customers (keys) the orders are spread over.
    pub customers: usize,
    /// Partitions of the topic.
    pub partitions: i32,
    /// Seed of every injected fault.
    pub seed: u64,
}

/// What a run counted.
#[derive(Debug, Default, Clone)]
pub struct KafkaSoakReport {
    pub orders: usize,
    /// Orders whose effect happened exactly once.
    pub once: usize,
    /// Orders whose effect happened more than once.
    pub twice: usize,
    /// Orders with no effect at the end.
    pub lost: usize,
    /// Orders that took effect from the retry lane.
    pub from_lane: usize,
    /// Dead letters (poison, and the orders that followed them) redriven into the lane.
    pub redriven: usize,
    /// Held heads released once the poison was fixed (a head is held again when it comes back
    /// with its attempts spent in an outage, and released in the next round).
    pub held: usize,
    /// Rounds of releasing the held heads and redriving the DLQ it took to empty the lane and
    /// the DLQ (at most 5).
    pub recovery_rounds: usize,
    /// Customers whose orders took effect out of the topic's order.
    pub out_of_order: usize,
    /// Invocations from Kafka, those that failed as a whole, and those that gave a partition back.
    pub invocations: usize,
    pub whole_batch_failures: usize,
    pub given_back: usize,
    /// Records the Kafka mapping discarded (past its retries or record age).
    pub discarded: usize,
    /// Rounds during which SQS refused the lane's and the DLQ's sends.
    pub sqs_outage_rounds: usize,
    /// For a broken run: each customer out of order and each order without effect, with the
    /// path its orders took (every try, where from, what it met).
    pub findings: Vec<String>,
}

impl KafkaSoakReport {
    /// The invariant.
    pub fn holds(&self) -> bool {
        self.once == self.orders && self.twice == 0 && self.lost == 0 && self.out_of_order == 0
    }
}

impl fmt::Display for KafkaSoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "orders {}: once {}, twice {}, lost {}, from the lane {}, dead-lettered then redriven {}, \
             held in the lane then released {} (in {} rounds), customers out of order {}; \
             invocations {} (failed whole {}, gave a partition back {}), discarded by the mapping \
             {}, rounds with SQS down {}: {}",
            self.orders,
            self.once,
            self.twice,
            self.lost,
            self.from_lane,
            self.redriven,
            self.held,
            self.recovery_rounds,
            self.out_of_order,
            self.invocations,
            self.whole_batch_failures,
            self.given_back,
            self.discarded,
            self.sqs_outage_rounds,
            if self.holds() { "HOLDS" } else { "BROKEN" }
        )?;
        for finding in &self.findings {
            write!(f, "\n  {finding}")?;
        }
        Ok(())
    }
}

/// The downstream: applies an order (`{"n": .., "customer": ..}`) unless its faults say otherwise.
struct Orders {
    faults: Faults,
    /// Each order applied: (customer, n, from the lane), in the order applied.
    applied: Mutex<Vec<(String, u64, bool)>>,
    /// Each try of each order: where it came from and what it met, in the order tried.
    tries: Mutex<HashMap<u64, Vec<String>>>,
}

impl RecordHandler for Orders {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let order: serde_json::Value = message.json()?;
        let n = order["n"].as_u64().unwrap_or_default();
        let customer = order["customer"].as_str().unwrap_or_default().to_owned();
        let seed = self.faults.seed;
        let from_lane = message.kafka().is_some() && message.meta().is_some();
        let outcome = self.faults.meet(
            &format!("order {n}"),
            dice(seed, &format!("poison {n}")).is_multiple_of(60),
            dice(seed, &format!("flaky {n}")) % 8 / 7,
        );
        let place = match (from_lane, self.faults.is_healed()) {
            (false, _) => "topic",
            (true, false) => "lane",
            (true, true) => "lane after the heal",
        };
        self.tries
            .lock()
            .unwrap()
            .entry(n)
            .or_default()
            .push(match &outcome {
                Ok(()) => format!("{place}: applied"),
                Err(error) => format!("{place}: {}", error.kind()),
            });
        outcome?;
        self.applied.lock().unwrap().push((customer, n, from_lane));
        Ok(())
    }
}

/// One partition's orders not produced yet.
struct Producer {
    client: rskafka::client::partition::PartitionClient,
    left: VecDeque<(u64, String)>,
}

impl Producer {
    /// Produces the next record batch (1 to 10 orders, stamped now: the mapping's record age
    /// counts from here); whether there was one.
    async fn produce(&mut self, seed: u64) -> Result<bool, Error> {
        if self.left.is_empty() {
            return Ok(false);
        }
        let partition = self.client.partition();
        let size = 1 + dice(seed, &format!("batch {partition} {}", self.left.len())) % 10;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64;
        let records = self
            .left
            .drain(..(size as usize).min(self.left.len()))
            .map(|(n, customer)| rskafka::record::Record {
                value: Some(
                    serde_json::json!({ "n": n, "customer": customer })
                        .to_string()
                        .into_bytes(),
                ),
                key: Some(customer.into_bytes()),
                headers: BTreeMap::new(),
                timestamp: rskafka::chrono::DateTime::from_timestamp_millis(now)
                    .expect("a timestamp"),
            })
            .collect();
        self.client
            .produce(records, Compression::NoCompression)
            .await
            .map_err(|e| Error::Emulator(e.to_string()))?;
        Ok(true)
    }
}

/// The lane's and the DLQ's SQS, refusing every send and visibility change while `down`.
struct SqsOutage {
    inner: SqsQueue,
    down: Arc<AtomicBool>,
}

impl SqsOutage {
    fn refuse(&self, operation: &'static str) -> Result<(), PortError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(PortError::new(operation, "injected: SQS is unavailable"));
        }
        Ok(())
    }
}

impl ForwardingPort for SqsOutage {
    type Inner = SqsQueue;

    fn inner(&self) -> &SqsQueue {
        &self.inner
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        messages: &[OutgoingMessage<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.refuse("SendMessageBatch")?;
        self.inner.send_batch(queue_url, messages).await
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.refuse("ChangeMessageVisibilityBatch")?;
        self.inner.change_visibility_batch(queue_url, changes).await
    }
}

fn port(error: PortError) -> Error {
    Error::Emulator(error.to_string())
}

/// Order `n`'s customer (its record's key is `c-<customer>`).
fn customer(config: &KafkaSoakConfig, n: u64) -> usize {
    dice(config.seed, &format!("customer {n}")) as usize % config.customers
}

/// Runs the soak: a broker of its own, the lane and the ledger on the emulator in
/// `AWS_ENDPOINT_URL`, names prefixed with `prefix`.
pub async fn run(prefix: &str, config: &KafkaSoakConfig) -> Result<KafkaSoakReport, Error> {
    let emulator = |e: String| Error::Emulator(e);
    let binary = Broker::binary().ok_or_else(|| {
        emulator("tansu is not built: `make` builds it into .cache/tools/bin".to_owned())
    })?;
    let broker = Broker::start(&binary)?;
    let client = broker.client().await?;
    client
        .controller_client()
        .map_err(|e| emulator(e.to_string()))?
        .create_topic("orders", config.partitions, 1, 5_000)
        .await
        .map_err(|e| emulator(e.to_string()))?;

    // A customer's orders are in one partition, produced while the soak runs: each round, a
    // record batch of seeded size per partition (so that a partition is given back inside a batch
    // as often as at its start).
    let mut by_partition: BTreeMap<i32, VecDeque<(u64, String)>> = BTreeMap::new();
    for n in 0..config.orders as u64 {
        let customer = customer(config, n);
        let partition = (customer % config.partitions as usize) as i32;
        by_partition
            .entry(partition)
            .or_default()
            .push_back((n, format!("c-{customer}")));
    }
    let mut producers = Vec::new();
    for (partition, orders) in by_partition {
        let partition_client = client
            .partition_client("orders", partition, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| emulator(e.to_string()))?;
        producers.push(Producer {
            client: partition_client,
            left: orders,
        });
    }

    // The Kafka mapping, the lane, its DLQ and the lane's function as Terraform ships them
    // (infra/examples/kafka-orders on modules/kafka-consumer's defaults), the waits scaled.
    let sdk = redrive::aws::sdk_config_from_env();
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let shipped = crate::mapping::ShippedMapping::kafka()?;
    let mut topology =
        Topology::load(&topology::default_path()).map_err(|e| emulator(e.to_string()))?;
    topology.name_prefix = prefix.to_owned();
    let rendering = topology::rendering("kafka-orders").map_err(|e| emulator(e.to_string()))?;
    let lane_consumer = topology::Consumer::shipped(
        std::path::Path::new("infra/rendered/kafka-orders.json"),
        &rendering,
        topology::ShippedNames {
            queue: "warehouse-orders-kafka.fifo",
            dlq: "warehouse-orders-kafka-dlq.fifo",
            mapping: "module.orders_kafka.module.consumer.aws_lambda_event_source_mapping.consumer",
            function: "warehouse-orders-kafka",
        },
    )
    .map_err(|e| emulator(e.to_string()))?;
    let lane_concurrency = rendering["mappings"]
        ["module.orders_kafka.module.consumer.aws_lambda_event_source_mapping.consumer"]
        ["maximum_concurrency"]
        .as_u64()
        .unwrap_or(2) as usize;
    let key = "orders-kafka".to_owned();
    topology.consumers = BTreeMap::from([(key.clone(), lane_consumer)]);
    topology.scale_time(TIME_SCALE);
    let lane = crate::provision::provision(&sqs, &topology)
        .await?
        .remove(0);
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let table = format!("{prefix}-ledger");
    crate::provision::idempotency_table(&dynamodb, &table).await?;
    let settings = topology
        .settings(
            &key,
            &lane.dlq_url,
            &[
                ("REDRIVE_LANE_URL", lane.url.as_str()),
                ("REDRIVE_LEDGER_TABLE", table.as_str()),
            ],
        )
        .map_err(|e| emulator(e.to_string()))?;
    let ledger = Arc::new(DynamoDbStore::with_client(dynamodb, table));
    // SQS itself has seeded outages: the lane and its DLQ refuse every send and visibility change.
    let sqs_down = Arc::new(AtomicBool::new(false));
    let processor = Processor::new(
        SqsOutage {
            inner: SqsQueue::with_client(sqs.clone()),
            down: sqs_down.clone(),
        },
        ProcessorConfig::from(&settings),
    )
    .with_ledger(ledger.clone());
    let orders = Orders {
        faults: Faults::new(config.seed),
        applied: Mutex::default(),
        tries: Mutex::default(),
    };
    // A batch Lambda delivers again after a crash runs its orders again: the guard keeps their
    // effects to one, keyed by the record's id (`<topic>-<partition>:<offset>`, on its copies too).
    let handler = Idempotent::new(
        &orders,
        MemoryStore::new(config.orders * 2),
        KeyFrom::MessageId,
    );

    let mut kafka = KafkaPoller::new(
        &client,
        &broker.address,
        "orders",
        config.partitions,
        shipped,
    )
    .await?;
    let lane_consumer = &topology.consumers[&key];
    let lane_poller = Poller::new(
        sqs.clone(),
        &lane,
        lane_consumer.batch_size,
        Duration::from_secs(u64::from(lane_consumer.batching_window_seconds)),
    );
    let lane_visibility = Duration::from_secs(u64::from(lane_consumer.visibility_timeout_seconds));
    let mut report = KafkaSoakReport {
        orders: config.orders,
        ..KafkaSoakReport::default()
    };
    let started = Instant::now();
    let mut round = 0_u64;
    let mut idle_since: Option<Instant> = None;
    let mut topic_busy = true;
    let mut applied_before = 0;
    loop {
        round += 1;
        let mut producing = false;
        for producer in &mut producers {
            producing |= producer.produce(config.seed).await?;
        }
        orders.faults.roll_outage(round);
        // While the topic has records to deliver, an SQS outage starts on one round in eight and
        // ends on one in four (the lane alone then drains without one).
        let roll = dice(config.seed, &format!("sqs outage {round}")) % 8;
        let sqs_is_down = topic_busy
            && if sqs_down.load(Ordering::SeqCst) {
                roll >= 2
            } else {
                roll == 0
            };
        sqs_down.store(sqs_is_down, Ordering::SeqCst);
        report.sqs_outage_rounds += usize::from(sqs_is_down);
        let crash = dice(config.seed, &format!("crash {round}")).is_multiple_of(8);
        // One invocation in four meets its deadline soon: past the 2 s margin, up to 60 ms to
        // handle records in; the rest of each partition is given back.
        let left = match dice(config.seed, &format!("short {round}")) % 4 {
            0 => Duration::from_millis(2_000 + dice(config.seed, &format!("left {round}")) % 60),
            _ => Duration::from_secs(30),
        };
        // Boxed: the invocation's future nests too deeply to sit inside the poll's.
        let poll = kafka
            .poll(|event| {
                Box::pin(async {
                    let answer = invoke_with(&processor, &handler, event, left).await;
                    // The function crashed (or timed out) after its effects.
                    if crash {
                        Err("injected: the invocation failed after its effects".to_owned())
                    } else {
                        answer
                    }
                })
            })
            .await?;
        if let Some(poll) = &poll {
            report.invocations += 1;
            report.whole_batch_failures += usize::from(poll.whole_batch_failed);
            report.given_back += usize::from(poll.given_back > 0);
            report.discarded += poll.discarded;
        }
        // The lane's mapping runs beside the topic's, as many invocations at once as its
        // maximum concurrency allows.
        let lane_polls = (0..lane_concurrency).map(|_| {
            lane_poller.poll(Duration::ZERO, |event| {
                Box::pin(invoke(&processor, &handler, event))
            })
        });
        for poll in futures_util::future::join_all(lane_polls).await {
            poll?;
        }
        topic_busy = producing || poll.is_some();
        let applied = orders.applied.lock().unwrap().len();
        let progressed = applied != applied_before;
        applied_before = applied;
        if !topic_busy && !progressed && !sqs_is_down {
            // Done when the lane is empty, or nothing has taken effect for longer than its
            // visibility timeout while heads are held (their groups' messages wait behind them;
            // a record deferred in an outage meanwhile is drained after the heal below).
            let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
            let (visible, in_flight, delayed) = crate::provision::depth(&sqs, &lane.url).await?;
            let held = ledger.held().await.map_err(port)?.len();
            if visible + in_flight + delayed == 0
                || (held > 0 && idle > lane_visibility + Duration::from_secs(1))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        } else {
            idle_since = None;
        }
        if started.elapsed() > Duration::from_secs(600) {
            let (visible, in_flight, delayed) = crate::provision::depth(&sqs, &lane.url).await?;
            return Err(emulator(format!(
                "the topic and the lane did not drain in 10 minutes (round {round}, the topic \
                 {}, the lane {visible} visible, {in_flight} in flight, {delayed} delayed): \
                 {report}",
                if topic_busy {
                    "still delivering"
                } else {
                    "done"
                }
            )));
        }
    }

    sqs_down.store(false, Ordering::SeqCst);
    // The poison is fixed: an operator releases the held heads to be tried again and the
    // scheduled reprocessor redrives the DLQ into the lane, the same function; again while either
    // finds something. A head whose attempts ran out while the downstream was down is held again
    // when it comes back, and a redrive SQS did not confirm stays in the DLQ for the next run.
    orders.faults.heal();
    let queue = SqsQueue::with_client(sqs.clone());
    loop {
        report.recovery_rounds += 1;
        for (id, _) in ledger.held().await.map_err(port)? {
            let released = release_head(ledger.as_ref(), &queue, &id, Release::Retry)
                .await
                .map_err(port)?;
            report.held += 1;
            if !released
                .as_ref()
                .is_some_and(|released| released.visible_now)
            {
                report.findings.push(format!(
                    "held head {id} released, not visible at once: {released:?}"
                ));
            }
        }
        report.redriven += redrive_and_drain(
            &sqs,
            &lane.dlq_url,
            &lane,
            &processor,
            &handler,
            lane_visibility + Duration::from_secs(1),
        )
        .await?;
        let total = |(visible, in_flight, delayed): (u64, u64, u64)| visible + in_flight + delayed;
        let left = total(crate::provision::depth(&sqs, &lane.url).await?)
            + total(crate::provision::depth(&sqs, &lane.dlq_url).await?);
        let held = ledger.held().await.map_err(port)?.len();
        if (left == 0 && held == 0) || report.recovery_rounds == 5 {
            break;
        }
    }

    let applied = orders.applied.lock().unwrap().clone();
    let mut effects: HashMap<u64, usize> = HashMap::new();
    let mut last: HashMap<&str, u64> = HashMap::new();
    let mut out_of_order = std::collections::BTreeSet::new();
    for (customer, n, from_lane) in &applied {
        *effects.entry(*n).or_default() += 1;
        report.from_lane += usize::from(*from_lane);
        if let Some(previous) = last.insert(customer, *n) {
            if previous > *n {
                out_of_order.insert(customer.clone());
            }
        }
    }
    report.out_of_order = out_of_order.len();
    report.once = effects.values().filter(|&&n| n == 1).count();
    report.twice = effects.values().filter(|&&n| n > 1).count();
    report.lost = config.orders.saturating_sub(effects.len());
    if !report.holds() {
        let tries = std::mem::take(&mut *orders.tries.lock().unwrap());
        let path = |n: u64| {
            format!(
                "order {n} of c-{} [{}]",
                customer(config, n),
                tries.get(&n).map(|t| t.join(", ")).unwrap_or_default()
            )
        };
        for customer in out_of_order.iter().take(5) {
            let effects: Vec<String> = applied
                .iter()
                .filter(|(c, _, _)| c == customer)
                .map(|(_, n, _)| path(*n))
                .collect();
            report.findings.push(format!(
                "{customer} out of order, as applied: {}",
                effects.join("; ")
            ));
        }
        let without_effect: Vec<String> = (0..config.orders as u64)
            .filter(|n| !effects.contains_key(n))
            .take(10)
            .map(path)
            .collect();
        if !without_effect.is_empty() {
            let (lane_depth, dlq_depth) = (
                crate::provision::depth(&sqs, &lane.url).await?,
                crate::provision::depth(&sqs, &lane.dlq_url).await?,
            );
            report.findings.push(format!(
                "without effect (lane visible/in flight/delayed {lane_depth:?}, its DLQ \
                 {dlq_depth:?}, held {}): {}",
                ledger.held().await.map_err(port)?.len(),
                without_effect.join("; ")
            ));
        }
    }
    Ok(report)
}
