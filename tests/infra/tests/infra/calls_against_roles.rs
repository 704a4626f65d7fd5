//! Every AWS call the functions' code makes, recorded through the ports while the sample events
//! run, must be granted to that function's role: the action, on the Terraform resource that
//! stands for the queue or function it was made on.
use std::sync::{Arc, Mutex};

use redrive::config::{EventRedriveSettings, ReprocessSettings};
use redrive::event::SqsRecord;
use redrive::eventbridge::{EventRedrive, InvokePort, Reply};
use redrive::port::{ForwardingPort, QueuePort};
use redrive::reprocess::{ReprocessCommand, Reprocessor};
use redrive::testing::{RecordingInvoker, RecordingQueue};
use redrive::PortError;
use redrive::{ErrorClass, Processor, ProcessorConfig, SqsEvent};

use redrive_infra::rules::iam::statements;
use redrive_infra::{parse, sources};

/// (action, what it was called on: a queue or function name, `:`-qualified when it was).
type Log = Arc<Mutex<Vec<(&'static str, String)>>>;

/// Records the action of every call before passing it on.
struct Audited<P> {
    inner: P,
    log: Log,
}

impl<P> Audited<P> {
    fn note(&self, action: &'static str, target: &str) {
        // A queue URL or ARN ends in the queue's name; a function ARN after `function:`.
        let name = match target.split_once(":function:") {
            Some((_, function)) => function,
            None => target.rsplit(['/', ':']).next().unwrap_or_default(),
        };
        self.log.lock().unwrap().push((action, name.to_owned()));
    }
}

impl<P: QueuePort> ForwardingPort for Audited<P> {
    type Inner = P;
    fn inner(&self) -> &P {
        &self.inner
    }
    fn on_call(&self, action: &'static str, queue: &str) {
        self.note(action, queue);
    }
}

impl<P: InvokePort> InvokePort for Audited<P> {
    async fn invoke(
        &self,
        function_arn: &str,
        payload: &str,
        client_context: &str,
        trace_header: Option<&str>,
    ) -> Result<Reply, PortError> {
        self.note("lambda:InvokeFunction", function_arn);
        self.inner
            .invoke(function_arn, payload, client_context, trace_header)
            .await
    }
}

fn audited<P>(inner: P, log: &Log) -> Audited<P> {
    Audited {
        inner,
        log: log.clone(),
    }
}

fn sample(file: &str) -> String {
    std::fs::read_to_string(redrive_infra::repo_root().join("events").join(file)).unwrap()
}

fn processor(queue: Audited<RecordingQueue>, dlq: &str) -> Processor<Audited<RecordingQueue>> {
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(format!("https://sqs.local/123456789012/{dlq}"));
    Processor::new(queue, config)
}

/// Which statement of `module`'s function `call` grants `action` on `resource` (the
/// Terraform expression of the queue or function), or what is missing.
fn granted(
    modules: &[redrive_infra::Module],
    module: &str,
    call: &str,
    action: &str,
    resource: &str,
) -> Result<(), String> {
    let prefix = format!("{module} module {call} statement");
    // A statement's actions may be a local (`local.queue_access`): read it where it is set.
    let local = |reference: &str| {
        let text = (modules.iter().find(|m| m.dir == module))
            .map_or_else(String::new, |m| m.local_of(reference));
        (!text.is_empty()).then_some(text)
    };
    statements(modules)
        .into_iter()
        .find(|(where_, actions, resources, _)| {
            let actions = local(actions.trim()).unwrap_or_else(|| actions.clone());
            where_.starts_with(&prefix)
                && actions.contains(&format!("\"{action}\""))
                && resources.contains(resource)
        })
        .map(|_| ())
        .ok_or_else(|| format!("{module} {call}: no statement grants {action} on {resource}"))
}

/// The logged calls (once each) that `modules` do not grant to `module`'s function `call`,
/// `resource_of` naming the Terraform resource that stands for each target.
fn missing(
    modules: &[redrive_infra::Module],
    (module, call): (&str, &str),
    calls: &[(&'static str, String)],
    resource_of: impl Fn(&str) -> &'static str,
) -> Vec<String> {
    calls
        .iter()
        .filter_map(|(action, target)| {
            let granted = |resource| granted(modules, module, call, action, resource);
            granted(resource_of(target))
                // A qualified ARN needs a qualified grant (IAM matches it no other way).
                .and_then(|()| {
                    if target.contains(':') {
                        granted("${arn}:*")
                    } else {
                        Ok(())
                    }
                })
                .err()
        })
        .collect()
}

/// Every call logged, once each.
fn calls(log: &Log) -> Vec<(&'static str, String)> {
    let mut calls = log.lock().unwrap().clone();
    calls.sort();
    calls.dedup();
    calls
}

fn consumer_queue(queue: &str) -> &'static str {
    if queue.ends_with("-dlq") {
        "local.dlq.arn"
    } else {
        "local.queue.arn"
    }
}

/// The SQS consumer's calls on the standard and the FIFO sample batches.
async fn sqs_consumer_calls() -> Vec<(&'static str, String)> {
    let log = Log::default();
    let processor = processor(audited(RecordingQueue::default(), &log), "orders-dlq");
    let handler = orders_handler();
    for file in ["sqs-mixed-batch.json", "sqs-fifo-two-groups.json"] {
        let json = sample(file);
        let event = SqsEvent::parse(&json).unwrap();
        processor
            .process(&handler, &event.records, u64::MAX / 2)
            .await
            .unwrap();
    }
    calls(&log)
}

fn orders_handler() -> orders::OrdersHandler<orders::payments::SimulatedPayments> {
    orders::OrdersHandler::new(
        orders::payments::SimulatedPayments::from_env_file(
            &redrive_infra::repo_root().join("events/sqs-consumer.env"),
        )
        .unwrap(),
        redrive::breaker::TenantBreakers::new(
            "payments",
            redrive::breaker::BreakerSettings::default(),
            redrive::breaker::TenantBreakerSettings::default(),
        ),
    )
}

#[tokio::test]
async fn the_sqs_consumers_calls_are_granted_to_its_role_and_a_missing_grant_is_caught() {
    let calls = sqs_consumer_calls().await;
    for expected in [
        "sqs:GetQueueUrl",
        "sqs:SendMessage",
        "sqs:ChangeMessageVisibility",
    ] {
        assert!(calls.iter().any(|(a, _)| *a == expected), "{calls:?}");
    }
    let consumer = ("modules/sqs-consumer", "function");
    let modules = parse(&sources());
    assert_eq!(
        missing(&modules, consumer, &calls, consumer_queue),
        Vec::<String>::new()
    );
    let broken = redrive_infra::broken(
        redrive_infra::CONSUMER,
        "\"sqs:ChangeMessageVisibility\", ",
        "",
    );
    assert_eq!(
        missing(&broken, consumer, &calls, consumer_queue),
        ["modules/sqs-consumer function: no statement grants sqs:ChangeMessageVisibility on local.queue.arn"]
    );
}

#[tokio::test]
async fn the_eventbridge_redrives_calls_are_granted_to_its_role() {
    let log = Log::default();
    let processor = processor(
        audited(RecordingQueue::default(), &log),
        "eventbridge-redrive-parked",
    );
    let invoker = RecordingInvoker::default();
    // A refused invoke is retried: a copy goes back to the queue the failure came from.
    invoker.refuse(
        "arn:aws:lambda:us-east-1:123456789012:function:orders-events",
        "TooManyRequestsException: Rate exceeded",
    );
    let handler = EventRedrive::new(
        audited(RecordingQueue::default(), &log),
        audited(invoker, &log),
        EventRedriveSettings::from_lookup([], |_| None).unwrap(),
    );
    for file in ["eventbridge-dlq-batch.json", "lambda-on-failure-batch.json"] {
        let json = sample(file);
        let event = SqsEvent::parse(&json).unwrap();
        processor
            .process(&handler, &event.records, u64::MAX / 2)
            .await
            .unwrap();
    }
    let calls = calls(&log);
    let unmet = missing(
        &parse(&sources()),
        ("modules/recovery", "event_redrive"),
        &calls,
        |target| match target {
            "orders-bus-target-dlq" | "orders-events-failures" => "local.event_arns",
            "eventbridge-redrive-parked" => "aws_sqs_queue.parked_dlq[0].arn",
            "orders-audit" => "var.sqs_target_arns",
            _ => "var.function_target_arns",
        },
    );
    assert_eq!(unmet, Vec::<String>::new());
    assert!(
        calls
            .iter()
            .any(|(a, t)| *a == "lambda:InvokeFunction" && t.ends_with(":$LATEST")),
        "the on-failure record's qualified ARN was invoked: {calls:?}"
    );
}

#[tokio::test]
async fn the_dlq_reprocessors_calls_are_granted_to_its_role() {
    let log = Log::default();
    let dlq = "https://sqs.local/123456789012/orders-dlq";
    let queue = RecordingQueue::default();
    let json = sample("sqs-mixed-batch.json");
    let event = SqsEvent::parse(&json).unwrap();
    let mut dead: Vec<SqsRecord<'static>> = Vec::new();
    let recorder = Processor::new(RecordingQueue::default(), {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = Some(dlq.into());
        processor_config
    });
    let handler = orders_handler();
    recorder
        .process(&handler, &event.records, u64::MAX / 2)
        .await
        .unwrap();
    for (i, letter) in recorder.queue().sent_to(dlq).into_iter().enumerate() {
        let mut record = SqsRecord {
            message_id: Some(format!("dead-{i}").into()),
            receipt_handle: Some(format!("rh-{i}").into()),
            body: Some(redrive::event::Body::from(letter.body.to_string())),
            ..SqsRecord::default()
        };
        for (name, value) in letter.attributes {
            record.message_attributes.insert(name, value);
        }
        dead.push(record);
    }
    queue.stock(dlq, dead);
    let settings = ReprocessSettings::from_lookup(["REDRIVE_ARCHIVE_QUEUE_URL"], |name| {
        (name == "REDRIVE_ARCHIVE_QUEUE_URL")
            .then(|| "https://sqs.local/123456789012/redrive-archive".into())
    })
    .unwrap();
    let plan = ReprocessCommand {
        source: Some(dlq.into()),
        force: true,
        error_classes: vec![ErrorClass::Transient, ErrorClass::Permanent],
        ..ReprocessCommand::default()
    }
    .plan(&settings)
    .unwrap();
    Reprocessor::new(audited(queue, &log), &settings)
        .run(&plan, None, |_| {})
        .await
        .unwrap();
    let calls = calls(&log);
    let unmet = missing(
        &parse(&sources()),
        ("modules/recovery", "reprocessor"),
        &calls,
        |target| match target {
            "orders-dlq" => "each.value.arn",
            "redrive-archive" => "aws_sqs_queue.archive.arn",
            _ => "each.value.origin_arn",
        },
    );
    assert_eq!(unmet, Vec::<String>::new());
    for expected in ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:SendMessage"] {
        assert!(calls.iter().any(|(a, _)| *a == expected), "{calls:?}");
    }
}
