//! The SQS port on the real AWS SDK. Works against AWS and any endpoint set by `AWS_ENDPOINT_URL`.
use std::collections::HashMap;

use aws_sdk_sqs::primitives::Blob;
use std::time::Duration;

use aws_credential_types::provider::{
    error::CredentialsError, future, ProvideCredentials, SharedCredentialsProvider,
};
use aws_credential_types::Credentials;
use aws_sdk_sqs::config::BehaviorVersion;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, MessageSystemAttributeName,
    MessageSystemAttributeNameForSends, MessageSystemAttributeValue, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use aws_types::region::Region;
use aws_types::SdkConfig;
use tokio::sync::OnceCell;

use redrive_core::envelope::OutgoingMessage;
use redrive_core::error::PortError;
use redrive_core::port::{EntryFailure, QueuePort, VisibilityChange};
use redrive_event::{Body, MessageAttribute, SqsRecord, SystemAttributes, Text};

/// An HTTPS client on rustls/ring, which keeps the binary small and needs no C toolchain for
/// cross-compiling.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::rustls(CryptoMode::Ring))
        .build_https()
}

/// The SDK configuration of a Lambda function, from the environment Lambda gives it: the region
/// (`AWS_REGION`), the execution role's credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`) and, for a local stack, `AWS_ENDPOINT_URL`. aws-config's provider chain
/// (profiles, SSO, web identity, instance metadata) is for machines, not functions: it would put an
/// STS client and a URL parser into every function's zip. The `dlq` CLI uses it.
pub fn sdk_config_from_env() -> SdkConfig {
    let mut config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(https_client())
        .credentials_provider(SharedCredentialsProvider::new(EnvironmentCredentials))
        .region(
            var("AWS_REGION")
                .or_else(|| var("AWS_DEFAULT_REGION"))
                .map(Region::new),
        );
    if let Some(endpoint) = var("AWS_ENDPOINT_URL") {
        config = config.endpoint_url(endpoint);
    }
    config.build()
}

/// Timeouts of the calls that carry fates out (SendMessageBatch, ChangeMessageVisibilityBatch):
/// the SDK sets none by default, and a stalled attempt must be retried, or the call given up,
/// inside the default 2 s deadline margin. The carry-out itself stops at the deadline whatever
/// the SDK does; these let a retry of a stalled attempt still land in time.
fn carry_out_timeouts() -> aws_sdk_sqs::config::Builder {
    let timeouts = aws_smithy_types::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(800))
        .operation_attempt_timeout(Duration::from_millis(900))
        .operation_timeout(Duration::from_millis(1800))
        .build();
    aws_sdk_sqs::config::Builder::default().timeout_config(timeouts)
}

/// A set, non-empty environment variable.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// Credentials read from the environment on each (cached) request for them, with an error that
/// names the variables when they are missing.
#[derive(Debug)]
struct EnvironmentCredentials;

impl ProvideCredentials for EnvironmentCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::ready(
            match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
                (Some(key), Some(secret)) => Ok(Credentials::new(
                    key,
                    secret,
                    var("AWS_SESSION_TOKEN"),
                    None,
                    "environment",
                )),
                _ => Err(CredentialsError::not_loaded(
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them from the execution role)",
                )),
            },
        )
    }
}

/// SQS through the SDK. The client is created on first use, so a cold start that needs no SQS call
/// (every record succeeded) pays nothing for loading the AWS configuration.
#[derive(Default)]
pub struct SqsQueue {
    client: OnceCell<Client>,
}

impl SqsQueue {
    /// A port whose client is built from the environment on its first call.
    pub fn lazy() -> Self {
        Self::default()
    }

    /// A port on `client`.
    pub fn with_client(client: Client) -> Self {
        Self {
            client: OnceCell::new_with(Some(client)),
        }
    }

    /// The URL of a queue given by URL, ARN or name.
    pub async fn resolve(&self, queue: &str) -> Result<String, PortError> {
        if queue.starts_with("https://") || queue.starts_with("http://") {
            return Ok(queue.to_owned());
        }
        if queue.starts_with("arn:") {
            return self.queue_url(queue).await;
        }
        const OPERATION: &str = "GetQueueUrl";
        let output = self
            .client()
            .await
            .get_queue_url()
            .queue_name(queue)
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        output
            .queue_url
            .ok_or_else(|| PortError::new(OPERATION, "no QueueUrl in the response"))
    }

    /// The queue's ARN and its approximate (visible, in flight, delayed) counts.
    pub async fn describe(&self, queue_url: &str) -> Result<QueueDescription, PortError> {
        const OPERATION: &str = "GetQueueAttributes";
        let output = self
            .client()
            .await
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        let attributes = output.attributes.unwrap_or_default();
        let count = |name: QueueAttributeName| {
            attributes
                .get(&name)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Ok(QueueDescription {
            arn: attributes
                .get(&QueueAttributeName::QueueArn)
                .cloned()
                .ok_or_else(|| PortError::new(OPERATION, "no QueueArn in the response"))?,
            visible: count(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            delayed: count(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        })
    }

    /// StartMessageMoveTask: SQS moves every message of a DLQ back to its source queues (or to
    /// `destination_arn`) by itself, without filters. Returns the task handle.
    pub async fn start_move_task(
        &self,
        source_arn: &str,
        destination_arn: Option<&str>,
        max_per_second: Option<u32>,
    ) -> Result<String, PortError> {
        const OPERATION: &str = "StartMessageMoveTask";
        let output = self
            .client()
            .await
            .start_message_move_task()
            .source_arn(source_arn)
            .set_destination_arn(destination_arn.map(str::to_owned))
            .set_max_number_of_messages_per_second(
                max_per_second.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            )
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        output
            .task_handle
            .ok_or_else(|| PortError::new(OPERATION, "no TaskHandle in the response"))
    }

    /// ListMessageMoveTasks: the most recent move tasks of a DLQ.
    pub async fn list_move_tasks(&self, source_arn: &str) -> Result<Vec<MoveTask>, PortError> {
        const OPERATION: &str = "ListMessageMoveTasks";
        let output = self
            .client()
            .await
            .list_message_move_tasks()
            .source_arn(source_arn)
            .max_results(10)
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        Ok(output
            .results()
            .iter()
            .map(|task| MoveTask {
                task_handle: task.task_handle().map(str::to_owned),
                status: task.status().unwrap_or("UNKNOWN").to_owned(),
                moved: task.approximate_number_of_messages_moved(),
                to_move: task.approximate_number_of_messages_to_move(),
                destination_arn: task.destination_arn().map(str::to_owned),
                failure_reason: task.failure_reason().map(str::to_owned),
            })
            .collect())
    }

    /// CancelMessageMoveTask. Returns the number of messages moved before the cancellation.
    pub async fn cancel_move_task(&self, task_handle: &str) -> Result<i64, PortError> {
        const OPERATION: &str = "CancelMessageMoveTask";
        let output = self
            .client()
            .await
            .cancel_message_move_task()
            .task_handle(task_handle)
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        Ok(output.approximate_number_of_messages_moved)
    }

    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async { Client::new(&sdk_config_from_env()) })
            .await
    }
}

impl QueuePort for SqsQueue {
    async fn queue_url(&self, queue_arn: &str) -> Result<String, PortError> {
        const OPERATION: &str = "GetQueueUrl";
        let mut parts = queue_arn.split(':');
        let (Some("arn"), Some(account), Some(name)) = (parts.next(), parts.nth(3), parts.next())
        else {
            return Err(PortError::new(
                OPERATION,
                format!("{queue_arn:?} is not an SQS queue ARN"),
            ));
        };
        let output = self
            .client()
            .await
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        output
            .queue_url
            .ok_or_else(|| PortError::new(OPERATION, "no QueueUrl in the response"))
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        messages: &[OutgoingMessage<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        const OPERATION: &str = "SendMessageBatch";
        let entries = messages
            .iter()
            .enumerate()
            .map(|(index, message)| send_entry(index, message))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| PortError::new(OPERATION, error))?;
        let output = self
            .client()
            .await
            .send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .customize()
            .config_override(carry_out_timeouts())
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        Ok(entry_failures(output.failed()))
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        const OPERATION: &str = "ChangeMessageVisibilityBatch";
        let entries = changes
            .iter()
            .enumerate()
            .map(|(index, change)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(index.to_string())
                    .receipt_handle(change.receipt_handle)
                    .visibility_timeout(i32::try_from(change.timeout.as_secs()).unwrap_or(i32::MAX))
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| PortError::new(OPERATION, error))?;
        let output = self
            .client()
            .await
            .change_message_visibility_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .customize()
            .config_override(carry_out_timeouts())
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        Ok(entry_failures(output.failed()))
    }

    async fn receive(
        &self,
        queue_url: &str,
        max: u32,
        hold: Duration,
        wait: Duration,
    ) -> Result<Vec<SqsRecord<'static>>, PortError> {
        let output = self
            .client()
            .await
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(max.clamp(1, 10) as i32)
            .visibility_timeout(i32::try_from(hold.as_secs()).unwrap_or(43_200))
            .wait_time_seconds(wait.as_secs().min(20) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(sdk_error("ReceiveMessage"))?;
        Ok(output
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(record_of)
            .collect())
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        receipt_handles: &[&str],
    ) -> Result<Vec<EntryFailure>, PortError> {
        const OPERATION: &str = "DeleteMessageBatch";
        let entries = receipt_handles
            .iter()
            .enumerate()
            .map(|(index, handle)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(index.to_string())
                    .receipt_handle(*handle)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| PortError::new(OPERATION, error))?;
        let output = self
            .client()
            .await
            .delete_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        Ok(entry_failures(output.failed()))
    }
}

/// What `describe` reports about a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDescription {
    /// The queue's ARN.
    pub arn: String,
    /// Messages visible.
    pub visible: u64,
    /// Messages in flight.
    pub in_flight: u64,
    /// Messages delayed.
    pub delayed: u64,
}

/// A native SQS message move task, as `list_move_tasks` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveTask {
    /// The handle to cancel it with.
    pub task_handle: Option<String>,
    /// `RUNNING`, `COMPLETED`, `CANCELLING`, `CANCELLED` or `FAILED`.
    pub status: String,
    /// Messages moved so far.
    pub moved: i64,
    /// Messages to move in all, when known.
    pub to_move: Option<i64>,
    /// Where they go; their source queues when unset.
    pub destination_arn: Option<String>,
    /// Why it failed, if it did.
    pub failure_reason: Option<String>,
}

/// A received SDK message in the shape of a Lambda SQS record.
fn record_of(message: Message) -> SqsRecord<'static> {
    let mut system = message.attributes.unwrap_or_default();
    let mut take = |name: MessageSystemAttributeName| system.remove(&name).map(Text::from);
    let attributes = SystemAttributes {
        approximate_receive_count: take(MessageSystemAttributeName::ApproximateReceiveCount),
        sent_timestamp: take(MessageSystemAttributeName::SentTimestamp),
        approximate_first_receive_timestamp: take(
            MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
        ),
        message_group_id: take(MessageSystemAttributeName::MessageGroupId),
        sequence_number: take(MessageSystemAttributeName::SequenceNumber),
        aws_trace_header: take(MessageSystemAttributeName::AwsTraceHeader),
        dead_letter_queue_source_arn: take(MessageSystemAttributeName::DeadLetterQueueSourceArn),
    };
    let message_attributes = message
        .message_attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| {
            let attribute = MessageAttribute {
                string_value: value.string_value.map(Text::from),
                binary_value: value
                    .binary_value
                    .map(|blob| Text::from(aws_smithy_types::base64::encode(blob.as_ref()))),
                data_type: Text::from(value.data_type),
            };
            (Text::from(name), attribute)
        })
        .collect();
    SqsRecord {
        message_id: message.message_id.map(Text::from),
        receipt_handle: message.receipt_handle.map(Text::from),
        body: message.body.map(Body::from),
        attributes,
        message_attributes,
        event_source_arn: None,
        event_source: Some(Text::from("aws:sqs")),
    }
}

/// Maps an SDK error to a port error that names the operation and keeps AWS's whole message.
fn sdk_error<E: std::error::Error>(operation: &'static str) -> impl FnOnce(E) -> PortError {
    move |error| PortError::new(operation, aws_sdk_sqs::error::DisplayErrorContext(error))
}

fn send_entry(
    index: usize,
    message: &OutgoingMessage<'_>,
) -> Result<SendMessageBatchRequestEntry, aws_sdk_sqs::error::BuildError> {
    let attributes = message
        .attributes
        .iter()
        .map(|(name, value)| Ok((name.to_string(), attribute_value(value)?)))
        .collect::<Result<HashMap<_, _>, aws_sdk_sqs::error::BuildError>>()?;
    SendMessageBatchRequestEntry::builder()
        .id(index.to_string())
        .message_body(&*message.body)
        // FIFO queues refuse a per-message DelaySeconds, even 0: only set it when there is a delay.
        .set_delay_seconds(
            (message.delay_seconds > 0)
                .then(|| i32::try_from(message.delay_seconds).unwrap_or(900)),
        )
        .set_message_attributes((!attributes.is_empty()).then_some(attributes))
        .set_message_group_id(message.group_id.as_deref().map(str::to_owned))
        .set_message_deduplication_id(message.deduplication_id.as_deref().map(str::to_owned))
        .set_message_system_attributes(message.trace_header.as_deref().map(trace_header))
        .build()
}

/// The `AWSTraceHeader` system attribute: SQS gives it precedence over the request's
/// `X-Amzn-Trace-Id` header, which is the invocation's, not the record's.
fn trace_header(
    value: &str,
) -> HashMap<MessageSystemAttributeNameForSends, MessageSystemAttributeValue> {
    let value = MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .expect("data type is set");
    HashMap::from([(MessageSystemAttributeNameForSends::AwsTraceHeader, value)])
}

fn attribute_value(
    value: &MessageAttribute<'_>,
) -> Result<MessageAttributeValue, aws_sdk_sqs::error::BuildError> {
    // Lambda hands binary values over as base64; SQS wants the bytes. Text that is not valid base64
    // is sent as it stands rather than dropped.
    let binary = value.binary_value.as_deref().map(|base64| {
        Blob::new(
            aws_smithy_types::base64::decode(base64).unwrap_or_else(|_| base64.as_bytes().to_vec()),
        )
    });
    MessageAttributeValue::builder()
        .data_type(&*value.data_type)
        .set_string_value(value.string_value.as_deref().map(str::to_owned))
        .set_binary_value(binary)
        .build()
}

fn entry_failures(failed: &[BatchResultErrorEntry]) -> Vec<EntryFailure> {
    failed
        .iter()
        .filter_map(|entry| {
            Some(EntryFailure {
                index: entry.id().parse().ok()?,
                code: entry.code().to_owned(),
                message: entry.message().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test in this binary that touches these variables, so changing them is not racy.
    #[tokio::test]
    async fn credentials_come_from_the_environment_or_the_error_names_them() {
        const VARS: [&str; 3] = [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ];
        let saved = VARS.map(|name| (name, std::env::var_os(name)));
        for name in VARS {
            std::env::remove_var(name);
        }
        std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
        let missing = EnvironmentCredentials.provide_credentials().await;
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "secret");
        std::env::set_var("AWS_SESSION_TOKEN", "token");
        let loaded = EnvironmentCredentials.provide_credentials().await;
        for (name, value) in saved {
            match value {
                Some(value) => std::env::set_var(name, value),
                None => std::env::remove_var(name),
            }
        }

        let error = format!("{:?}", missing.unwrap_err());
        assert!(error.contains("AWS_SECRET_ACCESS_KEY"), "{error}");
        let credentials = loaded.unwrap();
        assert_eq!(
            (
                credentials.access_key_id(),
                credentials.secret_access_key(),
                credentials.session_token()
            ),
            ("AKIDEXAMPLE", "secret", Some("token"))
        );
    }
}
