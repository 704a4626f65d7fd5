//! A port decorator that remembers every message sent through it (the demo's retry figures).
use std::sync::Mutex;
use std::time::Duration;

use redrive::envelope::OutgoingMessage;
use redrive::port::{EntryFailure, QueuePort, VisibilityChange};
use redrive::{Meta, PortError, SqsRecord};

/// One message the consumer sent: a re-sent copy or a dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub queue_url: String,
    pub delay_seconds: u32,
    /// Failed attempts the copy carries (0 for a deferral of a first delivery).
    pub attempts: u32,
    pub hop: bool,
    /// The error kind the copy carries (`payments_circuit_open` for a deferral by the breaker).
    pub error_kind: String,
}

pub struct Observed<Q> {
    inner: Q,
    sent: Mutex<Vec<Sent>>,
}

impl<Q> Observed<Q> {
    pub fn new(inner: Q) -> Self {
        Self {
            inner,
            sent: Mutex::default(),
        }
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }
}

impl<Q: QueuePort> QueuePort for Observed<Q> {
    async fn queue_url(&self, queue_arn: &str) -> Result<String, PortError> {
        self.inner.queue_url(queue_arn).await
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        messages: &[OutgoingMessage<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        let failures = self.inner.send_batch(queue_url, messages).await?;
        let confirmed = messages
            .iter()
            .enumerate()
            .filter(|(i, _)| !failures.iter().any(|f| f.index == *i));
        let mut sent = self.sent.lock().unwrap();
        for (_, message) in confirmed {
            let meta = message
                .attribute(redrive::META_ATTRIBUTE)
                .and_then(|json| serde_json::from_str::<Meta<'_>>(json).ok());
            sent.push(Sent {
                queue_url: queue_url.to_owned(),
                delay_seconds: message.delay_seconds,
                attempts: meta.as_ref().map_or(0, |m| m.attempts),
                hop: meta.as_ref().is_some_and(|m| m.due_at.is_some()),
                error_kind: meta.map(|m| m.error_kind.to_string()).unwrap_or_default(),
            });
        }
        Ok(failures)
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.inner.change_visibility_batch(queue_url, changes).await
    }

    async fn receive(
        &self,
        queue_url: &str,
        max: u32,
        hold: Duration,
        wait: Duration,
    ) -> Result<Vec<SqsRecord<'static>>, PortError> {
        self.inner.receive(queue_url, max, hold, wait).await
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        receipt_handles: &[&str],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.inner.delete_batch(queue_url, receipt_handles).await
    }
}
