use intake_controller::{AwsIntake, Config};
use lambda_runtime::{service_fn, LambdaEvent};
use redrive::intake::{take_requests, IntakeController, Tick};
use redrive::port::{Clock, SystemClock};

// One tick a minute (an EventBridge Scheduler schedule): the consumers' requests, then each mapping.
fn main() -> Result<(), lambda_runtime::Error> {
    redrive::lambda::runtime()?.block_on(async {
        redrive::lambda::init_tracing();
        let config = Config::from_lookup(|name| std::env::var(name).ok())?;
        let namespace =
            std::env::var("REDRIVE_METRICS_NAMESPACE").unwrap_or_else(|_| "redrive".into());
        let controller = IntakeController::new(AwsIntake::new(&config), config.settings.clone());
        let controller = &controller;
        let (config, namespace) = (&config, &namespace);
        lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| async move {
            let requests =
                take_requests(controller.port().sqs(), &config.requests_queue_url).await?;
            let mut paused = 0;
            let mut failures = Vec::new();
            for mapping in &config.mappings {
                let asked = requests.iter().any(|request| mapping.asked_by(request));
                match controller.tick(mapping, asked, SystemClock.now_ms()).await {
                    Ok(Tick::Running | Tick::NotOurs | Tick::Full) => {}
                    Ok(tick) => {
                        paused += 1;
                        tracing::info!(mapping = %mapping.uuid, function = %mapping.function, ?tick, "intake");
                    }
                    Err(error) => {
                        paused += 1;
                        tracing::error!(mapping = %mapping.uuid, %error, "tick failed: the switch enables the mapping unless a later tick does");
                        failures.push(error.to_string());
                    }
                }
            }
            println!(
                "{}",
                serde_json::json!({
                    "_aws": {
                        "Timestamp": SystemClock.now_ms(),
                        "CloudWatchMetrics": [{
                            "Namespace": namespace,
                            "Dimensions": [["Function"]],
                            "Metrics": [{ "Name": "PausedMappings", "Unit": "Count" }],
                        }],
                    },
                    "Function": event.context.env_config.function_name,
                    "PausedMappings": paused,
                })
            );
            if failures.is_empty() {
                Ok(())
            } else {
                Err(lambda_runtime::Error::from(failures.join("; ")))
            }
        }))
        .await
    })
}
