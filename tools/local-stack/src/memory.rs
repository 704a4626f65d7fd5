//! An in-memory SQS that behaves as AWS documents SQS, for volume runs moto cannot carry. Time is
//! virtual: a [`ManualClock`] that the driver moves on when nothing is visible. Each behaviour
//! names the page it comes from; docs/reliability.md tables them, and the conformance suite
//! (`crate::conformance`) runs the same scenarios here, on moto and on LocalStack.
//!
//! Where AWS's documentation is silent, the model takes the harsher reading and says so.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive::envelope::OutgoingMessage;
use redrive::event::{Body, MessageAttributes, SqsRecord, Text};
use redrive::port::{Clock, EntryFailure, QueuePort, VisibilityChange};
use redrive::testing::ManualClock;
use redrive::PortError;

/// SQS's default `MessageRetentionPeriod`: 4 days (CreateQueue, API reference).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(345_600);
/// How many messages a FIFO receive looks at to find groups it can deliver (SQS developer guide,
/// "Avoid large message backlogs with the same message group ID").
pub const FIFO_SCAN_WINDOW: usize = 120_000;

/// A FIFO queue drops a message sent with a deduplication id taken this recently.
const DEDUPLICATION_INTERVAL_MS: u64 = 5 * 60_000;
/// The longest a message can stay invisible from one receive (ChangeMessageVisibility, API
/// reference: "you can't extend the timeout … to more than a total visibility timeout of 12 hours").
pub const VISIBILITY_LIMIT: Duration = Duration::from_secs(12 * 3600);
/// SendMessageBatch, ChangeMessageVisibilityBatch and DeleteMessageBatch: at most 10 entries, and a
/// send batch at most 1 MiB together (SendMessageBatch, API reference).
const BATCH_ENTRIES: usize = 10;
const BATCH_BYTES: usize = 1_048_576;
/// `ApproximateAgeOfOldestMessage` leaves out a message received three times or more (CloudWatch
/// metrics for Amazon SQS).
const AGE_METRIC_RECEIVES: u32 = 3;

/// A queue's settings, as CreateQueue takes them.
#[derive(Debug, Clone)]
pub struct QueueSpec {
    /// A FIFO queue (its name must end in `.fifo`, as SQS requires).
    pub fifo: bool,
    /// `MessageRetentionPeriod`.
    pub retention: Duration,
    /// The redrive policy: the DLQ's ARN and `maxReceiveCount`.
    pub redrive: Option<(String, u32)>,
}

impl QueueSpec {
    /// A queue with SQS's defaults: FIFO if `name` ends in `.fifo`, 4 days' retention, no DLQ.
    pub fn named(name: &str) -> Self {
        Self {
            fifo: name.ends_with(".fifo"),
            retention: DEFAULT_RETENTION,
            redrive: None,
        }
    }

    /// The same queue with a redrive policy to the DLQ `dlq_arn`.
    pub fn dead_letters_to(mut self, dlq_arn: &str, max_receive_count: u32) -> Self {
        self.redrive = Some((dlq_arn.to_owned(), max_receive_count));
        self
    }

    /// The same queue keeping messages for `retention`.
    pub fn retaining(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }
}

#[derive(Debug, Clone)]
struct Stored {
    id: String,
    receipt: String,
    body: String,
    attributes: MessageAttributes<'static>,
    group: Option<String>,
    /// `SentTimestamp`: kept when SQS moves the message to a DLQ.
    sent_ms: u64,
    /// The enqueue time retention counts from: a standard DLQ keeps the source's, a FIFO DLQ
    /// starts it anew (SQS developer guide, "dead-letter queue retention").
    enqueued_ms: u64,
    /// When it arrived in this queue (sent or moved): the age metric counts from it.
    arrived_ms: u64,
    /// `ApproximateFirstReceiveTimestamp`.
    first_received_ms: Option<u64>,
    /// The receive whose receipt handle is current: the 12-hour limit counts from it.
    received_ms: u64,
    /// FIFO: when the message before it in its group left the queue (deleted or moved), so that it
    /// could be delivered from then on.
    head_since_ms: u64,
    visible_at_ms: u64,
    receives: u32,
    /// The queue SQS moved it from (`DeadLetterQueueSourceArn`).
    moved_from: Option<String>,
}

#[derive(Debug)]
struct Queue {
    arn: String,
    spec: QueueSpec,
    messages: VecDeque<Stored>,
    /// The earliest time a message of the queue expires: retention is enforced when it passes.
    next_expiry_ms: u64,
    /// Messages SQS deleted at their retention, never received to the end.
    expired: Vec<String>,
    /// `NumberOfMessagesSent`: sends only, not the redrive policy's moves (CloudWatch metrics for
    /// Amazon SQS).
    sent: u64,
    /// FIFO: when each deduplication id was last taken, received and deleted or not.
    deduplicated: HashMap<String, u64>,
}

impl Queue {
    fn retention_ms(&self) -> u64 {
        u64::try_from(self.spec.retention.as_millis()).unwrap_or(u64::MAX)
    }

    /// Deletes what has outlived the retention period, silently, as SQS does.
    fn expire(&mut self, now: u64) {
        if now < self.next_expiry_ms {
            return;
        }
        let retention = self.retention_ms();
        let mut next = u64::MAX;
        let expired = &mut self.expired;
        self.messages.retain(|message| {
            let expires = message.enqueued_ms.saturating_add(retention);
            if expires <= now {
                expired.push(message.id.clone());
                return false;
            }
            next = next.min(expires);
            true
        });
        self.next_expiry_ms = next;
    }

    /// The new first message of each of `groups`, one of whose messages just left, may be
    /// delivered from `now`.
    fn mark_heads(&mut self, groups: &[Option<String>], now: u64) {
        if !self.spec.fifo {
            return;
        }
        for group in groups {
            if let Some(head) = self.messages.iter_mut().find(|m| &m.group == group) {
                head.head_since_ms = head.head_since_ms.max(now);
            }
        }
    }

    fn admit(&mut self, message: Stored) {
        self.next_expiry_ms = self
            .next_expiry_ms
            .min(message.enqueued_ms.saturating_add(self.retention_ms()));
        self.messages.push_back(message);
    }
}

#[derive(Debug)]
struct State {
    queues: HashMap<String, Queue>,
    next_id: u64,
    fifo_scan_window: usize,
}

/// The in-memory SQS. Queue URLs look like `mem://<name>`, ARNs like SQS's.
pub struct MemorySqs {
    state: Mutex<State>,
    clock: Arc<ManualClock>,
}

impl MemorySqs {
    pub fn new(clock: Arc<ManualClock>) -> Self {
        Self {
            state: Mutex::new(State {
                queues: HashMap::new(),
                next_id: 0,
                fifo_scan_window: FIFO_SCAN_WINDOW,
            }),
            clock,
        }
    }

    /// The same SQS with FIFO receives looking at `window` messages instead of 120,000, so that a
    /// test can pass the window without sending 120,000 messages.
    pub fn with_fifo_scan_window(self, window: usize) -> Self {
        self.state().fifo_scan_window = window;
        self
    }

    pub fn clock(&self) -> &Arc<ManualClock> {
        &self.clock
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a queue. Returns (URL, ARN). Every receive names its visibility timeout, so the
    /// queue keeps none.
    pub fn create(&self, name: &str, spec: QueueSpec) -> (String, String) {
        let url = format!("mem://{name}");
        let arn = format!("arn:aws:sqs:us-east-1:123456789012:{name}");
        self.state().queues.insert(
            url.clone(),
            Queue {
                arn: arn.clone(),
                spec,
                messages: VecDeque::new(),
                next_expiry_ms: u64::MAX,
                expired: Vec::new(),
                sent: 0,
                deduplicated: HashMap::new(),
            },
        );
        (url, arn)
    }

    /// The queue at `url`, its expired messages gone.
    fn with_queue<T>(&self, url: &str, read: impl FnOnce(&Queue) -> T) -> Option<T> {
        let now = self.clock.now_ms();
        let mut state = self.state();
        let queue = state.queues.get_mut(url)?;
        queue.expire(now);
        Some(read(queue))
    }

    /// Every message in the queue (visible, in flight or delayed).
    pub fn depth(&self, url: &str) -> usize {
        self.with_queue(url, |queue| queue.messages.len())
            .unwrap_or(0)
    }

    /// The ids of the messages SQS deleted from `url` at their retention.
    pub fn expired(&self, url: &str) -> Vec<String> {
        self.with_queue(url, |queue| queue.expired.clone())
            .unwrap_or_default()
    }

    /// `NumberOfMessagesSent` since the queue was made.
    pub fn sent(&self, url: &str) -> u64 {
        self.with_queue(url, |queue| queue.sent).unwrap_or(0)
    }

    /// `ApproximateAgeOfOldestMessage`: the oldest message received fewer than three times, counted
    /// from when it arrived in this queue (for a DLQ, when it was moved there).
    pub fn age_of_oldest(&self, url: &str) -> Option<Duration> {
        let now = self.clock.now_ms();
        self.with_queue(url, |queue| {
            queue
                .messages
                .iter()
                .filter(|m| m.receives < AGE_METRIC_RECEIVES)
                .map(|m| Duration::from_millis(now.saturating_sub(m.arrived_ms)))
                .max()
        })
        .flatten()
    }

    /// The longest a message that a receive could take now has waited for one: a FIFO group's
    /// first message, visible, or any visible message of a standard queue, counted from when it
    /// became visible or arrived. Receives taking them keep it short; SQS's FIFO scan window, past
    /// a large backlog of one group, lets it grow for every group behind.
    pub fn longest_deliverable_wait(&self, url: &str) -> Duration {
        let now = self.clock.now_ms();
        self.with_queue(url, |queue| {
            let mut groups_seen = HashSet::new();
            queue
                .messages
                .iter()
                .filter(|m| !queue.spec.fifo || groups_seen.insert(m.group.as_deref()))
                .filter(|m| m.visible_at_ms <= now)
                .map(|m| {
                    let since = m.visible_at_ms.max(m.arrived_ms).max(m.head_since_ms);
                    Duration::from_millis(now.saturating_sub(since))
                })
                .max()
        })
        .flatten()
        .unwrap_or_default()
    }

    /// When a receive of `url` could next return a message, if any is waiting. On a FIFO queue
    /// only each group's earliest message counts (the later ones wait for it, visible or not), and
    /// only within the scan window.
    pub fn next_visible_ms(&self, url: &str) -> Option<u64> {
        let window = self.state().fifo_scan_window;
        self.with_queue(url, |queue| {
            let mut groups_seen = HashSet::new();
            let scanned = if queue.spec.fifo { window } else { usize::MAX };
            queue
                .messages
                .iter()
                .take(scanned)
                .filter(|m| !queue.spec.fifo || groups_seen.insert(m.group.as_deref()))
                .map(|m| m.visible_at_ms)
                .min()
        })
        .flatten()
    }

    /// Bodies and attributes of every message in `url`, without receiving them.
    pub fn contents(&self, url: &str) -> Vec<(String, MessageAttributes<'static>)> {
        self.with_queue(url, |queue| {
            queue
                .messages
                .iter()
                .map(|m| (m.body.clone(), m.attributes.clone()))
                .collect()
        })
        .unwrap_or_default()
    }

    fn missing(operation: &'static str, url: &str) -> PortError {
        PortError::new(
            operation,
            format!("AWS.SimpleQueueService.NonExistentQueue: {url}"),
        )
    }

    fn too_many(operation: &'static str, entries: usize) -> Option<PortError> {
        (entries > BATCH_ENTRIES).then(|| {
            PortError::new(
                operation,
                format!("AWS.SimpleQueueService.TooManyEntriesInBatchRequest: {entries} entries, at most {BATCH_ENTRIES}"),
            )
        })
    }
}

fn millis(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

fn entry_failure(index: usize, code: &str, message: &str) -> EntryFailure {
    EntryFailure {
        index,
        code: code.into(),
        message: message.into(),
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
        const OPERATION: &str = "SendMessageBatch";
        if let Some(error) = Self::too_many(OPERATION, messages.len()) {
            return Err(error);
        }
        let bytes: usize = messages.iter().map(OutgoingMessage::size).sum();
        if bytes > BATCH_BYTES {
            return Err(PortError::new(
                OPERATION,
                format!("AWS.SimpleQueueService.BatchRequestTooLong: {bytes} bytes, at most {BATCH_BYTES}"),
            ));
        }
        let now = self.clock.now_ms();
        let mut state = self.state();
        let first_id = state.next_id;
        state.next_id += messages.len() as u64;
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| Self::missing(OPERATION, queue_url))?;
        // SendMessageBatchRequestEntry: "When you set FifoQueue, you can't set DelaySeconds per
        // message." The page does not say whether the entry or the call fails: the call does here.
        if queue.spec.fifo && messages.iter().any(|m| m.delay_seconds > 0) {
            return Err(PortError::new(
                OPERATION,
                "InvalidParameterValue: a FIFO queue takes no DelaySeconds per message",
            ));
        }
        if queue.spec.fifo && messages.iter().any(|m| m.group_id.is_none()) {
            return Err(PortError::new(
                OPERATION,
                "MissingParameter: MessageGroupId is required on a FIFO queue",
            ));
        }
        let mut refused = Vec::new();
        for (offset, message) in messages.iter().enumerate() {
            // SendMessage, MessageBody: at least one character, and only the characters SQS
            // takes; an entry that breaks either fails alone.
            if message.body.is_empty() {
                refused.push(entry_failure(offset, "InvalidParameterValue", "empty body"));
                continue;
            }
            if !redrive::envelope::sqs_accepts(&message.body) {
                refused.push(entry_failure(
                    offset,
                    "InvalidMessageContents",
                    "invalid characters",
                ));
                continue;
            }
            // SendMessage, MessageDeduplicationId: a message sent with an id taken within the
            // 5-minute deduplication interval is accepted but not delivered (the id is tracked
            // after its message is deleted too: SQS developer guide, "FIFO queue key terms").
            if let (true, Some(id)) = (queue.spec.fifo, message.deduplication_id.as_deref()) {
                match queue.deduplicated.get(id) {
                    Some(&taken) if now < taken + DEDUPLICATION_INTERVAL_MS => continue,
                    _ => {
                        queue.deduplicated.insert(id.to_owned(), now);
                    }
                }
            }
            queue.sent += 1;
            queue.admit(Stored {
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
                enqueued_ms: now,
                arrived_ms: now,
                first_received_ms: None,
                received_ms: now,
                head_since_ms: now,
                visible_at_ms: now + u64::from(message.delay_seconds) * 1000,
                receives: 0,
                moved_from: None,
            });
        }
        Ok(refused)
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        changes: &[VisibilityChange<'_>],
    ) -> Result<Vec<EntryFailure>, PortError> {
        const OPERATION: &str = "ChangeMessageVisibilityBatch";
        if let Some(error) = Self::too_many(OPERATION, changes.len()) {
            return Err(error);
        }
        let now = self.clock.now_ms();
        let mut state = self.state();
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| Self::missing(OPERATION, queue_url))?;
        queue.expire(now);
        let mut failures = Vec::new();
        for (index, change) in changes.iter().enumerate() {
            let id = message_id_of(change.receipt_handle);
            let Some(message) = queue.messages.iter_mut().find(|m| m.id == id) else {
                failures.push(entry_failure(
                    index,
                    "ReceiptHandleIsInvalid",
                    "no such message",
                ));
                continue;
            };
            let deadline = now.saturating_add(millis(change.timeout));
            if message.receipt != change.receipt_handle {
                // Undocumented: the harsher reading, a handle of an earlier receive changes nothing.
                failures.push(entry_failure(
                    index,
                    "ReceiptHandleIsInvalid",
                    "the message was received again since",
                ));
            } else if message.visible_at_ms <= now {
                // ChangeMessageVisibility, API reference: MessageNotInflight.
                failures.push(entry_failure(
                    index,
                    "AWS.SimpleQueueService.MessageNotInflight",
                    "the message is not in flight",
                ));
            } else if change.timeout > VISIBILITY_LIMIT
                || deadline > message.received_ms + millis(VISIBILITY_LIMIT)
            {
                failures.push(entry_failure(
                    index,
                    "InvalidParameterValue",
                    "the visibility timeout would pass 12 hours from the receive",
                ));
            } else {
                message.visible_at_ms = deadline;
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
        const OPERATION: &str = "ReceiveMessage";
        if hold > VISIBILITY_LIMIT {
            return Err(PortError::new(
                OPERATION,
                "InvalidParameterValue: VisibilityTimeout is at most 43200 seconds",
            ));
        }
        let now = self.clock.now_ms();
        let mut state = self.state();
        let window = state.fifo_scan_window;
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| Self::missing(OPERATION, queue_url))?;
        queue.expire(now);
        let (fifo, redrive, arn) = (
            queue.spec.fifo,
            queue.spec.redrive.clone(),
            queue.arn.clone(),
        );
        let mut received = Vec::new();
        let mut moved = Vec::new();
        let hold_ms = millis(hold);
        // FIFO: a group whose earliest message is in flight or not visible yields nothing, and
        // only the first `window` messages are looked at.
        let mut closed_groups: HashSet<String> = HashSet::new();
        let mut index = 0;
        let scanned = |len: usize| if fifo { len.min(window) } else { len };
        while index < scanned(queue.messages.len()) && received.len() < max as usize {
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
            // The redrive policy moves a message when a receive finds it past maxReceiveCount.
            if let Some((_, max_receives)) = &redrive {
                if message.receives >= *max_receives {
                    moved.push(queue.messages.remove(index).expect("index is in range"));
                    continue;
                }
            }
            message.receives += 1;
            message.first_received_ms.get_or_insert(now);
            message.received_ms = now;
            message.visible_at_ms = now + hold_ms;
            message.receipt = format!("{}#{}", message.id, message.receives);
            // A FIFO group's later messages may come in the same receive, in order; after it, the
            // group waits until they are deleted or visible again (the check above).
            received.push(record_of(message));
            index += 1;
        }
        let left_groups: Vec<Option<String>> = moved.iter().map(|m| m.group.clone()).collect();
        queue.mark_heads(&left_groups, now);
        if let Some((dlq_arn, _)) = redrive {
            if let Some(dlq) = state.queues.values_mut().find(|q| q.arn == dlq_arn) {
                for mut message in moved {
                    // SQS keeps the message id, body, attributes and sent time when it moves one,
                    // and says where it came from.
                    message.visible_at_ms = now;
                    message.receives = 0;
                    message.first_received_ms = None;
                    message.arrived_ms = now;
                    if dlq.spec.fifo {
                        message.enqueued_ms = now;
                    }
                    message.moved_from = Some(arn.clone());
                    dlq.admit(message);
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
        const OPERATION: &str = "DeleteMessageBatch";
        if let Some(error) = Self::too_many(OPERATION, receipt_handles.len()) {
            return Err(error);
        }
        let mut state = self.state();
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| Self::missing(OPERATION, queue_url))?;
        // DeleteMessage, API reference: with an older receipt handle "the request will still
        // succeed, but the message might not be deleted". The harsher reading: it is not.
        let current: HashSet<&str> = receipt_handles.iter().copied().collect();
        let mut left_groups = Vec::new();
        queue.messages.retain(|m| {
            let deleted = !m.receipt.is_empty() && current.contains(m.receipt.as_str());
            if deleted {
                left_groups.push(m.group.clone());
            }
            !deleted
        });
        queue.mark_heads(&left_groups, self.clock.now_ms());
        Ok(Vec::new())
    }
}

/// The message a receipt handle names (`<id>#<receive>`).
fn message_id_of(receipt_handle: &str) -> &str {
    receipt_handle.split('#').next().unwrap_or_default()
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
    // A FIFO message's `SequenceNumber` grows in sending order, as its id's number does.
    record.attributes.sequence_number = message
        .group
        .as_ref()
        .map(|_| Text::from(message.id.trim_start_matches('m').to_owned()));
    record.attributes.dead_letter_queue_source_arn = message.moved_from.clone().map(Text::from);
    record
}

#[cfg(test)]
mod tests;
