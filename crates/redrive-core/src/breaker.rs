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
#[derive(Debug, Clone)]
struct Guarded {
    state: BreakerState,
    generation: u64,
    /// The tenants whose failures the closed breaker's run counted: a tenant's failures count
    /// once, however many there are (at most `threshold` entries).
    run: Vec<u64>,
    /// When it last opened from closed; `None` while closed.
    open_since: Option<u64>,
}

/// What a call's result says of the downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    No,
    /// A transient failure of a call that named no tenant: each counts.
    Untenanted,
    /// A transient failure of a call for the tenant with this hash.
    Tenant(u64),
}

impl Guarded {
    fn at(generation: u64) -> Self {
        Self {
            state: BreakerState::Closed { failures: 0 },
            generation,
            run: Vec::new(),
            open_since: None,
        }
    }

    fn enter(&mut self, state: BreakerState, now: u64) {
        self.open_since = match state {
            BreakerState::Closed { .. } => None,
            BreakerState::Open { .. } | BreakerState::HalfOpen { .. } => {
                self.open_since.or(Some(now))
            }
        };
        self.state = state;
        self.generation += 1;
        self.run.clear();
    }

    /// The generation a call is admitted in, or how long it must wait (ms). Of any number of
    /// callers holding the lock in turn, exactly one is the probe.
    fn admit(&mut self, now: u64, open_for: u64) -> Result<u64, u64> {
        match self.state {
            BreakerState::Closed { .. } => Ok(self.generation),
            BreakerState::Open { until_ms } if now >= until_ms => {
                self.enter(BreakerState::HalfOpen { since_ms: now }, now);
                Ok(self.generation)
            }
            BreakerState::Open { until_ms } => Err(until_ms - now),
            // A probe that never reported back (cancelled by the deadline) does not hold the
            // breaker half-open forever.
            BreakerState::HalfOpen { since_ms } if now >= since_ms + open_for => {
                self.enter(BreakerState::HalfOpen { since_ms: now }, now);
                Ok(self.generation)
            }
            BreakerState::HalfOpen { since_ms } => Err(since_ms + open_for - now),
        }
    }

    /// Counts a call's result in its generation: whether it was a probe that failed, and whether
    /// it opened the breaker.
    fn record(
        &mut self,
        generation: u64,
        failed: Failed,
        now: u64,
        settings: &BreakerSettings,
    ) -> Recorded {
        let mut recorded = Recorded::default();
        if self.generation != generation {
            return recorded;
        }
        let probe = matches!(self.state, BreakerState::HalfOpen { .. });
        match (self.state, failed) {
            // While closed, failures are counted within the generation.
            (BreakerState::Closed { .. }, Failed::No) => {
                self.state = BreakerState::Closed { failures: 0 };
                self.run.clear();
            }
            (BreakerState::Closed { failures }, Failed::Tenant(tenant))
                if self.run.contains(&tenant) =>
            {
                self.state = BreakerState::Closed { failures };
            }
            (BreakerState::Closed { failures }, failed) if failures + 1 < settings.threshold => {
                if let Failed::Tenant(tenant) = failed {
                    self.run.push(tenant);
                }
                self.state = BreakerState::Closed {
                    failures: failures + 1,
                };
            }
            (_, Failed::No) => self.enter(BreakerState::Closed { failures: 0 }, now),
            (_, _) => {
                recorded.opened = true;
                self.enter(
                    BreakerState::Open {
                        until_ms: now + duration_ms(settings.open_for),
                    },
                    now,
                );
            }
        }
        recorded.probe_failed = probe && failed != Failed::No;
        recorded
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Recorded {
    probe_failed: bool,
    opened: bool,
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
            state: Mutex::new(Guarded::at(0)),
        }
    }

    /// Where the breaker stands now.
    pub fn state(&self) -> BreakerState {
        self.guarded().state
    }

    /// Since when (ms since the epoch) it has been open or half-open without closing: the
    /// downstream's outage as far as this breaker saw it; `None` while closed.
    pub fn open_since(&self) -> Option<u64> {
        self.guarded().open_since
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
        self.settle(generation, result, None)
    }

    /// The generation the call is admitted in, or a deferral. The lock is held from the check to
    /// the change of state, so of any number of records arriving at once exactly one is the probe.
    fn admit(&self) -> Result<u64, RecordError> {
        let now = self.clock.now_ms();
        let open_for = duration_ms(self.settings.open_for);
        self.guarded()
            .admit(now, open_for)
            .map_err(|wait_ms| self.deferral(wait_ms))
    }

    fn deferral(&self, wait_ms: u64) -> RecordError {
        RecordError::defer(
            format!("{}_circuit_open", self.downstream),
            Duration::from_millis(wait_ms.max(1000)),
        )
    }

    /// Counts the result of a call admitted in `generation` (for `tenant`'s hash, if any) and
    /// turns a failed probe into a deferral.
    fn settle<T>(
        &self,
        generation: u64,
        result: Result<T, RecordError>,
        tenant: Option<u64>,
    ) -> Result<T, RecordError> {
        let failed = match (&result, tenant) {
            (Err(error), _) if error.class() != ErrorClass::Transient => Failed::No,
            (Ok(_), _) => Failed::No,
            (Err(_), Some(tenant)) => Failed::Tenant(tenant),
            (Err(_), None) => Failed::Untenanted,
        };
        let now = self.clock.now_ms();
        let recorded = self
            .guarded()
            .record(generation, failed, now, &self.settings);
        if recorded.opened {
            tracing::warn!(
                downstream = self.downstream,
                open_for_s = self.settings.open_for.as_secs(),
                "circuit opened"
            );
        }
        match result {
            Err(error) if recorded.probe_failed => {
                tracing::warn!(downstream = self.downstream, %error, "probe failed: its record is deferred");
                Err(RecordError::defer(
                    format!("{}_circuit_open", self.downstream),
                    self.settings.open_for,
                ))
            }
            result => result,
        }
    }

    #[cfg(test)]
    fn record(&self, generation: u64, transient_failure: bool) -> bool {
        let failed = if transient_failure {
            Failed::Untenanted
        } else {
            Failed::No
        };
        let now = self.clock.now_ms();
        self.guarded()
            .record(generation, failed, now, &self.settings)
            .probe_failed
    }
}

/// How a tenant's own breaker opens, and how many failing tenants are remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantBreakerSettings {
    /// Consecutive transient failures of one tenant that open its breaker (0: no breaker per
    /// tenant, every call goes to the shared one).
    pub threshold: u32,
    /// How long a tenant's breaker stays open before one of its records probes.
    pub open_for: Duration,
    /// Failing tenants remembered at once; past it the one whose breaker changed least recently
    /// is forgotten. A tenant whose calls succeed takes no room.
    pub capacity: usize,
}

impl Default for TenantBreakerSettings {
    fn default() -> Self {
        Self {
            threshold: 5,
            open_for: Duration::from_secs(30),
            capacity: 10_000,
        }
    }
}

/// SQS's longest message delay (`DelaySeconds`, 15 minutes): the longest a deferral waits.
const MAX_DEFERRAL_MS: u64 = 900_000;

/// Tenants named in logs and [`TenantBreakers::open_tenants`]; the others are `other`, so that
/// a log query or a metric built on them stays bounded.
pub const NAMED_TENANTS: usize = 10;

/// A breaker per tenant in front of the downstream's shared [`CircuitBreaker`]: on a queue where
/// each message group (or Kafka key) is a tenant, one tenant whose own dependency fails (its
/// webhook, its rate limit) defers only its own records, and spends neither their attempts nor
/// the shared breaker, whose run counts a tenant's failures once
/// ([`Message::tenant`](crate::handler::Message::tenant) names the tenant).
pub struct TenantBreakers {
    shared: CircuitBreaker,
    settings: TenantBreakerSettings,
    tenants: Mutex<Tenants>,
    /// The EMF namespace each opening is counted in ([`TenantBreakers::with_metrics`]).
    metrics_namespace: Option<String>,
}

#[derive(Default)]
struct Tenants {
    by_name: std::collections::HashMap<String, Tenant>,
    /// Advances on every change of a tenant's breaker: the order in which they are forgotten.
    tick: u64,
    /// Generations of forgotten tenants are never reused: a late result finds no match.
    epochs: u64,
    /// Deferrals so far: with the tenant, what spreads each one's wait.
    deferrals: u64,
    /// The tenants named in logs and metrics, and how often each had opened when last named.
    named: Vec<(String, u32)>,
}

struct Tenant {
    guarded: Guarded,
    /// When its first failure of this run was counted (ms since the epoch).
    failing_since: u64,
    /// The generation it was first remembered in: a call admitted before then (while it was not
    /// remembered, so closed) counts in it.
    born: u64,
    changed: u64,
    openings: u32,
}

/// What the tenant's breaker admitted a call in.
#[derive(Debug, Clone, Copy)]
enum TenantPass {
    Remembered(u64),
    Unremembered,
}

impl TenantBreakers {
    /// Breakers per tenant of `downstream` in front of its shared breaker, on the system clock.
    pub fn new(
        downstream: &'static str,
        shared: BreakerSettings,
        settings: TenantBreakerSettings,
    ) -> Self {
        Self::with_clock(downstream, shared, settings, Arc::new(SystemClock))
    }

    /// The same on `clock`.
    pub fn with_clock(
        downstream: &'static str,
        shared: BreakerSettings,
        settings: TenantBreakerSettings,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            shared: CircuitBreaker::with_clock(downstream, shared, clock),
            settings,
            tenants: Mutex::default(),
            metrics_namespace: None,
        }
    }

    /// Counts each tenant's breaker opening as the EMF metric `TenantCircuitOpened` in
    /// `namespace` (a line on stdout, which CloudWatch turns into the metric), with the dimensions
    /// `Downstream` and `Tenant`: the tenant's name for the 10 that opened most
    /// ([`NAMED_TENANTS`]), `other` for the rest, so the metric has at most 11 tenants per downstream.
    #[must_use]
    pub fn with_metrics(mut self, namespace: impl Into<String>) -> Self {
        self.metrics_namespace = Some(namespace.into());
        self
    }

    /// The shared breaker.
    pub fn shared(&self) -> &CircuitBreaker {
        &self.shared
    }

    /// Runs `call` for `tenant` if both its breaker and the shared one let it through; otherwise
    /// a deferral (`<downstream>_tenant_circuit_open` or `<downstream>_circuit_open`) without
    /// calling. A call without a tenant goes to the shared breaker alone.
    pub async fn call<T, F, Fut>(&self, tenant: Option<&str>, call: F) -> Result<T, RecordError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, RecordError>>,
    {
        let Some(tenant) = tenant.filter(|_| self.settings.threshold > 0) else {
            return self.shared.call(call).await;
        };
        let pass = self.admit(tenant)?;
        if self.shared.settings.threshold == 0 {
            let result = call().await;
            return self.settle(tenant, pass, result);
        }
        let generation = self.shared.admit()?;
        let result = call().await;
        let result = self.shared.settle(generation, result, Some(hash(tenant)));
        self.settle(tenant, pass, result)
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, Tenants> {
        crate::sync::lock(&self.tenants)
    }

    fn admit(&self, tenant: &str) -> Result<TenantPass, RecordError> {
        let now = self.shared.clock.now_ms();
        let mut tenants = self.tenants();
        let tenants = &mut *tenants;
        let Some(remembered) = tenants.by_name.get_mut(tenant) else {
            return Ok(TenantPass::Unremembered);
        };
        let open_for = duration_ms(self.settings.open_for);
        match remembered.guarded.admit(now, open_for) {
            Ok(generation) => Ok(TenantPass::Remembered(generation)),
            Err(wait_ms) => {
                // Spread after the probe over as long as the tenant has been failing (at least an
                // open period, at most SQS's longest delay): its records neither come back all at
                // once, a burst the other tenants would queue behind, nor once per open period
                // through an outage of hours.
                let window = open_for.max(now - remembered.failing_since);
                tenants.deferrals += 1;
                let spread = hash(tenant) ^ tenants.deferrals.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let wait_ms = (wait_ms.max(1000) + spread % window).min(MAX_DEFERRAL_MS);
                Err(self.deferral(wait_ms))
            }
        }
    }

    fn deferral(&self, wait_ms: u64) -> RecordError {
        RecordError::defer(
            format!("{}_tenant_circuit_open", self.shared.downstream),
            Duration::from_millis(wait_ms),
        )
    }

    /// Counts the result in the tenant's breaker: a tenant is remembered from its first failure
    /// until a success closes its breaker again.
    fn settle<T>(
        &self,
        tenant: &str,
        pass: TenantPass,
        result: Result<T, RecordError>,
    ) -> Result<T, RecordError> {
        let failed = match &result {
            // Deferred (by the shared breaker, or by the handler): nothing was learnt of the tenant.
            Err(error) if error.is_deferral() => return result,
            Err(error) if error.class() == ErrorClass::Transient => Failed::Untenanted,
            _ => Failed::No,
        };
        let settings = BreakerSettings {
            threshold: self.settings.threshold,
            open_for: self.settings.open_for,
        };
        let now = self.shared.clock.now_ms();
        let mut tenants = self.tenants();
        if failed != Failed::No && !tenants.by_name.contains_key(tenant) {
            self.remember(&mut tenants, tenant, now);
        }
        let Tenants { by_name, tick, .. } = &mut *tenants;
        let Some(remembered) = by_name.get_mut(tenant) else {
            return result;
        };
        let generation = match pass {
            TenantPass::Remembered(generation) => generation,
            TenantPass::Unremembered => remembered.born,
        };
        let recorded = remembered
            .guarded
            .record(generation, failed, now, &settings);
        if matches!(
            remembered.guarded.state,
            BreakerState::Closed { failures: 0 }
        ) {
            by_name.remove(tenant);
            return result;
        }
        *tick += 1;
        remembered.changed = *tick;
        if recorded.opened {
            remembered.openings += 1;
            let openings = remembered.openings;
            let label = named(&mut tenants, tenant, openings);
            tracing::warn!(
                downstream = self.shared.downstream,
                tenant = %label,
                open_for_s = self.settings.open_for.as_secs(),
                "tenant's circuit opened"
            );
            if let Some(namespace) = &self.metrics_namespace {
                println!(
                    "{}",
                    opening_line(namespace, self.shared.downstream, &label, now)
                );
            }
        }
        match result {
            Err(_) if recorded.probe_failed => {
                Err(self.deferral(duration_ms(self.settings.open_for)))
            }
            result => result,
        }
    }

    /// Remembers a tenant at its first failure, forgetting the least recently changed one when
    /// full.
    fn remember(&self, tenants: &mut Tenants, tenant: &str, now: u64) {
        if tenants.by_name.len() >= self.settings.capacity.max(1) {
            let oldest = tenants
                .by_name
                .iter()
                .min_by_key(|(_, remembered)| remembered.changed)
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                tenants.by_name.remove(&oldest);
            }
        }
        tenants.epochs += 1;
        let born = tenants.epochs << 32;
        tenants.tick += 1;
        let changed = tenants.tick;
        tenants.by_name.insert(
            tenant.to_owned(),
            Tenant {
                guarded: Guarded::at(born),
                failing_since: now,
                born,
                changed,
                openings: 0,
            },
        );
    }

    /// Where `tenant`'s own breaker stands (closed with no failures when not remembered).
    pub fn state(&self, tenant: &str) -> BreakerState {
        self.tenants()
            .by_name
            .get(tenant)
            .map_or(BreakerState::Closed { failures: 0 }, |remembered| {
                remembered.guarded.state
            })
    }

    /// The tenants whose breaker is open or half-open now, by name for the [`NAMED_TENANTS`]
    /// that opened most often and as one `other` count for the rest.
    pub fn open_tenants(&self) -> (Vec<String>, usize) {
        let tenants = self.tenants();
        let mut open: Vec<(&String, u32)> = tenants
            .by_name
            .iter()
            .filter(|(_, remembered)| {
                !matches!(remembered.guarded.state, BreakerState::Closed { .. })
            })
            .map(|(name, remembered)| (name, remembered.openings))
            .collect();
        open.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let other = open.len().saturating_sub(NAMED_TENANTS);
        let named = open
            .into_iter()
            .take(NAMED_TENANTS)
            .map(|(name, _)| name.clone())
            .collect();
        (named, other)
    }
}

/// The EMF line of one tenant's breaker opening.
fn opening_line(namespace: &str, downstream: &str, tenant: &str, timestamp_ms: u64) -> String {
    serde_json::json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [["Downstream", "Tenant"]],
                "Metrics": [{ "Name": "TenantCircuitOpened", "Unit": "Count" }],
            }],
        },
        "Downstream": downstream,
        "Tenant": tenant,
        "TenantCircuitOpened": 1,
    })
    .to_string()
}

/// The name a tenant's opening is logged and counted under: its own while it holds one of the
/// [`NAMED_TENANTS`] slots (free, or taken from the tenant that opened least, when it opened
/// more), else `other`. At most that many names are in use at once, ties or not.
fn named(tenants: &mut Tenants, tenant: &str, openings: u32) -> String {
    let slots = &mut tenants.named;
    if let Some(slot) = slots.iter_mut().find(|(name, _)| name == tenant) {
        slot.1 = openings;
        return tenant.to_owned();
    }
    if slots.len() < NAMED_TENANTS {
        slots.push((tenant.to_owned(), openings));
        return tenant.to_owned();
    }
    // The slot of the tenant that opened least goes to one that opened more.
    let weakest = slots
        .iter_mut()
        .min_by_key(|(_, openings)| *openings)
        .expect("NAMED_TENANTS slots");
    if openings > weakest.1 {
        *weakest = (tenant.to_owned(), openings);
        return tenant.to_owned();
    }
    "other".to_owned()
}

fn hash(tenant: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    tenant.hash(&mut hasher);
    hasher.finish()
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
        assert_eq!(breaker.open_since(), Some(1_000_000));

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
        assert_eq!(
            breaker.open_since(),
            Some(1_000_000),
            "one outage, reopened"
        );

        clock.advance(10_000);
        breaker
            .call(|| async { Ok::<_, RecordError>(()) })
            .await
            .unwrap();
        assert_eq!(breaker.state(), BreakerState::Closed { failures: 0 });
        assert_eq!(breaker.open_since(), None);
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

    fn tenant_breakers(clock: &Arc<ManualClock>, capacity: usize) -> TenantBreakers {
        TenantBreakers::with_clock(
            "payments",
            BreakerSettings {
                threshold: 3,
                open_for: Duration::from_secs(10),
            },
            TenantBreakerSettings {
                threshold: 2,
                open_for: Duration::from_secs(20),
                capacity,
            },
            clock.clone(),
        )
    }

    /// Calls for `tenant` a downstream that fails when `down`; counts the calls made.
    async fn call_for(
        breakers: &TenantBreakers,
        tenant: &str,
        down: bool,
        calls: &mut u32,
    ) -> Result<(), RecordError> {
        breakers
            .call(Some(tenant), || async {
                *calls += 1;
                if down {
                    Err(RecordError::transient(
                        "webhook_timeout",
                        "its webhook is down",
                    ))
                } else {
                    Ok(())
                }
            })
            .await
    }

    #[tokio::test]
    async fn one_failing_tenant_opens_its_own_breaker_and_holds_nobody_else_back() {
        let clock = Arc::new(ManualClock::at(0));
        let breakers = tenant_breakers(&clock, 100);
        let (mut failing_calls, mut other_calls) = (0, 0);
        let mut waits = std::collections::BTreeSet::new();
        for round in 0..50 {
            match call_for(&breakers, "acme", true, &mut failing_calls).await {
                Err(error) if error.is_deferral() => {
                    assert_eq!(error.kind(), "payments_tenant_circuit_open");
                    let wait = error.retry_after_hint().unwrap();
                    assert!(
                        (Duration::from_secs(20)..Duration::from_secs(40)).contains(&wait),
                        "until the probe, spread over one more open period: {wait:?}"
                    );
                    waits.insert(wait);
                }
                Err(_) => {}
                Ok(()) => panic!("acme's downstream is down"),
            }
            for tenant in ["globex", "initech"] {
                call_for(&breakers, tenant, false, &mut other_calls)
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: {tenant} held back: {e}"));
            }
        }
        assert_eq!(failing_calls, 2, "acme's breaker opened at its threshold");
        assert!(
            waits.len() > 40,
            "the deferred records come back spread out, not at once: {} waits",
            waits.len()
        );
        assert_eq!(other_calls, 100, "every other tenant's record went through");
        assert_eq!(
            breakers.shared().state(),
            BreakerState::Closed { failures: 0 }
        );

        // However many of one tenant's failures come in a row, the shared breaker counts one.
        let clock = Arc::new(ManualClock::at(0));
        let breakers = tenant_breakers(&clock, 100);
        let mut calls = 0;
        for _ in 0..10 {
            breakers
                .call(Some("acme"), || async {
                    calls += 1;
                    Err::<(), _>(RecordError::transient("webhook_timeout", "down"))
                })
                .await
                .unwrap_err();
            clock.advance(20_000);
        }
        assert_eq!(
            breakers.shared().state(),
            BreakerState::Closed { failures: 1 }
        );
    }

    #[tokio::test]
    async fn failures_of_as_many_tenants_as_the_threshold_open_the_shared_breaker() {
        let clock = Arc::new(ManualClock::at(0));
        let breakers = tenant_breakers(&clock, 100);
        let mut calls = 0;
        for tenant in ["a", "b", "c"] {
            let error = call_for(&breakers, tenant, true, &mut calls)
                .await
                .unwrap_err();
            assert!(!error.is_deferral(), "{tenant}: {error}");
        }
        assert!(matches!(
            breakers.shared().state(),
            BreakerState::Open { .. }
        ));
        let deferred = call_for(&breakers, "d", false, &mut calls)
            .await
            .unwrap_err();
        assert_eq!(deferred.kind(), "payments_circuit_open");
        assert_eq!(calls, 3, "no call while the shared breaker is open");
        // A call without a tenant meets the shared breaker alone.
        let untenanted = breakers
            .call(None, || async { Ok::<_, RecordError>(()) })
            .await
            .unwrap_err();
        assert_eq!(untenanted.kind(), "payments_circuit_open");
    }

    #[tokio::test]
    async fn a_tenant_probes_once_then_is_forgotten_when_it_heals() {
        let clock = Arc::new(ManualClock::at(0));
        let breakers = tenant_breakers(&clock, 100);
        let mut calls = 0;
        for _ in 0..2 {
            call_for(&breakers, "acme", true, &mut calls)
                .await
                .unwrap_err();
        }
        assert!(matches!(breakers.state("acme"), BreakerState::Open { .. }));
        clock.advance(20_000);
        let probe = call_for(&breakers, "acme", true, &mut calls)
            .await
            .unwrap_err();
        assert!(
            probe.is_deferral(),
            "a failed probe defers its record: {probe}"
        );
        assert_eq!(probe.retry_after_hint(), Some(Duration::from_secs(20)));
        assert_eq!(calls, 3);
        clock.advance(20_000);
        let pass = breakers.admit("acme").unwrap();
        assert!(
            breakers.admit("acme").unwrap_err().is_deferral(),
            "one probe at a time"
        );
        breakers.settle("acme", pass, Ok(())).unwrap();
        assert_eq!(breakers.state("acme"), BreakerState::Closed { failures: 0 });
        assert!(
            breakers.tenants().by_name.is_empty(),
            "a healed tenant takes no room"
        );
    }

    #[tokio::test]
    async fn failing_tenants_past_the_capacity_forget_the_least_recently_changed() {
        let clock = Arc::new(ManualClock::at(0));
        let mut breakers = tenant_breakers(&clock, 50);
        // Here only the tenants' books are counted: 200 tenants failing at once open the shared
        // breaker after 3.
        breakers.shared.settings.threshold = 0;
        let mut calls = 0;
        for tenant in 0..200 {
            for _ in 0..2 {
                call_for(&breakers, &format!("t{tenant}"), true, &mut calls)
                    .await
                    .unwrap_err();
            }
        }
        assert_eq!(calls, 400);
        assert_eq!(breakers.tenants().by_name.len(), 50);
        assert!(matches!(breakers.state("t199"), BreakerState::Open { .. }));
        assert_eq!(breakers.state("t0"), BreakerState::Closed { failures: 0 });
        let (open, other) = breakers.open_tenants();
        assert_eq!(open.len(), NAMED_TENANTS);
        assert_eq!(other, 50 - NAMED_TENANTS);
        let labels: std::collections::BTreeSet<String> = (0..200)
            .map(|tenant| named(&mut breakers.tenants(), &format!("t{tenant}"), 1))
            .collect();
        assert_eq!(
            labels.len(),
            NAMED_TENANTS + 1,
            "ten names and other, ties or not"
        );
        let line: serde_json::Value =
            serde_json::from_str(&opening_line("redrive", "payments", "other", 7)).unwrap();
        assert_eq!(
            line["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["Downstream", "Tenant"]])
        );
        assert_eq!(
            (&line["Tenant"], &line["TenantCircuitOpened"]),
            (&"other".into(), &1.into())
        );
        // A tenant that succeeds is never remembered.
        for tenant in 0..1000 {
            call_for(&breakers, &format!("ok{tenant}"), false, &mut calls)
                .await
                .unwrap();
        }
        assert_eq!(breakers.tenants().by_name.len(), 50);
    }
}
