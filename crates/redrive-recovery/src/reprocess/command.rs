//! What an operator or a schedule asks the reprocessor for, and the plan it makes of it.
use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::settings::ReprocessSettings;
use redrive_core::backoff::parse_duration;
use redrive_core::envelope::Meta;
use redrive_core::error::{ConfigError, ErrorClass};
use redrive_event::SqsRecord;

/// What to redrive, as a Lambda invocation payload or from the operator CLI. Every field is
/// optional; absent ones take the function's defaults ([`ReprocessSettings`]).
///
/// ```json
/// {"source": "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq",
///  "maxMessages": 100, "dryRun": true, "errorClasses": ["transient"], "minAge": "10m",
///  "attribute": {"name": "tenant", "value": "acme"}, "ratePerSecond": 10}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReprocessCommand {
    /// URL of the DLQ to drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Queue ARN every redriven message goes to, instead of the origin its metadata names (an
    /// operator's choice: a DLQ shared by several queues goes to this one queue whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// Queue ARN for messages that name no origin (SQS moved them without metadata and without
    /// `DeadLetterQueueSourceArn`), in place of `REDRIVE_REPROCESS_DESTINATION_ARN`. A schedule
    /// sets this, never `destination`, so that a shared DLQ's messages go home each to its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_destination: Option<String>,
    /// Messages to examine at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u32>,
    /// Decide and count, but send, delete and archive nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Only these error classes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_classes: Vec<ErrorClass>,
    /// Only these error kinds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_kinds: Vec<String>,
    /// Only messages whose last failure is at least this old (`10m`, `2h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_age: Option<String>,
    /// Only messages whose last failure is at most this old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    /// Only messages with this attribute value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribute: Option<AttributeFilter>,
    /// Only messages that failed on a published function version below this one (the envelope's
    /// `failedIn.version`): what failed before a fix deployed as version N. `$LATEST` and
    /// messages whose envelope names no version never match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_version: Option<u64>,
    /// Only these tenants' messages (`redrive::tenant_of`: a Kafka record's key, else the
    /// message group of a fair or FIFO queue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<String>,
    /// Messages re-sent per second at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_second: Option<f64>,
    /// The operator has fixed the cause: redrive what the policy would leave for review (permanent
    /// errors, backoff not passed). The reprocess cap still holds.
    #[serde(default)]
    pub force: bool,
    /// Send copies and delete nothing: the DLQ keeps every message (a replay into a test queue).
    #[serde(default)]
    pub copy: bool,
    /// Only these messages (SQS message ids): a selection fixed when a [`Job`](super::Job) was
    /// made, so that a message arriving later is never taken. The run ends once each was examined.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub message_ids: Vec<String>,
    /// Discard every message the filters take, whatever the policy says (an operator's choice):
    /// copied to the archive queue first when there is one, else only deleted.
    #[serde(default)]
    pub discard: bool,
    /// URL of the queue discarded messages are copied to, in place of `REDRIVE_ARCHIVE_QUEUE_URL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
}

/// Only messages with this String attribute value (original attributes, packed ones included).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AttributeFilter {
    /// The attribute.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// A checked command with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// URL of the DLQ to drain.
    pub source_url: String,
    /// Where every message goes, whatever it names (an operator's choice).
    pub destination_arn: Option<String>,
    /// Where a message goes that names no origin (the command's `fallbackDestination`, else
    /// `REDRIVE_REPROCESS_DESTINATION_ARN`).
    pub fallback_destination_arn: Option<String>,
    /// Messages to examine at most.
    pub max_messages: u32,
    /// Decide and count, change nothing.
    pub dry_run: bool,
    /// Which messages the run takes.
    pub filter: Filter,
    /// Messages re-sent per second at most.
    pub rate_per_second: f64,
    /// Redrive what the policy would leave (the cap still holds).
    pub force: bool,
    /// Delete nothing from the DLQ ([`ReprocessCommand::copy`]).
    pub copy: bool,
    /// Discard whatever the filters take ([`ReprocessCommand::discard`]).
    pub discard: bool,
    /// Where a discarded message is copied before it is deleted; deleted only when absent.
    pub archive_url: Option<String>,
}

/// Which dead letters a run takes; empty lists take all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Only these error classes.
    pub classes: Vec<ErrorClass>,
    /// Only these error kinds.
    pub kinds: Vec<String>,
    /// Only messages whose last failure is at least this old.
    pub min_age: Option<Duration>,
    /// Only messages whose last failure is at most this old.
    pub max_age: Option<Duration>,
    /// Only messages with this attribute value.
    pub attribute: Option<AttributeFilter>,
    /// Only messages that failed on a published function version below this one.
    pub before_version: Option<u64>,
    /// Only these tenants' messages.
    pub tenants: Vec<String>,
    /// Only these message ids, when a selection was made.
    pub selection: Option<BTreeSet<String>>,
}

impl ReprocessCommand {
    /// The plan of this command, the settings filling in what it leaves out; refuses bad values with the field named.
    pub fn plan(&self, defaults: &ReprocessSettings) -> Result<Plan, ConfigError> {
        let age = |field: &str, text: &Option<String>| match text {
            None => Ok(None),
            Some(text) => parse_duration(text).map(Some).ok_or_else(|| {
                ConfigError::new(field, text, "expected a duration such as 30s, 10m or 2h")
            }),
        };
        let source_url = self
            .source
            .clone()
            .or_else(|| defaults.source_url.clone())
            .ok_or_else(|| {
                ConfigError::new(
                    "source",
                    "",
                    "no DLQ to drain: name one in the command or set REDRIVE_REPROCESS_SOURCE_URL",
                )
            })?;
        let queue_arn = |field: &str, arn: &Option<String>| match arn {
            Some(arn) if !(arn.starts_with("arn:") && arn.contains(":sqs:")) => {
                Err(ConfigError::new(
                    field,
                    arn,
                    "expected an SQS queue ARN (arn:aws:sqs:region:account:name)",
                ))
            }
            arn => Ok(arn.clone()),
        };
        let destination_arn = queue_arn("destination", &self.destination)?;
        let fallback_destination_arn =
            queue_arn("fallbackDestination", &self.fallback_destination)?
                .or_else(|| defaults.destination_arn.clone());
        let rate_per_second = self.rate_per_second.unwrap_or(defaults.rate_per_second);
        if !(0.1..=3000.0).contains(&rate_per_second) {
            return Err(ConfigError::new(
                "ratePerSecond",
                &rate_per_second.to_string(),
                "expected 0.1 to 3000 messages per second",
            ));
        }
        Ok(Plan {
            source_url,
            destination_arn,
            fallback_destination_arn,
            max_messages: self.max_messages.unwrap_or(defaults.max_messages).max(1),
            dry_run: self.dry_run,
            filter: Filter {
                classes: self.error_classes.clone(),
                kinds: self.error_kinds.clone(),
                min_age: age("minAge", &self.min_age)?,
                max_age: age("maxAge", &self.max_age)?,
                attribute: self.attribute.clone(),
                before_version: self.before_version,
                tenants: self.tenants.clone(),
                selection: (!self.message_ids.is_empty())
                    .then(|| self.message_ids.iter().cloned().collect()),
            },
            rate_per_second,
            force: self.force,
            copy: self.copy,
            discard: self.discard,
            archive_url: self
                .archive
                .clone()
                .or_else(|| defaults.archive_url.clone()),
        })
    }
}

impl Filter {
    /// Whether the filter takes `record`, its age counted at `now_ms` from its last failure.
    pub fn takes(&self, record: &SqsRecord<'_>, now_ms: u64) -> bool {
        let meta = Meta::of(record).and_then(Result::ok);
        let age = now_ms.saturating_sub(last_failure_ms(record, meta.as_ref(), now_ms));
        self.admits(record, meta.as_ref(), age)
    }

    pub(super) fn admits(&self, record: &SqsRecord<'_>, meta: Option<&Meta<'_>>, age: u64) -> bool {
        let age = Duration::from_millis(age);
        (self.classes.is_empty() || meta.is_some_and(|m| self.classes.contains(&m.error_class)))
            && (self.kinds.is_empty()
                || meta.is_some_and(|m| self.kinds.iter().any(|k| *k == *m.error_kind)))
            && self.min_age.is_none_or(|min| age >= min)
            && self.max_age.is_none_or(|max| age <= max)
            && self.attribute.as_ref().is_none_or(|wanted| {
                original_attribute(record, meta, &wanted.name) == Some(wanted.value.as_str())
            })
            && self.before_version.is_none_or(|before| {
                meta.and_then(|m| m.failed_in.as_ref())
                    .and_then(|at| at.version.as_deref()?.parse::<u64>().ok())
                    .is_some_and(|version| version < before)
            })
            && (self.tenants.is_empty()
                || redrive_core::handler::tenant_of(record, meta)
                    .is_some_and(|tenant| self.tenants.iter().any(|t| *t == tenant)))
            && self.selects(record)
    }

    /// Whether `record` is in the selection, when there is one.
    pub(super) fn selects(&self, record: &SqsRecord<'_>) -> bool {
        self.selection.as_ref().is_none_or(|ids| {
            record
                .message_id
                .as_deref()
                .is_some_and(|id| ids.contains(id))
        })
    }
}

/// When `record` last failed: its envelope's `lastFailureAt`, else when it was sent, else now.
pub(super) fn last_failure_ms(record: &SqsRecord<'_>, meta: Option<&Meta<'_>>, now_ms: u64) -> u64 {
    meta.map_or_else(
        || record.sent_ms().unwrap_or(now_ms),
        |m| m.last_failure_at.0,
    )
}

/// A String attribute of the original message, also when it was packed into the metadata.
fn original_attribute<'r>(
    record: &'r SqsRecord<'r>,
    meta: Option<&'r Meta<'r>>,
    name: &str,
) -> Option<&'r str> {
    meta.and_then(|m| m.attributes.as_ref())
        .and_then(|packed| packed.get(name))
        .or_else(|| record.message_attributes.get(name))
        .and_then(|value| value.string_value.as_deref())
}
