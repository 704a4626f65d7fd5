//! Pausing a consumer's intake through an outage of its downstream, with one probe a minute.
//!
//! While a consumer's breaker is open its records are deferred: re-sent with a delay, received,
//! invoked and deferred again until the downstream is back, every one of those calls paid for. Once
//! the breaker has stayed open past `REDRIVE_PAUSE_AFTER`, the consumer asks ([`PauseRequest`]) for
//! its event source mapping to be paused. The [`IntakeController`], run on a schedule (once a
//! minute), disables the mapping, which stops Lambda polling the queue ("pause invocation and
//! resume later from the same location", Lambda API reference, `UpdateEventSourceMapping`): no
//! message is received, so none has its receive count raised. Each minute it then takes one
//! message and invokes the consumer with it as Lambda would ([`IntakePort::probe`]); once the
//! consumer handles it, the mapping is enabled again with its maximum concurrency stepped up
//! minute by minute ([`IntakeSettings::ramp`]) to what it was.
//!
//! Fail-open: before it disables a mapping the controller arms a switch ([`IntakePort::arm_switch`],
//! on AWS a one-time EventBridge Scheduler schedule whose universal target calls
//! `lambda:UpdateEventSourceMapping`) that enables it again at full concurrency
//! [`IntakeSettings::switch_after`] later, and pushes it forward on every tick while the mapping
//! stays paused or ramps. A controller that stops or errs at any step leaves the switch to fire.
use std::future::Future;
use std::time::Duration;

pub use redrive_core::pause::PauseRequest;
use redrive_core::port::QueuePort;
use redrive_core::PortError;

/// A mapping the controller may pause: its queue and consumer, and its maximum concurrency when
/// it runs at full (`None`: no scaling configuration, Lambda's own scaling).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mapping {
    /// The event source mapping's UUID.
    pub uuid: String,
    /// The source queue's URL (where a probe takes its message) and ARN (how a consumer names it).
    pub queue_url: String,
    /// The source queue's ARN.
    pub queue_arn: String,
    /// The consumer function.
    pub function: String,
    /// `ScalingConfig.MaximumConcurrency` at full (2 to 1,000), or none.
    pub max_concurrency: Option<u32>,
}

impl Mapping {
    /// A mapping of `function` on the queue `queue_url` (`queue_arn`).
    pub fn new(
        uuid: impl Into<String>,
        queue_url: impl Into<String>,
        queue_arn: impl Into<String>,
        function: impl Into<String>,
        max_concurrency: Option<u32>,
    ) -> Self {
        Self {
            uuid: uuid.into(),
            queue_url: queue_url.into(),
            queue_arn: queue_arn.into(),
            function: function.into(),
            max_concurrency,
        }
    }

    /// Whether its queue is a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.queue_arn.ends_with(".fifo")
    }

    /// Whether `request` asks for this mapping: one of its function's.
    pub fn asked_by(&self, request: &PauseRequest) -> bool {
        request.function == self.function
    }

    /// The state it runs in at full.
    pub fn full(&self) -> MappingState {
        MappingState {
            enabled: true,
            max_concurrency: self.max_concurrency,
        }
    }
}

/// Whether a mapping polls, and its maximum concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingState {
    /// Lambda polls the queue.
    pub enabled: bool,
    /// `ScalingConfig.MaximumConcurrency`, if set.
    pub max_concurrency: Option<u32>,
}

/// The pause requests waiting on the queue `url`, taken off it (a request is for one tick): at
/// most 100 receives of 10, more than a minute's requests (each container asks once a minute).
pub async fn take_requests<Q: QueuePort>(
    queue: &Q,
    url: &str,
) -> Result<Vec<PauseRequest>, PortError> {
    let mut requests = Vec::new();
    for _ in 0..100 {
        let records = queue
            .receive(url, 10, Duration::from_secs(30), Duration::ZERO)
            .await?;
        if records.is_empty() {
            break;
        }
        let receipts: Vec<&str> = records
            .iter()
            .filter_map(|record| record.receipt_handle.as_deref())
            .collect();
        queue.delete_batch(url, &receipts).await?;
        requests.extend(records.iter().filter_map(|record| {
            serde_json::from_str::<PauseRequest>(record.body.as_deref()?).ok()
        }));
    }
    Ok(requests)
}

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The consumer handled the message: its downstream answers.
    Up,
    /// The consumer deferred it or failed it transiently: still down. The message's fate is the
    /// consumer's (a deferral re-sent it; a failure leaves it to come back).
    Down,
    /// Nothing to take: the queue is empty, and running costs nothing.
    Empty,
}

/// The calls the controller makes, each a narrow AWS call on AWS (Lambda, Scheduler, SQS).
pub trait IntakePort: Send + Sync {
    /// The mapping's state now (`GetEventSourceMapping`).
    fn mapping(&self, uuid: &str) -> impl Future<Output = Result<MappingState, PortError>> + Send;
    /// Sets it (`UpdateEventSourceMapping` with `Enabled` and `ScalingConfig`).
    fn set_mapping(
        &self,
        uuid: &str,
        state: MappingState,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Arms the switch that sets `mapping` to [`Mapping::full`] at `at_ms`, or moves it there;
    /// `reason` says why the mapping is paused (the console and `dlq doctor` show it).
    fn arm_switch(
        &self,
        mapping: &Mapping,
        at_ms: u64,
        reason: &str,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Takes the switch away (the mapping is at full again); none armed is no error.
    fn disarm_switch(&self, uuid: &str) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Since when (ms since the epoch) the mapping's switch has been armed (`GetSchedule`'s
    /// creation date), or `None`: the controller holds the mapping since then.
    fn armed_since(
        &self,
        uuid: &str,
    ) -> impl Future<Output = Result<Option<u64>, PortError>> + Send;
    /// Takes one message of the mapping's queue (a receive of one: SQS counts a receive towards
    /// `maxReceiveCount`, so none is received only to be put back) and invokes its consumer with
    /// it as Lambda would (an SQS event of one record), then deletes it if the consumer answered
    /// without failing it. The consumer runs a probe without the deferral age limit
    /// (`redrive::lambda::pause::probe_config`): the message waited paused, not deferred.
    fn probe(&self, mapping: &Mapping) -> impl Future<Output = Result<Probe, PortError>> + Send;
}

/// A port shared by reference.
impl<P: IntakePort> IntakePort for &P {
    fn mapping(&self, uuid: &str) -> impl Future<Output = Result<MappingState, PortError>> + Send {
        (**self).mapping(uuid)
    }
    fn set_mapping(
        &self,
        uuid: &str,
        state: MappingState,
    ) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).set_mapping(uuid, state)
    }
    fn arm_switch(
        &self,
        mapping: &Mapping,
        at_ms: u64,
        reason: &str,
    ) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).arm_switch(mapping, at_ms, reason)
    }
    fn disarm_switch(&self, uuid: &str) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).disarm_switch(uuid)
    }
    fn armed_since(
        &self,
        uuid: &str,
    ) -> impl Future<Output = Result<Option<u64>, PortError>> + Send {
        (**self).armed_since(uuid)
    }
    fn probe(&self, mapping: &Mapping) -> impl Future<Output = Result<Probe, PortError>> + Send {
        (**self).probe(mapping)
    }
}

/// Whether a paused FIFO mapping is probed at `now_ms`, paused since `since_ms`: every minute for
/// the first 16, then each probe an eighth of the time paused after the last, at most 30 minutes
/// apart. A probe is a receive of a group's head, which SQS counts towards `maxReceiveCount` and a
/// FIFO consumer gives back in place while the downstream is down: thinned out, two hours of
/// pause cost a head at most 35 receives, not 120, and a day 81, under the 111 Terraform ships for
/// a FIFO source with hold. (A standard queue's probe, deferred, is re-sent as a new message: it
/// is probed every minute.)
pub fn fifo_probe_due(since_ms: u64, now_ms: u64) -> bool {
    let minutes = now_ms.saturating_sub(since_ms) / 60_000;
    let mut probe = 0;
    while probe < minutes {
        probe += (probe / 8).clamp(1, 30);
    }
    probe == minutes
}

/// How the controller ramps a resumed mapping up, and when its switch fires.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntakeSettings {
    /// The maximum concurrencies a resumed mapping runs at, a tick each, before its full one (the
    /// steps at or above it are skipped; Lambda takes 2 to 1,000).
    pub ramp: Vec<u32>,
    /// How long after the controller's last tick the switch enables a paused mapping at full.
    pub switch_after: Duration,
}

impl Default for IntakeSettings {
    fn default() -> Self {
        Self {
            ramp: vec![2, 10, 50],
            switch_after: Duration::from_secs(15 * 60),
        }
    }
}

/// What a tick did to a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    /// At full, nobody asked: nothing.
    Running,
    /// Below full without the controller's switch: someone else's pause or setting, left alone.
    NotOurs,
    /// Asked: the switch armed, the mapping disabled.
    Paused,
    /// Paused, and the probe found the downstream still down.
    StillDown,
    /// Paused, not probed this tick: a FIFO mapping's probes thin out ([`fifo_probe_due`]).
    Waiting,
    /// Enabled again (the probe went through, or nothing was queued) at this step of the ramp.
    Resumed(u32),
    /// Ramping: one step up.
    Ramped(u32),
    /// At full again, the switch taken away.
    Full,
}

/// Pauses and resumes mappings on its consumers' requests; one tick a minute per mapping.
pub struct IntakeController<P> {
    port: P,
    settings: IntakeSettings,
}

impl<P: IntakePort> IntakeController<P> {
    /// A controller on `port`.
    pub fn new(port: P, settings: IntakeSettings) -> Self {
        Self { port, settings }
    }

    /// The port (tests read the model behind it).
    pub fn port(&self) -> &P {
        &self.port
    }

    /// One tick for `mapping` at `now_ms`: `asked` when one of its consumers asked for a pause
    /// since the last tick. Every step that leaves the mapping below full first pushes its switch
    /// forward, so that an error or a stop at any later step leaves it to be enabled again.
    pub async fn tick(
        &self,
        mapping: &Mapping,
        asked: bool,
        now_ms: u64,
    ) -> Result<Tick, PortError> {
        let state = self.port.mapping(&mapping.uuid).await?;
        let full = mapping.full();
        if state == full && !asked {
            return Ok(Tick::Running);
        }
        // A mapping below full without a switch of the controller's was set so by someone else
        // (an operator's `dlq pause`, a deliberate concurrency): the controller leaves it. Every
        // step of its own arms the switch first, so none of its own is ever without one.
        let pause_now = state.enabled && asked;
        let armed_since = if pause_now {
            None
        } else {
            match self.port.armed_since(&mapping.uuid).await? {
                Some(since) => Some(since),
                None => return Ok(Tick::NotOurs),
            }
        };
        let switch_at =
            now_ms + u64::try_from(self.settings.switch_after.as_millis()).unwrap_or(u64::MAX);
        if pause_now {
            let reason = format!(
                "{}'s downstream is down: paused by redrive",
                mapping.function
            );
            self.port.arm_switch(mapping, switch_at, &reason).await?;
            self.port
                .set_mapping(
                    &mapping.uuid,
                    MappingState {
                        enabled: false,
                        ..state
                    },
                )
                .await?;
            tracing::warn!(mapping = %mapping.uuid, function = %mapping.function, "intake paused");
            return Ok(Tick::Paused);
        }
        if !state.enabled {
            let reason = format!(
                "{}'s downstream is down: paused by redrive, probing",
                mapping.function
            );
            self.port.arm_switch(mapping, switch_at, &reason).await?;
            let since = armed_since.unwrap_or(now_ms);
            if mapping.is_fifo() && !fifo_probe_due(since, now_ms) {
                return Ok(Tick::Waiting);
            }
            if self.port.probe(mapping).await? == Probe::Down {
                return Ok(Tick::StillDown);
            }
            let step = self.steps(mapping).next();
            let resumed = MappingState {
                enabled: true,
                max_concurrency: step.or(mapping.max_concurrency),
            };
            self.port.set_mapping(&mapping.uuid, resumed).await?;
            tracing::warn!(mapping = %mapping.uuid, function = %mapping.function, "intake resumed");
            return match step {
                Some(step) => Ok(Tick::Resumed(step)),
                None => self.finish(mapping).await,
            };
        }
        // Enabled below full, and ours: ramping.
        let next = self
            .steps(mapping)
            .find(|step| state.max_concurrency.is_some_and(|now| *step > now));
        match next {
            Some(step) => {
                let reason = format!("{} ramps up after an outage", mapping.function);
                self.port.arm_switch(mapping, switch_at, &reason).await?;
                let ramped = MappingState {
                    enabled: true,
                    max_concurrency: Some(step),
                };
                self.port.set_mapping(&mapping.uuid, ramped).await?;
                Ok(Tick::Ramped(step))
            }
            None => {
                self.port.set_mapping(&mapping.uuid, full).await?;
                self.finish(mapping).await
            }
        }
    }

    /// The ramp's steps below the mapping's full concurrency.
    fn steps<'a>(&'a self, mapping: &Mapping) -> impl Iterator<Item = u32> + 'a {
        let full = mapping.max_concurrency;
        self.settings
            .ramp
            .iter()
            .copied()
            .filter(move |step| full.is_none_or(|full| *step < full))
    }

    async fn finish(&self, mapping: &Mapping) -> Result<Tick, PortError> {
        self.port.disarm_switch(&mapping.uuid).await?;
        Ok(Tick::Full)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    const MINUTE: u64 = 60_000;

    /// A mapping, its switch and a queue of probe answers; fails its `fail_at`th call.
    struct Model {
        state: Mutex<MappingState>,
        switch: Mutex<Option<u64>>,
        answers: Mutex<Vec<Probe>>,
        calls: Mutex<u32>,
        fail_at: Option<u32>,
        probes: Mutex<u32>,
    }

    impl Model {
        fn new(answers: &[Probe], fail_at: Option<u32>) -> Self {
            Self {
                state: Mutex::new(mapping().full()),
                switch: Mutex::default(),
                answers: Mutex::new(answers.iter().rev().copied().collect()),
                calls: Mutex::default(),
                fail_at,
                probes: Mutex::default(),
            }
        }

        fn call(&self, what: &'static str) -> Result<(), PortError> {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            if Some(*calls) == self.fail_at {
                return Err(PortError::new(what, "injected failure"));
            }
            Ok(())
        }

        /// What Scheduler does at `now_ms`: a switch due sets the mapping to full.
        fn fire(&self, now_ms: u64) {
            let mut switch = self.switch.lock().unwrap();
            if switch.is_some_and(|at| at <= now_ms) {
                *self.state.lock().unwrap() = mapping().full();
                *switch = None;
            }
        }
    }

    impl IntakePort for Model {
        async fn mapping(&self, _: &str) -> Result<MappingState, PortError> {
            self.call("GetEventSourceMapping")?;
            Ok(*self.state.lock().unwrap())
        }
        async fn set_mapping(&self, _: &str, state: MappingState) -> Result<(), PortError> {
            self.call("UpdateEventSourceMapping")?;
            *self.state.lock().unwrap() = state;
            Ok(())
        }
        async fn arm_switch(&self, _: &Mapping, at_ms: u64, _: &str) -> Result<(), PortError> {
            self.call("UpdateSchedule")?;
            *self.switch.lock().unwrap() = Some(at_ms);
            Ok(())
        }
        async fn disarm_switch(&self, _: &str) -> Result<(), PortError> {
            self.call("DeleteSchedule")?;
            *self.switch.lock().unwrap() = None;
            Ok(())
        }
        async fn armed_since(&self, _: &str) -> Result<Option<u64>, PortError> {
            self.call("GetSchedule")?;
            Ok(self.switch.lock().unwrap().map(|_| 0))
        }
        async fn probe(&self, _: &Mapping) -> Result<Probe, PortError> {
            self.call("Invoke")?;
            *self.probes.lock().unwrap() += 1;
            Ok(self.answers.lock().unwrap().pop().unwrap_or(Probe::Up))
        }
    }

    fn mapping() -> Mapping {
        Mapping::new(
            "esm-1",
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
            "arn:aws:sqs:us-east-1:123456789012:orders",
            "orders",
            Some(100),
        )
    }

    /// An outage of three probes, the consumer asking at minute 0: the ticks of minutes 0 to 9.
    async fn outage(model: &Model) -> Vec<Result<Tick, PortError>> {
        let controller = IntakeController::new(model, IntakeSettings::default());
        let mut ticks = Vec::new();
        for minute in 0..10 {
            ticks.push(
                controller
                    .tick(&mapping(), minute == 0, minute * MINUTE)
                    .await,
            );
        }
        ticks
    }

    #[tokio::test]
    async fn a_paused_mapping_is_probed_once_a_minute_and_ramps_back_to_full() {
        let model = Model::new(&[Probe::Down, Probe::Down, Probe::Down], None);
        let ticks: Vec<Tick> = outage(&model)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        use Tick::*;
        assert_eq!(
            ticks,
            [
                Paused,
                StillDown,
                StillDown,
                StillDown,
                Resumed(2),
                Ramped(10),
                Ramped(50),
                Full,
                Running,
                Running
            ]
        );
        assert_eq!(
            *model.probes.lock().unwrap(),
            4,
            "one probe a paused minute"
        );
        assert_eq!(*model.state.lock().unwrap(), mapping().full());
        assert_eq!(*model.switch.lock().unwrap(), None, "taken away at full");
    }

    #[tokio::test]
    async fn asked_again_while_ramping_it_pauses_again() {
        let model = Model::new(&[], None);
        let controller = IntakeController::new(&model, IntakeSettings::default());
        let m = mapping();
        assert_eq!(controller.tick(&m, true, 0).await.unwrap(), Tick::Paused);
        assert_eq!(
            controller.tick(&m, false, MINUTE).await.unwrap(),
            Tick::Resumed(2)
        );
        assert_eq!(
            controller.tick(&m, true, 2 * MINUTE).await.unwrap(),
            Tick::Paused
        );
        assert!(!model.state.lock().unwrap().enabled);
    }

    #[tokio::test]
    async fn a_mapping_someone_else_paused_or_slowed_is_left_alone() {
        let model = Model::new(&[], None);
        let controller = IntakeController::new(&model, IntakeSettings::default());
        let m = mapping();
        for state in [
            MappingState {
                enabled: false,
                max_concurrency: Some(100),
            },
            MappingState {
                enabled: true,
                max_concurrency: Some(5),
            },
        ] {
            *model.state.lock().unwrap() = state;
            assert_eq!(controller.tick(&m, false, 0).await.unwrap(), Tick::NotOurs);
            assert_eq!(*model.probes.lock().unwrap(), 0, "not probed");
            assert_eq!(*model.state.lock().unwrap(), state, "untouched");
        }
    }

    #[test]
    fn a_paused_fifo_mappings_probes_thin_out_to_one_every_half_hour() {
        let probes = |hours: u64| {
            (0..hours * 60)
                .filter(|minute| fifo_probe_due(0, minute * MINUTE))
                .count()
        };
        assert_eq!(probes(2), 35);
        assert_eq!(
            probes(24),
            81,
            "a day: under the FIFO maxReceiveCount Terraform ships (111)"
        );
        let minutes: Vec<u64> = (180..400)
            .filter(|minute| fifo_probe_due(0, minute * MINUTE))
            .collect();
        assert_eq!(
            minutes,
            [182, 204, 229, 257, 287, 317, 347, 377],
            "then every 30 minutes"
        );
    }

    /// Issue 56: the controller stopped by an error at each of its calls in turn, and never run
    /// again: within 15 minutes of its last tick the mapping polls at full.
    #[tokio::test]
    async fn a_controller_that_stops_at_any_step_leaves_the_mapping_enabled_within_15_minutes() {
        let calls = {
            let model = Model::new(&[Probe::Down, Probe::Down, Probe::Down], None);
            outage(&model).await;
            let calls = *model.calls.lock().unwrap();
            calls
        };
        assert!(calls > 20, "{calls} calls");
        for fail_at in 1..=calls {
            let model = Model::new(&[Probe::Down, Probe::Down, Probe::Down], Some(fail_at));
            let controller = IntakeController::new(&model, IntakeSettings::default());
            let mut last_tick = 0;
            for minute in 0..10 {
                last_tick = minute * MINUTE;
                if controller
                    .tick(&mapping(), minute == 0, last_tick)
                    .await
                    .is_err()
                {
                    break;
                }
            }
            model.fire(last_tick + 15 * MINUTE);
            assert_eq!(
                *model.state.lock().unwrap(),
                mapping().full(),
                "stopped at call {fail_at}: the mapping must poll at full 15 minutes on"
            );
        }
    }
}
