//! EventBridge redrive: re-delivers an event that failed at one target to that target only.
//!
//! Two sources feed it, both SQS queues read through an event source mapping:
//! - a rule target's dead-letter queue, where EventBridge writes the original event as the body
//!   with the attributes `RULE_ARN`, `TARGET_ARN`, `ERROR_CODE`, `ERROR_MESSAGE`,
//!   `EXHAUSTED_RETRY_CONDITION` and `RETRY_ATTEMPTS`;
//! - a Lambda function's on-failure destination, where Lambda writes an invocation record whose
//!   `requestPayload` is the event (asynchronous invocations, as EventBridge makes them).
//!
//! A `PutEvents` back onto the bus would reach every matching rule and duplicate the event at the
//! targets that already had it, so the event goes straight to the failed target, its bytes
//! unchanged: SendMessage for an SQS target (in the message group the rule gives it, for a FIFO
//! queue), a synchronous Invoke for a Lambda target. Any other target is parked.
//!
//! The Invoke is synchronous so that the function's answer comes back here: a function error is
//! this record's failure, retried by the processor and parked when its attempts are used up. An
//! asynchronous Invoke would send a failure to the on-failure destination again, a loop that only
//! a mark in the event could break.
//!
//! Fates come from the [`redrive_core::Processor`]: delivered events are done; a delivery that fails is
//! transient (retried with backoff); parked events are permanent failures, sent to the redrive
//! function's own DLQ (the parking queue) with the redrive metadata, to be redriven by an operator
//! once the cause is fixed.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::settings::EventRedriveSettings;
use redrive_core::clock::{Clock, SystemClock};
use redrive_core::envelope::OutgoingMessage;
use redrive_core::error::{PortError, RecordError};
use redrive_core::handler::{Message, RecordHandler};
use redrive_core::port::QueuePort;
use redrive_core::reprocess_policy::eligible_at;
use redrive_event::Text;

/// Key in the `custom` map of the client context a redelivered function is invoked with: which
/// redelivery this is (`"1"` for the first). The event itself is passed unchanged.
pub const REDRIVE_COUNT_KEY: &str = "redrive-count";

/// Key in the `custom` map of the client context: the EventBridge event's `id`, the same on every
/// redelivery, so that a target deduplicates a run it may already have made (an invoke whose
/// answer was lost may have run the function).
pub const REDRIVE_EVENT_ID_KEY: &str = "redrive-event-id";

/// The client context (JSON, before Lambda's base64) of the `count`th redelivery of the event
/// `event_id`.
pub fn client_context(count: u32, event_id: &str) -> String {
    serde_json::json!({
        "custom": { REDRIVE_COUNT_KEY: count.to_string(), REDRIVE_EVENT_ID_KEY: event_id }
    })
    .to_string()
}

/// How long a redelivery waits when Lambda throttled the target and said nothing of when to come
/// back.
const THROTTLED_WAIT: Duration = Duration::from_secs(10);

/// Prefix of the Lambda `errorType` a function reports for a failure retrying cannot fix (see
/// [`error_type`]); invocation records carrying it are parked, not redriven.
pub const PERMANENT_ERROR_TYPE: &str = "redrive.permanent";

/// The `errorType` for a function error of `kind`: `redrive.permanent.<kind>` for permanent
/// errors, `redrive.transient.<kind>` otherwise.
pub fn error_type(error: &RecordError) -> String {
    match error.class() {
        redrive_core::ErrorClass::Transient => format!("redrive.transient.{}", error.kind()),
        _ => format!("{PERMANENT_ERROR_TYPE}.{}", error.kind()),
    }
}

/// How a function answered a synchronous invoke.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// It returned without an error.
    Succeeded,
    /// Lambda throttled the invoke (`TooManyRequestsException`, HTTP 429): the function did not
    /// run, so the redelivery waits without spending an attempt.
    Throttled {
        /// When Lambda said to come back, if it did.
        retry_after: Option<Duration>,
    },
    /// It failed (Lambda set `X-Amz-Function-Error`), with the `errorType` and `errorMessage` of
    /// its error payload when it had them.
    Failed {
        /// The function's `errorType`.
        error_type: Option<String>,
        /// The function's `errorMessage`.
        error_message: Option<String>,
    },
}

/// The one port for Lambda calls.
pub trait InvokePort: Send + Sync {
    /// Invoke with InvocationType `RequestResponse` and wait for the function's answer. `payload`
    /// is passed as it is; `client_context` (JSON) reaches the function's context; `trace_header`
    /// (the failed delivery's X-Ray header) is the invocation's `X-Amzn-Trace-Id`, so the
    /// function's trace continues the event's. [`Reply::Throttled`] when Lambda refused it for
    /// throughput; `Err` when the call failed otherwise (missing, not allowed, or an answer that
    /// never came: the function may have run). The port does not retry: a retried invoke may run
    /// the function twice.
    fn invoke(
        &self,
        function_arn: &str,
        payload: &str,
        client_context: &str,
        trace_header: Option<&str>,
    ) -> impl Future<Output = Result<Reply, PortError>> + Send;
}

/// An event that failed to reach a target, as one of the two sources delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailedEvent<'a> {
    /// From a rule target's DLQ.
    TargetDlq {
        /// The rule that routed the event.
        rule_arn: &'a str,
        /// The target it could not reach.
        target_arn: &'a str,
        /// EventBridge's error code.
        error_code: &'a str,
        /// EventBridge's error message.
        error_message: &'a str,
        /// The event, as the target would have had it.
        event: &'a str,
    },
    /// From a function's on-failure destination.
    InvocationRecord {
        /// The function that failed (qualified: `:$LATEST`, a version or an alias).
        function_arn: Text<'a>,
        /// Why Lambda gave up (`RetriesExhausted`, `EventAgeExceeded`).
        condition: Text<'a>,
        /// The function's `errorType`, if it answered with one.
        error_type: Option<String>,
        /// The function's `errorMessage`, if it answered with one.
        error_message: Option<String>,
        /// The event the function was invoked with.
        event: &'a str,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InvocationRecord<'a> {
    #[serde(borrow)]
    request_context: RequestContext<'a>,
    #[serde(borrow)]
    request_payload: &'a RawValue,
    #[serde(default)]
    response_payload: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestContext<'a> {
    #[serde(borrow)]
    function_arn: Text<'a>,
    #[serde(borrow, default)]
    condition: Text<'a>,
}

impl<'a> FailedEvent<'a> {
    /// Reads a message of either source. Anything else is a permanent `not_a_failed_event`.
    pub fn read(message: &Message<'a>) -> Result<Self, RecordError> {
        let attribute = |name: &str| {
            message
                .attribute(name)
                .and_then(|value| value.string_value.as_deref())
        };
        if let Some(target_arn) = attribute("TARGET_ARN") {
            return Ok(Self::TargetDlq {
                rule_arn: attribute("RULE_ARN").unwrap_or_default(),
                target_arn,
                error_code: attribute("ERROR_CODE").unwrap_or_default(),
                error_message: attribute("ERROR_MESSAGE").unwrap_or_default(),
                event: message.body(),
            });
        }
        let record: InvocationRecord<'a> =
            serde_json::from_str(message.body()).map_err(|error| {
                RecordError::permanent(
                    "not_a_failed_event",
                    format!(
                    "neither an EventBridge DLQ message (no TARGET_ARN attribute) nor a Lambda \
                     invocation record ({error})"
                ),
                )
            })?;
        let field = |name: &str| {
            record
                .response_payload
                .as_ref()
                .and_then(|payload| payload.get(name))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        Ok(Self::InvocationRecord {
            error_type: field("errorType"),
            error_message: field("errorMessage"),
            function_arn: record.request_context.function_arn,
            condition: record.request_context.condition,
            event: record.request_payload.get(),
        })
    }
}

/// The record handler of `functions/eventbridge-redrive`.
pub struct EventRedrive<Q, L> {
    queue: Q,
    lambda: L,
    settings: EventRedriveSettings,
    clock: Arc<dyn Clock>,
}

impl<Q: QueuePort, L: InvokePort> EventRedrive<Q, L> {
    /// A redrive that sends to queues through `queue` and invokes functions through `lambda`.
    pub fn new(queue: Q, lambda: L, settings: EventRedriveSettings) -> Self {
        Self {
            queue,
            lambda,
            settings,
            clock: Arc::new(SystemClock),
        }
    }

    /// Reads the time from `clock` (tests move it by hand).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The Lambda port (tests read what it was asked).
    pub fn lambda(&self) -> &L {
        &self.lambda
    }

    /// The SQS port (tests read what it was asked).
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    async fn redeliver(
        &self,
        message: &Message<'_>,
        target_arn: &str,
        event: &str,
    ) -> Result<(), RecordError> {
        if let Some(wait) = self.not_due_for(message) {
            return Err(RecordError::defer("redrive_not_due", wait));
        }
        let trace_header = message.record().attributes.aws_trace_header.as_ref();
        match target_kind(target_arn) {
            Some(Target::Queue) => self.send(target_arn, event, trace_header.cloned()).await,
            Some(Target::Function) => {
                let redelivery = message.meta().map_or(0, |meta| meta.attempts) + 1;
                let event_id = serde_json::from_str::<EventId<'_>>(event)
                    .map(|e| e.id)
                    .unwrap_or_default();
                let reply = self
                    .lambda
                    .invoke(
                        target_arn,
                        event,
                        &client_context(redelivery, &event_id),
                        trace_header.map(|header| &**header),
                    )
                    .await
                    .map_err(|error| delivery_error("invoke_failed", error))?;
                match reply {
                    Reply::Succeeded => Ok(()),
                    Reply::Throttled { retry_after } => Err(RecordError::defer(
                        "target_throttled",
                        retry_after.unwrap_or(THROTTLED_WAIT),
                    )),
                    Reply::Failed {
                        error_type,
                        error_message,
                    } => Err(function_error(
                        target_arn,
                        error_type.as_deref(),
                        error_message.as_deref(),
                    )),
                }
            }
            None => Err(RecordError::permanent(
                "unsupported_target",
                format!(
                    "target {target_arn} is neither an SQS queue nor a Lambda function; a \
                     PutEvents would reach every matching rule, so it is parked for an operator \
                     (docs/redrive.md: EventBridge targets other than SQS and Lambda)"
                ),
            )),
        }
    }

    /// How long the event must still wait: `REDRIVE_REPROCESS_AFTER` after its failure (the time the
    /// failure was written to the queue). Only a first arrival waits: a copy carries metadata
    /// because it has waited already, was retried after a failed delivery, or was sent back by an
    /// operator.
    fn not_due_for(&self, message: &Message<'_>) -> Option<Duration> {
        if message.meta().is_some() {
            return None;
        }
        let now = self.clock.now_ms();
        let failed_at = message
            .record()
            .attributes
            .sent_timestamp
            .as_deref()
            .and_then(|sent| sent.parse().ok())
            .unwrap_or(now);
        let due = eligible_at(self.settings.eligible_after, failed_at, 0);
        (due > now).then(|| Duration::from_millis(due - now))
    }

    /// The original event, byte for byte, as the body EventBridge would have sent; to a FIFO queue
    /// in the message group the rule's target names (`REDRIVE_FIFO_TARGET_GROUPS`), deduplicated by
    /// the event's id; with the trace header of the delivery that failed.
    async fn send(
        &self,
        queue_arn: &str,
        event: &str,
        trace_header: Option<Text<'_>>,
    ) -> Result<(), RecordError> {
        let group_id = if queue_arn.ends_with(".fifo") {
            let group = self.settings.fifo_group(queue_arn).ok_or_else(|| {
                RecordError::permanent(
                    "fifo_group_unknown",
                    format!(
                        "target {queue_arn} is a FIFO queue and REDRIVE_FIFO_TARGET_GROUPS names no \
                         message group for it; set the group its rule target uses, then redrive \
                         the parked event"
                    ),
                )
            })?;
            Some(Text::from(group))
        } else {
            None
        };
        let url = self
            .queue
            .queue_url(queue_arn)
            .await
            .map_err(|error| delivery_error("send_failed", error))?;
        let deduplication_id = group_id.is_some().then(|| {
            serde_json::from_str::<EventId<'_>>(event)
                .map(|e| e.id)
                .unwrap_or_default()
        });
        let message = OutgoingMessage {
            body: Text::from(event),
            attributes: Vec::new(),
            delay_seconds: 0,
            group_id,
            deduplication_id,
            trace_header,
        };
        match self.queue.send_batch(&url, &[message]).await {
            Ok(refused) if refused.is_empty() => Ok(()),
            Ok(refused) => Err(RecordError::transient(
                "send_failed",
                format!("SQS refused the event: {}", refused[0].message),
            )),
            Err(error) => Err(delivery_error("send_failed", error)),
        }
    }
}

#[derive(Deserialize)]
struct EventId<'a> {
    #[serde(borrow, default)]
    id: Text<'a>,
}

impl<Q: QueuePort, L: InvokePort> RecordHandler for EventRedrive<Q, L> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        match FailedEvent::read(message)? {
            FailedEvent::TargetDlq {
                target_arn,
                error_code,
                error_message,
                event,
                ..
            } => {
                // An operator who redrove a parked event from the parking queue has fixed the
                // cause: its ERROR_CODE is history then.
                let redriven_by_operator = message.meta().is_some_and(|m| m.reprocess_count > 0);
                if !redriven_by_operator
                    && self
                        .settings
                        .parked_error_codes
                        .iter()
                        .any(|c| c == error_code)
                {
                    return Err(RecordError::permanent(
                        format!("parked_{}", error_code.to_ascii_lowercase()),
                        format!(
                            "EventBridge could not deliver to {target_arn}: {error_code} \
                             ({error_message}); retrying cannot help until it is fixed"
                        ),
                    ));
                }
                self.redeliver(message, target_arn, event).await
            }
            FailedEvent::InvocationRecord {
                function_arn,
                error_type,
                error_message,
                event,
                ..
            } => {
                // The function's error on its last asynchronous try: what it called permanent
                // is parked; anything else is tried again.
                if error_type
                    .as_deref()
                    .is_some_and(|t| t.starts_with(PERMANENT_ERROR_TYPE))
                {
                    return Err(function_error(
                        &function_arn,
                        error_type.as_deref(),
                        error_message.as_deref(),
                    ));
                }
                self.redeliver(message, &function_arn, event).await
            }
        }
    }
}

enum Target {
    Queue,
    Function,
}

fn target_kind(arn: &str) -> Option<Target> {
    match arn.split(':').nth(2) {
        Some("sqs") => Some(Target::Queue),
        Some("lambda") => Some(Target::Function),
        _ => None,
    }
}

/// A function's own error: permanent when its `errorType` says so ([`error_type`]), transient
/// otherwise (retried, then parked when the attempts are used up).
fn function_error(
    function_arn: &str,
    error_type: Option<&str>,
    error_message: Option<&str>,
) -> RecordError {
    let message = format!(
        "{function_arn} failed with {}: {}",
        error_type.unwrap_or("an error"),
        error_message.unwrap_or_default()
    );
    if error_type.is_some_and(|t| t.starts_with(PERMANENT_ERROR_TYPE)) {
        RecordError::permanent("function_permanent_error", message)
    } else {
        RecordError::transient("function_error", message)
    }
}

/// Missing targets and missing permissions do not heal by retrying; anything else may.
fn delivery_error(kind: &'static str, error: PortError) -> RecordError {
    const LASTING: [&str; 5] = [
        "AccessDenied",
        "ResourceNotFound",
        "NonExistentQueue",
        "QueueDoesNotExist",
        "is not an SQS queue ARN",
    ];
    if LASTING.iter().any(|code| error.message.contains(code)) {
        RecordError::permanent(kind, error)
    } else {
        RecordError::transient(kind, error)
    }
}

#[cfg(any(test, feature = "test-util"))]
/// One invoke a [`RecordingInvoker`] ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoke {
    /// The function named.
    pub function_arn: String,
    /// The payload, as passed.
    pub payload: String,
    /// The client context (JSON).
    pub client_context: String,
    /// The `X-Amzn-Trace-Id` it was invoked with.
    pub trace_header: Option<String>,
}

#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
/// Records every invoke and answers it: the function succeeds unless told to fail, and Lambda runs
/// it unless told to refuse. For tests: moto cannot run Lambda code without Docker.
#[derive(Default)]
pub struct RecordingInvoker {
    invokes: std::sync::Mutex<Vec<Invoke>>,
    refused: std::sync::Mutex<Option<(String, String)>>,
    failures: std::sync::Mutex<Option<(String, String, u32)>>,
    throttles: std::sync::Mutex<Option<(String, u32)>>,
}

#[cfg(any(test, feature = "test-util"))]
impl RecordingInvoker {
    /// Lambda refuses every invoke of `function_arn` with `message` (an AWS error text).
    pub fn refuse(&self, function_arn: &str, message: &str) {
        *self.refused.lock().unwrap() = Some((function_arn.to_owned(), message.to_owned()));
    }

    /// Lambda throttles the next `times` invokes of `function_arn` (the function does not run).
    pub fn throttle(&self, function_arn: &str, times: u32) {
        *self.throttles.lock().unwrap() = Some((function_arn.to_owned(), times));
    }

    /// The function `function_arn` fails its next `times` invokes with `error_type`.
    pub fn fail(&self, function_arn: &str, error_type: &str, times: u32) {
        *self.failures.lock().unwrap() =
            Some((function_arn.to_owned(), error_type.to_owned(), times));
    }

    /// Every invoke Lambda ran, in order.
    pub fn invokes(&self) -> Vec<Invoke> {
        self.invokes.lock().unwrap().clone()
    }
}

#[cfg(any(test, feature = "test-util"))]
impl InvokePort for RecordingInvoker {
    async fn invoke(
        &self,
        function_arn: &str,
        payload: &str,
        client_context: &str,
        trace_header: Option<&str>,
    ) -> Result<Reply, PortError> {
        if let Some((_, message)) = self
            .refused
            .lock()
            .unwrap()
            .as_ref()
            .filter(|(arn, _)| arn == function_arn)
        {
            return Err(PortError::new("Invoke", message));
        }
        if let Some((_, times)) = self
            .throttles
            .lock()
            .unwrap()
            .as_mut()
            .filter(|(arn, times)| arn == function_arn && *times > 0)
        {
            *times -= 1;
            return Ok(Reply::Throttled { retry_after: None });
        }
        self.invokes.lock().unwrap().push(Invoke {
            function_arn: function_arn.to_owned(),
            payload: payload.to_owned(),
            client_context: client_context.to_owned(),
            trace_header: trace_header.map(str::to_owned),
        });
        let mut failures = self.failures.lock().unwrap();
        match failures.as_mut() {
            Some((arn, error_type, times)) if arn == function_arn && *times > 0 => {
                *times -= 1;
                Ok(Reply::Failed {
                    error_type: Some(error_type.clone()),
                    error_message: Some("failed as told".into()),
                })
            }
            _ => Ok(Reply::Succeeded),
        }
    }
}
