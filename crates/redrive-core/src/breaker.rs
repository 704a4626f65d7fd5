//! A circuit breaker per downstream, kept across warm invocations.
//!
//! While it is open, calls are not made: the record is deferred (re-sent with a delay, no attempt
//! spent) instead of flooding the DLQ with records that only failed because the downstream is down.
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::error::{ErrorClass, RecordError};

/// When a breaker opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerSettings {
    /// Consecutive transient failures that open the breaker (0 disables it).
    pub threshold: u32,
    /// How long it stays open before one probe call is let through.
    pub open_for: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            threshold: 5,
            open_for: Duration::from_secs(30),
        }
    }
}

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; `failures` consecutive transient failures so far.
    Closed {
        /// Consecutive transient failures so far.
        failures: u32,
    },
    /// Calls are not made until `until_ms`.
    Open {
        /// When a probe may go through (ms since the epoch).
        until_ms: u64,
    },
    /// One probe is in flight since `since_ms`; others wait for its result.
    HalfOpen {
        /// When the probe was let through (ms since the epoch).
        since_ms: u64,
    },
}

/// A breaker shared by every record of a warm container, including records handled concurrently.
pub struct CircuitBreaker {
    downstream: &'static str,
    settings: BreakerSettings,
    clock: Arc<dyn Clock>,
    state: Mutex<Guarded>,
}

/// The state and its generation, which every change of state advances. A call's result counts only
/// in the generation that admitted it: a call let through while closed that ends after the breaker
/// opened says nothing of the probe, and must neither close it nor keep it open.
#[derive(Debug, Clone, Copy)]
struct Guarded {
    state: BreakerState,
    generation: u64,
}

impl Guarded {
    fn enter(&mut self, state: BreakerState) {
        self.state = state;
        self.generation += 1;
    }
}

impl CircuitBreaker {
    /// A breaker for `downstream` (named in its deferrals) on the system clock.
    pub fn new(downstream: &'static str, settings: BreakerSettings) -> Self {
        Self::with_clock(downstream, settings, Arc::new(SystemClock))
    }

    /// A breaker that reads the time from `clock` (tests move it by hand).
    pub fn with_clock(
        downstream: &'static str,
        settings: BreakerSettings,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            downstream,
            settings,
            clock,
            state: Mutex::new(Guarded {
                state: BreakerState::Closed { failures: 0 },
                generation: 0,
            }),
        }
    }

    /// Where the breaker stands now.
    pub fn state(&self) -> BreakerState {
        self.guarded().state
    }

    fn guarded(&self) -> std::sync::MutexGuard<'_, Guarded> {
        crate::sync::lock(&self.state)
    }

    /// Runs `call` if the breaker lets it through; otherwise returns a deferral without calling.
    /// Transient failures count towards opening; permanent ones say nothing of the downstream. A
    /// probe that fails transiently opens the breaker again and defers its record: it tested the
    /// downstream, not the record (else every probe of a long outage spends an attempt, and a FIFO
    /// group's head, the only record its group offers, runs out of them).
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, RecordError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, RecordError>>,
    {
        if self.settings.threshold == 0 {
            return call().await;
        }
        let generation = self.admit()?;
        let result = call().await;
        let transient = matches!(&result, Err(error) if error.class() == ErrorClass::Transient);
        if self.record(generation, transient) {
            if let Err(error) = &result {
                tracing::warn!(downstream = self.downstream, %error, "probe failed: its record is deferred");
            }
            return Err(RecordError::defer(
                format!("{}_circuit_open", self.downstream),
                self.settings.open_for,
            ));
        }
        result
    }

    /// The generation the call is admitted in, or a deferral. The lock is held from the check to
    /// the change of state, so of any number of records arriving at once exactly one is the probe.
    fn admit(&self) -> Result<u64, RecordError> {
        let now = self.clock.now_ms();
        let open_for = duration_ms(self.settings.open_for);
        let mut guarded = self.guarded();
        let wait_ms = match guarded.state {
            BreakerState::Closed { .. } => return Ok(guarded.generation),
            BreakerState::Open { until_ms } if now >= until_ms => {
                guarded.enter(BreakerState::HalfOpen { since_ms: now });
                return Ok(guarded.generation);
            }
            BreakerState::Open { until_ms } => until_ms - now,
            // A probe that never reported back (cancelled by the deadline) does not hold the
            // breaker half-open forever.
            BreakerState::HalfOpen { since_ms } if now >= since_ms + open_for => {
                guarded.enter(BreakerState::HalfOpen { since_ms: now });
                return Ok(guarded.generation);
            }
            BreakerState::HalfOpen { since_ms } => since_ms + open_for - now,
        };
        let error = RecordError::defer(
            format!("{}_circuit_open", self.downstream),
            Duration::from_millis(wait_ms.max(1000)),
        );
        Err(error)
    }

    /// Counts a call's result in its generation; true when it was a probe that failed.
    fn record(&self, generation: u64, transient_failure: bool) -> bool {
        let now = self.clock.now_ms();
        let mut guarded = self.guarded();
        if guarded.generation != generation {
            return false;
        }
        let probe = matches!(guarded.state, BreakerState::HalfOpen { .. });
        match (guarded.state, transient_failure) {
            // While closed, failures are counted within the generation.
            (BreakerState::Closed { .. }, false) => {
                guarded.state = BreakerState::Closed { failures: 0 };
            }
            (BreakerState::Closed { failures }, true) if failures + 1 < self.settings.threshold => {
                guarded.state = BreakerState::Closed {
                    failures: failures + 1,
                };
            }
            (_, false) => guarded.enter(BreakerState::Closed { failures: 0 }),
            (_, true) => {
                tracing::warn!(
                    downstream = self.downstream,
                    open_for_s = self.settings.open_for.as_secs(),
                    "circuit opened"
                );
                guarded.enter(BreakerState::Open {
                    until_ms: now + duration_ms(self.settings.open_for),
                });
            }
        }
        probe && transient_failure
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    async fn fail(breaker: &CircuitBreaker, calls: &mut u32) -> Result<(), RecordError> {
        breaker
            .call(|| async {
                *calls += 1;
                Err::<(), _>(RecordError::transient("timeout", "down"))
            })
            .await
    }

    #[tokio::test]
    async fn opens_after_the_threshold_defers_without_calling_then_probes_once() {
        let clock = Arc::new(ManualClock::at(1_000_000));
        let settings = BreakerSettings {
            threshold: 3,
            open_for: Duration::from_secs(10),
        };
        let breaker = CircuitBreaker::with_clock("payments", settings, clock.clone());
        let mut calls = 0;
        for _ in 0..3 {
            assert!(!fail(&breaker, &mut calls).await.unwrap_err().is_deferral());
        }
        assert_eq!(
            breaker.state(),
            BreakerState::Open {
                until_ms: 1_010_000
            }
        );

        let deferred = fail(&breaker, &mut calls).await.unwrap_err();
        assert!(deferred.is_deferral());
        assert_eq!(deferred.kind(), "payments_circuit_open");
        assert_eq!(deferred.retry_after_hint(), Some(Duration::from_secs(10)));
        assert_eq!(calls, 3, "no call while open");

        clock.advance(10_000);
        // The probe fails: open again, and its record is deferred, not failed.
        let probe = fail(&breaker, &mut calls).await.unwrap_err();
        assert!(probe.is_deferral());
        assert_eq!(probe.retry_after_hint(), Some(Duration::from_secs(10)));
        assert_eq!(calls, 4);
        assert!(matches!(breaker.state(), BreakerState::Open { .. }));

        clock.advance(10_000);
        breaker
            .call(|| async { Ok::<_, RecordError>(()) })
            .await
            .unwrap();
        assert_eq!(breaker.state(), BreakerState::Closed { failures: 0 });
    }

    #[tokio::test]
    async fn permanent_failures_do_not_open_it_and_zero_threshold_disables_it() {
        let breaker = CircuitBreaker::new(
            "payments",
            BreakerSettings {
                threshold: 1,
                open_for: Duration::from_secs(10),
            },
        );
        let result = breaker
            .call(|| async { Err::<(), _>(RecordError::permanent("invalid", "no")) })
            .await;
        assert!(result.is_err());
        assert_eq!(breaker.state(), BreakerState::Closed { failures: 0 });

        let disabled = CircuitBreaker::new(
            "payments",
            BreakerSettings {
                threshold: 0,
                open_for: Duration::from_secs(10),
            },
        );
        let mut calls = 0;
        for _ in 0..5 {
            fail(&disabled, &mut calls).await.unwrap_err();
        }
        assert_eq!(calls, 5);
    }

    #[tokio::test]
    async fn only_one_probe_goes_through_while_half_open() {
        let clock = Arc::new(ManualClock::at(0));
        let breaker = CircuitBreaker::with_clock(
            "payments",
            BreakerSettings {
                threshold: 1,
                open_for: Duration::from_secs(5),
            },
            clock.clone(),
        );
        let mut calls = 0;
        fail(&breaker, &mut calls).await.unwrap_err();
        clock.advance(5_000);
        assert!(breaker.admit().is_ok(), "the probe");
        assert!(
            breaker.admit().unwrap_err().is_deferral(),
            "a second caller waits for the probe"
        );
    }

    #[test]
    fn a_result_from_before_a_change_of_state_neither_closes_nor_reopens_it() {
        let clock = Arc::new(ManualClock::at(0));
        let settings = BreakerSettings {
            threshold: 1,
            open_for: Duration::from_secs(5),
        };
        let breaker = CircuitBreaker::with_clock("payments", settings, clock.clone());
        let early = breaker.admit().unwrap();
        let failing = breaker.admit().unwrap();
        breaker.record(failing, true);
        assert!(matches!(breaker.state(), BreakerState::Open { .. }));
        breaker.record(early, false);
        assert!(
            matches!(breaker.state(), BreakerState::Open { .. }),
            "a success admitted while closed says nothing of the downstream now"
        );
        clock.advance(5_000);
        let probe = breaker.admit().unwrap();
        breaker.record(early, true);
        assert!(matches!(breaker.state(), BreakerState::HalfOpen { .. }));
        breaker.record(probe, false);
        assert_eq!(breaker.state(), BreakerState::Closed { failures: 0 });
    }
}
