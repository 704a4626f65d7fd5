//! Contract tests on `infra/`: the cross-resource rules checkov cannot express, read from the
//! parsed HCL. Each rule is also run on a broken copy of the configuration to show it can fail.
use std::path::{Path, PathBuf};

use hcl::{Block, Body, Expression};

/// Every `.tf` file under `infra/`, as (path, text).
fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with(".terraform") {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "tf") {
                out.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("infra"),
        &mut out,
    );
    out.sort();
    out
}

fn parse(sources: &[(PathBuf, String)]) -> Vec<Body> {
    sources
        .iter()
        .map(|(path, text)| {
            hcl::from_str(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

/// `sources` with `from` replaced by `to` in the file whose path ends with `file`.
fn broken(file: &str, from: &str, to: &str) -> Vec<Body> {
    let mut copy = sources();
    let (_, text) = copy
        .iter_mut()
        .find(|(path, _)| path.ends_with(file))
        .expect("file");
    assert!(text.contains(from), "{file} no longer contains {from:?}");
    *text = text.replacen(from, to, 1);
    parse(&copy)
}

fn blocks<'a>(
    bodies: &'a [Body],
    kind: &'a str,
    type_: &'a str,
) -> impl Iterator<Item = &'a Block> + 'a {
    bodies
        .iter()
        .flat_map(|body| body.blocks())
        .filter(move |block| {
            block.identifier() == kind
                && block.labels().first().is_some_and(|l| l.as_str() == type_)
        })
}

fn label(block: &Block, index: usize) -> &str {
    block.labels().get(index).map_or("", |l| l.as_str())
}

fn attr(block: &Block, name: &str) -> Option<String> {
    block
        .body()
        .attributes()
        .find(|a| a.key() == name)
        .map(|a| text(a.expr()))
}

/// The expression as HCL text, white space collapsed.
fn text(expr: &Expression) -> String {
    let formatted = hcl::format::to_string(expr).unwrap();
    formatted.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each DLQ has exactly one depth alarm: ApproximateNumberOfMessagesVisible, Maximum, 60 s,
/// > 0, notBreaching, with alarm and OK actions.
fn dlq_alarms(bodies: &[Body]) -> Vec<String> {
    let mut violations = Vec::new();
    for dlq in blocks(bodies, "resource", "aws_sqs_queue").filter(|q| label(q, 1).contains("dlq")) {
        let reference = format!("aws_sqs_queue.{}.name", label(dlq, 1));
        let alarms: Vec<&Block> = blocks(bodies, "resource", "aws_cloudwatch_metric_alarm")
            .filter(|a| attr(a, "dimensions").is_some_and(|d| d.contains(&reference)))
            .collect();
        if alarms.len() != 1 {
            violations.push(format!(
                "{reference}: {} depth alarms, expected 1",
                alarms.len()
            ));
            continue;
        }
        let expected = [
            ("metric_name", "\"ApproximateNumberOfMessagesVisible\""),
            ("statistic", "\"Maximum\""),
            ("period", "60"),
            ("threshold", "0"),
            ("comparison_operator", "\"GreaterThanThreshold\""),
            ("treat_missing_data", "\"notBreaching\""),
        ];
        for (name, value) in expected {
            if attr(alarms[0], name).as_deref() != Some(value) {
                violations.push(format!(
                    "{reference} alarm: {name} is {:?}, expected {value}",
                    attr(alarms[0], name)
                ));
            }
        }
        for actions in ["alarm_actions", "ok_actions"] {
            if attr(alarms[0], actions).is_none_or(|a| a == "[]") {
                violations.push(format!("{reference} alarm: no {actions}"));
            }
        }
    }
    violations
}

/// Arguments that only stream sources (Kinesis, DynamoDB, Kafka) take.
const STREAM_ONLY: [&str; 8] = [
    "bisect_batch_on_function_error",
    "starting_position",
    "starting_position_timestamp",
    "parallelization_factor",
    "maximum_retry_attempts",
    "maximum_record_age_in_seconds",
    "tumbling_window_in_seconds",
    "destination_config",
];

/// Every SQS event source mapping reports item failures and carries no stream-only argument.
fn sqs_mappings(bodies: &[Body]) -> Vec<String> {
    let mut violations = Vec::new();
    for mapping in blocks(bodies, "resource", "aws_lambda_event_source_mapping") {
        let name = label(mapping, 1);
        if !attr(mapping, "function_response_types")
            .is_some_and(|t| t.contains("\"ReportBatchItemFailures\""))
        {
            violations.push(format!("{name}: no ReportBatchItemFailures"));
        }
        let sqs =
            attr(mapping, "event_source_arn").is_some_and(|arn| arn.contains("aws_sqs_queue."));
        let present = |arg: &&str| {
            mapping.body().attributes().any(|a| a.key() == *arg)
                || mapping.body().blocks().any(|b| b.identifier() == *arg)
        };
        for arg in STREAM_ONLY.iter().filter(|arg| sqs && present(arg)) {
            violations.push(format!("{name}: {arg} is for stream sources only"));
        }
    }
    violations
}

/// The validation conditions of variable `name` (in any module).
fn validations(bodies: &[Body], name: &str) -> Vec<String> {
    blocks(bodies, "variable", name)
        .flat_map(|variable| {
            variable
                .body()
                .blocks()
                .filter(|b| b.identifier() == "validation")
        })
        .filter_map(|validation| attr(validation, "condition"))
        .collect()
}

/// Visibility timeout >= 6 x function timeout + window; DLQ retention > source retention;
/// maxReceiveCount >= 5 and above the code's attempt limit.
fn queue_rules(bodies: &[Body]) -> Vec<String> {
    let required = [
        ("visibility_timeout_seconds", "var.visibility_timeout_seconds >= 6 * var.function_timeout_seconds + var.batching_window_seconds"),
        ("dlq_message_retention_seconds", "var.dlq_message_retention_seconds > var.message_retention_seconds"),
        ("max_receive_count", "var.max_receive_count >= 5"),
        ("max_receive_count", "var.max_receive_count > var.max_attempts"),
    ];
    required
        .iter()
        .filter(|(variable, rule)| {
            !validations(bodies, variable)
                .iter()
                .any(|c| c.contains(rule))
        })
        .map(|(variable, rule)| format!("variable {variable}: no validation `{rule}`"))
        .collect()
}

/// No wildcard IAM action; `*` resources only where AWS allows nothing narrower.
fn iam(bodies: &[Body]) -> Vec<String> {
    let mut violations = Vec::new();
    for document in blocks(bodies, "data", "aws_iam_policy_document") {
        let key_policy = document.body().blocks().any(|s| {
            s.identifier() == "statement"
                && attr(s, "sid").is_some_and(|sid| sid.contains("CloudWatchPublishes"))
        });
        for statement in document
            .body()
            .blocks()
            .filter(|b| b.identifier() == "statement")
        {
            let actions = attr(statement, "actions").unwrap_or_default();
            let where_ = format!(
                "{} statement {}",
                label(document, 1),
                attr(statement, "sid").unwrap_or_default()
            );
            // The account administering its own key is AWS's default key policy.
            let key_administration =
                key_policy && actions.matches(':').count() == 1 && actions.contains("\"kms:*\"");
            if (actions.contains("\"*\"") || actions.contains(":*\"")) && !key_administration {
                violations.push(format!("{where_}: wildcard action {actions}"));
            }
            let resources = attr(statement, "resources").unwrap_or_default();
            let xray_only = actions.split(',').all(|a| a.contains("xray:Put"));
            if resources.contains("\"*\"") && !xray_only && !key_policy {
                violations.push(format!("{where_}: resource \"*\" for {actions}"));
            }
        }
    }
    violations
}

#[test]
fn the_configuration_keeps_every_rule() {
    let bodies = parse(&sources());
    for (rule, violations) in [
        ("dlq alarms", dlq_alarms(&bodies)),
        ("sqs mappings", sqs_mappings(&bodies)),
        ("queue rules", queue_rules(&bodies)),
        ("iam", iam(&bodies)),
    ] {
        assert!(violations.is_empty(), "{rule}: {violations:#?}");
    }
    assert!(blocks(&bodies, "resource", "aws_sqs_queue").count() >= 2);
    assert_eq!(
        blocks(&bodies, "resource", "aws_lambda_event_source_mapping").count(),
        1
    );
}

#[test]
fn every_module_has_the_standard_files() {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/modules");
    for module in std::fs::read_dir(modules).unwrap() {
        let module = module.unwrap().path();
        for file in [
            "main.tf",
            "variables.tf",
            "outputs.tf",
            "versions.tf",
            "README.md",
        ] {
            assert!(
                module.join(file).exists(),
                "{} has no {file}",
                module.display()
            );
        }
    }
}

const CONSUMER: &str = "modules/sqs-consumer/main.tf";
const CONSUMER_VARIABLES: &str = "modules/sqs-consumer/variables.tf";

#[test]
fn a_dlq_alarm_with_a_threshold_or_a_second_alarm_is_caught() {
    let raised = broken(
        CONSUMER,
        "  threshold           = 0\n",
        "  threshold           = 5\n",
    );
    assert_eq!(
        dlq_alarms(&raised),
        ["aws_sqs_queue.dlq.name alarm: threshold is Some(\"5\"), expected 0"]
    );
    let missing = broken(CONSUMER, "treat_missing_data  = \"notBreaching\"\n  alarm_actions       = [var.alarm_topic_arn]\n  ok_actions          = [var.alarm_topic_arn]\n}\n\nlocals {", "treat_missing_data  = \"missing\"\n  alarm_actions       = [var.alarm_topic_arn]\n}\n\nlocals {");
    assert_eq!(dlq_alarms(&missing).len(), 2, "{:?}", dlq_alarms(&missing));
    let none = broken(
        CONSUMER,
        "dimensions          = { QueueName = aws_sqs_queue.dlq.name }",
        "dimensions          = { QueueName = \"other\" }",
    );
    assert_eq!(
        dlq_alarms(&none),
        ["aws_sqs_queue.dlq.name: 0 depth alarms, expected 1"]
    );
}

#[test]
fn a_mapping_without_item_failures_or_with_bisection_is_caught() {
    let plain = broken(
        CONSUMER,
        "function_response_types            = [\"ReportBatchItemFailures\"]",
        "function_response_types            = []",
    );
    assert_eq!(
        sqs_mappings(&plain),
        ["consumer: no ReportBatchItemFailures"]
    );
    let bisect = broken(
        CONSUMER,
        "  function_response_types ",
        "  bisect_batch_on_function_error     = true\n  function_response_types ",
    );
    assert_eq!(
        sqs_mappings(&bisect),
        ["consumer: bisect_batch_on_function_error is for stream sources only"]
    );
}

#[test]
fn weakened_queue_rules_are_caught() {
    let visibility = broken(
        CONSUMER_VARIABLES,
        ">= 6 * var.function_timeout_seconds",
        ">= 2 * var.function_timeout_seconds",
    );
    assert_eq!(queue_rules(&visibility).len(), 1);
    let retention = broken(
        CONSUMER_VARIABLES,
        "var.dlq_message_retention_seconds > var.message_retention_seconds",
        "var.dlq_message_retention_seconds >= 60",
    );
    assert_eq!(queue_rules(&retention).len(), 1);
    let receives = broken(
        CONSUMER_VARIABLES,
        " && var.max_receive_count > var.max_attempts",
        "",
    );
    assert_eq!(
        queue_rules(&receives),
        ["variable max_receive_count: no validation `var.max_receive_count > var.max_attempts`"]
    );
}

#[test]
fn wildcard_iam_is_caught() {
    let actions = broken(
        CONSUMER,
        "actions   = [\"sqs:SendMessage\"]",
        "actions   = [\"sqs:*\"]",
    );
    assert_eq!(iam(&actions).len(), 1, "{:?}", iam(&actions));
    let resources = broken(
        CONSUMER,
        "resources = [aws_sqs_queue.source.arn, aws_sqs_queue.dlq.arn]",
        "resources = [\"*\"]",
    );
    assert_eq!(iam(&resources).len(), 1, "{:?}", iam(&resources));
}
