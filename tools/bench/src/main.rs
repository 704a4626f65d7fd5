//! `make bench`: one run, one table. Throughput on a 10,000-record SQS event against Powertools for
//! AWS Lambda (Python and TypeScript) doing the same work, side by side; start-up of the release
//! `bootstrap`; its peak memory on that event; SQS requests per re-sent message; zip sizes.
mod runtime_api;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use redrive::port::RecordingQueue;
use redrive::{
    Message, Processor, ProcessorConfig, RecordError, RecordHandler, RetryPolicy, SqsEvent,
};
use serde::Deserialize;

const RECORDS: usize = 10_000;
/// Every 100th order fails: 1%.
const FAIL_EVERY: usize = 100;
const FAR_FUTURE_MS: u64 = u64::MAX / 2;
/// Rounds of the throughput comparison, each ours then every peer. The machine's speed drifts by
/// up to 2x within minutes: a ratio is taken within a round, and the table gives the median round.
const ROUNDS: usize = 3;
/// Runs of each Rust variant per round; the first `RUST_WARMUP` are not counted.
const RUST_RUNS: usize = 40;
const RUST_WARMUP: usize = 8;
/// Invocations of the release bootstrap with the 10,000-record event.
const BOOTSTRAP_INVOCATIONS: usize = 21;

struct Args {
    out: PathBuf,
    bootstrap: PathBuf,
    lambda_dir: PathBuf,
    python: PathBuf,
    node_peer: PathBuf,
    python_peer: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut get = |flag: &str| -> Result<PathBuf, String> {
        match (args.next(), args.next()) {
            (Some(name), Some(value)) if name == flag => Ok(PathBuf::from(value)),
            _ => Err(format!("usage: redrive-bench --out DIR --bootstrap PATH --lambda-dir DIR --python PATH --node-peer FILE --python-peer FILE (expected {flag})")),
        }
    };
    Ok(Args {
        out: get("--out")?,
        bootstrap: get("--bootstrap")?,
        lambda_dir: get("--lambda-dir")?,
        python: get("--python")?,
        node_peer: get("--node-peer")?,
        python_peer: get("--python-peer")?,
    })
}

/// An SQS event as Lambda delivers it: `records` orders, every `FAIL_EVERY`th marked to fail.
fn generate_event(records: usize) -> String {
    let records: Vec<serde_json::Value> = (0..records)
        .map(|i| {
            let status = if i % FAIL_EVERY == FAIL_EVERY - 1 { "fail" } else { "ok" };
            let body = format!(
                r#"{{"orderId":"o-{i:06}","customerId":"c-{}","status":"{status}","amount":{}.{:02},"currency":"EUR"}}"#,
                i % 977,
                10 + i % 90,
                i % 100
            );
            serde_json::json!({
                "messageId": format!("{:08x}-1f2e-4d3c-8b7a-{i:012}", i * 7919),
                "receiptHandle": format!("AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a{i:08}/AE6QY/ZpGgmyLqZ4uAQIlR2BJu0uVnJ5fTWf5Y0lzNVvsG+Jyc=="),
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1763790000000",
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": "1763790000123"
                },
                "messageAttributes": {},
                "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

/// The same work every peer does: parse the body as JSON, check a field, fail 1%.
struct CheckStatus;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // parsed in full, as the peers do; only `status` is read
struct Order<'a> {
    order_id: &'a str,
    customer_id: &'a str,
    status: &'a str,
    amount: f64,
    currency: &'a str,
}

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
    let config = ProcessorConfig {
        dlq_url: dlq.map(str::to_owned),
        source_queue_url: Some("https://sqs.us-east-1.amazonaws.com/123456789012/orders".into()),
        retry: RetryPolicy::default(),
        deadline_margin: Duration::from_secs(2),
    };
    Processor::new(RecordingQueue::default(), config)
}

/// Event bytes in, response bytes out.
fn run_once(
    runtime: &tokio::runtime::Runtime,
    processor: &Processor<RecordingQueue>,
    event: &[u8],
) -> (Duration, usize, redrive::BatchReport) {
    let started = Instant::now();
    let mut decoded = String::new();
    let parsed = SqsEvent::from_slice_in(event, &mut decoded).expect("valid event");
    let processed = runtime
        .block_on(processor.process(&CheckStatus, &parsed.records, FAR_FUTURE_MS))
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

/// One round's Rust measures (medians of its runs) and the peers' results measured right after.
struct Round {
    rust: RustRound,
    python: Vec<PeerResult>,
    node: Vec<PeerResult>,
}

struct RustRound {
    ours_ms: f64,
    scheduled_ms: f64,
    naive_ms: f64,
    raw_value_ms: f64,
    requests_per_resend: f64,
}

/// Ours report-only (what Powertools does) and ours with the retry scheduler on, interleaved run
/// by run so that both see the same machine; then the naive loop and lambda_runtime's RawValue
/// parse, interleaved in a loop of their own. The references allocate an owned copy of every
/// record and free it: run between ours, their freed heap went back to the kernel and each of our
/// runs paid its page faults again, which a function handling one event after another does not
/// (nor do the peers, each in a process of its own).
fn rust_round(
    runtime: &tokio::runtime::Runtime,
    event: &[u8],
    expected_failures: usize,
) -> RustRound {
    let report_only = processor(None);
    let (mut ours, mut scheduled, mut naive, mut raw_value) = (vec![], vec![], vec![], vec![]);
    let mut requests_per_resend = 0.0;
    let ms = |elapsed: Duration| elapsed.as_secs_f64() * 1000.0;
    for run in 0..RUST_RUNS {
        let (elapsed, failures, _) = run_once(runtime, &report_only, event);
        assert_eq!(
            failures, expected_failures,
            "the partial batch response lists the failing 1%"
        );
        let scheduler = processor(Some(
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq",
        ));
        let (with_scheduler, failures, report) = run_once(runtime, &scheduler, event);
        assert_eq!(
            (failures, report.retried as usize),
            (0, expected_failures),
            "every failure re-sent, none reported"
        );
        requests_per_resend = f64::from(report.sqs_requests) / f64::from(report.retried);
        if run >= RUST_WARMUP {
            ours.push(ms(elapsed));
            scheduled.push(ms(with_scheduler));
        }
    }
    for run in 0..RUST_RUNS {
        let (naive_elapsed, failures) = naive_once(event);
        assert_eq!(failures, expected_failures, "the naive loop agrees");
        let raw_value_elapsed = raw_value_once(event);
        if run >= RUST_WARMUP {
            naive.push(ms(naive_elapsed));
            raw_value.push(ms(raw_value_elapsed));
        }
    }
    RustRound {
        ours_ms: median(ours),
        scheduled_ms: median(scheduled),
        naive_ms: median(naive),
        raw_value_ms: median(raw_value),
        requests_per_resend,
    }
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[derive(Deserialize)]
struct PeerResult {
    name: String,
    median_ms: f64,
    failures: usize,
}

fn run_peer(program: &Path, script: &Path, event: &Path) -> Result<Vec<PeerResult>, String> {
    let output = Command::new(program)
        .arg(script)
        .arg(event)
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} {} failed: {}",
            program.display(),
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{}: unreadable result: {e}", script.display()))
}

fn main() -> Result<(), String> {
    let args = parse_args()?;
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let event = generate_event(RECORDS);
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
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let rust = rust_round(&runtime, event.as_bytes(), expected_failures);
        // Peers, same event, same work, same machine, right after.
        let python = run_peer(&args.python, &args.python_peer, &event_path)?;
        let node = run_peer(Path::new("node"), &args.node_peer, &event_path)?;
        for peer in python.iter().chain(&node) {
            if peer.failures != expected_failures {
                return Err(format!(
                    "{} reported {} failures, expected {expected_failures}",
                    peer.name, peer.failures
                ));
            }
        }
        rounds.push(Round { rust, python, node });
    }
    let over_rounds =
        |measure: &dyn Fn(&Round) -> f64| median(rounds.iter().map(measure).collect());
    let ours_ms = over_rounds(&|round| round.rust.ours_ms);
    let scheduled_ms = over_rounds(&|round| round.rust.scheduled_ms);
    let naive_ms = over_rounds(&|round| round.rust.naive_ms);
    let raw_value_ms = over_rounds(&|round| round.rust.raw_value_ms);
    let requests_per_resend = over_rounds(&|round| round.rust.requests_per_resend);
    let python_name = rounds[0].python[0].name.clone();
    let python_ms = over_rounds(&|round| round.python[0].median_ms);
    let python_ratio = over_rounds(&|round| round.python[0].median_ms / round.rust.ours_ms);
    // TypeScript's faster mode: the one with the lower median over the rounds.
    let node: Vec<(String, f64)> = (0..rounds[0].node.len())
        .map(|mode| {
            let name = rounds[0].node[mode].name.clone();
            (name, over_rounds(&|round| round.node[mode].median_ms))
        })
        .collect();
    let node_best = (0..node.len())
        .min_by(|&a, &b| node[a].1.total_cmp(&node[b].1))
        .ok_or("no TypeScript result")?;
    let node_ratio = over_rounds(&|round| round.node[node_best].median_ms / round.rust.ours_ms);

    // Start-up: exec of the release bootstrap until its first runtime API request.
    let bootstrap = args
        .bootstrap
        .to_str()
        .ok_or("bootstrap path is not UTF-8")?;
    let mut startups = Vec::new();
    for _ in 0..21 {
        let api = runtime_api::RuntimeApi::bind().map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut child = api.spawn(bootstrap, &[]).map_err(|e| e.to_string())?;
        let elapsed = api
            .time_to_first_request(started)
            .map_err(|e| e.to_string())?;
        let _ = child.kill();
        let _ = child.wait();
        startups.push(elapsed.as_secs_f64() * 1000.0);
    }
    let startup_ms = median(startups);

    // The real function on the 10,000-record event (report-only: no SQS endpoint), through the
    // runtime API as Lambda drives it: time per invocation, peak memory after the first and
    // after the last (a warm container must not grow).
    let api = runtime_api::RuntimeApi::bind().map_err(|e| e.to_string())?;
    let mut child = api.spawn(bootstrap, &[]).map_err(|e| e.to_string())?;
    let invocations = api
        .invoke(child.id(), event.as_bytes(), BOOTSTRAP_INVOCATIONS)
        .map_err(|e| e.to_string())?;
    let bootstrap_ms = median(
        invocations
            .times
            .iter()
            .map(|time| time.as_secs_f64() * 1000.0)
            .collect(),
    );
    let peak_kib = invocations.peaks_kib[0];
    let growth_kib = invocations.peaks_kib[BOOTSTRAP_INVOCATIONS - 1] - peak_kib;
    let response = invocations.last_answer;
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

    let zips: Vec<(String, u64)> = std::fs::read_dir(&args.lambda_dir)
        .map_err(|e| format!("{}: {e}", args.lambda_dir.display()))?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let size = std::fs::metadata(entry.path().join("bootstrap.zip"))
                .ok()?
                .len();
            Some((entry.file_name().to_string_lossy().into_owned(), size))
        })
        .collect();

    let mut table = String::new();
    let mut row = |measure: &str, value: String, target: &str, met: bool| {
        let verdict = match (target, met) {
            ("-", _) => "",
            (_, true) => "yes",
            (_, false) => "**no**",
        };
        table.push_str(&format!("| {measure} | {value} | {target} | {verdict} |\n"));
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
    for (name, ms) in &node {
        row(
            &format!("{name} (median)"),
            format!("{ms:.1} ms"),
            "-",
            true,
        );
    }
    row(
        &format!("speed-up over Powertools Python (median of {ROUNDS} rounds' ratios)"),
        format!("{python_ratio:.1}x"),
        ">= 25x",
        python_ratio >= 25.0,
    );
    row(
        &format!(
            "speed-up over {} (faster mode; median of {ROUNDS} rounds' ratios)",
            node[node_best].0
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
    for (name, size) in &zips {
        row(
            &format!("release arm64 zip: {name}"),
            format!("{:.2} MB", *size as f64 / 1e6),
            "<= 2.5 MB",
            *size <= 2_500_000,
        );
    }
    let results = format!("| measure | value | target | met |\n|---|---|---|---|\n{table}");
    println!("{results}");
    let path = args.out.join("results.md");
    std::fs::write(&path, &results).map_err(|e| e.to_string())?;
    eprintln!("written to {}", path.display());
    Ok(())
}
