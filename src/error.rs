//! Errors: what a record handler reports, and what the engine itself can fail with.
use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a failure is classified. It decides the record's fate (see [`crate::fate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorClass {
    /// May succeed later (timeouts, throttling, 5xx): retried with backoff until attempts run out.
    Transient,
    /// Will fail again however often it is retried (malformed or invalid input): dead-lettered at once.
    Permanent,
    /// The handler panicked: a bug, treated as permanent.
    Panic,
}

impl ErrorClass {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Panic => "panic",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The failure a record handler returns.
///
/// `kind` is a short, stable, snake_case label (`payment_timeout`, `invalid_order`) that operators
/// filter and alarm on; `message` is the human detail (truncated in the DLQ metadata).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    class: ErrorClass,
    kind: Cow<'static, str>,
    message: String,
    retry_after: Option<Duration>,
    defer: bool,
}

impl RecordError {
    /// A failure that may go away: the record is retried with backoff.
    pub fn transient(kind: impl Into<Cow<'static, str>>, message: impl fmt::Display) -> Self {
        Self::new(ErrorClass::Transient, kind, message)
    }

    /// A failure that will not go away: the record is dead-lettered without retries.
    pub fn permanent(kind: impl Into<Cow<'static, str>>, message: impl fmt::Display) -> Self {
        Self::new(ErrorClass::Permanent, kind, message)
    }

    /// The record was not attempted (for example a circuit breaker is open): it is re-sent after
    /// `after` without spending an attempt.
    pub fn defer(kind: impl Into<Cow<'static, str>>, after: Duration) -> Self {
        let mut error = Self::new(ErrorClass::Transient, kind, "deferred");
        error.retry_after = Some(after);
        error.defer = true;
        error
    }

    pub(crate) fn panic(message: String) -> Self {
        Self::new(ErrorClass::Panic, "panic", message)
    }

    fn new(
        class: ErrorClass,
        kind: impl Into<Cow<'static, str>>,
        message: impl fmt::Display,
    ) -> Self {
        Self {
            class,
            kind: kind.into(),
            message: message.to_string(),
            retry_after: None,
            defer: false,
        }
    }

    /// Ask for this delay before the next attempt instead of the policy's backoff (a `Retry-After`).
    #[must_use]
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    pub fn class(&self) -> ErrorClass {
        self.class
    }
    pub fn kind(&self) -> &str {
        &self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    pub fn retry_after_hint(&self) -> Option<Duration> {
        self.retry_after
    }
    pub fn is_deferral(&self) -> bool {
        self.defer
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} error ({}): {}", self.class, self.kind, self.message)
    }
}

impl std::error::Error for RecordError {}

/// A failure of an AWS call made through a port.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{operation} failed: {message}")]
pub struct PortError {
    pub operation: &'static str,
    pub message: String,
}

impl PortError {
    pub fn new(operation: &'static str, message: impl fmt::Display) -> Self {
        Self {
            operation,
            message: message.to_string(),
        }
    }
}

/// A failure of the whole batch. Lambda then retries every record, so this is reserved for events
/// that cannot be answered record by record.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("the event is not an SQS event: {0}")]
    InvalidEvent(#[from] serde_json::Error),
    #[error(
        "record {index} has no messageId: Lambda's SQS event source always sets one, and a partial \
         batch response cannot name the record, so the whole batch is failed"
    )]
    MissingMessageId { index: usize },
}

/// Invalid configuration, reported at start with the variable that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration {name}={value:?}: {reason}")]
pub struct ConfigError {
    pub name: String,
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(name: &str, value: &str, reason: impl fmt::Display) -> Self {
        Self {
            name: name.to_owned(),
            value: value.to_owned(),
            reason: reason.to_string(),
        }
    }
}
