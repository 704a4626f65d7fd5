use orders::payments::SimulatedPayments;
use orders::OrdersHandler;
use redrive::CircuitBreaker;

// A single thread (and so one malloc arena) keeps a warm container's memory flat between
// invocations; on Lambda Managed Instances the concurrent invocations are tasks on it.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    redrive::lambda::consume(|settings| {
        let breaker = CircuitBreaker::new("payments", settings.breaker);
        Ok(OrdersHandler::new(SimulatedPayments::from_env()?, breaker))
    })
    .await
}
