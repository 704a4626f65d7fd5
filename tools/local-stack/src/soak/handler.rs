//! The planned handler: follows each message's plan, records its effect, its tries and its group order.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive::breaker::CircuitBreaker;
use redrive::port::Clock;
use redrive::{Message, RecordError, RecordHandler};

use super::config::SoakConfig;
use super::duration_ms;
use super::plan::Plan;

/// The handler under test: follows each message's plan and records its effect, and on FIFO
/// whether it came in its group's order.
pub struct PlannedHandler {
    pub(super) effects: Mutex<HashMap<String, u32>>,
    pub(super) down: AtomicBool,
    slow_for: Duration,
    /// The latest message number that took effect in each group, while the order is checked.
    pub(super) group_order: Mutex<Option<HashMap<String, usize>>>,
    pub(super) out_of_order: AtomicU64,
    pub(super) first_out_of_order: Mutex<Option<String>>,
    pub(super) wrong_source: AtomicU64,
    /// The long outage: a downstream behind a breaker, down until `heal_at_ms` on `clock`.
    pub(super) outage: Option<DownstreamOutage>,
    /// Tries of each message per chain (its id, reprocess count and fresh sets of attempts: a
    /// redrive starts a new chain, and so does an operator's release of a held head), each as it
    /// came: the report shows those of a chain past the limit (runs do not replay exactly).
    pub(super) tries: Mutex<HashMap<(String, u32, u32), Vec<Try>>>,
    /// Fresh sets of attempts an operator gave each held message (`dlq release`), by SQS message
    /// id (a FIFO message keeps its id while it waits in place).
    pub(super) fresh_sets: Mutex<HashMap<String, u32>>,
    /// The clock invocations' deadlines are on (the queue's).
    clock: Arc<dyn Clock>,
    /// Handlers that reached their effect only after their invocation's deadline: Lambda had
    /// stopped that invocation, so the effect never happens.
    pub(super) stopped_before_effect: AtomicU64,
    /// With large messages: each message's `id` by its origin message id, which names its object
    /// in the payload bucket (the tally finds whose body a dead letter pointed at).
    pub(super) origins: Option<Mutex<HashMap<String, String>>>,
}

/// One try of a message: the queue and delivery it came in, and the lane's mark on a copy there.
pub(super) struct Try {
    queue: String,
    message_id: String,
    receive_count: String,
    attempt: u32,
    lane_mark: Option<String>,
}

impl Try {
    fn of(message: &Message<'_>) -> Self {
        let record = message.record();
        let arn = record.event_source_arn.as_deref().unwrap_or("?");
        Self {
            queue: arn.rsplit(':').next().unwrap_or(arn).to_owned(),
            message_id: message.id().to_owned(),
            receive_count: record
                .attributes
                .approximate_receive_count
                .as_deref()
                .unwrap_or("?")
                .to_owned(),
            attempt: message.attempt(),
            // `<held|follows> <position> <group key>` (the engine's `redrive-lane` attribute).
            lane_mark: record
                .message_attributes
                .get("redrive-lane")
                .and_then(|mark| mark.string_value.as_deref())
                .map(|mark| {
                    let mut words = mark.split(' ');
                    let what = words.next().unwrap_or_default();
                    let position = words.next().unwrap_or_default().trim_start_matches('0');
                    format!("{what} {position}")
                }),
        }
    }
}

impl std::fmt::Display for Try {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} receive {} attempt {}",
            self.queue, self.message_id, self.receive_count, self.attempt
        )?;
        match &self.lane_mark {
            Some(mark) => write!(f, " ({mark})"),
            None => Ok(()),
        }
    }
}

pub(super) struct DownstreamOutage {
    pub(super) breaker: CircuitBreaker,
    pub(super) heal_at_ms: u64,
    pub(super) clock: Arc<dyn Clock>,
}

#[derive(serde::Deserialize)]
pub(super) struct Body<'a> {
    id: &'a str,
    plan: &'a str,
    /// The message's number: within a group, a later message has a higher one.
    seq: usize,
    group: Option<&'a str>,
    /// The ARN of the source queue the message was sent to (with two sources).
    src: Option<&'a str>,
}

impl RecordHandler for PlannedHandler {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let body: Body<'_> = message.json()?;
        if let Some(origins) = &self.origins {
            let origin = message
                .meta()
                .map_or(message.id(), |meta| &meta.origin_message_id);
            origins
                .lock()
                .unwrap()
                .insert(origin.to_owned(), body.id.to_owned());
        }
        let plan =
            Plan::decode(body.plan).ok_or_else(|| RecordError::permanent("bad_plan", body.plan))?;
        if body.src.is_some() && message.record().event_source_arn.as_deref() != body.src {
            self.wrong_source.fetch_add(1, Ordering::Relaxed);
        }
        let chain = (
            body.id.to_owned(),
            message.meta().map_or(0, |meta| meta.reprocess_count),
            self.fresh_sets
                .lock()
                .unwrap()
                .get(message.id())
                .copied()
                .unwrap_or(0),
        );
        let tried = || {
            let mut tries = self.tries.lock().unwrap();
            let tries = tries.entry(chain.clone()).or_default();
            tries.push(Try::of(message));
            u32::try_from(tries.len()).unwrap_or(u32::MAX)
        };
        let tries = if let Some(outage) = &self.outage {
            let down = outage.clock.now_ms() < outage.heal_at_ms;
            let called = outage
                .breaker
                .call(|| async move {
                    if down {
                        Err(RecordError::transient("unavailable", "downstream down"))
                    } else {
                        Ok(())
                    }
                })
                .await;
            // A deferral (the breaker open, or its probe failed) spends no attempt: not a try.
            if matches!(&called, Err(error) if error.is_deferral()) {
                return called;
            }
            let tries = tried();
            called?;
            tries
        } else {
            tried()
        };
        // The bug behind a panic is fixed before a held head is released: one panic per message.
        let first = tries == 1
            && message.attempt() == 1
            && message.meta().is_none_or(|m| m.reprocess_count == 0);
        match plan {
            Plan::Flaky(n) if message.attempt() <= n => {
                return Err(RecordError::transient("timeout", "flaky downstream"))
            }
            Plan::Down if self.down.load(Ordering::SeqCst) => {
                return Err(RecordError::transient("unavailable", "downstream down"))
            }
            Plan::Permanent => return Err(RecordError::permanent("invalid", "invalid input")),
            // Unwinds without the panic hook: a run's planned panics print no backtraces that
            // would bury the report of a failing test.
            Plan::Panic if first => {
                std::panic::resume_unwind(Box::new(format!("bug on {}", body.id)))
            }
            Plan::Slow if first => tokio::time::sleep(self.slow_for).await,
            _ => {}
        }
        // Lambda stops an invocation at its deadline, and nothing it does afterwards happens. A
        // task starved past the deadline (a loaded machine) is polled again with the driver's
        // timer and the handler both ready, and the handler would go on: it is that invocation,
        // stopped, and never returns.
        if self.clock.now_ms() > message.invocation().deadline_ms {
            self.stopped_before_effect.fetch_add(1, Ordering::Relaxed);
            std::future::pending::<()>().await;
        }
        if let (Some(group), Some(order)) = (body.group, self.group_order.lock().unwrap().as_mut())
        {
            let latest = order.entry(group.to_owned()).or_insert(body.seq);
            if body.seq < *latest && self.out_of_order.fetch_add(1, Ordering::Relaxed) == 0 {
                let tries: Vec<String> = self.tries.lock().unwrap()[&chain]
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                *self.first_out_of_order.lock().unwrap() = Some(format!(
                    "{} (seq {}) after seq {latest} of {group}, its tries: {}",
                    body.id,
                    body.seq,
                    tries.join("; "),
                ));
            }
            *latest = body.seq.max(*latest);
        }
        *self
            .effects
            .lock()
            .unwrap()
            .entry(body.id.to_owned())
            .or_default() += 1;
        Ok(())
    }
}

impl PlannedHandler {
    pub(super) fn new(config: &SoakConfig, clock: &Arc<dyn Clock>) -> Self {
        Self {
            effects: Mutex::default(),
            down: AtomicBool::new(true),
            slow_for: config.slow_for,
            group_order: Mutex::new(config.fifo_groups.map(|_| HashMap::new())),
            out_of_order: AtomicU64::new(0),
            first_out_of_order: Mutex::default(),
            wrong_source: AtomicU64::new(0),
            tries: Mutex::default(),
            fresh_sets: Mutex::default(),
            clock: clock.clone(),
            stopped_before_effect: AtomicU64::new(0),
            origins: config.large_every.map(|_| Mutex::default()),
            outage: config.outage.as_ref().map(|outage| DownstreamOutage {
                breaker: CircuitBreaker::with_clock("downstream", outage.breaker, clock.clone()),
                heal_at_ms: clock.now_ms() + duration_ms(outage.down_for),
                clock: clock.clone(),
            }),
        }
    }
}
