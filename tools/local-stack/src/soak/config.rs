//! A soak run's configuration and its presets (in memory, on moto, FIFO, the long outage, hold).
use std::num::NonZeroUsize;
use std::time::Duration;

use redrive::retry::FifoOnDeadLetter;
use redrive::RetryPolicy;

use crate::topology::Topology;

/// How much faster than AWS's clock the runs on a server (moto, LocalStack) play the shipped waits:
/// 3 minutes' visibility in 3 seconds. The in-memory runs keep AWS's clock (it is virtual there).
const TIME_SCALE: f64 = 60.0;

/// Consumer `key` as the rendering of `configuration` ships it (`infra/rendered/`), every wait
/// divided by `time_scale`.
pub(crate) struct Shipped {
    /// Its source's `maxReceiveCount`.
    pub(crate) max_receive_count: u32,
    /// The settings its function parses from the environment Terraform gives it.
    pub(crate) settings: redrive::Settings,
    /// Its function's timeout.
    pub(crate) function_timeout: Duration,
}

pub(crate) fn shipped(configuration: &str, key: &str, time_scale: f64) -> Shipped {
    let refuse = |error: &dyn std::fmt::Display| -> ! {
        panic!("the soak runs consumer `{key}` as `{configuration}` ships it: {error}")
    };
    let mut topology = Topology::shipped(configuration).unwrap_or_else(|e| refuse(&e));
    topology.scale_time(time_scale);
    let settings = topology
        .settings(
            key,
            "https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
            &[],
        )
        .unwrap_or_else(|e| refuse(&e));
    let consumer = &topology.consumers[key];
    Shipped {
        max_receive_count: consumer.max_receive_count,
        settings,
        function_timeout: Duration::from_secs_f64(
            f64::from(consumer.function_timeout_seconds) / time_scale,
        ),
    }
}

/// Soak parameters; every random choice comes from `seed`.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub messages: usize,
    pub seed: u64,
    /// Queue depth the producer keeps the source under.
    pub max_queued: usize,
    /// Share of SendMessageBatch calls that fail as a whole, and of entries refused.
    pub failed_calls: f64,
    pub refused_entries: f64,
    /// Share of SendMessageBatch calls that never answer (a stalled connection), half of them
    /// after SQS took the messages: the carry-out's deadline must cut them off.
    pub stalled_calls: f64,
    /// Share of idempotency store calls (claim, complete, release) that fail, half of them after
    /// the write took effect (the answer lost), as a throttled or timed-out DynamoDB call does.
    pub store_faults: f64,
    /// Share of SQS and store calls that answer late: a real wait of up to half the batch's time,
    /// while records run and while their fates are carried out.
    pub slow_calls: f64,
    /// Share of ChangeMessageVisibilityBatch calls throttled as a whole.
    pub throttled_visibility: f64,
    /// Share of receives Lambda invokes nothing with (throttled): the messages come back after
    /// their visibility timeout with their receive count raised and no try.
    pub throttled_invocations: f64,
    /// Share of batches whose visibility runs out while they are handled: another container
    /// receives them while the first still runs.
    pub overlapping_deliveries: f64,
    /// Share of handled batches whose delete is lost, as when the function errors: the whole
    /// batch is delivered again, records already done and copies already sent included.
    pub lost_deletes: f64,
    pub max_receive_count: u32,
    pub visibility: Duration,
    pub retry: RetryPolicy,
    /// Time the handler of a `Slow` message takes, and the time a batch gets.
    pub slow_for: Duration,
    pub budget: Duration,
    /// How long a completion may take to land once its invocation stopped: none on the virtual
    /// clock, whose driver waits for writes in flight (`FaultyStore::settled`); on a server, a
    /// loaded machine's answer. A claim's lease outlasts the invocation by it, as Lambda's
    /// function timeout outlasts a DynamoDB write.
    pub completion_time: Duration,
    pub reprocess_cap: u32,
    /// Records the processor handles at once.
    pub concurrency: NonZeroUsize,
    /// A FIFO source (and DLQ) with the messages dealt round this many message groups.
    pub fifo_groups: Option<usize>,
    /// Simulated Lambda containers: idempotency guards of their own over one shared store.
    pub containers: NonZeroUsize,
    /// A long outage: every message calls a downstream, behind a circuit breaker, that is down
    /// this long from the start (longer than the retry policy's deferral age limit).
    pub outage: Option<Outage>,
    /// The containers share this DynamoDB table (on the moto run) instead of a store in memory
    /// with DynamoDB's conditional semantics.
    pub idempotency_table: Option<String>,
    /// Whether effects out of their FIFO group's order break the invariant. Not on moto: when
    /// several in-flight messages of a group become visible at once, moto 5.x hands out the
    /// group's last one first (docs/reliability.md), which SQS does not; there the order is
    /// counted and shown, and the in-memory runs hold the engine to it.
    pub order_checked: bool,
    /// A second source queue shares the DLQ; the messages are dealt between the two, and the
    /// scheduled redrive must send each dead letter home to its own.
    pub second_source: bool,
    /// FIFO: what a head that would be dead-lettered means for its group. With `Hold`, an
    /// operator releases the held heads from time to time, and the order of every group's
    /// effects is checked to the end, the redrive included.
    pub fifo_on_dead_letter: FifoOnDeadLetter,
    /// FIFO with hold: held groups wait in a retry lane the same function reads
    /// (`REDRIVE_LANE_URL`), as the tfvars' FIFO consumer does; without it, in place.
    pub lane: bool,
    /// The source queues' `MessageRetentionPeriod` in the model (the DLQ keeps 14 days, as the
    /// tfvars' do); the engine is told it, as Terraform tells the function.
    pub retention: Duration,
    /// A retention the engine is told instead of the queue's (a misconfigured function), to show
    /// what the model does to waits that outlast the real one.
    pub engine_retention: Option<Duration>,
    /// How many messages the model's FIFO receive looks at (SQS: 120,000), smaller to pass it
    /// with a soak's volume.
    pub fifo_scan_window: usize,
    /// Every this many messages one has a body of 1 MiB less 256 bytes: its copies cannot carry
    /// their failure context inline and go through a payload bucket (in memory).
    pub large_every: Option<usize>,
    /// Share of the payload bucket's calls that fail (S3 throttled or down), seeded.
    pub payload_faults: f64,
}

/// The long-outage scenario's downstream.
#[derive(Debug, Clone)]
pub struct Outage {
    pub down_for: Duration,
    pub breaker: redrive::breaker::BreakerSettings,
}

impl SoakConfig {
    /// The in-memory run: virtual time, so waits cost nothing but the slow handlers' real time.
    pub fn memory(messages: usize, seed: u64) -> Self {
        Self::on_orders(messages, seed, 1.0)
    }

    /// The in-memory run's faults on the standard consumer (`orders`) as Terraform ships it, its
    /// waits divided by `time_scale`.
    fn on_orders(messages: usize, seed: u64, time_scale: f64) -> Self {
        let Shipped {
            max_receive_count,
            settings: orders,
            ..
        } = shipped("infra", "orders", time_scale);
        Self {
            messages,
            seed,
            max_queued: 200,
            failed_calls: 0.01,
            refused_entries: 0.01,
            stalled_calls: 0.005,
            store_faults: 0.01,
            slow_calls: 0.02,
            throttled_visibility: 0.01,
            throttled_invocations: 0.01,
            overlapping_deliveries: 0.01,
            lost_deletes: 0.01,
            max_receive_count,
            visibility: orders.processor.source.visibility_timeout,
            retry: orders.processor.retry.clone(),
            slow_for: Duration::from_millis(30),
            budget: Duration::from_millis(15),
            completion_time: Duration::ZERO,
            reprocess_cap: 3,
            concurrency: orders.processor.concurrency,
            fifo_groups: None,
            containers: NonZeroUsize::new(3).expect("not zero"),
            outage: None,
            idempotency_table: None,
            order_checked: true,
            second_source: false,
            fifo_on_dead_letter: FifoOnDeadLetter::Continue,
            lane: false,
            retention: orders.processor.source.retention,
            engine_retention: None,
            fifo_scan_window: crate::memory::FIFO_SCAN_WINDOW,
            large_every: None,
            payload_faults: 0.0,
        }
    }

    /// The long outage in memory: the downstream is down for three hours, three times the shipped
    /// deferral age limit, behind the breaker Terraform ships (5 failures open it for 30 s). The
    /// messages themselves are sound; the AWS faults (failed and late calls, lost deletes,
    /// throttled invocations) stay.
    pub fn outage(messages: usize, seed: u64) -> Self {
        let orders = shipped("infra", "orders", 1.0).settings;
        Self {
            outage: Some(Outage {
                down_for: Duration::from_secs(3 * 3600),
                breaker: orders.breaker,
            }),
            ..Self::memory(messages, seed)
        }
    }

    /// The long outage on FIFO: the same three hours, with a deferral age limit (12 h) that
    /// outlasts them, as a team sets `retry.defer_max_age_seconds` for a FIFO consumer that must
    /// wait an outage out in order (docs/design.md): every group waits in place and goes on.
    pub fn fifo_outage(messages: usize, seed: u64) -> Self {
        let outage = Self::outage(messages, seed).fifo(8);
        Self {
            retry: {
                let mut retry_policy = outage.retry.clone();
                retry_policy.defer_max_age = Duration::from_secs(12 * 3600);
                retry_policy
            },
            ..outage
        }
    }

    /// The same FIFO run as `infra-held` ships its FIFO consumer (the tfvars with
    /// `fifo_on_dead_letter = "hold"`): a head that would be dead-lettered holds its group in a
    /// retry lane; an operator releases the held heads; every group's effects are in order end
    /// to end.
    #[must_use]
    pub fn holding(self) -> Self {
        let Shipped {
            max_receive_count,
            settings: held,
            ..
        } = shipped("infra-held", "payments", 1.0);
        Self {
            fifo_on_dead_letter: held.processor.fifo_on_dead_letter,
            lane: true,
            retention: held.processor.source.retention,
            max_receive_count,
            ..self
        }
    }

    /// The same run holding groups in place, in their source, without a retry lane.
    #[must_use]
    pub fn in_place(self) -> Self {
        Self {
            lane: false,
            ..self
        }
    }

    /// The moto run: real time, so the shipped waits divided by 60, the function's timeout (each
    /// batch's time) too; fewer messages, so more faults.
    pub fn moto(messages: usize, seed: u64) -> Self {
        let budget = shipped("infra", "orders", TIME_SCALE).function_timeout;
        Self {
            failed_calls: 0.05,
            refused_entries: 0.05,
            stalled_calls: 0.01,
            store_faults: 0.02,
            slow_calls: 0.05,
            throttled_visibility: 0.02,
            throttled_invocations: 0.02,
            overlapping_deliveries: 0.02,
            lost_deletes: 0.05,
            slow_for: budget * 2,
            budget,
            completion_time: Duration::from_secs(1),
            order_checked: false,
            ..Self::on_orders(messages, seed, TIME_SCALE)
        }
    }
}

impl SoakConfig {
    /// Every `every`th message near SQS's size limit, through a payload bucket that fails 5% of
    /// its calls.
    #[must_use]
    pub fn large(self, every: usize) -> Self {
        Self {
            large_every: Some(every),
            payload_faults: 0.05,
            ..self
        }
    }

    /// The same run on a FIFO queue whose messages are dealt round `groups` message groups, in
    /// batches of ten with the attempt ledger, and the `maxReceiveCount` Terraform ships for the
    /// FIFO consumer (`payments`).
    #[must_use]
    pub fn fifo(self, groups: usize) -> Self {
        let max_receive_count = shipped("infra", "payments", 1.0).max_receive_count;
        Self {
            fifo_groups: Some(groups),
            max_receive_count,
            ..self
        }
    }

    /// The same run with the containers sharing the DynamoDB table `table` (moto's).
    #[must_use]
    pub fn dynamodb(self, table: impl Into<String>) -> Self {
        Self {
            idempotency_table: Some(table.into()),
            ..self
        }
    }

    /// `.fifo` on a FIFO run's queue names.
    pub(super) fn suffix(&self) -> &'static str {
        match self.fifo_groups {
            Some(_) => ".fifo",
            None => "",
        }
    }
}
