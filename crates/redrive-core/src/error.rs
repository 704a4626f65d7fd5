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
    /// The class's name in logs and metadata.
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

    /// A downstream answered with HTTP `status`: 408, 429 and 5xx are transient (the service is
    /// busy, slow or failing), any other status permanent (the request itself is wrong).
    pub fn from_http_status(
        kind: impl Into<Cow<'static, str>>,
        status: u16,
        message: impl fmt::Display,
    ) -> Self {
        let class = match status {
            408 | 429 | 500..=599 => ErrorClass::Transient,
            _ => ErrorClass::Permanent,
        };
        Self::new(class, kind, format_args!("HTTP {status}: {message}"))
    }

    /// An AWS SDK call failed: timeouts, connection failures, throttling and 5xx answers are
    /// transient; a service error the request caused (validation, not found, access denied) is
    /// permanent. (Feature `aws-sdk-errors`, on in the `redrive` crate.)
    #[cfg(feature = "aws-sdk-errors")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aws-sdk-errors")))]
    pub fn from_sdk_error<E>(
        kind: impl Into<Cow<'static, str>>,
        error: &aws_smithy_runtime_api::client::result::SdkError<
            E,
            aws_smithy_runtime_api::http::Response,
        >,
    ) -> Self
    where
        E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + 'static,
    {
        use aws_smithy_runtime_api::client::result::SdkError;
        const THROTTLING: [&str; 7] = [
            "Throttling",
            "ThrottlingException",
            "ThrottledException",
            "TooManyRequestsException",
            "RequestLimitExceeded",
            "ProvisionedThroughputExceededException",
            "SlowDown",
        ];
        let message = aws_smithy_types::error::display::DisplayErrorContext(error);
        let transient = match error {
            SdkError::ServiceError(context) => {
                let status = context.raw().status();
                let code = context.err().code().unwrap_or_default();
                status.is_server_error() || status.as_u16() == 429 || THROTTLING.contains(&code)
            }
            SdkError::ConstructionFailure(_) => false,
            // Timeouts, dispatch failures (connection, DNS) and unreadable answers.
            _ => true,
        };
        if transient {
            Self::transient(kind, message)
        } else {
            Self::permanent(kind, message)
        }
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

    /// Transient, permanent or panic.
    pub fn class(&self) -> ErrorClass {
        self.class
    }
    /// The short label operators filter on.
    pub fn kind(&self) -> &str {
        &self.kind
    }
    /// What happened.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The wait the handler asked for, if any (a `Retry-After`, or a deferral's).
    pub fn retry_after_hint(&self) -> Option<Duration> {
        self.retry_after
    }
    /// True for a deferral: the record was not attempted.
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
    /// The SDK operation that failed.
    pub operation: &'static str,
    /// What went wrong.
    pub message: String,
}

impl PortError {
    /// A failure of `operation`.
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
#[non_exhaustive]
pub enum BatchError {
    /// The event is not an event of a source redrive reads.
    #[error("the event is not an SQS, Kinesis or DynamoDB Streams event: {0}")]
    InvalidEvent(#[from] serde_json::Error),
    #[error(
        "record {index} has no messageId: Lambda's SQS event source always sets one, and a partial \
         batch response cannot name the record, so the whole batch is failed"
    )]
    /// A record has no `messageId`.
    MissingMessageId {
        /// Its position in the batch.
        index: usize,
    },
    #[error(
        "stream record {index} has no sequence number: Lambda's stream event sources always set \
         one, and the checkpoint cannot name the record, so the whole batch is failed"
    )]
    /// A Kinesis or DynamoDB Streams record has no sequence number.
    MissingSequenceNumber {
        /// Its position in the batch.
        index: usize,
    },
}

/// Invalid configuration, reported at start with the variable that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration {name}={value:?}: {reason}")]
pub struct ConfigError {
    /// The variable.
    pub name: String,
    /// Its value.
    pub value: String,
    /// Why it is refused.
    pub reason: String,
}

impl ConfigError {
    /// A refusal of `name`=`value`.
    pub fn new(name: &str, value: &str, reason: impl fmt::Display) -> Self {
        Self {
            name: name.to_owned(),
            value: value.to_owned(),
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_busy_or_failing_are_transient_and_the_rest_permanent() {
        for (status, class) in [
            (408, ErrorClass::Transient),
            (429, ErrorClass::Transient),
            (500, ErrorClass::Transient),
            (503, ErrorClass::Transient),
            (400, ErrorClass::Permanent),
            (404, ErrorClass::Permanent),
            (409, ErrorClass::Permanent),
        ] {
            let error = RecordError::from_http_status("payments", status, "answer");
            assert_eq!(error.class(), class, "{status}");
            assert_eq!(error.message(), format!("HTTP {status}: answer"));
        }
    }
}
