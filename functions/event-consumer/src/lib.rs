//! The `orders` EventBridge consumer. An EventBridge rule invokes it asynchronously with an order
//! event; a failure goes back to Lambda, which retries it (0 to 2 times) and then writes an
//! invocation record to the function's on-failure destination. The record's `errorType` tells the
//! EventBridge redrive whether sending the event again can help (`redrive.permanent.*`: no). The
//! redrive invokes it with the event unchanged and says which redelivery it is in the client
//! context.
use std::borrow::Cow;

use lambda_runtime::{Context, Diagnostic};
use orders::PaymentGateway;
use orders::{Order, OrdersHandler};
use redrive::eventbridge::{error_type, REDRIVE_COUNT_KEY};
use redrive::RecordError;
use serde::Deserialize;

/// The part of an EventBridge event this consumer reads; `detail` is the order.
#[derive(Debug, Deserialize)]
pub struct OrderEvent<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(rename = "detail-type", borrow)]
    pub detail_type: Cow<'a, str>,
    #[serde(borrow)]
    pub detail: Order<'a>,
}

/// Which redelivery of its event an invocation is: 0 from EventBridge, 1 on the EventBridge
/// redrive's first, as its client context says.
pub fn redrive_count(context: &Context) -> u32 {
    context
        .client_context
        .as_ref()
        .and_then(|client| client.custom.get(REDRIVE_COUNT_KEY))
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

/// A failed invocation. Lambda reports it with the `errorType` from [`error_type`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct EventError(#[from] pub RecordError);

impl From<EventError> for Diagnostic {
    fn from(error: EventError) -> Self {
        Diagnostic {
            error_type: error_type(&error.0),
            error_message: error.0.to_string(),
        }
    }
}

/// Handles one order event, its `redrive_count`th redelivery: parse, validate, charge.
pub async fn handle_event<P: PaymentGateway>(
    payload: &str,
    redrive_count: u32,
    orders: &OrdersHandler<P>,
) -> Result<(), EventError> {
    let event: OrderEvent<'_> = serde_json::from_str(payload)
        .map_err(|error| RecordError::permanent("malformed_event", error))?;
    let result = orders.charge(&event.detail, None, redrive_count + 1).await;
    if let Err(error) = &result {
        tracing::error!(
            event_id = %event.id,
            detail_type = %event.detail_type,
            order_id = %event.detail.order_id,
            redrive_count,
            error_class = %error.class(),
            error_kind = error.kind(),
            error = error.message(),
            "order event failed"
        );
    }
    Ok(result?)
}
