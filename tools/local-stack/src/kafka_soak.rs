//! The Kafka soak: orders of many customers (the key) on the partitions of a `tansu` topic, read
//! by the stand-in for Lambda's Kafka mapping ([`crate::kafka_poller`]) while the downstream has
//! seeded outages, orders fail transiently a seeded number of times and invocations fail as a whole
//! after their effects (Lambda delivers the batch again). Transient failures go to the retry lane
//! (SQS FIFO on moto, read by the same function), poison orders and their customer's later orders
//! to the DLQ (or, poisoned in the lane, held there at the head of their customer's group), the
//! attempt ledger (DynamoDB on moto) remembering the customers with orders out; then the poison is
//! fixed, the held heads released and the DLQ redriven into the lane. The invariant: every order takes
//! effect exactly once, each customer's orders in the order the topic has them, none lost.
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redrive::dynamodb::DynamoDbStore;
use redrive::fifo::{release_head, AttemptLedger, Release};
use redrive::idempotency::{Idempotent, KeyFrom, MemoryStore};
use redrive::{Message, Processor, ProcessorConfig, RecordError, RecordHandler, SqsQueue};
use rskafka::client::partition::{Compression, UnknownTopicHandling};

use crate::kafka_poller::{Broker, KafkaPoller};
use crate::poller::Poller;
use crate::stream_soak::{dice, invoke, invoke_with, redrive_and_drain, Faults};
use crate::topology::{self, Topology};
use crate::Error;

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
    /// Poison orders that held their customer's group in the lane, released once fixed.
    pub held: usize,
    /// Customers whose orders took effect out of the topic's order.
    pub out_of_order: usize,
    /// Invocations from Kafka, those that failed as a whole, and those that gave a partition back.
    pub invocations: usize,
    pub whole_batch_failures: usize,
    pub given_back: usize,
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
             held in the lane then released {}, customers out of order {}; invocations {} (failed \
             whole {}, gave a partition back {}): {}",
            self.orders,
            self.once,
            self.twice,
            self.lost,
            self.from_lane,
            self.redriven,
            self.held,
            self.out_of_order,
            self.invocations,
            self.whole_batch_failures,
            self.given_back,
            if self.holds() { "HOLDS" } else { "BROKEN" }
        )
    }
}

/// The downstream: applies an order (`{"n": .., "customer": ..}`) unless its faults say otherwise.
struct Orders {
    faults: Faults,
    /// Each order applied: (customer, n, from the lane), in the order applied.
    applied: Mutex<Vec<(String, u64, bool)>>,
}

impl RecordHandler for Orders {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let order: serde_json::Value = message.json()?;
        let n = order["n"].as_u64().unwrap_or_default();
        let customer = order["customer"].as_str().unwrap_or_default().to_owned();
        let seed = self.faults.seed;
        self.faults.meet(
            &format!("order {n}"),
            dice(seed, &format!("poison {n}")).is_multiple_of(60),
            dice(seed, &format!("flaky {n}")) % 8 / 7,
        )?;
        let from_lane = message.kafka().is_some() && message.meta().is_some();
        self.applied.lock().unwrap().push((customer, n, from_lane));
        Ok(())
    }
}

fn port(error: redrive::PortError) -> Error {
    Error::Emulator(error.to_string())
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

    // A customer's orders are in one partition, produced in record batches of seeded sizes (so
    // that a partition is given back inside a batch as often as at its start).
    let mut by_partition: BTreeMap<i32, Vec<(u64, String)>> = BTreeMap::new();
    for n in 0..config.orders as u64 {
        let customer = dice(config.seed, &format!("customer {n}")) as usize % config.customers;
        let partition = (customer % config.partitions as usize) as i32;
        by_partition
            .entry(partition)
            .or_default()
            .push((n, format!("c-{customer}")));
    }
    for (partition, orders) in &by_partition {
        let partition_client = client
            .partition_client("orders", *partition, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| emulator(e.to_string()))?;
        let mut left = orders.as_slice();
        while !left.is_empty() {
            let size =
                (1 + dice(config.seed, &format!("batch {partition} {}", left.len())) % 40) as usize;
            let (chunk, rest) = left.split_at(size.min(left.len()));
            let records = chunk
                .iter()
                .map(|(n, customer)| rskafka::record::Record {
                    key: Some(customer.clone().into_bytes()),
                    value: Some(
                        serde_json::json!({ "n": n, "customer": customer })
                            .to_string()
                            .into_bytes(),
                    ),
                    headers: BTreeMap::new(),
                    timestamp: rskafka::chrono::DateTime::from_timestamp_millis(1_763_790_000_000)
                        .expect("a timestamp"),
                })
                .collect();
            partition_client
                .produce(records, Compression::NoCompression)
                .await
                .map_err(|e| emulator(e.to_string()))?;
            left = rest;
        }
    }

    // The lane and its DLQ: the FIFO consumer of the tfvars, its names prefixed.
    let sdk = redrive::sqs::sdk_config_from_env();
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut topology =
        Topology::load(&topology::default_path()).map_err(|e| emulator(e.to_string()))?;
    topology.name_prefix = prefix.to_owned();
    topology.consumers.retain(|_, consumer| consumer.fifo);
    let key = topology
        .consumers
        .keys()
        .next()
        .cloned()
        .ok_or_else(|| emulator("the tfvars have no FIFO consumer".to_owned()))?;
    let consumer = topology.consumers.get_mut(&key).expect("the key just read");
    consumer.visibility_timeout_seconds = 2;
    consumer.max_receive_count = 1_000;
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
                ("REDRIVE_RETRY_SEQUENCE", "1s"),
                // A poison order in the lane holds its customer's group there (as
                // modules/kafka-consumer sets it), and an outage does not use its tries up.
                ("REDRIVE_FIFO_ON_DEAD_LETTER", "hold"),
                ("REDRIVE_MAX_ATTEMPTS", "100"),
                ("REDRIVE_DEFER_MAX_AGE", "1h"),
            ],
        )
        .map_err(|e| emulator(e.to_string()))?;
    let ledger = Arc::new(DynamoDbStore::with_client(dynamodb, table));
    let processor = Processor::new(
        SqsQueue::with_client(sqs.clone()),
        ProcessorConfig::from(&settings),
    )
    .with_ledger(ledger.clone());
    let orders = Orders {
        faults: Faults::new(config.seed),
        applied: Mutex::default(),
    };
    // A batch Lambda delivers again after a crash runs its orders again: the guard keeps their
    // effects to one, keyed by the record's id (`<topic>-<partition>:<offset>`, on its copies too).
    let handler = Idempotent::new(
        &orders,
        MemoryStore::new(config.orders * 2),
        KeyFrom::MessageId,
    );

    let mut kafka =
        KafkaPoller::new(&client, &broker.address, "orders", config.partitions, 10).await?;
    let lane_poller = Poller::new(sqs.clone(), &lane, 10, Duration::ZERO);
    let mut report = KafkaSoakReport {
        orders: config.orders,
        ..KafkaSoakReport::default()
    };
    let started = Instant::now();
    let mut round = 0_u64;
    let mut idle_rounds = 0;
    loop {
        round += 1;
        orders.faults.roll_outage(round);
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
        }
        // The lane's mapping runs beside the topic's: a few of its batches per round.
        let mut from_lane = 0;
        for _ in 0..3 {
            from_lane += lane_poller
                .poll(Duration::ZERO, |event| {
                    Box::pin(invoke(&processor, &handler, event))
                })
                .await?
                .received;
        }
        if poll.is_none() && from_lane == 0 && !orders.faults.is_down() {
            // Done when the lane is empty, or has delivered nothing for longer than its
            // visibility timeout while heads are held (their groups' messages wait behind them).
            idle_rounds += 1;
            let (visible, in_flight, delayed) = crate::provision::depth(&sqs, &lane.url).await?;
            let held = ledger.held().await.map_err(port)?.len();
            if visible + in_flight + delayed == 0 || (held > 0 && idle_rounds >= 20) {
                report.held = held;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        } else {
            idle_rounds = 0;
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(emulator(format!(
                "the topic and the lane did not drain in 10 minutes: {report}"
            )));
        }
    }

    // The poison is fixed: the held heads are released to be tried again, and the DLQ's dead
    // letters go to the lane, the same function.
    orders.faults.heal();
    let queue = SqsQueue::with_client(sqs.clone());
    for (id, _) in ledger.held().await.map_err(port)? {
        release_head(ledger.as_ref(), &queue, &id, Release::Retry)
            .await
            .map_err(port)?;
    }
    report.redriven = redrive_and_drain(&sqs, &lane.dlq_url, &lane, &processor, &handler).await?;

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
    Ok(report)
}
