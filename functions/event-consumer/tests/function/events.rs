//! The sample order event through the real handler: what Lambda reports for each outcome.
use std::path::Path;

use event_consumer::{handle_event, redrive_count};
use lambda_runtime::{Context, Diagnostic};
use orders::payments::SimulatedPayments;
use orders::OrdersHandler;
use redrive::breaker::{BreakerSettings, TenantBreakerSettings, TenantBreakers};

fn events() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../events"))
}

fn orders() -> OrdersHandler<SimulatedPayments> {
    let payments = SimulatedPayments::from_env_file(&events().join("sqs-consumer.env"))
        .unwrap()
        .recording();
    let mut breaker = BreakerSettings::default();
    breaker.threshold = 0;
    let breakers = TenantBreakers::new("payments", breaker, TenantBreakerSettings::default());
    OrdersHandler::new(payments, breakers)
}

fn sample_event() -> serde_json::Value {
    let text = std::fs::read_to_string(events().join("eventbridge-order-event.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

async fn invoke(
    orders: &OrdersHandler<SimulatedPayments>,
    event: &serde_json::Value,
) -> Result<(), Diagnostic> {
    invoke_in(orders, event, &Context::default()).await
}

async fn invoke_in(
    orders: &OrdersHandler<SimulatedPayments>,
    event: &serde_json::Value,
    context: &Context,
) -> Result<(), Diagnostic> {
    handle_event(&event.to_string(), redrive_count(context), orders)
        .await
        .map_err(Diagnostic::from)
}

#[tokio::test]
async fn a_transient_failure_is_reported_as_transient_and_succeeds_when_redriven() {
    let orders = orders();
    let event = sample_event();
    let error = invoke(&orders, &event).await.unwrap_err();
    assert_eq!(error.error_type, "redrive.transient.payment_timeout");
    assert!(orders.payments().charged().is_empty());

    // The event unchanged; the redrive's client context, as Lambda hands it to the runtime.
    let mut redriven = Context::default();
    redriven.client_context =
        Some(serde_json::from_str(&redrive::eventbridge::client_context(1, "evt-1")).unwrap());
    invoke_in(&orders, &event, &redriven).await.unwrap();
    assert_eq!(orders.payments().charged(), [("o-1003".to_owned(), 2)]);
}

#[tokio::test]
async fn invalid_and_malformed_events_are_reported_as_permanent() {
    let orders = orders();
    let mut invalid = sample_event();
    invalid["detail"]["amount"] = (-5.0).into();
    let error = invoke(&orders, &invalid).await.unwrap_err();
    assert_eq!(error.error_type, "redrive.permanent.invalid_order");
    assert!(
        error.error_message.contains("amount must be positive"),
        "{}",
        error.error_message
    );

    let malformed =
        serde_json::json!({ "id": "x", "detail-type": "OrderPlaced", "detail": "not an order" });
    let error = invoke(&orders, &malformed).await.unwrap_err();
    assert_eq!(error.error_type, "redrive.permanent.malformed_event");
    assert!(orders.payments().charged().is_empty());
}
