//! The recovery functions' settings, read from `REDRIVE_*` variables through the core's checked
//! reader ([`Env`]; the one list of known variables is [`redrive_core::config::VARIABLES`]).
use std::time::Duration;

use redrive_core::config::{read_process_env, Env};
use redrive_core::error::ConfigError;
use redrive_core::reprocess_policy::ReprocessPolicy;

/// The most messages one run examines (`REDRIVE_REPROCESS_MAX_MESSAGES` at most; a job's runs).
pub(crate) const MOST_MESSAGES: u32 = 1_000_000;

/// Defaults of the DLQ reprocessor (a command may override the per-run ones).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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
            max_messages: env.whole("REDRIVE_REPROCESS_MAX_MESSAGES", 1000, 1..=MOST_MESSAGES)?,
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
#[non_exhaustive]
pub struct EventRedriveSettings {
    /// EventBridge error codes whose events are parked, not redriven.
    pub parked_error_codes: Vec<String>,
    /// Wait after an event's failure before it is redriven (`REDRIVE_REPROCESS_AFTER`, as for the
    /// DLQ reprocessor).
    pub eligible_after: Duration,
    /// The message group of each FIFO queue target, `(queue ARN, group)`, as the rule's target
    /// sets it (`REDRIVE_FIFO_TARGET_GROUPS`: `arn=group,...`).
    pub fifo_target_groups: Vec<(String, String)>,
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
        let fifo_target_groups = env
            .list("REDRIVE_FIFO_TARGET_GROUPS")
            .unwrap_or_default()
            .iter()
            .map(|pair| fifo_target_group(pair))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            parked_error_codes: env.list("REDRIVE_PARKED_ERROR_CODES").unwrap_or_else(|| {
                DEFAULT_PARKED_ERROR_CODES
                    .iter()
                    .map(|code| code.to_string())
                    .collect()
            }),
            eligible_after: env.duration("REDRIVE_REPROCESS_AFTER", Duration::from_secs(300))?,
            fifo_target_groups,
        })
    }

    /// The message group the rule gives the FIFO queue target `queue_arn`.
    pub fn fifo_group(&self, queue_arn: &str) -> Option<&str> {
        self.fifo_target_groups
            .iter()
            .find(|(arn, _)| arn == queue_arn)
            .map(|(_, group)| group.as_str())
    }
}

/// One `arn=group` of `REDRIVE_FIFO_TARGET_GROUPS`.
fn fifo_target_group(pair: &str) -> Result<(String, String), ConfigError> {
    let invalid = |reason: &str| ConfigError::new("REDRIVE_FIFO_TARGET_GROUPS", pair, reason);
    let (arn, group) = pair
        .split_once('=')
        .ok_or_else(|| invalid("expected queue-arn=message-group"))?;
    if !arn.starts_with("arn:") || !arn.contains(":sqs:") || !arn.ends_with(".fifo") {
        return Err(invalid(
            "expected a FIFO queue ARN (arn:aws:sqs:region:account:name.fifo)",
        ));
    }
    if group.is_empty() || group.len() > 128 {
        return Err(invalid("a message group id is 1 to 128 characters"));
    }
    Ok((arn.to_owned(), group.to_owned()))
}
