use orders::payments::SimulatedPayments;
use orders::OrdersHandler;
use redrive::CircuitBreaker;

// One thread, or every vCPU on Lambda Managed Instances (redrive::lambda::runtime).
fn main() -> Result<(), lambda_runtime::Error> {
    redrive::lambda::runtime()?.block_on(async {
        redrive::lambda::consume(|settings| {
            let breaker = CircuitBreaker::new("payments", settings.breaker);
            Ok(OrdersHandler::new(SimulatedPayments::from_env()?, breaker))
        })
        .await
    })
}
