//! The Lambda glue of redrive: the runtime loop, the settings from the environment, JSON tracing;
//! one SQS, Kinesis, DynamoDB Streams or Kafka batch in, the partial batch response and one EMF line out. Users reach it
//! as `redrive::lambda` (feature `lambda`, on by default).
#![warn(missing_docs)]
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use lambda_runtime::tower::{Layer, Service};
use lambda_runtime::{
    layers::TracingLayer, service_fn, Context, LambdaEvent, LambdaInvocation, Runtime,
};
use redrive_aws::SqsQueue;
use redrive_core::clock::{Clock, SystemClock};
use redrive_core::kafka::{KafkaEvent, KafkaEventResponse};
use redrive_core::stream::{DynamoDbEvent, KinesisEvent, StreamsEventResponse};
use redrive_core::{
    BatchError, Invocation, Processed, Processor, ProcessorConfig, QueuePort, RecordHandler,
    Settings, SqsEvent,
};
use serde::Serialize;

pub mod pause;
use pause::{Answer, PauseSignal};
use redrive_core::pause::{ProbeVerdict, PROBE_KEY};

pub use aws_lambda_events::sqs::SqsBatchResponse;
pub use bytes::Bytes;
/// What a function's `main` returns: any error, as `lambda_runtime` takes it.
pub use lambda_runtime::Error;

/// The partial batch response of any source; each serialises as `{"batchItemFailures": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum BatchResponse {
    /// An SQS batch's response: the message ids of the records given back.
    Sqs(SqsBatchResponse),
    /// A Kinesis or DynamoDB Streams batch's response: the sequence number to retry from.
    Stream(StreamsEventResponse),
    /// A Kafka batch's response: each partition's offset to deliver again from.
    Kafka(KafkaEventResponse),
}

/// The tokio runtime a function's `main` runs on: one thread where Lambda runs one invocation at
/// a time (a single malloc arena keeps a warm container's memory flat), and as many worker
/// threads as the instance has vCPUs on Lambda Managed Instances (`AWS_LAMBDA_MAX_CONCURRENCY`
/// above 1), where the invocations in flight would otherwise share one core. Each invocation
/// stays a task of its own, with its own task-local scope. `REDRIVE_WORKER_THREADS` overrides
/// the count (1 to 256).
///
/// ```no_run
/// fn main() -> Result<(), redrive_lambda::Error> {
///     redrive_lambda::runtime()?.block_on(async { Ok(()) })
/// }
/// ```
pub fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    let vcpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let threads = worker_threads(|name| std::env::var(name).ok(), vcpus)?;
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    Ok(builder.enable_all().build()?)
}

/// The worker threads [`runtime`] starts, from the environment (`lookup`) and the vCPUs.
fn worker_threads(lookup: impl Fn(&str) -> Option<String>, vcpus: usize) -> Result<usize, Error> {
    if let Some(value) = lookup("REDRIVE_WORKER_THREADS") {
        return match value.trim().parse::<usize>() {
            Ok(threads @ 1..=256) => Ok(threads),
            _ => Err(format!(
                "REDRIVE_WORKER_THREADS={value:?}: a number of threads from 1 to 256"
            )
            .into()),
        };
    }
    let concurrent = lookup("AWS_LAMBDA_MAX_CONCURRENCY")
        .and_then(|value| value.trim().parse::<usize>().ok())
        .is_some_and(|max| max > 1);
    Ok(if concurrent { vcpus.max(1) } else { 1 })
}

/// Runs a queue consumer, everything but the record handler: JSON tracing, the settings from the
/// environment (a wrong one stops the function with the variable named), a processor on a lazily
/// configured SQS client, and for every SQS or Kinesis batch the partial batch response and one
/// EMF line. `make_handler` builds the handler from the settings (a circuit breaker from
/// `settings.breaker`, say). With `REDRIVE_IDEMPOTENCY_TABLE` set (and redrive's `dynamodb`
/// feature on) the handler is wrapped in the shared idempotency store, and FIFO attempts are
/// counted with the attempt ledger in the same table (or in `REDRIVE_LEDGER_TABLE`). With
/// `REDRIVE_PAYLOAD_BUCKET` set (and the `s3` feature) large messages go through S3
/// ([`redrive_core::payload`]).
///
/// ```no_run
/// use redrive_core::{Message, RecordError, RecordHandler};
///
/// struct Orders;
///
/// impl RecordHandler for Orders {
///     async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
///         let order: serde_json::Value = message.json()?;
///         match order["amount"].as_u64() {
///             Some(_) => Ok(()),
///             None => Err(RecordError::permanent("invalid_order", "no amount")),
///         }
///     }
/// }
///
/// fn main() -> Result<(), redrive_lambda::Error> {
///     redrive_lambda::runtime()?.block_on(redrive_lambda::consume(|_settings| Ok(Orders)))
/// }
/// ```
pub async fn consume<H, F>(make_handler: F) -> Result<(), lambda_runtime::Error>
where
    H: RecordHandler + Send + 'static,
    F: FnOnce(&Settings) -> Result<H, lambda_runtime::Error>,
{
    init_tracing();
    // A panic fails only its record (the processor catches it); log it as JSON like the rest.
    std::panic::set_hook(Box::new(
        |panic| tracing::error!(%panic, "record handler panicked"),
    ));
    let settings = Settings::from_env()?;
    if settings.processor.dlq_url.is_none() {
        tracing::warn!(
            "REDRIVE_DLQ_URL is not set: report-only, every failure is given back to SQS"
        );
    }
    let handler = make_handler(&settings)?;
    let build = |config| with_payloads(Processor::new(SqsQueue::lazy(), config), &settings);
    let processors = Processors {
        intake: build(ProcessorConfig::from(&settings))?,
        probe: build(pause::probe_config(ProcessorConfig::from(&settings)))?,
    };
    match (&settings.idempotency, &settings.ledger_table) {
        (None, None) => serve(&settings, processors, handler).await,
        // Every copy of a message, whichever container it reaches, takes effect once; the
        // ledger shares the store's table (and client) unless it has one of its own.
        #[cfg(feature = "dynamodb")]
        (idempotency, ledger) => {
            use redrive_aws::dynamodb::DynamoDbStore;
            let store = idempotency
                .as_ref()
                .map(|idempotency| Arc::new(DynamoDbStore::lazy(&idempotency.table)));
            let ledger = ledger.as_ref().map(|table| match &store {
                Some(store) if store.table() == table => Arc::clone(store),
                _ => Arc::new(DynamoDbStore::lazy(table)),
            });
            let processors = match ledger {
                Some(ledger) => Processors {
                    intake: processors.intake.with_ledger(ledger.clone()),
                    probe: processors.probe.with_ledger(ledger),
                },
                None => processors,
            };
            match (idempotency, store) {
                (Some(idempotency), Some(store)) => {
                    serve(&settings, processors, idempotency.wrap(handler, store)).await
                }
                _ => serve(&settings, processors, handler).await,
            }
        }
        #[cfg(not(feature = "dynamodb"))]
        (idempotency, ledger) => Err(format!(
            "{} is set, but this function was built without redrive's dynamodb feature: add it \
             to the redrive dependency, or unset the variable",
            match (idempotency, ledger) {
                (Some(idempotency), _) =>
                    format!("REDRIVE_IDEMPOTENCY_TABLE={}", idempotency.table),
                (None, Some(table)) => format!("REDRIVE_LEDGER_TABLE={table}"),
                (None, None) => unreachable!("matched above"),
            }
        )
        .into()),
    }
}

/// The processor with large messages through S3 when `REDRIVE_PAYLOAD_BUCKET` names a bucket.
fn with_payloads(
    processor: Processor<SqsQueue>,
    settings: &Settings,
) -> Result<Processor<SqsQueue>, lambda_runtime::Error> {
    match &settings.payloads {
        None => Ok(processor),
        #[cfg(feature = "s3")]
        Some(payloads) => {
            let store = Arc::new(redrive_aws::s3::S3Payloads::lazy());
            Ok(processor.with_payloads(
                redrive_core::Payloads::new(store, &payloads.bucket).with_prefix(&payloads.prefix),
            ))
        }
        #[cfg(not(feature = "s3"))]
        Some(payloads) => Err(format!(
            "REDRIVE_PAYLOAD_BUCKET={} is set, but this function was built without redrive's s3 \
             feature: add it to the redrive dependency, or unset the variable",
            payloads.bucket
        )
        .into()),
    }
}

/// The consumer's processors: the mapping's invocations', and the intake controller's probes'
/// ([`pause::probe_config`]).
struct Processors {
    intake: Processor<SqsQueue>,
    probe: Processor<SqsQueue>,
}

/// The runtime loop of [`consume`], with the handler it chose: one processor, handler and set
/// of clients for every invocation, however many Lambda runs at once.
async fn serve<H: RecordHandler + Send + 'static>(
    settings: &Settings,
    processors: Processors,
    handler: H,
) -> Result<(), lambda_runtime::Error> {
    let pause = settings.pause.clone().map(PauseSignal::new);
    let shared = Arc::new((
        processors,
        handler,
        settings.metrics_namespace.clone(),
        pause,
    ));
    run(move |event| {
        let shared = Arc::clone(&shared);
        // Boxed: the type of the whole invocation (runtime, processor, handler) nests deeply
        // enough to need a raised recursion_limit in every crate that instantiates it.
        let invocation: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
            let (processors, handler, namespace, pause) = &*shared;
            let context = event.context.clone();
            let probe = is_probe(&context);
            let processor = if probe {
                &processors.probe
            } else {
                &processors.intake
            };
            let processed = handle_event(event, processor, handler).await?;
            if let Some(pause) = pause {
                ask_for_pause(pause, handler, processor.queue(), &context).await;
            }
            let probe = probe.then(|| ProbeVerdict::of(&processed.report));
            let response = respond(processed, namespace, &context);
            Ok::<_, lambda_runtime::Error>(match probe {
                Some(probe) => Answer::Probe { response, probe },
                None => Answer::Batch(response),
            })
        });
        invocation
    })
    .await
}

/// Asks the intake controller to pause this function's mappings when its handler's downstream
/// has been down long enough; a request that cannot be sent is logged, and asked again later.
async fn ask_for_pause<H: RecordHandler, Q: QueuePort>(
    pause: &PauseSignal,
    handler: &H,
    queue: &Q,
    context: &Context,
) {
    let function = context.env_config.function_name.as_str();
    let Some(request) = pause.due(handler.outage_since(), function, SystemClock.now_ms()) else {
        return;
    };
    match pause.ask(queue, &request).await {
        Ok(()) => tracing::warn!(
            outage_since_ms = request.outage_since_ms,
            "downstream down: asked for the intake to be paused"
        ),
        Err(error) => tracing::error!(%error, "could not ask for the intake to be paused"),
    }
}

/// Whether this invocation is the intake controller's probe (`redrive::intake`).
fn is_probe(context: &Context) -> bool {
    context
        .client_context
        .as_ref()
        .is_some_and(|client| client.custom.contains_key(PROBE_KEY))
}

/// `lambda_runtime::run_concurrent` for a handler of the event's bytes as Lambda sent them.
///
/// On Lambda Managed Instances (`AWS_LAMBDA_MAX_CONCURRENCY` above 1) the runtime polls for that
/// many invocations at once, each on a task of its own; elsewhere it takes one at a time. Each
/// invocation's deadline, request id and trace id come with its own [`LambdaEvent`]; the runtime
/// sets the process-wide `_X_AMZN_TRACE_ID` only in the sequential mode, so read the trace id
/// from the context (docs/managed-instances.md).
///
/// The runtime gives a handler only a deserialised payload, and deserialising a 6 MB batch even
/// into a `RawValue` is a full JSON parse that takes as long as all of the processor's own work
/// (docs/performance.md, "Performance"); so the body is handed past that step, which is left to
/// read `null`.
pub async fn run<F, Fut, R>(handler: F) -> Result<(), lambda_runtime::Error>
where
    F: Fn(LambdaEvent<Bytes>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<R, lambda_runtime::Error>> + Send + 'static,
    R: Serialize + Send + 'static,
{
    let service = service_fn(move |event: LambdaEvent<()>| {
        // The runtime calls this inside `PassBodyService::call`, where the body is in scope.
        let handled = EVENT_BODY
            .try_with(Bytes::clone)
            .map(|body| handler(LambdaEvent::new(body, event.context)));
        async move {
            match handled {
                Ok(handled) => handled.await,
                Err(_) => Err("the event body was not passed to the handler".into()),
            }
        }
    });
    Runtime::new(service)
        .layer(TracingLayer::new())
        .layer(PassBody)
        .run_concurrent()
        .await
}

tokio::task_local! {
    static EVENT_BODY: Bytes;
}

/// Takes each invocation's body out of the runtime's way (see [`run`]).
struct PassBody;

impl<S> Layer<S> for PassBody {
    type Service = PassBodyService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        PassBodyService(inner)
    }
}

#[derive(Clone)]
struct PassBodyService<S>(S);

impl<S: Service<LambdaInvocation>> Service<LambdaInvocation> for PassBodyService<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut invocation: LambdaInvocation) -> Self::Future {
        let body = std::mem::replace(&mut invocation.body, Bytes::from_static(b"null"));
        EVENT_BODY.sync_scope(body, || self.0.call(invocation))
    }
}

/// Handles an SQS, Kinesis, DynamoDB Streams or Kafka batch, for a function behind any of them.
///
/// The source the event names ([`redrive_event::event_source`], read from its first record)
/// decides which parse it gets, once. An event that names another source, or none, is read as
/// SQS's: that parse says what is wrong with it.
pub async fn handle_event<Q: QueuePort, H: RecordHandler>(
    event: LambdaEvent<Bytes>,
    processor: &Processor<Q>,
    handler: &H,
) -> Result<Processed<BatchResponse>, BatchError> {
    let (payload, context) = event.into_parts();
    let processed = match redrive_event::event_source(&payload) {
        // Amazon MSK, and self-managed Apache Kafka.
        Some("aws:kafka" | "SelfManagedKafka") => {
            let kafka = KafkaEvent::from_slice(&payload)?;
            let processed = processor
                .process_kafka(handler, &kafka, invocation(&context))
                .await?;
            processed.map_response(BatchResponse::Kafka)
        }
        Some("aws:kinesis") => {
            let kinesis = KinesisEvent::from_slice(&payload)?;
            let processed = processor
                .process_stream(handler, &kinesis.records, invocation(&context))
                .await?;
            processed.map_response(BatchResponse::Stream)
        }
        Some("aws:dynamodb") => {
            let dynamodb = DynamoDbEvent::from_slice(&payload)?;
            let processed = processor
                .process_stream(handler, &dynamodb.records, invocation(&context))
                .await?;
            processed.map_response(BatchResponse::Stream)
        }
        _ => {
            let mut decoded = String::new();
            let sqs = SqsEvent::from_slice_in(&payload, &mut decoded)?;
            let processed = process_sqs(&sqs, &context, processor, handler).await?;
            processed.map_response(BatchResponse::Sqs)
        }
    };
    Ok(processed)
}

/// Handles one SQS batch: parses the event without copying and carries out every record's fate.
pub async fn handle_batch<Q: QueuePort, H: RecordHandler>(
    event: LambdaEvent<Bytes>,
    processor: &Processor<Q>,
    handler: &H,
) -> Result<Processed, BatchError> {
    let (payload, context) = event.into_parts();
    let mut decoded = String::new();
    let sqs = SqsEvent::from_slice_in(&payload, &mut decoded)?;
    process_sqs(&sqs, &context, processor, handler).await
}

async fn process_sqs<Q: QueuePort, H: RecordHandler>(
    sqs: &SqsEvent<'_>,
    context: &Context,
    processor: &Processor<Q>,
    handler: &H,
) -> Result<Processed, BatchError> {
    tracing::debug!(
        records = sqs.records.len(),
        deadline_ms = context.deadline,
        "batch received"
    );
    processor
        .process(handler, &sqs.records, invocation(context))
        .await
}

/// The invocation as the processor records it in failure metadata.
fn invocation(context: &Context) -> Invocation<'_> {
    let mut invocation =
        Invocation::from(absolute_deadline(context.deadline, SystemClock.now_ms()));
    invocation.function_name =
        Some(context.env_config.function_name.as_str()).filter(|name| !name.is_empty());
    invocation.function_version =
        Some(context.env_config.version.as_str()).filter(|version| !version.is_empty());
    invocation.request_id = Some(context.request_id.as_str()).filter(|id| !id.is_empty());
    invocation.trace_id = context.xray_trace_id.as_deref();
    invocation
}

/// Writes the batch's figures as one EMF line on stdout (CloudWatch makes metrics of it), with the
/// invocation's request id and trace id, and returns the partial batch response for Lambda.
pub fn respond<R>(processed: Processed<R>, metrics_namespace: &str, context: &Context) -> R {
    println!(
        "{}",
        processed.report.emf_line(
            metrics_namespace,
            &invocation(context),
            SystemClock.now_ms()
        )
    );
    processed.response
}

/// Logging as Lambda wants it: JSON when the function's log format is JSON
/// (`AWS_LAMBDA_LOG_FORMAT`), at the level of `AWS_LAMBDA_LOG_LEVEL` or `RUST_LOG` (a level name;
/// INFO by default). Lambda stamps the time itself. Level names only, no filter directives: those
/// would bring a regex engine into every function binary.
pub fn init_tracing() {
    use tracing_subscriber::filter::LevelFilter;
    let level = ["AWS_LAMBDA_LOG_LEVEL", "RUST_LOG"]
        .iter()
        .find_map(|name| std::env::var(name).ok())
        .and_then(|level| level.parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_target(false)
        .without_time();
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    if json {
        subscriber.json().init()
    } else {
        subscriber.init()
    }
}

/// Lambda sends the deadline in ms since the epoch; `cargo lambda watch` sends its timeout
/// (600000) instead. No real deadline lies before 2001, so such a value is read as relative.
pub fn absolute_deadline(deadline_ms: u64, now_ms: u64) -> u64 {
    const YEAR_2001_MS: u64 = 978_307_200_000;
    if deadline_ms < YEAR_2001_MS {
        now_ms.saturating_add(deadline_ms)
    } else {
        deadline_ms
    }
}

#[cfg(test)]
mod tests {
    use super::{absolute_deadline, worker_threads};

    /// Issue 43, item 11: on Managed Instances the invocations in flight get every vCPU, elsewhere
    /// one thread as before; an operator's count wins, and a wrong one stops the function.
    #[test]
    fn worker_threads_follow_the_instance_only_where_lambda_runs_invocations_at_once() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            }
        };
        assert_eq!(worker_threads(env(&[]), 4).unwrap(), 1);
        assert_eq!(
            worker_threads(env(&[("AWS_LAMBDA_MAX_CONCURRENCY", "1")]), 4).unwrap(),
            1
        );
        assert_eq!(
            worker_threads(env(&[("AWS_LAMBDA_MAX_CONCURRENCY", "8")]), 4).unwrap(),
            4
        );
        assert_eq!(
            worker_threads(
                env(&[
                    ("AWS_LAMBDA_MAX_CONCURRENCY", "8"),
                    ("REDRIVE_WORKER_THREADS", "1")
                ]),
                4
            )
            .unwrap(),
            1
        );
        let wrong = worker_threads(env(&[("REDRIVE_WORKER_THREADS", "0")]), 4).unwrap_err();
        assert!(
            wrong.to_string().contains("REDRIVE_WORKER_THREADS"),
            "{wrong}"
        );
    }

    #[test]
    fn a_relative_deadline_from_cargo_lambda_watch_is_made_absolute() {
        let now = 1_795_327_660_195;
        assert_eq!(absolute_deadline(600_000, now), now + 600_000);
        assert_eq!(
            absolute_deadline(now + 30_000, now),
            now + 30_000,
            "Lambda's absolute deadline"
        );
        assert_eq!(absolute_deadline(0, now), now, "no time left");
    }
}
