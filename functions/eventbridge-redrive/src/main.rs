// The handler future nests the processor, the SDK clients and the runtime deeply.
#![recursion_limit = "256"]

use eventbridge_redrive::LambdaInvoker;
use redrive::config::EventRedriveSettings;
use redrive::eventbridge::EventRedrive;
use redrive::{Processor, ProcessorConfig, Settings, SqsQueue};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    redrive::lambda::init_tracing();
    let settings = Settings::from_env()?;
    if settings.dlq_url.is_none() {
        tracing::warn!(
            "REDRIVE_DLQ_URL (the parking queue) is not set: parked events are given back to SQS"
        );
    }
    let handler = EventRedrive::new(
        SqsQueue::lazy(),
        LambdaInvoker::lazy(),
        EventRedriveSettings::from_env()?,
    );
    let processor = Processor::new(SqsQueue::lazy(), ProcessorConfig::from(&settings));
    let namespace = settings.metrics_namespace.as_str();

    redrive::lambda::run(|event| async {
        let function = event.context.env_config.function_name.clone();
        let processed = redrive::lambda::handle_batch(event, &processor, &handler).await?;
        Ok(redrive::lambda::respond(processed, namespace, &function))
    })
    .await
}
