//! A local stand-in for Lambda's Kafka event source mapping (self-managed Kafka), on a
//! Kafka-compatible broker through `rskafka`: each partition read from its committed offset; one
//! batch holds up to `batch_size` records of every partition with some, grouped by
//! `<topic>-<partition>` as Lambda groups them (Lambda developer guide, "Using Lambda with Amazon
//! MSK", the example event); a partition's offset is committed past its batch unless the partial
//! batch response names one of its records (`{"partition": "<topic>-<partition>", "offset": n}`),
//! from which it is delivered again; a function error commits nothing, and with bisection halves
//! the batch of each partition in it (a split does not count as a retry). A partition whose
//! records come back more than `maximum_retry_attempts` times in a row, or once one of them is
//! older than `maximum_record_age`, has them discarded: its offset moves past the batch (Lambda
//! developer guide, "Configuring error handling controls for Kafka event sources"; the on-failure
//! record, metadata only, is not played). The settings are the ones Terraform ships
//! ([`ShippedMapping::shipped`]). Offsets are kept here, as the mapping keeps them in its consumer
//! group. Also the broker: `tansu`, started on a free port and stopped on drop.
use std::collections::BTreeMap;
use std::future::Future;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rskafka::client::partition::{PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use serde_json::{json, Value};

use crate::mapping::ShippedMapping;
use crate::Error;

/// A `tansu` broker on loopback, its storage in memory; stopped when dropped.
pub struct Broker {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub address: String,
}

impl Broker {
    /// Where the project's files install `tansu` (`make` builds it into `.cache/tools/bin`), or
    /// `TANSU`.
    pub fn binary() -> Option<PathBuf> {
        let path = std::env::var_os("TANSU")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/tools/bin/tansu")
            });
        path.exists().then_some(path)
    }

    /// Starts the broker on a free port and waits until it listens.
    pub fn start(binary: &std::path::Path) -> Result<Self, Error> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|e| Error::Emulator(format!("no free port: {e}")))?
            .port();
        let address = format!("127.0.0.1:{port}");
        let url = format!("tcp://{address}");
        let child = Command::new(binary)
            .args(["broker", "--storage-engine", "memory://tansu/"])
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Emulator(format!("{}: {e}", binary.display())))?;
        let broker = Self { child, address };
        let started = Instant::now();
        while TcpStream::connect(&broker.address).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(Error::Emulator(format!(
                    "tansu did not listen on {}",
                    broker.address
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(broker)
    }

    /// A client of the broker.
    pub async fn client(&self) -> Result<Client, Error> {
        ClientBuilder::new(vec![self.address.clone()])
            .build()
            .await
            .map_err(|e| Error::Emulator(format!("Kafka client: {e}")))
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one invocation did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KafkaPoll {
    /// Records in the batch.
    pub invoked: usize,
    /// Records the committed offsets moved past.
    pub committed: usize,
    /// Partitions the response gave back.
    pub given_back: usize,
    /// The function failed as a whole.
    pub whole_batch_failed: bool,
    /// Records discarded: past the retries or the record age.
    pub discarded: usize,
}

struct Partition {
    client: PartitionClient,
    committed: i64,
    /// Times in a row the records from `committed` came back.
    retries: u32,
    batch_limit: usize,
}

/// Plays the mapping of one topic.
pub struct KafkaPoller {
    topic: String,
    bootstrap: String,
    mapping: ShippedMapping,
    partitions: Vec<Partition>,
}

impl KafkaPoller {
    /// Reads every partition of `topic` from its start, in batches of the mapping's size per
    /// partition.
    pub async fn new(
        client: &Client,
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        mapping: ShippedMapping,
    ) -> Result<Self, Error> {
        let mut clients = Vec::new();
        for partition in 0..partitions {
            let client = client
                .partition_client(topic, partition, UnknownTopicHandling::Retry)
                .await
                .map_err(|e| Error::Emulator(format!("partition {partition}: {e}")))?;
            clients.push(Partition {
                client,
                committed: 0,
                retries: 0,
                batch_limit: mapping.batch_size.max(1),
            });
        }
        Ok(Self {
            topic: topic.to_owned(),
            bootstrap: bootstrap.to_owned(),
            mapping,
            partitions: clients,
        })
    }

    /// Fetches a batch past the committed offsets and invokes `invoke` with its event; `None`
    /// when no partition has a record to deliver.
    pub async fn poll<F, Fut>(&mut self, invoke: F) -> Result<Option<KafkaPoll>, Error>
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<String, String>>,
    {
        let mut records: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        // Each partition's batch: (offset, timestamp in ms) of its records.
        let mut batches: BTreeMap<usize, Vec<(i64, i64)>> = BTreeMap::new();
        for (index, partition) in self.partitions.iter().enumerate() {
            let fetched = fetch_from(&partition.client, partition.committed).await?;
            let batch: Vec<Value> = fetched
                .into_iter()
                .filter(|r| r.offset >= partition.committed)
                .take(partition.batch_limit)
                .map(|r| {
                    batches
                        .entry(index)
                        .or_default()
                        .push((r.offset, r.record.timestamp.timestamp_millis()));
                    lambda_record(&self.topic, partition.client.partition(), &r)
                })
                .collect();
            if !batch.is_empty() {
                records.insert(
                    format!("{}-{}", self.topic, partition.client.partition()),
                    batch,
                );
            }
        }
        if records.is_empty() {
            return Ok(None);
        }
        let invoked = records.values().map(Vec::len).sum();
        let event = json!({
            "eventSource": "SelfManagedKafka",
            "bootstrapServers": self.bootstrap,
            "records": records,
        });
        let mut poll = KafkaPoll {
            invoked,
            ..KafkaPoll::default()
        };
        let given_back = match invoke(event.to_string()).await.and_then(|r| given_back(&r)) {
            Ok(given_back) => Some(given_back),
            Err(error) => {
                tracing::warn!(%error, "Kafka batch failed as a whole: nothing committed");
                poll.whole_batch_failed = true;
                None
            }
        };
        for (index, batch) in batches {
            let partition = &mut self.partitions[index];
            let name = format!("{}-{}", self.topic, partition.client.partition());
            let Some(&(last, _)) = batch.last() else {
                continue;
            };
            let back_from = match &given_back {
                None if self.mapping.bisect_batch_on_function_error && batch.len() > 1 => {
                    partition.batch_limit = batch.len() / 2;
                    continue;
                }
                None => partition.committed,
                Some(given_back) => match given_back.get(&name) {
                    Some(&offset) => {
                        poll.given_back += 1;
                        offset
                    }
                    None => last + 1,
                },
            };
            if back_from > partition.committed {
                poll.committed += usize::try_from(back_from - partition.committed).unwrap_or(0);
                partition.committed = back_from;
                partition.retries = 0;
            }
            if back_from > last {
                partition.batch_limit = self.mapping.batch_size.max(1);
                continue;
            }
            partition.retries += 1;
            let oldest = batch
                .iter()
                .filter(|&&(offset, _)| offset >= back_from)
                .map(|&(_, timestamp)| age_of(timestamp))
                .max()
                .unwrap_or_default();
            if !self.mapping.discards(partition.retries, oldest) {
                continue;
            }
            tracing::warn!(partition = %name, from = back_from, to = last, "Kafka records discarded");
            poll.discarded += usize::try_from(last + 1 - back_from).unwrap_or(0);
            partition.committed = last + 1;
            partition.retries = 0;
            partition.batch_limit = self.mapping.batch_size.max(1);
        }
        Ok(Some(poll))
    }
}

/// How long ago a record stamped `timestamp` (ms since the epoch) was written.
fn age_of(timestamp: i64) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    Duration::from_millis(u64::try_from(now - timestamp).unwrap_or(0))
}

/// The records of `client`'s partition from `offset` on. Asked for an offset inside a record batch,
/// `tansu` 0.6 answers from the next batch (Kafka answers with the batch that holds it, and the
/// client skips what is before): the records between would never be delivered, so the fetch steps
/// back, twice as far each time, until the answer holds `offset`.
async fn fetch_from(
    client: &PartitionClient,
    offset: i64,
) -> Result<Vec<rskafka::record::RecordAndOffset>, Error> {
    let mut from = offset;
    let mut step = 1;
    loop {
        let (fetched, high_watermark) = client
            .fetch_records(from, 1..10_000_000, 10)
            .await
            .map_err(|e| Error::Emulator(format!("fetch: {e}")))?;
        let holds_offset = fetched.first().is_none_or(|first| first.offset <= offset);
        if (holds_offset && (!fetched.is_empty() || offset >= high_watermark)) || from == 0 {
            return Ok(fetched);
        }
        from = (offset - step).max(0);
        step *= 2;
    }
}

/// Each partition the response names, with the lowest offset named for it.
fn given_back(response: &str) -> Result<BTreeMap<String, i64>, String> {
    let value: Value =
        serde_json::from_str(response).map_err(|e| format!("response is not JSON: {e}"))?;
    let mut given_back = BTreeMap::new();
    for failure in value["batchItemFailures"].as_array().into_iter().flatten() {
        let identifier = &failure["itemIdentifier"];
        let (Some(partition), Some(offset)) = (
            identifier["partition"].as_str(),
            identifier["offset"].as_i64(),
        ) else {
            return Err(format!(
                "itemIdentifier {identifier} is not a partition and an offset"
            ));
        };
        let lowest = given_back.entry(partition.to_owned()).or_insert(offset);
        *lowest = (*lowest).min(offset);
    }
    Ok(given_back)
}

/// A record as Lambda puts it in the event: key and value base64, headers as lists of bytes.
fn lambda_record(topic: &str, partition: i32, record: &rskafka::record::RecordAndOffset) -> Value {
    let headers: Vec<Value> = record
        .record
        .headers
        .iter()
        .map(|(name, value)| json!({ name: value }))
        .collect();
    json!({
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestamp": record.record.timestamp.timestamp_millis(),
        "timestampType": "CREATE_TIME",
        "key": record.record.key.as_ref().map(|key| BASE64.encode(key)),
        "value": record.record.value.as_ref().map(|value| BASE64.encode(value)),
        "headers": headers,
    })
}
