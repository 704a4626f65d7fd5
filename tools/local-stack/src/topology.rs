//! The topology: `infra/redrive.auto.tfvars.json`, the one file Terraform and the local stack read,
//! with every consumer's queue, mapping and function settings as Terraform plans them
//! (`infra/rendered/infra.json`, rendered by `tools/plan-infra`): what the local stack creates is
//! what Terraform ships, the provider's defaults included.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct Topology {
    pub name_prefix: String,
    pub consumers: BTreeMap<String, Consumer>,
    pub alarms: Alarms,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Consumer {
    pub fifo: bool,
    pub function_timeout_seconds: u32,
    pub visibility_timeout_seconds: u32,
    pub message_retention_seconds: u32,
    pub dlq_message_retention_seconds: u32,
    pub max_receive_count: u32,
    pub batch_size: u32,
    pub batching_window_seconds: u32,
    /// Records the function handles at once (`REDRIVE_CONCURRENCY`).
    pub record_concurrency: u32,
    /// The shared idempotency store's key (`REDRIVE_IDEMPOTENCY_KEY`), when the consumer has one.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// The source queue's `MaximumMessageSize`, as Terraform plans it.
    #[serde(skip)]
    pub max_message_size: u64,
    /// The DLQ's `MaximumMessageSize`, as Terraform plans it.
    #[serde(skip)]
    pub dlq_max_message_size: u64,
    /// The function's `REDRIVE_*` environment as Terraform plans it, less what is known only
    /// after apply (queue URLs: the local stack's own).
    #[serde(skip)]
    pub environment: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Alarms {
    pub period_seconds: u32,
    pub oldest_message_age_seconds: u32,
    pub lambda_errors_threshold: u32,
    pub lambda_throttles_threshold: u32,
    pub dlq_oldest_message_age_seconds: u32,
    pub deferred_threshold: u32,
    pub transient_errors_threshold: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a valid topology: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path} does not hold {what} (run `tools/with-local-aws tools/plan-infra --write`)")]
    Rendering { path: String, what: String },
}

/// The tfvars file of this checkout.
pub fn default_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/redrive.auto.tfvars.json")
}

/// What Terraform plans for `configuration` (`infra` or an example's name), as `tools/plan-infra`
/// renders it in this checkout's `infra/rendered/`.
pub fn rendering(configuration: &str) -> Result<serde_json::Value, TopologyError> {
    read_json(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../infra/rendered")
            .join(format!("{configuration}.json")),
    )
}

/// What a plan shows for a value known only after apply.
const KNOWN_AFTER_APPLY: &str = "(known after apply)";

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, TopologyError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: shown.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| TopologyError::Parse {
        path: shown,
        source,
    })
}

impl Topology {
    /// The tfvars at `path`, each consumer's settings taken from the rendering of the stack's plan
    /// beside it (`rendered/infra.json`).
    pub fn load(path: &Path) -> Result<Self, TopologyError> {
        let mut topology: Self = read_json(path)?;
        let rendering = path.with_file_name("rendered").join("infra.json");
        topology.take_shipped(&rendering, &read_json(&rendering)?)?;
        Ok(topology)
    }

    /// Each consumer's queues, mapping and function as the rendering shows them.
    fn take_shipped(
        &mut self,
        path: &Path,
        rendering: &serde_json::Value,
    ) -> Result<(), TopologyError> {
        let missing = |what: String| TopologyError::Rendering {
            path: path.display().to_string(),
            what,
        };
        let keys: Vec<String> = self.consumers.keys().cloned().collect();
        for key in keys {
            let (name, dlq_name) = self.queue_names(&key);
            let queue = &rendering["queues"][&name];
            let dlq = &rendering["queues"][&dlq_name];
            let mapping = &rendering["mappings"]
                [format!("module.consumer[\"{key}\"].aws_lambda_event_source_mapping.consumer")];
            let function = &rendering["functions"][format!("{}-{key}", self.name_prefix)];
            let environment = &function["environment"];
            let number = |value: &serde_json::Value, what: &str| {
                value
                    .as_u64()
                    .ok_or_else(|| missing(format!("{what} of consumer {key}")))
            };
            let consumer = self.consumers.get_mut(&key).expect("a key of the map");
            consumer.visibility_timeout_seconds =
                number(&queue["visibility_timeout_seconds"], "queue visibility")? as u32;
            consumer.message_retention_seconds =
                number(&queue["message_retention_seconds"], "queue retention")? as u32;
            consumer.max_message_size = number(&queue["max_message_size"], "queue size")?;
            consumer.max_receive_count = number(
                &queue["redrive_policy"]["max_receive_count"],
                "queue receive count",
            )? as u32;
            consumer.dlq_message_retention_seconds =
                number(&dlq["message_retention_seconds"], "DLQ retention")? as u32;
            consumer.dlq_max_message_size = number(&dlq["max_message_size"], "DLQ size")?;
            consumer.batch_size = number(&mapping["batch_size"], "mapping batch size")? as u32;
            consumer.batching_window_seconds = mapping["maximum_batching_window_in_seconds"]
                .as_u64()
                .unwrap_or(0) as u32;
            consumer.function_timeout_seconds =
                number(&function["timeout"], "function timeout")? as u32;
            consumer.record_concurrency = environment["REDRIVE_CONCURRENCY"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| missing(format!("REDRIVE_CONCURRENCY of consumer {key}")))?;
            consumer.idempotency_key = environment["REDRIVE_IDEMPOTENCY_KEY"]
                .as_str()
                .map(str::to_owned);
            consumer.environment = environment
                .as_object()
                .ok_or_else(|| missing(format!("the environment of consumer {key}")))?
                .iter()
                .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_owned())))
                .filter(|(_, value)| value != KNOWN_AFTER_APPLY)
                .collect();
        }
        Ok(())
    }

    /// Queue names as Terraform creates them: `<prefix>-<key>` and `<prefix>-<key>-dlq`, with
    /// `.fifo` for FIFO consumers.
    pub fn queue_names(&self, key: &str) -> (String, String) {
        let suffix = if self.consumers[key].fifo {
            ".fifo"
        } else {
            ""
        };
        (
            format!("{}-{key}{suffix}", self.name_prefix),
            format!("{}-{key}-dlq{suffix}", self.name_prefix),
        )
    }

    /// The `REDRIVE_*` environment Terraform gives the function of consumer `key`, with the local
    /// stack's DLQ and idempotency table, and the queue's visibility timeout and retention as this
    /// topology has them (a test or the demo may shorten them).
    pub fn function_env(&self, key: &str, dlq_url: &str) -> Vec<(String, String)> {
        let consumer = &self.consumers[key];
        let mut env = consumer.environment.clone();
        env.insert("REDRIVE_DLQ_URL".to_owned(), dlq_url.to_owned());
        if let Some(table) = env.get_mut("REDRIVE_IDEMPOTENCY_TABLE") {
            // The table modules/idempotency-table makes, under this topology's prefix.
            *table = format!("{}-{key}-idempotency", self.name_prefix);
        }
        for (name, seconds) in [
            (
                "REDRIVE_SOURCE_VISIBILITY_TIMEOUT",
                consumer.visibility_timeout_seconds,
            ),
            (
                "REDRIVE_SOURCE_RETENTION",
                consumer.message_retention_seconds,
            ),
        ] {
            if let Some(value) = env.get_mut(name) {
                *value = format!("{seconds}s");
            }
        }
        env.into_iter().collect()
    }

    /// The settings the function gets from that environment, with `overrides` applied: the same
    /// parsing and validation as in Lambda.
    pub fn settings(
        &self,
        key: &str,
        dlq_url: &str,
        overrides: &[(&str, &str)],
    ) -> Result<redrive::Settings, redrive::ConfigError> {
        let mut env = self.function_env(key, dlq_url);
        for (name, value) in overrides {
            env.retain(|(n, _)| n != name);
            env.push((name.to_string(), value.to_string()));
        }
        let lookup = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        redrive::Settings::from_lookup(env.iter().map(|(n, _)| n.as_str()), lookup)
    }

    /// Divides every wait by `factor` (the demo runs minutes of retries in seconds).
    pub fn scale_time(&mut self, factor: f64) {
        for consumer in self.consumers.values_mut() {
            for (name, value) in &mut consumer.environment {
                // REDRIVE_DEFER_MAX_AGE is at least a minute; a breaker stays open a second or more.
                let floor = match name.as_str() {
                    "REDRIVE_BACKOFF_BASE" | "REDRIVE_BACKOFF_CAP" | "REDRIVE_RETRY_SEQUENCE" => {
                        0.0
                    }
                    "REDRIVE_DEFER_MAX_AGE" => 60.0,
                    "REDRIVE_BREAKER_OPEN_FOR" => 1.0,
                    _ => continue,
                };
                let scaled: Vec<String> = value
                    .split(',')
                    .map(|seconds| {
                        let seconds: f64 = seconds.trim_end_matches('s').parse().unwrap_or(0.0);
                        format!("{}s", (seconds / factor).max(floor))
                    })
                    .collect();
                *value = scaled.join(",");
            }
            let visibility =
                (f64::from(consumer.visibility_timeout_seconds) / factor).ceil() as u32;
            consumer.visibility_timeout_seconds = visibility.max(1);
        }
    }
}
