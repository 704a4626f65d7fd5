//! Lambda glue shared by the functions (feature `lambda`): one SQS or Kinesis batch in, the
//! partial batch response and one EMF line out.
use crate::clock::{Clock, SystemClock};
use crate::stream::{KinesisEvent, KinesisEventResponse};
use crate::{BatchError, Processed, Processor, QueuePort, RecordHandler, SqsEvent};
use lambda_runtime::LambdaEvent;
use serde::Serialize;
use serde_json::value::RawValue;

pub use aws_lambda_events::sqs::SqsBatchResponse;

/// The partial batch response of either source; both serialise as `{"batchItemFailures": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum BatchResponse {
    Sqs(SqsBatchResponse),
    Kinesis(KinesisEventResponse),
}

/// Handles an SQS or a Kinesis batch, for a function that sits behind both kinds of source.
pub async fn handle_sqs_or_kinesis<Q: QueuePort, H: RecordHandler>(
    event: LambdaEvent<Box<RawValue>>,
    processor: &Processor<Q>,
    handler: &H,
) -> Result<Processed<BatchResponse>, BatchError> {
    if !KinesisEvent::is_kinesis(event.payload.get()) {
        let processed = handle_batch(event, processor, handler).await?;
        return Ok(Processed {
            response: BatchResponse::Sqs(processed.response),
            report: processed.report,
        });
    }
    let (payload, context) = event.into_parts();
    let kinesis = KinesisEvent::parse(payload.get())?;
    let deadline = absolute_deadline(context.deadline, SystemClock.now_ms());
    let processed = processor
        .process_stream(handler, &kinesis.records, deadline)
        .await?;
    Ok(Processed {
        response: BatchResponse::Kinesis(processed.response),
        report: processed.report,
    })
}

/// Handles one SQS batch: parses the event without copying and settles every record's fate.
pub async fn handle_batch<Q: QueuePort, H: RecordHandler>(
    event: LambdaEvent<Box<RawValue>>,
    processor: &Processor<Q>,
    handler: &H,
) -> Result<Processed, BatchError> {
    let (payload, context) = event.into_parts();
    let sqs = SqsEvent::parse(payload.get())?;
    tracing::debug!(
        records = sqs.records.len(),
        deadline_ms = context.deadline,
        "batch received"
    );
    let now = SystemClock.now_ms();
    processor
        .process(
            handler,
            &sqs.records,
            absolute_deadline(context.deadline, now),
        )
        .await
}

/// Writes the batch's figures as one EMF line on stdout (CloudWatch makes metrics of it) and
/// returns the partial batch response for Lambda.
pub fn respond<R>(processed: Processed<R>, metrics_namespace: &str, function: &str) -> R {
    println!(
        "{}",
        processed
            .report
            .emf_line(metrics_namespace, function, SystemClock.now_ms())
    );
    processed.response
}

/// Logging as Lambda wants it: JSON when the function's log format is JSON
/// (`AWS_LAMBDA_LOG_FORMAT`), at the level of `AWS_LAMBDA_LOG_LEVEL` or `RUST_LOG` (a level name;
/// INFO by default). Lambda stamps the time itself. Level names only, no filter directives: those
/// would bring a regex engine into every function binary.
pub fn init_tracing() {
    use tracing_subscriber::filter::LevelFilter;
    let level = ["AWS_LAMBDA_LOG_LEVEL", "RUST_LOG"]
        .iter()
        .find_map(|name| std::env::var(name).ok())
        .and_then(|level| level.parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_target(false)
        .without_time();
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    match json {
        true => subscriber.json().init(),
        false => subscriber.init(),
    }
}

/// Lambda sends the deadline in ms since the epoch; `cargo lambda watch` sends its timeout
/// (600000) instead. No real deadline lies before 2001, so such a value is read as relative.
pub fn absolute_deadline(deadline_ms: u64, now_ms: u64) -> u64 {
    const YEAR_2001_MS: u64 = 978_307_200_000;
    match deadline_ms < YEAR_2001_MS {
        true => now_ms.saturating_add(deadline_ms),
        false => deadline_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::absolute_deadline;

    #[test]
    fn a_relative_deadline_from_cargo_lambda_watch_is_made_absolute() {
        let now = 1_795_327_660_195;
        assert_eq!(absolute_deadline(600_000, now), now + 600_000);
        assert_eq!(
            absolute_deadline(now + 30_000, now),
            now + 30_000,
            "Lambda's absolute deadline"
        );
        assert_eq!(absolute_deadline(0, now), now, "no time left");
    }
}
