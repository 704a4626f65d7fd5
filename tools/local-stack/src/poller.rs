//! A local stand-in for Lambda's SQS event source mapping: long-polls a queue, builds the SQS
//! event exactly as Lambda does, invokes the function, and deletes what the partial batch response
//! does not list. A whole-batch error or timeout deletes nothing; given-back records reappear after
//! the visibility timeout.
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use aws_sdk_sqs::Client;
use serde_json::Value;

use crate::provision::QueuePair;
use crate::Error;

#[derive(Debug, Clone)]
pub struct Poller {
    client: Client,
    queue_url: String,
    queue_arn: String,
    region: String,
    batch_size: usize,
    window: Duration,
    /// One ReceiveMessage at a time from this poller and its clones. SQS hands a FIFO group's
    /// messages to one receive until they are deleted or visible again ("FIFO queue delivery
    /// logic in Amazon SQS"); moto 5.x checks the group's in-flight messages without a lock, so
    /// concurrent receives can each take a message of one group, which SQS never does.
    receiving: Arc<tokio::sync::Mutex<()>>,
}

/// What one poll did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Poll {
    pub received: usize,
    pub deleted: usize,
    /// Listed in the partial batch response, or part of a batch whose invocation failed.
    pub given_back: usize,
    pub whole_batch_failed: bool,
    /// SQS requests the poll made for a batch: the receives that delivered it and the deletes
    /// (a poll that found nothing counts none).
    pub requests: u32,
}

impl Poller {
    pub fn new(client: Client, queue: &QueuePair, batch_size: u32, window: Duration) -> Self {
        Self {
            client,
            queue_url: queue.url.clone(),
            queue_arn: queue.arn.clone(),
            region: queue
                .arn
                .split(':')
                .nth(3)
                .unwrap_or("us-east-1")
                .to_owned(),
            batch_size: batch_size.clamp(1, 10_000) as usize,
            window,
            receiving: Arc::default(),
        }
    }

    /// Records per batch at the most (the mapping's `batch_size`).
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Receives one batch (waiting up to `wait` for the first message, then up to the batching
    /// window for more), invokes `invoke` with the event JSON and deletes what its answer does not give back.
    /// `invoke` returns the function's response JSON, or `Err` for a function error or timeout.
    pub async fn poll<F, Fut>(&self, wait: Duration, invoke: F) -> Result<Poll, Error>
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<String, String>>,
    {
        let (messages, receives) = self.receive(wait).await?;
        if messages.is_empty() {
            return Ok(Poll::default());
        }
        let event = lambda_event(&messages, &self.queue_arn, &self.region);
        let mut poll = Poll {
            received: messages.len(),
            requests: receives,
            ..Poll::default()
        };
        let failed: Vec<String> = match invoke(event)
            .await
            .and_then(|response| failed_ids(&response, &messages))
        {
            Ok(ids) => ids,
            Err(error) => {
                tracing::warn!(%error, "whole batch failed: nothing deleted");
                poll.whole_batch_failed = true;
                poll.given_back = messages.len();
                return Ok(poll);
            }
        };
        let done: Vec<&Message> = messages
            .iter()
            .filter(|m| !failed.iter().any(|id| Some(id.as_str()) == m.message_id()))
            .collect();
        for chunk in done.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(m.receipt_handle().unwrap_or_default())
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Error::Emulator(e.to_string()))?;
            let output = self
                .client
                .delete_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(Error::sdk)?;
            poll.requests += 1;
            poll.deleted += output.successful().len();
        }
        poll.given_back = poll.received - poll.deleted;
        Ok(poll)
    }

    /// One batch, and the ReceiveMessage calls it took.
    async fn receive(&self, wait: Duration) -> Result<(Vec<Message>, u32), Error> {
        let started = Instant::now();
        let mut messages: Vec<Message> = Vec::new();
        let mut receives = 0;
        loop {
            receives += 1;
            let left = self.batch_size - messages.len();
            let wait_seconds = if messages.is_empty() {
                wait
            } else {
                self.window.saturating_sub(started.elapsed())
            };
            let turn = self.receiving.lock().await;
            let output = self
                .client
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(left.min(10) as i32)
                .wait_time_seconds(wait_seconds.as_secs().min(20) as i32)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await
                .map_err(Error::sdk)?;
            drop(turn);
            let received = output.messages.unwrap_or_default();
            let got_none = received.is_empty();
            messages.extend(received);
            if messages.len() >= self.batch_size
                || (got_none && !messages.is_empty())
                || started.elapsed() >= self.window.max(wait)
                || (messages.is_empty() && got_none)
            {
                return Ok((messages, receives));
            }
        }
    }
}

/// The ids listed in a partial batch response. An empty or unknown identifier fails the whole
/// batch, as it does in Lambda.
fn failed_ids(response: &str, messages: &[Message]) -> Result<Vec<String>, String> {
    let value: Value =
        serde_json::from_str(response).map_err(|e| format!("response is not JSON: {e}"))?;
    let Some(failures) = value.get("batchItemFailures") else {
        return Ok(Vec::new());
    };
    let failures = failures
        .as_array()
        .ok_or("batchItemFailures is not a list")?;
    failures
        .iter()
        .map(|failure| {
            let id = failure
                .get("itemIdentifier")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if messages.iter().any(|m| m.message_id() == Some(id)) {
                Ok(id.to_owned())
            } else {
                Err(format!(
                    "itemIdentifier {id:?} is empty or not in the batch: the whole batch fails"
                ))
            }
        })
        .collect()
}

/// The SQS event as Lambda builds it, in `aws_lambda_events`' types (their field names and casing
/// are those of AWS's sample events).
pub fn lambda_event(messages: &[Message], queue_arn: &str, region: &str) -> String {
    let records = messages
        .iter()
        .map(|message| {
            let mut record = SqsMessage::default();
            record.message_id = message.message_id().map(str::to_owned);
            record.receipt_handle = message.receipt_handle().map(str::to_owned);
            record.body = message.body().map(str::to_owned);
            record.md5_of_body = message.md5_of_body().map(str::to_owned);
            record.attributes = (message.attributes().into_iter().flatten())
                .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
                .collect();
            record.message_attributes = (message.message_attributes().into_iter().flatten())
                .map(|(name, value)| {
                    let mut attribute = SqsMessageAttribute::default();
                    attribute.string_value = value.string_value().map(str::to_owned);
                    attribute.binary_value = value.binary_value().map(|blob| {
                        let mut data = Base64Data::default();
                        data.extend_from_slice(blob.as_ref());
                        data
                    });
                    attribute.data_type = Some(value.data_type().to_owned());
                    (name.clone(), attribute)
                })
                .collect();
            record.event_source = Some("aws:sqs".to_owned());
            record.event_source_arn = Some(queue_arn.to_owned());
            record.aws_region = Some(region.to_owned());
            record
        })
        .collect();
    let mut event = SqsEvent::default();
    event.records = records;
    serde_json::to_string(&event).expect("an SQS event serialises")
}

/// Invokes `function` on a running `cargo lambda watch` (its HTTP invoke endpoint on `port`) with
/// `event`, through `cargo lambda invoke`; returns the response JSON or the error output.
pub async fn invoke_watch(
    port: u16,
    function: &str,
    event: String,
    scratch: std::path::PathBuf,
) -> Result<String, String> {
    let function = function.to_owned();
    tokio::task::spawn_blocking(move || {
        std::fs::write(&scratch, event).map_err(|e| format!("{}: {e}", scratch.display()))?;
        let output = std::process::Command::new("cargo")
            .args([
                "lambda",
                "invoke",
                &function,
                "--invoke-address",
                "127.0.0.1",
                "--invoke-port",
                &port.to_string(),
            ])
            .arg("--data-file")
            .arg(&scratch)
            .args(["--output-format", "json"])
            .output()
            .map_err(|e| format!("cargo lambda invoke: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    })
    .await
    .map_err(|e| e.to_string())?
}
