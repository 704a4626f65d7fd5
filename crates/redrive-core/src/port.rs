//! The one narrow port every SQS call goes through, and an in-memory implementation for unit tests.
use std::future::Future;
#[cfg(any(test, feature = "test-util"))]
use std::sync::Mutex;
use std::time::Duration;

use crate::envelope::OutgoingMessage;
use crate::error::PortError;
use redrive_event::SqsRecord;

/// One entry of a batch call that SQS refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFailure {
    /// Position of the entry in the slice passed to the call.
    pub index: usize,
    /// SQS's error code.
    pub code: String,
    /// SQS's error message.
    pub message: String,
}

/// A new visibility timeout for one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisibilityChange<'a> {
    /// The delivery.
    pub receipt_handle: &'a str,
    /// How long it stays hidden from now on.
    pub timeout: Duration,
}

/// The one port every SQS call goes through.
pub trait QueuePort: Send + Sync {
    /// The URL of the queue named by `queue_arn`.
    fn queue_url(&self, queue_arn: &str) -> impl Future<Output = Result<String, PortError>> + Send;

    /// SendMessageBatch: at most 10 messages, at most 1 MiB together. `Ok` lists the refused entries.
    fn send_batch(
        &self,
        queue_url: &str,
        messages: &[OutgoingMessage<'_>],
    ) -> impl Future<Output = Result<Vec<EntryFailure>, PortError>> + Send;

    /// ChangeMessageVisibilityBatch: at most 10 entries. `Ok` lists the refused entries.
    fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> impl Future<Output = Result<Vec<EntryFailure>, PortError>> + Send;

    /// ReceiveMessage: at most 10 messages with every system and message attribute, hidden from
    /// other consumers for `hold`; waits up to `wait` for the first one. Records look as Lambda
    /// would deliver them (binary attribute values in base64), without an event source ARN.
    fn receive(
        &self,
        queue_url: &str,
        max: u32,
        hold: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<SqsRecord<'static>>, PortError>> + Send;

    /// DeleteMessageBatch: at most 10 receipt handles. `Ok` lists the refused entries. Only the
    /// redrive tools delete; a queue consumer leaves deleting to the event source mapping.
    fn delete_batch(
        &self,
        queue_url: &str,
        receipt_handles: &[&str],
    ) -> impl Future<Output = Result<Vec<EntryFailure>, PortError>> + Send;
}

/// A port that passes every call on to an inner port and changes only what it overrides: a
/// decorator (recording what was sent, injecting faults, auditing calls) implements this instead
/// of forwarding each call by hand. A borrowed port is one too.
pub trait ForwardingPort: Send + Sync {
    /// The port calls are passed on to.
    type Inner: QueuePort;

    /// The inner port.
    fn inner(&self) -> &Self::Inner;

    /// Sees every call before it is passed on: the IAM action it needs (`sqs:SendMessage`,
    /// `sqs:ChangeMessageVisibility`, `sqs:ReceiveMessage`, `sqs:DeleteMessage`,
    /// `sqs:GetQueueUrl`) and the queue's URL (its ARN for `sqs:GetQueueUrl`).
    fn on_call(&self, _action: &'static str, _queue: &str) {}

    /// SendMessageBatch, passed on unless overridden.
    fn send_batch(
        &self,
        queue_url: &str,
        messages: &[OutgoingMessage<'_>],
    ) -> impl Future<Output = Result<Vec<EntryFailure>, PortError>> + Send {
        self.inner().send_batch(queue_url, messages)
    }

    /// ChangeMessageVisibilityBatch, passed on unless overridden.
    fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> impl Future<Output = Result<Vec<EntryFailure>, PortError>> + Send {
        self.inner().change_visibility_batch(queue_url, changes)
    }
}

impl<F: ForwardingPort> QueuePort for F {
    async fn queue_url(&self, queue_arn: &str) -> Result<String, PortError> {
        self.on_call("sqs:GetQueueUrl", queue_arn);
        self.inner().queue_url(queue_arn).await
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        messages: &[OutgoingMessage<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.on_call("sqs:SendMessage", queue_url);
        ForwardingPort::send_batch(self, queue_url, messages).await
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.on_call("sqs:ChangeMessageVisibility", queue_url);
        ForwardingPort::change_visibility_batch(self, queue_url, changes).await
    }

    async fn receive(
        &self,
        queue_url: &str,
        max: u32,
        hold: Duration,
        wait: Duration,
    ) -> Result<Vec<SqsRecord<'static>>, PortError> {
        self.on_call("sqs:ReceiveMessage", queue_url);
        self.inner().receive(queue_url, max, hold, wait).await
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        receipt_handles: &[&str],
    ) -> Result<Vec<EntryFailure>, PortError> {
        self.on_call("sqs:DeleteMessage", queue_url);
        self.inner().delete_batch(queue_url, receipt_handles).await
    }
}

impl<Q: QueuePort> ForwardingPort for &Q {
    type Inner = Q;

    fn inner(&self) -> &Q {
        self
    }
}

#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
/// Records every call; can be told to refuse entries or whole calls. For unit tests.
#[derive(Default)]
pub struct RecordingQueue {
    calls: Mutex<Vec<Call>>,
    /// Messages `receive` hands out, per queue URL, first in first out.
    stock: Mutex<Vec<(String, SqsRecord<'static>)>>,
    refuse_body: Mutex<Option<String>>,
    fail_calls_to: Mutex<Option<String>>,
    stall_calls_to: Mutex<Option<String>>,
}

#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
/// A call the in-memory queue recorded.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// A SendMessageBatch.
    Send {
        /// The queue.
        queue_url: String,
        /// What was sent.
        messages: Vec<OutgoingMessage<'static>>,
    },
    /// A ChangeMessageVisibilityBatch.
    ChangeVisibility {
        /// The queue.
        queue_url: String,
        /// Receipt handles and their new timeouts.
        changes: Vec<(String, Duration)>,
    },
    /// A ReceiveMessage.
    Receive {
        /// The queue.
        queue_url: String,
        /// Messages handed out.
        received: usize,
    },
    /// A DeleteMessageBatch.
    Delete {
        /// The queue.
        queue_url: String,
        /// The receipt handles.
        receipt_handles: Vec<String>,
    },
}

#[cfg(any(test, feature = "test-util"))]
impl RecordingQueue {
    /// Puts messages on `queue_url` for `receive` to hand out (once each: there is no visibility).
    pub fn stock(&self, queue_url: &str, records: impl IntoIterator<Item = SqsRecord<'static>>) {
        let mut stock = self.stock.lock().unwrap();
        stock.extend(records.into_iter().map(|r| (queue_url.to_owned(), r)));
    }

    /// Receipt handles deleted from `queue_url`, in order.
    pub fn deleted_from(&self, queue_url: &str) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|call| match call {
                Call::Delete {
                    queue_url: url,
                    receipt_handles,
                } if url == queue_url => Some(receipt_handles),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Refuse every entry whose body contains `needle`.
    pub fn refuse_entries_containing(&self, needle: &str) {
        *self.refuse_body.lock().unwrap() = Some(needle.to_owned());
    }

    /// Fail every call to `queue_url` as a whole.
    pub fn fail_calls_to(&self, queue_url: &str) {
        *self.fail_calls_to.lock().unwrap() = Some(queue_url.to_owned());
    }

    /// Never answer a call to `queue_url` (a stalled connection, a throttled endpoint that
    /// holds the request): the call is recorded, its future stays pending.
    pub fn stall_calls_to(&self, queue_url: &str) {
        *self.stall_calls_to.lock().unwrap() = Some(queue_url.to_owned());
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Every message sent to `queue_url`, in order.
    pub fn sent_to(&self, queue_url: &str) -> Vec<OutgoingMessage<'static>> {
        self.calls()
            .into_iter()
            .filter_map(|call| match call {
                Call::Send {
                    queue_url: url,
                    messages,
                } if url == queue_url => Some(messages),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Every visibility change so far, in order: receipt handle and new timeout.
    pub fn visibility_changes(&self) -> Vec<(String, Duration)> {
        self.calls()
            .into_iter()
            .filter_map(|call| match call {
                Call::ChangeVisibility { changes, .. } => Some(changes),
                _ => None,
            })
            .flatten()
            .collect()
    }

    async fn check_call(&self, queue_url: &str, operation: &'static str) -> Result<(), PortError> {
        let stalls = self.stall_calls_to.lock().unwrap().as_deref() == Some(queue_url);
        if stalls {
            std::future::pending::<()>().await;
        }
        match self.fail_calls_to.lock().unwrap().as_deref() {
            Some(url) if url == queue_url => Err(PortError::new(operation, "injected failure")),
            _ => Ok(()),
        }
    }
}

#[cfg(any(test, feature = "test-util"))]
impl QueuePort for RecordingQueue {
    async fn queue_url(&self, queue_arn: &str) -> Result<String, PortError> {
        let name = queue_arn.rsplit(':').next().unwrap_or_default();
        Ok(format!("https://sqs.local/123456789012/{name}"))
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        messages: &[OutgoingMessage<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        assert!(
            messages.len() <= 10,
            "SendMessageBatch takes at most 10 entries"
        );
        let owned: Vec<_> = messages
            .iter()
            .cloned()
            .map(OutgoingMessage::into_owned)
            .collect();
        self.calls.lock().unwrap().push(Call::Send {
            queue_url: queue_url.to_owned(),
            messages: owned,
        });
        self.check_call(queue_url, "SendMessageBatch").await?;
        let refuse = self.refuse_body.lock().unwrap().clone();
        Ok(messages
            .iter()
            .enumerate()
            .filter_map(|(index, message)| {
                // As SQS does: a body with characters it does not take is refused, and an empty
                // one (SQS API reference, SendMessage: MessageBody, at least one character).
                let (code, why) = if !crate::envelope::sqs_accepts(&message.body) {
                    ("InvalidMessageContents", "invalid characters")
                } else if message.body.is_empty() {
                    ("InvalidParameterValue", "empty body")
                } else if refuse
                    .as_deref()
                    .is_some_and(|needle| message.body.contains(needle))
                {
                    ("InternalError", "injected")
                } else {
                    return None;
                };
                Some(EntryFailure {
                    index,
                    code: code.into(),
                    message: why.into(),
                })
            })
            .collect())
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        assert!(
            changes.len() <= 10,
            "ChangeMessageVisibilityBatch takes at most 10 entries"
        );
        let changes = changes
            .iter()
            .map(|c| (c.receipt_handle.to_owned(), c.timeout))
            .collect();
        self.calls.lock().unwrap().push(Call::ChangeVisibility {
            queue_url: queue_url.to_owned(),
            changes,
        });
        self.check_call(queue_url, "ChangeMessageVisibilityBatch")
            .await?;
        Ok(Vec::new())
    }

    async fn receive(
        &self,
        queue_url: &str,
        max: u32,
        _hold: Duration,
        _wait: Duration,
    ) -> Result<Vec<SqsRecord<'static>>, PortError> {
        assert!(max <= 10, "ReceiveMessage takes at most 10");
        self.check_call(queue_url, "ReceiveMessage").await?;
        let mut stock = self.stock.lock().unwrap();
        let mut received = Vec::new();
        while received.len() < max as usize {
            let Some(at) = stock.iter().position(|(url, _)| url == queue_url) else {
                break;
            };
            received.push(stock.remove(at).1);
        }
        self.calls.lock().unwrap().push(Call::Receive {
            queue_url: queue_url.to_owned(),
            received: received.len(),
        });
        Ok(received)
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        receipt_handles: &[&str],
    ) -> Result<Vec<EntryFailure>, PortError> {
        assert!(
            receipt_handles.len() <= 10,
            "DeleteMessageBatch takes at most 10 entries"
        );
        self.calls.lock().unwrap().push(Call::Delete {
            queue_url: queue_url.to_owned(),
            receipt_handles: receipt_handles.iter().map(|h| h.to_string()).collect(),
        });
        self.check_call(queue_url, "DeleteMessageBatch").await?;
        Ok(Vec::new())
    }
}
