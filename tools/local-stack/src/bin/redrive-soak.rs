//! `make soak`: the full fault-injection soak. 100,000 messages per seed on the in-memory SQS and
//! 2,000 on moto, each on a standard and on a FIFO queue, with records handled concurrently; prints
//! the invariant figures and fails if the invariant breaks on any seed (on FIFO, the invariant
//! includes effects in each group's order). Then, per seed and with a tenth of the messages in
//! memory: a downstream down for three hours, on a standard and on a FIFO queue; a FIFO run with
//! REDRIVE_FIFO_ON_DEAD_LETTER=hold, whose groups keep their order end to end; two source queues
//! sharing one DLQ. Every run has AWS's faults injected: failed, refused, late and stalled calls,
//! throttling, idempotency store failures, whole batches failed or timed out, throttled
//! invocations and batches delivered to two containers at once.
//!
//! Per seed too, on moto: a DynamoDB stream's changes through the stand-in for Lambda's mapping,
//! with outages, flaky changes, crashed invocations and poison changes redriven; and a Kafka topic
//! on `tansu` with its retry lane and DLQ on moto, with outages, flaky orders, crashed and short
//! invocations, poison orders held in the lane or redriven from the DLQ. And in memory, 100
//! tenants on a fair queue, one whose own downstream fails for 30 minutes, with a breaker per
//! tenant, with the shared breaker alone and without the fault; and a downstream down for two
//! hours, the defer loop against the paused intake (`--intake`).
//!
//! Usage: redrive-soak [--memory N] [--moto N] [--streams N] [--kafka N] [--tenants RATE]
//! [--intake RATE] [--seeds 1,2,3]
//! [--scenario TEXT] (`--help` says more)
use std::process::ExitCode;

use redrive_local::soak::{run_in_memory, run_on_localstack, run_on_moto, SoakConfig, SoakReport};
use redrive_local::Comparison;

/// The full fault-injection soak (`make soak`).
#[derive(clap::Parser)]
#[command(name = "redrive-soak")]
struct Args {
    /// Messages per seed on the in-memory SQS (0 skips those runs).
    #[arg(long, default_value_t = 100_000)]
    memory: usize,
    /// Messages per seed on moto (0 skips those runs).
    #[arg(long, default_value_t = 2_000)]
    moto: usize,
    /// Messages per seed on LocalStack, when `tools/with-local-aws` started it (0 skips those runs).
    #[arg(long, default_value_t = 2_000)]
    localstack: usize,
    /// Changes per seed on a DynamoDB stream on moto (0 skips those runs).
    #[arg(long, default_value_t = 2_000)]
    streams: usize,
    /// Orders per seed on a Kafka topic on `tansu` (built by `make`), the lane on moto (0 skips
    /// those runs).
    #[arg(long, default_value_t = 2_000)]
    kafka: usize,
    /// Messages a second of the tenant soak (100 tenants on a fair queue, one failing for 30
    /// minutes; in memory; 0 skips those runs).
    #[arg(long, default_value_t = 100)]
    tenants: u32,
    /// Messages a second of the intake soak (a two-hour outage in memory, the defer loop against
    /// the paused intake; 0 skips those runs).
    #[arg(long, default_value_t = 10.0)]
    intake: f64,
    /// Seeds, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 3])]
    seeds: Vec<u64>,
    /// Only the in-memory scenarios (a tenth of `--memory`) whose name contains this text, no
    /// other run: one scenario over many seeds, for a break that a rerun does not replay (the
    /// runs share one machine's timing, not only their seed).
    #[arg(long)]
    scenario: Option<String>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    // Panics are one of the injected faults (`bug on <id>`); the processor catches them, so keep
    // them quiet. Any other panic is a defect: say where, or the run would end with a bare 101.
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let injected = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|message| message.starts_with("bug on "));
        if !injected {
            report_panic(info);
        }
    }));
    let mut broken = false;
    let every_run = args.scenario.is_none();
    for &seed in &args.seeds {
        if !every_run {
            break;
        }
        // Each run on a standard queue, then on a FIFO queue whose messages are dealt round groups.
        for groups in [None, Some(8)] {
            let on = |config: SoakConfig| match groups {
                Some(groups) => config.fifo(groups),
                None => config,
            };
            let kind = groups.map_or("standard".to_owned(), |g| format!("FIFO, {g} groups"));
            if args.memory > 0 {
                println!(
                    "== in-memory SQS, {kind}, {} messages, seed {seed}",
                    args.memory
                );
                let Some(holds) =
                    held(run_in_memory(&on(SoakConfig::memory(args.memory, seed))).await)
                else {
                    return ExitCode::FAILURE;
                };
                broken |= !holds;
            }
            if args.moto > 0 {
                println!(
                    "== moto through the SDK, {kind}, {} messages, seed {seed}",
                    args.moto
                );
                let prefix = format!("soak-{}-{seed}", std::process::id());
                // On FIFO the idempotency keys and the attempt ledger share moto's DynamoDB table.
                let config = match groups {
                    Some(_) => on(SoakConfig::moto(args.moto, seed))
                        .dynamodb(format!("{prefix}-idempotency")),
                    None => on(SoakConfig::moto(args.moto, seed)),
                };
                let Some(holds) = held(run_on_moto(&prefix, &config).await) else {
                    return ExitCode::FAILURE;
                };
                broken |= !holds;
            }
            // LocalStack, the second implementation (its stores in memory; DynamoDB is moto's part).
            // As on moto, the order is counted, not held: LocalStack hands out a group's records
            // given back while their head is in flight (docs/reliability.md, the conformance table).
            let localstack = std::env::var("LOCALSTACK_ENDPOINT_URL");
            if args.localstack > 0 && localstack.is_err() {
                println!(
                    "== LocalStack, {kind}, seed {seed}: SKIPPED (LocalStack is not installed: \
                     `make localstack` needs Python 3.13; `tools/with-local-aws` starts it)"
                );
            }
            if let (true, Ok(endpoint)) = (args.localstack > 0, localstack) {
                println!(
                    "== LocalStack through the SDK, {kind}, {} messages, seed {seed}",
                    args.localstack
                );
                let prefix = format!("soak-ls-{}-{seed}", std::process::id());
                let config = on(SoakConfig::moto(args.localstack, seed));
                let Some(holds) = held(run_on_localstack(&endpoint, &prefix, &config).await) else {
                    return ExitCode::FAILURE;
                };
                broken |= !holds;
            }
        }
    }
    for &seed in &args.seeds {
        if args.streams == 0 || !every_run {
            break;
        }
        println!(
            "== a DynamoDB stream on moto, {} changes of {} items, seed {seed}",
            args.streams,
            args.streams / 10
        );
        let config = redrive_local::stream_soak::StreamSoakConfig {
            changes: args.streams,
            items: (args.streams / 10).max(1),
            seed,
        };
        let prefix = format!("soak-streams-{}-{seed}", std::process::id());
        match redrive_local::stream_soak::run_on_moto(&prefix, &config).await {
            Ok(report) => {
                println!("{report}\n");
                broken |= !report.holds();
            }
            Err(error) => {
                eprintln!("redrive-soak: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    for &seed in &args.seeds {
        if args.kafka == 0 || !every_run {
            break;
        }
        let customers = (args.kafka / 3).max(1);
        println!(
            "== a Kafka topic on tansu, 3 partitions, {} orders of {customers} customers, seed {seed}",
            args.kafka
        );
        let config = redrive_local::kafka_soak::KafkaSoakConfig {
            orders: args.kafka,
            customers,
            partitions: 3,
            seed,
        };
        let prefix = format!("soak-kafka-{}-{seed}", std::process::id());
        match redrive_local::kafka_soak::run(&prefix, &config).await {
            Ok(report) => {
                println!("{report}\n");
                broken |= !report.holds();
            }
            Err(error) => {
                eprintln!("redrive-soak: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    for &seed in &args.seeds {
        if args.tenants == 0 || !every_run {
            break;
        }
        println!(
            "== 100 tenants on a fair queue in memory, {} messages/s, one failing for 30 minutes, seed {seed}",
            args.tenants
        );
        let config = redrive_local::tenant_soak::TenantSoakConfig::new(args.tenants, seed);
        match compared(redrive_local::tenant_soak::run_three(&config).await) {
            Some(held) => broken |= !held,
            None => return ExitCode::FAILURE,
        }
    }
    for &seed in &args.seeds {
        if args.intake <= 0.0 || !every_run {
            break;
        }
        println!(
            "== a two-hour outage in memory, {} messages/s, the defer loop against the paused intake, seed {seed}",
            args.intake
        );
        let config = redrive_local::intake_soak::IntakeSoakConfig::new(args.intake, seed);
        match compared(redrive_local::intake_soak::run_both(&config).await) {
            Some(held) => broken |= !held,
            None => return ExitCode::FAILURE,
        }
    }
    // Per seed, a tenth of the messages: the three-hour outage (standard and FIFO), a FIFO queue
    // whose heads hold their groups, two sources sharing one DLQ, and large messages.
    for &seed in &args.seeds {
        let messages = args.memory / 10;
        if messages == 0 {
            break;
        }
        let runs = [
            ("a three-hour outage", SoakConfig::outage(messages, seed)),
            (
                "FIFO, 8 groups, a three-hour outage",
                SoakConfig::fifo_outage(messages, seed),
            ),
            (
                "FIFO, 8 groups, REDRIVE_FIFO_ON_DEAD_LETTER=hold, held groups in the retry lane",
                SoakConfig::memory(messages, seed).fifo(8).holding(),
            ),
            (
                "two sources sharing one DLQ",
                SoakConfig {
                    second_source: true,
                    ..SoakConfig::memory(messages, seed)
                },
            ),
            (
                "every 5th message near SQS's size limit (at most 2,000 messages), through a \
                 payload bucket failing 5% of its calls",
                SoakConfig::memory(messages.min(2_000), seed).large(5),
            ),
            (
                "FIFO, 8 groups, every 5th message near SQS's size limit (at most 2,000)",
                SoakConfig::memory(messages.min(2_000), seed)
                    .fifo(8)
                    .large(5),
            ),
            (
                "FIFO, 8 groups, hold in the retry lane, a held group's backlog past a FIFO scan \
                 window of 100 (the other groups' longest deliverable wait stays a retry schedule)",
                SoakConfig {
                    fifo_scan_window: 100,
                    ..SoakConfig::memory(messages, seed).fifo(8).holding()
                },
            ),
            (
                "the same, held in place without a lane (what the lane removes: the other \
                 groups wait behind the held group's backlog until its release)",
                SoakConfig {
                    fifo_scan_window: 100,
                    ..SoakConfig::memory(messages, seed)
                        .fifo(8)
                        .holding()
                        .in_place()
                },
            ),
        ];
        for (kind, config) in runs {
            if args
                .scenario
                .as_deref()
                .is_some_and(|scenario| !kind.contains(scenario))
            {
                continue;
            }
            println!("== in-memory SQS, {kind}, {messages} messages, seed {seed}");
            match run_in_memory(&config).await {
                Ok(report) => {
                    println!("{report}\n");
                    broken |= !report.holds();
                    // An outage's messages all come through after it, and its Deferred alarm
                    // fired; whether the alarms are OK in the last minute is printed, not
                    // required: the redrive's burst meets the injected store faults (1%), whose
                    // transient errors pass the TransientErrors threshold then.
                    if config.outage.is_some() {
                        let (deferred, _, _) = report.alarms();
                        broken |= report.processed != messages || deferred == 0;
                    }
                }
                Err(error) => {
                    eprintln!("redrive-soak: {error}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    if broken {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints a comparison's table and each promise it broke, and says whether it held; `None` when
/// it could not run (said on stderr).
fn compared(run: Result<impl Comparison, redrive::PortError>) -> Option<bool> {
    match run {
        Ok(runs) => {
            println!("{runs}");
            let broken = runs.broken();
            for line in &broken {
                println!("broken: {line}");
            }
            Some(broken.is_empty())
        }
        Err(error) => {
            eprintln!("redrive-soak: {error}");
            None
        }
    }
}

/// Prints a run's report and says whether its invariant holds; `None` when the run could not go on
/// (said on stderr).
fn held(run: Result<SoakReport, impl std::fmt::Display>) -> Option<bool> {
    match run {
        Ok(report) => {
            println!("{report}\n");
            Some(report.holds())
        }
        Err(error) => {
            eprintln!("redrive-soak: {error}");
            None
        }
    }
}
