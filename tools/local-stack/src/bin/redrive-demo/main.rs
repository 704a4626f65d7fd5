//! `make demo`: the whole flow on the local stack. Provisions the topology from the tfvars, produces
//! orders with injected faults and duplicates, runs the orders consumer (behind the idempotency
//! guard on a DynamoDB table) through the Lambda-like poller and prints a report: fates, attempts,
//! retry delays against the policy, duplicates absorbed, the DLQ, and every alarm's state.
mod report;

use report::*;
use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::MessageSystemAttributeName;
use aws_sdk_sqs::Client;
use lambda_runtime::{Context, LambdaEvent};
use orders::payments::SimulatedPayments;
use orders::OrdersHandler;
use redrive::aws::DynamoDbStore;
use redrive::breaker::TenantBreakers;
use redrive::config::ReprocessSettings;
use redrive::idempotency::{Idempotent, KeyFrom};
use redrive::lambda::Bytes;
use redrive::ledger::{AttemptLedger, Hold};
use redrive::port::{Clock, SystemClock};
use redrive::reprocess::{
    browse, ReprocessCommand, ReprocessPolicy, ReprocessSummary, Reprocessor,
};
use redrive::retry::RetryPolicy;
use redrive::testing::Counted;
use redrive::{BatchReport, Meta, Processor, ProcessorConfig, SqsQueue};
use redrive_local::observe::{Observed, Sent};
use redrive_local::poller::Poller;
use redrive_local::provision::{depth, idempotency_table, provision, QueuePair};
use redrive_local::topology::{self, Topology};

/// Keep each queue under this many messages: moto slows down with depth.
const MAX_QUEUED: u64 = 150;
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// Every payment call takes this long, as a real downstream does: the batch durations show what
/// handling records concurrently (`REDRIVE_CONCURRENCY`) does with it.
const PAYMENT_LATENCY: &str = "20ms";

/// One consumer of the topology with its workload and figures.
struct Flow {
    queue: QueuePair,
    poller: Poller,
    processor: Processor<Observed<SqsQueue>>,
    /// The orders handler behind the shared idempotency store, keyed by `orderId`.
    handler: Idempotent<OrdersHandler<SimulatedPayments>, DynamoDbStore>,
    timeout_ms: u64,
    workload: VecDeque<(String, Option<String>)>,
    produced: usize,
    report: BatchReport,
    /// SQS requests of the event source mapping for the batches it delivered (receives, deletes).
    mapping_requests: u32,
    /// The FIFO attempt ledger (in the idempotency table), its calls counted.
    ledger: Arc<Counted<DynamoDbStore>>,
    whole_batch_errors: usize,
    /// Records and duration (ms) of each invocation.
    batches: Vec<(u32, f64)>,
    concurrency: usize,
}

impl Flow {
    async fn top_up(&mut self, client: &Client) -> Result<(), redrive_local::Error> {
        let (visible, in_flight, delayed) = depth(client, &self.queue.url).await?;
        let room = MAX_QUEUED.saturating_sub(visible + in_flight + delayed) as usize;
        let batch: Vec<_> = (0..room.min(self.workload.len()).min(10))
            .filter_map(|_| self.workload.pop_front())
            .collect();
        if batch.is_empty() {
            return Ok(());
        }
        let entries = batch
            .iter()
            .enumerate()
            .map(|(i, (body, group))| {
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .set_message_group_id(group.clone())
                    .set_message_deduplication_id(
                        group.as_ref().map(|_| format!("d-{}", self.produced + i)),
                    )
                    .build()
                    .map_err(|e| redrive_local::Error::Emulator(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let output = client
            .send_message_batch()
            .queue_url(&self.queue.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(redrive_local::Error::sdk)?;
        if !output.failed().is_empty() {
            return Err(redrive_local::Error::Emulator(format!(
                "producer send failed: {:?}",
                output.failed()
            )));
        }
        self.produced += batch.len();
        Ok(())
    }

    async fn poll(&mut self) -> Result<(), redrive_local::Error> {
        let (processor, handler, timeout_ms) = (&self.processor, &self.handler, self.timeout_ms);
        let mut report = None;
        let poll = self
            .poller
            .poll(Duration::from_millis(200), |event| async {
                let started = Instant::now();
                let mut context = Context::default();
                context.deadline = SystemClock.now_ms() + timeout_ms;
                let event = LambdaEvent::new(Bytes::from(event), context);
                let processed = redrive::lambda::handle_batch(event, processor, handler)
                    .await
                    .map_err(|e| e.to_string())?;
                report = Some((processed.report, started.elapsed()));
                serde_json::to_string(&processed.response).map_err(|e| e.to_string())
            })
            .await?;
        if let Some((report, took)) = report {
            self.report.absorb(&report);
            self.batches
                .push((report.records, took.as_secs_f64() * 1000.0));
        }
        self.whole_batch_errors += usize::from(poll.whole_batch_failed);
        self.mapping_requests += poll.requests;
        Ok(())
    }

    /// Polls until the source queue is empty (the redriven messages are handled).
    async fn drain(&mut self, client: &Client) -> Result<(), redrive_local::Error> {
        let started = Instant::now();
        loop {
            self.poll().await?;
            let (visible, in_flight, delayed) = depth(client, &self.queue.url).await?;
            if visible + in_flight + delayed == 0 {
                return Ok(());
            }
            if started.elapsed() > RUN_LIMIT {
                return Err(redrive_local::Error::Emulator(format!(
                    "{} did not drain within {RUN_LIMIT:?}",
                    self.queue.key
                )));
            }
        }
    }

    fn charged(&self) -> Vec<(String, u32)> {
        self.handler.inner().payments().charged()
    }

    /// Messages in = charged (each order once, or an effect twice) + absorbed as duplicates +
    /// `elsewhere` (in the DLQ, archived, still queued); the difference is lost.
    fn lost(&self, elsewhere: usize) -> i64 {
        let accounted = self.charged().len() + self.handler.duplicates() as usize + elsewhere;
        self.produced as i64 - accounted as i64
    }

    /// Orders charged more than once.
    fn effects_twice(&self) -> usize {
        let charged = self.charged();
        let mut unique: Vec<&String> = charged.iter().map(|(id, _)| id).collect();
        unique.sort();
        unique.dedup();
        charged.len() - unique.len()
    }
}

fn order(id: &str, amount: f64, currency: &str) -> String {
    format!(
        r#"{{"orderId":"{id}","customerId":"c-{}","amount":{amount},"currency":"{currency}"}}"#,
        id.len()
    )
}

/// The standard flow: 160 orders, with malformed and invalid ones, a poison order, orders that
/// recover after two timeouts, orders whose downstream never recovers, an outage that heals, and
/// eight orders sent twice.
fn standard_workload(
    payments: &mut SimulatedPayments,
    outage: Duration,
) -> VecDeque<(String, Option<String>)> {
    payments.outage_until = Some(SystemTime::now() + outage);
    payments.poison_orders = vec!["o-0077".into()];
    payments.flaky_orders = (0..8)
        .map(|i| (format!("o-{:04}", 11 + i * 17), 2))
        .chain((0..3).map(|i| (format!("o-{:04}", 5 + i * 50), 99)))
        .collect();
    let body = |n: u32| {
        let id = format!("o-{n:04}");
        match n {
            n if n % 40 == 0 => format!(r#"{{"orderId":"{id}","amount":12.5,"currency":"EUR""#),
            n if n % 25 == 3 => order(&id, -1.0, "EUR"),
            _ => order(&id, 10.0 + f64::from(n), "EUR"),
        }
    };
    // A producer that retried eight sends: the same orders again, as messages of their own.
    let resent = [2, 14, 26, 38, 50, 64, 86, 98];
    (1..=160).chain(resent).map(|n| (body(n), None)).collect()
}

/// The FIFO flow: three customers' payment streams; one payment times out once; two payments are
/// sent twice (with deduplication ids of their own, as a producer retry after the 5-minute
/// deduplication window makes them).
fn fifo_workload(payments: &mut SimulatedPayments) -> VecDeque<(String, Option<String>)> {
    payments.flaky_orders = vec![("p-B-3".into(), 1)];
    let payment = |g: &str, n: u32| {
        (
            order(&format!("p-{g}-{n}"), 5.0, "USD"),
            Some(format!("customer-{g}")),
        )
    };
    (1..=8)
        .flat_map(|n| ["A", "B", "C"].map(|g| payment(g, n)))
        .chain([payment("A", 2), payment("C", 5)])
        .collect()
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo failed: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let state = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.local");
    std::fs::create_dir_all(&state)?;
    let log = std::fs::File::create(state.join("demo.log"))?;
    tracing_subscriber::fmt()
        .json()
        .with_writer(std::sync::Mutex::new(log))
        .with_env_filter("info")
        .init();
    std::panic::set_hook(Box::new(
        |panic| tracing::error!(%panic, "record handler panicked"),
    ));

    let scale: f64 = std::env::var("REDRIVE_DEMO_TIME_SCALE")
        .ok()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(60.0);
    if !(1.0..=3600.0).contains(&scale) {
        return Err(format!("REDRIVE_DEMO_TIME_SCALE={scale}: expected 1 to 3600").into());
    }
    let path = topology::default_path();
    let mut topology = Topology::load(&path)?;
    topology.scale_time(scale);
    let client = redrive_local::sqs_client();
    let pairs = provision(&client, &topology).await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&redrive::aws::sdk_config_from_env());
    println!(
        "redrive demo: {} queues from {} on {}",
        pairs.len() * 2,
        path.display(),
        std::env::var("AWS_ENDPOINT_URL").unwrap_or_default()
    );
    println!("time scale {scale}x: every wait in the topology is divided by {scale}");
    println!(
        "idempotency: each consumer behind a DynamoDB table keyed by orderId ({}-<consumer>-idempotency)\n",
        topology.name_prefix
    );

    let mut flows = Vec::new();
    for queue in pairs {
        let consumer = &topology.consumers[&queue.key];
        let settings = topology.settings(&queue.key, &queue.dlq_url, &[])?;
        let mut payments = SimulatedPayments::from_lookup(|name| {
            (name == "PAYMENTS_LATENCY").then(|| PAYMENT_LATENCY.to_owned())
        })?
        .recording();
        // The table infra/modules/idempotency-table makes for a consumer with an idempotency_key.
        let table = format!("{}-{}-idempotency", topology.name_prefix, queue.key);
        idempotency_table(&dynamodb, &table).await?;
        let ledger = Arc::new(Counted::new(DynamoDbStore::with_client(
            dynamodb.clone(),
            &table,
        )));
        let workload = if queue.fifo {
            fifo_workload(&mut payments)
        } else {
            standard_workload(&mut payments, Duration::from_secs_f64(240.0 / scale))
        };
        flows.push(Flow {
            poller: Poller::new(
                client.clone(),
                &queue,
                consumer.batch_size,
                Duration::from_secs(u64::from(consumer.batching_window_seconds)),
            ),
            // FIFO attempts are counted with the ledger in the same table (infra/ does the same).
            processor: Processor::new(
                Observed::new(SqsQueue::with_client(client.clone())),
                ProcessorConfig::from(&settings),
            )
            .with_ledger(ledger.clone()),
            ledger,
            handler: Idempotent::new(
                OrdersHandler::new(
                    payments,
                    TenantBreakers::new("payments", settings.breaker, settings.tenant_breaker),
                ),
                DynamoDbStore::with_client(dynamodb.clone(), &table),
                KeyFrom::BodyField("/orderId".into()),
            ),
            timeout_ms: u64::from(consumer.function_timeout_seconds) * 1000,
            queue,
            workload,
            produced: 0,
            report: BatchReport::default(),
            mapping_requests: 0,
            whole_batch_errors: 0,
            batches: Vec::new(),
            concurrency: settings.processor.concurrency.get(),
        });
    }
    let total: usize = flows.iter().map(|l| l.workload.len()).sum();

    let started = Instant::now();
    let tty = std::io::stdout().is_terminal();
    let mut last_line = Instant::now();
    loop {
        let mut busy = false;
        for flow in &mut flows {
            flow.top_up(&client).await?;
            flow.poll().await?;
            let (visible, in_flight, delayed) = depth(&client, &flow.queue.url).await?;
            busy |= !flow.workload.is_empty() || visible + in_flight + delayed > 0;
        }
        let line = progress(&flows, total, started.elapsed());
        if tty {
            print!("\r{line}\x1b[K");
            std::io::stdout().flush()?;
        } else if last_line.elapsed() >= Duration::from_secs(5) || !busy {
            println!("{line}");
            last_line = Instant::now();
        }
        if !busy {
            break;
        }
        if started.elapsed() > RUN_LIMIT {
            return Err(format!("the queues did not drain within {RUN_LIMIT:?}").into());
        }
    }
    if tty {
        println!();
    }
    report(&client, &topology, &flows, scale, started.elapsed()).await?;
    if std::env::var_os("REDRIVE_DEMO_INCIDENT").is_some() {
        // `make console`: the incident stays in the DLQs for the console to show.
        let dlqs: Vec<&str> = flows
            .iter()
            .map(|flow| flow.queue.dlq_url.as_str())
            .collect();
        std::fs::write(state.join("incident-dlqs"), dlqs.join("\n") + "\n")?;
        println!("\n== The incident is left in {}", dlqs.join(", "));
        if let Some(flow) = flows.iter().find(|flow| flow.queue.fifo) {
            let table = format!("{}-{}-idempotency", topology.name_prefix, flow.queue.key);
            hold_a_head(&client, &flow.queue, &*flow.ledger).await?;
            std::fs::write(state.join("incident-table"), format!("{table}\n"))?;
            println!("== and one FIFO group held on its head (ledger table {table})");
        }
        return Ok(());
    }
    heal_and_redrive(&client, &topology, &mut flows, scale).await
}

/// A FIFO group held on its head, as a consumer with `REDRIVE_FIFO_ON_DEAD_LETTER=hold` leaves it
/// when a payment cannot be taken: the head waits in flight, its hold in the ledger, for
/// `make console`'s held groups page.
async fn hold_a_head(
    client: &Client,
    queue: &QueuePair,
    ledger: &dyn AttemptLedger,
) -> Result<(), Box<dyn std::error::Error>> {
    client
        .send_message()
        .queue_url(&queue.url)
        .message_body(order("p-D-1", -5.0, "USD"))
        .message_group_id("customer-D")
        .message_deduplication_id("p-D-1-held")
        .send()
        .await?;
    let received = client
        .receive_message()
        .queue_url(&queue.url)
        .visibility_timeout(43_000)
        .send()
        .await?;
    let head = received
        .messages()
        .first()
        .ok_or("the held head was not received")?;
    let hold = Hold {
        since_ms: SystemClock.now_ms(),
        receive_count: 1,
        receipt_handle: head.receipt_handle().unwrap_or_default().to_owned(),
        queue_arn: queue.arn.clone(),
        error_kind: "invalid_order".into(),
        error_message: "amount -5.00 is not positive".into(),
        release: None,
    };
    ledger
        .hold(head.message_id().unwrap_or_default(), &hold, false)
        .await?;
    Ok(())
}

/// The downstream is fixed, then the DLQs are redriven to empty as an operator would: the
/// scheduled reprocessor first (transient failures go home, unfixable input is archived), then a
/// forced redrive of the panics once the bug fix is deployed.
async fn heal_and_redrive(
    client: &Client,
    topology: &Topology,
    flows: &mut [Flow],
    scale: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n== Heal the downstream, then redrive the DLQs");
    let archive_url = client
        .create_queue()
        .queue_name(format!("{}-dlq-archive", topology.name_prefix))
        .send()
        .await
        .map_err(redrive_local::Error::sdk)?
        .queue_url
        .unwrap_or_default();
    let mut settings = ReprocessSettings::from_lookup([], |_| None)?;
    settings.archive_url = Some(archive_url);
    settings.policy = ReprocessPolicy {
        eligible_after: Duration::from_secs_f64(300.0 / scale),
        discard_kinds: vec!["malformed_body".into(), "invalid_order".into()],
        ..ReprocessPolicy::default()
    };
    settings.rate_per_second = 500.0;
    println!(
        "  policy: transient failures redriven {:.0}s after their last failure (5 min scaled), at most {} times; \
         kinds {:?} archived; permanent errors and panics left for review",
        settings.policy.eligible_after.as_secs_f64(),
        settings.policy.max_reprocess,
        settings.policy.discard_kinds
    );
    for flow in flows.iter_mut() {
        flow.handler.inner_mut().payments_mut().heal();
    }
    tokio::time::sleep(settings.policy.eligible_after).await;
    let steps = [
        ("scheduled run", ReprocessCommand::default()),
        (
            "dlq redrive --error-class panic --force (after the bug fix)",
            ReprocessCommand {
                error_classes: vec![redrive::ErrorClass::Panic],
                force: true,
                ..ReprocessCommand::default()
            },
        ),
    ];
    let mut archived: BTreeMap<String, u32> = BTreeMap::new();
    for (step, command) in steps {
        for flow in flows.iter_mut() {
            let plan = ReprocessCommand {
                source: Some(flow.queue.dlq_url.clone()),
                ..command.clone()
            }
            .plan(&settings)?;
            let summary = Reprocessor::new(SqsQueue::with_client(client.clone()), &settings)
                .run(&plan, None, |_| {})
                .await?;
            print_summary(step, &flow.queue.key, &summary);
            alarm(
                &format!("{} reprocessor Alerted > 0", flow.queue.key),
                f64::from(summary.alerted),
                0.0,
            );
            *archived.entry(flow.queue.key.clone()).or_default() += summary.discarded;
            flow.drain(client).await?;
        }
    }

    println!("\n== After the redrive");
    for flow in flows.iter() {
        let (dlq, dlq_in_flight, dlq_delayed) = depth(client, &flow.queue.dlq_url).await?;
        let (visible, in_flight, delayed) = depth(client, &flow.queue.url).await?;
        let in_dlq = dlq + dlq_in_flight + dlq_delayed;
        let archived = archived[&flow.queue.key] as usize;
        let left = (visible + in_flight + delayed) as usize;
        let (lost, twice) = (
            flow.lost(archived + in_dlq as usize + left),
            flow.effects_twice(),
        );
        println!(
            "{:<10} in {:>4} = charged {:>4} + duplicates absorbed {} + archived {:>2} + in DLQ {} + still queued {left} | lost {lost} | effects twice {twice}",
            flow.queue.key,
            flow.produced,
            flow.charged().len(),
            flow.handler.duplicates(),
            archived,
            in_dlq,
        );
        alarm(
            &format!("{} DLQ depth > 0", flow.queue.key),
            dlq as f64,
            0.0,
        );
        if lost != 0 || twice != 0 || in_dlq != 0 {
            return Err(format!(
                "{}: the DLQ is not empty, messages are unaccounted for or charged twice",
                flow.queue.key
            )
            .into());
        }
    }
    Ok(())
}
