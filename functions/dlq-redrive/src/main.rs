use dlq_redrive::handle_invocation;
use lambda_runtime::{service_fn, LambdaEvent};
use redrive::config::ReprocessSettings;
use redrive::reprocess::Reprocessor;
use redrive::SqsQueue;
use serde_json::value::RawValue;

// One thread, or every vCPU on Lambda Managed Instances (redrive::lambda::runtime).
fn main() -> Result<(), lambda_runtime::Error> {
    redrive::lambda::runtime()?.block_on(async {
        redrive::lambda::init_tracing();
        let settings = ReprocessSettings::from_env()?;
        let reprocessor = Reprocessor::new(SqsQueue::lazy(), &settings);
        let (reprocessor, settings) = (&reprocessor, &settings);
        lambda_runtime::run(service_fn(
            move |event: LambdaEvent<Box<RawValue>>| async move {
                let deadline = event.context.deadline;
                let summary =
                    handle_invocation(event.payload.get(), reprocessor, settings, deadline).await?;
                Ok::<_, lambda_runtime::Error>(summary)
            },
        ))
        .await
    })
}
