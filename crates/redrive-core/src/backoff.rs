//! Retry policy: how many attempts a record gets and how long to wait between them.
use std::time::Duration;

use crate::error::ConfigError;

/// SQS's largest per-message delay. Longer waits are reached by hops (see [`crate::fate`]).
pub const MAX_DELAY_SECONDS: u32 = 900;
/// Longest wait a policy may ask for between two attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(12 * 3600);
/// How long a record may be deferred (a breaker open, a handler asking to wait) after its first
/// failure before it is dead-lettered: an outage longer than this moves its records to the DLQ,
/// where the reprocessor sends them home after the downstream heals.
pub const DEFAULT_DEFER_MAX_AGE: Duration = Duration::from_secs(3600);
/// The range `REDRIVE_DEFER_MAX_AGE` accepts: a minute up to SQS's longest retention.
pub const DEFER_MAX_AGE_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(14 * 86400);

/// How the wait before each retry grows.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Backoff {
    /// `random(0, min(cap, base * factor^(n-1)))` before retry `n`: "full jitter", which spreads
    /// a burst of failures over the whole window instead of re-synchronising them.
    Exponential {
        /// The first ceiling.
        base: Duration,
        /// Growth of the ceiling per retry.
        factor: f64,
        /// The largest ceiling.
        cap: Duration,
    },
    /// Fixed waits before retry 1, 2, ... (the last one repeats): `5m,5m,30m,30m,30m,1h`.
    Sequence(Vec<Duration>),
}

/// How many attempts a record gets and how long it waits between them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// The waits between attempts.
    pub backoff: Backoff,
    /// Deliveries a record gets in all, the first one included.
    pub max_attempts: u32,
    /// Deferrals spend no attempt, so they are bounded by time instead: past this age since the
    /// first failure a deferred record is dead-lettered (see [`DEFAULT_DEFER_MAX_AGE`]).
    pub defer_max_age: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            backoff: Backoff::Exponential {
                base: Duration::from_secs(2),
                factor: 2.0,
                cap: Duration::from_secs(u64::from(MAX_DELAY_SECONDS)),
            },
            max_attempts: 5,
            defer_max_age: DEFAULT_DEFER_MAX_AGE,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1 for the wait after the first failed attempt).
    /// `unit` is a uniform random number in [0, 1) for the jitter.
    pub fn delay(&self, retry: u32, unit: f64) -> Duration {
        match &self.backoff {
            Backoff::Exponential { base, factor, cap } => {
                let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
                let ceiling = (base.as_secs_f64() * factor.powi(exponent)).min(cap.as_secs_f64());
                Duration::from_secs_f64(ceiling * unit.clamp(0.0, 1.0))
            }
            Backoff::Sequence(delays) => {
                let index = usize::try_from(retry.max(1) - 1).unwrap_or(usize::MAX);
                delays[index.min(delays.len() - 1)]
            }
        }
    }

    /// The largest delay the policy can produce before retry `retry` (the jitter envelope).
    pub fn ceiling(&self, retry: u32) -> Duration {
        self.delay(retry, 1.0)
    }

    /// Checks the bounds; every constructor of a policy from outside input goes through this.
    pub fn validate(self) -> Result<Self, ConfigError> {
        let invalid = |reason: &str| ConfigError::new("retry policy", &format!("{self:?}"), reason);
        if !(1..=100).contains(&self.max_attempts) {
            return Err(invalid("max attempts must be between 1 and 100"));
        }
        if !DEFER_MAX_AGE_RANGE.contains(&self.defer_max_age) {
            return Err(invalid("the deferral age limit must be between 1m and 14d"));
        }
        match &self.backoff {
            Backoff::Exponential { base, factor, cap } => {
                if base.is_zero() || *base > MAX_RETRY_DELAY {
                    return Err(invalid("base must be above 0 and at most 12h"));
                }
                if !(1.0..=10.0).contains(factor) {
                    return Err(invalid("factor must be between 1 and 10"));
                }
                if cap < base || *cap > MAX_RETRY_DELAY {
                    return Err(invalid("cap must be at least the base and at most 12h"));
                }
            }
            Backoff::Sequence(delays) => {
                if delays.is_empty() || delays.iter().any(|d| *d > MAX_RETRY_DELAY) {
                    return Err(invalid(
                        "a retry sequence needs at least one delay, each at most 12h",
                    ));
                }
            }
        }
        Ok(self)
    }
}

/// Parses `500ms`, `30s`, `5m`, `1h`, `2d`, or a bare number of seconds. Not humantime's parser:
/// it refuses fractions (`0.5s`), which Terraform and the local stack write for fractional tfvars.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86400.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

/// Parses a comma-separated retry sequence such as `5m,5m,30m,30m,30m,1h`.
pub fn parse_sequence(text: &str) -> Option<Vec<Duration>> {
    text.split(',').map(parse_duration).collect()
}

/// A wait in whole seconds, rounded up, as SQS's `DelaySeconds` takes it.
pub(crate) fn whole_seconds(delay: Duration) -> u32 {
    u32::try_from(delay.as_millis().div_ceil(1000)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_delays_stay_inside_the_full_jitter_envelope() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.ceiling(1), Duration::from_secs(2));
        assert_eq!(policy.ceiling(3), Duration::from_secs(8));
        assert_eq!(policy.ceiling(20), Duration::from_secs(900), "capped");
        assert_eq!(policy.delay(3, 0.0), Duration::ZERO);
        assert_eq!(policy.delay(3, 0.5), Duration::from_secs(4));
    }

    #[test]
    fn a_sequence_repeats_its_last_delay() {
        let policy = RetryPolicy {
            backoff: Backoff::Sequence(parse_sequence("5m,5m,30m,1h").unwrap()),
            max_attempts: 7,
            ..RetryPolicy::default()
        };
        let minutes: Vec<u64> = (1..=6)
            .map(|n| policy.delay(n, 0.3).as_secs() / 60)
            .collect();
        assert_eq!(minutes, [5, 5, 30, 60, 60, 60]);
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("5 minutes"), None);
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_sequence("5m,,1h"), None);
    }

    #[test]
    fn validation_rejects_out_of_range_policies() {
        let zero = RetryPolicy {
            max_attempts: 0,
            ..RetryPolicy::default()
        };
        assert!(zero.validate().unwrap_err().reason.contains("max attempts"));
        let long = RetryPolicy {
            backoff: Backoff::Sequence(vec![Duration::from_secs(50_000)]),
            max_attempts: 2,
            ..RetryPolicy::default()
        };
        assert!(long.validate().is_err());
        let instant = RetryPolicy {
            defer_max_age: Duration::from_secs(59),
            ..RetryPolicy::default()
        };
        assert!(instant.validate().unwrap_err().reason.contains("deferral"));
        assert!(RetryPolicy::default().validate().is_ok());
    }
}
