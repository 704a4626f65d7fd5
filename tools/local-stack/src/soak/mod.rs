//! The fault-injection soak: messages with a seeded fault plan go through the real processor, a
//! Lambda-like driver and an SQS (moto through the SDK, or [`crate::memory::MemorySqs`] for volume),
//! with AWS's faults injected (failed, refused, late and stalled calls; throttling; idempotency store
//! failures; whole batches failed or stopped at the deadline; throttled invocations; batches
//! delivered to two containers at once; SQS's own move to the DLQ); then the downstream heals and
//! the DLQ is redriven as the scheduled reprocessor does. One invariant is checked at the end: every message had its effect
//! exactly once (the idempotency guard absorbs duplicates) or sits in the DLQ; none is lost; none
//! was redriven beyond the cap.
mod config;
mod driver;
mod faulty;
mod handler;
mod plan;
mod report;
mod stores;

use std::sync::Arc;
use std::time::Duration;

use redrive::PortError;

use crate::memory::QueueSpec;

pub(crate) use config::{shipped, Shipped};
pub use config::{Outage, SoakConfig};
pub use driver::run;
pub use faulty::{Faulty, SoakQueues};
pub use handler::PlannedHandler;
pub use plan::Plan;
pub use report::SoakReport;

/// The in-memory run's queues: a source with a redrive policy to its DLQ (and a retry lane with
/// the same policy, for a run that holds groups there).
pub async fn run_in_memory(config: &SoakConfig) -> Result<SoakReport, PortError> {
    let sqs = crate::memory::MemorySqs::new(Arc::new(redrive::testing::ManualClock::at(
        1_763_790_000_000,
    )))
    .with_fifo_scan_window(config.fifo_scan_window);
    let suffix = config.suffix();
    let dlq_name = format!("soak-dlq{suffix}");
    let dlq_spec = QueueSpec::named(&dlq_name).retaining(Duration::from_secs(14 * 86400));
    let (dlq, dlq_arn) = sqs.create(&dlq_name, dlq_spec);
    let source = |name: String| {
        let spec = QueueSpec::named(&name)
            .dead_letters_to(&dlq_arn, config.max_receive_count)
            .retaining(config.retention);
        sqs.create(&name, spec)
    };
    let (url, arn) = source(format!("soak{suffix}"));
    let second = config
        .second_source
        .then(|| source(format!("soak-b{suffix}")));
    let second = second
        .as_ref()
        .map(|(url, arn)| (url.as_str(), arn.as_str()));
    let lane = config.lane.then(|| source(format!("soak-lane{suffix}")));
    let lane = lane.as_ref().map(|(url, arn)| (url.as_str(), arn.as_str()));
    run(sqs, (&url, &arn), second, lane, &dlq, config).await
}

/// The moto run's queues (named after `prefix`), through the real SDK; the idempotency keys and the
/// ledger in a DynamoDB table on moto when the config names one.
pub async fn run_on_moto(prefix: &str, config: &SoakConfig) -> Result<SoakReport, crate::Error> {
    if let Some(table) = &config.idempotency_table {
        let dynamodb = aws_sdk_dynamodb::Client::new(&redrive::aws::sdk_config_from_env());
        crate::provision::idempotency_table(&dynamodb, table).await?;
    }
    run_on_server(crate::sqs_client(), prefix, config).await
}

/// The same run on LocalStack at `endpoint`, the second implementation; the stores stay in memory.
pub async fn run_on_localstack(
    endpoint: &str,
    prefix: &str,
    config: &SoakConfig,
) -> Result<SoakReport, crate::Error> {
    if config.idempotency_table.is_some() {
        return Err(crate::Error::Emulator(
            "the LocalStack runs keep their stores in memory: no idempotency table".into(),
        ));
    }
    run_on_server(crate::sqs_client_at(endpoint), prefix, config).await
}

async fn run_on_server(
    client: aws_sdk_sqs::Client,
    prefix: &str,
    config: &SoakConfig,
) -> Result<SoakReport, crate::Error> {
    let create =
        |name: String, attributes: Vec<(aws_sdk_sqs::types::QueueAttributeName, String)>| {
            let client = client.clone();
            async move {
                let url = client
                    .create_queue()
                    .queue_name(name)
                    .set_attributes(Some(attributes.into_iter().collect()))
                    .send()
                    .await
                    .map_err(crate::Error::sdk)?
                    .queue_url
                    .unwrap_or_default();
                let arn = crate::provision::queue_arn(&client, &url).await?;
                Ok::<_, crate::Error>((url, arn))
            }
        };
    use aws_sdk_sqs::types::QueueAttributeName;
    let suffix = config.suffix();
    let fifo: Vec<(QueueAttributeName, String)> = match config.fifo_groups {
        Some(_) => vec![(QueueAttributeName::FifoQueue, "true".to_owned())],
        None => Vec::new(),
    };
    let (dlq, dlq_arn) = create(format!("{prefix}-dlq{suffix}"), fifo.clone()).await?;
    let policy = serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": config.max_receive_count });
    let mut attributes = fifo;
    attributes.push((QueueAttributeName::RedrivePolicy, policy.to_string()));
    let (url, arn) = create(format!("{prefix}{suffix}"), attributes.clone()).await?;
    let lane = if config.lane {
        Some(create(format!("{prefix}-lane{suffix}"), attributes).await?)
    } else {
        None
    };
    run(
        redrive::SqsQueue::with_client(client),
        (&url, &arn),
        None,
        lane.as_ref().map(|(url, arn)| (url.as_str(), arn.as_str())),
        &dlq,
        config,
    )
    .await
    .map_err(|e| crate::Error::Emulator(e.to_string()))
}

/// The receipts of the records an invocation's answer does not list as failures: what the event
/// source mapping deletes.
pub(crate) fn done<'r>(
    records: &'r [redrive::SqsRecord<'static>],
    processed: &redrive::Processed,
) -> Vec<&'r str> {
    let failed: Vec<&str> = processed
        .response
        .batch_item_failures
        .iter()
        .map(|failure| failure.item_identifier.as_str())
        .collect();
    records
        .iter()
        .filter(|r| !failed.contains(&r.message_id.as_deref().unwrap_or_default()))
        .filter_map(|r| r.receipt_handle.as_deref())
        .collect()
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
