//! The intake soak: a downstream down for hours behind the orders consumer's breaker, on the
//! virtual-clock model ([`crate::intake_sim`]), run twice on one seed: with the defer loop (every
//! record re-sent with a delay, received and deferred again until the downstream is back) and with
//! the intake paused (`REDRIVE_PAUSE_AFTER` as Terraform renders it for `infra-held`, the
//! controller ticking once a minute, its probe and its ramp). It counts what the outage cost
//! (invocations, SQS calls), dead letters and losses, and how long the backlog took to drain after
//! recovery against the backlog over the downstream's rate. Lambda's long polls that come back
//! empty are counted in neither run.
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use redrive::breaker::{CircuitBreaker, ProbeVerdict};
use redrive::intake::{
    take_requests, IntakeController, IntakePort, IntakeSettings, Mapping, MappingState, Probe,
};
use redrive::lambda::pause::PauseSignal;
use redrive::{Message, PortError, Processor, RecordError, RecordHandler};

use crate::intake_sim::{Body, Counted, Effects, Model, STEP_MS};
use crate::soak::shipped;

/// The consumer's function name in the model.
const FUNCTION: &str = "orders";
const MINUTE_MS: u64 = 60_000;

/// A run's shape; every random choice comes from `seed`.
#[derive(Debug, Clone)]
pub struct IntakeSoakConfig {
    /// Messages produced per second until the downstream recovers.
    pub rate_per_s: f64,
    /// How long the downstream is down from the start.
    pub outage: Duration,
    /// Messages per second the downstream takes once back: the consumer's rate.
    pub downstream_per_s: f64,
    /// Pause the intake (the controller on); false: the defer loop.
    pub paused: bool,
    pub seed: u64,
}

impl IntakeSoakConfig {
    /// A two-hour outage at `rate_per_s`, the downstream taking twice that once back, paused.
    pub fn new(rate_per_s: f64, seed: u64) -> Self {
        Self {
            rate_per_s,
            outage: Duration::from_secs(2 * 3600),
            downstream_per_s: rate_per_s * 2.0,
            paused: true,
            seed,
        }
    }
}

/// What a run counted.
#[derive(Debug, Default, Clone)]
pub struct IntakeSoakReport {
    pub produced: usize,
    pub once: usize,
    pub twice: usize,
    pub lost: usize,
    pub dead_lettered: usize,
    /// Invocations and SQS calls while the downstream was down (the controller's included).
    pub outage_invocations: u64,
    pub outage_sqs_calls: u64,
    /// Messages queued when the downstream came back, and how long they took to drain.
    pub backlog: usize,
    pub drained_after: Duration,
    /// The backlog over the downstream's rate: the least a drain can take.
    pub drain_floor: Duration,
    /// The controller's pauses and probes.
    pub pauses: u32,
    pub probes: u32,
}

impl IntakeSoakReport {
    /// Every message took effect once or sits in the DLQ; none lost.
    pub fn holds(&self) -> bool {
        self.twice == 0 && self.lost == 0 && self.once + self.dead_lettered == self.produced
    }
}

/// Calls a downstream that is down until `heal_at_ms`, behind the consumer's breaker.
struct DownstreamHandler<'m> {
    breaker: CircuitBreaker,
    model: &'m Model,
    heal_at_ms: u64,
    effects: Effects,
}

impl RecordHandler for DownstreamHandler<'_> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let body: Body<'_> = message.json()?;
        self.breaker
            .call(|| async {
                if self.model.now_ms() < self.heal_at_ms {
                    return Err(RecordError::transient(
                        "unavailable",
                        "the downstream is down",
                    ));
                }
                Ok(())
            })
            .await?;
        self.effects.record(body.id, self.model.now_ms());
        Ok(())
    }

    fn outage_since(&self) -> Option<u64> {
        self.breaker.open_since()
    }
}

/// The mapping, its switch and the probe, on the model.
struct ModelIntake<'a, H> {
    model: &'a Model,
    processor: &'a Processor<&'a Counted>,
    handler: &'a H,
    mapping: Mapping,
    state: Mutex<MappingState>,
    /// When the switch fires, and since when it has been armed.
    switch: Mutex<Option<(u64, u64)>>,
    probes: Mutex<u32>,
}

impl<H: RecordHandler> ModelIntake<'_, H> {
    fn state(&self) -> MappingState {
        *self.state.lock().unwrap()
    }

    /// What Scheduler does: a switch due sets the mapping to full.
    fn fire(&self, now_ms: u64) {
        let mut switch = self.switch.lock().unwrap();
        if switch.is_some_and(|(at, _)| at <= now_ms) {
            *self.state.lock().unwrap() = self.mapping.full();
            *switch = None;
        }
    }
}

impl<H: RecordHandler> IntakePort for ModelIntake<'_, H> {
    async fn mapping(&self, _: &str) -> Result<MappingState, PortError> {
        Ok(self.state())
    }

    async fn set_mapping(&self, _: &str, state: MappingState) -> Result<(), PortError> {
        *self.state.lock().unwrap() = state;
        Ok(())
    }

    async fn arm_switch(&self, _: &Mapping, at_ms: u64, _: &str) -> Result<(), PortError> {
        let mut switch = self.switch.lock().unwrap();
        let since = switch.map_or(self.model.now_ms(), |(_, since)| since);
        *switch = Some((at_ms, since));
        Ok(())
    }

    async fn disarm_switch(&self, _: &str) -> Result<(), PortError> {
        *self.switch.lock().unwrap() = None;
        Ok(())
    }

    async fn armed_since(&self, _: &str) -> Result<Option<u64>, PortError> {
        Ok(self.switch.lock().unwrap().map(|(_, since)| since))
    }

    async fn probe(&self, _: &Mapping) -> Result<Probe, PortError> {
        let records = self.model.receive(1).await?;
        if records.is_empty() {
            return Ok(Probe::Empty);
        }
        *self.probes.lock().unwrap() += 1;
        let processed = self
            .model
            .invoke(self.processor, self.handler, &records)
            .await?;
        Ok(match ProbeVerdict::of(&processed.report) {
            ProbeVerdict::Up => Probe::Up,
            ProbeVerdict::Down => Probe::Down,
        })
    }
}

/// Runs one form of the soak.
pub async fn run(config: &IntakeSoakConfig) -> Result<IntakeSoakReport, PortError> {
    let held = shipped("infra-held", "orders", 1.0);
    let pause = held.settings.pause.clone().unwrap_or_else(|| {
        panic!("the soak pauses as infra-held ships it: its orders consumer sets no REDRIVE_PAUSE_AFTER")
    });
    let model = Model::new(held, config.seed);
    let control = model.control_queue();
    let started_ms = model.now_ms();
    let heal_at_ms = started_ms + config.outage.as_millis() as u64;
    let handler = DownstreamHandler {
        breaker: CircuitBreaker::with_clock(
            "downstream",
            model.orders.settings.breaker,
            model.clock.clone(),
        ),
        model: &model,
        heal_at_ms,
        effects: Effects::default(),
    };
    let processor = model.processor(config.seed);
    let probe_processor = model.probe_processor(config.seed);
    let intake = ModelIntake {
        model: &model,
        processor: &probe_processor,
        handler: &handler,
        mapping: Mapping::new("esm-orders", &model.url, &model.arn, FUNCTION, None),
        state: Mutex::new(MappingState {
            enabled: true,
            max_concurrency: None,
        }),
        switch: Mutex::default(),
        probes: Mutex::default(),
    };
    let controller = IntakeController::new(&intake, IntakeSettings::default());
    let signal = PauseSignal::new(redrive::config::PauseSettings::new(pause.after, &control));

    let per_step = config.rate_per_s * STEP_MS as f64 / 1000.0;
    let downstream_per_step = config.downstream_per_s * STEP_MS as f64 / 1000.0;
    let mut report = IntakeSoakReport::default();
    let mut allowance = 0.0;
    let mut backlog_at_heal = None;
    // Where in its minute the controller's schedule ticks: anywhere, by the seed.
    let tick_phase = config.seed.wrapping_mul(0x9e37_79b9) % (MINUTE_MS / STEP_MS) * STEP_MS;
    loop {
        let now = model.now_ms();
        if now < heal_at_ms {
            model.produce(per_step, 100).await?;
        } else if backlog_at_heal.is_none() {
            backlog_at_heal = Some(model.depth());
            report.outage_invocations = model.invocations.load(Ordering::Relaxed);
            report.outage_sqs_calls = model.sqs_calls();
        }
        if now >= heal_at_ms && model.depth() == 0 && intake.state() == intake.mapping.full() {
            report.drained_after = Duration::from_millis(now - heal_at_ms);
            break;
        }
        intake.fire(now);
        let state = intake.state();
        if state.enabled {
            // Lambda's pollers, as many at once as its maximum concurrency, at the downstream's pace.
            allowance = (allowance + downstream_per_step).min(10.0 * 1000.0);
            let mut receives = 0;
            while allowance >= 1.0
                && state.max_concurrency.is_none_or(|max| receives < max)
                && model.visible_now()
            {
                let records = model.receive((allowance as u32).min(10)).await?;
                allowance -= records.len() as f64;
                receives += 1;
                model.invoke(&processor, &handler, &records).await?;
                if config.paused {
                    if let Some(request) =
                        signal.due(handler.outage_since(), FUNCTION, model.now_ms())
                    {
                        signal.ask(&model.queue, &request).await?;
                    }
                }
            }
        } else {
            allowance = 0.0;
        }
        if config.paused && (now - started_ms + tick_phase).is_multiple_of(MINUTE_MS) {
            let asked = take_requests(&model.queue, &control)
                .await?
                .iter()
                .any(|request| intake.mapping.asked_by(request));
            let tick = controller.tick(&intake.mapping, asked, now).await?;
            if tick == redrive::intake::Tick::Paused {
                report.pauses += 1;
            }
        }
        model.clock.advance(STEP_MS);
        if model.now_ms() > heal_at_ms + 24 * 3600 * 1000 {
            return Err(PortError::new(
                "intake soak",
                format!("the queue did not drain: {} messages left", model.depth()),
            ));
        }
    }
    report.probes = *intake.probes.lock().unwrap();
    report.backlog = backlog_at_heal.unwrap_or(0);
    report.drain_floor = Duration::from_secs_f64(report.backlog as f64 / config.downstream_per_s);
    let fates = model.fates(handler.effects);
    report.produced = fates.len();
    for fate in &fates {
        match (fate.effects, fate.dead_lettered) {
            (Some((1, _)), false) => report.once += 1,
            (Some(_), _) => report.twice += 1,
            (None, true) => report.dead_lettered += 1,
            (None, false) => report.lost += 1,
        }
    }
    Ok(report)
}

/// The defer loop and the paused intake on one seed.
#[derive(Debug, Clone)]
pub struct IntakeSoakRuns {
    pub defer_loop: IntakeSoakReport,
    pub paused: IntakeSoakReport,
}

/// Runs both forms of `config` on its seed.
pub async fn run_both(config: &IntakeSoakConfig) -> Result<IntakeSoakRuns, PortError> {
    Ok(IntakeSoakRuns {
        defer_loop: run(&IntakeSoakConfig {
            paused: false,
            ..config.clone()
        })
        .await?,
        paused: run(&IntakeSoakConfig {
            paused: true,
            ..config.clone()
        })
        .await?,
    })
}

impl crate::Comparison for IntakeSoakRuns {
    /// What pausing promises and these runs broke, each in a line: nothing lost or done twice in
    /// either run; paused, at least 90% fewer invocations and SQS calls during the outage than the
    /// defer loop, no dead letter, and the backlog drained within 1.1 times the backlog over the
    /// downstream's rate.
    fn broken(&self) -> Vec<String> {
        let mut broken = Vec::new();
        for (form, report) in self.forms() {
            if !report.holds() {
                broken.push(format!("{form}: {report:?}"));
            }
        }
        let (loop_, paused) = (&self.defer_loop, &self.paused);
        if paused.outage_invocations * 10 > loop_.outage_invocations {
            broken.push(format!(
                "{} invocations during the outage paused, against {} in the defer loop",
                paused.outage_invocations, loop_.outage_invocations
            ));
        }
        if paused.outage_sqs_calls * 10 > loop_.outage_sqs_calls {
            broken.push(format!(
                "{} SQS calls during the outage paused, against {} in the defer loop",
                paused.outage_sqs_calls, loop_.outage_sqs_calls
            ));
        }
        if paused.dead_lettered > 0 {
            broken.push(format!("{} dead letters paused", paused.dead_lettered));
        }
        if paused.drained_after.as_secs_f64() > paused.drain_floor.as_secs_f64() * 1.1 {
            broken.push(format!(
                "paused, the backlog of {} drained in {:.0} s, more than 1.1 x {:.0} s",
                paused.backlog,
                paused.drained_after.as_secs_f64(),
                paused.drain_floor.as_secs_f64()
            ));
        }
        broken
    }
}

impl IntakeSoakRuns {
    fn forms(&self) -> [(&'static str, &IntakeSoakReport); 2] {
        [
            ("the defer loop", &self.defer_loop),
            ("the intake paused", &self.paused),
        ]
    }
}

impl fmt::Display for IntakeSoakRuns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| run | invocations during the outage | SQS calls during the outage | dead letters | lost | backlog at recovery | drained in | backlog / rate | pauses | probes |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|---|")?;
        for (form, r) in self.forms() {
            writeln!(
                f,
                "| {form} | {} | {} | {} of {} | {} | {} | {:.0} s | {:.0} s | {} | {} |",
                r.outage_invocations,
                r.outage_sqs_calls,
                r.dead_lettered,
                r.produced,
                r.lost,
                r.backlog,
                r.drained_after.as_secs_f64(),
                r.drain_floor.as_secs_f64(),
                r.pauses,
                r.probes,
            )?;
        }
        Ok(())
    }
}
