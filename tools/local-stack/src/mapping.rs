//! An event source mapping's error handling as Terraform ships it (`infra/rendered/`), the part of
//! the mapping the stream and Kafka pollers play: batch size, retries, record age, bisection.
use std::time::Duration;

use serde_json::Value;

use crate::Error;

/// The event source mapping's settings a poller plays: what Lambda does with a batch that fails.
#[derive(Debug, Clone)]
pub struct ShippedMapping {
    /// Records per batch at the most.
    pub batch_size: usize,
    /// Retries of a failing batch before it is discarded; `None` for -1 (no count).
    pub maximum_retry_attempts: Option<u32>,
    /// The age past which a failing batch is discarded; `None` for -1 (until the stream or the
    /// topic drops it).
    pub maximum_record_age: Option<Duration>,
    /// Split a batch in two on a function error.
    pub bisect_batch_on_function_error: bool,
    /// Where a discarded batch's on-failure record goes (an SQS queue URL).
    pub on_failure_queue_url: Option<String>,
}

impl ShippedMapping {
    /// The mapping at `address` in a rendering of Terraform's plan (`infra/rendered/`), its
    /// on-failure records sent to `on_failure_queue_url`.
    pub fn shipped(
        rendering: &Value,
        address: &str,
        on_failure_queue_url: Option<String>,
    ) -> Result<Self, Error> {
        let mapping = &rendering["mappings"][address];
        let number = |name: &str| {
            mapping[name].as_i64().ok_or_else(|| {
                Error::Emulator(format!("the rendering has no {name} for {address}"))
            })
        };
        let unbounded = |value: i64| (value >= 0).then_some(value);
        Ok(Self {
            batch_size: usize::try_from(number("batch_size")?).unwrap_or(1),
            maximum_retry_attempts: unbounded(number("maximum_retry_attempts")?)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            maximum_record_age: unbounded(number("maximum_record_age_in_seconds")?)
                .map(|s| Duration::from_secs(s.unsigned_abs())),
            bisect_batch_on_function_error: mapping["bisect_batch_on_function_error"]
                .as_bool()
                .unwrap_or(false),
            on_failure_queue_url,
        })
    }
}

impl ShippedMapping {
    /// Whether a batch that has failed `retries` times after its first try, its oldest record
    /// `oldest` old, is discarded.
    pub fn discards(&self, retries: u32, oldest: Duration) -> bool {
        self.maximum_retry_attempts
            .is_some_and(|limit| retries > limit)
            || self.maximum_record_age.is_some_and(|age| oldest > age)
    }

    /// The Kafka mapping Terraform ships (`infra/examples/kafka-orders`, with `modules/kafka-consumer`'s
    /// defaults).
    pub fn kafka() -> Result<Self, Error> {
        let rendering = crate::topology::rendering("kafka-orders")
            .map_err(|e| Error::Emulator(e.to_string()))?;
        Self::shipped(
            &rendering,
            "module.orders_kafka.aws_lambda_event_source_mapping.kafka",
            None,
        )
    }
}
