//! Configuration from environment variables, validated at start.
use std::time::Duration;

use crate::backoff::{parse_duration, parse_sequence, Backoff, RetryPolicy};
use crate::breaker::BreakerSettings;
use crate::error::ConfigError;

/// Every variable redrive reads, with its default; any other `REDRIVE_*` variable is a typo and
/// refused at start.
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
    ("REDRIVE_DEADLINE_MARGIN", "2s"),
    ("REDRIVE_BREAKER_THRESHOLD", "5 (0 disables the breaker)"),
    ("REDRIVE_BREAKER_OPEN_FOR", "30s"),
    ("REDRIVE_METRICS_NAMESPACE", "redrive"),
];

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `None`: report-only (failures are given back to SQS, nothing is re-sent).
    pub dlq_url: Option<String>,
    pub source_queue_url: Option<String>,
    pub retry: RetryPolicy,
    pub deadline_margin: Duration,
    pub breaker: BreakerSettings,
    pub metrics_namespace: String,
}

impl Settings {
    pub fn from_env() -> Result<Self, ConfigError> {
        let names: Vec<String> = std::env::vars().map(|(name, _)| name).collect();
        Self::from_lookup(names.iter().map(String::as_str), |name| {
            std::env::var(name).ok()
        })
    }

    /// `names` are all variable names present (to catch misspelt `REDRIVE_*` ones).
    pub fn from_lookup<'n>(
        names: impl IntoIterator<Item = &'n str>,
        lookup: impl Fn(&str) -> Option<String>,
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
        let get = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let duration = |name: &str, default: Duration| match get(name) {
            None => Ok(default),
            Some(text) => parse_duration(&text).ok_or_else(|| {
                ConfigError::new(
                    name,
                    &text,
                    "expected a duration such as 500ms, 30s, 5m or 1h",
                )
            }),
        };
        let number =
            |name: &str, default: f64, range: std::ops::RangeInclusive<f64>| match get(name) {
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
            };

        let dlq_url = get("REDRIVE_DLQ_URL");
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
        let max_attempts = number("REDRIVE_MAX_ATTEMPTS", default_attempts as f64, 1.0..=100.0)?;
        if max_attempts.fract() != 0.0 {
            return Err(ConfigError::new(
                "REDRIVE_MAX_ATTEMPTS",
                &max_attempts.to_string(),
                "expected a whole number",
            ));
        }
        let retry = RetryPolicy {
            backoff,
            max_attempts: max_attempts as u32,
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
        if deadline_margin > Duration::from_secs(60) {
            return Err(ConfigError::new(
                "REDRIVE_DEADLINE_MARGIN",
                &format!("{deadline_margin:?}"),
                "at most 60s",
            ));
        }
        let threshold = number("REDRIVE_BREAKER_THRESHOLD", 5.0, 0.0..=1000.0)? as u32;
        let open_for = duration("REDRIVE_BREAKER_OPEN_FOR", Duration::from_secs(30))?;
        if open_for < Duration::from_secs(1) || open_for > Duration::from_secs(900) {
            return Err(ConfigError::new(
                "REDRIVE_BREAKER_OPEN_FOR",
                &format!("{open_for:?}"),
                "between 1s and 15m",
            ));
        }
        Ok(Self {
            dlq_url,
            source_queue_url: get("REDRIVE_SOURCE_QUEUE_URL"),
            retry,
            deadline_margin,
            breaker: BreakerSettings {
                threshold,
                open_for,
            },
            metrics_namespace: get("REDRIVE_METRICS_NAMESPACE").unwrap_or_else(|| "redrive".into()),
        })
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
        assert_eq!(s.dlq_url, None);
        let s = settings(&[("REDRIVE_DLQ_URL", "https://sqs/dlq")]).unwrap();
        assert_eq!(s.retry, RetryPolicy::default());
        assert_eq!(s.deadline_margin, Duration::from_secs(2));
        assert_eq!(s.breaker, BreakerSettings::default());
    }

    #[test]
    fn a_retry_sequence_sets_the_attempts_unless_given() {
        let s = settings(&[
            ("REDRIVE_DLQ_URL", "u"),
            ("REDRIVE_RETRY_SEQUENCE", "5m,5m,30m,30m,30m,1h"),
        ])
        .unwrap();
        assert_eq!(s.retry.max_attempts, 7);
        let s = settings(&[
            ("REDRIVE_DLQ_URL", "u"),
            ("REDRIVE_RETRY_SEQUENCE", "5m"),
            ("REDRIVE_MAX_ATTEMPTS", "3"),
        ])
        .unwrap();
        assert_eq!(s.retry.max_attempts, 3);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
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
        ];
        for (vars, variable) in cases {
            let error = settings(vars).unwrap_err();
            assert_eq!(error.name, *variable, "{error}");
        }
    }
}
