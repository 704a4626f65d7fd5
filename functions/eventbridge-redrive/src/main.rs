use eventbridge_redrive::LambdaInvoker;
use redrive::config::EventRedriveSettings;
use redrive::eventbridge::EventRedrive;
use redrive::SqsQueue;

// A consumer of the EventBridge DLQs and on-failure destinations whose record handler re-delivers
// each event; REDRIVE_DLQ_URL is its parking queue.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), redrive::lambda::Error> {
    redrive::lambda::consume(|_settings| {
        let settings = EventRedriveSettings::from_env()?;
        Ok(EventRedrive::new(
            SqsQueue::lazy(),
            LambdaInvoker::lazy(),
            settings,
        ))
    })
    .await
}
