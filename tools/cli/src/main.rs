//! `dlq`: the operator's tool for SQS dead-letter queues, on the redrive library. Works against
//! AWS (the usual AWS_PROFILE / AWS_REGION) and against the local stack (AWS_ENDPOINT_URL).
mod console;
mod doctor;
mod intake;
mod job;

use job::JobCommand;

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use redrive::aws::{DynamoDbStore, S3Payloads};
use redrive::config::ReprocessSettings;
use redrive::event::SqsRecord;
use redrive::ledger::{release_head, AttemptLedger, Release};
use redrive::payload::{PayloadStore, Pointer, LEGACY_SIZE_ATTRIBUTE, SIZE_ATTRIBUTE};
use redrive::port::{Clock, SystemClock};
use redrive::reprocess::{
    browse, export_line, failure_groups, tenant_counts, AttributeFilter, Inventory,
    ReprocessCommand, ReprocessSummary, Reprocessor,
};
use redrive::{ErrorClass, SqsQueue};

/// Inspect, export and redrive SQS dead-letter queues without losing a message.
///
/// QUEUE is a queue URL, ARN or name. Reading commands (stats, peek, export) hide each message
/// while they read and make it visible again at the end: nothing is consumed. `redrive` sends each
/// chosen message back to the queue it failed in and deletes it from the DLQ only once SQS has
/// confirmed the copy.
///
/// Examples:
///   dlq stats orders-dlq
///   dlq stats orders-dlq --by tenant   # a fair or FIFO queue's message groups, Kafka keys
///   dlq groups orders-dlq           # one line per cause, the largest first
///   dlq job new orders-dlq --group 3f2a9c0e1b7d4e55 --out job.json   # selection fixed now
///   dlq job new orders-dlq --group 9d1e... --archive orders-archive --out job.json
///   dlq job new orders-dlq --before-version 8 --out job.json  # across groups
///   dlq job run job.json            # again to resume; later arrivals are never taken
///   dlq console orders-dlq payments-dlq   # the same in a browser, on loopback
///   dlq console orders-dlq --table redrive-payments-idempotency --audit-bus ops
///   dlq peek orders-dlq -n 3
///   dlq peek orders-dlq --pointers  # large messages: where the body is kept, not the body
///   dlq export orders-dlq > dead-letters.jsonl
///   dlq redrive orders-dlq --dry-run
///   dlq redrive orders-dlq --error-kind payment_timeout --rate 20
///   dlq redrive orders-dlq --error-class permanent --force    # after deploying a fix
///   dlq redrive orders-dlq --before-version 8 --force         # what failed before version 8
///   dlq redrive orders-dlq --tenant t-13        # one tenant's, once its dependency is back
///   dlq redrive orders-dlq --copy --destination arn:aws:sqs:eu-west-1:123456789012:orders-test
///   dlq move-task start orders-dlq
///   dlq held redrive-payments-idempotency
///   dlq release redrive-payments-idempotency 1f0c...-message-id              # retry it
///   dlq release redrive-payments-idempotency 1f0c...-message-id --dead-letter
///   dlq doctor                      # every SQS mapping of the account and region
///   dlq doctor --function orders --json
///
/// Settings: REDRIVE_REPROCESS_MAX, REDRIVE_REPROCESS_AFTER, REDRIVE_DISCARD_KINDS and
/// REDRIVE_ARCHIVE_QUEUE_URL as for the dlq-redrive function (README, Configuration).
/// Local stack: AWS_ENDPOINT_URL=http://127.0.0.1:PORT (make demo prints the port).
#[derive(Parser)]
#[command(name = "dlq", version, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Count messages by error class, error kind, origin queue, redrive count and age.
    Stats {
        /// The queue: URL, ARN or name.
        queue: String,
        /// Messages to read at most.
        #[arg(long, default_value_t = 10_000)]
        max: u32,
        /// Count by this instead: `tenant` (a Kafka record's key, else the message group of a
        /// fair or FIFO queue), the most first.
        #[arg(long, value_enum)]
        by: Option<StatsBy>,
    },
    /// Group the messages by what failed and how (origin queue, function and its version, error
    /// class and kind, the error message with numbers and ids masked), the largest group first,
    /// as JSON lines.
    Groups {
        /// The queue: URL, ARN or name.
        queue: String,
        /// Messages to read at most.
        #[arg(long, default_value_t = 10_000)]
        max: u32,
    },
    /// Show the first messages (body, attributes, failure metadata) as JSON. A large message
    /// (an Extended Client pointer) shows its body read from S3, and where it is kept.
    Peek {
        /// The queue: URL, ARN or name.
        queue: String,
        #[arg(short = 'n', long, default_value_t = 5)]
        count: u32,
        /// Leave large messages' bodies in S3: show the pointer and the size only.
        #[arg(long)]
        pointers: bool,
    },
    /// Write every message as one JSON line to stdout, for an archive or a ticket (large
    /// messages with their bodies read from S3, unless --pointers).
    Export {
        /// The queue: URL, ARN or name.
        queue: String,
        #[arg(long, default_value_t = 10_000)]
        max: u32,
        /// Leave large messages' bodies in S3: write the pointer and the size only.
        #[arg(long)]
        pointers: bool,
    },
    /// Send eligible messages back to their origin queue (see docs/redrive.md, the redrive policy).
    Redrive(RedriveArgs),
    /// Serve the DLQ console on loopback: the queues, their failure groups and messages, held FIFO
    /// groups, and jobs made, run and aborted from a browser, every change recorded as an
    /// EventBridge event. Prints the console's URL (with its token) on stdout.
    Console {
        /// The DLQs to show: URL, ARN or name (repeatable). None: every DLQ the account's SQS
        /// mappings' queues lead to (their redrive policies, as `dlq doctor` reads them).
        queues: Vec<String>,
        /// The address to listen on; a port of 0 takes a free one.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Listen beyond loopback (anyone who can reach the port and has the token can redrive).
        #[arg(long)]
        expose: bool,
        /// Messages to read at most per queue.
        #[arg(long, default_value_t = 10_000)]
        max: u32,
        /// Messages a job re-sends per second at most.
        #[arg(long, default_value_t = 50.0)]
        rate: f64,
        /// The consumer's ledger table (REDRIVE_LEDGER_TABLE): its held FIFO groups, released
        /// from the console.
        #[arg(long)]
        table: Option<String>,
        /// The EventBridge bus every change is recorded on (source `redrive.console`); a change
        /// whose event is not recorded is not made.
        #[arg(long, default_value = "default")]
        audit_bus: String,
    },
    /// Redrive, redirect, archive or discard one failure group as a job whose selection is fixed
    /// when it is made.
    #[command(subcommand)]
    Job(JobCommand),
    /// SQS's native StartMessageMoveTask: moves everything, no filters, up to 500 messages/s.
    #[command(subcommand)]
    MoveTask(MoveTask),
    /// List the FIFO groups held on a head (REDRIVE_FIFO_ON_DEAD_LETTER=hold), as JSON lines.
    Held {
        /// The consumer's ledger table (its REDRIVE_LEDGER_TABLE or REDRIVE_IDEMPOTENCY_TABLE).
        table: String,
    },
    /// Read the account's SQS event source mappings, their functions and queues, and name every
    /// setting that loses, duplicates or stalls messages: what, why (the AWS rule), how to fix.
    /// Exits 1 when it finds any.
    Doctor {
        /// Only the mappings of this function (repeatable); all by default.
        #[arg(long)]
        function: Vec<String>,
        /// The findings as one JSON array on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Pause a function's SQS event source mappings: Lambda stops polling, nothing is received
    /// (no receive count rises) until `dlq resume`; the intake controller leaves them alone.
    Pause {
        /// The function.
        function: String,
    },
    /// Resume a function's SQS event source mappings (paused by `dlq pause` or the controller).
    Resume {
        /// The function.
        function: String,
    },
    /// Release a held FIFO head: tried again with a fresh set of attempts (the cause is fixed),
    /// or with --dead-letter sent to the DLQ so that its group goes on. The head comes back at once.
    Release {
        /// The consumer's ledger table.
        table: String,
        /// The held head's message id (`dlq held` lists them).
        message_id: String,
        /// Dead-letter it instead of trying it again.
        #[arg(long)]
        dead_letter: bool,
    },
}

#[derive(Args)]
struct RedriveArgs {
    /// The DLQ: URL, ARN or name.
    queue: String,
    /// Queue ARN to send every message to instead of each message's origin.
    #[arg(long)]
    destination: Option<String>,
    /// Queue ARN for messages that name no origin (SQS moved them without
    /// DeadLetterQueueSourceArn); the others go home to the origin they name.
    #[arg(long)]
    fallback_destination: Option<String>,
    /// Messages to examine at most.
    #[arg(long, default_value_t = 1000)]
    max: u32,
    /// Decide and count; send, delete and archive nothing.
    #[arg(long)]
    dry_run: bool,
    /// Only this error class (transient, permanent, panic); repeatable.
    #[arg(long = "error-class", value_parser = parse_class)]
    error_classes: Vec<ErrorClass>,
    /// Only this error kind (payment_timeout, invalid_order, ...); repeatable.
    #[arg(long = "error-kind")]
    error_kinds: Vec<String>,
    /// Only messages whose last failure is at least this old (30s, 10m, 2h).
    #[arg(long)]
    min_age: Option<String>,
    /// Only messages whose last failure is at most this old.
    #[arg(long)]
    max_age: Option<String>,
    /// Only messages with this String attribute, as NAME=VALUE.
    #[arg(long, value_parser = parse_attribute)]
    attribute: Option<AttributeFilter>,
    /// Only messages that failed on a published function version below N: what failed before a
    /// fix deployed as version N ($LATEST and unversioned failures never match).
    #[arg(long, value_name = "N")]
    before_version: Option<u64>,
    /// Only this tenant's messages (as `dlq stats --by tenant` names it); repeatable.
    #[arg(long = "tenant")]
    tenants: Vec<String>,
    /// Messages re-sent per second at most.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// You fixed the cause: also redrive what the policy leaves for review (permanent errors,
    /// backoff not passed). The redrive cap still holds.
    #[arg(long)]
    force: bool,
    /// Send copies and delete nothing: the DLQ keeps every message (replay into a test queue
    /// with --destination).
    #[arg(long)]
    copy: bool,
}

/// What `dlq stats --by` counts by.
#[derive(Clone, Copy, ValueEnum)]
enum StatsBy {
    Tenant,
}

#[derive(Subcommand)]
enum MoveTask {
    /// Start moving every message of a DLQ back to its source queue(s), or to --destination.
    Start {
        /// The queue: URL, ARN or name.
        queue: String,
        #[arg(long)]
        destination: Option<String>,
        /// Messages per second (SQS's default is its maximum, 500).
        #[arg(long)]
        rate: Option<u32>,
    },
    /// List the recent move tasks of a DLQ.
    List { queue: String },
    /// Cancel a running move task (its handle comes from `start` or `list`).
    Cancel { task_handle: String },
}

fn parse_class(text: &str) -> Result<ErrorClass, String> {
    serde_json::from_value(text.into())
        .map_err(|_| format!("{text:?} is not an error class: transient, permanent or panic"))
}

fn parse_attribute(text: &str) -> Result<AttributeFilter, String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected NAME=VALUE"))?;
    Ok(AttributeFilter {
        name: name.to_owned(),
        value: value.to_owned(),
    })
}

/// A message as `peek` and `export` show it. A large message (an Extended Client pointer) also
/// names where its body is kept (`largeMessage`), and with `s3` shows the body read from there
/// (or, when it cannot be read, why: the message itself is untouched).
async fn with_large_body(record: &SqsRecord<'_>, s3: Option<&S3Payloads>) -> serde_json::Value {
    let mut line: serde_json::Value =
        serde_json::from_str(&export_line(record)).expect("export_line writes JSON");
    let Some(pointer) = Pointer::of(record) else {
        return line;
    };
    let size = [SIZE_ATTRIBUTE, LEGACY_SIZE_ATTRIBUTE]
        .iter()
        .find_map(|name| {
            record
                .message_attributes
                .get(*name)?
                .string_value
                .as_deref()
        })
        .and_then(|size| size.parse::<u64>().ok());
    line["largeMessage"] = match (pointer, s3) {
        (Err(error), _) => serde_json::json!({ "unreadable": error.to_string() }),
        (Ok(pointer), None) => serde_json::json!({ "s3": pointer.to_string(), "bytes": size }),
        (Ok(pointer), Some(s3)) => match s3.get(&pointer).await {
            Ok(body) => {
                line["body"] = body.into();
                serde_json::json!({ "s3": pointer.to_string(), "bytes": size })
            }
            Err(error) => serde_json::json!({
                "s3": pointer.to_string(), "bytes": size, "unreadable": error.to_string(),
            }),
        },
    };
    line
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dlq: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(redrive::aws::https_client())
        .load()
        .await;
    let sqs = SqsQueue::with_client(aws_sdk_sqs::Client::new(&config));
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Stats { queue, max, by } => {
            let url = sqs.resolve(&queue).await?;
            let depth = sqs.describe(&url).await?;
            let records = browse(&sqs, &url, max).await?;
            let read = match by {
                None => serde_json::to_value(Inventory::of(&records, SystemClock.now_ms()))?,
                Some(StatsBy::Tenant) => serde_json::json!({
                    "messages": records.len(),
                    "byTenant": tenant_counts(&records)
                        .into_iter()
                        .map(|(tenant, messages)| serde_json::json!({ "tenant": tenant, "messages": messages }))
                        .collect::<Vec<_>>(),
                }),
            };
            let report = serde_json::json!({
                "queue": url,
                "approximate": { "visible": depth.visible, "inFlight": depth.in_flight, "delayed": depth.delayed },
                "read": read,
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        }
        Command::Groups { queue, max } => {
            let url = sqs.resolve(&queue).await?;
            for group in failure_groups(&browse(&sqs, &url, max).await?) {
                writeln!(out, "{}", serde_json::to_string(&group)?)?;
            }
        }
        Command::Peek {
            queue,
            count,
            pointers,
        } => {
            let url = sqs.resolve(&queue).await?;
            let s3 = (!pointers).then(|| S3Payloads::with_client(redrive::aws::s3_client(&config)));
            for record in browse(&sqs, &url, count).await? {
                let line = with_large_body(&record, s3.as_ref()).await;
                writeln!(out, "{}", serde_json::to_string_pretty(&line)?)?;
            }
        }
        Command::Export {
            queue,
            max,
            pointers,
        } => {
            let url = sqs.resolve(&queue).await?;
            let s3 = (!pointers).then(|| S3Payloads::with_client(redrive::aws::s3_client(&config)));
            let records = browse(&sqs, &url, max).await?;
            for record in &records {
                writeln!(out, "{}", with_large_body(record, s3.as_ref()).await)?;
            }
            eprintln!("dlq: exported {} messages from {url}", records.len());
        }
        Command::Redrive(args) => {
            let url = sqs.resolve(&args.queue).await?;
            let settings = ReprocessSettings::from_env()?;
            let command = ReprocessCommand {
                source: Some(url),
                destination: args.destination,
                fallback_destination: args.fallback_destination,
                max_messages: Some(args.max),
                dry_run: args.dry_run,
                error_classes: args.error_classes,
                error_kinds: args.error_kinds,
                min_age: args.min_age,
                max_age: args.max_age,
                attribute: args.attribute,
                before_version: args.before_version,
                tenants: args.tenants,
                rate_per_second: Some(args.rate),
                force: args.force,
                copy: args.copy,
                ..ReprocessCommand::default()
            };
            let plan = command.plan(&settings)?;
            let reprocessor = Reprocessor::new(sqs, &settings);
            let summary = reprocessor
                .run(&plan, None, |summary| progress(summary, plan.max_messages))
                .await?;
            eprintln!();
            writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
        }
        Command::Console {
            queues,
            listen,
            expose,
            max,
            rate,
            table,
            audit_bus,
        } => {
            if !listen.ip().is_loopback() && !expose {
                return Err(
                    format!("{listen} is beyond loopback: add --expose if that is meant").into(),
                );
            }
            let mut urls = Vec::with_capacity(queues.len());
            for queue in &queues {
                urls.push(sqs.resolve(queue).await?);
            }
            if urls.is_empty() {
                let lambda = aws_sdk_lambda::Client::new(&config);
                let sqs_client = aws_sdk_sqs::Client::new(&config);
                let scheduler = aws_sdk_scheduler::Client::new(&config);
                urls = doctor::gather(&lambda, &sqs_client, &scheduler, &[])
                    .await?
                    .dlq_urls();
                if urls.is_empty() {
                    return Err(
                        "no SQS mapping of this account and region leads to a DLQ: name the DLQs"
                            .into(),
                    );
                }
                eprintln!(
                    "dlq: the DLQs of the account's SQS mappings: {}",
                    urls.join(", ")
                );
            }
            let options = console::Options {
                queues: urls,
                listen,
                max,
                rate,
                table,
                audit_bus,
            };
            console::serve(&config, options).await?;
        }
        Command::Job(command) => job::run(sqs, command, &mut out).await?,
        Command::MoveTask(MoveTask::Start {
            queue,
            destination,
            rate,
        }) => {
            let url = sqs.resolve(&queue).await?;
            let arn = sqs.describe(&url).await?.arn;
            let handle = sqs
                .start_move_task(&arn, destination.as_deref(), rate)
                .await?;
            writeln!(out, "{handle}")?;
            eprintln!("dlq: move task started; follow it with `dlq move-task list {queue}`");
        }
        Command::MoveTask(MoveTask::List { queue }) => {
            let url = sqs.resolve(&queue).await?;
            let arn = sqs.describe(&url).await?.arn;
            let tasks = sqs.list_move_tasks(&arn).await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&tasks)?)?;
        }
        Command::MoveTask(MoveTask::Cancel { task_handle }) => {
            let moved = sqs.cancel_move_task(&task_handle).await?;
            writeln!(out, "cancelled; about {moved} messages had been moved")?;
        }
        Command::Held { table } => {
            let ledger = DynamoDbStore::with_client(aws_sdk_dynamodb::Client::new(&config), table);
            let held = ledger.held().await?;
            let now = SystemClock.now_ms();
            for (message_id, hold) in &held {
                let line = serde_json::json!({
                    "messageId": message_id,
                    "queueArn": hold.queue_arn,
                    "heldFor": humantime::format_duration(std::time::Duration::from_secs(now.saturating_sub(hold.since_ms) / 1000)).to_string(),
                    "errorKind": hold.error_kind,
                    "error": hold.error_message,
                    "receives": hold.receive_count,
                    "release": hold.release.map(|release| release.as_str()),
                });
                writeln!(out, "{line}")?;
            }
            eprintln!("dlq: {} held heads", held.len());
        }
        Command::Doctor { function, json } => {
            let lambda = aws_sdk_lambda::Client::new(&config);
            let account = doctor::gather(
                &lambda,
                &aws_sdk_sqs::Client::new(&config),
                &aws_sdk_scheduler::Client::new(&config),
                &function,
            )
            .await?;
            let findings = doctor::diagnose(&account);
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&findings)?)?;
            } else {
                for finding in &findings {
                    writeln!(
                        out,
                        "{} [{}]\n  what: {}\n  why:  {}\n  fix:  {}\n",
                        finding.resource, finding.code, finding.what, finding.why, finding.fix
                    )?;
                }
            }
            eprintln!(
                "dlq: {} SQS mappings read, {} findings",
                account.mappings.len(),
                findings.len()
            );
            if !findings.is_empty() {
                return Err(Found(findings.len()).into());
            }
        }
        Command::Pause { function } => {
            let changed = intake::set(&config, &function, false).await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&changed)?)?;
        }
        Command::Resume { function } => {
            let changed = intake::set(&config, &function, true).await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&changed)?)?;
        }
        Command::Release {
            table,
            message_id,
            dead_letter,
        } => {
            let ledger = DynamoDbStore::with_client(aws_sdk_dynamodb::Client::new(&config), table);
            let release = if dead_letter {
                Release::DeadLetter
            } else {
                Release::Retry
            };
            let Some(released) = release_head(&ledger, &sqs, &message_id, release).await? else {
                return Err(format!(
                    "{message_id} holds no group: `dlq held` lists the held heads"
                )
                .into());
            };
            let when = if released.visible_now {
                "now"
            } else {
                "when the head next comes back, which dlq cannot see from here: it was received \
                 again meanwhile (its receipt handle is no longer the latest), so the consumer \
                 finds the release and gives it back at once, unless the head has left the queue \
                 (dlq held no longer lists it either way)"
            };
            writeln!(
                out,
                "released {message_id} ({}): its group goes on {when}",
                release.as_str()
            )?;
        }
    }
    Ok(())
}

/// `dlq doctor` found settings to fix (already printed): the exit status says so.
#[derive(Debug)]
struct Found(usize);

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} settings lose, duplicate or stall messages", self.0)
    }
}

impl std::error::Error for Found {}

/// A one-line progress bar on stderr.
fn progress(summary: &ReprocessSummary, max: u32) {
    const WIDTH: u32 = 30;
    let filled = (summary.examined.min(max) * WIDTH / max.max(1)) as usize;
    eprint!(
        "\r[{}{}] {}/{max} examined, {} redriven, {} left for review, {} send failures",
        "#".repeat(filled),
        " ".repeat(WIDTH as usize - filled),
        summary.examined,
        summary.reprocessed,
        summary.manual_review + summary.alerted,
        summary.send_failures,
    );
}
