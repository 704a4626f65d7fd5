use std::sync::Arc;

use event_consumer::{handle_event, redrive_count, EventError};
use lambda_runtime::{service_fn, LambdaEvent};
use orders::payments::SimulatedPayments;
use orders::OrdersHandler;
use redrive::breaker::TenantBreakers;
use redrive::Settings;
use serde_json::value::RawValue;

// One thread, or every vCPU on Lambda Managed Instances (redrive::lambda::runtime).
fn main() -> Result<(), lambda_runtime::Error> {
    redrive::lambda::runtime()?.block_on(async {
        redrive::lambda::init_tracing();
        let settings = Settings::from_env()?;
        let orders = OrdersHandler::new(
            SimulatedPayments::from_env()?,
            TenantBreakers::new("payments", settings.breaker, settings.tenant_breaker)
                .with_metrics(&settings.metrics_namespace),
        );
        // Shared by the invocations Lambda Managed Instances run at once (one at a time elsewhere).
        let orders = Arc::new(orders);
        lambda_runtime::run_concurrent(service_fn(move |event: LambdaEvent<Box<RawValue>>| {
            let orders = Arc::clone(&orders);
            async move {
                handle_event(event.payload.get(), redrive_count(&event.context), &*orders).await?;
                Ok::<_, EventError>(())
            }
        }))
        .await
    })
}
