//! A team's own consumer: `cargo lambda build --release --arm64 -p own-consumer`, then point
//! `infra/modules/sqs-consumer` at the zip. Everything but the handler is redrive's.
use own_consumer::{Reserve, Warehouse};

/// Stands in for the team's HTTP client: map its answer's status into `Err(status)`.
struct LoggingWarehouse;

impl Warehouse for LoggingWarehouse {
    async fn reserve(&self, sku: &str, quantity: u32) -> Result<(), u16> {
        println!("reserved {quantity} x {sku}");
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), redrive::lambda::Error> {
    redrive::lambda::consume(|_settings| Ok(Reserve(LoggingWarehouse))).await
}
