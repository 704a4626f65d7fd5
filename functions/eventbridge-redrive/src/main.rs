use eventbridge_redrive::LambdaInvoker;
use redrive::config::EventRedriveSettings;
use redrive::eventbridge::EventRedrive;
use redrive::SqsQueue;

// A consumer of the EventBridge DLQs and on-failure destinations whose record handler re-delivers
// each event; REDRIVE_DLQ_URL is its parking queue. One thread, or every vCPU on Lambda Managed
// Instances (redrive::lambda::runtime).
fn main() -> Result<(), redrive::lambda::Error> {
    redrive::lambda::runtime()?.block_on(async {
        redrive::lambda::consume(|_settings| {
            let settings = EventRedriveSettings::from_env()?;
            Ok(EventRedrive::new(
                SqsQueue::lazy(),
                LambdaInvoker::lazy(),
                settings,
            ))
        })
        .await
    })
}
