//! The DynamoDB Streams soak, on moto through the real SDK: a table's changes (inserts and
//! updates of many items, some of them poison) read by the stand-in for Lambda's mapping
//! ([`crate::stream_poller`]) while the downstream has seeded outages, changes fail transiently a
//! seeded number of times and invocations fail as a whole after their effects (a crash, a
//! timeout: Lambda retries the batch). Then the poison is fixed and the DLQ redriven through a
//! queue the same function reads. The invariant: every change takes effect exactly once, the
//! changes of each item in the stream's order, none lost, no batch discarded.
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{Context, LambdaEvent};
use redrive::config::ReprocessSettings;
use redrive::idempotency::{Idempotent, KeyFrom, MemoryStore};
use redrive::lambda::Bytes;
use redrive::port::{Clock, SystemClock};
use redrive::reprocess::{ReprocessCommand, Reprocessor};
use redrive::{
    Message, Processor, ProcessorConfig, QueuePort, RecordError, RecordHandler, SqsQueue,
};

use crate::mapping::ShippedMapping;
use crate::poller::Poller;
use crate::provision::{queue_arn, QueuePair};
use crate::stream_poller::StreamPoller;
use crate::Error;

/// A run's size and seed.
#[derive(Debug, Clone)]
pub struct StreamSoakConfig {
    /// Changes written to the table (an insert per item, then updates).
    pub changes: usize,
    /// Items the changes are spread over.
    pub items: usize,
    /// Seed of every injected fault.
    pub seed: u64,
}

/// What a run counted.
#[derive(Debug, Default, Clone)]
pub struct StreamSoakReport {
    pub changes: usize,
    /// Changes whose effect happened exactly once, from the stream or after the redrive.
    pub once: usize,
    /// Changes whose effect happened more than once.
    pub twice: usize,
    /// Changes with no effect at the end.
    pub lost: usize,
    /// Changes dead-lettered (poison), then redriven.
    pub dead_lettered: usize,
    /// Records Lambda would have discarded after its last retry (on-failure records).
    pub discarded: usize,
    /// Items whose changes from the stream took effect out of the stream's order.
    pub out_of_order: usize,
    /// Invocations, and those that failed as a whole or stopped at a failed record.
    pub invocations: usize,
    pub whole_batch_failures: usize,
    pub stopped_batches: usize,
}

impl StreamSoakReport {
    /// The invariant.
    pub fn holds(&self) -> bool {
        self.once == self.changes
            && self.twice == 0
            && self.lost == 0
            && self.discarded == 0
            && self.out_of_order == 0
    }
}

impl fmt::Display for StreamSoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "changes {}: once {}, twice {}, lost {}, dead-lettered then redriven {}, discarded {}, \
             items out of order {}; invocations {} (failed whole {}, stopped at a record {}): {}",
            self.changes,
            self.once,
            self.twice,
            self.lost,
            self.dead_lettered,
            self.discarded,
            self.out_of_order,
            self.invocations,
            self.whole_batch_failures,
            self.stopped_batches,
            if self.holds() { "HOLDS" } else { "BROKEN" }
        )
    }
}

/// Seeded dice: SplitMix64 of the seed and what is being decided, so that a decision does not
/// depend on the order the run asks for it.
pub(crate) fn dice(seed: u64, what: &str) -> u64 {
    let mut x = seed
        ^ what.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A downstream's seeded faults, as the stream and Kafka soaks inject them: poison until healed,
/// outages, and records that fail transiently a seeded number of tries.
pub(crate) struct Faults {
    /// The seed of the faults, and of the handlers' own dice.
    pub(crate) seed: u64,
    healed: AtomicBool,
    down: AtomicBool,
    tries: Mutex<HashMap<String, u64>>,
}

impl Faults {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            seed,
            healed: AtomicBool::new(false),
            down: AtomicBool::new(false),
            tries: Mutex::default(),
        }
    }

    /// What a try of `what` meets: a permanent failure when `poison` (until healed), the
    /// outage, or one of its first `flaky_tries` tries failing transiently.
    pub(crate) fn meet(
        &self,
        what: &str,
        poison: bool,
        flaky_tries: u64,
    ) -> Result<(), RecordError> {
        if poison && !self.healed.load(Ordering::SeqCst) {
            return Err(RecordError::permanent("poison", what.to_owned()));
        }
        if self.is_down() {
            return Err(RecordError::transient(
                "downstream_down",
                "the downstream is down",
            ));
        }
        let tries = {
            let mut tries = self.tries.lock().unwrap();
            let count = tries.entry(what.to_owned()).or_default();
            *count += 1;
            *count
        };
        if tries <= flaky_tries {
            return Err(RecordError::transient("flaky", what.to_owned()));
        }
        Ok(())
    }

    /// Rolls round `round`'s outage: one starts on one round in ten and lasts until one in three
    /// ends it.
    pub(crate) fn roll_outage(&self, round: u64) {
        let roll = dice(self.seed, &format!("outage {round}")) % 30;
        let down = if self.is_down() { roll >= 10 } else { roll < 3 };
        self.down.store(down, Ordering::SeqCst);
    }

    pub(crate) fn is_healed(&self) -> bool {
        self.healed.load(Ordering::SeqCst)
    }

    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    /// The poison is fixed and the downstream back.
    pub(crate) fn heal(&self) {
        self.healed.store(true, Ordering::SeqCst);
        self.down.store(false, Ordering::SeqCst);
    }
}

/// The downstream of the soak: applies a change (by its sequence number) unless its faults say
/// otherwise.
struct Changes {
    faults: Faults,
    /// Each change applied: (item, sequence number), in the order applied.
    applied: Mutex<Vec<(String, String)>>,
}

impl RecordHandler for Changes {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let record: serde_json::Value = message.json()?;
        let sequence = record["dynamodb"]["SequenceNumber"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let item = record["dynamodb"]["Keys"]["id"]["S"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let seed = self.faults.seed;
        self.faults.meet(
            &format!("change {sequence}"),
            dice(seed, &sequence).is_multiple_of(50),
            dice(seed, &format!("flaky {sequence}")) % 4 / 3,
        )?;
        self.applied.lock().unwrap().push((item, sequence));
        Ok(())
    }
}

/// Invokes the function in process as Lambda would, with 30 seconds to go.
pub(crate) async fn invoke<Q: QueuePort, H: RecordHandler>(
    processor: &Processor<Q>,
    handler: &H,
    event: String,
) -> Result<String, String> {
    invoke_with(processor, handler, event, Duration::from_secs(30)).await
}

/// [`invoke`] with `left` to go.
pub(crate) async fn invoke_with<Q: QueuePort, H: RecordHandler>(
    processor: &Processor<Q>,
    handler: &H,
    event: String,
    left: Duration,
) -> Result<String, String> {
    let mut context = Context::default();
    context.deadline = SystemClock.now_ms() + left.as_millis() as u64;
    let processed = redrive::lambda::handle_event(
        LambdaEvent::new(Bytes::from(event), context),
        processor,
        handler,
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(serde_json::to_string(&processed.response).expect("a response serialises"))
}

/// Runs the soak on the emulator in `AWS_ENDPOINT_URL`, its names prefixed with `prefix`.
pub async fn run_on_moto(
    prefix: &str,
    config: &StreamSoakConfig,
) -> Result<StreamSoakReport, Error> {
    let sdk = redrive::aws::sdk_config_from_env();
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let emulator = |e: String| Error::Emulator(e);
    let table = format!("{prefix}-changes");
    let stream_arn = crate::provision::streamed_table(&dynamodb, &table, "id").await?;
    let mut queue = QueuePair {
        key: "replay".into(),
        fifo: false,
        ..QueuePair::default()
    };
    for (name, url) in [("replay", &mut queue.url), ("dlq", &mut queue.dlq_url)] {
        *url = sqs
            .create_queue()
            .queue_name(format!("{prefix}-{name}"))
            .send()
            .await
            .map_err(Error::sdk)?
            .queue_url
            .unwrap_or_default();
    }
    queue.arn = queue_arn(&sqs, &queue.url).await?;
    queue.dlq_arn = queue_arn(&sqs, &queue.dlq_url).await?;

    // Inserts first, then updates spread over the items; each change carries its number.
    for n in 0..config.changes {
        let item = format!(
            "i-{}",
            if n < config.items {
                n
            } else {
                dice(config.seed, &format!("item {n}")) as usize % config.items
            }
        );
        dynamodb
            .put_item()
            .table_name(&table)
            .item("id", AttributeValue::S(item))
            .item("change", AttributeValue::N(n.to_string()))
            .send()
            .await
            .map_err(Error::sdk)?;
    }

    let changes = Changes {
        faults: Faults::new(config.seed),
        applied: Mutex::default(),
    };
    // A batch Lambda retries after a crash runs its changes again: the guard keeps their effects
    // to one, keyed by the sequence number (a dead letter carries it as its origin id).
    let handler = Idempotent::new(
        &changes,
        MemoryStore::new(config.changes * 2),
        KeyFrom::MessageId,
    );
    let processor = Processor::new(SqsQueue::with_client(sqs.clone()), {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = Some(queue.dlq_url.clone());
        processor_config.source_queue_url = Some(queue.url.clone());
        processor_config
    });
    // The DynamoDB stream mapping Terraform ships (infra/examples/table-stream).
    let rendering =
        crate::topology::rendering("table-stream").map_err(|e| Error::Emulator(e.to_string()))?;
    let mapping = ShippedMapping::shipped(
        &rendering,
        "module.orders_changes.aws_lambda_event_source_mapping.stream",
        Some(queue.dlq_url.clone()),
    )?;
    let mut poller = StreamPoller::new(&sdk, &stream_arn, mapping).await?;
    let mut report = StreamSoakReport {
        changes: config.changes,
        ..StreamSoakReport::default()
    };
    let started = Instant::now();
    let mut round = 0_u64;
    loop {
        round += 1;
        changes.faults.roll_outage(round);
        let crash = dice(config.seed, &format!("crash {round}")).is_multiple_of(20);
        let polls = poller
            .poll(|event| async {
                let answer = invoke(&processor, &handler, event).await;
                // The function crashed (or timed out) after its effects: Lambda saw an error.
                if crash {
                    Err("injected: the invocation failed after its effects".to_owned())
                } else {
                    answer
                }
            })
            .await?;
        if polls.is_empty() && poller.pending() == 0 && !changes.faults.is_down() {
            break;
        }
        for poll in &polls {
            report.invocations += 1;
            report.whole_batch_failures += usize::from(poll.whole_batch_failed);
            report.stopped_batches +=
                usize::from(!poll.whole_batch_failed && poll.checkpointed < poll.invoked);
            report.discarded += poll.discarded;
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(emulator(format!(
                "the stream did not drain in 10 minutes: {report}"
            )));
        }
    }

    // Per item, the changes the stream delivered took effect in the stream's order.
    let from_stream = changes.applied.lock().unwrap().clone();
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    let mut out_of_order = std::collections::BTreeSet::new();
    let order = |sequence: &str| (sequence.len(), sequence.to_owned());
    for (item, sequence) in &from_stream {
        if let Some(previous) = last.insert(item, sequence) {
            if order(previous) > order(sequence) {
                out_of_order.insert(item.clone());
            }
        }
    }
    report.out_of_order = out_of_order.len();

    // The poison is fixed: the DLQ's dead letters go through the queue the same function reads.
    changes.faults.heal();
    report.dead_lettered = redrive_and_drain(
        &sqs,
        &queue.dlq_url,
        &queue,
        &processor,
        &handler,
        // The replay queue's visibility timeout (SQS's default, 30 s), and a second.
        Duration::from_secs(31),
    )
    .await?;

    let mut effects: HashMap<String, usize> = HashMap::new();
    for (_, sequence) in changes.applied.lock().unwrap().iter() {
        *effects.entry(sequence.clone()).or_default() += 1;
    }
    report.once = effects.values().filter(|&&n| n == 1).count();
    report.twice = effects.values().filter(|&&n| n > 1).count();
    report.lost = config.changes.saturating_sub(effects.len());
    Ok(report)
}

/// Redrives every dead letter of `dlq_url` into `queue` (whatever origin it names) and drains
/// `queue` through the function, for two minutes at most, or until nothing has been delivered for
/// `settle` with nothing delayed (what is left waits on a hold): the dead letters redriven.
pub(crate) async fn redrive_and_drain<Q: QueuePort, H: RecordHandler>(
    sqs: &aws_sdk_sqs::Client,
    dlq_url: &str,
    queue: &QueuePair,
    processor: &Processor<Q>,
    handler: &H,
    settle: Duration,
) -> Result<usize, Error> {
    let emulator = |e: String| Error::Emulator(e);
    let settings = ReprocessSettings::from_lookup(["REDRIVE_REPROCESS_AFTER"], |name| {
        (name == "REDRIVE_REPROCESS_AFTER").then(|| "0s".to_owned())
    })
    .map_err(|e| emulator(e.to_string()))?;
    let plan = ReprocessCommand {
        source: Some(dlq_url.to_owned()),
        destination: Some(queue.arn.clone()),
        force: true,
        ..ReprocessCommand::default()
    }
    .plan(&settings)
    .map_err(|e| emulator(e.to_string()))?;
    let summary = Reprocessor::new(SqsQueue::with_client(sqs.clone()), &settings)
        .run(&plan, None, |_| {})
        .await
        .map_err(|e| emulator(e.to_string()))?;
    let replay = Poller::new(sqs.clone(), queue, 10, Duration::ZERO);
    let drained = Instant::now();
    let mut delivered = Instant::now();
    while drained.elapsed() < Duration::from_secs(120) {
        // Boxed: the invocation's future nests too deeply to sit inside the poll's.
        let poll = replay
            .poll(Duration::from_secs(1), |event| {
                Box::pin(invoke(processor, handler, event))
            })
            .await?;
        if poll.received > 0 {
            delivered = Instant::now();
        }
        let (visible, in_flight, delayed) = crate::provision::depth(sqs, &queue.url).await?;
        if poll.received == 0
            && (visible + in_flight + delayed == 0
                || (delayed == 0 && delivered.elapsed() > settle))
        {
            break;
        }
    }
    Ok(summary.reprocessed as usize)
}
