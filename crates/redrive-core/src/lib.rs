//! The record-fate engine of redrive, without AWS SDK, Lambda runtime or HTTP client: records,
//! fates, backoff, the circuit breaker, the failure metadata, the batch processor and the ports it
//! drives (queues, idempotency stores) as traits. Users depend on the `redrive` crate, which
//! re-exports this one beside the AWS adapters and the Lambda glue.
//!
//! Every record that enters a handler leaves with exactly one fate, decided in one place
//! (the fate judge, `fate.rs`): **done**, **retry** (re-sent with an SQS delay and an attempt count),
//! **dead-letter** (sent to the DLQ with its failure context), **defer** (re-sent without spending
//! an attempt) or **give back** (reported as a batchItemFailure so SQS delivers it again).
#![warn(missing_docs)]

pub mod backoff;
pub mod breaker;
pub mod carry;
pub mod clock;
pub mod config;
pub mod envelope;
pub mod error;
pub mod fate;
pub mod idempotency;
pub mod ledger;
pub mod metrics;
#[doc(hidden)]
#[cfg(feature = "test-util")]
pub mod oracles;
pub mod port;
pub mod processor;
pub mod reprocess_policy;
/// The module's name before 0.2; it was [`reprocess_policy`].
#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "renamed `reprocess_policy`")]
pub mod redrive {
    pub use crate::reprocess_policy::{eligible_at, Disposition, ReprocessPolicy};
    #[allow(deprecated)]
    pub use crate::reprocess_policy::{Decision, RedrivePolicy};
}
pub mod stream;

/// The SQS event the processor reads ([`redrive_event`]).
pub use redrive_event as event;

/// Locks `mutex`, taking its data as it is when a panic poisoned it: every mutex here guards data
/// that a panicking holder leaves consistent (a cache, a generator, a breaker's state).
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use backoff::{Backoff, RetryPolicy};
pub use breaker::{BreakerSettings, CircuitBreaker};
pub use config::Settings;
pub use envelope::{Meta, META_ATTRIBUTE};
pub use error::{BatchError, ConfigError, ErrorClass, PortError, RecordError};
pub use event::{SqsEvent, SqsRecord};
pub use fate::Fate;
pub use metrics::BatchReport;
pub use port::QueuePort;
pub use processor::{
    BatchHandler, Invocation, Message, Processed, Processor, ProcessorConfig, RecordHandler,
    DATA_ENCODING_ATTRIBUTE,
};
