//! The SQS port on the real AWS SDK. Works against AWS and any endpoint set by `AWS_ENDPOINT_URL`.
use std::collections::HashMap;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry, MessageAttributeValue,
    SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use tokio::sync::OnceCell;

use crate::envelope::OutgoingMessage;
use crate::error::PortError;
use crate::event::MessageAttribute;
use crate::port::{EntryFailure, QueuePort, VisibilityChange};

/// Loads the AWS configuration (region, credentials, endpoint) with a rustls/ring HTTPS client,
/// which keeps the binary small and needs no C toolchain for cross-compiling.
pub async fn load_aws_config() -> aws_config::SdkConfig {
    let http_client = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http_client)
        .load()
        .await
}

/// SQS through the SDK. The client is created on first use, so a cold start that needs no SQS call
/// (every record succeeded) pays nothing for loading the AWS configuration.
#[derive(Default)]
pub struct SqsQueue {
    client: OnceCell<Client>,
}

impl SqsQueue {
    pub fn lazy() -> Self {
        Self::default()
    }

    pub fn with_client(client: Client) -> Self {
        Self {
            client: OnceCell::new_with(Some(client)),
        }
    }

    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async { Client::new(&load_aws_config().await) })
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
            .send()
            .await
            .map_err(sdk_error(OPERATION))?;
        Ok(entry_failures(output.failed()))
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
        .build()
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
