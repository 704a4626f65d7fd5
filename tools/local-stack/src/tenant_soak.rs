//! The tenant soak: tenants on a fair queue (a standard queue whose messages carry their tenant as
//! `MessageGroupId`), one of them with its own downstream failing every call for a while, through
//! the real processor with the orders consumer's settings as Terraform ships them (`infra`), on the
//! SQS model's virtual clock. The same seeded arrivals run three ways: without the fault, with the
//! fault behind a breaker per tenant ([`redrive::breaker::TenantBreakers`], the orders handler's), and with
//! the fault behind the shared breaker alone. What it measures: the other tenants' time in queue,
//! the failing tenant's downstream calls, handler calls and dead letters, and its drain once healed.
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use redrive::breaker::{TenantBreakerSettings, TenantBreakers};
use redrive::{Message, PortError, RecordError, RecordHandler};

use crate::intake_sim::{Body, Effects, Model, STEP_MS};
use crate::soak::shipped;

/// A run's shape; every random choice comes from `seed`.
#[derive(Debug, Clone)]
pub struct TenantSoakConfig {
    pub tenants: usize,
    /// Messages produced per second, each to a tenant drawn at random.
    pub rate_per_s: u32,
    /// How long the producer sends.
    pub produce_for: Duration,
    /// The failing tenant's downstream fails every call from the start for this long (none: no
    /// fault).
    pub outage: Option<Duration>,
    /// A breaker per tenant (the shipped settings) in front of the shared one; false: the shared
    /// breaker alone (`REDRIVE_TENANT_BREAKER_THRESHOLD=0`).
    pub per_tenant: bool,
    /// Receives of up to 10 messages the consumer makes per step (100 ms) at most: its capacity.
    pub receives_per_step: u32,
    pub seed: u64,
}

impl TenantSoakConfig {
    /// 100 tenants at `rate_per_s`, one failing for 30 minutes of a 40-minute run, with a breaker
    /// per tenant; the consumer's capacity is at least 2.5 times the arrivals (exactly at 40/s).
    pub fn new(rate_per_s: u32, seed: u64) -> Self {
        Self {
            tenants: 100,
            rate_per_s,
            produce_for: Duration::from_secs(40 * 60),
            outage: Some(Duration::from_secs(30 * 60)),
            per_tenant: true,
            receives_per_step: (rate_per_s * 25).div_ceil(1000).max(1),
            seed,
        }
    }

    /// The same run without the fault.
    #[must_use]
    pub fn healthy(self) -> Self {
        Self {
            outage: None,
            ..self
        }
    }

    /// The same run behind the shared breaker alone.
    #[must_use]
    pub fn shared_breaker_only(self) -> Self {
        Self {
            per_tenant: false,
            ..self
        }
    }
}

/// The tenant that fails.
pub const FAILING: &str = "t-13";

/// What a run counted.
#[derive(Debug, Default, Clone)]
pub struct TenantSoakReport {
    pub produced: usize,
    /// Messages whose effect happened exactly once, more than once, or not at all and not in the
    /// DLQ.
    pub once: usize,
    pub twice: usize,
    pub lost: usize,
    /// Dead letters of the failing tenant and of the others.
    pub failing_dead_lettered: usize,
    pub others_dead_lettered: usize,
    /// The other tenants' time in queue (production to effect), 50th and 99th percentile, ms.
    pub others_p50_ms: u64,
    pub others_p99_ms: u64,
    /// The failing tenant's messages, its downstream's calls, and the handler's calls with its
    /// records (a deferred record is handled, without a downstream call, each time it comes back).
    pub failing_messages: usize,
    pub failing_downstream_calls: u64,
    /// Of those, the calls made while it was down.
    pub failing_calls_while_down: u64,
    pub failing_handler_calls: u64,
    /// From the failing tenant's healing to the last effect of its messages produced before.
    pub failing_drained_after: Duration,
    /// Consumer invocations and SQS calls (receives, deletes and the engine's sends).
    pub invocations: u64,
    pub sqs_calls: u64,
    /// Virtual time from the first message to the last effect.
    pub span: Duration,
}

impl TenantSoakReport {
    /// Every message took effect once or sits in the DLQ; none lost.
    pub fn holds(&self) -> bool {
        self.twice == 0
            && self.lost == 0
            && self.once + self.failing_dead_lettered + self.others_dead_lettered == self.produced
    }
}

impl fmt::Display for TenantSoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} messages: {} once, {} twice, {} lost; dead letters {} (failing tenant) + {} (others); \
             others' time in queue p50 {} ms, p99 {} ms; failing tenant: {} messages, {} downstream \
             calls ({} while it was down), {} handler calls, drained {:.0} s after it healed; {} \
             invocations, {} SQS calls; {:.0} min of virtual time",
            self.produced,
            self.once,
            self.twice,
            self.lost,
            self.failing_dead_lettered,
            self.others_dead_lettered,
            self.others_p50_ms,
            self.others_p99_ms,
            self.failing_messages,
            self.failing_downstream_calls,
            self.failing_calls_while_down,
            self.failing_handler_calls,
            self.failing_drained_after.as_secs_f64(),
            self.invocations,
            self.sqs_calls,
            self.span.as_secs_f64() / 60.0,
        )
    }
}

/// Calls each message's tenant's downstream through the breakers; keeps each message's effects.
struct TenantHandler<'m> {
    breakers: TenantBreakers,
    model: &'m Model,
    heal_at_ms: u64,
    effects: Effects,
    failing_downstream_calls: Mutex<u64>,
    failing_calls_while_down: Mutex<u64>,
    failing_handler_calls: Mutex<u64>,
}

impl RecordHandler for TenantHandler<'_> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let body: Body<'_> = message.json()?;
        let tenant = message.tenant();
        let failing = tenant.as_deref() == Some(FAILING);
        if failing {
            *self.failing_handler_calls.lock().unwrap() += 1;
        }
        self.breakers
            .call(tenant.as_deref(), || async {
                if failing {
                    *self.failing_downstream_calls.lock().unwrap() += 1;
                    if self.model.now_ms() < self.heal_at_ms {
                        *self.failing_calls_while_down.lock().unwrap() += 1;
                        return Err(RecordError::transient(
                            "webhook_unavailable",
                            "the tenant's webhook answers 503",
                        ));
                    }
                }
                Ok(())
            })
            .await?;
        self.effects.record(body.id, self.model.now_ms());
        Ok(())
    }
}

/// Runs one form of the soak.
pub async fn run(config: &TenantSoakConfig) -> Result<TenantSoakReport, PortError> {
    let model = Model::new(shipped("infra", "orders", 1.0), config.seed);
    let started_ms = model.now_ms();
    let heal_at_ms = started_ms + config.outage.map_or(0, |outage| outage.as_millis() as u64);
    let tenant_settings = if config.per_tenant {
        model.orders.settings.tenant_breaker
    } else {
        let mut off = TenantBreakerSettings::default();
        off.threshold = 0;
        off
    };
    let handler = TenantHandler {
        breakers: TenantBreakers::with_clock(
            "webhooks",
            model.orders.settings.breaker,
            tenant_settings,
            model.clock.clone(),
        ),
        model: &model,
        heal_at_ms: if config.outage.is_some() {
            heal_at_ms
        } else {
            0
        },
        effects: Effects::default(),
        failing_downstream_calls: Mutex::default(),
        failing_calls_while_down: Mutex::default(),
        failing_handler_calls: Mutex::default(),
    };
    let processor = model.processor(config.seed);
    let per_step = f64::from(config.rate_per_s) * STEP_MS as f64 / 1000.0;
    let produce_until = started_ms + config.produce_for.as_millis() as u64;
    loop {
        if model.now_ms() < produce_until {
            model.produce(per_step, config.tenants).await?;
        } else if model.depth() == 0 {
            break;
        }
        for _ in 0..config.receives_per_step {
            let records = model.receive(10).await?;
            if records.is_empty() {
                break;
            }
            model.invoke(&processor, &handler, &records).await?;
        }
        model.clock.advance(STEP_MS);
        if model.now_ms() > produce_until + 6 * 3600 * 1000 {
            return Err(PortError::new(
                "tenant soak",
                format!("the queue did not drain: {} messages left", model.depth()),
            ));
        }
    }

    let mut report = TenantSoakReport {
        failing_downstream_calls: *handler.failing_downstream_calls.lock().unwrap(),
        failing_calls_while_down: *handler.failing_calls_while_down.lock().unwrap(),
        failing_handler_calls: *handler.failing_handler_calls.lock().unwrap(),
        invocations: model.invocations.load(std::sync::atomic::Ordering::Relaxed),
        sqs_calls: model.sqs_calls(),
        ..TenantSoakReport::default()
    };
    let fates = model.fates(handler.effects);
    report.produced = fates.len();
    let mut waits = Vec::new();
    let mut last_effect = started_ms;
    let mut failing_last = heal_at_ms;
    for fate in &fates {
        let failing = fate.tenant == FAILING;
        report.failing_messages += usize::from(failing);
        match (fate.effects, fate.dead_lettered) {
            (Some((1, effect_ms)), false) => {
                report.once += 1;
                last_effect = last_effect.max(effect_ms);
                if failing && fate.produced_ms < heal_at_ms {
                    failing_last = failing_last.max(effect_ms);
                } else if !failing {
                    waits.push(effect_ms - fate.produced_ms);
                }
            }
            (Some(_), _) => report.twice += 1,
            (None, true) if failing => report.failing_dead_lettered += 1,
            (None, true) => report.others_dead_lettered += 1,
            (None, false) => report.lost += 1,
        }
    }
    waits.sort_unstable();
    let percentile = |p: f64| {
        waits
            .get(((waits.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0)
    };
    report.others_p50_ms = percentile(0.50);
    report.others_p99_ms = percentile(0.99);
    if config.outage.is_some() {
        report.failing_drained_after = Duration::from_millis(failing_last - heal_at_ms);
    }
    report.span = Duration::from_millis(last_effect - started_ms);
    Ok(report)
}

/// The three forms of one run: without the fault, with a breaker per tenant, with the shared
/// breaker alone.
#[derive(Debug, Clone)]
pub struct TenantSoakRuns {
    pub healthy: TenantSoakReport,
    pub per_tenant: TenantSoakReport,
    pub shared: TenantSoakReport,
}

/// Runs the three forms of `config` on its seed.
pub async fn run_three(config: &TenantSoakConfig) -> Result<TenantSoakRuns, PortError> {
    Ok(TenantSoakRuns {
        healthy: run(&config.clone().healthy()).await?,
        per_tenant: run(config).await?,
        shared: run(&config.clone().shared_breaker_only()).await?,
    })
}

impl crate::Comparison for TenantSoakRuns {
    /// What the breaker per tenant promises and these runs broke, each said in a line: nothing
    /// lost or done twice anywhere; the others' p99 time in queue within 1.1x the run without the
    /// fault and none of theirs dead-lettered; the failing tenant none dead-lettered (its outage is
    /// shorter than the shipped deferral age limit), at least 90% fewer calls of its downstream
    /// while it is down than the shared breaker alone lets through, and drained within SQS's
    /// longest delay and an open period of healing.
    fn broken(&self) -> Vec<String> {
        let mut broken = Vec::new();
        for (form, report) in self.forms() {
            if !report.holds() || report.others_dead_lettered > 0 {
                broken.push(format!("{form}: {report}"));
            }
        }
        let (healthy, per_tenant, shared) = (&self.healthy, &self.per_tenant, &self.shared);
        if per_tenant.others_p99_ms * 10 > healthy.others_p99_ms * 11 {
            broken.push(format!(
                "the others' p99 time in queue is {} ms against {} ms without the fault",
                per_tenant.others_p99_ms, healthy.others_p99_ms
            ));
        }
        if per_tenant.failing_dead_lettered > 0 {
            broken.push(format!(
                "{} of the failing tenant's records dead-lettered within the deferral budget",
                per_tenant.failing_dead_lettered
            ));
        }
        if per_tenant.failing_calls_while_down * 10 > shared.failing_calls_while_down {
            broken.push(format!(
                "the failing downstream was called {} times while down, against {} behind the \
                 shared breaker alone: less than 90% fewer",
                per_tenant.failing_calls_while_down, shared.failing_calls_while_down
            ));
        }
        if per_tenant.failing_drained_after > Duration::from_secs(900 + 30) {
            broken.push(format!(
                "the failing tenant drained {:.0} s after it healed",
                per_tenant.failing_drained_after.as_secs_f64()
            ));
        }
        broken
    }
}

impl TenantSoakRuns {
    fn forms(&self) -> [(&'static str, &TenantSoakReport); 3] {
        [
            ("without the fault", &self.healthy),
            ("a breaker per tenant", &self.per_tenant),
            ("the shared breaker alone", &self.shared),
        ]
    }
}

impl fmt::Display for TenantSoakRuns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| run | others' p99 in queue | failing tenant: dead letters | its downstream calls while down | its handler calls | drained after healing | invocations | SQS calls | lost |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|")?;
        for (form, r) in self.forms() {
            writeln!(
                f,
                "| {form} | {} ms | {} of {} | {} | {} | {:.0} s | {} | {} | {} |",
                r.others_p99_ms,
                r.failing_dead_lettered,
                r.failing_messages,
                r.failing_calls_while_down,
                r.failing_handler_calls,
                r.failing_drained_after.as_secs_f64(),
                r.invocations,
                r.sqs_calls,
                r.lost,
            )?;
        }
        Ok(())
    }
}
