// The handler future nests the processor, the SDK client and the runtime deeply.
#![recursion_limit = "256"]

use redrive::{CircuitBreaker, Processor, ProcessorConfig, Settings, SqsQueue};
use sqs_consumer::orders::OrdersHandler;
use sqs_consumer::payments::SimulatedPayments;

// One invocation at a time: a single thread (and so one malloc arena) keeps a warm container's memory
// flat between invocations.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    redrive::lambda::init_tracing();
    // A panic fails only its record (the processor catches it); log it as JSON like everything else.
    std::panic::set_hook(Box::new(
        |panic| tracing::error!(%panic, "record handler panicked"),
    ));

    let settings = Settings::from_env()?;
    if settings.dlq_url.is_none() {
        tracing::warn!(
            "REDRIVE_DLQ_URL is not set: report-only, every failure is given back to SQS"
        );
    }
    let handler = OrdersHandler::new(
        SimulatedPayments::from_env()?,
        CircuitBreaker::new("payments", settings.breaker),
    );
    let processor = Processor::new(SqsQueue::lazy(), ProcessorConfig::from(&settings));
    let namespace = settings.metrics_namespace.as_str();

    redrive::lambda::run(|event| async {
        let function = event.context.env_config.function_name.clone();
        let processed = redrive::lambda::handle_sqs_or_kinesis(event, &processor, &handler).await?;
        Ok(redrive::lambda::respond(processed, namespace, &function))
    })
    .await
}
