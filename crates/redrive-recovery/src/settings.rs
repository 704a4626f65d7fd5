//! The recovery functions' settings, read from `REDRIVE_*` variables through the core's checked
//! reader ([`Env`]; the one list of known variables is [`redrive_core::config::VARIABLES`]).
use std::time::Duration;

use redrive_core::config::{read_process_env, Env};
use redrive_core::error::ConfigError;
use redrive_core::reprocess_policy::ReprocessPolicy;

/// Defaults of the DLQ reprocessor (a command may override the per-run ones).
#[derive(Debug, Clone, PartialEq)]
pub struct ReprocessSettings {
    /// The DLQ a scheduled run drains, unless its command names one.
    pub source_url: Option<String>,
    /// Where dead letters without metadata go (SQS moved them; they name no origin).
    pub destination_arn: Option<String>,
    /// Where discarded messages are copied, when set.
    pub archive_url: Option<String>,
    /// What happens to each dead letter.
    pub policy: ReprocessPolicy,
    /// Messages examined per run at most.
    pub max_messages: u32,
    /// Messages re-sent per second at most.
    pub rate_per_second: f64,
    /// Namespace of the EMF metrics.
    pub metrics_namespace: String,
}

impl ReprocessSettings {
    /// Reads and checks the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        read_process_env(|names, lookup| Self::from_lookup(names, lookup))
    }

    /// Reads and checks variables from `lookup`; `names` are all variable names present (to catch misspelt `REDRIVE_*` ones).
    pub fn from_lookup<'n>(
        names: impl IntoIterator<Item = &'n str>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env = Env::new(names, lookup)?;
        let destination_arn = env.get("REDRIVE_REPROCESS_DESTINATION_ARN");
        if let Some(arn) = &destination_arn {
            if !arn.starts_with("arn:") || !arn.contains(":sqs:") {
                return Err(ConfigError::new(
                    "REDRIVE_REPROCESS_DESTINATION_ARN",
                    arn,
                    "expected an SQS queue ARN (arn:aws:sqs:region:account:name)",
                ));
            }
        }
        Ok(Self {
            source_url: env.get("REDRIVE_REPROCESS_SOURCE_URL"),
            destination_arn,
            archive_url: env.get("REDRIVE_ARCHIVE_QUEUE_URL"),
            policy: ReprocessPolicy {
                max_reprocess: env.whole("REDRIVE_REPROCESS_MAX", 3, 0..=100)?,
                eligible_after: env
                    .duration("REDRIVE_REPROCESS_AFTER", Duration::from_secs(300))?,
                discard_kinds: env.list("REDRIVE_DISCARD_KINDS").unwrap_or_default(),
            },
            max_messages: env.whole("REDRIVE_REPROCESS_MAX_MESSAGES", 1000, 1..=1_000_000)?,
            rate_per_second: env.number("REDRIVE_REPROCESS_RATE", 50.0, 0.1..=3000.0)?,
            metrics_namespace: env
                .get("REDRIVE_METRICS_NAMESPACE")
                .unwrap_or_else(|| "redrive".into()),
        })
    }
}

/// EventBridge error codes that are parked by default: retrying cannot help until someone fixes
/// a permission, a resource or the target's input.
pub const DEFAULT_PARKED_ERROR_CODES: &[&str] = &[
    "NO_PERMISSIONS",
    "NO_RESOURCE",
    "RESOURCE_NOT_FOUND",
    "FAILED_TO_ASSUME_ROLE",
    "INVALID_PARAMETER",
    "INVALID_JSON",
];

/// Settings of the EventBridge redrive, on top of the [`Settings`](redrive_core::Settings) of its
/// queue consumer.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRedriveSettings {
    /// EventBridge error codes whose events are parked, not redriven.
    pub parked_error_codes: Vec<String>,
    /// Redrives an event gets before it is parked (the loop guard).
    pub max_redrives: u32,
    /// Wait after an event's failure before it is redriven, doubled per earlier redrive
    /// (`REDRIVE_REPROCESS_AFTER`, as for the DLQ reprocessor).
    pub eligible_after: Duration,
}

impl EventRedriveSettings {
    /// Reads and checks the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        read_process_env(|names, lookup| Self::from_lookup(names, lookup))
    }

    /// Reads and checks variables from `lookup`; `names` are all variable names present.
    pub fn from_lookup<'n>(
        names: impl IntoIterator<Item = &'n str>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env = Env::new(names, lookup)?;
        Ok(Self {
            parked_error_codes: env.list("REDRIVE_PARKED_ERROR_CODES").unwrap_or_else(|| {
                DEFAULT_PARKED_ERROR_CODES
                    .iter()
                    .map(|code| code.to_string())
                    .collect()
            }),
            max_redrives: env.whole("REDRIVE_REPROCESS_MAX", 3, 0..=100)?,
            eligible_after: env.duration("REDRIVE_REPROCESS_AFTER", Duration::from_secs(300))?,
        })
    }
}
