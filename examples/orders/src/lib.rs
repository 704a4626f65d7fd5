//! The orders domain the demo deployment runs: what a valid order is, the record handler that
//! charges it, the payment port it charges through, and ([`payments`]) a payment simulator with
//! fault knobs. The functions and the local stack share it; a team's own consumer looks like
//! `examples/own-consumer` instead.
use std::borrow::Cow;
use std::future::Future;

use redrive::breaker::TenantBreakers;
use redrive::stream::ItemChange;
use redrive::{Message, RecordError, RecordHandler};
use serde::Deserialize;

pub mod payments;

/// An order as the queue carries it (a JSON body).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order<'a> {
    #[serde(borrow)]
    pub order_id: Cow<'a, str>,
    #[serde(borrow)]
    pub customer_id: Cow<'a, str>,
    pub amount: f64,
    #[serde(borrow)]
    pub currency: Cow<'a, str>,
}

impl Order<'_> {
    /// Business rules; a violation is permanent (retrying will not fix the order).
    pub fn validate(&self) -> Result<(), RecordError> {
        let invalid = |reason: String| Err(RecordError::permanent("invalid_order", reason));
        if self.order_id.trim().is_empty() {
            return invalid("orderId is empty".into());
        }
        if self.customer_id.trim().is_empty() {
            return invalid(format!("order {}: customerId is empty", self.order_id));
        }
        if !(self.amount.is_finite() && self.amount > 0.0) {
            return invalid(format!(
                "order {}: amount must be positive, got {}",
                self.order_id, self.amount
            ));
        }
        if self.currency.len() != 3 || !self.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return invalid(format!(
                "order {}: currency must be an ISO 4217 code, got {:?}",
                self.order_id, self.currency
            ));
        }
        Ok(())
    }
}

/// How a charge failed; the class each maps to is in `From<PaymentError> for RecordError`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PaymentError {
    #[error("the payment service did not answer in time")]
    Timeout,
    #[error("the payment service answered HTTP {0}")]
    Unavailable(u16),
    #[error("the payment was declined: {0}")]
    Declined(String),
}

/// The payment downstream the handler charges orders through.
pub trait PaymentGateway: Send + Sync {
    /// Charges the order. `attempt` is the delivery attempt (1 on the first), for idempotency keys.
    fn charge(
        &self,
        order: &Order<'_>,
        attempt: u32,
    ) -> impl Future<Output = Result<(), PaymentError>> + Send;
}

impl From<PaymentError> for RecordError {
    fn from(error: PaymentError) -> Self {
        match error {
            PaymentError::Timeout => RecordError::transient("payment_timeout", error),
            PaymentError::Unavailable(_) => RecordError::transient("payment_unavailable", error),
            PaymentError::Declined(_) => RecordError::permanent("payment_declined", error),
        }
    }
}

/// Validates each order and charges it; the payment calls go through a breaker per tenant (a
/// fair queue's message group) in front of the payment service's shared one.
pub struct OrdersHandler<P> {
    payments: P,
    breakers: TenantBreakers,
}

impl<P: PaymentGateway> OrdersHandler<P> {
    pub fn new(payments: P, breakers: TenantBreakers) -> Self {
        Self { payments, breakers }
    }

    pub fn payments(&self) -> &P {
        &self.payments
    }

    pub fn payments_mut(&mut self) -> &mut P {
        &mut self.payments
    }

    /// Validates and charges one order of `tenant` (if any); `attempt` is 1 on the first
    /// delivery.
    pub async fn charge(
        &self,
        order: &Order<'_>,
        tenant: Option<&str>,
        attempt: u32,
    ) -> Result<(), RecordError> {
        order.validate()?;
        self.breakers
            .call(tenant, || async {
                Ok(self.payments.charge(order, attempt).await?)
            })
            .await
    }
}

impl<P: PaymentGateway> RecordHandler for OrdersHandler<P> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let tenant = message.tenant();
        let tenant = tenant.as_deref();
        match ItemChange::from_message(message)? {
            // From the orders table's stream: a new order is charged; an update or a delete of
            // one is not a payment.
            Some(change) if change.event_name == "INSERT" => {
                self.charge(&change.new_image()?, tenant, message.attempt())
                    .await
            }
            Some(_) => Ok(()),
            None => {
                self.charge(&message.json()?, tenant, message.attempt())
                    .await
            }
        }
    }

    /// The payment service's outage, as its shared breaker saw it: with `REDRIVE_PAUSE_AFTER`, the
    /// consumer asks for its intake to be paused once it lasts.
    fn outage_since(&self) -> Option<u64> {
        self.breakers.shared().open_since()
    }
}
