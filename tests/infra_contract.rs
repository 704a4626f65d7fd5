//! Contract tests on `infra/`: the cross-resource rules checkov cannot express, read from the
//! parsed HCL. Each rule is also run on a broken copy of the configuration to show it can fail.
//! References are module-local in Terraform, so each rule looks at one module at a time.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use hcl::{Block, Body, Expression, ObjectKey};

fn infra() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("infra")
}

/// Every `.tf` file under `infra/`, as (path relative to `infra/`, text).
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with(".terraform") {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "tf") {
                let relative = path.strip_prefix(infra()).unwrap().display().to_string();
                out.push((relative, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&infra(), &mut out);
    out.sort();
    out
}

/// One Terraform module: the bodies of its files.
struct Module {
    dir: String,
    bodies: Vec<Body>,
}

fn parse(sources: &[(String, String)]) -> Vec<Module> {
    let mut modules: BTreeMap<String, Vec<Body>> = BTreeMap::new();
    for (path, text) in sources {
        let dir = Path::new(path).parent().unwrap().display().to_string();
        let body = hcl::from_str(text).unwrap_or_else(|e| panic!("{path}: {e}"));
        modules.entry(dir).or_default().push(body);
    }
    modules
        .into_iter()
        .map(|(dir, bodies)| Module { dir, bodies })
        .collect()
}

/// `sources` with `from` replaced by `to` in the file whose path ends with `file`.
fn broken(file: &str, from: &str, to: &str) -> Vec<Module> {
    let mut copy = sources();
    // The file of that exact path if there is one (the root's `main.tf`), else the first ending so.
    let at = copy
        .iter()
        .position(|(path, _)| path == file)
        .or_else(|| copy.iter().position(|(path, _)| path.ends_with(file)))
        .expect("file");
    let text = &mut copy[at].1;
    assert!(text.contains(from), "{file} no longer contains {from:?}");
    *text = text.replacen(from, to, 1);
    parse(&copy)
}

impl Module {
    /// The text of the local a `local.<name>.<attribute>` reference reads (empty for anything else).
    fn local_of(&self, reference: &str) -> String {
        let Some(name) = reference.strip_prefix("local.") else {
            return String::new();
        };
        let name = name.split('.').next().unwrap_or_default();
        self.bodies
            .iter()
            .flat_map(|body| body.blocks())
            .filter(|block| block.identifier() == "locals")
            .flat_map(|block| block.body().attributes())
            .find(|attribute| attribute.key() == name)
            .map(|attribute| text(attribute.expr()))
            .unwrap_or_default()
    }

    fn blocks<'a>(&'a self, kind: &'a str, type_: &'a str) -> impl Iterator<Item = &'a Block> {
        self.bodies
            .iter()
            .flat_map(|body| body.blocks())
            .filter(move |block| {
                block.identifier() == kind
                    && block.labels().first().is_some_and(|l| l.as_str() == type_)
            })
    }

    /// `module` blocks whose source is the module directory `name`.
    fn calls<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Block> {
        self.bodies
            .iter()
            .flat_map(|body| body.blocks())
            .filter(move |block| {
                block.identifier() == "module"
                    && attr(block, "source").is_some_and(|s| s.ends_with(&format!("/{name}\"")))
            })
    }
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

fn child<'a>(block: &'a Block, name: &str) -> Option<&'a Block> {
    block.body().blocks().find(|b| b.identifier() == name)
}

/// The expression as HCL text, white space collapsed.
fn text(expr: &Expression) -> String {
    let formatted = hcl::format::to_string(expr).unwrap();
    formatted.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each DLQ (a queue whose resource name contains `dlq`) has exactly one `dlq-alarm`, and that
/// module's alarm is ApproximateNumberOfMessagesVisible, Maximum, 60 s, > 0, notBreaching, with
/// alarm and OK actions.
fn dlq_alarms(modules: &[Module]) -> Vec<String> {
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

fn present(block: &Block, name: &str) -> bool {
    block.body().attributes().any(|a| a.key() == name) || child(block, name).is_some()
}

/// Every mapping reports item failures. A mapping on a stream bisects, retries and ages out
/// records a bounded number of times and has an on-failure destination; any other mapping is an
/// SQS mapping and carries no stream-only argument.
fn mappings(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for mapping in module.blocks("resource", "aws_lambda_event_source_mapping") {
            let name = format!("{}: {}", module.dir, label(mapping, 1));
            if !attr(mapping, "function_response_types")
                .is_some_and(|t| t.contains("\"ReportBatchItemFailures\""))
            {
                violations.push(format!("{name}: no ReportBatchItemFailures"));
            }
            let stream = attr(mapping, "event_source_arn")
                .is_some_and(|arn| arn.contains("aws_kinesis_stream."));
            if !stream {
                for arg in STREAM_ONLY.iter().filter(|arg| present(mapping, arg)) {
                    violations.push(format!("{name}: {arg} is for stream sources only"));
                }
                continue;
            }
            if attr(mapping, "bisect_batch_on_function_error").as_deref() != Some("true") {
                violations.push(format!(
                    "{name}: a stream mapping must bisect failing batches"
                ));
            }
            for bounded in ["maximum_retry_attempts", "maximum_record_age_in_seconds"] {
                match attr(mapping, bounded) {
                    Some(value) if value != "-1" => {}
                    _ => violations.push(format!("{name}: {bounded} must be set and bounded")),
                }
            }
            if !child(mapping, "destination_config")
                .and_then(|d| child(d, "on_failure"))
                .is_some_and(|f| present(f, "destination_arn"))
            {
                violations.push(format!("{name}: no on-failure destination"));
            }
        }
    }
    violations
}

/// The validation conditions of variable `name` in `module`.
fn validations(module: &Module, name: &str) -> Vec<String> {
    module
        .blocks("variable", name)
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
/// maxReceiveCount >= 5 and above the code's attempt limit; stream records age out before the
/// stream forgets them and retries are bounded.
fn variable_rules(modules: &[Module]) -> Vec<String> {
    let required = [
        ("modules/sqs-consumer", "visibility_timeout_seconds", "var.visibility_timeout_seconds >= 6 * var.function_timeout_seconds + var.batching_window_seconds"),
        ("modules/sqs-consumer", "dlq_message_retention_seconds", "var.dlq_message_retention_seconds > var.message_retention_seconds"),
        ("modules/sqs-consumer", "max_receive_count", "var.max_receive_count >= 5"),
        ("modules/sqs-consumer", "max_receive_count", "var.max_receive_count > var.max_attempts"),
        ("modules/sqs-consumer", "max_receive_count", "!var.fifo || var.batch_size == 1 || var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21"),
        ("modules/sqs-consumer", "max_receive_count", "var.fifo_on_dead_letter != \"hold\" || var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21 + 30"),
        ("modules/sqs-consumer", "batch_size", "!var.fifo || var.batch_size == 1 || length(setintersection(keys(var.environment), [\"REDRIVE_IDEMPOTENCY_TABLE\", \"REDRIVE_LEDGER_TABLE\"])) > 0"),
        ("modules/eventbridge-route", "dlq_message_retention_seconds", "var.dlq_message_retention_seconds > var.message_retention_seconds"),
        ("modules/stream-consumer", "maximum_record_age_seconds", "var.maximum_record_age_seconds < var.retention_hours * 3600"),
        ("modules/stream-consumer", "maximum_retry_attempts", "var.maximum_retry_attempts >= 0"),
        ("modules/stream-consumer", "dlq_message_retention_seconds", "var.dlq_message_retention_seconds > var.retention_hours * 3600"),
    ];
    required
        .iter()
        .filter(|(dir, variable, rule)| {
            !modules
                .iter()
                .filter(|m| m.dir == *dir)
                .any(|m| validations(m, variable).iter().any(|c| c.contains(rule)))
        })
        .map(|(dir, variable, rule)| format!("{dir}: variable {variable}: no validation `{rule}`"))
        .collect()
}

/// An IAM statement as (where, actions, resources), from policy documents and from the
/// `statements` the modules hand to the function module.
fn statements(modules: &[Module]) -> Vec<(String, String, String, bool)> {
    let mut out = Vec::new();
    for module in modules {
        for document in module.blocks("data", "aws_iam_policy_document") {
            let key_policy = document.body().blocks().any(|s| {
                s.identifier() == "statement"
                    && attr(s, "sid").is_some_and(|sid| sid.contains("CloudWatchPublishes"))
            });
            // A Deny grants nothing: its wildcards (no request without TLS, say) only narrow. A
            // `dynamic "statement"` counts by its content.
            let statements = document
                .body()
                .blocks()
                .filter_map(|b| match b.identifier() {
                    "statement" => Some(b),
                    // One written out (a literal Sid); one per input is checked where the input is set.
                    "dynamic" if label(b, 0) == "statement" => child(b, "content")
                        .filter(|c| attr(c, "sid").is_some_and(|sid| sid.starts_with('"'))),
                    _ => None,
                });
            for statement in statements.filter(|b| attr(b, "effect").as_deref() != Some("\"Deny\""))
            {
                out.push((
                    format!(
                        "{} {} statement {}",
                        module.dir,
                        label(document, 1),
                        attr(statement, "sid").unwrap_or_default()
                    ),
                    attr(statement, "actions").unwrap_or_default(),
                    attr(statement, "resources").unwrap_or_default(),
                    key_policy,
                ));
            }
        }
        for call in module.calls("function") {
            let Some(list) = call.body().attributes().find(|a| a.key() == "statements") else {
                continue;
            };
            let mut objects = Vec::new();
            collect_statements(list.expr(), &mut objects);
            for object in objects {
                let field = |name: &str| {
                    object
                        .iter()
                        .find(|(key, _)| matches!(key, ObjectKey::Identifier(id) if id.as_str() == name))
                        .map(|(_, value)| text(value))
                        .unwrap_or_default()
                };
                out.push((
                    format!(
                        "{} module {} statement {}",
                        module.dir,
                        label(call, 0),
                        field("sid")
                    ),
                    field("actions"),
                    field("resources"),
                    false,
                ));
            }
        }
    }
    out
}

/// Every object with an `actions` key inside `expr` (lists, `concat(...)`, conditionals).
fn collect_statements<'a>(
    expr: &'a Expression,
    out: &mut Vec<&'a hcl::Object<ObjectKey, Expression>>,
) {
    match expr {
        Expression::Object(object)
            if object
                .keys()
                .any(|k| matches!(k, ObjectKey::Identifier(id) if id.as_str() == "actions")) =>
        {
            out.push(object)
        }
        Expression::Object(object) => object.values().for_each(|v| collect_statements(v, out)),
        Expression::Array(items) => items.iter().for_each(|v| collect_statements(v, out)),
        Expression::FuncCall(call) => call.args.iter().for_each(|v| collect_statements(v, out)),
        Expression::Conditional(c) => {
            collect_statements(&c.true_expr, out);
            collect_statements(&c.false_expr, out);
        }
        Expression::Parenthesis(inner) => collect_statements(inner, out),
        _ => {}
    }
}

/// No wildcard IAM action; `*` resources only where AWS allows nothing narrower.
fn iam(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for (where_, actions, resources, key_policy) in statements(modules) {
        // The account administering its own key is AWS's default key policy.
        let key_administration =
            key_policy && actions.matches(':').count() == 1 && actions.contains("\"kms:*\"");
        if (actions.contains("\"*\"") || actions.contains(":*\"")) && !key_administration {
            violations.push(format!("{where_}: wildcard action {actions}"));
        }
        let xray_only = actions.split(',').all(|a| a.contains("xray:Put"));
        if resources.contains("\"*\"") && !xray_only && !key_policy {
            violations.push(format!("{where_}: resource \"*\" for {actions}"));
        }
    }
    violations
}

/// Every EventBridge target has a retry policy and a dead-letter queue, and that queue has a policy
/// that lets EventBridge send to it for this rule only (`aws:SourceArn`).
fn event_targets(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for target in module.blocks("resource", "aws_cloudwatch_event_target") {
            let name = format!("{}: {}", module.dir, label(target, 1));
            let retry = child(target, "retry_policy");
            if !retry.is_some_and(|r| {
                present(r, "maximum_retry_attempts") && present(r, "maximum_event_age_in_seconds")
            }) {
                violations.push(format!(
                    "{name}: no retry policy with attempts and event age"
                ));
            }
            let Some(queue) = child(target, "dead_letter_config")
                .and_then(|d| attr(d, "arn"))
                .and_then(|arn| {
                    arn.strip_prefix("aws_sqs_queue.")
                        .map(|s| s.replace(".arn", ""))
                })
            else {
                violations.push(format!("{name}: no dead-letter queue of this module"));
                continue;
            };
            let queue_url = format!("aws_sqs_queue.{queue}.id");
            let allowed = module
                .blocks("resource", "aws_sqs_queue_policy")
                .filter(|p| attr(p, "queue_url").as_deref() == Some(&queue_url))
                .filter_map(|p| attr(p, "policy"))
                .any(|policy| {
                    module
                        .blocks("data", "aws_iam_policy_document")
                        .any(|document| {
                            policy.contains(&format!(
                                "data.aws_iam_policy_document.{}",
                                label(document, 1)
                            )) && document.body().blocks().any(|s| {
                                attr(s, "actions")
                                    .is_some_and(|a| a.contains("\"sqs:SendMessage\""))
                                    && child(s, "principals")
                                        .and_then(|p| attr(p, "identifiers"))
                                        .is_some_and(|i| i.contains("\"events.amazonaws.com\""))
                                    && child(s, "condition")
                                        .and_then(|c| attr(c, "variable"))
                                        .as_deref()
                                        == Some("\"aws:SourceArn\"")
                            })
                        })
                });
            if !allowed {
                violations.push(format!(
                    "{name}: {queue_url} has no policy letting events.amazonaws.com send for the rule (aws:SourceArn)"
                ));
            }
        }
    }
    violations
}

/// Every asynchronously invoked function has an on-failure destination; every schedule a DLQ.
fn async_failures(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for config in module.blocks("resource", "aws_lambda_function_event_invoke_config") {
            if !child(config, "destination_config")
                .and_then(|d| child(d, "on_failure"))
                .is_some_and(|f| present(f, "destination"))
            {
                violations.push(format!(
                    "{}: {}: no on-failure destination",
                    module.dir,
                    label(config, 1)
                ));
            }
        }
        for schedule in module.blocks("resource", "aws_scheduler_schedule") {
            let target = child(schedule, "target");
            if !target
                .and_then(|t| child(t, "dead_letter_config"))
                .is_some_and(|d| present(d, "arn"))
            {
                violations.push(format!(
                    "{}: {}: no dead-letter queue",
                    module.dir,
                    label(schedule, 1)
                ));
            }
        }
    }
    violations
}

/// A function that an SQS event source mapping invokes (a mapping without the stream-only
/// `starting_position`) and that may send to SQS re-sends to its own trigger: Lambda's recursive
/// loop detection would stop that chain after 16 invocations, so its module call sets
/// `recursive_loop = "Allow"` (the code bounds the chain).
fn recursion(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for mapping in module.blocks("resource", "aws_lambda_event_source_mapping") {
            if present(mapping, "starting_position") {
                continue;
            }
            let target = attr(mapping, "function_name").unwrap_or_default();
            for call in module.calls("function") {
                let sends =
                    statements(std::slice::from_ref(module))
                        .iter()
                        .any(|(w, actions, ..)| {
                            w.contains(&format!(" module {} statement", label(call, 0)))
                                && actions.contains("\"sqs:SendMessage\"")
                        });
                let invoked = [".", "[0]."]
                    .iter()
                    .any(|then| target.starts_with(&format!("module.{}{then}", label(call, 0))));
                if invoked && sends && attr(call, "recursive_loop").as_deref() != Some("\"Allow\"")
                {
                    violations.push(format!(
                        "{}: {}: re-sends to the queue that triggers it without recursive_loop = \"Allow\"",
                        module.dir,
                        label(call, 0)
                    ));
                }
            }
        }
    }
    violations
}

/// A consumer behind the shared idempotency store remembers a done key at least as long as a
/// duplicate can come back: the source's retention plus the DLQ's (a copy dead-lettered, then
/// redriven). The code's default (14 d) is shorter than that path with the tfvars' queues.
fn idempotency_window(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for call in module.calls("sqs-consumer") {
            let environment = attr(call, "environment").unwrap_or_default();
            if !environment.contains("REDRIVE_IDEMPOTENCY_TABLE") {
                continue;
            }
            let ttl = environment
                .split("REDRIVE_IDEMPOTENCY_TTL")
                .nth(1)
                .and_then(|rest| rest.split('\n').next())
                .unwrap_or_default();
            let covers = ["message_retention_seconds", "dlq_message_retention_seconds"]
                .iter()
                .all(|retention| ttl.contains(retention));
            if !covers {
                let dir = if module.dir.is_empty() {
                    "infra"
                } else {
                    &module.dir
                };
                violations.push(format!(
                    "{dir}: module {}: REDRIVE_IDEMPOTENCY_TTL does not cover the source's and the DLQ's retention, so a redriven duplicate can outlive its key",
                    label(call, 0)
                ));
            }
        }
    }
    violations
}

/// A scheduled reprocessor command names no `destination`: that would send every message of a DLQ
/// to one queue, and one DLQ may serve several sources. The queue the schedule was made for is
/// its `fallbackDestination`, for messages that name no origin.
fn schedules(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for schedule in module.blocks("resource", "aws_scheduler_schedule") {
            let input = child(schedule, "target")
                .and_then(|target| attr(target, "input"))
                .unwrap_or_default();
            let names_destination = input
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|word| word == "destination");
            if names_destination {
                violations.push(format!(
                    "{}: {}: the schedule's command names a destination: every message of the DLQ would go to that one queue; name it fallbackDestination",
                    module.dir,
                    label(schedule, 1)
                ));
            }
        }
    }
    violations
}

/// A function invoked by an ARN taken from a failure record is named qualified (`:$LATEST`, a
/// version, an alias), and IAM matches such an invoke only against a qualified resource: a grant
/// on ARNs passed in must cover `<arn>:*` as well.
fn qualified_invokes(modules: &[Module]) -> Vec<String> {
    statements(modules)
        .into_iter()
        .filter(|(_, actions, resources, _)| {
            actions.contains("\"lambda:InvokeFunction\"")
                && resources.contains("var.")
                && !resources.contains(":*\"")
        })
        .map(|(where_, _, resources, _)| format!("{where_}: invokes {resources} unqualified only"))
        .collect()
}

/// Every call of a local module passes only variables the module declares, and every variable the
/// module declares without a default: what `terraform plan` reports as an unsupported or a missing
/// argument.
fn module_calls(modules: &[Module]) -> Vec<String> {
    const META: [&str; 6] = [
        "source",
        "for_each",
        "count",
        "depends_on",
        "providers",
        "version",
    ];
    let mut violations = Vec::new();
    for module in modules {
        for call in module.bodies.iter().flat_map(|body| body.blocks()) {
            if call.identifier() != "module" {
                continue;
            }
            let source = attr(call, "source").unwrap_or_default();
            let source = source.trim_matches('"');
            let target = Path::new(&module.dir).join(source);
            let target = normalize(&target);
            let Some(callee) = modules.iter().find(|m| Path::new(&m.dir) == target) else {
                violations.push(format!(
                    "{}: module {}: no module at {source}",
                    module.dir,
                    label(call, 0)
                ));
                continue;
            };
            let variables: BTreeMap<&str, bool> = callee
                .bodies
                .iter()
                .flat_map(|body| body.blocks())
                .filter(|b| b.identifier() == "variable")
                .map(|b| {
                    (
                        label(b, 0),
                        b.body().attributes().any(|a| a.key() == "default"),
                    )
                })
                .collect();
            let passed: Vec<&str> = call.body().attributes().map(|a| a.key()).collect();
            for name in passed.iter().filter(|name| !META.contains(name)) {
                if !variables.contains_key(name) {
                    violations.push(format!(
                        "{}: module {}: {} declares no variable {name}",
                        module.dir,
                        label(call, 0),
                        callee.dir
                    ));
                }
            }
            for (name, _) in variables.iter().filter(|(_, has_default)| !**has_default) {
                if !passed.contains(name) {
                    violations.push(format!(
                        "{}: module {}: the required variable {name} of {} is not passed",
                        module.dir,
                        label(call, 0),
                        callee.dir
                    ));
                }
            }
        }
    }
    violations
}

/// `path` with its `..` and `.` steps resolved (the paths are relative to `infra/`).
/// A module that alarms on its functions' EMF metrics in `var.metrics_namespace` has every one of
/// its functions write them there (`REDRIVE_METRICS_NAMESPACE`): else a namespace other than the
/// default leaves the alarms watching an empty one, OK for ever.
fn metrics_namespaces(modules: &[Module]) -> Vec<String> {
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

/// No module reserves concurrency unless asked: Lambda refuses a reservation that leaves the
/// account's unreserved concurrency under 100, so any default reservation fails on a new account.
fn reservations(modules: &[Module]) -> Vec<String> {
    modules
        .iter()
        .flat_map(|module| {
            module
                .blocks("variable", "reserved_concurrency")
                .filter(|variable| attr(variable, "default").is_some_and(|d| d != "null"))
                .map(|_| {
                    format!(
                        "{}: reserved_concurrency has a default reservation",
                        module.dir
                    )
                })
        })
        .collect()
}

/// What an event target or a schedule needs in place before its first delivery, and so must
/// depend on: the permission to invoke a function, the policy of each queue it sends to (its
/// DLQ's too), the policy of the role it assumes. Without it the first apply races: the first
/// events fail into the DLQs, or are dropped.
fn first_apply_order(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        let policy_of = |queue: &str| {
            module
                .blocks("resource", "aws_sqs_queue_policy")
                .find(|p| {
                    attr(p, "queue_url").is_some_and(|u| u == format!("aws_sqs_queue.{queue}.id"))
                })
                .map(|p| format!("aws_sqs_queue_policy.{}", label(p, 1)))
        };
        let mut check = |block: &Block, needed: Vec<String>| {
            let depends_on = attr(block, "depends_on").unwrap_or_default();
            let depends_on: BTreeSet<&str> = depends_on
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(str::trim)
                .collect();
            for need in needed {
                if !depends_on.contains(need.as_str()) {
                    violations.push(format!(
                        "{}: {}.{} does not depend on {need}",
                        module.dir,
                        label(block, 0),
                        label(block, 1)
                    ));
                }
            }
        };
        for target in module.blocks("resource", "aws_cloudwatch_event_target") {
            let arns = [
                attr(target, "arn").unwrap_or_default(),
                child(target, "dead_letter_config")
                    .and_then(|d| attr(d, "arn"))
                    .unwrap_or_default(),
            ];
            let mut needed = Vec::new();
            for arn in &arns {
                if arn.ends_with("function_arn") {
                    needed.extend(
                        module
                            .blocks("resource", "aws_lambda_permission")
                            .map(|p| format!("aws_lambda_permission.{}", label(p, 1))),
                    );
                }
                if let Some(queue) = arn
                    .strip_prefix("aws_sqs_queue.")
                    .and_then(|a| a.strip_suffix(".arn"))
                {
                    needed.push(
                        policy_of(queue)
                            .unwrap_or_else(|| format!("a policy of aws_sqs_queue.{queue}")),
                    );
                }
            }
            check(target, needed);
        }
        for schedule in module.blocks("resource", "aws_scheduler_schedule") {
            let role = child(schedule, "target")
                .and_then(|t| attr(t, "role_arn"))
                .unwrap_or_default();
            let role = role
                .strip_prefix("aws_iam_role.")
                .and_then(|r| r.strip_suffix(".arn"))
                .unwrap_or_default();
            let needed = module
                .blocks("resource", "aws_iam_role_policy")
                .filter(|p| attr(p, "role").is_some_and(|r| r == format!("aws_iam_role.{role}.id")))
                .map(|p| format!("aws_iam_role_policy.{}", label(p, 1)))
                .collect();
            check(schedule, needed);
        }
    }
    violations
}

/// Every Kinesis stream is watched from its own side: an alarm on its
/// `GetRecords.IteratorAgeMilliseconds` that counts missing data as breaching, so that a stopped
/// mapping (which silences the function's `IteratorAge`) is an alarm too.
fn stream_alarms(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for stream in module.blocks("resource", "aws_kinesis_stream") {
            let name = format!("aws_kinesis_stream.{}.name", label(stream, 1));
            let watched = module
                .blocks("resource", "aws_cloudwatch_metric_alarm")
                .any(|alarm| {
                    attr(alarm, "namespace").as_deref() == Some("\"AWS/Kinesis\"")
                        && attr(alarm, "metric_name").as_deref()
                            == Some("\"GetRecords.IteratorAgeMilliseconds\"")
                        && attr(alarm, "dimensions").is_some_and(|d| d.contains(&name))
                        && attr(alarm, "treat_missing_data").as_deref() == Some("\"breaching\"")
                });
            if !watched {
                violations.push(format!(
                    "{}: {}: no alarm on the stream's iterator age that breaches on missing data",
                    module.dir,
                    label(stream, 1)
                ));
            }
        }
    }
    violations
}

/// An alarm on an EMF figure of ours (`var.metrics_namespace`) keeps its state through periods
/// without data (`treat_missing_data = "ignore"`): the figures come only with invocations and
/// runs, and "notBreaching" turned one incident into an ALARM and a false OK every few minutes.
fn emf_alarm_states(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for alarm in module.blocks("resource", "aws_cloudwatch_metric_alarm") {
            let name = format!("{}: {}", module.dir, label(alarm, 1));
            let namespace = attr(alarm, "namespace").unwrap_or_default();
            let missing = attr(alarm, "treat_missing_data").unwrap_or_default();
            if namespace == "var.metrics_namespace" && missing != "\"ignore\"" {
                violations.push(format!("{name}: treat_missing_data {missing}"));
            }
            // A for_each over a local map: each entry names its namespace (and its treatment).
            if namespace != "each.value.namespace" {
                continue;
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
                // Built by an expression: it must not hold our figures, which are checked per entry.
                if module
                    .local_of(&format!("local.{local}"))
                    .contains("var.metrics_namespace")
                {
                    violations.push(format!("{name}: for_each over {entries}, not a local map"));
                }
                continue;
            };
            for (key, entry) in map {
                let Expression::Object(fields) = entry else {
                    continue;
                };
                let field = |wanted: &str| {
                    fields
                        .iter()
                        .find(
                            |(k, _)| matches!(k, ObjectKey::Identifier(i) if i.as_str() == wanted),
                        )
                        .map(|(_, v)| text(v))
                        .unwrap_or_default()
                };
                let treatment = match missing.as_str() {
                    "each.value.missing" => field("missing"),
                    _ => missing.clone(),
                };
                if field("namespace") == "var.metrics_namespace" && treatment != "\"ignore\"" {
                    violations.push(format!(
                        "{name}[{}]: treat_missing_data {}",
                        match key {
                            ObjectKey::Identifier(i) => i.to_string(),
                            other => other.to_string(),
                        },
                        treatment
                    ));
                }
            }
        }
    }
    violations
}

/// The queues the root's EventBridge redrive reads (`module.recovery`'s `event_sources`): each as
/// the module that creates it and its `aws_sqs_queue` label.
fn event_source_queues(modules: &[Module]) -> Vec<(&Module, String)> {
    let Some(root) = modules.iter().find(|m| m.dir.is_empty()) else {
        return Vec::new();
    };
    let sources = root
        .calls("recovery")
        .find_map(|call| attr(call, "event_sources"))
        .unwrap_or_default();
    // `module.events.target_dlq_arn` -> the called module and the queue its output names.
    sources
        .split_whitespace()
        .filter(|w| w.starts_with("module."))
        .filter_map(|reference| {
            let mut parts = reference.trim_end_matches(',').split('.');
            let (_, call, output) = (parts.next()?, parts.next()?, parts.next()?);
            let dir = root
                .bodies
                .iter()
                .flat_map(|body| body.blocks())
                .find(|b| b.identifier() == "module" && label(b, 0) == call)
                .and_then(|b| attr(b, "source"))?
                .trim_matches('"')
                .trim_start_matches("./")
                .to_owned();
            let module = modules.iter().find(|m| m.dir == dir)?;
            let value = module
                .bodies
                .iter()
                .flat_map(|body| body.blocks())
                .find(|b| b.identifier() == "output" && label(b, 0) == output)
                .and_then(|b| attr(b, "value"))?;
            let queue = value.strip_prefix("aws_sqs_queue.")?.strip_suffix(".arn")?;
            Some((module, queue.to_owned()))
        })
        .collect()
}

/// The DLQs a function drains within seconds (the queues the EventBridge redrive reads) have
/// their arrivals alarmed (`drained = true`): their depth, sampled each minute, would rarely show
/// a message.
fn drained_dlqs(modules: &[Module]) -> Vec<String> {
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

/// The queues the EventBridge redrive reads have a redrive policy: a message that crashes or
/// times out the redrive itself came back every visibility timeout for the queue's retention.
fn redrive_sources_have_a_way_out(modules: &[Module]) -> Vec<String> {
    event_source_queues(modules)
        .into_iter()
        .filter(|(module, queue)| {
            !module
                .blocks("resource", "aws_sqs_queue")
                .any(|q| label(q, 1) == queue && present(q, "redrive_policy"))
        })
        .map(|(module, queue)| {
            format!("{}: aws_sqs_queue.{queue} is read by the EventBridge redrive without a redrive policy", module.dir)
        })
        .collect()
}

/// What follows `${<variable>}` in a name written as `"${<variable>}..."` (or `""` for the
/// variable itself); `None` for any other expression or for a name with another interpolation
/// left (a key of a `for_each`). `${local.suffix}` (`.fifo`) and the region a global name carries
/// are dropped: they are the same for every name of one stack.
fn name_after(value: &str, variable: &str) -> Option<String> {
    if value == variable {
        return Some(String::new());
    }
    let rest = value
        .strip_prefix(&format!("\"${{{variable}}}"))?
        .strip_suffix('"')?
        .replace("${local.suffix}", "")
        .replace("-${local.region_code}", "")
        .replace("-${data.aws_region.current.region}", "");
    (!rest.contains("${")).then_some(rest)
}

/// Stands for a consumer's key in the names built once per DLQ (`for_each = var.dlqs`, whose keys
/// the root stack takes from its consumers).
const KEY: &str = "<key>";

/// Whether `block` is made once per DLQ (`for_each = var.dlqs`): its `${each.key}` is a consumer's
/// key.
fn per_dlq(block: &Block) -> bool {
    attr(block, "for_each").as_deref() == Some("var.dlqs")
}

/// [`name_after`] for a name written in a block made per DLQ or not.
fn name_after_in(per_dlq: bool, value: &str, variable: &str) -> Option<String> {
    if per_dlq {
        name_after(&value.replace("${each.key}", KEY), variable)
    } else {
        name_after(value, variable)
    }
}

/// Every name module `dir` builds from its `var.name`, as what follows it, with those of the
/// modules it calls: `""` (the function, its role, its log group), `-dlq`, `-dlq-not-empty`, ...
fn built_names(modules: &[Module], dir: &str) -> BTreeSet<String> {
    fn names_in(body: &Body, per_dlq: bool, out: &mut BTreeSet<String>) {
        for attribute in body.attributes() {
            if attribute.key().ends_with("name") {
                if let Some(name) = name_after_in(per_dlq, &text(attribute.expr()), "var.name") {
                    out.insert(name);
                }
            }
        }
        for block in body.blocks().filter(|b| b.identifier() != "module") {
            names_in(block.body(), per_dlq || self::per_dlq(block), out);
        }
    }
    let Some(module) = modules.iter().find(|m| m.dir == dir) else {
        return BTreeSet::new();
    };
    let mut names = BTreeSet::new();
    for body in &module.bodies {
        names_in(body, false, &mut names);
    }
    for call in module
        .bodies
        .iter()
        .flat_map(|b| b.blocks())
        .filter(|b| b.identifier() == "module")
    {
        let (Some(source), Some(name)) = (attr(call, "source"), attr(call, "name")) else {
            continue;
        };
        let Some(prefix) = name_after_in(per_dlq(call), &name, "var.name") else {
            continue;
        };
        let child = normalize(&Path::new(dir).join(source.trim_matches('"')));
        for name in built_names(modules, &child.display().to_string()) {
            names.insert(format!("{prefix}{name}"));
        }
    }
    names
}

/// The root's names after `<name_prefix>-`: those of the stack's own parts, and what a consumer's
/// key K is followed by in the names its consumer (and its idempotency table) build.
fn stack_and_consumer_names(modules: &[Module]) -> (BTreeSet<String>, BTreeSet<String>) {
    let root = modules
        .iter()
        .find(|m| m.dir.is_empty())
        .expect("root module");
    let (mut stack, mut consumer) = (BTreeSet::new(), BTreeSet::new());
    for call in root
        .bodies
        .iter()
        .flat_map(|b| b.blocks())
        .filter(|b| b.identifier() == "module")
    {
        let (Some(source), Some(name)) = (attr(call, "source"), attr(call, "name")) else {
            continue;
        };
        let child = source.trim_matches('"').trim_start_matches("./").to_owned();
        let built = built_names(modules, &child);
        let per_key = name
            .strip_prefix("\"${var.name_prefix}-${each.key}")
            .and_then(|r| r.strip_suffix('"'));
        match (per_key, name_after(&name, "var.name_prefix")) {
            (Some(after_key), _) => {
                consumer.extend(built.iter().map(|n| format!("{after_key}{n}")))
            }
            (None, Some(prefix)) => {
                // Names made per DLQ follow a consumer's key: <name_prefix>-<key>-dlq-redrive.
                let dlqs_are_consumers =
                    attr(call, "dlqs").is_some_and(|d| d.contains("module.consumer"));
                for name in built.iter().map(|n| format!("{prefix}{n}")) {
                    match name.strip_prefix(&format!("-{KEY}")) {
                        Some(after_key) if dlqs_are_consumers => {
                            consumer.insert(after_key.to_owned());
                        }
                        Some(_) => {}
                        None if name.contains(KEY) => {}
                        None => {
                            let name = name.trim_start_matches('-');
                            if !name.is_empty() {
                                stack.insert(name.to_owned());
                            }
                        }
                    }
                }
            }
            (None, None) => {}
        }
    }
    (stack, consumer)
}

/// The reserved names `infra/variables.tf` checks consumer keys against (`local.stack_names`,
/// `local.consumer_name_suffixes`) hold every name the modules build: a name added to a module
/// and not to the lists would let a key take it.
fn reserved_names(modules: &[Module]) -> Vec<String> {
    let root = modules
        .iter()
        .find(|m| m.dir.is_empty())
        .expect("root module");
    let listed = |local: &str| -> BTreeSet<String> {
        root.local_of(&format!("local.{local}"))
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|n| n.trim().trim_matches('"').to_owned())
            .filter(|n| !n.is_empty() || local == "consumer_name_suffixes")
            .collect()
    };
    let (stack, consumer) = stack_and_consumer_names(modules);
    let mut violations: Vec<String> = stack
        .difference(&listed("stack_names"))
        .map(|name| format!("local.stack_names lacks {name:?}"))
        .collect();
    violations.extend(
        consumer
            .difference(&listed("consumer_name_suffixes"))
            .map(|name| format!("local.consumer_name_suffixes lacks {name:?}")),
    );
    violations
}

/// Resource policies written for AWS services: a queue or topic policy denies requests without TLS
/// (`aws:SecureTransport`), and a statement that lets a service principal in on behalf of this
/// account (`aws:SourceAccount`) names the stack's own sources too (`aws:SourceArn`: its alarms,
/// its schedules, its rule). Lambda's execution-role trust is left at the account: Lambda is not
/// documented to send a source ARN when it assumes a function's role.
fn service_policies(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        let documents: BTreeMap<&str, &Block> = module
            .blocks("data", "aws_iam_policy_document")
            .map(|d| (label(d, 1), d))
            .collect();
        let conditions = |statement: &Block| -> Vec<String> {
            statement
                .body()
                .blocks()
                .filter(|b| b.identifier() == "condition")
                .filter_map(|c| attr(c, "variable"))
                .collect()
        };
        for kind in ["aws_sqs_queue_policy", "aws_sns_topic_policy"] {
            for policy in module.blocks("resource", kind) {
                let text = attr(policy, "policy").unwrap_or_default();
                let Some(name) = text
                    .strip_prefix("data.aws_iam_policy_document.")
                    .map(|r| r.split(['.', '[']).next().unwrap_or_default())
                else {
                    continue;
                };
                let denies_plain_http = documents.get(name).is_some_and(|document| {
                    document.body().blocks().any(|statement| {
                        attr(statement, "effect").as_deref() == Some("\"Deny\"")
                            && conditions(statement)
                                .iter()
                                .any(|v| v == "\"aws:SecureTransport\"")
                    })
                });
                if !denies_plain_http {
                    violations.push(format!(
                        "{}: {kind}.{} does not deny requests without TLS",
                        module.dir,
                        label(policy, 1)
                    ));
                }
            }
        }
        for (name, document) in &documents {
            for statement in document
                .body()
                .blocks()
                .filter(|b| b.identifier() == "statement")
            {
                let service = child(statement, "principals")
                    .filter(|p| attr(p, "type").as_deref() == Some("\"Service\""))
                    .and_then(|p| attr(p, "identifiers"))
                    .unwrap_or_default();
                let keys = conditions(statement);
                if !service.is_empty()
                    && !service.contains("lambda.amazonaws.com")
                    && keys.iter().any(|v| v == "\"aws:SourceAccount\"")
                    && !keys.iter().any(|v| v == "\"aws:SourceArn\"")
                {
                    violations.push(format!(
                        "{}: {name}: {service} is scoped to the account, not to the stack's sources",
                        module.dir
                    ));
                }
            }
        }
    }
    violations
}

/// A mapping that writes its own counts (`metrics_config`) is alarmed on the events it failed to
/// hand to the function (`FailedInvokeEventCount`, by its UUID).
fn mapping_metrics(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for mapping in module.blocks("resource", "aws_lambda_event_source_mapping") {
            let counted = mapping.body().blocks().any(|b| {
                b.identifier() == "metrics_config"
                    || (b.identifier() == "dynamic" && label(b, 0) == "metrics_config")
            });
            let uuid = format!("aws_lambda_event_source_mapping.{}.uuid", label(mapping, 1));
            let alarmed = module
                .blocks("resource", "aws_cloudwatch_metric_alarm")
                .any(|alarm| {
                    attr(alarm, "metric_name").as_deref() == Some("\"FailedInvokeEventCount\"")
                        && attr(alarm, "dimensions").is_some_and(|d| d.contains(&uuid))
                });
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

/// Names IAM and CloudWatch dashboards keep account-wide carry the region, so that the same
/// `name_prefix` in two regions makes two roles and two dashboards (the second region's apply
/// failed on its roles and overwrote the first region's dashboard).
fn global_names(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for (kind, attribute) in [
            ("aws_iam_role", "name"),
            ("aws_cloudwatch_dashboard", "dashboard_name"),
        ] {
            for resource in module.blocks("resource", kind) {
                let name = attr(resource, attribute).unwrap_or_default();
                if !name.contains("${local.region_code}")
                    && !name.contains("${data.aws_region.current.region}")
                {
                    violations.push(format!(
                        "{}: {kind}.{}: {name} is the same in every region",
                        module.dir,
                        label(resource, 1)
                    ));
                }
            }
        }
    }
    violations
}

/// Every event bus says what it logs (`log_config`) and delivers those logs somewhere
/// (`aws_cloudwatch_log_delivery_source` on its ARN): a failed delivery is otherwise seen only as a
/// count.
fn bus_logging(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for bus in module.blocks("resource", "aws_cloudwatch_event_bus") {
            let arn = format!("aws_cloudwatch_event_bus.{}.arn", label(bus, 1));
            let delivered = module
                .blocks("resource", "aws_cloudwatch_log_delivery_source")
                .any(|source| attr(source, "resource_arn").as_deref() == Some(arn.as_str()));
            if child(bus, "log_config").is_none() || !delivered {
                violations.push(format!(
                    "{}: {}: its logs go nowhere",
                    module.dir,
                    label(bus, 1)
                ));
            }
        }
    }
    violations
}

/// A FIFO queue the modules make is a high-throughput one (deduplication and throughput per
/// message group): otherwise a queue's deletes cap it near 300 messages a second whatever the
/// number of groups.
fn high_throughput_fifo(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for queue in module.blocks("resource", "aws_sqs_queue") {
            if attr(queue, "fifo_queue").is_none_or(|f| f == "false") {
                continue;
            }
            let setting = |name: &str| {
                let value = attr(queue, name).unwrap_or_default();
                match value.strip_prefix("local.") {
                    Some(_) => module.local_of(&value),
                    None => value,
                }
            };
            if !setting("deduplication_scope").contains("\"messageGroup\"")
                || !setting("fifo_throughput_limit").contains("\"perMessageGroupId\"")
            {
                violations.push(format!(
                    "{}: {}: a FIFO queue without high throughput",
                    module.dir,
                    label(queue, 1)
                ));
            }
        }
    }
    violations
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The IAM actions of each service whose Rust SDK is in the workspace's lock file: the SDK's
/// operations (`src/operation/<snake_case>.rs`), which are the service's API actions, plus the
/// IAM names that differ from an operation's (Lambda's `Invoke` is `lambda:InvokeFunction`).
/// Only the host's packages are asked for: the build fetched those, while the lock file's other
/// platforms' crates are not in a new machine's cargo home and `--offline` cannot fetch them.
fn sdk_actions() -> BTreeMap<String, BTreeSet<String>> {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", "host-tuple"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut services: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for package in metadata["packages"].as_array().unwrap() {
        let Some(service) = package["name"].as_str().unwrap().strip_prefix("aws-sdk-") else {
            continue;
        };
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap());
        let operations = manifest.parent().unwrap().join("src/operation");
        let actions = services.entry(service.to_owned()).or_default();
        for entry in std::fs::read_dir(operations).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                let stem = path.file_stem().unwrap().to_str().unwrap();
                let pascal: String = stem
                    .split('_')
                    .map(|word| word[..1].to_uppercase() + &word[1..])
                    .collect();
                actions.insert(pascal);
            }
        }
    }
    if let Some(lambda) = services.get_mut("lambda") {
        lambda.insert("InvokeFunction".into());
    }
    services
}

/// IAM grammar and names: every statement id is alphanumeric (IAM refuses anything else), and
/// every action `"<service>:<Name>"` of a service in `actions` names one of its real actions.
/// Services without an SDK in the workspace (logs, xray, kms, sns, kinesis) are not named here.
fn iam_names(
    sources: &[(String, String)],
    modules: &[Module],
    actions: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut violations = Vec::new();
    for (where_, ..) in statements(modules) {
        let sid = where_.rsplit(" statement ").next().unwrap_or_default();
        let sid = sid.trim_matches('"');
        if !sid.chars().all(|c| c.is_ascii_alphanumeric()) {
            violations.push(format!("{where_}: a Sid must be letters and digits"));
        }
    }
    for (path, text) in sources {
        for literal in text.split('"').skip(1).step_by(2) {
            let Some((service, name)) = literal.split_once(':') else {
                continue;
            };
            let Some(known) = actions.get(service) else {
                continue;
            };
            if !name.contains('*') && !known.contains(name) {
                violations.push(format!(
                    "{path}: {service}:{name} is not an action of {service}"
                ));
            }
        }
    }
    violations
}

#[test]
fn the_configuration_keeps_every_rule() {
    let modules = parse(&sources());
    for (rule, violations) in [
        ("dlq alarms", dlq_alarms(&modules)),
        ("qualified invokes", qualified_invokes(&modules)),
        ("mappings", mappings(&modules)),
        ("variable rules", variable_rules(&modules)),
        ("iam", iam(&modules)),
        ("event targets", event_targets(&modules)),
        ("async failures", async_failures(&modules)),
        ("recursion", recursion(&modules)),
        ("schedules", schedules(&modules)),
        ("idempotency window", idempotency_window(&modules)),
        ("module calls", module_calls(&modules)),
        ("metrics namespaces", metrics_namespaces(&modules)),
        ("reservations", reservations(&modules)),
        ("first apply order", first_apply_order(&modules)),
        ("stream alarms", stream_alarms(&modules)),
        ("emf alarm states", emf_alarm_states(&modules)),
        ("drained dlqs", drained_dlqs(&modules)),
        ("redrive sources", redrive_sources_have_a_way_out(&modules)),
        ("reserved names", reserved_names(&modules)),
        ("service policies", service_policies(&modules)),
        ("mapping metrics", mapping_metrics(&modules)),
        ("global names", global_names(&modules)),
        ("bus logging", bus_logging(&modules)),
        ("high-throughput FIFO", high_throughput_fifo(&modules)),
        ("iam names", iam_names(&sources(), &modules, &sdk_actions())),
    ] {
        assert!(violations.is_empty(), "{rule}: {violations:#?}");
    }
    let count = |kind: &str| -> usize {
        modules
            .iter()
            .map(|m| m.blocks("resource", kind).count())
            .sum()
    };
    assert_eq!(
        count("aws_lambda_event_source_mapping"),
        3,
        "SQS consumer, stream consumer, EventBridge redrive"
    );
    assert_eq!(count("aws_cloudwatch_event_target"), 2);
    assert!(statements(&modules)
        .iter()
        .any(|(w, ..)| w.contains("module function statement \"RetryAndDeadLetter\"")));
}

#[test]
fn every_module_has_the_standard_files_and_its_readme_lists_every_input_and_output() {
    let modules = std::fs::read_dir(infra().join("modules")).unwrap();
    let examples = std::fs::read_dir(infra().join("examples")).unwrap();
    for module in modules.chain(examples) {
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
        let readme = std::fs::read_to_string(module.join("README.md")).unwrap();
        for (file, kind) in [("variables.tf", "variable"), ("outputs.tf", "output")] {
            let body: Body =
                hcl::from_str(&std::fs::read_to_string(module.join(file)).unwrap()).unwrap();
            for block in body.blocks().filter(|b| b.identifier() == kind) {
                let row = format!("| {} |", label(block, 0));
                assert!(
                    readme.contains(&row),
                    "{}/README.md lists no {kind} {row}",
                    module.display()
                );
            }
        }
    }
}

const CONSUMER: &str = "modules/sqs-consumer/main.tf";
const CONSUMER_VARIABLES: &str = "modules/sqs-consumer/variables.tf";

#[test]
fn a_dlq_without_its_alarm_or_a_weakened_alarm_is_caught() {
    let raised = broken(
        "modules/dlq-alarm/main.tf",
        "  threshold           = 0\n",
        "  threshold           = 5\n",
    );
    assert_eq!(
        dlq_alarms(&raised),
        ["dlq-alarm dlq_depth: threshold is Some(\"5\"), expected 0"]
    );
    let ageless = broken(
        "modules/dlq-alarm/main.tf",
        "  threshold           = var.oldest_message_age_seconds\n",
        "  threshold           = 1209600\n",
    );
    assert_eq!(
        dlq_alarms(&ageless),
        ["dlq-alarm oldest_message_age: threshold is Some(\"1209600\"), expected var.oldest_message_age_seconds"]
    );
    let missing = broken(
        "modules/dlq-alarm/main.tf",
        "  treat_missing_data  = \"notBreaching\"\n",
        "  treat_missing_data  = \"missing\"\n",
    );
    assert_eq!(dlq_alarms(&missing).len(), 1, "{:?}", dlq_alarms(&missing));
    let silent = broken(
        "modules/dlq-alarm/main.tf",
        "  ok_actions          = [var.alarm_topic_arn]\n",
        "",
    );
    assert_eq!(dlq_alarms(&silent), ["dlq-alarm dlq_depth: no ok_actions"]);
    let none = broken(
        CONSUMER,
        "queue_name                 = local.dlq.name",
        "queue_name                 = \"other\"",
    );
    assert_eq!(
        dlq_alarms(&none),
        ["modules/sqs-consumer: aws_sqs_queue.dlq[0].name has 0 dlq-alarm modules, expected 1"]
    );
    let parked = broken(
        "modules/recovery/main.tf",
        "queue_name      = aws_sqs_queue.parked_dlq[0].name",
        "queue_name      = aws_sqs_queue.archive.name",
    );
    assert_eq!(dlq_alarms(&parked).len(), 1, "{:?}", dlq_alarms(&parked));
}

#[test]
fn a_mapping_without_item_failures_or_with_the_wrong_arguments_is_caught() {
    let plain = broken(
        CONSUMER,
        "function_response_types            = [\"ReportBatchItemFailures\"]",
        "function_response_types            = []",
    );
    assert_eq!(
        mappings(&plain),
        ["modules/sqs-consumer: consumer: no ReportBatchItemFailures"]
    );
    let bisect = broken(
        CONSUMER,
        "  function_response_types ",
        "  bisect_batch_on_function_error     = true\n  function_response_types ",
    );
    assert_eq!(mappings(&bisect), ["modules/sqs-consumer: consumer: bisect_batch_on_function_error is for stream sources only"]);
    let stream = "modules/stream-consumer/main.tf";
    let no_bisect = broken(
        stream,
        "bisect_batch_on_function_error     = true",
        "bisect_batch_on_function_error     = false",
    );
    assert_eq!(
        mappings(&no_bisect),
        ["modules/stream-consumer: stream: a stream mapping must bisect failing batches"]
    );
    let forever = broken(
        stream,
        "maximum_retry_attempts             = var.maximum_retry_attempts",
        "maximum_retry_attempts             = -1",
    );
    assert_eq!(
        mappings(&forever),
        ["modules/stream-consumer: stream: maximum_retry_attempts must be set and bounded"]
    );
    let no_destination = broken(stream, "destination_arn = aws_sqs_queue.dlq.arn", "");
    assert_eq!(
        mappings(&no_destination),
        ["modules/stream-consumer: stream: no on-failure destination"]
    );
}

#[test]
fn weakened_variable_rules_are_caught() {
    let visibility = broken(
        CONSUMER_VARIABLES,
        ">= 6 * var.function_timeout_seconds",
        ">= 2 * var.function_timeout_seconds",
    );
    assert_eq!(variable_rules(&visibility).len(), 1);
    let retention = broken(
        CONSUMER_VARIABLES,
        "var.dlq_message_retention_seconds > var.message_retention_seconds",
        "var.dlq_message_retention_seconds >= 60",
    );
    assert_eq!(
        variable_rules(&retention).len(),
        1,
        "the other modules' rule does not cover this one"
    );
    let receives = broken(
        CONSUMER_VARIABLES,
        " && var.max_receive_count > var.max_attempts",
        "",
    );
    assert_eq!(variable_rules(&receives), ["modules/sqs-consumer: variable max_receive_count: no validation `var.max_receive_count > var.max_attempts`"]);
    let fifo = broken(
        CONSUMER_VARIABLES,
        "var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21",
        "var.max_receive_count >= var.max_attempts * var.batch_size",
    );
    assert_eq!(variable_rules(&fifo), ["modules/sqs-consumer: variable max_receive_count: no validation `!var.fifo || var.batch_size == 1 || var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21`"]);
    let no_ledger = broken(
        CONSUMER_VARIABLES,
        "var.batch_size == 1 || length(setintersection(keys(var.environment), [\"REDRIVE_IDEMPOTENCY_TABLE\", \"REDRIVE_LEDGER_TABLE\"])) > 0",
        "true",
    );
    assert_eq!(
        variable_rules(&no_ledger).len(),
        1,
        "a FIFO batch without the attempt ledger"
    );
    let age = broken(
        "modules/stream-consumer/variables.tf",
        " && var.maximum_record_age_seconds < var.retention_hours * 3600",
        "",
    );
    assert_eq!(variable_rules(&age).len(), 1);
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
        "resources = [local.queue.arn, local.dlq.arn]",
        "resources = [\"*\"]",
    );
    assert_eq!(iam(&resources).len(), 1, "{:?}", iam(&resources));
    let conditional = broken(
        "modules/recovery/main.tf",
        "actions = [\"lambda:InvokeFunction\"]",
        "actions = [\"lambda:*\"]",
    );
    assert_eq!(iam(&conditional).len(), 1, "{:?}", iam(&conditional));
    let scheduler = broken(
        "modules/recovery/main.tf",
        "resources = [for reprocessor in module.reprocessor : reprocessor.function_arn]",
        "resources = [\"*\"]",
    );
    assert_eq!(iam(&scheduler).len(), 1, "{:?}", iam(&scheduler));
}

#[test]
fn an_event_target_without_retry_dlq_or_queue_policy_is_caught() {
    let route = "modules/eventbridge-route/main.tf";
    let no_retry = broken(route, "  retry_policy {\n    maximum_retry_attempts       = var.target_retry_attempts\n    maximum_event_age_in_seconds = var.target_max_event_age_seconds\n  }\n", "");
    assert_eq!(
        event_targets(&no_retry),
        ["modules/eventbridge-route: consumer: no retry policy with attempts and event age"]
    );
    let no_dlq = broken(
        route,
        "  dead_letter_config {\n    arn = aws_sqs_queue.target_dlq.arn\n  }\n",
        "",
    );
    assert_eq!(
        event_targets(&no_dlq),
        ["modules/eventbridge-route: consumer: no dead-letter queue of this module"]
    );
    let open = broken(
        route,
        "      variable = \"aws:SourceArn\"",
        "      variable = \"aws:SourceAccount\"",
    );
    assert_eq!(event_targets(&open).len(), 2, "{:?}", event_targets(&open));
    let no_policy = broken(route, "resource \"aws_sqs_queue_policy\" \"target_dlq\" {\n  queue_url = aws_sqs_queue.target_dlq.id", "resource \"aws_sqs_queue_policy\" \"target_dlq\" {\n  queue_url = aws_sqs_queue.target.id");
    assert_eq!(
        event_targets(&no_policy).len(),
        2,
        "{:?}",
        event_targets(&no_policy)
    );
}

#[test]
fn an_async_function_or_schedule_without_a_failure_destination_is_caught() {
    let route = "modules/eventbridge-route/main.tf";
    let lost = broken(
        route,
        "destination = aws_sqs_queue.consumer_failures_dlq.arn",
        "",
    );
    assert_eq!(
        async_failures(&lost),
        ["modules/eventbridge-route: consumer: no on-failure destination"]
    );
    let schedule = broken(
        "modules/recovery/main.tf",
        "    dead_letter_config {\n      arn = aws_sqs_queue.reprocessor_failures_dlq.arn\n    }\n",
        "",
    );
    assert_eq!(
        async_failures(&schedule),
        ["modules/recovery: reprocess: no dead-letter queue"]
    );
}

#[test]
fn a_consumer_left_to_lambdas_loop_detection_is_caught() {
    let consumer = broken(CONSUMER, "recursive_loop = \"Allow\"", "");
    assert_eq!(
        recursion(&consumer),
        ["modules/sqs-consumer: function: re-sends to the queue that triggers it without recursive_loop = \"Allow\""]
    );
    let redrive = broken(
        "modules/recovery/main.tf",
        "recursive_loop = \"Allow\"",
        "recursive_loop = \"Terminate\"",
    );
    assert_eq!(
        recursion(&redrive),
        ["modules/recovery: event_redrive: re-sends to the queue that triggers it without recursive_loop = \"Allow\""]
    );
}

#[test]
fn a_redrive_that_may_invoke_only_unqualified_arns_is_caught() {
    let redrive = broken(
        "modules/recovery/main.tf",
        "flatten([for arn in var.function_target_arns : [arn, \"${arn}:*\"]])",
        "var.function_target_arns",
    );
    assert_eq!(
        qualified_invokes(&redrive),
        ["modules/recovery module event_redrive statement \"DeliverToFunctionTargets\": invokes var.function_target_arns unqualified only"]
    );
}

/// Every AWS call the functions' code makes, recorded through the ports while the sample events
/// run, must be granted to that function's role: the action, on the Terraform resource that
/// stands for the queue or function it was made on.
mod calls_against_roles {
    use std::sync::{Arc, Mutex};

    use redrive::config::{EventRedriveSettings, ReprocessSettings};
    use redrive::error::PortError;
    use redrive::event::SqsRecord;
    use redrive::eventbridge::{EventRedrive, InvokePort, RecordingInvoker, Reply};
    use redrive::port::{ForwardingPort, QueuePort, RecordingQueue};
    use redrive::reprocess::{ReprocessCommand, Reprocessor};
    use redrive::{ErrorClass, Processor, ProcessorConfig, SqsEvent};

    use super::{parse, sources, statements};

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
        std::fs::read_to_string(format!("{}/events/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    fn processor(queue: Audited<RecordingQueue>, dlq: &str) -> Processor<Audited<RecordingQueue>> {
        let config = ProcessorConfig {
            dlq_url: Some(format!("https://sqs.local/123456789012/{dlq}")),
            ..ProcessorConfig::default()
        };
        Processor::new(queue, config)
    }

    /// Which statement of `module`'s function `call` grants `action` on `resource` (the
    /// Terraform expression of the queue or function), or what is missing.
    fn granted(
        modules: &[super::Module],
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
        modules: &[super::Module],
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
                &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("events/sqs-consumer.env"),
            )
            .unwrap(),
            redrive::CircuitBreaker::new("payments", redrive::BreakerSettings::default()),
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
        let broken = super::broken(super::CONSUMER, "\"sqs:ChangeMessageVisibility\", ", "");
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
        let recorder = Processor::new(
            RecordingQueue::default(),
            ProcessorConfig {
                dlq_url: Some(dlq.into()),
                ..ProcessorConfig::default()
            },
        );
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
}

#[test]
fn an_idempotency_window_shorter_than_a_duplicates_path_is_caught() {
    let short = broken(
        "main.tf",
        "+ each.value.dlq_message_retention_seconds + 86400}s",
        "}s",
    );
    assert_eq!(
        idempotency_window(&short),
        ["infra: module consumer: REDRIVE_IDEMPOTENCY_TTL does not cover the source's and the DLQ's retention, so a redriven duplicate can outlive its key"]
    );
}

#[test]
fn a_schedule_that_sends_a_whole_dlq_to_one_queue_is_caught() {
    let one_queue = broken(
        "modules/recovery/main.tf",
        "fallbackDestination = each.value.origin_arn",
        "destination = each.value.origin_arn",
    );
    assert_eq!(
        schedules(&one_queue),
        ["modules/recovery: reprocess: the schedule's command names a destination: every message of the DLQ would go to that one queue; name it fallbackDestination"]
    );
}

#[test]
fn a_module_call_with_an_unknown_or_a_missing_argument_is_caught() {
    let unknown = broken(
        "examples/own-consumer/main.tf",
        "record_concurrency ",
        "records_concurrency ",
    );
    assert_eq!(
        module_calls(&unknown),
        ["examples/own-consumer: module reserve: modules/sqs-consumer declares no variable records_concurrency"]
    );
    let missing = broken(
        "examples/redrive-only/main.tf",
        "  alarm_topic_arn = var.alarm_topic_arn\n}\n\nmodule",
        "}\n\nmodule",
    );
    assert_eq!(
        module_calls(&missing),
        ["examples/redrive-only: module recovery: the required variable alarm_topic_arn of modules/recovery is not passed"]
    );
}

#[test]
fn a_misspelt_iam_action_or_a_sid_iam_refuses_is_caught() {
    let actions = sdk_actions();
    for service in ["sqs", "dynamodb", "lambda"] {
        assert!(
            actions.contains_key(service),
            "the {service} SDK is in the lock file"
        );
    }
    let mut copy = sources();
    let (_, text) = copy
        .iter_mut()
        .find(|(p, _)| p.ends_with(CONSUMER))
        .unwrap();
    *text = text
        .replacen(
            "\"sqs:ChangeMessageVisibility\"",
            "\"sqs:ChangeMessageVisibilty\"",
            1,
        )
        .replacen(
            "sid       = \"RetryAndDeadLetter\"",
            "sid       = \"Retry-And-DeadLetter\"",
            1,
        );
    assert_eq!(
        iam_names(&copy, &parse(&copy), &actions),
        [
            "modules/sqs-consumer module function statement \"Retry-And-DeadLetter\": a Sid must be letters and digits",
            "modules/sqs-consumer/main.tf: sqs:ChangeMessageVisibilty is not an action of sqs",
        ]
    );
}

#[test]
fn a_function_writing_its_metrics_where_its_alarms_do_not_look_is_caught() {
    let consumer = broken(
        CONSUMER,
        "REDRIVE_METRICS_NAMESPACE = var.metrics_namespace",
        "",
    );
    assert_eq!(
        metrics_namespaces(&consumer),
        ["modules/sqs-consumer: function: its EMF metrics do not go to var.metrics_namespace"]
    );
    let reprocessor = broken(
        "modules/recovery/main.tf",
        "REDRIVE_METRICS_NAMESPACE = var.metrics_namespace",
        "",
    );
    assert_eq!(
        metrics_namespaces(&reprocessor),
        ["modules/recovery: reprocessor: its EMF metrics do not go to var.metrics_namespace"]
    );
}

#[test]
fn a_default_concurrency_reservation_is_caught() {
    let route = broken(
        "modules/eventbridge-route/variables.tf",
        "default     = null\n\n  validation {\n    condition     = var.reserved_concurrency",
        "default     = 10\n\n  validation {\n    condition     = var.reserved_concurrency",
    );
    assert_eq!(
        reservations(&route),
        ["modules/eventbridge-route: reserved_concurrency has a default reservation"]
    );
}

#[test]
fn a_target_or_schedule_that_may_start_before_its_permissions_is_caught() {
    let route = broken(
        "modules/eventbridge-route/main.tf",
        "depends_on = [aws_lambda_permission.events, aws_sqs_queue_policy.target_dlq]",
        "depends_on = [aws_sqs_queue_policy.target_dlq]",
    );
    assert_eq!(
        first_apply_order(&route),
        ["modules/eventbridge-route: aws_cloudwatch_event_target.consumer does not depend on aws_lambda_permission.events"]
    );
    let queue_target = broken(
        "modules/eventbridge-route/main.tf",
        "depends_on = [aws_sqs_queue_policy.target, aws_sqs_queue_policy.target_dlq]",
        "depends_on = [aws_sqs_queue_policy.target_dlq]",
    );
    assert_eq!(
        first_apply_order(&queue_target),
        ["modules/eventbridge-route: aws_cloudwatch_event_target.queue does not depend on aws_sqs_queue_policy.target"]
    );
    let schedule = broken(
        "modules/recovery/main.tf",
        "depends_on = [aws_iam_role_policy.scheduler]",
        "",
    );
    assert_eq!(
        first_apply_order(&schedule),
        ["modules/recovery: aws_scheduler_schedule.reprocess does not depend on aws_iam_role_policy.scheduler"]
    );
}

/// `make deploy` checks for an alarm subscription before it applies anything, and the check
/// refuses a stack whose alarms nobody receives.
#[test]
fn a_deploy_whose_alarms_nobody_receives_is_refused() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap();
    let deploy = makefile.split("\ndeploy:").nth(1).unwrap();
    let (check, apply) = (
        deploy
            .find("tools/alarm-target")
            .expect("deploy runs tools/alarm-target"),
        deploy.find("terraform -chdir=infra apply").unwrap(),
    );
    assert!(check < apply, "the check comes before the apply");

    let dir = std::env::temp_dir().join(format!("redrive-alarm-target-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tfvars = |email: Option<&str>| {
        let mut values: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(infra().join("redrive.auto.tfvars.json")).unwrap(),
        )
        .unwrap();
        values["alarm_email"] = email.into();
        let path = dir.join(format!("{}.json", email.unwrap_or("none")));
        std::fs::write(&path, values.to_string()).unwrap();
        path
    };
    let run = |path: &Path, env: &[(&str, &str)]| {
        std::process::Command::new(root.join("tools/alarm-target"))
            .arg(path)
            .env_remove("ALARM_EMAIL")
            .env_remove("TF_VAR_alarm_email")
            .env_remove("NO_ALARM_EMAIL")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let refused = run(&tfvars(None), &[]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("an SNS topic that nobody reads"));
    assert!(run(&tfvars(Some("ops@example.com")), &[]).status.success());
    assert!(run(&tfvars(None), &[("ALARM_EMAIL", "ops@example.com")])
        .status
        .success());
    assert!(run(&tfvars(None), &[("NO_ALARM_EMAIL", "1")])
        .status
        .success());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_stream_whose_stopped_mapping_goes_unnoticed_is_caught() {
    let silent = broken(
        "modules/stream-consumer/main.tf",
        "treat_missing_data  = \"breaching\"",
        "treat_missing_data  = \"notBreaching\"",
    );
    assert_eq!(
        stream_alarms(&silent),
        ["modules/stream-consumer: stream: no alarm on the stream's iterator age that breaches on missing data"]
    );
}

#[test]
fn an_emf_alarm_that_flaps_between_invocations_is_caught() {
    let consumer = broken(
        CONSUMER,
        "threshold   = var.deferred_threshold\n      missing     = \"ignore\"",
        "threshold   = var.deferred_threshold\n      missing     = \"notBreaching\"",
    );
    assert_eq!(
        emf_alarm_states(&consumer),
        ["modules/sqs-consumer: health[deferred]: treat_missing_data \"notBreaching\""]
    );
    let reprocessor = broken(
        "modules/recovery/main.tf",
        "treat_missing_data = \"ignore\"",
        "treat_missing_data = \"notBreaching\"",
    );
    assert_eq!(
        emf_alarm_states(&reprocessor),
        ["modules/recovery: alerted: treat_missing_data \"notBreaching\""]
    );
}

#[test]
fn a_drained_dlq_watched_only_by_its_depth_is_caught() {
    let route = broken(
        "modules/eventbridge-route/main.tf",
        "queue_name      = aws_sqs_queue.target_dlq.name\n  runbook         = \"Runbook: docs/runbook.md, 'EventBridge target DLQ not empty'.\"\n  alarm_topic_arn = var.alarm_topic_arn\n  # The EventBridge redrive (modules/recovery) empties it within seconds.\n  drained = true",
        "queue_name      = aws_sqs_queue.target_dlq.name\n  runbook         = \"Runbook: docs/runbook.md, 'EventBridge target DLQ not empty'.\"\n  alarm_topic_arn = var.alarm_topic_arn",
    );
    assert_eq!(
        drained_dlqs(&route),
        ["modules/eventbridge-route: aws_sqs_queue.target_dlq.name is drained by the EventBridge redrive but its dlq-alarm does not count arrivals"]
    );
}

#[test]
fn a_queue_the_event_redrive_reads_without_a_redrive_policy_is_caught() {
    let route = broken(
        "modules/eventbridge-route/main.tf",
        "sqs_managed_sse_enabled    = true\n  redrive_policy             = local.to_redrive_poison\n}\n\n# Where Lambda puts",
        "sqs_managed_sse_enabled    = true\n}\n\n# Where Lambda puts",
    );
    assert_eq!(
        redrive_sources_have_a_way_out(&route),
        ["modules/eventbridge-route: aws_sqs_queue.target_dlq is read by the EventBridge redrive without a redrive policy"]
    );
}

#[test]
fn the_derived_names_are_the_ones_the_modules_build() {
    let (stack, consumer) = stack_and_consumer_names(&parse(&sources()));
    for name in [
        "orders-events-consumer",
        "orders-events-queue",
        "parked-dlq",
        "archive",
        "scheduler",
        "alarms",
        "orders-stream-dlq",
    ] {
        assert!(stack.contains(name), "{name}: {stack:#?}");
    }
    // The reprocessor made for each consumer's DLQ: <name_prefix>-<key>-dlq-redrive.
    for suffix in ["", "-dlq", "-dlq-not-empty", "-idempotency", "-dlq-redrive"] {
        assert!(consumer.contains(suffix), "{suffix}: {consumer:#?}");
    }
    // A name added to a module and not to the lists is caught.
    let added = broken(
        "modules/eventbridge-route/main.tf",
        "name                      = \"${var.name}-queue\"",
        "name                      = \"${var.name}-audit-queue\"",
    );
    assert_eq!(
        reserved_names(&added),
        ["local.stack_names lacks \"orders-events-audit-queue\""]
    );
}

#[test]
fn a_service_policy_scoped_only_to_the_account_or_open_to_plain_http_is_caught() {
    let topic = broken(
        "modules/alerts/main.tf",
        "sid       = \"DenyWithoutTls\"\n    effect    = \"Deny\"",
        "sid       = \"DenyWithoutTls\"\n    effect    = \"Allow\"",
    );
    assert_eq!(
        service_policies(&topic),
        ["modules/alerts: aws_sns_topic_policy.alarms does not deny requests without TLS"]
    );
    let queues = broken(
        "modules/eventbridge-route/main.tf",
        "variable = \"aws:SecureTransport\"",
        "variable = \"aws:PrincipalIsAWSService\"",
    );
    assert_eq!(
        service_policies(&queues),
        [
            "modules/eventbridge-route: aws_sqs_queue_policy.target_dlq does not deny requests without TLS",
            "modules/eventbridge-route: aws_sqs_queue_policy.target does not deny requests without TLS"
        ]
    );
    let trust = broken(
        "modules/recovery/main.tf",
        "variable = \"aws:SourceArn\"",
        "variable = \"aws:SourceOrgID\"",
    );
    assert_eq!(
        service_policies(&trust),
        ["modules/recovery: scheduler_assume: [ \"scheduler.amazonaws.com\" ] is scoped to the account, not to the stack's sources"]
    );
}

#[test]
fn a_mapping_whose_failed_invokes_nobody_watches_is_caught() {
    let consumer = broken(
        CONSUMER,
        "metric_name         = \"FailedInvokeEventCount\"",
        "metric_name         = \"PolledEventCount\"",
    );
    assert_eq!(
        mapping_metrics(&consumer),
        ["modules/sqs-consumer: consumer: counts its events but no alarm watches its failed invokes"]
    );
}

#[test]
fn a_global_name_without_the_region_is_caught() {
    let role = broken(
        "modules/function/main.tf",
        "name               = \"${var.name}-${local.region_code}\"",
        "name               = \"${var.name}-function\"",
    );
    assert_eq!(
        global_names(&role),
        ["modules/function: aws_iam_role.function: \"${var.name}-function\" is the same in every region"]
    );
    let dashboard = broken(
        "modules/alerts/main.tf",
        "dashboard_name = \"${var.name}-redrive-${data.aws_region.current.region}\"",
        "dashboard_name = \"${var.name}-redrive\"",
    );
    assert_eq!(
        global_names(&dashboard),
        ["modules/alerts: aws_cloudwatch_dashboard.redrive: \"${var.name}-redrive\" is the same in every region"]
    );
}

#[test]
fn a_bus_whose_logs_go_nowhere_is_caught() {
    let route = broken(
        "modules/eventbridge-route/main.tf",
        "resource_arn = aws_cloudwatch_event_bus.bus.arn",
        "resource_arn = aws_cloudwatch_event_rule.route.arn",
    );
    assert_eq!(
        bus_logging(&route),
        ["modules/eventbridge-route: bus: its logs go nowhere"]
    );
}

#[test]
fn a_fifo_queue_capped_per_queue_is_caught() {
    let consumer = broken(
        CONSUMER,
        "fifo_throughput_limit = \"perMessageGroupId\"",
        "fifo_throughput_limit = \"perQueue\"",
    );
    assert_eq!(
        high_throughput_fifo(&consumer),
        [
            "modules/sqs-consumer: dlq: a FIFO queue without high throughput",
            "modules/sqs-consumer: source: a FIFO queue without high throughput"
        ]
    );
}
