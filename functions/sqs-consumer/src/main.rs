use orders::payments::SimulatedPayments;
use orders::OrdersHandler;
use redrive::breaker::TenantBreakers;

// One thread, or every vCPU on Lambda Managed Instances (redrive::lambda::runtime).
fn main() -> Result<(), lambda_runtime::Error> {
    redrive::lambda::runtime()?.block_on(async {
        redrive::lambda::consume(|settings| {
            let breakers =
                TenantBreakers::new("payments", settings.breaker, settings.tenant_breaker)
                    .with_metrics(&settings.metrics_namespace);
            Ok(OrdersHandler::new(SimulatedPayments::from_env()?, breakers))
        })
        .await
    })
}
