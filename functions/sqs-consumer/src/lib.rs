//! The `orders` SQS consumer: a Lambda handler on the redrive record-fate engine.
pub mod orders;
pub mod payments;

use lambda_runtime::LambdaEvent;
use redrive::clock::{Clock, SystemClock};
use redrive::{BatchError, Processor, QueuePort, RecordHandler, SqsEvent};
use serde_json::value::RawValue;

pub use aws_lambda_events::sqs::SqsBatchResponse;

/// Handles one SQS batch: parses the event without copying, settles every record's fate, writes
/// the batch's metrics as one EMF line, and answers with the partial batch response.
pub async fn handle_batch<Q: QueuePort, H: RecordHandler>(
    event: LambdaEvent<Box<RawValue>>,
    processor: &Processor<Q>,
    handler: &H,
    metrics_namespace: &str,
) -> Result<SqsBatchResponse, BatchError> {
    let (payload, context) = event.into_parts();
    let sqs = SqsEvent::parse(payload.get())?;
    let processed = processor.process(handler, &sqs.records, context.deadline).await?;
    let function = &context.env_config.function_name;
    println!("{}", processed.report.emf_line(metrics_namespace, function, SystemClock.now_ms()));
    Ok(processed.response)
}
