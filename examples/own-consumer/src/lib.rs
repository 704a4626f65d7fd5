//! The record handler of a team's own consumer: it reserves stock for an order at a warehouse
//! service and tells redrive which failures are worth retrying.
use std::future::Future;

use redrive::{Message, RecordError, RecordHandler};

#[derive(serde::Deserialize)]
struct Order<'a> {
    id: &'a str,
    sku: &'a str,
    quantity: u32,
}

/// The downstream; `Err` carries the HTTP status it answered with.
pub trait Warehouse: Sync {
    fn reserve(&self, sku: &str, quantity: u32) -> impl Future<Output = Result<(), u16>> + Send;
}

/// Reserves each order's stock. A malformed order is permanent (`Message::json` says so); the
/// warehouse's answer is classed by its status: 408, 429 and 5xx are retried, other 4xx not.
pub struct Reserve<W>(pub W);

impl<W: Warehouse> RecordHandler for Reserve<W> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let order: Order<'_> = message.json()?;
        if order.quantity == 0 {
            return Err(RecordError::permanent("invalid_order", "quantity 0"));
        }
        self.0
            .reserve(order.sku, order.quantity)
            .await
            .map_err(|status| {
                RecordError::from_http_status("warehouse", status, format!("order {}", order.id))
            })
    }
}
