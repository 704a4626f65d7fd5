//! `make bench`: one run, one table. Throughput on a 10,000-record SQS event against Powertools for
//! AWS Lambda (Python and TypeScript) doing the same work, side by side; start-up of the release
//! `bootstrap`; its peak memory on that event; SQS requests per re-sent message; zip sizes.
mod claim_check;
mod console_groups;
mod event;
mod fifo_cycle;
mod io_bound;
mod kafka;
mod peers;
mod runs;
mod table;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use redrive::testing::RecordingQueue;
use redrive::{Processor, ProcessorConfig, RecordHandler, RetryPolicy, SqsEvent};
use redrive_runtime_api::{peak_rss_kib, Invocation, RuntimeApi};
use serde::Deserialize;

use event::{generate_event, CheckStatus, Order, FAIL_EVERY};
pub(crate) use peers::{Peer, PeerSamples};
pub(crate) use runs::*;
use table::Table;

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
    /// LocalStack's Python (`make localstack`), for the console's grouping row.
    #[arg(long, default_value = ".venv-localstack/bin/python")]
    localstack_python: PathBuf,
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
    eprintln!(
        "the console's grouping of {} dead letters (LocalStack)",
        console_groups::MESSAGES
    );
    let grouping = console_groups::measure(&args.localstack_python, &args.python)?;
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
    table.console_groups(grouping.as_ref());
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
