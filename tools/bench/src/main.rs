//! `make bench`: one run, one table. Throughput on a 10,000-record SQS event against Powertools for
//! AWS Lambda (Python and TypeScript) doing the same work, side by side; start-up of the release
//! `bootstrap`; its peak memory on that event; SQS requests per re-sent message; zip sizes.
mod claim_check;
mod event;
mod fifo_cycle;
mod io_bound;
mod kafka;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use redrive::port::RecordingQueue;
use redrive::{
    Message, Processor, ProcessorConfig, RecordError, RecordHandler, RetryPolicy, SqsEvent,
};
use redrive_runtime_api::{peak_rss_kib, Invocation, RuntimeApi};
use serde::Deserialize;

use event::{generate_event, Order, FAIL_EVERY};

const RECORDS: usize = 10_000;
const FAR_FUTURE_MS: u64 = u64::MAX / 2;
/// Samples of the throughput comparison, each ours, Python, ours, TypeScript, ours: every peer run
/// has a turn of ours right before and right after it, and its ratio is taken against those two.
/// This machine's speed moves by up to 2x from one second to the next; runs of a peer and of ours
/// further apart than that compare two machines.
const SAMPLES: usize = 25;
/// Samples run first and not counted: the interpreter's and the JIT's warm-up.
const PEER_WARMUP: usize = 3;
/// Runs a peer makes back to back in one sample (of each mode), of which it reports the median: a
/// function handling one batch after another has no idle time between them, and V8's collector
/// and compiler threads would use any (a TypeScript run after a 60 ms pause measured 7–16% faster
/// than one right after another).
const PEER_BURST: usize = 5;
/// Runs of each Rust variant in one turn of ours; the first is not counted (the peer's run before
/// it has evicted our working set from the cache, as nothing does between a function's
/// invocations; the peers' runs follow runs of their own).
const TURN_RUNS: usize = 6;
/// Runs of the reference loops.
const REFERENCE_RUNS: usize = 40;
const REFERENCE_WARMUP: usize = 8;
/// Invocations of the release bootstrap with the 10,000-record event.
const BOOTSTRAP_INVOCATIONS: usize = 21;

/// `make bench`: redrive against Powertools (Python, TypeScript) in one run, plus start-up,
/// memory, SQS requests and zip sizes. The Makefile passes every path.
#[derive(clap::Parser)]
#[command(name = "redrive-bench")]
struct Args {
    /// Where the results table is written (results.md).
    #[arg(long)]
    out: PathBuf,
    /// The release bootstrap of the SQS consumer.
    #[arg(long)]
    bootstrap: PathBuf,
    /// Where `cargo lambda build` put the zips.
    #[arg(long)]
    lambda_dir: PathBuf,
    /// The Python with Powertools installed.
    #[arg(long)]
    python: PathBuf,
    /// The TypeScript peer's script.
    #[arg(long)]
    node_peer: PathBuf,
    /// The Python peer's script.
    #[arg(long)]
    python_peer: PathBuf,
}

/// The same work every peer does: parse the body as JSON, check a field, fail 1%.
struct CheckStatus;

impl RecordHandler for CheckStatus {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let order: Order<'_> = message.json()?;
        match order.status {
            "fail" => Err(RecordError::transient("order_failed", "status is fail")),
            _ => Ok(()),
        }
    }
}

fn processor(dlq: Option<&str>) -> Processor<RecordingQueue> {
    processor_with(dlq, ProcessorConfig::default().concurrency)
}

fn processor_with(dlq: Option<&str>, concurrency: NonZeroUsize) -> Processor<RecordingQueue> {
    let mut config = ProcessorConfig::default();
    config.dlq_url = dlq.map(str::to_owned);
    config.source_queue_url =
        Some("https://sqs.us-east-1.amazonaws.com/123456789012/orders".into());
    config.retry = RetryPolicy::default();
    config.deadline_margin = Duration::from_secs(2);
    config.concurrency = concurrency;
    Processor::new(RecordingQueue::default(), config)
}

/// Event bytes in, response bytes out.
fn run_once(
    runtime: &tokio::runtime::Runtime,
    processor: &Processor<RecordingQueue>,
    event: &[u8],
) -> (Duration, usize, redrive::BatchReport) {
    run_with(runtime, processor, &CheckStatus, event)
}

/// [`run_once`] with another handler.
fn run_with(
    runtime: &tokio::runtime::Runtime,
    processor: &Processor<RecordingQueue>,
    handler: &impl RecordHandler,
    event: &[u8],
) -> (Duration, usize, redrive::BatchReport) {
    let started = Instant::now();
    let mut decoded = String::new();
    let parsed = SqsEvent::from_slice_in(event, &mut decoded).expect("valid event");
    let processed = runtime
        .block_on(processor.process(handler, &parsed.records, FAR_FUTURE_MS))
        .expect("batch");
    let response = serde_json::to_vec(&processed.response).expect("response");
    let elapsed = started.elapsed();
    std::hint::black_box(response);
    (
        elapsed,
        processed.response.batch_item_failures.len(),
        processed.report,
    )
}

/// The naive Rust loop DESIGN.md measures as a reference: serde_json into aws_lambda_events'
/// owned `SqsEvent`, the same handler work, the response built by hand.
fn naive_once(event: &[u8]) -> (Duration, usize) {
    use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
    let started = Instant::now();
    let parsed: SqsEvent = serde_json::from_slice(event).expect("valid event");
    let mut response = SqsBatchResponse::default();
    for record in &parsed.records {
        let body = record.body.as_deref().unwrap_or_default();
        let handled =
            serde_json::from_str::<Order<'_>>(body).is_ok_and(|order| order.status != "fail");
        if !handled {
            response.add_failure(record.message_id.clone().unwrap_or_default());
        }
    }
    let out = serde_json::to_vec(&response).expect("response");
    let elapsed = started.elapsed();
    std::hint::black_box(out);
    (elapsed, response.batch_item_failures.len())
}

/// What `lambda_runtime` does with the event before a handler of `Box<RawValue>` sees it: a full
/// JSON parse and a copy. The functions skip it (`redrive::lambda::run`); measured for reference.
fn raw_value_once(event: &[u8]) -> Duration {
    let started = Instant::now();
    let raw: Box<serde_json::value::RawValue> = serde_json::from_slice(event).expect("valid event");
    let elapsed = started.elapsed();
    std::hint::black_box(raw);
    elapsed
}

/// Ours report-only (what Powertools does) and ours with the retry scheduler on, interleaved run
/// by run so that both see the same machine.
struct Ours<'a> {
    runtime: &'a tokio::runtime::Runtime,
    report_only: Processor<RecordingQueue>,
    event: &'a [u8],
    expected_failures: usize,
    report_only_ms: Vec<f64>,
    scheduled_ms: Vec<f64>,
    requests_per_resend: f64,
}

impl<'a> Ours<'a> {
    fn new(
        runtime: &'a tokio::runtime::Runtime,
        event: &'a [u8],
        expected_failures: usize,
    ) -> Self {
        Ours {
            runtime,
            report_only: processor(None),
            event,
            expected_failures,
            report_only_ms: Vec::new(),
            scheduled_ms: Vec::new(),
            requests_per_resend: 0.0,
        }
    }

    /// One turn of `TURN_RUNS` runs of each variant; the median of its counted report-only runs.
    fn turn(&mut self, counted: bool) -> f64 {
        let mut turn = Vec::with_capacity(TURN_RUNS);
        for run in 0..TURN_RUNS {
            let (elapsed, failures, _) = run_once(self.runtime, &self.report_only, self.event);
            assert_eq!(
                failures, self.expected_failures,
                "the partial batch response lists the failing 1%"
            );
            let scheduler = processor(Some(
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq",
            ));
            let (with_scheduler, failures, report) = run_once(self.runtime, &scheduler, self.event);
            assert_eq!(
                (failures, report.retried as usize),
                (0, self.expected_failures),
                "every failure re-sent, none reported"
            );
            self.requests_per_resend = f64::from(report.sqs_requests) / f64::from(report.retried);
            if run > 0 {
                turn.push(ms(elapsed));
                if counted {
                    self.scheduled_ms.push(ms(with_scheduler));
                }
            }
        }
        if counted {
            self.report_only_ms.extend(&turn);
        }
        median(turn)
    }
}

fn ms(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

/// The naive loop and lambda_runtime's RawValue parse, interleaved in a loop of their own: each
/// allocates an owned copy of every record and frees it, and run between ours, their freed heap
/// went back to the kernel and each of our runs paid its page faults again, which a function
/// handling one event after another does not (nor do the peers, each in a process of its own).
/// Medians of the naive loop and of the RawValue parse.
fn references(event: &[u8], expected_failures: usize) -> (f64, f64) {
    let (mut naive, mut raw_value) = (vec![], vec![]);
    for run in 0..REFERENCE_RUNS {
        let (naive_elapsed, failures) = naive_once(event);
        assert_eq!(failures, expected_failures, "the naive loop agrees");
        let raw_value_elapsed = raw_value_once(event);
        if run >= REFERENCE_WARMUP {
            naive.push(ms(naive_elapsed));
            raw_value.push(ms(raw_value_elapsed));
        }
    }
    (median(naive), median(raw_value))
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The median of a burst of timed runs of one of a peer's modes.
#[derive(Deserialize)]
struct PeerResult {
    name: String,
    ms: f64,
    failures: usize,
}

/// A peer's script, running: for each number written to it, that many timed runs of each of its
/// modes, back to back.
struct Peer {
    script: PathBuf,
    child: Child,
    runs: Option<ChildStdin>,
    results: BufReader<ChildStdout>,
}

impl Peer {
    fn spawn(program: &Path, script: &Path, args: &[&OsStr]) -> Result<Self, String> {
        let mut child = Command::new(program)
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        let (Some(runs), Some(results)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("{}: no pipes to the peer", script.display()));
        };
        Ok(Peer {
            script: script.to_owned(),
            child,
            runs: Some(runs),
            results: BufReader::new(results),
        })
    }

    /// `PEER_BURST` runs of each mode, back to back; each mode's median. An error when the peer
    /// fails or disagrees on the failures.
    fn run(&mut self, expected_failures: usize) -> Result<Vec<PeerResult>, String> {
        self.burst(PEER_BURST, expected_failures)
    }

    /// [`Peer::run`] with `burst` runs of each mode.
    fn burst(&mut self, burst: usize, expected_failures: usize) -> Result<Vec<PeerResult>, String> {
        let failed = |e: &dyn std::fmt::Display| format!("{}: {e}", self.script.display());
        let runs = self.runs.as_mut().ok_or_else(|| failed(&"closed"))?;
        writeln!(runs, "{burst}")
            .and_then(|()| runs.flush())
            .map_err(|e| failed(&e))?;
        let mut line = String::new();
        match self.results.read_line(&mut line) {
            Ok(0) => return Err(failed(&"exited (its error is above)")),
            Ok(_) => {}
            Err(e) => return Err(failed(&e)),
        }
        let results: Vec<PeerResult> =
            serde_json::from_str(&line).map_err(|e| failed(&format!("unreadable result: {e}")))?;
        match results
            .iter()
            .find(|mode| mode.failures != expected_failures)
        {
            Some(mode) => Err(format!(
                "{} reported {} failures, expected {expected_failures}",
                mode.name, mode.failures
            )),
            None if results.is_empty() => Err(failed(&"no result")),
            None => Ok(results),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.runs = None; // end of input: the script returns
        let _ = self.child.wait();
    }
}

/// A peer's runs, mode by mode, and each run's ratio to the turns of ours around it.
#[derive(Default)]
struct PeerSamples {
    names: Vec<String>,
    ms: Vec<Vec<f64>>,
    ratios: Vec<Vec<f64>>,
}

impl PeerSamples {
    fn add(&mut self, results: Vec<PeerResult>, ours_ms: f64) {
        if self.names.is_empty() {
            self.names = results.iter().map(|mode| mode.name.clone()).collect();
            self.ms = vec![Vec::new(); results.len()];
            self.ratios = vec![Vec::new(); results.len()];
        }
        for (mode, result) in results.into_iter().enumerate() {
            self.ms[mode].push(result.ms);
            self.ratios[mode].push(result.ms / ours_ms);
        }
    }

    /// Each mode's name, median time and median ratio.
    fn modes(&self) -> Vec<(String, f64, f64)> {
        (0..self.names.len())
            .map(|mode| {
                (
                    self.names[mode].clone(),
                    median(self.ms[mode].clone()),
                    median(self.ratios[mode].clone()),
                )
            })
            .collect()
    }

    /// The mode with the lowest median time.
    fn fastest(&self) -> (String, f64, f64) {
        self.modes()
            .into_iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("a peer reports at least one mode")
    }
}

fn main() -> Result<(), String> {
    let args = <Args as clap::Parser>::parse();
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let event = generate_event(RECORDS, None);
    let event_path = args.out.join("event-10k.json");
    std::fs::write(&event_path, &event).map_err(|e| e.to_string())?;
    let expected_failures = RECORDS / FAIL_EVERY;
    eprintln!(
        "event: {RECORDS} records, {:.2} MB, {expected_failures} failing",
        event.len() as f64 / 1e6
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| e.to_string())?;

    let throughput = throughput(&runtime, &args, event.as_bytes(), &event_path)?;
    let references = references(event.as_bytes(), expected_failures);
    let io_measured = io_bound_rows(&runtime, &args)?;
    let kafka_peer = args.python_peer.with_file_name("powertools_kafka.py");
    eprintln!("Kafka: CPU-bound, I/O-bound, the drain through one partition");
    let kafka_cpu = kafka::cpu(&runtime, &args.out, &args.python, &kafka_peer)?;
    let kafka_io = kafka::io(&runtime, &args.out, &args.python, &kafka_peer)?;
    let kafka_drain = kafka::drain()?;
    let bootstrap = args
        .bootstrap
        .to_str()
        .ok_or("bootstrap path is not UTF-8")?;
    let startup_ms = startup_ms(bootstrap)?;
    let function = function_on_event(bootstrap, event.as_bytes())?;
    let managed = managed_instances(bootstrap)?;
    let managed_cpu = managed_cpu(bootstrap)?;
    let fifo = fifo_as_deployed(&runtime)?;
    let zips = zip_sizes(&args.lambda_dir)?;
    // Last: it points this process's AWS endpoint at a moto server of its own.
    let large = claim_check::measure(&args.python)?;

    let mut table = Table::default();
    table.throughput(&throughput, references);
    table.io_bound(&io_measured);
    table.kafka(&kafka_cpu, &kafka_io, &kafka_drain);
    table.function(&throughput, startup_ms, &function, &zips);
    table.managed_instances(&managed);
    table.managed_cpu(&managed_cpu);
    table.fifo_as_deployed(&fifo);
    table.large_messages(&large);
    let results = format!(
        "| measure | value | target | met |\n|---|---|---|---|\n{}",
        table.0
    );
    println!("{results}");
    let path = args.out.join("results.md");
    std::fs::write(&path, &results).map_err(|e| e.to_string())?;
    eprintln!("written to {}", path.display());
    Ok(())
}

/// The throughput comparison: ours (report-only and with the retry scheduler), Powertools Python
/// and TypeScript, each peer sample taken between two turns of ours.
struct Throughput {
    ours_ms: f64,
    scheduled_ms: f64,
    requests_per_resend: f64,
    /// Python's fastest mode: name, median time, median ratio to ours.
    python: (String, f64, f64),
    /// Every TypeScript mode, and the fastest.
    node_modes: Vec<(String, f64, f64)>,
    node: (String, f64, f64),
}

fn throughput(
    runtime: &tokio::runtime::Runtime,
    args: &Args,
    event: &[u8],
    event_path: &Path,
) -> Result<Throughput, String> {
    let expected_failures = RECORDS / FAIL_EVERY;
    let mut ours = Ours::new(runtime, event, expected_failures);
    let mut python = Peer::spawn(&args.python, &args.python_peer, &[event_path.as_os_str()])?;
    let mut node = Peer::spawn(
        Path::new("node"),
        &args.node_peer,
        &[event_path.as_os_str()],
    )?;
    let (mut python_samples, mut node_samples) = (PeerSamples::default(), PeerSamples::default());
    for sample in 0..PEER_WARMUP + SAMPLES {
        let counted = sample >= PEER_WARMUP;
        let before = ours.turn(counted);
        let python_run = python.run(expected_failures)?;
        let between = ours.turn(counted);
        let node_run = node.run(expected_failures)?;
        let after = ours.turn(counted);
        if counted {
            python_samples.add(python_run, (before + between) / 2.0);
            node_samples.add(node_run, (between + after) / 2.0);
        }
    }
    Ok(Throughput {
        ours_ms: median(ours.report_only_ms.clone()),
        scheduled_ms: median(ours.scheduled_ms.clone()),
        requests_per_resend: ours.requests_per_resend,
        python: python_samples.fastest(),
        node_modes: node_samples.modes(),
        node: node_samples.fastest(),
    })
}

/// The I/O-bound scenarios, ours and the peers' (their I/O scripts sit beside their throughput
/// scripts).
fn io_bound_rows(
    runtime: &tokio::runtime::Runtime,
    args: &Args,
) -> Result<Vec<(&'static io_bound::Scenario, io_bound::Measured)>, String> {
    let io_python = args.python_peer.with_file_name("powertools_io.py");
    let io_node = args.node_peer.with_file_name("powertools_io.mjs");
    let mut io_measured = Vec::new();
    for scenario in io_bound::SCENARIOS {
        eprintln!("I/O-bound {}", scenario.label);
        let measured = io_bound::measure(
            runtime,
            scenario,
            &args.out,
            &args.python,
            &io_python,
            &io_node,
        )?;
        io_measured.push((scenario, measured));
    }
    Ok(io_measured)
}

/// Start-up: exec of the release bootstrap until its first runtime API request, median of 21.
fn startup_ms(bootstrap: &str) -> Result<f64, String> {
    let mut startups = Vec::new();
    for _ in 0..21 {
        let api = RuntimeApi::bind().map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut child = api
            .spawn(bootstrap, &[], false)
            .map_err(|e| e.to_string())?;
        let elapsed = api
            .time_to_first_request(started)
            .map_err(|e| e.to_string())?;
        let _ = child.kill();
        let _ = child.wait();
        startups.push(elapsed.as_secs_f64() * 1000.0);
    }
    Ok(median(startups))
}

/// The real function on the 10,000-record event, through the runtime API as Lambda drives it.
struct FunctionRun {
    /// Median time from serving the event to receiving the answer.
    ms: f64,
    /// Peak memory after the first invocation, and its growth over the others.
    peak_kib: u64,
    growth_kib: u64,
}

/// Runs the function on the event (report-only: no SQS endpoint) `BOOTSTRAP_INVOCATIONS` times;
/// a warm container must not grow.
fn function_on_event(bootstrap: &str, event: &[u8]) -> Result<FunctionRun, String> {
    let api = RuntimeApi::bind().map_err(|e| e.to_string())?;
    let mut child = api
        .spawn(bootstrap, &[], false)
        .map_err(|e| e.to_string())?;
    let pid = child.id();
    let mut peaks_kib = Vec::new();
    let served = api
        .serve(invocations_of(event, BOOTSTRAP_INVOCATIONS), |_| {
            peaks_kib.push(
                peak_rss_kib(pid)
                    .ok_or_else(|| std::io::Error::other(format!("cannot read VmHWM of {pid}")))?,
            );
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    let ms = median(
        served
            .answers
            .iter()
            .map(|answer| answer.took.as_secs_f64() * 1000.0)
            .collect(),
    );
    let peak_kib = peaks_kib[0];
    let growth_kib = peaks_kib[BOOTSTRAP_INVOCATIONS - 1] - peak_kib;
    let response = served.answers[BOOTSTRAP_INVOCATIONS - 1].body.clone();
    let _ = child.kill();
    let _ = child.wait();
    // The function's own orders handler accepts every generated order.
    let answered: serde_json::Value =
        serde_json::from_slice(&response).map_err(|e| format!("function answer: {e}"))?;
    if answered != serde_json::json!({ "batchItemFailures": [] }) {
        return Err(format!(
            "the bootstrap did not handle the event: {answered}"
        ));
    }
    Ok(FunctionRun {
        ms,
        peak_kib,
        growth_kib,
    })
}

/// Invocations per second through one bootstrap, one at a time and with Lambda Managed Instances'
/// concurrency, in the same run.
struct Managed {
    sequential: f64,
    concurrent: f64,
    /// The most invocations the runtime API saw in flight at once in the concurrent mode.
    max_in_flight: usize,
}

/// `AWS_LAMBDA_MAX_CONCURRENCY` of the concurrent mode.
const MANAGED_CONCURRENCY: usize = 8;
/// Invocations per mode: 10-record batches whose payment calls each wait `MANAGED_LATENCY`.
const MANAGED_INVOCATIONS: usize = 160;
const MANAGED_LATENCY: &str = "20ms";

/// The FIFO consumer's cycle at batch size 1 and at the tfvars' batch size, in one run.
fn fifo_as_deployed(
    runtime: &tokio::runtime::Runtime,
) -> Result<(fifo_cycle::Drained, fifo_cycle::Drained), String> {
    let topology =
        redrive_local::topology::Topology::load(&redrive_local::topology::default_path())
            .map_err(|e| e.to_string())?;
    let deployed = topology
        .consumers
        .values()
        .find(|consumer| consumer.fifo)
        .ok_or("the tfvars have no FIFO consumer")?
        .batch_size;
    eprintln!(
        "FIFO: one group of {} messages, batch 1 and {deployed}",
        fifo_cycle::MESSAGES
    );
    Ok((
        runtime.block_on(fifo_cycle::drain(1))?,
        runtime.block_on(fifo_cycle::drain(deployed))?,
    ))
}

fn managed_instances(bootstrap: &str) -> Result<Managed, String> {
    let event = generate_event(10, None);
    let concurrency = MANAGED_CONCURRENCY.to_string();
    let latency = ("PAYMENTS_LATENCY", MANAGED_LATENCY);
    let all_done = |body: &[u8]| body == br#"{"batchItemFailures":[]}"#;
    let (sequential, _) = served_rate(
        bootstrap,
        event.as_bytes(),
        MANAGED_INVOCATIONS,
        &[latency],
        all_done,
    )?;
    let (concurrent, max_in_flight) = served_rate(
        bootstrap,
        event.as_bytes(),
        MANAGED_INVOCATIONS,
        &[
            latency,
            ("AWS_LAMBDA_MAX_CONCURRENCY", concurrency.as_str()),
        ],
        all_done,
    )?;
    Ok(Managed {
        sequential,
        concurrent,
        max_in_flight,
    })
}

/// CPU-bound batches on Managed Instances, `MANAGED_CONCURRENCY` in flight: on one thread (the
/// runtime before issue 43) and on `redrive::lambda::runtime`'s default, a worker per core of this
/// machine; invocations per second of each, taken in turns, and the cores.
struct ManagedCpu {
    one_thread: f64,
    every_core: f64,
    cores: usize,
}

/// Each CPU-bound batch: records, each of whose payment calls spends `CPU_WORK` busy; batches
/// per turn.
const CPU_RECORDS: usize = 10;
const CPU_WORK: &str = "4ms";
const CPU_INVOCATIONS: usize = 48;
/// Turns of each mode, alternated; the medians are compared.
const CPU_TURNS: usize = 5;

fn managed_cpu(bootstrap: &str) -> Result<ManagedCpu, String> {
    let event = generate_event(CPU_RECORDS, None);
    let concurrency = MANAGED_CONCURRENCY.to_string();
    let all_done = |body: &[u8]| body == br#"{"batchItemFailures":[]}"#;
    let turn = |threads: Option<&str>| -> Result<f64, String> {
        let env: Vec<(&str, &str)> = [
            ("AWS_LAMBDA_MAX_CONCURRENCY", concurrency.as_str()),
            ("PAYMENTS_WORK", CPU_WORK),
        ]
        .into_iter()
        .chain(threads.map(|threads| ("REDRIVE_WORKER_THREADS", threads)))
        .collect();
        served_rate(bootstrap, event.as_bytes(), CPU_INVOCATIONS, &env, all_done)
            .map(|(rate, _)| rate)
    };
    let (mut one, mut every) = (Vec::new(), Vec::new());
    for _ in 0..CPU_TURNS {
        one.push(turn(Some("1"))?);
        every.push(turn(None)?);
    }
    Ok(ManagedCpu {
        one_thread: median(one),
        every_core: median(every),
        cores: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
    })
}

/// Invocations per second of `invocations` copies of `event` through one bootstrap run with `env`,
/// and the most the runtime API saw in flight at once; `answered` checks every answer's body.
fn served_rate(
    bootstrap: &str,
    event: &[u8],
    invocations: usize,
    env: &[(&str, &str)],
    answered: impl Fn(&[u8]) -> bool,
) -> Result<(f64, usize), String> {
    let api = RuntimeApi::bind().map_err(|e| e.to_string())?;
    let mut child = api
        .spawn(bootstrap, env, false)
        .map_err(|e| e.to_string())?;
    let served = api.serve(invocations_of(event, invocations), |answer| {
        if answered(&answer.body) {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "{} was not handled: {}",
                answer.request_id,
                String::from_utf8_lossy(&answer.body)
            )))
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    let served = served.map_err(|e| e.to_string())?;
    Ok((
        invocations as f64 / served.elapsed.as_secs_f64(),
        served.max_in_flight,
    ))
}

/// `count` invocations of `event`, each with a request id of its own.
fn invocations_of(event: &[u8], count: usize) -> Vec<Invocation> {
    (1..=count)
        .map(|n| Invocation {
            request_id: format!("bench-{n}"),
            trace_id: format!("Root=1-00000000-{n:024x}"),
            event: event.to_vec(),
        })
        .collect()
}

/// Each function's release zip and its size.
fn zip_sizes(lambda_dir: &Path) -> Result<Vec<(String, u64)>, String> {
    Ok(std::fs::read_dir(lambda_dir)
        .map_err(|e| format!("{}: {e}", lambda_dir.display()))?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let size = std::fs::metadata(entry.path().join("bootstrap.zip"))
                .ok()?
                .len();
            Some((entry.file_name().to_string_lossy().into_owned(), size))
        })
        .collect())
}

/// The results table, a row per measure.
#[derive(Default)]
struct Table(String);

impl Table {
    fn row(&mut self, measure: &str, value: String, target: &str, met: bool) {
        let verdict = match (target, met) {
            ("-", _) => "",
            (_, true) => "yes",
            (_, false) => "**no**",
        };
        self.0
            .push_str(&format!("| {measure} | {value} | {target} | {verdict} |\n"));
    }

    fn throughput(&mut self, throughput: &Throughput, (naive_ms, raw_value_ms): (f64, f64)) {
        let Throughput {
            ours_ms,
            scheduled_ms,
            python: (python_name, python_ms, python_ratio),
            node_modes,
            node: (node_name, _, node_ratio),
            ..
        } = throughput;
        let (ours_ms, scheduled_ms, python_ms, python_ratio, node_ratio) = (
            *ours_ms,
            *scheduled_ms,
            *python_ms,
            *python_ratio,
            *node_ratio,
        );
        let mut row = |measure: &str, value: String, target: &str, met: bool| {
            self.row(measure, value, target, met)
        };
        row(
            "redrive, 10,000 records, report-only (median)",
            format!("{ours_ms:.2} ms"),
            "-",
            true,
        );
        row(
            &format!("{python_name} (median)"),
            format!("{python_ms:.1} ms"),
            "-",
            true,
        );
        for (name, ms, _) in node_modes {
            row(
                &format!("{name} (median)"),
                format!("{ms:.1} ms"),
                "-",
                true,
            );
        }
        row(
        &format!("speed-up over Powertools Python (median of {SAMPLES} runs' ratios to ours around each)"),
        format!("{python_ratio:.1}x"),
        "-",
        true,
    );
        row(
        &format!(
            "speed-up over {node_name} (faster mode; median of {SAMPLES} runs' ratios to ours around each)"
        ),
        format!("{node_ratio:.1}x"),
        ">= 8x",
        node_ratio >= 8.0,
    );
        row(
            "redrive with the retry scheduler on (100 re-sends, in-memory SQS)",
            format!("{scheduled_ms:.2} ms"),
            "-",
            true,
        );
        row(
            "naive Rust loop: serde_json into aws_lambda_events (reference)",
            format!("{naive_ms:.2} ms ({:.1}x ours)", naive_ms / ours_ms),
            "-",
            true,
        );
        row(
            "lambda_runtime's parse into a RawValue, which the functions skip (reference)",
            format!("{raw_value_ms:.2} ms"),
            "-",
            true,
        );
    }

    fn io_bound(&mut self, io_measured: &[(&io_bound::Scenario, io_bound::Measured)]) {
        let mut row = |measure: &str, value: String, target: &str, met: bool| {
            self.row(measure, value, target, met)
        };
        for (scenario, measured) in io_measured {
            let floor = measured.floor_ms(scenario);
            let ours = measured.ours_ms;
            row(
            &format!(
                "I/O {}: redrive, REDRIVE_CONCURRENCY={} (median)",
                scenario.label, scenario.concurrency
            ),
            format!(
                "{ours:.1} ms = {:.2}x the floor {floor:.1} ms (waits + {:.2} ms CPU; a lone downstream call of {} ms takes {:.2} ms)",
                ours / floor,
                measured.cpu_ms,
                scenario.latency.as_millis(),
                measured.lone_call_ms
            ),
            // FIFO's target is against the peers alone.
            if scenario.fifo_groups.is_some() { "-" } else { "<= 1.1x floor" },
            ours <= 1.1 * floor,
        );
            for (name, peer_ms) in &measured.peers {
                let (target, met) = match scenario.fifo_groups {
                    Some(_) => (">= 8x", peer_ms / ours >= 8.0),
                    None if name.contains("TypeScript") => ("redrive no slower", ours <= *peer_ms),
                    None => ("-", true),
                };
                row(
                    &format!("I/O {}: {name} (median)", scenario.label),
                    format!("{peer_ms:.1} ms ({:.2}x redrive)", peer_ms / ours),
                    target,
                    met,
                );
            }
        }
    }

    fn kafka(&mut self, cpu: &kafka::Cpu, io: &kafka::Io, drain: &kafka::Drain) {
        let (python_name, python_ms, python_ratio) = &cpu.python;
        self.row(
            "Kafka, 10,000 records in 4 partitions: redrive, 1% to the retry lane (median)",
            format!("{:.2} ms", cpu.ours_ms),
            "-",
            true,
        );
        self.row(
            &format!("Kafka: {python_name}, 1% reported (median)"),
            format!("{python_ms:.1} ms"),
            "-",
            true,
        );
        self.row(
            "Kafka: speed-up over Powertools Python (median of runs' ratios to ours around each)",
            format!("{python_ratio:.1}x"),
            "-",
            true,
        );
        let floor = io.floor_ms();
        self.row(
            &format!("I/O {}: redrive, partitions side by side (median)", kafka::Io::label()),
            format!(
                "{:.1} ms = {:.2}x the floor {floor:.1} ms (a partition's waits in turn + {:.2} ms CPU)",
                io.ours_ms,
                io.ours_ms / floor,
                io.cpu_ms
            ),
            "-",
            true,
        );
        for (name, peer_ms) in &io.peers {
            let kept = if name.contains("Async") {
                "order not kept"
            } else {
                "in turn"
            };
            self.row(
                &format!("I/O {}: {name}, {kept} (median)", kafka::Io::label()),
                format!("{peer_ms:.1} ms ({:.2}x redrive)", peer_ms / io.ours_ms),
                "-",
                true,
            );
        }
        self.row(
            &kafka::Drain::label(),
            format!(
                "{:.0} with the retry lane ({} invocations, {} records to the lane) / {:.0} without, the partition given back and retried ({} invocations): {:.1}x",
                drain.with_lane,
                drain.invocations.0,
                drain.to_lane,
                drain.without_lane,
                drain.invocations.1,
                drain.with_lane / drain.without_lane
            ),
            "-",
            true,
        );
    }

    fn managed_instances(&mut self, managed: &Managed) {
        let measure = format!(
            "Managed Instances: invocations/s through one bootstrap, {MANAGED_INVOCATIONS} 10-record batches, payment calls of {MANAGED_LATENCY}"
        );
        self.row(
            &format!("{measure}, one at a time"),
            format!("{:.1}/s", managed.sequential),
            "-",
            true,
        );
        let ratio = managed.concurrent / managed.sequential;
        self.row(
            &format!("{measure}, AWS_LAMBDA_MAX_CONCURRENCY={MANAGED_CONCURRENCY}"),
            format!(
                "{:.1}/s = {ratio:.2}x one at a time ({} in flight at most)",
                managed.concurrent, managed.max_in_flight
            ),
            &format!(
                ">= {}x, {MANAGED_CONCURRENCY} in flight",
                MANAGED_CONCURRENCY / 2
            ),
            ratio >= (MANAGED_CONCURRENCY / 2) as f64
                && managed.max_in_flight == MANAGED_CONCURRENCY,
        );
    }

    fn managed_cpu(&mut self, cpu: &ManagedCpu) {
        let measure = format!(
            "Managed Instances: invocations/s through one bootstrap, {CPU_RECORDS}-record batches whose payment calls spend {CPU_WORK} of CPU each, AWS_LAMBDA_MAX_CONCURRENCY={MANAGED_CONCURRENCY}, median of {CPU_TURNS} alternated turns of {CPU_INVOCATIONS}"
        );
        self.row(
            &format!("{measure}, one thread (REDRIVE_WORKER_THREADS=1, the runtime before)"),
            format!("{:.1}/s", cpu.one_thread),
            "-",
            true,
        );
        let ratio = cpu.every_core / cpu.one_thread;
        let goal = if cpu.cores >= 2 { 1.7 } else { 0.95 };
        self.row(
            &format!("{measure}, a worker per core ({} here)", cpu.cores),
            format!("{:.1}/s = {ratio:.2}x one thread", cpu.every_core),
            &format!(">= {goal}x on {} cores", cpu.cores),
            ratio >= goal,
        );
    }

    fn large_messages(&mut self, large: &claim_check::Measured) {
        let measure = format!(
            "large messages: a batch of {} Extended Client pointers to orders of {} KiB in S3 (moto on loopback, the real S3 client) against {} ordinary orders, one processor with a payload bucket",
            claim_check::RECORDS,
            claim_check::BODY_BYTES / 1024,
            claim_check::RECORDS
        );
        self.row(
            &format!("{measure}: S3 calls per batch"),
            format!(
                "{:.1} for the pointers ({:.2} per body), {:.1} for the ordinary batch",
                large.calls_large,
                large.calls_large / claim_check::RECORDS as f64,
                large.calls_ordinary
            ),
            "one GET per body, none for ordinary records",
            large.calls_large == claim_check::RECORDS as f64 && large.calls_ordinary == 0.0,
        );
        self.row(
            &format!("{measure}: time per batch"),
            format!(
                "{:.2} ms against {:.3} ms: the reads add {:.2} ms ({:.2} ms per body, fetched {} at once)",
                large.large_ms,
                large.ordinary_ms,
                large.large_ms - large.ordinary_ms,
                (large.large_ms - large.ordinary_ms) / claim_check::RECORDS as f64,
                claim_check::RECORDS
            ),
            "-",
            true,
        );
    }

    fn fifo_as_deployed(&mut self, (one, deployed): &(fifo_cycle::Drained, fifo_cycle::Drained)) {
        let measure = |drained: &fifo_cycle::Drained| {
            format!(
                "FIFO as deployed: one group of {} messages through receive -> invoke -> delete cycles of {:?} fixed cost, payment calls of {:?}, batch size {}",
                fifo_cycle::MESSAGES,
                fifo_cycle::CYCLE,
                fifo_cycle::HANDLER,
                drained.batch_size
            )
        };
        let value = |drained: &fifo_cycle::Drained| {
            format!(
                "{:.1} messages/s; {:.2} invocations and {:.2} SQS requests per message; {} ledger calls",
                drained.messages_per_second,
                drained.invocations_per_message,
                drained.requests_per_message,
                drained.ledger_calls
            )
        };
        self.row(&measure(one), value(one), "-", true);
        let speedup = deployed.messages_per_second / one.messages_per_second;
        self.row(
            &format!("{} (the tfvars')", measure(deployed)),
            format!("{} = {speedup:.2}x batch size 1", value(deployed)),
            "<= 0.15 invocations/message, no ledger call",
            deployed.invocations_per_message <= 0.15 && deployed.ledger_calls == 0,
        );
    }

    fn function(
        &mut self,
        throughput: &Throughput,
        startup_ms: f64,
        function: &FunctionRun,
        zips: &[(String, u64)],
    ) {
        let requests_per_resend = throughput.requests_per_resend;
        let FunctionRun {
            ms: bootstrap_ms,
            peak_kib,
            growth_kib,
        } = *function;
        let mut row = |measure: &str, value: String, target: &str, met: bool| {
            self.row(measure, value, target, met)
        };
        row(
        &format!("the sqs-consumer bootstrap through a local runtime API, event served to answer received (median of {BOOTSTRAP_INVOCATIONS})"),
        format!("{bootstrap_ms:.2} ms"),
        "-",
        true,
    );
        row(
            "SQS requests per re-sent message",
            format!("{requests_per_resend:.2}"),
            "<= 0.1, no deletes",
            requests_per_resend <= 0.1,
        );
        row(
            "start-up: exec to first runtime API request (median of 21)",
            format!("{startup_ms:.2} ms"),
            "<= 10 ms",
            startup_ms <= 10.0,
        );
        row(
            "peak memory of the bootstrap on the 10,000-record event",
            format!("{:.1} MB", peak_kib as f64 / 1024.0),
            "<= 64 MB",
            peak_kib <= 64 * 1024,
        );
        row(
            &format!(
                "growth of that peak over {} more invocations",
                BOOTSTRAP_INVOCATIONS - 1
            ),
            format!("{:.1} MB", growth_kib as f64 / 1024.0),
            "-",
            true,
        );
        for (name, size) in zips {
            // The SQS consumer carries the DynamoDB client (the idempotency store and the FIFO
            // attempt ledger) and the S3 client (large messages): docs/performance.md.
            let (target, limit) = match name.as_str() {
                "sqs-consumer" => ("<= 3.5 MB (with the DynamoDB and S3 clients)", 3_500_000),
                _ => ("<= 2.5 MB", 2_500_000),
            };
            row(
                &format!("release arm64 zip: {name}"),
                format!("{:.2} MB", *size as f64 / 1e6),
                target,
                *size <= limit,
            );
        }
    }
}
