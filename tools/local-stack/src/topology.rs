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

/// Where a rendering holds one consumer: its queue, DLQ, mapping and function.
#[derive(Debug, Clone, Copy)]
pub struct ShippedNames<'a> {
    pub queue: &'a str,
    pub dlq: &'a str,
    /// The mapping's address in the plan.
    pub mapping: &'a str,
    pub function: &'a str,
}

impl Consumer {
    /// The consumer `names` point at in `rendering` (read from `path`), as Terraform plans it.
    pub fn shipped(
        path: &Path,
        rendering: &serde_json::Value,
        names: ShippedNames<'_>,
    ) -> Result<Self, TopologyError> {
        let missing = |what: String| TopologyError::Rendering {
            path: path.display().to_string(),
            what,
        };
        let queue = &rendering["queues"][names.queue];
        let dlq = &rendering["queues"][names.dlq];
        let mapping = &rendering["mappings"][names.mapping];
        let function = &rendering["functions"][names.function];
        let environment = &function["environment"];
        let number = |value: &serde_json::Value, what: &str| {
            value
                .as_u64()
                .ok_or_else(|| missing(format!("{what} of {}", names.queue)))
        };
        let whole = |value: &serde_json::Value, what: &str| -> Result<u32, TopologyError> {
            let n = number(value, what)?;
            u32::try_from(n).map_err(|_| missing(format!("{what} of {} as a u32", names.queue)))
        };
        Ok(Self {
            fifo: queue["fifo_queue"].as_bool().unwrap_or(false),
            function_timeout_seconds: whole(&function["timeout"], "function timeout")?,
            visibility_timeout_seconds: whole(
                &queue["visibility_timeout_seconds"],
                "queue visibility",
            )?,
            message_retention_seconds: whole(
                &queue["message_retention_seconds"],
                "queue retention",
            )?,
            dlq_message_retention_seconds: whole(
                &dlq["message_retention_seconds"],
                "DLQ retention",
            )?,
            max_receive_count: whole(
                &queue["redrive_policy"]["max_receive_count"],
                "queue receive count",
            )?,
            batch_size: whole(&mapping["batch_size"], "mapping batch size")?,
            batching_window_seconds: mapping["maximum_batching_window_in_seconds"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            record_concurrency: environment["REDRIVE_CONCURRENCY"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| missing(format!("REDRIVE_CONCURRENCY of {}", names.function)))?,
            idempotency_key: environment["REDRIVE_IDEMPOTENCY_KEY"]
                .as_str()
                .map(str::to_owned),
            max_message_size: number(&queue["max_message_size"], "queue size")?,
            dlq_max_message_size: number(&dlq["max_message_size"], "DLQ size")?,
            environment: environment
                .as_object()
                .ok_or_else(|| missing(format!("the environment of {}", names.function)))?
                .iter()
                .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_owned())))
                .filter(|(_, value)| value != KNOWN_AFTER_APPLY)
                .collect(),
        })
    }
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
        Self::load_as(path, "infra")
    }

    /// This checkout's tfvars, each consumer as the rendering of `configuration` (`infra` or
    /// `infra-held`, the tfvars with a FIFO consumer holding its groups) ships it.
    pub fn shipped(configuration: &str) -> Result<Self, TopologyError> {
        Self::load_as(&default_path(), configuration)
    }

    fn load_as(path: &Path, configuration: &str) -> Result<Self, TopologyError> {
        let mut topology: Self = read_json(path)?;
        let rendering = path
            .with_file_name("rendered")
            .join(format!("{configuration}.json"));
        topology.take_shipped(&rendering, &read_json(&rendering)?)?;
        Ok(topology)
    }

    /// Each consumer's queues, mapping and function as the rendering shows them.
    fn take_shipped(
        &mut self,
        path: &Path,
        rendering: &serde_json::Value,
    ) -> Result<(), TopologyError> {
        let keys: Vec<String> = self.consumers.keys().cloned().collect();
        for key in keys {
            let (name, dlq_name) = self.queue_names(&key);
            let shipped = Consumer::shipped(
                path,
                rendering,
                ShippedNames {
                    queue: &name,
                    dlq: &dlq_name,
                    mapping: &format!(
                        "module.consumer[\"{key}\"].aws_lambda_event_source_mapping.consumer"
                    ),
                    function: &format!("{}-{key}", self.name_prefix),
                },
            )?;
            self.consumers.insert(key, shipped);
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
        if env.contains_key("REDRIVE_PAUSE_AFTER") {
            // The queue modules/intake-controller makes (its URL is known after apply), named
            // under this topology's prefix.
            env.insert(
                "REDRIVE_PAUSE_QUEUE_URL".to_owned(),
                format!("{}-intake-requests", self.name_prefix),
            );
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

    /// Divides every wait by `factor` (the demo and the Kafka soak run minutes of retries in
    /// seconds), the engine's defaults of the waits Terraform leaves unset included.
    pub fn scale_time(&mut self, factor: f64) {
        // (variable, floor in seconds): REDRIVE_DEFER_MAX_AGE is at least a minute; a breaker
        // stays open a second or more.
        const SCALED: [(&str, f64); 5] = [
            ("REDRIVE_BACKOFF_BASE", 0.0),
            ("REDRIVE_BACKOFF_CAP", 0.0),
            ("REDRIVE_RETRY_SEQUENCE", 0.0),
            ("REDRIVE_DEFER_MAX_AGE", 60.0),
            ("REDRIVE_BREAKER_OPEN_FOR", 1.0),
        ];
        for consumer in self.consumers.values_mut() {
            for (name, floor) in SCALED {
                let Some(value) = consumer
                    .environment
                    .get(name)
                    .cloned()
                    .or_else(|| engine_default(name))
                else {
                    continue;
                };
                let scaled: Option<Vec<String>> = value
                    .split(',')
                    .map(|wait| {
                        let seconds = redrive::retry::parse_duration(wait)?.as_secs_f64();
                        Some(format!("{}s", (seconds / factor).max(floor)))
                    })
                    .collect();
                if let Some(scaled) = scaled {
                    consumer
                        .environment
                        .insert(name.to_owned(), scaled.join(","));
                }
            }
            let visibility =
                (f64::from(consumer.visibility_timeout_seconds) / factor).ceil() as u32;
            consumer.visibility_timeout_seconds = visibility.max(1);
        }
    }
}

/// The engine's default of `name` where it is a wait (`2s`, `1h: ...` in [`redrive::config::VARIABLES`]).
fn engine_default(name: &str) -> Option<String> {
    let (_, documented) = redrive::config::VARIABLES
        .iter()
        .find(|(n, _)| *n == name)?;
    let default = documented.split([':', ' ']).next()?;
    redrive::retry::parse_duration(default).map(|_| default.to_owned())
}
