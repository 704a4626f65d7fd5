//! The conformance table: every documented SQS behaviour of `redrive_local::conformance` on the
//! model, moto and LocalStack. The model must agree with AWS's documentation everywhere; moto's and
//! LocalStack's deviations are recorded below, so that a change in either (a fix, a regression)
//! fails here until the table says so.
use std::sync::Arc;

use redrive::testing::ManualClock;
use redrive_local::conformance::{run_all, Server, Verdict, SCENARIOS};
use redrive_local::memory::MemorySqs;

/// The deviations seen, per implementation and scenario: what it does instead.
const KNOWN_DEVIATIONS: &[(&str, &str)] = &[
    (MOTO, "FIFO DLQ resets the enqueue time"),
    (MOTO, "FIFO group returns in order"),
    (MOTO, "moved past maxReceiveCount"),
    (MOTO, "change on a message not in flight"),
    (MOTO, "FIFO sequence numbers grow"),
    (MOTO, "FIFO deduplication interval"),
    (MOTO, "empty body and refused characters"),
    (LOCALSTACK, "standard DLQ keeps the enqueue time"),
    (LOCALSTACK, "visibility within 12 hours of the receive"),
    (LOCALSTACK, "change on a message not in flight"),
    (LOCALSTACK, "FIFO followers given back wait for their head"),
];

const MODEL: &str = "model (MemorySqs)";
const MOTO: &str = "moto 5.2.5";
const LOCALSTACK: &str = "LocalStack 2026.3.0";

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    std::process::exit(runtime.block_on(conformance()));
}

async fn conformance() -> i32 {
    let prefix = format!("conf{}", std::process::id());
    let model = Arc::new(MemorySqs::new(Arc::new(ManualClock::at(1_763_790_000_000))));
    let moto = std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .map(|endpoint| Arc::new(Server::at(&endpoint)));
    let localstack = match std::env::var("LOCALSTACK_ENDPOINT_URL") {
        Ok(endpoint) => Some(Arc::new(Server::at(&endpoint))),
        Err(_) if std::env::var_os("CI").is_some() => {
            println!("conformance: CI runs the LocalStack column, and LocalStack is not installed (make localstack)");
            return 1;
        }
        Err(_) => None,
    };
    let (model, moto, localstack) = tokio::join!(
        run_all(model, &prefix),
        async {
            match moto {
                Some(moto) => Some(run_all(moto, &prefix).await),
                None => None,
            }
        },
        async {
            match localstack {
                Some(localstack) => Some(run_all(localstack, &prefix).await),
                None => None,
            }
        },
    );

    let columns = [(MODEL, Some(model)), (MOTO, moto), (LOCALSTACK, localstack)];
    let mut failures = Vec::new();
    println!("\nSQS conformance: each behaviour as AWS documents it, on three implementations\n");
    println!("| behaviour | source | {MODEL} | {MOTO} | {LOCALSTACK} |");
    println!("|---|---|---|---|---|");
    for (row, scenario) in SCENARIOS.iter().enumerate() {
        let mut cells = Vec::new();
        for (name, verdicts) in &columns {
            let Some(verdicts) = verdicts else {
                cells.push("not run (not installed)".to_owned());
                continue;
            };
            let known = KNOWN_DEVIATIONS.contains(&(*name, scenario.name));
            let cell = match &verdicts[row].1 {
                Ok(Verdict::Agrees) => {
                    if known {
                        failures.push(format!(
                            "{name} now agrees on \"{}\": take it out of KNOWN_DEVIATIONS",
                            scenario.name
                        ));
                    }
                    "agrees".to_owned()
                }
                Ok(Verdict::Deviates(seen)) => {
                    if !known {
                        failures.push(format!("{name} deviates on \"{}\": {seen}", scenario.name));
                    }
                    format!("deviates: {seen}")
                }
                Ok(Verdict::OtherReading(seen)) if *name != MODEL => {
                    format!("agrees, the other reading: {seen}")
                }
                Ok(Verdict::OtherReading(seen)) => {
                    failures.push(format!(
                        "the model takes the lenient reading of \"{}\": {seen}",
                        scenario.name
                    ));
                    format!("the lenient reading: {seen}")
                }
                Err(error) => {
                    failures.push(format!("{name}, \"{}\": {error}", scenario.name));
                    format!("failed: {error}")
                }
            };
            cells.push(cell);
        }
        println!(
            "| {} | {} | {} |",
            scenario.name,
            scenario.source,
            cells.join(" | ")
        );
    }
    println!();
    for failure in &failures {
        println!("conformance: {failure}");
    }
    let scenarios = SCENARIOS.len() * columns.iter().filter(|(_, v)| v.is_some()).count();
    println!(
        "conformance: {} passed, {} failed",
        scenarios - failures.len().min(scenarios),
        failures.len()
    );
    i32::from(!failures.is_empty())
}
