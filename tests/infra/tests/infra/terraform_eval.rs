//! The input rules, evaluated by Terraform itself: variables and values in a directory of their own
//! (no resources, so no provider to download), where `terraform console` runs every `validation`
//! block as `plan` would. The root stack's tfvars pass; each example's inputs pass, and so do the
//! arguments its module calls evaluate to, against the called module's rules; broken copies fail
//! with the rule's own message. The dashboard body is rendered the same way and checked against
//! CloudWatch's rules for one.
use std::path::PathBuf;
use std::process::Command;

fn infra() -> PathBuf {
    redrive_infra::repo_root().join("infra")
}

fn tfvars() -> serde_json::Value {
    let text = std::fs::read_to_string(infra().join("redrive.auto.tfvars.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `None` when Terraform accepts the tfvars; else its error text.
fn evaluate(tfvars: &serde_json::Value, name: &str) -> Option<String> {
    let variables = std::fs::read_to_string(infra().join("variables.tf")).unwrap();
    console(&variables, tfvars, name, "").err()
}

/// `terraform console` on `config` (variables, locals) with `tfvars`, printing `expression`:
/// what it printed, or the error text (a failed validation among it).
fn console(
    config: &str,
    tfvars: &serde_json::Value,
    name: &str,
    expression: &str,
) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("redrive-tfvars-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("main.tf"), config).unwrap();
    std::fs::write(dir.join("terraform.tfvars.json"), tfvars.to_string()).unwrap();
    let mut child = Command::new("terraform")
        .args(["console", "-no-color"])
        .current_dir(&dir)
        .env("TF_CLI_CONFIG_FILE", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("terraform runs");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), expression.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let errors = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() || errors.contains("Error:") {
        return Err(errors);
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The example `name`'s inputs (its variables on `example.tfvars.json`), then each of its calls of
/// a module without `for_each`: the arguments as Terraform evaluates them, against the called
/// module's variables and their rules. `main_tf` replaces the example's `main.tf`.
fn evaluate_example(name: &str, main_tf: &str) -> Result<(), String> {
    let dir = infra().join("examples").join(name);
    let variables = std::fs::read_to_string(dir.join("variables.tf")).unwrap();
    let tfvars: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("example.tfvars.json")).unwrap())
            .unwrap();
    let body: hcl::Body = hcl::from_str(main_tf).unwrap();
    for call in body.blocks().filter(|b| b.identifier() == "module") {
        let attributes: Vec<&hcl::Attribute> = call.body().attributes().collect();
        if attributes.iter().any(|a| a.key() == "for_each") {
            continue; // each.value has no value outside the module block
        }
        let mut arguments = String::from("locals {\n  arguments = {\n");
        let mut source = String::new();
        for attribute in attributes {
            let expression = hcl::format::to_string(attribute.expr()).unwrap();
            match attribute.key() {
                "source" => source = expression.trim_matches('"').to_owned(),
                key => arguments.push_str(&format!("    {key} = {expression}\n")),
            }
        }
        arguments.push_str("  }\n}\n");
        let label = call.labels()[0].as_str();
        let printed = console(
            &format!("{variables}\n{arguments}"),
            &tfvars,
            &format!("{name}-{label}"),
            "jsonencode(local.arguments)\n",
        )?;
        // The console prints the JSON as an HCL string literal, which reads as a JSON string.
        let json: String = serde_json::from_str(&printed).map_err(|e| format!("{printed}: {e}"))?;
        let module = std::fs::read_to_string(dir.join(source).join("variables.tf")).unwrap();
        let values: serde_json::Value = serde_json::from_str(&json).unwrap();
        console(&module, &values, &format!("{name}-{label}-module"), "")
            .map_err(|error| format!("module {label}: {error}"))?;
    }
    Ok(())
}

/// Makes a copy of the tfvars break one rule.
type Breaking = fn(&mut serde_json::Value);

/// Whether `terraform` is on PATH. CI's machine image has it, so there a missing CLI fails the run
/// instead of skipping the evaluation.
fn terraform_installed() -> bool {
    let found = Command::new("terraform").arg("version").output().is_ok();
    assert!(
        found || std::env::var_os("CI").is_none(),
        "terraform is not on PATH, and CI must evaluate the tfvars (README: prerequisites)"
    );
    if !found {
        eprintln!(
            "terraform is not installed: the tfvars are not evaluated (README: prerequisites)"
        );
    }
    found
}

#[test]
fn the_tfvars_pass_every_rule_and_broken_ones_fail_with_its_message() {
    if !terraform_installed() {
        return;
    }
    assert_eq!(evaluate(&tfvars(), "as-is"), None);

    let broken: [(&str, Breaking, &str); 14] = [
        (
            "long-reprocessor-name",
            |v| {
                v["name_prefix"] = "redrive-production-eu-west".into();
                v["consumers"]["order-fulfilment-eu"] = v["consumers"]["orders"].clone();
            },
            "name_prefix and a consumer key together may take 42 characters",
        ),
        (
            "reserved-key",
            |v| v["consumers"]["archive"] = v["consumers"]["orders"].clone(),
            "A consumer key may not build a name the stack's own parts use",
        ),
        (
            "event-consumer-function",
            |v| v["consumers"]["orders-events-consumer"] = v["consumers"]["orders"].clone(),
            "A consumer key may not build a name the stack's own parts use",
        ),
        (
            "event-target-queue",
            |v| v["consumers"]["orders-events-queue"] = v["consumers"]["orders"].clone(),
            "A consumer key may not build a name the stack's own parts use",
        ),
        (
            "parked-dlq",
            |v| v["consumers"]["parked"] = v["consumers"]["orders"].clone(),
            "A consumer key may not build a name the stack's own parts use",
        ),
        (
            "another-consumers-dlq",
            |v| v["consumers"]["orders-dlq"] = v["consumers"]["orders"].clone(),
            "A consumer key may not be another key followed by -dlq",
        ),
        (
            "long-key",
            |v| v["consumers"]["order-fulfilment-priority"] = v["consumers"]["orders"].clone(),
            "Consumer keys must be 1 to 24",
        ),
        (
            "long-prefix",
            |v| v["name_prefix"] = "redrive-production-eu-west1".into(),
            "name_prefix must be 1 to 26",
        ),
        (
            "short-period",
            |v| v["alarms"]["period_seconds"] = 30.into(),
            "alarms.period_seconds must be a multiple of 60",
        ),
        (
            "fifo-batch-without-ledger",
            |v| {
                v["consumers"]["payments"]
                    .as_object_mut()
                    .unwrap()
                    .remove("idempotency_key");
            },
            "A FIFO consumer with batch_size above 1 needs an idempotency_key",
        ),
        (
            "hold-on-a-standard-queue",
            |v| v["consumers"]["orders"]["fifo_on_dead_letter"] = "hold".into(),
            "is for FIFO queues with the attempt ledger",
        ),
        (
            "hold-without-room-for-its-receives",
            |v| v["consumers"]["payments"]["fifo_on_dead_letter"] = "hold".into(),
            "must be at least batch_size x (max_attempts + 1) + 51",
        ),
        (
            "fifo-batch-receive-count",
            |v| v["consumers"]["payments"]["max_receive_count"] = 50.into(),
            "A FIFO consumer with batch_size above 1 needs an idempotency_key",
        ),
        (
            "instant-deferral-limit",
            |v| v["retry"]["defer_max_age_seconds"] = 30.into(),
            "retry.defer_max_age_seconds must be between 60",
        ),
    ];
    for (name, break_it, message) in broken {
        let mut copy = tfvars();
        break_it(&mut copy);
        let error = evaluate(&copy, name).unwrap_or_else(|| panic!("{name}: accepted"));
        assert!(
            error
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .contains(message),
            "{name}: {error}"
        );
    }
}

#[test]
fn the_examples_inputs_and_module_calls_pass_and_broken_ones_fail_with_the_rule() {
    if !terraform_installed() {
        return;
    }
    let main_tf = |name: &str| {
        std::fs::read_to_string(infra().join("examples").join(name).join("main.tf")).unwrap()
    };
    for name in [
        "own-consumer",
        "redrive-only",
        "table-stream",
        "kafka-orders",
    ] {
        assert_eq!(evaluate_example(name, &main_tf(name)), Ok(()), "{name}");
    }
    // A table's stream: a Kinesis ARN, or a retention DynamoDB Streams do not have, is refused.
    let table_stream = |from: &str, to: &str| {
        let changed = main_tf("table-stream").replacen(from, to, 1);
        assert_ne!(changed, main_tf("table-stream"), "{from}");
        evaluate_example("table-stream", &changed)
            .expect_err(to)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let kinesis = table_stream(
        "var.table_stream_arn",
        "\"arn:aws:kinesis:eu-west-1:123456789012:stream/orders\"",
    );
    assert!(
        kinesis.contains("dynamodb_stream_arn must be a DynamoDB table's stream ARN"),
        "{kinesis}"
    );
    // Kafka: one cluster, one topic.
    let kafka = |from: &str, to: &str| {
        let changed = main_tf("kafka-orders").replacen(from, to, 1);
        assert_ne!(changed, main_tf("kafka-orders"), "{from}");
        evaluate_example("kafka-orders", &changed)
            .expect_err(to)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let both = kafka(
        "{ msk_cluster_arn = var.msk_cluster_arn }",
        "{ msk_cluster_arn = var.msk_cluster_arn, bootstrap_servers = [\"b-1:9092\"] }",
    );
    assert!(both.contains("exactly one of them"), "{both}");
    let topics = kafka("[\"orders\"]", "[\"orders\", \"refunds\"]");
    assert!(topics.contains("names exactly one topic"), "{topics}");
    let retention = table_stream(
        "batch_size          = 100",
        "batch_size = 100\n  retention_hours = 48",
    );
    assert!(
        retention.contains("retention_hours is the Kinesis stream's"),
        "{retention}"
    );
    // The same consumer on a queue the team has already.
    let existing = |queue: &str| {
        let arn = |name: &str| format!("arn:aws:sqs:eu-west-1:123456789012:{name}");
        let url = |name: &str| format!("https://sqs.eu-west-1.amazonaws.com/123456789012/{name}");
        let dlq = queue.replace("reserve", "reserve-dlq");
        main_tf("own-consumer").replacen(
            "name = \"warehouse-reserve\"",
            &format!(
                "name = \"warehouse-reserve\"\n  existing_queue = {{ arn = \"{}\", url = \"{}\", name = \"{queue}\", dlq_arn = \"{}\", dlq_url = \"{}\", dlq_name = \"{dlq}\" }}",
                arn(queue),
                url(queue),
                arn(&dlq),
                url(&dlq)
            ),
            1,
        )
    };
    assert_eq!(
        evaluate_example("own-consumer", &existing("reserve")),
        Ok(())
    );
    let fifo_mismatch = evaluate_example("own-consumer", &existing("reserve.fifo"))
        .expect_err("a FIFO queue on a standard consumer");
    assert!(
        fifo_mismatch
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains("names end in .fifo exactly when fifo is true"),
        "{fifo_mismatch}"
    );
    // On Lambda Managed Instances: at least 2 GB and 1 vCPU at the ratio (Lambda developer
    // guide, best practices for Managed Instances).
    const MEMORY: &str = "function_memory_mb         = 256";
    let sized = |memory_mb: u32, fields: &str| {
        format!("function_memory_mb = {memory_mb}\n  managed_instances = {{ {fields} }}")
    };
    let managed = |fields: &str| sized(2048, fields);
    let provider = "capacity_provider_arn = \"arn:aws:lambda:eu-west-1:123456789012:capacity-provider:orders\"";
    assert_eq!(
        evaluate_example(
            "own-consumer",
            &main_tf("own-consumer").replacen(
                MEMORY,
                &sized(
                    4096,
                    &format!("{provider}, max_concurrency = 8, memory_gib_per_vcpu = 4")
                ),
                1
            )
        ),
        Ok(())
    );
    assert_eq!(
        evaluate_example(
            "own-consumer",
            &main_tf("own-consumer").replacen(MEMORY, &managed(provider), 1)
        ),
        Ok(()),
        "Lambda's defaults for the rest"
    );
    let managed_broken = [
        (
            managed(&format!("{provider}, memory_gib_per_vcpu = 3")),
            "memory_gib_per_vcpu must be 2, 4 or 8",
        ),
        (
            managed(&format!("{provider}, max_concurrency = 2000")),
            "max_concurrency must be a whole number from 1 to 1600",
        ),
        (
            managed("capacity_provider_arn = \"arn:aws:ecs:eu-west-1:123456789012:capacity-provider/orders\""),
            "must be a Lambda capacity provider ARN",
        ),
        (
            sized(256, provider),
            "on Lambda Managed Instances function_memory_mb must be at least 2048",
        ),
        (
            sized(2048, &format!("{provider}, memory_gib_per_vcpu = 4")),
            "on Lambda Managed Instances function_memory_mb must be at least 2048",
        ),
    ];
    for (to, message) in &managed_broken {
        let error = evaluate_example(
            "own-consumer",
            &main_tf("own-consumer").replacen(MEMORY, to, 1),
        )
        .expect_err(&format!("{to} accepted"));
        let error = error.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(error.contains(message), "{to}: {error}");
    }
    // On FIFO a deferral waits in place and ends an hour before the queue's retention (4 days
    // here): a defer age past that is refused, and one Terraform cannot read is too.
    let fifo_deferring = |age: &str| {
        main_tf("own-consumer")
            .replacen(
                "batch_size                 = 10",
                "batch_size                 = 1\n  fifo = true",
                1,
            )
            .replacen(
                "REDRIVE_DEFER_MAX_AGE = \"1h\"",
                &format!("REDRIVE_DEFER_MAX_AGE = \"{age}\""),
                1,
            )
    };
    for fits in ["1h", "3d", "95h"] {
        assert_eq!(
            evaluate_example("own-consumer", &fifo_deferring(fits)),
            Ok(()),
            "{fits}"
        );
    }
    for refused in ["4d", "5d", "1h30m", "soon"] {
        let error = evaluate_example("own-consumer", &fifo_deferring(refused)).expect_err(
            &format!("REDRIVE_DEFER_MAX_AGE = {refused} accepted on FIFO"),
        );
        let error = error.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            error.contains("REDRIVE_DEFER_MAX_AGE must be a whole number of s, m, h or d"),
            "{refused}: {error}"
        );
    }
    // Provisioned pollers, which AWS does not combine with maximum_concurrency.
    let pollers = |fields: &str| {
        main_tf("own-consumer").replacen(MEMORY, &format!("{MEMORY}\n  {fields}"), 1)
    };
    assert_eq!(
        evaluate_example(
            "own-consumer",
            &pollers(
                "maximum_concurrency = null\n  provisioned_pollers = { minimum = 2, maximum = 20 }"
            )
        ),
        Ok(())
    );
    for (fields, message) in [
        (
            "provisioned_pollers = { minimum = 2, maximum = 20 }",
            "maximum_concurrency and provisioned_pollers do not go together",
        ),
        (
            "maximum_concurrency = null\n  provisioned_pollers = { minimum = 1, maximum = 20 }",
            "provisioned_pollers: minimum 2 to 200",
        ),
    ] {
        let error = evaluate_example("own-consumer", &pollers(fields))
            .expect_err(&format!("{fields} accepted"));
        let error = error.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(error.contains(message), "{fields}: {error}");
    }
    // Each DLQ gets a reprocessor named <name>-<key>-dlq-redrive: a key that makes it too long for
    // a function name is refused.
    let long_key = main_tf("redrive-only").replacen(
        "dlqs = { for key, queue in var.queues : key => {",
        "dlqs = { for key, queue in var.queues : \"${key}-of-the-billing-team-in-eu-west\" => {",
        1,
    );
    let too_long =
        evaluate_example("redrive-only", &long_key).expect_err("a 56-character name accepted");
    assert!(
        too_long
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains("shorten the name or the DLQ's key"),
        "{too_long}"
    );
    let broken: [(&str, &str, &str, &str); 3] = [
        (
            "own-consumer",
            "visibility_timeout_seconds = 180",
            "visibility_timeout_seconds = 120",
            "visibility_timeout_seconds must be at least 6 x function_timeout_seconds",
        ),
        (
            "own-consumer",
            "max_receive_count          = 10",
            "max_receive_count          = 5",
            "max_receive_count must be 5 to 1000 and above max_attempts",
        ),
        (
            "redrive-only",
            "rate_per_second        = 20",
            "rate_per_second        = 5000",
            "policy.rate_per_second 0.1 to 3000",
        ),
    ];
    for (name, from, to, message) in broken {
        let text = main_tf(name);
        assert!(text.contains(from), "{name}/main.tf no longer has {from:?}");
        let error = evaluate_example(name, &text.replacen(from, to, 1))
            .expect_err(&format!("{name}: {to} accepted"));
        let error = error.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(error.contains(message), "{name}, {to}: {error}");
    }
}

/// Each `locals { ... }` block of a Terraform file, as it is written.
fn locals_blocks(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("\nlocals {") {
        let block = &rest[start + 1..];
        let mut depth = 0;
        let end = block
            .char_indices()
            .find_map(|(i, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => return None,
                }
                (depth == 0).then_some(i + 1)
            })
            .expect("a closed locals block");
        out.push_str(&block[..end]);
        out.push('\n');
        rest = &block[end..];
    }
    out
}

/// The dashboard body `modules/alerts` builds for the root stack's consumers (named as
/// `modules/sqs-consumer` names them), rendered by Terraform from `alerts_main_tf`.
fn render_dashboard(alerts_main_tf: &str) -> Result<serde_json::Value, String> {
    let alerts = infra().join("modules/alerts");
    let variables = std::fs::read_to_string(alerts.join("variables.tf")).unwrap();
    // The region, partition and account are the provider's; anything else the locals read must be
    // an input.
    let locals = locals_blocks(alerts_main_tf)
        .replace("data.aws_region.current.region", "\"eu-west-1\"")
        .replace("data.aws_partition.current.partition", "\"aws\"")
        .replace(
            "data.aws_caller_identity.current.account_id",
            "\"123456789012\"",
        );
    let body = alerts_main_tf
        .lines()
        .find_map(|line| line.trim().strip_prefix("dashboard_body = "))
        .expect("an aws_cloudwatch_dashboard with a dashboard_body");
    let tfvars = tfvars();
    let prefix = tfvars["name_prefix"].as_str().unwrap();
    let consumers: Vec<serde_json::Value> = tfvars["consumers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(key, consumer)| {
            let suffix = if consumer["fifo"] == true {
                ".fifo"
            } else {
                ""
            };
            serde_json::json!({
                "queue_name": format!("{prefix}-{key}{suffix}"),
                "dlq_name": format!("{prefix}-{key}-dlq{suffix}"),
                "function_name": format!("{prefix}-{key}"),
            })
        })
        .collect();
    let inputs = serde_json::json!({ "name": prefix, "consumers": consumers });
    let printed = console(
        &format!("{variables}\n{locals}"),
        &inputs,
        "dashboard",
        &format!("{body}\n"),
    )?;
    let json: String = serde_json::from_str(&printed).map_err(|e| format!("{printed}: {e}"))?;
    serde_json::from_str(&json).map_err(|e| format!("{json}: {e}"))
}

/// What CloudWatch's PutDashboard refuses in a body, by the rules of "Dashboard Body Structure and
/// Syntax" for the widgets used here: the structure, sizes, views, periods, and each metric as an
/// array of strings (namespace, name, dimension pairs) with an optional rendering object last, or
/// a math expression whose ids are defined in the widget.
fn dashboard_violations(body: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    let mut out = Vec::new();
    let Some(widgets) = body["widgets"].as_array() else {
        return vec!["no widgets array".into()];
    };
    if widgets.len() > 500 {
        out.push(format!("{} widgets (at most 500)", widgets.len()));
    }
    for key in body.as_object().unwrap().keys() {
        if !["widgets", "start", "end", "periodOverride", "variables"].contains(&key.as_str()) {
            out.push(format!("unknown top-level field {key}"));
        }
    }
    for (n, widget) in widgets.iter().enumerate() {
        let at = format!("widget {n} ({})", widget["properties"]["title"]);
        let within = |field: &str, low: u64, high: u64| {
            widget[field]
                .as_u64()
                .is_some_and(|v| (low..=high).contains(&v))
        };
        if !within("width", 1, 24) || !within("height", 1, 1000) {
            out.push(format!("{at}: width must be 1-24 and height 1-1000"));
        }
        let properties = &widget["properties"];
        match widget["type"].as_str() {
            Some("metric") => {}
            Some("text" | "log" | "alarm" | "explorer" | "custom") => continue,
            other => {
                out.push(format!("{at}: unknown type {other:?}"));
                continue;
            }
        }
        if !properties["region"].is_string() {
            out.push(format!("{at}: a metric widget needs its region"));
        }
        let views = ["timeSeries", "singleValue", "gauge", "bar", "pie", "table"];
        if let Some(view) = properties.get("view") {
            if !view.as_str().is_some_and(|v| views.contains(&v)) {
                out.push(format!("{at}: unknown view {view}"));
            }
        }
        if let Some(period) = properties.get("period") {
            let valid = period
                .as_u64()
                .is_some_and(|p| [1, 5, 10, 30].contains(&p) || (p >= 60 && p % 60 == 0));
            if !valid {
                out.push(format!(
                    "{at}: period {period} is not 1, 5, 10, 30 or a multiple of 60"
                ));
            }
        }
        let Some(metrics) = properties["metrics"].as_array().filter(|m| !m.is_empty()) else {
            out.push(format!(
                "{at}: metrics must be a non-empty array of metric arrays"
            ));
            continue;
        };
        let ids: Vec<&str> = metrics
            .iter()
            .filter_map(|m| m.as_array()?.last()?.get("id")?.as_str())
            .collect();
        for metric in metrics {
            let Some(parts) = metric.as_array() else {
                out.push(format!("{at}: the metric {metric} is not an array"));
                continue;
            };
            let (strings, options) = match parts.last() {
                Some(Value::Object(options)) => (&parts[..parts.len() - 1], Some(options)),
                _ => (&parts[..], None),
            };
            if let Some(expression) = options.and_then(|o| o.get("expression")) {
                let refs = expression.as_str().unwrap_or_default();
                let words = refs.split(|c: char| !c.is_ascii_alphanumeric() && c != '_');
                for word in words.filter(|w| w.starts_with(|c: char| c.is_ascii_lowercase())) {
                    if !ids.contains(&word) && !word.chars().all(|c| c.is_ascii_digit()) {
                        out.push(format!(
                            "{at}: the expression {refs} names no metric id {word}"
                        ));
                    }
                }
                if !strings.is_empty() {
                    out.push(format!("{at}: an expression stands alone in its array"));
                }
                continue;
            }
            let names = strings
                .iter()
                .all(|s| s.as_str().is_some_and(|s| !s.is_empty()));
            if strings.len() < 2 || strings.len() % 2 != 0 || !names {
                out.push(format!(
                    "{at}: {metric} is not [namespace, name, dimension, value, ...]"
                ));
            }
            if let Some(id) = options.and_then(|o| o.get("id")).and_then(Value::as_str) {
                let valid = id.starts_with(|c: char| c.is_ascii_lowercase())
                    && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid {
                    out.push(format!("{at}: id {id} must start with a lowercase letter"));
                }
            }
        }
    }
    out
}

#[test]
fn the_dashboard_terraform_renders_is_one_cloudwatch_accepts_and_broken_ones_are_caught() {
    if !terraform_installed() {
        return;
    }
    let main_tf = std::fs::read_to_string(infra().join("modules/alerts/main.tf")).unwrap();
    let body = render_dashboard(&main_tf).unwrap();
    assert_eq!(dashboard_violations(&body), Vec::<String>::new());
    assert_eq!(body["widgets"].as_array().unwrap().len(), 9);

    let broken: [(&str, &str, &str); 4] = [
        (
            "metrics = local.function_metrics.fates",
            "metrics = flatten(local.function_metrics.fates)",
            "is not an array",
        ),
        (r#"view = "pie""#, r#"view = "donut""#, "unknown view"),
        ("width = 12", "width = 30", "width must be 1-24"),
        (
            r#"id = "retried${i}""#,
            r#"id = "Retried${i}""#,
            "must start with a lowercase letter",
        ),
    ];
    for (from, to, message) in broken {
        assert!(
            main_tf.contains(from),
            "modules/alerts/main.tf no longer has {from:?}"
        );
        let body = render_dashboard(&main_tf.replacen(from, to, 1)).unwrap();
        let violations = dashboard_violations(&body);
        assert!(
            violations.iter().any(|v| v.contains(message)),
            "{to}: {violations:#?}"
        );
    }
}

/// The region code IAM role names carry (modules/function, modules/recovery): for every region
/// AWS has, at most 8 characters (so `<name>-<code>` fits IAM's 64) and a different code for each.
#[test]
fn every_region_has_a_short_code_of_its_own() {
    if !terraform_installed() {
        return;
    }
    const REGIONS: [&str; 40] = [
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "af-south-1",
        "ap-east-1",
        "ap-east-2",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-6",
        "ap-southeast-7",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ca-central-1",
        "ca-west-1",
        "eu-central-1",
        "eu-central-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "eu-south-1",
        "eu-south-2",
        "eu-north-1",
        "il-central-1",
        "me-south-1",
        "me-central-1",
        "mx-central-1",
        "sa-east-1",
        "us-gov-east-1",
        "us-gov-west-1",
        "cn-north-1",
        "cn-northwest-1",
        "us-iso-east-1",
        "eusc-de-east-1",
    ];
    let mut codes = Vec::new();
    for module in ["function", "recovery"] {
        let main_tf =
            std::fs::read_to_string(infra().join("modules").join(module).join("main.tf")).unwrap();
        let body: hcl::Body = hcl::from_str(&main_tf).unwrap();
        let expression = body
            .blocks()
            .filter(|b| b.identifier() == "locals")
            .flat_map(|b| b.body().attributes())
            .find(|a| a.key() == "region_code")
            .map(|a| hcl::format::to_string(a.expr()).unwrap())
            .unwrap_or_else(|| panic!("modules/{module}: no local region_code"));
        let config = format!(
            "variable \"regions\" {{\n  type = list(string)\n}}\nlocals {{\n  codes = [for region in var.regions : {}]\n}}\n",
            expression.replace("data.aws_region.current.region", "region")
        );
        let printed = console(
            &config,
            &serde_json::json!({ "regions": REGIONS.to_vec() }),
            &format!("region-codes-{module}"),
            "jsonencode(local.codes)\n",
        )
        .unwrap();
        let json: String = serde_json::from_str(&printed).unwrap();
        let module_codes: Vec<String> = serde_json::from_str(&json).unwrap();
        codes.push(module_codes);
    }
    assert_eq!(codes[0], codes[1], "both modules name a region alike");
    let mut unique = codes[0].clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), REGIONS.len(), "{:?}", codes[0]);
    for (region, code) in REGIONS.iter().zip(&codes[0]) {
        assert!(code.len() <= 8, "{region} -> {code}");
    }
    assert_eq!(codes[0][0], "use1");
    assert_eq!(codes[0][12], "apse4");
}

/// The redrive-only example's Metrics Insights alarm: the query Terraform renders from the
/// example's tag is the documented form (`WHERE tag.<key> = '<value>'`), and a tag that would
/// break the query is refused.
#[test]
fn the_tagged_dlq_query_is_rendered_as_metrics_insights_reads_it() {
    if !terraform_installed() {
        return;
    }
    let dir = infra().join("examples").join("redrive-only");
    let variables = std::fs::read_to_string(dir.join("variables.tf")).unwrap();
    // Read as written: hcl-rs formats a template's escaped quotes back unescaped.
    let main_tf = std::fs::read_to_string(dir.join("main.tf")).unwrap();
    let query = main_tf
        .lines()
        .find_map(|line| line.trim().strip_prefix("expression  = \"SELECT"))
        .map(|rest| format!("\"SELECT{rest}"))
        .expect("the tagged_dlqs alarm's query");
    let tfvars: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("example.tfvars.json")).unwrap())
            .unwrap();
    let config = format!("{variables}\nlocals {{\n  query = {query}\n}}\n");
    let printed = console(&config, &tfvars, "tagged-query", "local.query\n").unwrap();
    let rendered: String = serde_json::from_str(&printed).unwrap();
    assert_eq!(
        rendered,
        r#"SELECT MAX(ApproximateNumberOfMessagesVisible) FROM "AWS/SQS" WHERE tag.RedriveDlq = 'billing'"#
    );
    let mut quoted = tfvars.clone();
    quoted["dlq_tag"]["value"] = "bill'ing".into();
    let error = console(&config, &quoted, "tagged-query-quoted", "local.query\n")
        .expect_err("a quote in the tag value accepted");
    assert!(
        error
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains("without a quote"),
        "{error}"
    );
}

/// Each DLQ's reprocessor role, rendered by Terraform for two consumers: it may read its own DLQ
/// and send to its own origin, and IAM refuses the cross-routes a hand-written command could ask
/// for (one consumer's DLQ into the other's queue).
#[test]
fn a_reprocessor_role_refuses_to_move_one_consumers_dlq_into_anothers_queue() {
    if !terraform_installed() {
        return;
    }
    let main_tf =
        std::fs::read_to_string(infra().join("modules").join("recovery").join("main.tf")).unwrap();
    let body: hcl::Body = hcl::from_str(&main_tf).unwrap();
    let reprocessor = body
        .blocks()
        .find(|b| b.identifier() == "module" && b.labels()[0].as_str() == "reprocessor")
        .expect("module reprocessor");
    let expression = |block: &hcl::Block, name: &str| {
        block
            .body()
            .attributes()
            .find(|a| a.key() == name)
            .map(|a| hcl::format::to_string(a.expr()).unwrap())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(
        expression(reprocessor, "for_each"),
        "var.dlqs",
        "one per DLQ"
    );
    let queue_access = body
        .blocks()
        .filter(|b| b.identifier() == "locals")
        .find_map(|b| {
            b.body()
                .attributes()
                .find(|a| a.key() == "queue_access")
                .cloned()
        })
        .map(|a| hcl::format::to_string(a.expr()).unwrap())
        .expect("local.queue_access");
    let statements = expression(reprocessor, "statements")
        .replace("each.value", "dlq")
        .replace(
            "aws_sqs_queue.archive.arn",
            "\"arn:aws:sqs:eu-west-1:123456789012:redrive-archive\"",
        )
        .replace(
            "aws_sqs_queue.reprocessor_failures_dlq.arn",
            "\"arn:aws:sqs:eu-west-1:123456789012:redrive-reprocessor-failures-dlq\"",
        );
    let config = format!(
        "variable \"dlqs\" {{\n  type = map(object({{ url = string, arn = string, origin_arn = string, other_origin_arns = optional(list(string), []) }}))\n}}\n\
         locals {{\n  queue_access = {queue_access}\n  roles = {{ for key, dlq in var.dlqs : key => {statements} }}\n}}\n"
    );
    let arn = |name: &str| format!("arn:aws:sqs:eu-west-1:123456789012:{name}");
    let dlq = |key: &str| {
        serde_json::json!({
            "url": format!("https://sqs.eu-west-1.amazonaws.com/123456789012/redrive-{key}-dlq"),
            "arn": arn(&format!("redrive-{key}-dlq")),
            "origin_arn": arn(&format!("redrive-{key}")),
        })
    };
    let tfvars =
        serde_json::json!({ "dlqs": { "orders": dlq("orders"), "payments": dlq("payments") } });
    let printed = console(
        &config,
        &tfvars,
        "reprocessor-roles",
        "jsonencode(local.roles)\n",
    )
    .unwrap();
    let json: String = serde_json::from_str(&printed).unwrap();
    let roles: serde_json::Value = serde_json::from_str(&json).unwrap();
    // Whether a role's statements allow `action` on `resource` (exact ARNs; no wildcard is rendered).
    let allows = |key: &str, action: &str, resource: &str| {
        roles[key].as_array().unwrap().iter().any(|statement| {
            statement["actions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == action)
                && statement["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == resource)
        })
    };
    for (key, other) in [("orders", "payments"), ("payments", "orders")] {
        let (own_dlq, own_origin) = (
            arn(&format!("redrive-{key}-dlq")),
            arn(&format!("redrive-{key}")),
        );
        let (other_dlq, other_origin) = (
            arn(&format!("redrive-{other}-dlq")),
            arn(&format!("redrive-{other}")),
        );
        assert!(
            allows(key, "sqs:ReceiveMessage", &own_dlq),
            "{key} reads its DLQ"
        );
        assert!(
            allows(key, "sqs:DeleteMessage", &own_dlq),
            "{key} deletes from its DLQ"
        );
        assert!(
            allows(key, "sqs:SendMessage", &own_origin),
            "{key} sends home"
        );
        assert!(
            !allows(key, "sqs:SendMessage", &other_origin),
            "{key} into {other}'s queue is refused"
        );
        assert!(
            !allows(key, "sqs:ReceiveMessage", &other_dlq),
            "{key} may not read {other}'s DLQ"
        );
        assert!(
            !allows(key, "sqs:DeleteMessage", &other_dlq),
            "{key} may not delete from {other}'s DLQ"
        );
        let resources: Vec<&serde_json::Value> = roles[key]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["resources"].as_array().unwrap())
            .collect();
        assert!(
            resources.iter().all(|r| !r.as_str().unwrap().contains('*')),
            "{resources:?}"
        );
    }
}

/// The event bus's log level picks the log types delivered to its log group: OFF none, and each
/// level its own type and those below it.
#[test]
fn the_bus_log_level_delivers_its_log_types() {
    if !terraform_installed() {
        return;
    }
    let dir = infra().join("modules").join("eventbridge-route");
    let body: hcl::Body =
        hcl::from_str(&std::fs::read_to_string(dir.join("main.tf")).unwrap()).unwrap();
    let types = body
        .blocks()
        .filter(|b| b.identifier() == "locals")
        .find_map(|b| {
            b.body()
                .attributes()
                .find(|a| a.key() == "bus_log_types")
                .cloned()
        })
        .map(|a| hcl::format::to_string(a.expr()).unwrap())
        .expect("local.bus_log_types");
    let config = format!(
        "variable \"bus_log_level\" {{\n  type = string\n}}\nlocals {{\n  bus_log_types = {types}\n}}\n"
    );
    for (level, expected) in [
        ("OFF", vec![]),
        ("ERROR", vec!["ERROR_LOGS"]),
        ("INFO", vec!["ERROR_LOGS", "INFO_LOGS"]),
        ("TRACE", vec!["ERROR_LOGS", "INFO_LOGS", "TRACE_LOGS"]),
    ] {
        let printed = console(
            &config,
            &serde_json::json!({ "bus_log_level": level }),
            &format!("bus-log-{level}"),
            "jsonencode(local.bus_log_types)\n",
        )
        .unwrap();
        let json: String = serde_json::from_str(&printed).unwrap();
        let delivered: Vec<String> = serde_json::from_str(&json).unwrap();
        assert_eq!(delivered, expected, "{level}");
    }
}

/// The EventBridge redrive waits for a function target's answer: its timeout covers the target's,
/// the target's Init (up to 10 s) and its own margin and carry-out, or it gives up on a target
/// that is still running and invokes it again. A target + 10 s (the rule before) is refused.
#[test]
fn an_event_redrive_that_cannot_outwait_its_function_targets_is_refused() {
    if !terraform_installed() {
        return;
    }
    let variables = std::fs::read_to_string(
        infra()
            .join("modules")
            .join("recovery")
            .join("variables.tf"),
    )
    .unwrap();
    let inputs = |redrive_timeout: u32| {
        serde_json::json!({
            "name": "orders",
            "reprocessor_zip": "bootstrap.zip",
            "dlqs": {},
            "alarm_topic_arn": "arn:aws:sns:us-east-1:123456789012:alarms",
            "function_target_arns": ["arn:aws:lambda:us-east-1:123456789012:function:orders-events"],
            "function_target_timeout_seconds": 60,
            "event_redrive_timeout_seconds": redrive_timeout,
        })
    };
    console(&variables, &inputs(80), "redrive-timeout-ok", "").expect("target + 20 s passes");
    let refused = console(&variables, &inputs(70), "redrive-timeout-short", "").unwrap_err();
    assert!(
        refused.contains("function_target_timeout_seconds + 20"),
        "{refused}"
    );
}

/// Large messages: the stack's lifecycle rule outlasts every copy that may point at an object
/// (the tfvars' queues: (4 d + 14 d) x (3 redrives + 1) + 1 = 73 days; a holding consumer's lane
/// as long again as its source), and the bucket module
/// takes what the stack gives it and refuses two consumers on one prefix or a URL for a name.
#[test]
fn the_payload_bucket_outlasts_every_copy_and_refuses_shared_prefixes() {
    if !terraform_installed() {
        return;
    }
    let root = std::fs::read_to_string(infra().join("main.tf")).unwrap();
    let variables = std::fs::read_to_string(infra().join("variables.tf")).unwrap();
    let config = format!("{variables}\n{}", locals_blocks(&root));
    let days = console(
        &config,
        &tfvars(),
        "payload-expiry",
        "local.payload_expiry_days\n",
    )
    .unwrap();
    assert_eq!(days, "73");
    let mut longer = tfvars();
    longer["redrive"] = serde_json::json!({
        "schedule_expression": "rate(15 minutes)", "max_reprocess": 5, "eligible_after_seconds": 300,
        "discard_kinds": [], "max_messages": 1000, "rate_per_second": 50
    });
    let days = console(
        &config,
        &longer,
        "payload-expiry-5",
        "local.payload_expiry_days\n",
    )
    .unwrap();
    assert_eq!(days, "109", "(4 d + 14 d) x 6 + 1");
    // Issue 53 item 7: a holding consumer's copy hops through its retry lane, which keeps it as
    // long again as its source.
    let mut holding = tfvars();
    holding["consumers"]["payments"]["fifo_on_dead_letter"] = serde_json::json!("hold");
    holding["consumers"]["payments"]["max_receive_count"] = serde_json::json!(111);
    let days = console(
        &config,
        &holding,
        "payload-expiry-hold",
        "local.payload_expiry_days\n",
    )
    .unwrap();
    assert_eq!(days, "89", "(4 d + 4 d in the lane + 14 d) x 4 + 1");

    let module =
        std::fs::read_to_string(infra().join("modules/payload-bucket/variables.tf")).unwrap();
    let inputs = serde_json::json!({
        "name_prefix": "redrive-payloads-",
        "expire_after_days": 73,
        "writer_prefixes": { "orders": "redrive/orders/", "payments": "redrive/payments/" },
    });
    assert_eq!(console(&module, &inputs, "payload-inputs", "").err(), None);
    for (name, change, message) in [
        (
            "shared-prefix",
            serde_json::json!({ "writer_prefixes": { "orders": "redrive/", "payments": "redrive/" } }),
            "Each consumer needs a prefix of its own",
        ),
        (
            "unterminated-prefix",
            serde_json::json!({ "writer_prefixes": { "orders": "redrive/orders" } }),
            "Each writer prefix ends with /",
        ),
        (
            "bucket-url",
            serde_json::json!({ "existing_bucket_name": "s3://orders-payloads" }),
            "existing_bucket_name must be a bucket name",
        ),
        (
            "fractional-days",
            serde_json::json!({ "expire_after_days": 1.5 }),
            "expire_after_days must be a whole number of days",
        ),
    ] {
        let mut broken = inputs.clone();
        for (key, value) in change.as_object().unwrap() {
            broken[key] = value.clone();
        }
        let error = console(&module, &broken, name, "").unwrap_err();
        assert!(error.contains(message), "{name}: {error}");
    }
}

/// Issue 53 item 6: a self-managed Kafka cluster with neither credentials nor the VPC Lambda
/// reaches it through plans, and Lambda refuses its mapping at apply; the module refuses it
/// first, and takes subnets and security groups for a cluster in a VPC.
#[test]
fn a_self_managed_kafka_cluster_needs_credentials_or_its_vpc() {
    if !terraform_installed() {
        return;
    }
    let module =
        std::fs::read_to_string(infra().join("modules/kafka-consumer/variables.tf")).unwrap();
    let inputs = |cluster: serde_json::Value| {
        serde_json::json!({
            "name": "orders-kafka", "function_zip": "bootstrap.zip", "source_cluster": cluster,
            "topics": ["orders"], "consumer_group_id": "warehouse", "alarm_topic_arn": "arn:aws:sns:eu-west-1:123456789012:alarms",
        })
    };
    let servers = serde_json::json!(["broker-1.internal:9092"]);
    for (name, cluster) in [
        (
            "kafka-secret",
            serde_json::json!({ "bootstrap_servers": servers, "sasl_scram_secret_arn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kafka" }),
        ),
        (
            "kafka-vpc",
            serde_json::json!({ "bootstrap_servers": servers, "subnet_ids": ["subnet-0a1b"], "security_group_ids": ["sg-0c1d"] }),
        ),
    ] {
        assert_eq!(
            console(&module, &inputs(cluster), name, "").err(),
            None,
            "{name}"
        );
    }
    for (name, cluster, message) in [
        (
            "kafka-neither",
            serde_json::json!({ "bootstrap_servers": servers }),
            "A self-managed cluster needs sasl_scram_secret_arn, or subnet_ids and",
        ),
        (
            "kafka-subnets-alone",
            serde_json::json!({ "bootstrap_servers": servers, "subnet_ids": ["subnet-0a1b"] }),
            "subnet_ids and security_group_ids come together",
        ),
        (
            "kafka-not-an-id",
            serde_json::json!({ "bootstrap_servers": servers, "subnet_ids": ["10.0.0.0/24"], "security_group_ids": ["sg-0c1d"] }),
            "subnet_ids are subnet-",
        ),
    ] {
        let error = console(&module, &inputs(cluster), name, "").unwrap_err();
        assert!(error.contains(message), "{name}: {error}");
    }
}

/// Issue 53 item 2: a Kafka mapping's retries are unbounded by default, and a record age limit
/// comes only with bounded retries (what ages out is recorded only in the on-failure queue, which
/// exists only with bounded retries; and Lambda caps unbounded retries at 10 beside one).
#[test]
fn a_kafka_record_age_limit_needs_bounded_retries() {
    if !terraform_installed() {
        return;
    }
    let module =
        std::fs::read_to_string(infra().join("modules/kafka-consumer/variables.tf")).unwrap();
    let inputs = |limits: serde_json::Value| {
        let mut inputs = serde_json::json!({
            "name": "orders-kafka", "function_zip": "bootstrap.zip",
            "source_cluster": { "msk_cluster_arn": "arn:aws:kafka:eu-west-1:123456789012:cluster/orders/0a1b" },
            "topics": ["orders"], "consumer_group_id": "warehouse", "alarm_topic_arn": "arn:aws:sns:eu-west-1:123456789012:alarms",
        });
        inputs
            .as_object_mut()
            .unwrap()
            .extend(limits.as_object().unwrap().clone());
        inputs
    };
    assert_eq!(
        console(
            &module,
            &inputs(serde_json::json!({})),
            "kafka-defaults",
            "[var.maximum_retry_attempts, var.maximum_record_age_seconds]"
        ),
        Ok("[\n  -1,\n  -1,\n]".to_owned())
    );
    assert_eq!(
        console(
            &module,
            &inputs(serde_json::json!({ "maximum_retry_attempts": 5, "maximum_record_age_seconds": 86400 })),
            "kafka-bounded",
            ""
        )
        .err(),
        None
    );
    for (name, limits, message) in [
        (
            "kafka-age-alone",
            serde_json::json!({ "maximum_record_age_seconds": 86400 }),
            "maximum_record_age_seconds needs bounded maximum_retry_attempts",
        ),
        (
            "kafka-retries-past-range",
            serde_json::json!({ "maximum_retry_attempts": 10001 }),
            "maximum_retry_attempts must be -1",
        ),
    ] {
        let error = console(&module, &inputs(limits), name, "").unwrap_err();
        assert!(error.contains(message), "{name}: {error}");
    }
}
