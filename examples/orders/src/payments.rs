//! The payment downstream the orders consumer calls, and a simulator with fault knobs for tests and
//! demos. A real deployment implements [`PaymentGateway`] over its payment API.
//!
//! [`PaymentGateway`]: crate::PaymentGateway
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redrive::retry::parse_duration;
use redrive::ConfigError;

use crate::{Order, PaymentError, PaymentGateway};

/// Every knob, its meaning and default (listed in the README).
pub const KNOBS: &[(&str, &str)] = &[
    (
        "PAYMENTS_FAILURE_RATE",
        "0: share of calls (0 to 1) that answer HTTP 503",
    ),
    (
        "PAYMENTS_TIMEOUT_RATE",
        "0: share of calls (0 to 1) that time out",
    ),
    (
        "PAYMENTS_OUTAGE_UNTIL",
        "unset: Unix time (seconds) before which every call times out",
    ),
    (
        "PAYMENTS_OUTAGE_FILE",
        "unset: every call times out while this file exists (delete it to heal)",
    ),
    (
        "PAYMENTS_FLAKY_ORDERS",
        "unset: orderId:N,... such orders time out on their first N attempts",
    ),
    (
        "PAYMENTS_POISON_ORDERS",
        "unset: orderId,... the handler panics on these (a bug)",
    ),
    (
        "PAYMENTS_DECLINE_ABOVE",
        "unset: amounts above this are declined (permanent)",
    ),
    ("PAYMENTS_LATENCY", "0ms: time each call takes"),
    (
        "PAYMENTS_WORK",
        "0ms: CPU time each call spends busy (signing, a fraud score), on the invocation's thread",
    ),
    ("PAYMENTS_SEED", "random: seed of the failure-rate dice"),
];

#[derive(Debug, Default)]
pub struct SimulatedPayments {
    pub failure_rate: f64,
    pub timeout_rate: f64,
    pub outage_until: Option<SystemTime>,
    pub outage_file: Option<PathBuf>,
    pub flaky_orders: Vec<(String, u32)>,
    pub poison_orders: Vec<String>,
    pub decline_above: Option<f64>,
    pub latency: Duration,
    pub work: Duration,
    pub dice: Mutex<fastrand::Rng>,
    /// Orders charged so far with the attempt that succeeded, in order, once [`Self::recording`]
    /// (what tests and the demo count as processed). The deployed function keeps none: the log
    /// would grow by every order a warm container charges.
    charged: Option<Mutex<Vec<(String, u32)>>>,
}

impl SimulatedPayments {
    /// Keeps a log of the orders charged, for [`Self::charged`].
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.charged = Some(Mutex::default());
        self
    }

    /// The orders charged so far with the attempt that succeeded, in order (empty unless
    /// [`Self::recording`]).
    pub fn charged(&self) -> Vec<(String, u32)> {
        self.charged.as_ref().map_or_else(Vec::new, |log| {
            log.lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone()
        })
    }

    /// The service is fixed: every fault knob is switched off; the charged log is kept.
    pub fn heal(&mut self) {
        let charged = std::mem::take(&mut self.charged);
        *self = Self {
            charged,
            ..Self::default()
        };
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| {
            std::env::var(name)
                .ok()
                .filter(|value| !value.trim().is_empty())
        })
    }

    /// The knobs in an env file such as `events/sqs-consumer.env` (`NAME=value` lines, `#` comments).
    pub fn from_env_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::new("env file", &path.display().to_string(), error))?;
        let pairs: Vec<(&str, &str)> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .filter_map(|line| line.split_once('='))
            .collect();
        Self::from_lookup(|name| {
            pairs
                .iter()
                .find(|(key, _)| key.trim() == name)
                .map(|(_, value)| value.trim().to_owned())
        })
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let rate = |name: &str| match get(name) {
            None => Ok(0.0),
            Some(text) => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|rate| (0.0..=1.0).contains(rate))
                .ok_or_else(|| ConfigError::new(name, &text, "expected a share from 0 to 1")),
        };
        let list = |name: &str| -> Vec<String> {
            get(name)
                .map(|text| {
                    text.split(',')
                        .map(|item| item.trim().to_owned())
                        .filter(|item| !item.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        let flaky_orders = list("PAYMENTS_FLAKY_ORDERS")
            .into_iter()
            .map(|item| {
                match item
                    .rsplit_once(':')
                    .map(|(id, n)| (id.to_owned(), n.parse::<u32>()))
                {
                    Some((id, Ok(n))) if !id.is_empty() => Ok((id, n)),
                    _ => Err(ConfigError::new(
                        "PAYMENTS_FLAKY_ORDERS",
                        &item,
                        "expected orderId:failures, e.g. o-7:2",
                    )),
                }
            })
            .collect::<Result<_, _>>()?;
        let outage_until = match get("PAYMENTS_OUTAGE_UNTIL") {
            None => None,
            Some(text) => Some(
                text.trim()
                    .parse::<u64>()
                    .map(|secs| UNIX_EPOCH + Duration::from_secs(secs))
                    .map_err(|_| {
                        ConfigError::new(
                            "PAYMENTS_OUTAGE_UNTIL",
                            &text,
                            "expected Unix time in seconds",
                        )
                    })?,
            ),
        };
        let decline_above = match get("PAYMENTS_DECLINE_ABOVE") {
            None => None,
            Some(text) => Some(text.trim().parse::<f64>().map_err(|_| {
                ConfigError::new("PAYMENTS_DECLINE_ABOVE", &text, "expected an amount")
            })?),
        };
        let duration = |name: &str| match get(name) {
            None => Ok(Duration::ZERO),
            Some(text) => parse_duration(&text)
                .ok_or_else(|| ConfigError::new(name, &text, "expected a duration such as 20ms")),
        };
        let latency = duration("PAYMENTS_LATENCY")?;
        let work = duration("PAYMENTS_WORK")?;
        let dice = match get("PAYMENTS_SEED") {
            None => fastrand::Rng::new(),
            Some(text) => fastrand::Rng::with_seed(text.trim().parse().map_err(|_| {
                ConfigError::new("PAYMENTS_SEED", &text, "expected a whole number")
            })?),
        };
        Ok(Self {
            failure_rate: rate("PAYMENTS_FAILURE_RATE")?,
            timeout_rate: rate("PAYMENTS_TIMEOUT_RATE")?,
            outage_until,
            outage_file: get("PAYMENTS_OUTAGE_FILE").map(PathBuf::from),
            flaky_orders,
            poison_orders: list("PAYMENTS_POISON_ORDERS"),
            decline_above,
            latency,
            work,
            dice: Mutex::new(dice),
            charged: None,
        })
    }

    fn in_outage(&self) -> bool {
        self.outage_until
            .is_some_and(|until| SystemTime::now() < until)
            || self.outage_file.as_ref().is_some_and(|file| file.exists())
    }
}

impl PaymentGateway for SimulatedPayments {
    async fn charge(&self, order: &Order<'_>, attempt: u32) -> Result<(), PaymentError> {
        if self.poison_orders.iter().any(|id| *id == *order.order_id) {
            panic!("order {} hit a bug in the payment client", order.order_id);
        }
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        if !self.work.is_zero() {
            let done = std::time::Instant::now() + self.work;
            while std::time::Instant::now() < done {
                std::hint::spin_loop();
            }
        }
        if self.in_outage() {
            return Err(PaymentError::Timeout);
        }
        if self
            .flaky_orders
            .iter()
            .any(|(id, failures)| *id == *order.order_id && attempt <= *failures)
        {
            return Err(PaymentError::Timeout);
        }
        if self.decline_above.is_some_and(|limit| order.amount > limit) {
            return Err(PaymentError::Declined(format!(
                "amount {} is above the card limit",
                order.amount
            )));
        }
        let roll = self
            .dice
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .f64();
        if roll < self.timeout_rate {
            return Err(PaymentError::Timeout);
        }
        if roll < self.timeout_rate + self.failure_rate {
            return Err(PaymentError::Unavailable(503));
        }
        if let Some(log) = &self.charged {
            log.lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((order.order_id.to_string(), attempt));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_recording_simulator_keeps_a_log_of_charges() {
        let order = Order {
            order_id: "o-1".into(),
            customer_id: "c-1".into(),
            amount: 10.0,
            currency: "EUR".into(),
        };
        let charge = |payments: &SimulatedPayments| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(payments.charge(&order, 1)).unwrap();
        };
        let deployed = SimulatedPayments::from_lookup(|_| None).unwrap();
        charge(&deployed);
        assert!(
            deployed.charged().is_empty(),
            "a warm function's memory must not grow per order"
        );
        let recording = SimulatedPayments::from_lookup(|_| None)
            .unwrap()
            .recording();
        charge(&recording);
        assert_eq!(recording.charged(), [("o-1".to_owned(), 1)]);
    }

    #[test]
    fn knobs_are_validated_with_the_variable_named() {
        let bad = [
            ("PAYMENTS_FAILURE_RATE", "1.5"),
            ("PAYMENTS_FLAKY_ORDERS", "o-1"),
            ("PAYMENTS_OUTAGE_UNTIL", "tomorrow"),
            ("PAYMENTS_LATENCY", "fast"),
        ];
        for (name, value) in bad {
            let error = SimulatedPayments::from_lookup(|n| (n == name).then(|| value.to_owned()))
                .unwrap_err();
            assert_eq!(error.name, name);
        }
        let ok = SimulatedPayments::from_lookup(|n| {
            (n == "PAYMENTS_FLAKY_ORDERS").then(|| "o-1:2, o-2:0".to_owned())
        })
        .unwrap();
        assert_eq!(
            ok.flaky_orders,
            [("o-1".to_owned(), 2), ("o-2".to_owned(), 0)]
        );
    }
}
