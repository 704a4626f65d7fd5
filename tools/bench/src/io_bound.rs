//! The I/O-bound rows: each record's handler parses its order, awaits a downstream that answers
//! after a fixed latency, and checks the status. A batch can take no less than that latency plus
//! our own CPU time for the batch (the floor); the peers are Powertools' processors doing the same
//! work in the same run, spawned once per scenario.
use std::collections::BinaryHeap;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use redrive::{Message, RecordError, RecordHandler};
use tokio::sync::oneshot;

use crate::event::{generate_event, Order, FAIL_EVERY};
use crate::{median, ms, processor_with, run_with, Peer};

/// One I/O-bound workload.
pub struct Scenario {
    pub label: &'static str,
    pub records: usize,
    /// A FIFO queue with this many message groups.
    pub fifo_groups: Option<usize>,
    pub latency: Duration,
    /// `REDRIVE_CONCURRENCY` for this workload.
    pub concurrency: usize,
    /// Rounds of ours, then each peer; and runs of each in a round.
    pub rounds: usize,
    pub runs: usize,
}

/// The workloads of the issue that asked for them (#20): many records, the common Lambda batch,
/// and FIFO groups.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        label: "(a) 1,000 records, 5 ms downstream",
        records: 1_000,
        fifo_groups: None,
        latency: Duration::from_millis(5),
        concurrency: 1_000,
        rounds: 5,
        runs: 9,
    },
    Scenario {
        label: "(b) 10 records, 50 ms downstream",
        records: 10,
        fifo_groups: None,
        latency: Duration::from_millis(50),
        concurrency: redrive::config::DEFAULT_CONCURRENCY.get(),
        rounds: 5,
        runs: 5,
    },
    Scenario {
        label: "(c) FIFO, 10 groups x 100 records, 5 ms downstream",
        records: 1_000,
        fifo_groups: Some(10),
        latency: Duration::from_millis(5),
        concurrency: redrive::config::DEFAULT_CONCURRENCY.get(),
        rounds: 3,
        runs: 1,
    },
];

/// A downstream that answers each call after the latency, from a thread of its own: the answer
/// wakes the runtime from outside, as a socket that becomes readable does. A `tokio::time::sleep`
/// would not stand in for it: tokio's timer rounds every wait up to its next millisecond tick (a
/// lone 5 ms sleep takes about 6.1 ms here), which a real downstream call does not pay. The peers
/// wait on their own event loop's timers. The thread is woken only by a call due before every
/// other, so that a thousand calls do not cost a thousand wake-ups.
pub(crate) struct Downstream {
    shared: Arc<(Mutex<Calls>, Condvar)>,
}

#[derive(Default)]
struct Calls {
    pending: BinaryHeap<Call>,
    closed: bool,
}

struct Call {
    due: Instant,
    answer: oneshot::Sender<()>,
}

/// Calls ordered by due time, the earliest greatest (a `BinaryHeap` pops it first).
impl Ord for Call {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.due.cmp(&self.due)
    }
}
impl PartialOrd for Call {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Call {
    fn eq(&self, other: &Self) -> bool {
        self.due == other.due
    }
}
impl Eq for Call {}

impl Downstream {
    pub(crate) fn start() -> Self {
        let shared = Arc::new((Mutex::new(Calls::default()), Condvar::new()));
        let answering = Arc::clone(&shared);
        std::thread::spawn(move || {
            let (calls, wake) = &*answering;
            let mut calls = calls.lock().expect("downstream lock");
            while !calls.closed {
                let now = Instant::now();
                match calls.pending.peek().map(|call| call.due) {
                    Some(due) if due <= now => {
                        let _ = calls.pending.pop().map(|call| call.answer.send(()));
                    }
                    Some(due) => calls = wake.wait_timeout(calls, due - now).expect("lock").0,
                    None => calls = wake.wait(calls).expect("downstream lock"),
                }
            }
        });
        Self { shared }
    }

    pub(crate) async fn call(&self, latency: Duration) {
        let (answer, answered) = oneshot::channel();
        let due = Instant::now() + latency;
        {
            let (calls, wake) = &*self.shared;
            let mut calls = calls.lock().expect("downstream lock");
            let first = calls.pending.peek().is_none_or(|call| due < call.due);
            calls.pending.push(Call { due, answer });
            if first {
                wake.notify_one();
            }
        }
        let _ = answered.await;
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        let (calls, wake) = &*self.shared;
        calls.lock().expect("downstream lock").closed = true;
        wake.notify_one();
    }
}

/// The handler: the benchmark's order check, with the downstream call in the middle.
pub(crate) struct AwaitsDownstream<'d> {
    pub(crate) downstream: &'d Downstream,
    pub(crate) latency: Duration,
}

impl RecordHandler for AwaitsDownstream<'_> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let order: Order<'_> = message.json()?;
        if !self.latency.is_zero() {
            self.downstream.call(self.latency).await;
        }
        match order.status {
            "fail" => Err(RecordError::transient("order_failed", "status is fail")),
            _ => Ok(()),
        }
    }
}

/// A measured scenario: ours, the floor, and each peer's mode with its median.
pub struct Measured {
    pub ours_ms: f64,
    /// Our CPU time for the batch: the same run with a downstream that answers at once.
    pub cpu_ms: f64,
    /// A lone call of the downstream: what its wait itself takes.
    pub lone_call_ms: f64,
    pub peers: Vec<(String, f64)>,
}

impl Measured {
    /// The downstream waits that must follow one another, plus our CPU time: one wait per wave of
    /// `concurrency` records, or on FIFO one per record of a group (a group's records run in turn).
    pub fn floor_ms(&self, scenario: &Scenario) -> f64 {
        let waves = match scenario.fifo_groups {
            Some(groups) => scenario.records.div_ceil(groups),
            None => scenario.records.div_ceil(scenario.concurrency),
        };
        waves as f64 * ms(scenario.latency) + self.cpu_ms
    }
}

pub fn measure(
    runtime: &tokio::runtime::Runtime,
    scenario: &Scenario,
    scratch: &Path,
    python: &Path,
    python_peer: &Path,
    node_peer: &Path,
) -> Result<Measured, String> {
    let event = generate_event(scenario.records, scenario.fifo_groups);
    let path = scratch.join(format!("event-io-{}.json", scenario.label.len()));
    std::fs::write(&path, &event).map_err(|e| e.to_string())?;
    let expected = match scenario.fifo_groups {
        Some(_) => 0,
        None => scenario.records / FAIL_EVERY,
    };
    let concurrency = std::num::NonZeroUsize::new(scenario.concurrency).ok_or("concurrency 0")?;
    let processor = processor_with(None, concurrency);
    let downstream = Downstream::start();
    let handler = AwaitsDownstream {
        downstream: &downstream,
        latency: scenario.latency,
    };
    let instant = AwaitsDownstream {
        downstream: &downstream,
        latency: Duration::ZERO,
    };
    let latency_ms = scenario.latency.as_millis().to_string();
    let mode = match scenario.fifo_groups {
        Some(_) => "fifo",
        None => "standard",
    };
    let args = [path.as_os_str(), latency_ms.as_ref(), mode.as_ref()];
    let mut peers = [
        Peer::spawn(python, python_peer, &args)?,
        Peer::spawn(Path::new("node"), node_peer, &args)?,
    ];
    let (mut ours, mut cpu, mut lone) = (Vec::new(), Vec::new(), Vec::new());
    let mut peer_ms: Vec<Vec<(String, f64)>> = vec![Vec::new(); peers.len()];
    // A first round of everyone, not counted: the interpreters' and the JIT's warm-up.
    for round in 0..=scenario.rounds {
        let counted = round > 0;
        for _ in 0..scenario.runs {
            let (elapsed, failures, _) = run_with(runtime, &processor, &handler, event.as_bytes());
            assert_eq!(failures, expected, "ours lists the failing orders");
            let (cpu_elapsed, _, _) = run_with(runtime, &processor, &instant, event.as_bytes());
            let lone_elapsed = runtime.block_on(async {
                let started = Instant::now();
                downstream.call(scenario.latency).await;
                started.elapsed()
            });
            if counted {
                ours.push(ms(elapsed));
                cpu.push(ms(cpu_elapsed));
                lone.push(ms(lone_elapsed));
            }
        }
        for (peer, samples) in peers.iter_mut().zip(&mut peer_ms) {
            let results = peer.burst(scenario.runs, expected)?;
            if counted {
                samples.extend(results.into_iter().map(|mode| (mode.name, mode.ms)));
            }
        }
    }
    let peers = peer_ms
        .into_iter()
        .filter_map(|samples| {
            let name = samples.first()?.0.clone();
            Some((
                name,
                median(samples.into_iter().map(|(_, ms)| ms).collect()),
            ))
        })
        .collect();
    Ok(Measured {
        ours_ms: median(ours),
        cpu_ms: median(cpu),
        lone_call_ms: median(lone),
        peers,
    })
}
