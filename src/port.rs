//! The one narrow port every SQS call goes through, and an in-memory implementation for unit tests.
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use crate::envelope::OutgoingMessage;
use crate::error::PortError;

/// One entry of a batch call that SQS refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFailure {
    /// Position of the entry in the slice passed to the call.
    pub index: usize,
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisibilityChange<'a> {
    pub receipt_handle: &'a str,
    pub timeout: Duration,
}

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
}

/// Records every call; can be told to refuse entries or whole calls. For unit tests.
#[derive(Default)]
pub struct RecordingQueue {
    calls: Mutex<Vec<Call>>,
    refuse_body: Mutex<Option<String>>,
    fail_calls_to: Mutex<Option<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Send {
        queue_url: String,
        messages: Vec<OutgoingMessage<'static>>,
    },
    ChangeVisibility {
        queue_url: String,
        changes: Vec<(String, Duration)>,
    },
}

impl RecordingQueue {
    /// Refuse every entry whose body contains `needle`.
    pub fn refuse_entries_containing(&self, needle: &str) {
        *self.refuse_body.lock().unwrap() = Some(needle.to_owned());
    }

    /// Fail every call to `queue_url` as a whole.
    pub fn fail_calls_to(&self, queue_url: &str) {
        *self.fail_calls_to.lock().unwrap() = Some(queue_url.to_owned());
    }

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

    fn check_call(&self, queue_url: &str, operation: &'static str) -> Result<(), PortError> {
        match self.fail_calls_to.lock().unwrap().as_deref() {
            Some(url) if url == queue_url => Err(PortError::new(operation, "injected failure")),
            _ => Ok(()),
        }
    }
}

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
        self.check_call(queue_url, "SendMessageBatch")?;
        let refuse = self.refuse_body.lock().unwrap().clone();
        Ok(messages
            .iter()
            .enumerate()
            .filter(|(_, message)| {
                refuse
                    .as_deref()
                    .is_some_and(|needle| message.body.contains(needle))
            })
            .map(|(index, _)| EntryFailure {
                index,
                code: "InternalError".into(),
                message: "injected".into(),
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
        self.check_call(queue_url, "ChangeMessageVisibilityBatch")?;
        Ok(Vec::new())
    }
}
