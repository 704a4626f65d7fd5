//! A port decorator that remembers every message sent through it (the demo's retry figures).
use std::sync::Mutex;

use redrive::envelope::OutgoingMessage;
use redrive::port::{EntryFailure, ForwardingPort, QueuePort};
use redrive::{Meta, PortError};

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

impl<Q: QueuePort> ForwardingPort for Observed<Q> {
    type Inner = Q;

    fn inner(&self) -> &Q {
        &self.inner
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
}
