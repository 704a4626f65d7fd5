//! Creates the topology's queues on the emulator with the attributes Terraform plans for them.
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;

use crate::topology::Topology;
use crate::Error;

/// A source queue and its DLQ.
#[derive(Debug, Clone, Default)]
pub struct QueuePair {
    pub key: String,
    pub fifo: bool,
    pub url: String,
    pub arn: String,
    pub dlq_url: String,
    pub dlq_arn: String,
}

/// Creates (or finds) every consumer's source queue and DLQ, with the redrive policy and timeouts.
pub async fn provision(client: &Client, topology: &Topology) -> Result<Vec<QueuePair>, Error> {
    let mut pairs = Vec::new();
    for (key, consumer) in &topology.consumers {
        let (name, dlq_name) = topology.queue_names(key);
        let fifo =
            |builder: aws_sdk_sqs::operation::create_queue::builders::CreateQueueFluentBuilder| {
                if consumer.fifo {
                    builder.attributes(QueueAttributeName::FifoQueue, "true")
                } else {
                    builder
                }
            };
        let dlq_url = fifo(client.create_queue().queue_name(&dlq_name))
            .attributes(
                QueueAttributeName::MessageRetentionPeriod,
                consumer.dlq_message_retention_seconds.to_string(),
            )
            .attributes(
                QueueAttributeName::MaximumMessageSize,
                consumer.dlq_max_message_size.to_string(),
            )
            .send()
            .await
            .map_err(Error::sdk)?
            .queue_url
            .unwrap_or_default();
        let dlq_arn = queue_arn(client, &dlq_url).await?;
        let redrive_policy = serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": consumer.max_receive_count });
        let url = fifo(client.create_queue().queue_name(&name))
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                consumer.visibility_timeout_seconds.to_string(),
            )
            .attributes(
                QueueAttributeName::MessageRetentionPeriod,
                consumer.message_retention_seconds.to_string(),
            )
            .attributes(
                QueueAttributeName::RedrivePolicy,
                redrive_policy.to_string(),
            )
            .attributes(
                QueueAttributeName::MaximumMessageSize,
                consumer.max_message_size.to_string(),
            )
            .send()
            .await
            .map_err(Error::sdk)?
            .queue_url
            .unwrap_or_default();
        let arn = queue_arn(client, &url).await?;
        pairs.push(QueuePair {
            key: key.clone(),
            fifo: consumer.fifo,
            url,
            arn,
            dlq_url,
            dlq_arn,
        });
    }
    Ok(pairs)
}

pub async fn queue_arn(client: &Client, url: &str) -> Result<String, Error> {
    let attributes = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(Error::sdk)?;
    attributes
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or_else(|| Error::Emulator(format!("no QueueArn for {url}")))
}

/// Visible, in flight and delayed messages of a queue.
pub async fn depth(client: &Client, url: &str) -> Result<(u64, u64, u64), Error> {
    let names = [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ];
    let output = client
        .get_queue_attributes()
        .queue_url(url)
        .set_attribute_names(Some(names.to_vec()))
        .send()
        .await
        .map_err(Error::sdk)?;
    let get = |name: &QueueAttributeName| -> u64 {
        output
            .attributes()
            .and_then(|a| a.get(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((get(&names[0]), get(&names[1]), get(&names[2])))
}

/// The idempotency table `infra/modules/idempotency-table` makes (string partition key `pk`), on
/// the DynamoDB endpoint of the emulator; an existing one is kept.
pub async fn idempotency_table(client: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), Error> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let created = client
        .create_table()
        .table_name(name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| Error::Emulator(e.to_string()))?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .map_err(|e| Error::Emulator(e.to_string()))?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    match created {
        Ok(_) => Ok(()),
        Err(error)
            if error
                .as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) =>
        {
            Ok(())
        }
        Err(error) => Err(Error::sdk(error)),
    }
}

/// A table keyed by the string attribute `key`, with a `NEW_AND_OLD_IMAGES` stream, on the
/// DynamoDB endpoint of the emulator: its stream ARN.
pub async fn streamed_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    key: &str,
) -> Result<String, Error> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        StreamSpecification, StreamViewType,
    };
    let built = |e: aws_sdk_dynamodb::error::BuildError| Error::Emulator(e.to_string());
    let created = client
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(built)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .map_err(built)?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .map_err(built)?,
        )
        .send()
        .await
        .map_err(Error::sdk)?;
    created
        .table_description()
        .and_then(|description| description.latest_stream_arn())
        .map(str::to_owned)
        .ok_or_else(|| Error::Emulator(format!("{table} has no stream")))
}
