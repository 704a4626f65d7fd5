//! A local stand-in for Lambda's DynamoDB Streams event source mapping, as the Lambda developer
//! guide describes it ("Lambda parameters for Amazon DynamoDB event source mappings", "Configuring
//! partial batch response with DynamoDB and Lambda", "Retaining discarded records for a DynamoDB
//! event source"): each shard read in order from its trim horizon; a batch of at most
//! `batch_size` records; a partial batch response's sequence number is the checkpoint, and the
//! rest of the batch is retried from it; a function error (or an identifier not in the batch)
//! retries the whole batch, split in two with bisection (a split does not count as a retry);
//! past `maximum_retry_attempts` retries, or once a record of it is older than
//! `maximum_record_age`, the batch is discarded and its on-failure record (shard, sequence range,
//! condition) sent to the destination queue. The settings are the ones Terraform ships
//! ([`ShippedMapping::shipped`]).
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodbstreams::types::{AttributeValue, Record, ShardIteratorType};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::mapping::ShippedMapping;
use crate::Error;

/// What one invocation did to a shard.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StreamPoll {
    /// Records in the batch.
    pub invoked: usize,
    /// Records the checkpoint moved past because the function was done with them.
    pub checkpointed: usize,
    /// The function failed as a whole (an error, or a response Lambda cannot read).
    pub whole_batch_failed: bool,
    /// Records discarded after the last retry (their on-failure record sent).
    pub discarded: usize,
}

/// One shard: where the next read starts, the records read but not yet checkpointed past, and
/// the failing batch's retries.
#[derive(Debug, Default)]
struct Shard {
    iterator: Option<String>,
    pending: VecDeque<Value>,
    retries: u32,
    batch_limit: usize,
}

/// Plays the mapping of one DynamoDB stream.
pub struct StreamPoller {
    streams: aws_sdk_dynamodbstreams::Client,
    sqs: aws_sdk_sqs::Client,
    stream_arn: String,
    mapping: ShippedMapping,
    shards: BTreeMap<String, Shard>,
}

impl StreamPoller {
    /// Opens every shard of `stream_arn` at its trim horizon, with clients for `config`'s
    /// endpoint.
    pub async fn new(
        config: &aws_types::SdkConfig,
        stream_arn: &str,
        mapping: ShippedMapping,
    ) -> Result<Self, Error> {
        let streams = aws_sdk_dynamodbstreams::Client::new(config);
        let sqs = aws_sdk_sqs::Client::new(config);
        let description = streams
            .describe_stream()
            .stream_arn(stream_arn)
            .send()
            .await
            .map_err(Error::sdk)?;
        let mut shards = BTreeMap::new();
        let listed = description
            .stream_description()
            .map(|d| d.shards())
            .unwrap_or_default();
        for shard in listed {
            let shard_id = shard.shard_id().unwrap_or_default().to_owned();
            let iterator = streams
                .get_shard_iterator()
                .stream_arn(stream_arn)
                .shard_id(&shard_id)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .map_err(Error::sdk)?
                .shard_iterator;
            let batch_limit = mapping.batch_size.max(1);
            shards.insert(
                shard_id,
                Shard {
                    iterator,
                    batch_limit,
                    ..Shard::default()
                },
            );
        }
        Ok(Self {
            streams,
            sqs,
            stream_arn: stream_arn.to_owned(),
            mapping,
            shards,
        })
    }

    /// Records read from the stream that the checkpoint has not passed yet.
    pub fn pending(&self) -> usize {
        self.shards.values().map(|shard| shard.pending.len()).sum()
    }

    /// Reads what each shard has and invokes one batch per shard with records, one shard after
    /// the other. `invoke` gets the event JSON and returns the function's response, or `Err` for
    /// a function error.
    pub async fn poll<F, Fut>(&mut self, mut invoke: F) -> Result<Vec<StreamPoll>, Error>
    where
        F: FnMut(String) -> Fut,
        Fut: Future<Output = Result<String, String>>,
    {
        let ids: Vec<String> = self.shards.keys().cloned().collect();
        let mut polls = Vec::new();
        for shard_id in ids {
            self.read(&shard_id).await?;
            let shard = &self.shards[&shard_id];
            let size = shard.batch_limit.min(shard.pending.len());
            if size == 0 {
                continue;
            }
            let batch: Vec<Value> = shard.pending.iter().take(size).cloned().collect();
            let event = json!({ "Records": batch }).to_string();
            let answer = invoke(event).await;
            polls.push(self.settle(&shard_id, &batch, answer).await?);
        }
        Ok(polls)
    }

    /// Appends what the shard's iterator gives to its pending records.
    async fn read(&mut self, shard_id: &str) -> Result<(), Error> {
        let region = self
            .stream_arn
            .split(':')
            .nth(3)
            .unwrap_or("us-east-1")
            .to_owned();
        let shard = self.shards.get_mut(shard_id).expect("a listed shard");
        let Some(iterator) = shard.iterator.take() else {
            return Ok(());
        };
        let output = self
            .streams
            .get_records()
            .shard_iterator(iterator)
            .send()
            .await
            .map_err(Error::sdk)?;
        shard.pending.extend(
            output
                .records()
                .iter()
                .map(|record| lambda_record(record, &self.stream_arn, &region)),
        );
        shard.iterator = output.next_shard_iterator;
        Ok(())
    }

    /// Moves the shard's checkpoint by the function's answer; retries, splits or discards.
    async fn settle(
        &mut self,
        shard_id: &str,
        batch: &[Value],
        answer: Result<String, String>,
    ) -> Result<StreamPoll, Error> {
        let mut poll = StreamPoll {
            invoked: batch.len(),
            ..StreamPoll::default()
        };
        let done = answer.and_then(|response| checkpoint(&response, batch));
        let shard = self.shards.get_mut(shard_id).expect("a listed shard");
        let failed_from = match done {
            Ok(None) => {
                shard.pending.drain(..batch.len());
                shard.retries = 0;
                shard.batch_limit = self.mapping.batch_size.max(1);
                poll.checkpointed = batch.len();
                return Ok(poll);
            }
            Ok(Some(index)) => {
                shard.pending.drain(..index);
                poll.checkpointed = index;
                index
            }
            Err(error) => {
                tracing::warn!(shard_id, %error, "stream batch failed as a whole");
                poll.whole_batch_failed = true;
                if self.mapping.bisect_batch_on_function_error && batch.len() > 1 {
                    shard.batch_limit = batch.len() / 2;
                    return Ok(poll);
                }
                0
            }
        };
        shard.retries += 1;
        let oldest = batch[failed_from..]
            .iter()
            .map(record_age)
            .max()
            .unwrap_or_default();
        if !self.mapping.discards(shard.retries, oldest) {
            return Ok(poll);
        }
        let too_old = self
            .mapping
            .maximum_record_age
            .is_some_and(|age| oldest > age);
        let discarded: Vec<Value> = shard.pending.drain(..batch.len() - failed_from).collect();
        let invokes = shard.retries;
        shard.retries = 0;
        shard.batch_limit = self.mapping.batch_size.max(1);
        poll.discarded = discarded.len();
        if let Some(url) = &self.mapping.on_failure_queue_url {
            let condition = if too_old {
                "RecordAgeExceeded"
            } else {
                "RetryAttemptsExhausted"
            };
            let record =
                on_failure_record(shard_id, &self.stream_arn, &discarded, (condition, invokes));
            self.sqs
                .send_message()
                .queue_url(url)
                .message_body(record.to_string())
                .send()
                .await
                .map_err(Error::sdk)?;
        }
        Ok(poll)
    }
}

/// Where the partial batch response puts the checkpoint: `None` when the batch is done, the
/// index of the record named otherwise (the lowest, if several are). An empty or unknown
/// identifier fails the whole batch, as it does in Lambda.
fn checkpoint(response: &str, batch: &[Value]) -> Result<Option<usize>, String> {
    let value: Value =
        serde_json::from_str(response).map_err(|e| format!("response is not JSON: {e}"))?;
    let failures = match value.get("batchItemFailures") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(failures)) => failures,
        Some(_) => return Err("batchItemFailures is not a list".to_owned()),
    };
    let mut lowest = None;
    for failure in failures {
        let id = failure
            .get("itemIdentifier")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let index = batch
            .iter()
            .position(|record| record["dynamodb"]["SequenceNumber"].as_str() == Some(id))
            .filter(|_| !id.is_empty())
            .ok_or_else(|| format!("itemIdentifier {id:?} is empty or not in the batch"))?;
        lowest = Some(lowest.map_or(index, |low: usize| low.min(index)));
    }
    Ok(lowest)
}

/// How long ago the record was written to the stream (its `ApproximateCreationDateTime`; a
/// record without one counts as new).
fn record_age(record: &Value) -> Duration {
    let Some(created) = record["dynamodb"]["ApproximateCreationDateTime"].as_f64() else {
        return Duration::ZERO;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    Duration::from_secs_f64((now - created).max(0.0))
}

/// A stream record as Lambda puts it in the event.
fn lambda_record(record: &Record, stream_arn: &str, region: &str) -> Value {
    let change = record.dynamodb();
    let mut dynamodb = Map::new();
    if let Some(change) = change {
        if let Some(time) = change.approximate_creation_date_time() {
            dynamodb.insert(
                "ApproximateCreationDateTime".into(),
                json!(time.as_secs_f64()),
            );
        }
        for (name, image) in [
            ("Keys", change.keys()),
            ("NewImage", change.new_image()),
            ("OldImage", change.old_image()),
        ] {
            if let Some(image) = image {
                dynamodb.insert(name.into(), item(image));
            }
        }
        dynamodb.insert("SequenceNumber".into(), json!(change.sequence_number()));
        dynamodb.insert("SizeBytes".into(), json!(change.size_bytes()));
        dynamodb.insert(
            "StreamViewType".into(),
            json!(change.stream_view_type().map(|view| view.as_str())),
        );
    }
    json!({
        "eventID": record.event_id(),
        "eventName": record.event_name().map(|name| name.as_str()),
        "eventVersion": record.event_version(),
        "eventSource": "aws:dynamodb",
        "awsRegion": region,
        "dynamodb": dynamodb,
        "eventSourceARN": stream_arn,
    })
}

/// An item as DynamoDB JSON.
fn item(attributes: &std::collections::HashMap<String, AttributeValue>) -> Value {
    Value::Object(
        attributes
            .iter()
            .map(|(name, value)| (name.clone(), attribute(value)))
            .collect(),
    )
}

fn attribute(value: &AttributeValue) -> Value {
    let binary = |blob: &aws_sdk_dynamodbstreams::primitives::Blob| BASE64.encode(blob.as_ref());
    match value {
        AttributeValue::S(text) => json!({ "S": text }),
        AttributeValue::N(number) => json!({ "N": number }),
        AttributeValue::B(blob) => json!({ "B": binary(blob) }),
        AttributeValue::Ss(texts) => json!({ "SS": texts }),
        AttributeValue::Ns(numbers) => json!({ "NS": numbers }),
        AttributeValue::Bs(blobs) => json!({ "BS": blobs.iter().map(binary).collect::<Vec<_>>() }),
        AttributeValue::M(map) => json!({ "M": item(map) }),
        AttributeValue::L(list) => json!({ "L": list.iter().map(attribute).collect::<Vec<_>>() }),
        AttributeValue::Null(is_null) => json!({ "NULL": is_null }),
        AttributeValue::Bool(boolean) => json!({ "BOOL": boolean }),
        other => json!({ "unknown": format!("{other:?}") }),
    }
}

/// The record Lambda sends to the on-failure destination for a discarded batch (Lambda
/// developer guide, "Retaining discarded records for a DynamoDB event source"): where the
/// records are in the stream, not the records.
fn on_failure_record(
    shard_id: &str,
    stream_arn: &str,
    batch: &[Value],
    (condition, invokes): (&str, u32),
) -> Value {
    let sequence = |record: Option<&Value>| record.map(|r| r["dynamodb"]["SequenceNumber"].clone());
    json!({
        "version": "1.0",
        "requestContext": {
            "condition": condition,
            "approximateInvokeCount": invokes,
        },
        "responseContext": { "statusCode": 200, "functionError": "Unhandled" },
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": sequence(batch.first()),
            "endSequenceNumber": sequence(batch.last()),
            "batchSize": batch.len(),
            "streamArn": stream_arn,
        },
    })
}
