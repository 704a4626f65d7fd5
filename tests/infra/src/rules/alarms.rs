//! Alarms: every DLQ, stream mapping and EMF metric watched, where its function writes.

use hcl::{Block, Expression, ObjectKey};

use crate::rules::consumers::{event_source_queues, present};
use crate::{attr, child, label, text, Module};

/// Each DLQ (a queue whose resource name contains `dlq`) has exactly one `dlq-alarm`, and that
/// module's alarm is ApproximateNumberOfMessagesVisible, Maximum, 60 s, > 0, notBreaching, with
/// alarm and OK actions.
pub fn dlq_alarms(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for dlq in module
            .blocks("resource", "aws_sqs_queue")
            .filter(|q| label(q, 1).contains("dlq"))
        {
            // A queue made only under a condition (`count`) is referred to as its first instance.
            let instance = if present(dlq, "count") { "[0]" } else { "" };
            let reference = format!("aws_sqs_queue.{}{instance}.name", label(dlq, 1));
            let alarms = module
                .calls("dlq-alarm")
                .filter(|call| {
                    let queue_name = attr(call, "queue_name").unwrap_or_default();
                    queue_name == reference
                        || module
                            .local_of(&queue_name)
                            .contains(&format!("name = {reference}"))
                })
                .count();
            if alarms != 1 {
                violations.push(format!(
                    "{}: {reference} has {alarms} dlq-alarm modules, expected 1",
                    module.dir
                ));
            }
        }
    }
    let module = modules
        .iter()
        .find(|m| m.dir == "modules/dlq-alarm")
        .expect("modules/dlq-alarm");
    let alarms: Vec<&Block> = module
        .blocks("resource", "aws_cloudwatch_metric_alarm")
        .collect();
    if alarms.len() != 3 {
        violations.push(format!("dlq-alarm: {} alarms, expected 3", alarms.len()));
        return violations;
    }
    for (label_, metric, statistic, threshold) in [
        (
            "dlq_depth",
            "ApproximateNumberOfMessagesVisible",
            "Maximum",
            "0",
        ),
        (
            "oldest_message_age",
            "ApproximateAgeOfOldestMessage",
            "Maximum",
            "var.oldest_message_age_seconds",
        ),
        ("arrivals", "NumberOfMessagesSent", "Sum", "0"),
    ] {
        let Some(alarm) = alarms.iter().find(|a| label(a, 1) == label_) else {
            violations.push(format!("dlq-alarm: no {label_} alarm"));
            continue;
        };
        let (metric, statistic) = (format!("\"{metric}\""), format!("\"{statistic}\""));
        let expected = [
            ("metric_name", metric.as_str()),
            ("statistic", statistic.as_str()),
            ("period", "60"),
            ("threshold", threshold),
            ("comparison_operator", "\"GreaterThanThreshold\""),
            ("treat_missing_data", "\"notBreaching\""),
            ("dimensions", "{ QueueName = var.queue_name }"),
        ];
        for (name, value) in expected {
            if attr(alarm, name).as_deref() != Some(value) {
                violations.push(format!(
                    "dlq-alarm {label_}: {name} is {:?}, expected {value}",
                    attr(alarm, name)
                ));
            }
        }
        for actions in ["alarm_actions", "ok_actions"] {
            if attr(alarm, actions).is_none_or(|a| a == "[]") {
                violations.push(format!("dlq-alarm {label_}: no {actions}"));
            }
        }
    }
    violations
}

/// Every Kinesis stream is watched from its own side: an alarm on its
/// `GetRecords.IteratorAgeMilliseconds` that counts missing data as breaching, so that a stopped
/// mapping (which silences the function's `IteratorAge`) is an alarm too. A stream made on a
/// condition (`count`) has its alarm on the same one. Every Kafka mapping likewise: its
/// function's `OffsetLag`, missing data breaching.
pub fn stream_alarms(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for stream in module.blocks("resource", "aws_kinesis_stream") {
            let label_ = label(stream, 1);
            let names = [
                format!("aws_kinesis_stream.{label_}.name"),
                format!("aws_kinesis_stream.{label_}[0].name"),
            ];
            let watched = module
                .blocks("resource", "aws_cloudwatch_metric_alarm")
                .any(|alarm| {
                    attr(alarm, "namespace").as_deref() == Some("\"AWS/Kinesis\"")
                        && attr(alarm, "metric_name").as_deref()
                            == Some("\"GetRecords.IteratorAgeMilliseconds\"")
                        && attr(alarm, "dimensions")
                            .is_some_and(|d| names.iter().any(|name| d.contains(name)))
                        && attr(alarm, "treat_missing_data").as_deref() == Some("\"breaching\"")
                        && attr(alarm, "count") == attr(stream, "count")
                });
            if !watched {
                violations.push(format!(
                    "{}: {}: no alarm on the stream's iterator age that breaches on missing data",
                    module.dir,
                    label(stream, 1)
                ));
            }
        }
        // A Kafka mapping (one with `topics`): Lambda's OffsetLag for its function, missing data
        // breaching, so that a mapping that stops polling is an alarm too.
        for mapping in module
            .blocks("resource", "aws_lambda_event_source_mapping")
            .filter(|mapping| present(mapping, "topics"))
        {
            let watched = module
                .blocks("resource", "aws_cloudwatch_metric_alarm")
                .any(|alarm| {
                    attr(alarm, "namespace").as_deref() == Some("\"AWS/Lambda\"")
                        && attr(alarm, "metric_name").as_deref() == Some("\"OffsetLag\"")
                        && attr(alarm, "treat_missing_data").as_deref() == Some("\"breaching\"")
                });
            if !watched {
                violations.push(format!(
                    "{}: {}: no alarm on the Kafka mapping's offset lag that breaches on missing data",
                    module.dir,
                    label(mapping, 1)
                ));
            }
        }
    }
    violations
}

/// An alarm on an EMF figure of ours (`var.metrics_namespace`) keeps its state through periods
/// without data (`treat_missing_data = "ignore"`): the figures come only with invocations and
/// runs, and "notBreaching" turned one incident into an ALARM and a false OK every few minutes.
pub fn emf_alarm_states(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for alarm in module.blocks("resource", "aws_cloudwatch_metric_alarm") {
            let name = format!("{}: {}", module.dir, label(alarm, 1));
            let namespace = attr(alarm, "namespace").unwrap_or_default();
            let missing = attr(alarm, "treat_missing_data").unwrap_or_default();
            if namespace == "var.metrics_namespace" && missing != "\"ignore\"" {
                violations.push(format!("{name}: treat_missing_data {missing}"));
            }
            let Some(entries) = alarm_entries(module, alarm) else {
                violations.push(format!(
                    "{name}: for_each over {}, not a local map",
                    attr(alarm, "for_each").unwrap_or_default()
                ));
                continue;
            };
            // A plain alarm's own fields were checked above.
            for (key, field) in entries.into_iter().filter(|(key, _)| !key.is_empty()) {
                let treatment = match missing.as_str() {
                    "each.value.missing" => field("missing"),
                    _ => missing.clone(),
                };
                if field("namespace") == "var.metrics_namespace" && treatment != "\"ignore\"" {
                    violations.push(format!("{name}[{key}]: treat_missing_data {treatment}"));
                }
            }
        }
    }
    violations
}

/// Figures of ours that count what one batch did, and that an alarm would take for a state: `Held`
/// counts the batches that hold a group, and the next batch of another group reports 0 while the
/// group stays held (its head comes back every 11 h 40 min). Alarms watch the gauge instead.
const FLEETING_COUNTS: [(&str, &str); 1] = [("Held", "HeldHeads")];

/// No alarm watches a per-batch count as if it were a state (`FLEETING_COUNTS`), and the gauges
/// that stand for them are read with `Maximum` (every container reports the whole count).
pub fn gauge_alarms(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for alarm in module.blocks("resource", "aws_cloudwatch_metric_alarm") {
            let name = format!("{}: {}", module.dir, label(alarm, 1));
            let Some(entries) = alarm_entries(module, alarm) else {
                continue;
            };
            let direct = |wanted: &str| attr(alarm, wanted).unwrap_or_default();
            for (key, field) in entries {
                let value = |wanted: &str, plain: &str| match direct(plain).as_str() {
                    reference if reference.starts_with("each.value.") => field(wanted),
                    _ => direct(plain),
                };
                let metric = value("metric", "metric_name");
                let statistic = value("statistic", "statistic");
                let name = if key.is_empty() {
                    name.clone()
                } else {
                    format!("{name}[{key}]")
                };
                for (count, gauge) in FLEETING_COUNTS {
                    if metric == format!("\"{count}\"") {
                        violations.push(format!(
                            "{name}: watches {count}, a per-batch count that falls to 0 while the state lasts: watch {gauge}"
                        ));
                    }
                    if metric == format!("\"{gauge}\"") && statistic != "\"Maximum\"" {
                        violations.push(format!(
                            "{name}: {gauge} read with {statistic}, not Maximum"
                        ));
                    }
                }
            }
        }
    }
    violations
}

/// The entries an alarm resource stands for, each with a reader of its fields: one nameless entry
/// for a plain alarm (whose fields are read from the resource), one per key of the local map a
/// `for_each` runs over; `None` when the `for_each` is built by an expression that holds our
/// figures, which could then not be checked per entry.
#[allow(clippy::type_complexity)]
fn alarm_entries<'m>(
    module: &'m Module,
    alarm: &'m Block,
) -> Option<Vec<(String, Box<dyn Fn(&str) -> String + 'm>)>> {
    if attr(alarm, "namespace").unwrap_or_default() != "each.value.namespace" {
        let plain = move |wanted: &str| attr(alarm, wanted).unwrap_or_default();
        return Some(vec![(String::new(), Box::new(plain))]);
    }
    let entries = attr(alarm, "for_each").unwrap_or_default();
    let local = entries.split("local.").nth(1).unwrap_or_default();
    let local = local.split_whitespace().next().unwrap_or_default();
    let Some(Expression::Object(map)) = module
        .bodies
        .iter()
        .flat_map(|body| body.blocks())
        .filter(|block| block.identifier() == "locals")
        .flat_map(|block| block.body().attributes())
        .find(|attribute| attribute.key() == local)
        .map(|attribute| attribute.expr().clone())
    else {
        let ours = module
            .local_of(&format!("local.{local}"))
            .contains("var.metrics_namespace");
        return (!ours).then(Vec::new);
    };
    let mut found = Vec::new();
    for (key, entry) in map {
        let Expression::Object(fields) = entry else {
            continue;
        };
        let key = match key {
            ObjectKey::Identifier(i) => i.to_string(),
            other => other.to_string(),
        };
        let field = move |wanted: &str| {
            fields
                .iter()
                .find(|(k, _)| matches!(k, ObjectKey::Identifier(i) if i.as_str() == wanted))
                .map(|(_, v)| text(v))
                .unwrap_or_default()
        };
        found.push((key, Box::new(field) as Box<dyn Fn(&str) -> String>));
    }
    Some(found)
}

/// Every DLQ the scheduled reprocessor drains (`var.dlqs`) has an alarm on the age of what the runs
/// leave there (`OldestLeftSeconds`, Maximum): every run receives those messages again, and SQS
/// leaves a message received three times out of the DLQ's `ApproximateAgeOfOldestMessage`, so
/// nothing else sees them age towards the retention.
pub fn left_message_alarms(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        let drains = module.blocks("variable", "dlqs").next().is_some();
        if !drains {
            continue;
        }
        let watched = module
            .blocks("resource", "aws_cloudwatch_metric_alarm")
            .any(|alarm| {
                attr(alarm, "for_each").as_deref() == Some("var.dlqs")
                    && attr(alarm, "metric_name").as_deref() == Some("\"OldestLeftSeconds\"")
                    && attr(alarm, "statistic").as_deref() == Some("\"Maximum\"")
            });
        if !watched {
            violations.push(format!(
                "{}: no alarm on each DLQ's OldestLeftSeconds (Maximum): what the reprocessor leaves expires unseen",
                module.dir
            ));
        }
    }
    violations
}

/// The DLQs a function drains within seconds (the queues the EventBridge redrive reads) have
/// their arrivals alarmed (`drained = true`): their depth, sampled each minute, would rarely show
/// a message.
pub fn drained_dlqs(modules: &[Module]) -> Vec<String> {
    let queues = event_source_queues(modules);
    if queues.is_empty() {
        return vec!["no queue read by the EventBridge redrive found".into()];
    }
    queues
        .into_iter()
        .filter(|(module, queue)| {
            !module.calls("dlq-alarm").any(|call| {
                attr(call, "queue_name") == Some(format!("aws_sqs_queue.{queue}.name"))
                    && attr(call, "drained").as_deref() == Some("true")
            })
        })
        .map(|(module, queue)| {
            format!(
                "{}: aws_sqs_queue.{queue}.name is drained by the EventBridge redrive but its dlq-alarm does not count arrivals",
                module.dir
            )
        })
        .collect()
}

/// `path` with its `..` and `.` steps resolved (the paths are relative to `infra/`).
/// A module that alarms on its functions' EMF metrics in `var.metrics_namespace` has every one of
/// its functions write them there (`REDRIVE_METRICS_NAMESPACE`): else a namespace other than the
/// default leaves the alarms watching an empty one, OK for ever.
pub fn metrics_namespaces(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        if module
            .blocks("variable", "metrics_namespace")
            .next()
            .is_none()
        {
            continue;
        }
        for call in module.calls("function") {
            let environment = attr(call, "environment").unwrap_or_default();
            if !environment.contains("REDRIVE_METRICS_NAMESPACE = var.metrics_namespace") {
                violations.push(format!(
                    "{}: {}: its EMF metrics do not go to var.metrics_namespace",
                    module.dir,
                    label(call, 0)
                ));
            }
        }
    }
    violations
}

/// A mapping whose events are counted (`metrics_config`) has an alarm on its
/// `FailedInvokeEventCount`. With partial batch responses that figure counts every event a batch
/// gives back (Lambda developer guide, "Event source mapping metrics"), which redrive does on every
/// retry in place: such an alarm reads it only where the function ran no invocation (an `IF` over
/// the function's `Invocations`), or it pages on work going as designed.
pub fn mapping_metrics(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for mapping in module.blocks("resource", "aws_lambda_event_source_mapping") {
            let counted = mapping.body().blocks().any(|b| {
                b.identifier() == "metrics_config"
                    || (b.identifier() == "dynamic" && label(b, 0) == "metrics_config")
            });
            let partial = attr(mapping, "function_response_types")
                .is_some_and(|types| types.contains("ReportBatchItemFailures"));
            let uuid = format!("aws_lambda_event_source_mapping.{}.uuid", label(mapping, 1));
            let failed_invokes = |metric: &Block| {
                attr(metric, "metric_name").as_deref() == Some("\"FailedInvokeEventCount\"")
                    && attr(metric, "dimensions").is_some_and(|d| d.contains(&uuid))
            };
            let mut alarmed = false;
            for alarm in module.blocks("resource", "aws_cloudwatch_metric_alarm") {
                let queries: Vec<&Block> = alarm
                    .body()
                    .blocks()
                    .filter(|b| b.identifier() == "metric_query")
                    .collect();
                let queried = queries
                    .iter()
                    .filter_map(|query| child(query, "metric"))
                    .any(failed_invokes);
                if !failed_invokes(alarm) && !queried {
                    continue;
                }
                alarmed = true;
                let gated = queries.iter().any(|query| {
                    child(query, "metric").is_some_and(|metric| {
                        attr(metric, "metric_name").as_deref() == Some("\"Invocations\"")
                    })
                }) && queries
                    .iter()
                    .any(|query| attr(query, "expression").is_some_and(|e| e.contains("IF(")));
                if partial && !gated {
                    violations.push(format!(
                        "{}: {}: alarms on FailedInvokeEventCount alone, which counts every event of a partial batch response",
                        module.dir,
                        label(alarm, 1)
                    ));
                }
            }
            if counted && !alarmed {
                violations.push(format!(
                    "{}: {}: counts its events but no alarm watches its failed invokes",
                    module.dir,
                    label(mapping, 1)
                ));
            }
        }
    }
    violations
}
