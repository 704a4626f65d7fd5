//! The root stack's input rules, evaluated by Terraform itself: `infra/variables.tf` and the tfvars
//! in a directory of their own (no resources, so no provider to download), where `terraform
//! console` runs every `validation` block as `plan` would. The tfvars pass; broken copies fail with
//! the rule's own message.
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
    let dir = std::env::temp_dir().join(format!("redrive-tfvars-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(infra().join("variables.tf"), dir.join("variables.tf")).unwrap();
    std::fs::write(dir.join("redrive.auto.tfvars.json"), tfvars.to_string()).unwrap();
    let output = Command::new("terraform")
        .args(["console", "-no-color"])
        .current_dir(&dir)
        .env("TF_CLI_CONFIG_FILE", "/dev/null")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("terraform runs");
    std::fs::remove_dir_all(&dir).ok();
    let errors = String::from_utf8_lossy(&output.stderr).into_owned();
    (!output.status.success() || errors.contains("Error:")).then_some(errors)
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
