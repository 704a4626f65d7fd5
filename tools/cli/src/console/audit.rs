//! The console's audit trail: every change (a job run and its end, an abort, a release, a body
//! revealed) is one EventBridge event, source `redrive.console`, naming who asked (STS
//! `GetCallerIdentity`, which needs no permission: STS API Reference, GetCallerIdentity). A change
//! whose event EventBridge does not confirm is not made.
use serde_json::{json, Value};

/// Where the console's events go, and who it acts as.
pub struct Audit {
    client: aws_sdk_eventbridge::Client,
    bus: String,
    caller: String,
}

/// The event source every console event carries (the Terraform's archive matches it).
pub const SOURCE: &str = "redrive.console";

/// An event EventBridge did not confirm.
#[derive(Debug)]
pub struct NotRecorded(String);

impl std::fmt::Display for NotRecorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the audit event was not recorded, so nothing was changed: {}",
            self.0
        )
    }
}

impl std::error::Error for NotRecorded {}

impl Audit {
    /// Reads the caller's identity once, for every event of this console.
    pub async fn new(
        config: &aws_config::SdkConfig,
        bus: String,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let identity = aws_sdk_sts::Client::new(config)
            .get_caller_identity()
            .send()
            .await
            .map_err(|error| {
                format!(
                    "STS GetCallerIdentity (the audit trail names who acts): {}",
                    aws_sdk_sts::error::DisplayErrorContext(error)
                )
            })?;
        Ok(Self {
            client: aws_sdk_eventbridge::Client::new(config),
            bus,
            caller: identity.arn.unwrap_or_default(),
        })
    }

    /// Who the console acts as.
    pub fn caller(&self) -> &str {
        &self.caller
    }

    /// Puts one event of `detail_type` with `detail` and the caller. PutEvents answers 200 with
    /// per-entry failures (`FailedEntryCount`, an `ErrorCode` per entry: EventBridge User Guide,
    /// "Sending events with PutEvents"), so the entry is checked too.
    pub async fn record(&self, detail_type: &str, mut detail: Value) -> Result<(), NotRecorded> {
        detail["caller"] = json!(self.caller);
        let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(SOURCE)
            .detail_type(detail_type)
            .detail(detail.to_string())
            .build();
        let output = self
            .client
            .put_events()
            .entries(entry)
            .send()
            .await
            .map_err(|error| {
                NotRecorded(format!(
                    "PutEvents on bus {}: {}",
                    self.bus,
                    aws_sdk_eventbridge::error::DisplayErrorContext(error)
                ))
            })?;
        match output.entries().first() {
            Some(entry) if output.failed_entry_count() == 0 && entry.error_code().is_none() => {
                tracing::info!(detail_type, %detail, "audit event recorded");
                Ok(())
            }
            entry => Err(NotRecorded(format!(
                "PutEvents on bus {} refused the entry: {} {}",
                self.bus,
                entry.and_then(|e| e.error_code()).unwrap_or("(no entry)"),
                entry.and_then(|e| e.error_message()).unwrap_or_default(),
            ))),
        }
    }
}
