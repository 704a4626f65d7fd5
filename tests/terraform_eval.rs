//! The input rules, evaluated by Terraform itself: variables and values in a directory of their own
//! (no resources, so no provider to download), where `terraform console` runs every `validation`
//! block as `plan` would. The root stack's tfvars pass; each example's inputs pass, and so do the
//! arguments its module calls evaluate to, against the called module's rules; broken copies fail
//! with the rule's own message.
use std::path::{Path, PathBuf};
use std::process::Command;

fn infra() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("infra")
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

fn terraform_installed() -> bool {
    let found = Command::new("terraform").arg("version").output().is_ok();
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

    let broken: [(&str, Breaking, &str); 5] = [
        (
            "reserved-key",
            |v| v["consumers"]["archive"] = v["consumers"]["orders"].clone(),
            "A consumer key may not be archive",
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
    for name in ["own-consumer", "redrive-only"] {
        assert_eq!(evaluate_example(name, &main_tf(name)), Ok(()), "{name}");
    }
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
