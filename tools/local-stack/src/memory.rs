//! An in-memory SQS with the semantics redrive depends on, for volume runs moto cannot carry:
//! visibility timeouts, per-message delays, receive counts, the redrive policy (a message received
//! more than `maxReceiveCount` times moves to the DLQ), and FIFO message groups (one group's
//! messages are received in order, and not while an earlier one is in flight). Time is virtual: a
//! [`ManualClock`] that the driver moves on when nothing is visible.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive::clock::{Clock, ManualClock};
use redrive::envelope::OutgoingMessage;
use redrive::event::{Body, MessageAttributes, SqsRecord, Text};
use redrive::port::{EntryFailure, QueuePort, VisibilityChange};
use redrive::PortError;

#[derive(Debug, Clone)]
struct Stored {
    id: String,
    receipt: String,
    body: String,
    attributes: MessageAttributes<'static>,
    group: Option<String>,
    sent_ms: u64,
    /// `ApproximateFirstReceiveTimestamp`: a FIFO record's age in place is read from it.
    first_received_ms: Option<u64>,
    visible_at_ms: u64,
    receives: u32,
    /// The queue SQS moved it from (`DeadLetterQueueSourceArn`).
    moved_from: Option<String>,
}

#[derive(Debug)]
struct Queue {
    arn: String,
    fifo: bool,
    redrive: Option<(String, u32)>,
    messages: VecDeque<Stored>,
}

#[derive(Debug, Default)]
struct State {
    queues: HashMap<String, Queue>,
    next_id: u64,
}

/// The in-memory SQS. Queue URLs look like `mem://<name>`, ARNs like SQS's.
pub struct MemorySqs {
    state: Mutex<State>,
    clock: Arc<ManualClock>,
}

impl MemorySqs {
    pub fn new(clock: Arc<ManualClock>) -> Self {
        Self {
            state: Mutex::default(),
            clock,
        }
    }

    pub fn clock(&self) -> &Arc<ManualClock> {
        &self.clock
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a queue; `redrive` is the DLQ URL and maxReceiveCount. Returns (URL, ARN). Every
    /// receive names its visibility timeout, so the queue keeps none.
    pub fn create(&self, name: &str, redrive: Option<(&str, u32)>) -> (String, String) {
        let url = format!("mem://{name}");
        let arn = format!("arn:aws:sqs:us-east-1:123456789012:{name}");
        self.state().queues.insert(
            url.clone(),
            Queue {
                arn: arn.clone(),
                fifo: name.ends_with(".fifo"),
                redrive: redrive.map(|(dlq, max)| (dlq.to_owned(), max)),
                messages: VecDeque::new(),
            },
        );
        (url, arn)
    }

    /// Every message in the queue (visible, in flight or delayed).
    pub fn depth(&self, url: &str) -> usize {
        self.state()
            .queues
            .get(url)
            .map_or(0, |queue| queue.messages.len())
    }

    /// When the next message of `url` becomes visible, if any is waiting. On a FIFO queue only
    /// each group's earliest message counts: the later ones wait for it, visible or not.
    pub fn next_visible_ms(&self, url: &str) -> Option<u64> {
        let state = self.state();
        let queue = state.queues.get(url)?;
        let mut groups_seen = HashSet::new();
        queue
            .messages
            .iter()
            .filter(|m| !queue.fifo || groups_seen.insert(m.group.as_deref()))
            .map(|m| m.visible_at_ms)
            .min()
    }

    /// Bodies and attributes of every message in `url`, without receiving them.
    pub fn contents(&self, url: &str) -> Vec<(String, MessageAttributes<'static>)> {
        self.state().queues.get(url).map_or_else(Vec::new, |queue| {
            queue
                .messages
                .iter()
                .map(|m| (m.body.clone(), m.attributes.clone()))
                .collect()
        })
    }

    fn missing(operation: &'static str, url: &str) -> PortError {
        PortError::new(
            operation,
            format!("AWS.SimpleQueueService.NonExistentQueue: {url}"),
        )
    }
}

impl QueuePort for MemorySqs {
    async fn queue_url(&self, queue_arn: &str) -> Result<String, PortError> {
        self.state()
            .queues
            .iter()
            .find(|(_, queue)| queue.arn == queue_arn)
            .map(|(url, _)| url.clone())
            .ok_or_else(|| Self::missing("GetQueueUrl", queue_arn))
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
        let now = self.clock.now_ms();
        let mut state = self.state();
        let first_id = state.next_id;
        state.next_id += messages.len() as u64;
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| Self::missing("SendMessageBatch", queue_url))?;
        for (offset, message) in messages.iter().enumerate() {
            if queue.fifo && message.group_id.is_none() {
                return Err(PortError::new(
                    "SendMessageBatch",
                    "MessageGroupId is required on a FIFO queue",
                ));
            }
            queue.messages.push_back(Stored {
                id: format!("m{}", first_id + offset as u64),
                receipt: String::new(),
                body: message.body.to_string(),
                attributes: message
                    .attributes
                    .iter()
                    .map(|(name, value)| (name.clone().into_owned(), value.clone().into_owned()))
                    .collect(),
                group: message.group_id.as_deref().map(str::to_owned),
                sent_ms: now,
                first_received_ms: None,
                visible_at_ms: now + u64::from(message.delay_seconds) * 1000,
                receives: 0,
                moved_from: None,
            });
        }
        Ok(Vec::new())
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        let now = self.clock.now_ms();
        let mut state = self.state();
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| Self::missing("ChangeMessageVisibilityBatch", queue_url))?;
        let mut failures = Vec::new();
        for (index, change) in changes.iter().enumerate() {
            match queue
                .messages
                .iter_mut()
                .find(|m| m.receipt == change.receipt_handle)
            {
                Some(message) => {
                    message.visible_at_ms =
                        now + u64::try_from(change.timeout.as_millis()).unwrap_or(u64::MAX)
                }
                None => failures.push(EntryFailure {
                    index,
                    code: "ReceiptHandleIsInvalid".into(),
                    message: "no such receipt handle".into(),
                }),
            }
        }
        Ok(failures)
    }

    async fn receive(
        &self,
        queue_url: &str,
        max: u32,
        hold: Duration,
        _wait: Duration,
    ) -> Result<Vec<SqsRecord<'static>>, PortError> {
        let now = self.clock.now_ms();
        let mut state = self.state();
        let (fifo, redrive, arn) = {
            let queue = state
                .queues
                .get(queue_url)
                .ok_or_else(|| Self::missing("ReceiveMessage", queue_url))?;
            (queue.fifo, queue.redrive.clone(), queue.arn.clone())
        };
        let mut received = Vec::new();
        let mut moved = Vec::new();
        let queue = state.queues.get_mut(queue_url).expect("checked above");
        let hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
        // FIFO: a group whose earliest message is in flight or not visible yields nothing.
        let mut closed_groups: HashSet<String> = HashSet::new();
        let mut index = 0;
        while index < queue.messages.len() && received.len() < max as usize {
            let message = &mut queue.messages[index];
            let visible = message.visible_at_ms <= now;
            if fifo {
                let group = message.group.clone().unwrap_or_default();
                if closed_groups.contains(&group) || !visible {
                    closed_groups.insert(group);
                    index += 1;
                    continue;
                }
            } else if !visible {
                index += 1;
                continue;
            }
            if let Some((_, max_receives)) = &redrive {
                if message.receives >= *max_receives {
                    moved.push(queue.messages.remove(index).expect("index is in range"));
                    continue;
                }
            }
            message.receives += 1;
            message.first_received_ms.get_or_insert(now);
            message.visible_at_ms = now + hold_ms;
            message.receipt = format!("{}#{}", message.id, message.receives);
            // A FIFO group's later messages may come in the same receive, in order; after it, the
            // group waits until they are deleted or visible again (the check above).
            received.push(record_of(message));
            index += 1;
        }
        if let Some((dlq, _)) = redrive {
            if let Some(dlq) = state.queues.get_mut(&dlq) {
                for mut message in moved {
                    // SQS keeps the message id, body, attributes and sent time when it moves one,
                    // and says where it came from.
                    message.visible_at_ms = now;
                    message.receives = 0;
                    message.first_received_ms = None;
                    message.moved_from = Some(arn.clone());
                    dlq.messages.push_back(message);
                }
            }
        }
        Ok(received)
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        receipt_handles: &[&str],
    ) -> Result<Vec<EntryFailure>, PortError> {
        let mut state = self.state();
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| Self::missing("DeleteMessageBatch", queue_url))?;
        let handles: HashSet<&str> = receipt_handles.iter().copied().collect();
        // As SQS does, a stale receipt handle of a message received again still deletes it.
        let ids: HashSet<&str> = handles
            .iter()
            .filter_map(|handle| handle.split('#').next())
            .collect();
        queue.messages.retain(|m| !ids.contains(m.id.as_str()));
        Ok(Vec::new())
    }
}

fn record_of(message: &Stored) -> SqsRecord<'static> {
    let mut record = SqsRecord {
        message_id: Some(Text::from(message.id.clone())),
        receipt_handle: Some(Text::from(message.receipt.clone())),
        body: Some(Body::from(message.body.clone())),
        message_attributes: message.attributes.clone(),
        ..SqsRecord::default()
    };
    record.attributes.approximate_receive_count = Some(Text::from(message.receives.to_string()));
    record.attributes.sent_timestamp = Some(Text::from(message.sent_ms.to_string()));
    record.attributes.approximate_first_receive_timestamp = message
        .first_received_ms
        .map(|ms| Text::from(ms.to_string()));
    record.attributes.message_group_id = message.group.clone().map(Text::from);
    record.attributes.dead_letter_queue_source_arn = message.moved_from.clone().map(Text::from);
    record
}
