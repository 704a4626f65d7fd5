//! IAM: least privilege, qualified invokes, service policies, action names the SDK knows.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use hcl::{Block, Expression, ObjectKey};

use crate::{attr, child, label, text, Module};

/// An IAM statement as (where, actions, resources), from policy documents and from the
/// `statements` the modules hand to the function module.
pub fn statements(modules: &[Module]) -> Vec<(String, String, String, bool)> {
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
pub fn collect_statements<'a>(
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
pub fn iam(modules: &[Module]) -> Vec<String> {
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

/// No statement lists every instance of a `for_each` module (`[for x in module.y : ...]`): the
/// policy grows with the caller's map, past IAM's 10,240 characters for a role's inline policies;
/// a name pattern stays one line.
pub fn growing_policies(modules: &[Module]) -> Vec<String> {
    statements(modules)
        .into_iter()
        .filter(|(_, _, resources, _)| {
            resources.contains("[for ") && resources.contains(" in module.")
        })
        .map(|(where_, _, resources, _)| {
            format!("{where_}: lists a resource per module instance ({resources}): a name pattern")
        })
        .collect()
}

/// Every IAM role and inline policy is replaced create-before-destroy: a role's name changes with
/// the region code or the name prefix, and destroyed first it would leave its function or schedule
/// without permissions in the middle of an apply.
pub fn replaceable_roles(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for kind in ["aws_iam_role", "aws_iam_role_policy"] {
            for resource in module.blocks("resource", kind) {
                let before = child(resource, "lifecycle")
                    .and_then(|lifecycle| attr(lifecycle, "create_before_destroy"))
                    .is_some_and(|value| value == "true");
                if !before {
                    violations.push(format!(
                        "{}: {kind}.{}: replaced destroy-first (no create_before_destroy)",
                        module.dir,
                        label(resource, 1)
                    ));
                }
            }
        }
    }
    violations
}

/// A function invoked by an ARN taken from a failure record is named qualified (`:$LATEST`, a
/// version, an alias), and IAM matches such an invoke only against a qualified resource: a grant
/// on ARNs passed in must cover `<arn>:*` as well.
pub fn qualified_invokes(modules: &[Module]) -> Vec<String> {
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

/// Resource policies written for AWS services: a queue or topic policy denies requests without TLS
/// (`aws:SecureTransport`), and a statement that lets a service principal in on behalf of this
/// account (`aws:SourceAccount`) names the stack's own sources too (`aws:SourceArn`: its alarms,
/// its schedules, its rule). Lambda's execution-role trust is left at the account: Lambda is not
/// documented to send a source ARN when it assumes a function's role.
pub fn service_policies(modules: &[Module]) -> Vec<String> {
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

/// The IAM actions of each service whose Rust SDK is in the workspace's lock file: the SDK's
/// operations (`src/operation/<snake_case>.rs`), which are the service's API actions, plus the
/// IAM names that differ from an operation's (Lambda's `Invoke` is `lambda:InvokeFunction`), by
/// IAM namespace (DynamoDB Streams' SDK in `dynamodb`).
/// Only the host's packages are asked for: the build fetched those, while the lock file's other
/// platforms' crates are not in a new machine's cargo home and `--offline` cannot fetch them.
pub fn sdk_actions() -> BTreeMap<String, BTreeSet<String>> {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", "host-tuple"])
        .current_dir(crate::repo_root())
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
        // DynamoDB Streams' actions are in DynamoDB's IAM namespace (`dynamodb:GetRecords`: the
        // DynamoDB developer guide's policy for a Lambda function reading a table's stream).
        let service = match service {
            "dynamodbstreams" => "dynamodb",
            other => other,
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
    // ListObjects' action, which also decides whether GetObject tells a missing key (404) from a
    // refusal (403) (Amazon S3 API reference, ListObjectsV2 and GetObject, "Permissions").
    if let Some(s3) = services.get_mut("s3") {
        s3.insert("ListBucket".into());
    }
    services
}

/// IAM grammar and names: every statement id is alphanumeric (IAM refuses anything else), and
/// every action `"<service>:<Name>"` of a service in `actions` names one of its real actions.
/// Services without an SDK in the workspace (logs, xray, kms, sns, kinesis) are not named here.
pub fn iam_names(
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
