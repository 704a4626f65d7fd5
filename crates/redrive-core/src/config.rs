//! Configuration from environment variables, validated at start.
use std::num::NonZeroUsize;
use std::time::Duration;

use crate::backoff::{parse_duration, parse_sequence, Backoff, RetryPolicy};
use crate::breaker::{BreakerSettings, TenantBreakerSettings};
use crate::error::ConfigError;
use crate::fate::SourceQueue;
use crate::fifo::FifoOnDeadLetter;
use crate::handler::RecordHandler;
use crate::idempotency::{IdempotencyStore, Idempotent, KeyFrom};
use crate::processor::ProcessorConfig;

/// Every variable redrive reads, with its default; any other `REDRIVE_*` variable is a typo and
/// refused at start. One list for every function, so that a function that reads two settings
/// types (the EventBridge redrive: [`Settings`] and `redrive_recovery`'s) refuses neither's names;
/// the recovery crate's settings read their variables through [`Env`].
pub const VARIABLES: &[(&str, &str)] = &[
    (
        "REDRIVE_DLQ_URL",
        "(unset: report-only) URL of the dead-letter queue",
    ),
    (
        "REDRIVE_SOURCE_QUEUE_URL",
        "(optional) URL of the source queue; looked up from the event source ARN otherwise",
    ),
    (
        "REDRIVE_LANE_URL",
        "(unset: none) URL of the retry lane, an SQS FIFO queue the same function reads: a Kafka record that fails transiently goes there instead of holding its partition; with REDRIVE_FIFO_ON_DEAD_LETTER=hold, a FIFO head that would hold its group waits there with the group's later records, instead of in its source",
    ),
    (
        "REDRIVE_SOURCE_RETENTION",
        "4d: the source queue's MessageRetentionPeriod (Terraform sets it); a FIFO record is dead-lettered an hour before it would expire instead of waiting in place",
    ),
    (
        "REDRIVE_SOURCE_VISIBILITY_TIMEOUT",
        "20m: the source queue's visibility timeout (Terraform sets it); a FIFO wait in place ends 12 h less this after the receive",
    ),
    (
        "REDRIVE_MAX_ATTEMPTS",
        "5, or the retry sequence's length + 1",
    ),
    (
        "REDRIVE_RETRY_SEQUENCE",
        "(optional) fixed delays such as 5m,5m,30m,30m,30m,1h; replaces the exponential backoff",
    ),
    ("REDRIVE_BACKOFF_BASE", "2s"),
    ("REDRIVE_BACKOFF_FACTOR", "2"),
    ("REDRIVE_BACKOFF_CAP", "15m"),
    (
        "REDRIVE_DEFER_MAX_AGE",
        "1h: how long after its first failure (FIFO: its first receive) a record may still be deferred (1m to 14d)",
    ),
    ("REDRIVE_DEADLINE_MARGIN", "2s"),
    (
        "REDRIVE_CONCURRENCY",
        "100: records handled at once (1 to 10000); on FIFO, one per message group at a time",
    ),
    ("REDRIVE_BREAKER_THRESHOLD", "5 (0 disables the breaker)"),
    ("REDRIVE_BREAKER_OPEN_FOR", "30s"),
    (
        "REDRIVE_TENANT_BREAKER_THRESHOLD",
        "5: a tenant's consecutive failures that open its own breaker, with a handler that uses TenantBreakers (0: none per tenant)",
    ),
    ("REDRIVE_TENANT_BREAKER_OPEN_FOR", "30s"),
    (
        "REDRIVE_TENANT_BREAKER_CAPACITY",
        "10000: failing tenants remembered at once (1 to 1000000)",
    ),
    ("REDRIVE_METRICS_NAMESPACE", "redrive"),
    (
        "REDRIVE_WORKER_THREADS",
        "(unset: the vCPUs with AWS_LAMBDA_MAX_CONCURRENCY above 1, else 1) threads of the function's runtime (1 to 256)",
    ),
    (
        "REDRIVE_IDEMPOTENCY_TABLE",
        "(unset: none) DynamoDB table of the shared idempotency store",
    ),
    (
        "REDRIVE_IDEMPOTENCY_KEY",
        "messageId, or a JSON pointer into the body (/orderId)",
    ),
    ("REDRIVE_IDEMPOTENCY_LEASE", "15m: how long a claim holds (about the function timeout)"),
    ("REDRIVE_IDEMPOTENCY_TTL", "14d: how long a done key is remembered"),
    (
        "REDRIVE_IDEMPOTENCY_PAYLOAD_CHECK",
        "false: true refuses a key reused with another body (idempotency_key_reused)",
    ),
    (
        "REDRIVE_LEDGER_TABLE",
        "(unset: REDRIVE_IDEMPOTENCY_TABLE, if set) DynamoDB table of the FIFO attempt ledger",
    ),
    (
        "REDRIVE_PAUSE_AFTER",
        "(unset: never) how long the handler's downstream may stay down (its breaker open) before the consumer asks redrive's intake controller to pause its mapping (1m to 1h)",
    ),
    (
        "REDRIVE_PAUSE_QUEUE_URL",
        "(with REDRIVE_PAUSE_AFTER) the intake controller's queue the request goes to",
    ),
    (
        "REDRIVE_PAYLOAD_BUCKET",
        "(unset: none) S3 bucket for large messages: Extended Client pointers are read, copies too large for their failure context are offloaded",
    ),
    (
        "REDRIVE_PAYLOAD_PREFIX",
        "redrive/: key prefix of the objects redrive writes (and deletes when their message is done)",
    ),
    (
        "REDRIVE_FIFO_ON_DEAD_LETTER",
        "continue: a FIFO head dead-lettered lets its group go on; hold keeps the group waiting (needs the ledger)",
    ),
    (
        "REDRIVE_FIFO_HOLD_MAX_AGE",
        "3d: how long after its sending a held head may hold its group (below the queue's retention)",
    ),
    // The DLQ reprocessor (functions/dlq-redrive and the operator CLI): redrive-recovery's
    // `ReprocessSettings`.
    (
        "REDRIVE_REPROCESS_SOURCE_URL",
        "(dlq-redrive: required unless each command names its source) URL of the DLQ to drain",
    ),
    (
        "REDRIVE_REPROCESS_DESTINATION_ARN",
        "(optional) queue ARN for dead letters that name no origin (no metadata, no DeadLetterQueueSourceArn)",
    ),
    (
        "REDRIVE_ARCHIVE_QUEUE_URL",
        "(optional) queue that keeps a copy of every discarded message",
    ),
    ("REDRIVE_REPROCESS_MAX", "3: redrives per message before it is alerted on instead"),
    ("REDRIVE_REPROCESS_AFTER", "5m: wait after the last failure, doubled per redrive"),
    ("REDRIVE_DISCARD_KINDS", "(none) error kinds that are archived instead of redriven"),
    ("REDRIVE_REPROCESS_MAX_MESSAGES", "1000: messages examined per run"),
    ("REDRIVE_REPROCESS_RATE", "50: messages re-sent per second at most"),
    // The EventBridge redrive (functions/eventbridge-redrive): redrive-recovery's
    // `EventRedriveSettings`.
    (
        "REDRIVE_PARKED_ERROR_CODES",
        "NO_PERMISSIONS,NO_RESOURCE,RESOURCE_NOT_FOUND,FAILED_TO_ASSUME_ROLE,INVALID_PARAMETER,INVALID_JSON",
    ),
    (
        "REDRIVE_FIFO_TARGET_GROUPS",
        "(none) queue-arn=message-group,...: the group each FIFO queue target's rule sets",
    ),
];

/// Reads and checks variables for every settings type, the recovery crate's too: unknown
/// `REDRIVE_*` names are refused, values are parsed with an error that names the variable.
pub struct Env<F> {
    lookup: F,
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    /// Checks `names` (every variable present) against [`VARIABLES`], then reads through `lookup`.
    pub fn new<'n>(
        names: impl IntoIterator<Item = &'n str>,
        lookup: F,
    ) -> Result<Self, ConfigError> {
        for name in names {
            if name.starts_with("REDRIVE_") && !VARIABLES.iter().any(|(known, _)| *known == name) {
                let known: Vec<&str> = VARIABLES.iter().map(|(known, _)| *known).collect();
                return Err(ConfigError::new(
                    name,
                    &lookup(name).unwrap_or_default(),
                    format!("unknown setting; known: {}", known.join(", ")),
                ));
            }
        }
        Ok(Self { lookup })
    }

    /// The value of `name`, unless it is unset or blank.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name).filter(|value| !value.trim().is_empty())
    }

    /// A duration such as `500ms`, `30s`, `5m` or `1h`, or `default` when unset.
    pub fn duration(&self, name: &str, default: Duration) -> Result<Duration, ConfigError> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => parse_duration(&text).ok_or_else(|| {
                ConfigError::new(
                    name,
                    &text,
                    "expected a duration such as 500ms, 30s, 5m or 1h",
                )
            }),
        }
    }

    /// A number within `range`, or `default` when unset.
    pub fn number(
        &self,
        name: &str,
        default: f64,
        range: std::ops::RangeInclusive<f64>,
    ) -> Result<f64, ConfigError> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| {
                    ConfigError::new(
                        name,
                        &text,
                        format!(
                            "expected a number from {} to {}",
                            range.start(),
                            range.end()
                        ),
                    )
                }),
        }
    }

    /// A whole number within `range`, or `default` when unset.
    pub fn whole(
        &self,
        name: &str,
        default: u32,
        range: std::ops::RangeInclusive<u32>,
    ) -> Result<u32, ConfigError> {
        let n = self.number(
            name,
            f64::from(default),
            f64::from(*range.start())..=f64::from(*range.end()),
        )?;
        if n.fract() == 0.0 {
            Ok(n as u32)
        } else {
            Err(ConfigError::new(
                name,
                &n.to_string(),
                "expected a whole number",
            ))
        }
    }

    /// A comma-separated list, its items trimmed and empty ones left out.
    pub fn list(&self, name: &str) -> Option<Vec<String>> {
        self.get(name).map(|text| {
            text.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(str::to_owned)
                .collect()
        })
    }
}

/// Hands the process environment to a `from_lookup`: every variable name, and a lookup.
pub fn read_process_env<T>(
    read: impl FnOnce(
        &mut dyn Iterator<Item = &str>,
        &dyn Fn(&str) -> Option<String>,
    ) -> Result<T, ConfigError>,
) -> Result<T, ConfigError> {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .collect();
    read(&mut names.iter().map(String::as_str), &|name| {
        std::env::var(name).ok()
    })
}

/// The settings of a queue consumer, read from `REDRIVE_*` variables (see [`VARIABLES`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Settings {
    /// The processor's: the DLQ (none: report-only), the source queue, attempts and backoff, the
    /// deadline margin and how many records run at once.
    pub processor: ProcessorConfig,
    /// The circuit breaker of the consumer's downstream.
    pub breaker: BreakerSettings,
    /// The breakers per tenant in front of it ([`crate::breaker::TenantBreakers`]).
    pub tenant_breaker: TenantBreakerSettings,
    /// Namespace of the EMF metrics.
    pub metrics_namespace: String,
    /// The shared idempotency store, when `REDRIVE_IDEMPOTENCY_TABLE` names one.
    pub idempotency: Option<IdempotencySettings>,
    /// The DynamoDB table of the FIFO attempt ledger ([`crate::ledger`]): `REDRIVE_LEDGER_TABLE`,
    /// else the idempotency store's table. `None`: a FIFO record's receives all count as attempts.
    pub ledger_table: Option<String>,
    /// Large messages through S3 ([`crate::payload`]), when `REDRIVE_PAYLOAD_BUCKET` names a bucket.
    pub payloads: Option<PayloadSettings>,
    /// When to ask for the mapping to be paused, when `REDRIVE_PAUSE_AFTER` is set.
    pub pause: Option<PauseSettings>,
}

/// When a consumer asks for its mapping to be paused (`REDRIVE_PAUSE_AFTER`), and where the
/// request goes (`REDRIVE_PAUSE_QUEUE_URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PauseSettings {
    /// How long the handler's downstream stays down before the consumer asks.
    pub after: Duration,
    /// The intake controller's queue.
    pub queue_url: String,
}

impl PauseSettings {
    /// Ask after `after`, on the queue `queue_url`.
    pub fn new(after: Duration, queue_url: impl Into<String>) -> Self {
        Self {
            after,
            queue_url: queue_url.into(),
        }
    }

    fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Option<Self>, ConfigError> {
        let queue_url = env.get("REDRIVE_PAUSE_QUEUE_URL");
        if env.get("REDRIVE_PAUSE_AFTER").is_none() {
            return match queue_url {
                Some(url) => Err(ConfigError::new(
                    "REDRIVE_PAUSE_QUEUE_URL",
                    &url,
                    "set without REDRIVE_PAUSE_AFTER: say how long an outage lasts before the \
                     intake is paused",
                )),
                None => Ok(None),
            };
        }
        let after = env.duration("REDRIVE_PAUSE_AFTER", Duration::ZERO)?;
        if !(Duration::from_secs(60)..=Duration::from_secs(3600)).contains(&after) {
            return Err(ConfigError::new(
                "REDRIVE_PAUSE_AFTER",
                &format!("{after:?}"),
                "between 1m and 1h",
            ));
        }
        let queue_url = queue_url.ok_or_else(|| {
            ConfigError::new(
                "REDRIVE_PAUSE_AFTER",
                &format!("{after:?}"),
                "set without REDRIVE_PAUSE_QUEUE_URL: name the intake controller's queue",
            )
        })?;
        Ok(Some(Self { after, queue_url }))
    }
}

/// Where a consumer's large message bodies go (`REDRIVE_PAYLOAD_BUCKET`, `REDRIVE_PAYLOAD_PREFIX`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PayloadSettings {
    /// The bucket.
    pub bucket: String,
    /// The key prefix of redrive's own objects.
    pub prefix: String,
}

impl PayloadSettings {
    fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Option<Self>, ConfigError> {
        let prefix = env.get("REDRIVE_PAYLOAD_PREFIX");
        let Some(bucket) = env.get("REDRIVE_PAYLOAD_BUCKET") else {
            return match prefix {
                Some(prefix) => Err(ConfigError::new(
                    "REDRIVE_PAYLOAD_PREFIX",
                    &prefix,
                    "set without REDRIVE_PAYLOAD_BUCKET: name the bucket too",
                )),
                None => Ok(None),
            };
        };
        // S3's bucket naming rules (general purpose buckets): 3 to 63 lowercase letters, digits,
        // dots and hyphens, beginning and ending with a letter or digit.
        let edge =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let valid = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
            && edge(bucket.chars().next())
            && edge(bucket.chars().last());
        if !valid {
            return Err(ConfigError::new(
                "REDRIVE_PAYLOAD_BUCKET",
                &bucket,
                "a bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, beginning \
                 and ending with a letter or digit (a name, not an ARN or s3:// URL)",
            ));
        }
        let prefix = prefix.unwrap_or_else(|| crate::payload::DEFAULT_PREFIX.to_owned());
        if prefix.starts_with('/') || prefix.len() > 512 {
            return Err(ConfigError::new(
                "REDRIVE_PAYLOAD_PREFIX",
                &prefix,
                "a key prefix of at most 512 bytes, not beginning with / (redrive/ by default)",
            ));
        }
        Ok(Some(Self { bucket, prefix }))
    }
}

impl From<&Settings> for ProcessorConfig {
    fn from(settings: &Settings) -> Self {
        settings.processor.clone()
    }
}

/// A consumer's shared idempotency store ([`IdempotencySettings::wrap`] applies it).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct IdempotencySettings {
    /// The DynamoDB table (partition key `pk`, TTL on `expires_at`).
    pub table: String,
    /// Where a message's key comes from.
    pub key: KeyFrom,
    /// How long a claim holds: about the function timeout.
    pub lease: Duration,
    /// How long a done key is remembered: longer than any queue keeps a copy.
    pub keep: Duration,
    /// Refuse a key that comes back with another body ([`Idempotent::check_payload`]).
    pub check_payload: bool,
}

impl IdempotencySettings {
    /// Wraps `inner` as these settings say: key source, lease and how long a done key is kept.
    pub fn wrap<H: RecordHandler, S: IdempotencyStore + 'static>(
        &self,
        inner: H,
        store: S,
    ) -> Idempotent<H, S> {
        let mut idempotent = Idempotent::new(inner, store, self.key.clone());
        idempotent.lease = self.lease;
        idempotent.keep = self.keep;
        idempotent.check_payload = self.check_payload;
        idempotent
    }

    fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Option<Self>, ConfigError> {
        let Some(table) = env.get("REDRIVE_IDEMPOTENCY_TABLE") else {
            for name in [
                "REDRIVE_IDEMPOTENCY_KEY",
                "REDRIVE_IDEMPOTENCY_LEASE",
                "REDRIVE_IDEMPOTENCY_TTL",
                "REDRIVE_IDEMPOTENCY_PAYLOAD_CHECK",
            ] {
                if let Some(value) = env.get(name) {
                    return Err(ConfigError::new(
                        name,
                        &value,
                        "set without REDRIVE_IDEMPOTENCY_TABLE, which names the store",
                    ));
                }
            }
            return Ok(None);
        };
        let key = match env.get("REDRIVE_IDEMPOTENCY_KEY") {
            None => KeyFrom::MessageId,
            Some(key) if key == "messageId" => KeyFrom::MessageId,
            Some(pointer) if pointer.starts_with('/') => KeyFrom::BodyField(pointer),
            Some(other) => {
                return Err(ConfigError::new(
                    "REDRIVE_IDEMPOTENCY_KEY",
                    &other,
                    "messageId, or a JSON pointer into the body such as /orderId",
                ))
            }
        };
        let within =
            |name: &str, value: Duration, range: std::ops::RangeInclusive<Duration>, text: &str| {
                if range.contains(&value) {
                    Ok(value)
                } else {
                    Err(ConfigError::new(name, &format!("{value:?}"), text))
                }
            };
        let lease = env.duration("REDRIVE_IDEMPOTENCY_LEASE", Duration::from_secs(15 * 60))?;
        let lease = within(
            "REDRIVE_IDEMPOTENCY_LEASE",
            lease,
            Duration::from_secs(1)..=Duration::from_secs(12 * 3600),
            "between 1s and 12h",
        )?;
        let keep = env.duration("REDRIVE_IDEMPOTENCY_TTL", Duration::from_secs(14 * 86400))?;
        let keep = within(
            "REDRIVE_IDEMPOTENCY_TTL",
            keep,
            Duration::from_secs(3600)..=Duration::from_secs(365 * 86400),
            "between 1h and 365d",
        )?;
        let check_payload = match env.get("REDRIVE_IDEMPOTENCY_PAYLOAD_CHECK").as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(ConfigError::new(
                    "REDRIVE_IDEMPOTENCY_PAYLOAD_CHECK",
                    other,
                    "true or false",
                ))
            }
        };
        Ok(Some(Self {
            table,
            key,
            lease,
            keep,
            check_payload,
        }))
    }
}

impl Settings {
    /// Reads and checks the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        read_process_env(|names, lookup| Self::from_lookup(names, lookup))
    }

    /// `names` are all variable names present (to catch misspelt `REDRIVE_*` ones).
    pub fn from_lookup<'n>(
        names: impl IntoIterator<Item = &'n str>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env = Env::new(names, lookup)?;
        let get = |name: &str| env.get(name);
        let duration = |name: &str, default: Duration| env.duration(name, default);
        let number = |name: &str, default: f64, range: std::ops::RangeInclusive<f64>| {
            env.number(name, default, range)
        };

        let dlq_url = get("REDRIVE_DLQ_URL");
        let lane_url = get("REDRIVE_LANE_URL");
        if let Some(url) = &lane_url {
            // A lane keeps a key's records in order only as a FIFO queue's message group.
            if !url.ends_with(".fifo") || !url.contains("://") {
                return Err(ConfigError::new(
                    "REDRIVE_LANE_URL",
                    url,
                    "expected the URL of an SQS FIFO queue (https://sqs.<region>.amazonaws.com/<account>/<name>.fifo): the lane keeps each key's records in order",
                ));
            }
        }
        let backoff = match get("REDRIVE_RETRY_SEQUENCE") {
            Some(text) => Backoff::Sequence(parse_sequence(&text).ok_or_else(|| {
                ConfigError::new(
                    "REDRIVE_RETRY_SEQUENCE",
                    &text,
                    "expected comma-separated durations such as 5m,30m,1h",
                )
            })?),
            None => Backoff::Exponential {
                base: duration("REDRIVE_BACKOFF_BASE", Duration::from_secs(2))?,
                factor: number("REDRIVE_BACKOFF_FACTOR", 2.0, 1.0..=10.0)?,
                cap: duration("REDRIVE_BACKOFF_CAP", Duration::from_secs(900))?,
            },
        };
        let default_attempts = match &backoff {
            Backoff::Sequence(delays) => delays.len() + 1,
            Backoff::Exponential { .. } => 5,
        };
        let max_attempts = env.whole("REDRIVE_MAX_ATTEMPTS", default_attempts as u32, 1..=100)?;
        let defer_max_age = duration(
            "REDRIVE_DEFER_MAX_AGE",
            crate::backoff::DEFAULT_DEFER_MAX_AGE,
        )?;
        if !crate::backoff::DEFER_MAX_AGE_RANGE.contains(&defer_max_age) {
            return Err(ConfigError::new(
                "REDRIVE_DEFER_MAX_AGE",
                &format!("{defer_max_age:?}"),
                "between 1m and 14d",
            ));
        }
        let retry = RetryPolicy {
            backoff,
            max_attempts,
            defer_max_age,
        }
        .validate()
        .map_err(|error| {
            ConfigError::new(
                "REDRIVE_BACKOFF_*/REDRIVE_RETRY_SEQUENCE",
                &error.value,
                error.reason,
            )
        })?;

        let deadline_margin = duration("REDRIVE_DEADLINE_MARGIN", Duration::from_secs(2))?;
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&deadline_margin) {
            return Err(ConfigError::new(
                "REDRIVE_DEADLINE_MARGIN",
                &format!("{deadline_margin:?}"),
                "between 1s and 60s: the time left after the last record to send the batch's \
                 re-sends and dead letters before Lambda's timeout",
            ));
        }
        let concurrency = env.whole(
            "REDRIVE_CONCURRENCY",
            crate::processor::DEFAULT_CONCURRENCY.get() as u32,
            1..=10_000,
        )?;
        let threshold = number("REDRIVE_BREAKER_THRESHOLD", 5.0, 0.0..=1000.0)? as u32;
        let open_for = duration("REDRIVE_BREAKER_OPEN_FOR", Duration::from_secs(30))?;
        if open_for < Duration::from_secs(1) || open_for > Duration::from_secs(900) {
            return Err(ConfigError::new(
                "REDRIVE_BREAKER_OPEN_FOR",
                &format!("{open_for:?}"),
                "between 1s and 15m",
            ));
        }
        let tenant_threshold = env.whole("REDRIVE_TENANT_BREAKER_THRESHOLD", 5, 0..=1000)?;
        let tenant_open_for = duration("REDRIVE_TENANT_BREAKER_OPEN_FOR", Duration::from_secs(30))?;
        if !(Duration::from_secs(1)..=Duration::from_secs(900)).contains(&tenant_open_for) {
            return Err(ConfigError::new(
                "REDRIVE_TENANT_BREAKER_OPEN_FOR",
                &format!("{tenant_open_for:?}"),
                "between 1s and 15m",
            ));
        }
        let tenant_capacity =
            env.whole("REDRIVE_TENANT_BREAKER_CAPACITY", 10_000, 1..=1_000_000)?;
        let ledger_table = get("REDRIVE_LEDGER_TABLE")
            .or_else(|| get("REDRIVE_IDEMPOTENCY_TABLE"))
            .filter(|table| !table.is_empty());
        if lane_url.is_some() && ledger_table.is_none() {
            return Err(ConfigError::new(
                "REDRIVE_LANE_URL",
                "set",
                "the lane keeps a key's (or a FIFO group's) order across batches in the attempt ledger: set REDRIVE_LEDGER_TABLE (or REDRIVE_IDEMPOTENCY_TABLE)",
            ));
        }
        let source = source_queue(&env)?;
        let fifo_on_dead_letter = fifo_on_dead_letter(&env, ledger_table.is_some())?;
        if let FifoOnDeadLetter::Hold { max_age } = fifo_on_dead_letter {
            if max_age + crate::fate::RETENTION_MARGIN > source.retention {
                return Err(ConfigError::new(
                    "REDRIVE_FIFO_HOLD_MAX_AGE",
                    &format!("{max_age:?}"),
                    "at least an hour below REDRIVE_SOURCE_RETENTION: a held head must be \
                     dead-lettered before the queue's retention deletes it",
                ));
            }
        }
        Ok(Self {
            processor: ProcessorConfig {
                dlq_url,
                source_queue_url: get("REDRIVE_SOURCE_QUEUE_URL"),
                retry,
                deadline_margin,
                concurrency: NonZeroUsize::new(concurrency as usize).unwrap_or(NonZeroUsize::MIN),
                fifo_on_dead_letter,
                source,
                lane_url,
            },
            breaker: BreakerSettings {
                threshold,
                open_for,
            },
            tenant_breaker: TenantBreakerSettings {
                threshold: tenant_threshold,
                open_for: tenant_open_for,
                capacity: tenant_capacity as usize,
            },
            metrics_namespace: get("REDRIVE_METRICS_NAMESPACE").unwrap_or_else(|| "redrive".into()),
            ledger_table,
            idempotency: IdempotencySettings::from_env(&env)?,
            payloads: PayloadSettings::from_env(&env)?,
            pause: PauseSettings::from_env(&env)?,
        })
    }
}

/// `REDRIVE_SOURCE_RETENTION` and `REDRIVE_SOURCE_VISIBILITY_TIMEOUT`, within SQS's ranges.
fn source_queue<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<SourceQueue, ConfigError> {
    let default = SourceQueue::default();
    let within =
        |name: &str, value: Duration, range: std::ops::RangeInclusive<Duration>, says: &str| {
            if range.contains(&value) {
                Ok(value)
            } else {
                Err(ConfigError::new(name, &format!("{value:?}"), says))
            }
        };
    Ok(SourceQueue {
        retention: within(
            "REDRIVE_SOURCE_RETENTION",
            env.duration("REDRIVE_SOURCE_RETENTION", default.retention)?,
            Duration::from_secs(60)..=Duration::from_secs(14 * 86400),
            "between 1m and 14d, as SQS allows",
        )?,
        visibility_timeout: within(
            "REDRIVE_SOURCE_VISIBILITY_TIMEOUT",
            env.duration(
                "REDRIVE_SOURCE_VISIBILITY_TIMEOUT",
                default.visibility_timeout,
            )?,
            Duration::ZERO..=crate::fate::VISIBILITY_LIMIT,
            "between 0s and 12h, as SQS allows",
        )?,
    })
}

/// `REDRIVE_FIFO_ON_DEAD_LETTER` and, with `hold`, `REDRIVE_FIFO_HOLD_MAX_AGE`.
fn fifo_on_dead_letter<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
    ledger: bool,
) -> Result<FifoOnDeadLetter, ConfigError> {
    let hold_max_age = env.duration("REDRIVE_FIFO_HOLD_MAX_AGE", Duration::from_secs(3 * 86400))?;
    match env.get("REDRIVE_FIFO_ON_DEAD_LETTER").as_deref() {
        None | Some("continue") => Ok(FifoOnDeadLetter::Continue),
        Some("hold") if !ledger => Err(ConfigError::new(
            "REDRIVE_FIFO_ON_DEAD_LETTER",
            "hold",
            "hold keeps held groups in the attempt ledger: set REDRIVE_LEDGER_TABLE (or REDRIVE_IDEMPOTENCY_TABLE)",
        )),
        Some("hold") if !(Duration::from_secs(3600)..=Duration::from_secs(14 * 86400)).contains(&hold_max_age) => {
            Err(ConfigError::new(
                "REDRIVE_FIFO_HOLD_MAX_AGE",
                &format!("{hold_max_age:?}"),
                "between 1h and 14d, and below the source queue's retention period",
            ))
        }
        Some("hold") => Ok(FifoOnDeadLetter::Hold {
            max_age: hold_max_age,
        }),
        Some(other) => Err(ConfigError::new(
            "REDRIVE_FIFO_ON_DEAD_LETTER",
            other,
            "continue or hold",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        Settings::from_lookup(vars.iter().map(|(n, _)| *n), lookup)
    }

    #[test]
    fn defaults_need_nothing_and_no_dlq_means_report_only() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.processor.dlq_url, None);
        let s = settings(&[("REDRIVE_DLQ_URL", "https://sqs/dlq")]).unwrap();
        assert_eq!(s.processor.retry, RetryPolicy::default());
        assert_eq!(s.processor.deadline_margin, Duration::from_secs(2));
        assert_eq!(
            s.processor.concurrency,
            crate::processor::DEFAULT_CONCURRENCY
        );
        assert_eq!(s.breaker, BreakerSettings::default());
        assert_eq!(s.idempotency, None);
        assert_eq!(s.ledger_table, None);
        let s = settings(&[
            ("REDRIVE_IDEMPOTENCY_TABLE", "orders-idempotency"),
            ("REDRIVE_IDEMPOTENCY_KEY", "/orderId"),
            ("REDRIVE_IDEMPOTENCY_LEASE", "40s"),
        ])
        .unwrap();
        assert_eq!(
            s.idempotency,
            Some(IdempotencySettings {
                table: "orders-idempotency".into(),
                key: KeyFrom::BodyField("/orderId".into()),
                lease: Duration::from_secs(40),
                keep: Duration::from_secs(14 * 86400),
                check_payload: false,
            })
        );
        assert_eq!(s.ledger_table.as_deref(), Some("orders-idempotency"));
        let s = settings(&[("REDRIVE_LEDGER_TABLE", "payments-ledger")]).unwrap();
        assert_eq!(s.ledger_table.as_deref(), Some("payments-ledger"));
        assert_eq!(s.processor.fifo_on_dead_letter, FifoOnDeadLetter::Continue);
        let s = settings(&[
            ("REDRIVE_LEDGER_TABLE", "payments-ledger"),
            ("REDRIVE_FIFO_ON_DEAD_LETTER", "hold"),
            ("REDRIVE_FIFO_HOLD_MAX_AGE", "13d"),
            ("REDRIVE_SOURCE_RETENTION", "14d"),
            ("REDRIVE_SOURCE_VISIBILITY_TIMEOUT", "95m"),
        ])
        .unwrap();
        assert_eq!(
            s.processor.source,
            SourceQueue {
                retention: Duration::from_secs(14 * 86400),
                visibility_timeout: Duration::from_secs(95 * 60),
            }
        );
        assert_eq!(
            s.processor.fifo_on_dead_letter,
            FifoOnDeadLetter::Hold {
                max_age: Duration::from_secs(13 * 86400)
            }
        );
        let error = settings(&[("REDRIVE_FIFO_ON_DEAD_LETTER", "hold")]).unwrap_err();
        assert!(
            error.to_string().contains("REDRIVE_LEDGER_TABLE"),
            "{error}"
        );
        assert!(settings(&[("REDRIVE_FIFO_ON_DEAD_LETTER", "pause")]).is_err());
        let s = settings(&[("REDRIVE_DEFER_MAX_AGE", "6h")]).unwrap();
        assert_eq!(
            s.processor.retry.defer_max_age,
            Duration::from_secs(6 * 3600)
        );
        let s = settings(&[("REDRIVE_CONCURRENCY", "1")]).unwrap();
        assert_eq!(s.processor.concurrency.get(), 1);
    }

    #[test]
    fn a_payload_bucket_is_a_bucket_name_and_its_prefix_needs_it() {
        assert_eq!(settings(&[]).unwrap().payloads, None);
        let s = settings(&[("REDRIVE_PAYLOAD_BUCKET", "orders-payloads")]).unwrap();
        assert_eq!(
            s.payloads,
            Some(PayloadSettings {
                bucket: "orders-payloads".into(),
                prefix: "redrive/".into()
            })
        );
        for (name, value) in [
            ("REDRIVE_PAYLOAD_BUCKET", "arn:aws:s3:::orders-payloads"),
            ("REDRIVE_PAYLOAD_BUCKET", "s3://orders-payloads"),
            ("REDRIVE_PAYLOAD_BUCKET", "Orders"),
            ("REDRIVE_PAYLOAD_BUCKET", "ab"),
            ("REDRIVE_PAYLOAD_PREFIX", "large/"),
        ] {
            let error = settings(&[(name, value)]).unwrap_err();
            assert_eq!(error.name, name, "{value}");
        }
        let error = settings(&[
            ("REDRIVE_PAYLOAD_BUCKET", "orders-payloads"),
            ("REDRIVE_PAYLOAD_PREFIX", "/large"),
        ])
        .unwrap_err();
        assert_eq!(error.name, "REDRIVE_PAYLOAD_PREFIX");
    }

    #[test]
    fn pausing_needs_both_its_wait_and_its_queue() {
        assert_eq!(settings(&[]).unwrap().pause, None);
        let s = settings(&[
            ("REDRIVE_PAUSE_AFTER", "5m"),
            ("REDRIVE_PAUSE_QUEUE_URL", "https://sqs.local/1/intake"),
        ])
        .unwrap();
        assert_eq!(
            s.pause,
            Some(PauseSettings {
                after: Duration::from_secs(300),
                queue_url: "https://sqs.local/1/intake".into(),
            })
        );
        for (env, name) in [
            (&[("REDRIVE_PAUSE_AFTER", "5m")][..], "REDRIVE_PAUSE_AFTER"),
            (
                &[("REDRIVE_PAUSE_QUEUE_URL", "https://sqs.local/1/intake")][..],
                "REDRIVE_PAUSE_QUEUE_URL",
            ),
            (
                &[
                    ("REDRIVE_PAUSE_AFTER", "10s"),
                    ("REDRIVE_PAUSE_QUEUE_URL", "https://sqs.local/1/intake"),
                ][..],
                "REDRIVE_PAUSE_AFTER",
            ),
        ] {
            assert_eq!(settings(env).unwrap_err().name, name, "{env:?}");
        }
    }

    #[test]
    fn a_retry_sequence_sets_the_attempts_unless_given() {
        let s = settings(&[
            ("REDRIVE_DLQ_URL", "u"),
            ("REDRIVE_RETRY_SEQUENCE", "5m,5m,30m,30m,30m,1h"),
        ])
        .unwrap();
        assert_eq!(s.processor.retry.max_attempts, 7);
        let s = settings(&[
            ("REDRIVE_DLQ_URL", "u"),
            ("REDRIVE_RETRY_SEQUENCE", "5m"),
            ("REDRIVE_MAX_ATTEMPTS", "3"),
        ])
        .unwrap();
        assert_eq!(s.processor.retry.max_attempts, 3);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("REDRIVE_SOURCE_RETENTION", "15d")],
                "REDRIVE_SOURCE_RETENTION",
            ),
            (
                &[("REDRIVE_SOURCE_VISIBILITY_TIMEOUT", "13h")],
                "REDRIVE_SOURCE_VISIBILITY_TIMEOUT",
            ),
            (
                // A hold that would outlast the queue's retention (4 days unless told).
                &[
                    ("REDRIVE_LEDGER_TABLE", "payments-ledger"),
                    ("REDRIVE_FIFO_ON_DEAD_LETTER", "hold"),
                    ("REDRIVE_FIFO_HOLD_MAX_AGE", "4d"),
                ],
                "REDRIVE_FIFO_HOLD_MAX_AGE",
            ),
            (
                &[("REDRIVE_DLQ_URL", "u"), ("REDRIVE_MAX_ATTEMPTS", "0")],
                "REDRIVE_MAX_ATTEMPTS",
            ),
            (
                &[("REDRIVE_DLQ_URL", "u"), ("REDRIVE_MAX_ATTEMPTS", "2.5")],
                "REDRIVE_MAX_ATTEMPTS",
            ),
            (
                &[("REDRIVE_DLQ_URL", "u"), ("REDRIVE_BACKOFF_BASE", "soon")],
                "REDRIVE_BACKOFF_BASE",
            ),
            (
                &[
                    ("REDRIVE_DLQ_URL", "u"),
                    ("REDRIVE_RETRY_SEQUENCE", "5m,13h"),
                ],
                "REDRIVE_BACKOFF_*/REDRIVE_RETRY_SEQUENCE",
            ),
            (
                &[("REDRIVE_DLQ_URL", "u"), ("REDRIVE_MAX_ATTEMPT", "3")],
                "REDRIVE_MAX_ATTEMPT",
            ),
            (
                &[("REDRIVE_DLQ_URL", "u"), ("REDRIVE_BREAKER_OPEN_FOR", "0s")],
                "REDRIVE_BREAKER_OPEN_FOR",
            ),
            (
                &[("REDRIVE_IDEMPOTENCY_KEY", "/orderId")],
                "REDRIVE_IDEMPOTENCY_KEY",
            ),
            (
                &[
                    ("REDRIVE_IDEMPOTENCY_TABLE", "t"),
                    ("REDRIVE_IDEMPOTENCY_KEY", "orderId"),
                ],
                "REDRIVE_IDEMPOTENCY_KEY",
            ),
            (
                &[
                    ("REDRIVE_IDEMPOTENCY_TABLE", "t"),
                    ("REDRIVE_IDEMPOTENCY_LEASE", "13h"),
                ],
                "REDRIVE_IDEMPOTENCY_LEASE",
            ),
            (&[("REDRIVE_DEFER_MAX_AGE", "30s")], "REDRIVE_DEFER_MAX_AGE"),
            (&[("REDRIVE_DEFER_MAX_AGE", "15d")], "REDRIVE_DEFER_MAX_AGE"),
            (
                &[("REDRIVE_DEFER_MAX_AGE", "later")],
                "REDRIVE_DEFER_MAX_AGE",
            ),
            (&[("REDRIVE_CONCURRENCY", "0")], "REDRIVE_CONCURRENCY"),
            (
                &[("REDRIVE_DEADLINE_MARGIN", "500ms")],
                "REDRIVE_DEADLINE_MARGIN",
            ),
            (&[("REDRIVE_CONCURRENCY", "10001")], "REDRIVE_CONCURRENCY"),
            (&[("REDRIVE_CONCURRENCY", "many")], "REDRIVE_CONCURRENCY"),
        ];
        for (vars, variable) in cases {
            let error = settings(vars).unwrap_err();
            assert_eq!(error.name, *variable, "{error}");
        }
    }
}
