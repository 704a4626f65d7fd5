//! The Kafka rows: a 10,000-record Kafka event through ours (failures to the retry lane) and
//! Powertools for Python's `BatchProcessor(EventType.Kafka)` side by side; an I/O-bound Kafka batch
//! against its `BatchProcessor` (in turn) and `AsyncBatchProcessor` (every record at once); and the
//! records per second the local stand-in for Lambda's Kafka mapping drains through one partition
//! of a real broker when 1% of the records fail for a while, with the retry lane and without it.
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use redrive::kafka::KafkaEvent;
use redrive::testing::{MemoryLedger, RecordingQueue};
use redrive::{Message, Processor, ProcessorConfig, RecordError, RecordHandler};
use redrive_local::kafka_poller::{Broker, KafkaPoller};
use redrive_local::mapping::ShippedMapping;
use rskafka::client::partition::{Compression, UnknownTopicHandling};

use crate::event::{order_body, Order, FAIL_EVERY};
use crate::io_bound::{AwaitsDownstream, Downstream};
use crate::{median, ms, CheckStatus, Peer, PeerSamples, FAR_FUTURE_MS, PEER_BURST, PEER_WARMUP};

const LANE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-lane.fifo";
const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq.fifo";
/// The CPU-bound event: 10,000 records in 4 partitions, every 100th failing.
const CPU_RECORDS: usize = 10_000;
const CPU_PARTITIONS: usize = 4;
const CPU_SAMPLES: usize = 11;
/// Runs of ours in a turn; the first is not counted (the peer's run before it has evicted our
/// working set from the cache).
const TURN_RUNS: usize = 4;
/// The I/O-bound batch: 10 partitions of 20 records, a 5 ms downstream, none failing.
const IO_PARTITIONS: usize = 10;
const IO_RECORDS: usize = 200;
const IO_LATENCY: Duration = Duration::from_millis(5);
const IO_ROUNDS: usize = 3;
const IO_RUNS: usize = 3;
/// The drain: one partition of 1,000 records, a 1 ms downstream, every 100th record failing for
/// 200 ms from its first try, batches of 100.
const DRAIN_RECORDS: usize = 1_000;
const DRAIN_LATENCY: Duration = Duration::from_millis(1);
const DRAIN_WINDOW: Duration = Duration::from_millis(200);
const DRAIN_BATCH: usize = 100;

/// A Kafka event as Lambda delivers it: `records` orders (the SQS rows' bodies, base64), keyed by
/// order, dealt round `partitions` partitions of the topic `orders`; every `FAIL_EVERY`th marked
/// `fail` when `failing`.
pub fn generate_event(records: usize, partitions: usize, failing: bool) -> String {
    let mut by_partition: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for i in 0..records {
        let partition = i % partitions;
        let status = if failing && i % FAIL_EVERY == FAIL_EVERY - 1 {
            "fail"
        } else {
            "ok"
        };
        let value = order_body(i, status);
        by_partition
            .entry(format!("orders-{partition}"))
            .or_default()
            .push(serde_json::json!({
                "topic": "orders",
                "partition": partition,
                "offset": i / partitions,
                "timestamp": 1_763_790_000_000_i64 + i as i64,
                "timestampType": "CREATE_TIME",
                "key": BASE64.encode(format!("o-{i:06}")),
                "value": BASE64.encode(value),
                "headers": [{ "source": [98, 101, 110, 99, 104] }],
            }));
    }
    serde_json::json!({
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/orders/5a1c0e2e-0b9f-4ad4-9d4e-1d2f3a4b5c6d-2",
        "bootstrapServers": "b-1.orders.kafka.us-east-1.amazonaws.com:9098",
        "records": by_partition,
    })
    .to_string()
}

/// Ours with the retry lane and a DLQ (on the in-memory queue).
fn processor() -> Processor<RecordingQueue> {
    Processor::new(RecordingQueue::default(), {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = Some(DLQ.to_owned());
        processor_config.lane_url = Some(LANE.to_owned());
        processor_config.deadline_margin = Duration::from_secs(2);
        processor_config
    })
}

/// Event bytes in, response bytes out: the time, and the records sent to the lane.
fn run_once(
    runtime: &tokio::runtime::Runtime,
    processor: &Processor<RecordingQueue>,
    handler: &impl RecordHandler,
    event: &[u8],
) -> (Duration, u32) {
    let started = Instant::now();
    let parsed = KafkaEvent::from_slice(event).expect("valid event");
    let processed = runtime
        .block_on(processor.process_kafka(handler, &parsed, FAR_FUTURE_MS))
        .expect("batch");
    let response = serde_json::to_vec(&processed.response).expect("response");
    let elapsed = started.elapsed();
    assert!(
        processed.response.batch_item_failures.is_empty(),
        "no partition given back"
    );
    std::hint::black_box(response);
    (elapsed, processed.report.sent_to_lane)
}

/// The CPU-bound row: ours, then Powertools, then ours, each Powertools run against the turns of
/// ours around it.
pub struct Cpu {
    pub ours_ms: f64,
    /// Powertools' name, median time and median ratio to ours.
    pub python: (String, f64, f64),
}

pub fn cpu(
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
    python: &Path,
    python_peer: &Path,
) -> Result<Cpu, String> {
    let event = generate_event(CPU_RECORDS, CPU_PARTITIONS, true);
    let path = scratch.join("event-kafka-10k.json");
    std::fs::write(&path, &event).map_err(|e| e.to_string())?;
    let expected = CPU_RECORDS / FAIL_EVERY;
    let mut peer = Peer::spawn(python, python_peer, &[path.as_os_str(), "0".as_ref()])?;
    let mut ours = Vec::new();
    let mut turn = |counted: bool| {
        let mut times = Vec::new();
        for run in 0..TURN_RUNS {
            let (elapsed, to_lane) =
                run_once(runtime, &processor(), &CheckStatus, event.as_bytes());
            assert_eq!(to_lane as usize, expected, "every failure in the lane");
            if run > 0 {
                times.push(ms(elapsed));
            }
        }
        if counted {
            ours.extend(&times);
        }
        median(times)
    };
    let mut samples = PeerSamples::default();
    for sample in 0..PEER_WARMUP + CPU_SAMPLES {
        let counted = sample >= PEER_WARMUP;
        let before = turn(counted);
        let results = peer.burst(PEER_BURST, expected)?;
        let after = turn(counted);
        if counted {
            samples.add(results, (before + after) / 2.0);
        }
    }
    Ok(Cpu {
        ours_ms: median(ours),
        python: samples.fastest(),
    })
}

/// The I/O-bound row: ours, our CPU time for the batch, and each of Powertools' modes.
pub struct Io {
    pub ours_ms: f64,
    pub cpu_ms: f64,
    pub peers: Vec<(String, f64)>,
}

impl Io {
    /// The waits that must follow one another (a partition's records in turn), plus our CPU time.
    pub fn floor_ms(&self) -> f64 {
        (IO_RECORDS / IO_PARTITIONS) as f64 * ms(IO_LATENCY) + self.cpu_ms
    }

    pub fn label() -> String {
        format!(
            "Kafka, {IO_PARTITIONS} partitions x {} records, {} ms downstream",
            IO_RECORDS / IO_PARTITIONS,
            IO_LATENCY.as_millis()
        )
    }
}

pub fn io(
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
    python: &Path,
    python_peer: &Path,
) -> Result<Io, String> {
    let event = generate_event(IO_RECORDS, IO_PARTITIONS, false);
    let path = scratch.join("event-kafka-io.json");
    std::fs::write(&path, &event).map_err(|e| e.to_string())?;
    let latency_ms = IO_LATENCY.as_millis().to_string();
    let mut peer = Peer::spawn(
        python,
        python_peer,
        &[path.as_os_str(), latency_ms.as_ref()],
    )?;
    let downstream = Downstream::start();
    let handler = AwaitsDownstream {
        downstream: &downstream,
        latency: IO_LATENCY,
    };
    let instant = AwaitsDownstream {
        downstream: &downstream,
        latency: Duration::ZERO,
    };
    let processor = processor();
    let (mut ours, mut cpu) = (Vec::new(), Vec::new());
    let mut peers: HashMap<String, Vec<f64>> = HashMap::new();
    // A first round of everyone, not counted: the interpreter's warm-up.
    for round in 0..=IO_ROUNDS {
        for _ in 0..IO_RUNS {
            let (elapsed, _) = run_once(runtime, &processor, &handler, event.as_bytes());
            let (cpu_elapsed, _) = run_once(runtime, &processor, &instant, event.as_bytes());
            if round > 0 {
                ours.push(ms(elapsed));
                cpu.push(ms(cpu_elapsed));
            }
        }
        let results = peer.burst(IO_RUNS, 0)?;
        if round > 0 {
            for mode in results {
                peers.entry(mode.name).or_default().push(mode.ms);
            }
        }
    }
    let mut peers: Vec<(String, f64)> = peers
        .into_iter()
        .map(|(name, samples)| (name, median(samples)))
        .collect();
    peers.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Io {
        ours_ms: median(ours),
        cpu_ms: median(cpu),
        peers,
    })
}

/// Fails a `flaky` order transiently until `DRAIN_WINDOW` has passed since its first try; every
/// order awaits the downstream first.
struct Brownout<'d> {
    downstream: &'d Downstream,
    first_tried: Mutex<HashMap<String, Instant>>,
}

impl RecordHandler for Brownout<'_> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let order: Order<'_> = message.json()?;
        self.downstream.call(DRAIN_LATENCY).await;
        if order.status != "flaky" {
            return Ok(());
        }
        let first = *self
            .first_tried
            .lock()
            .expect("first tries")
            .entry(order.order_id.to_owned())
            .or_insert_with(Instant::now);
        if first.elapsed() < DRAIN_WINDOW {
            return Err(RecordError::transient("unavailable", "downstream brownout"));
        }
        Ok(())
    }
}

/// The drain row: records per second through one partition, with the lane and without it.
pub struct Drain {
    pub with_lane: f64,
    pub without_lane: f64,
    /// Invocations each took, and the records the lane got.
    pub invocations: (usize, usize),
    pub to_lane: usize,
}

impl Drain {
    pub fn label() -> String {
        format!(
            "Kafka drain of one partition ({DRAIN_RECORDS} records, batches of {DRAIN_BATCH}, {} ms downstream, 1% failing for {} ms), records/s",
            DRAIN_LATENCY.as_millis(),
            DRAIN_WINDOW.as_millis()
        )
    }
}

/// Produces the partition to a `tansu` broker of its own and drains it twice through
/// `redrive_local::kafka_poller`, the stand-in for Lambda's Kafka mapping: with the retry lane
/// (and the attempt ledger, in memory), and without (a given-back partition is delivered again at
/// once from the record named, as Lambda retries a batch). On a runtime of its own, with I/O.
pub fn drain() -> Result<Drain, String> {
    // The broker's client needs the runtime's I/O, which the CPU-bound rows' runtime leaves off.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let binary = Broker::binary()
        .ok_or("tansu is not built: `make bench` builds it into .cache/tools/bin")?;
    let broker = Broker::start(&binary).map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let client = broker.client().await.map_err(|e| e.to_string())?;
        client
            .controller_client()
            .map_err(|e| e.to_string())?
            .create_topic("orders", 1, 1, 5_000)
            .await
            .map_err(|e| e.to_string())?;
        let partition = client
            .partition_client("orders", 0, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| e.to_string())?;
        let records: Vec<rskafka::record::Record> = (0..DRAIN_RECORDS)
            .map(|i| {
                let status = if i % FAIL_EVERY == FAIL_EVERY - 1 {
                    "flaky"
                } else {
                    "ok"
                };
                rskafka::record::Record {
                    key: Some(format!("o-{i:06}").into_bytes()),
                    value: Some(order_body(i, status).into_bytes()),
                    headers: BTreeMap::new(),
                    timestamp: rskafka::chrono::DateTime::from_timestamp_millis(1_763_790_000_000)
                        .expect("a timestamp"),
                }
            })
            .collect();
        for chunk in records.chunks(250) {
            partition
                .produce(chunk.to_vec(), Compression::NoCompression)
                .await
                .map_err(|e| e.to_string())?;
        }
        let downstream = Downstream::start();
        let drain_mapping = ShippedMapping {
            batch_size: DRAIN_BATCH,
            ..ShippedMapping::kafka().map_err(|e| e.to_string())?
        };
        let mut drained = Vec::new();
        for lane in [true, false] {
            let processor = if lane {
                processor().with_ledger(std::sync::Arc::new(MemoryLedger::new()))
            } else {
                Processor::new(RecordingQueue::default(), {
                    let mut processor_config = ProcessorConfig::default();
                    processor_config.dlq_url = Some(DLQ.to_owned());
                    processor_config.deadline_margin = Duration::from_secs(2);
                    processor_config
                })
            };
            let processor = &processor;
            let handler = &Brownout {
                downstream: &downstream,
                first_tried: Mutex::default(),
            };
            let mut poller =
                KafkaPoller::new(&client, &broker.address, "orders", 1, drain_mapping.clone())
                    .await
                    .map_err(|e| e.to_string())?;
            let started = Instant::now();
            let (mut invocations, mut committed) = (0, 0);
            while let Some(poll) = poller
                .poll(|event| async move {
                    let event =
                        KafkaEvent::from_slice(event.as_bytes()).map_err(|e| e.to_string())?;
                    let processed = processor
                        .process_kafka(handler, &event, FAR_FUTURE_MS)
                        .await
                        .map_err(|e| e.to_string())?;
                    serde_json::to_string(&processed.response).map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())?
            {
                invocations += 1;
                committed += poll.committed;
            }
            let elapsed = started.elapsed();
            assert_eq!(committed, DRAIN_RECORDS, "the partition drained");
            let to_lane = processor.queue().sent_to(LANE).len();
            drained.push((
                DRAIN_RECORDS as f64 / elapsed.as_secs_f64(),
                invocations,
                to_lane,
            ));
        }
        let (with_lane, with_invocations, to_lane) = drained[0];
        let (without_lane, without_invocations, _) = drained[1];
        assert_eq!(
            to_lane,
            DRAIN_RECORDS / FAIL_EVERY,
            "the failing 1% in the lane"
        );
        Ok(Drain {
            with_lane,
            without_lane,
            invocations: (with_invocations, without_invocations),
            to_lane,
        })
    })
}
