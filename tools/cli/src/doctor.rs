//! `dlq doctor`: reads the SQS event source mappings of an account (AWS, moto, LocalStack), their
//! functions and queues, and names every setting that loses, duplicates or stalls messages.
//! Gathering (`gather`) is apart from judging (`diagnose`), which takes plain data.
use std::collections::BTreeMap;

use serde::Serialize;

/// One setting that loses, duplicates or stalls messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A short, stable name (`no-partial-batch-response`).
    pub code: &'static str,
    /// The mapping, queue or function it is about.
    pub resource: String,
    /// What is set, in numbers.
    pub what: String,
    /// What it does to messages, and the AWS rule behind it.
    pub why: String,
    /// How to fix it.
    pub fix: String,
}

/// An SQS event source mapping as the doctor reads it.
#[derive(Debug, Clone, Default)]
pub struct Mapping {
    pub uuid: String,
    pub function: String,
    pub queue_arn: String,
    pub batch_size: u32,
    pub batching_window_seconds: u32,
    pub partial_batch_response: bool,
    pub maximum_concurrency: Option<u32>,
    pub provisioned_pollers: bool,
    /// Lambda polls its queue (`State` Enabled or Enabling).
    pub enabled: bool,
    /// The intake controller's switch, when it paused the mapping: why, and when it fires.
    pub switch: Option<(String, String)>,
}

/// A function behind a mapping.
#[derive(Debug, Clone, Default)]
pub struct Function {
    pub timeout_seconds: u32,
    pub environment: BTreeMap<String, String>,
    pub reserved_concurrency: Option<u32>,
    /// `Allow` or `Terminate`; `None` where the endpoint does not say (moto).
    pub recursive_loop: Option<String>,
}

/// A queue: a mapping's source or a source's DLQ.
#[derive(Debug, Clone, Default)]
pub struct Queue {
    pub url: String,
    pub fifo: bool,
    pub visibility_timeout_seconds: u32,
    pub retention_seconds: u32,
    /// The redrive policy: the DLQ's ARN and `maxReceiveCount`.
    pub redrive: Option<(String, u32)>,
}

/// What `gather` read.
#[derive(Debug, Clone, Default)]
pub struct Account {
    pub mappings: Vec<Mapping>,
    pub functions: BTreeMap<String, Function>,
    pub queues: BTreeMap<String, Queue>,
}

impl Account {
    /// The URLs of the DLQs the mappings' queues lead to, each once.
    pub fn dlq_urls(&self) -> Vec<String> {
        let mut urls: Vec<String> = self
            .mappings
            .iter()
            .filter_map(|mapping| self.queues.get(&mapping.queue_arn)?.redrive.as_ref())
            .filter_map(|(dlq_arn, _)| Some(self.queues.get(dlq_arn)?.url.clone()))
            .collect();
        urls.sort();
        urls.dedup();
        urls
    }
}

const SQS_LAMBDA: &str = "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html";
const SQS_ERRORS: &str =
    "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html";
const DLQ_RETENTION: &str = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html";
const RECURSION: &str = "https://docs.aws.amazon.com/lambda/latest/dg/invocation-recursion.html";
const POLLERS: &str = "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html";
const INTAKE: &str =
    "https://docs.aws.amazon.com/lambda/latest/api/API_UpdateEventSourceMapping.html";

/// Every finding in `account`, mapping by mapping.
pub fn diagnose(account: &Account) -> Vec<Finding> {
    let mut findings = Vec::new();
    for mapping in &account.mappings {
        let function = account.functions.get(&mapping.function);
        let queue = account.queues.get(&mapping.queue_arn);
        diagnose_mapping(mapping, function, queue, account, &mut findings);
    }
    findings
}

/// What a disabled mapping's finding says: who holds it, and what that does to its messages.
pub fn disabled(mapping: &Mapping) -> (String, String) {
    match &mapping.switch {
        Some((reason, fires)) => (
            format!("disabled by the intake controller: {reason}"),
            format!("nothing is received from its queue while its downstream is down; the controller probes once a minute and resumes it, and its switch enables it at {fires} (UTC) if the controller stops ({INTAKE})"),
        ),
        None => (
            "disabled, by hand (`dlq pause`) or by a deploy".to_owned(),
            format!("Lambda does not poll its queue: messages wait there until the mapping is enabled, and expire at the queue's retention ({INTAKE})"),
        ),
    }
}

fn diagnose_mapping(
    mapping: &Mapping,
    function: Option<&Function>,
    queue: Option<&Queue>,
    account: &Account,
    findings: &mut Vec<Finding>,
) {
    let here = format!(
        "mapping {} ({} -> {})",
        mapping.uuid, mapping.queue_arn, mapping.function
    );
    let mut find = |code, resource: &str, what: String, why: String, fix: String| {
        findings.push(Finding {
            code,
            resource: resource.to_owned(),
            what,
            why,
            fix,
        })
    };
    if !mapping.enabled {
        let (what, why) = disabled(mapping);
        find(
            "mapping-disabled",
            &here,
            what,
            why,
            format!(
                "once its downstream answers: dlq resume {}",
                mapping.function
            ),
        );
    }
    if !mapping.partial_batch_response {
        find(
            "no-partial-batch-response",
            &here,
            "FunctionResponseTypes lacks ReportBatchItemFailures".into(),
            format!("redrive answers a batch with the records it gives back; without the setting Lambda takes that answer for a success and deletes the whole batch, failed records too ({SQS_ERRORS})"),
            "set function_response_types = [\"ReportBatchItemFailures\"] on the mapping".into(),
        );
    }
    if mapping.provisioned_pollers && mapping.maximum_concurrency.is_some() {
        find(
            "pollers-with-maximum-concurrency",
            &here,
            "provisioned pollers and ScalingConfig.MaximumConcurrency together".into(),
            format!("in provisioned mode the pollers' maximum bounds the invocations; AWS documents the two as alternatives, and the concurrency cap throttles what the pollers hand over, raising receive counts towards the DLQ ({POLLERS})"),
            "keep one: provisioned_pollers or maximum_concurrency".into(),
        );
    }
    let settings = function.map(|function| {
        redrive::Settings::from_lookup(function.environment.keys().map(String::as_str), |name| {
            function.environment.get(name).cloned()
        })
    });
    if let Some(Err(error)) = &settings {
        find(
            "settings-refused",
            &format!("function {}", mapping.function),
            format!("{error}"),
            "the function refuses its REDRIVE_* settings at start: every invocation fails, and the queue's receive counts run up to its DLQ untried".into(),
            "correct or remove that variable in the function's environment (README, Configuration)".into(),
        );
    }
    let max_attempts = match &settings {
        Some(Ok(settings)) => settings.processor.retry.max_attempts,
        _ => 5,
    };
    if let (Some(reserved), Some(maximum)) = (
        function.and_then(|f| f.reserved_concurrency),
        mapping.maximum_concurrency,
    ) {
        if reserved < maximum {
            find(
                "reserved-below-maximum-concurrency",
                &here,
                format!("reserved concurrency {reserved} < the mapping's maximum concurrency {maximum}"),
                format!("the mapping invokes up to {maximum} at once and Lambda throttles what passes {reserved}; each throttled batch is received again, and its receive counts run towards the DLQ untried ({SQS_LAMBDA})"),
                format!("raise the reservation to at least {maximum}, or lower maximum_concurrency"),
            );
        }
    }
    if let (Some(function), Some(Ok(settings))) = (function, &settings) {
        let resends = settings.processor.dlq_url.is_some();
        if resends && function.recursive_loop.as_deref() == Some("Terminate") {
            find(
                "recursion-terminate",
                &format!("function {}", mapping.function),
                "RecursiveLoop = Terminate on a function that re-sends retries to its own queue".into(),
                format!("Lambda stops a message's chain after about 16 invocations through the same queue and drops it, so a record retried or deferred that often is lost ({RECURSION})"),
                "set the function's recursive loop detection to Allow (recursive_loop = \"Allow\")".into(),
            );
        }
    }
    let Some(queue) = queue else {
        return;
    };
    let queue_name = format!("queue {}", queue.url);
    if let Some(function) = function {
        let needed = 6 * function.timeout_seconds + mapping.batching_window_seconds;
        if queue.visibility_timeout_seconds < needed {
            find(
                "visibility-timeout-short",
                &queue_name,
                format!(
                    "VisibilityTimeout {} s < 6 x the function timeout {} s + the batching window {} s = {needed} s",
                    queue.visibility_timeout_seconds, function.timeout_seconds, mapping.batching_window_seconds
                ),
                format!("a batch Lambda retries after throttling, or one still running, reappears while it is handled: its records run twice ({SQS_LAMBDA})"),
                format!("set the queue's visibility timeout to at least {needed} s"),
            );
        }
    }
    let Some((dlq_arn, max_receive_count)) = &queue.redrive else {
        find(
            "no-redrive-policy",
            &queue_name,
            "no redrive policy".into(),
            format!("a message that fails every time (a crash, a timeout, a batch Lambda cannot invoke with) is received until the queue's retention deletes it, unseen; SQS moves nothing to a DLQ ({SQS_ERRORS})"),
            "give the queue a redrive policy into a DLQ (maxReceiveCount of at least 5)".into(),
        );
        return;
    };
    let fifo_batches = queue.fifo && mapping.batch_size > 1;
    let least = if fifo_batches {
        mapping.batch_size * (max_attempts + 1) + 21
    } else {
        (max_attempts + 1).max(5)
    };
    if *max_receive_count < least {
        find(
            "max-receive-count-low",
            &queue_name,
            format!("maxReceiveCount {max_receive_count} < {least}"),
            if fifo_batches {
                format!("on FIFO every record of a batch behind a failure is received again untried; with batches of {} and REDRIVE_MAX_ATTEMPTS={max_attempts}, SQS moves records to the DLQ before redrive has tried them", mapping.batch_size)
            } else {
                format!("throttled and timed-out invocations raise receive counts with no try; below max(5, REDRIVE_MAX_ATTEMPTS + 1) SQS moves records to the DLQ before redrive has spent their attempts ({SQS_LAMBDA})")
            },
            format!("set maxReceiveCount to at least {least}"),
        );
    }
    if fifo_batches {
        let ledger = function.is_some_and(|function| {
            ["REDRIVE_LEDGER_TABLE", "REDRIVE_IDEMPOTENCY_TABLE"]
                .iter()
                .any(|name| function.environment.contains_key(*name))
        });
        if !ledger {
            find(
                "fifo-batch-without-ledger",
                &here,
                format!("FIFO batches of {} without the attempt ledger", mapping.batch_size),
                "a record held back behind its group's failure is received again with no try, and without the ledger each such receive counts as an attempt: records are dead-lettered before they were tried as often as REDRIVE_MAX_ATTEMPTS says".into(),
                "set REDRIVE_LEDGER_TABLE (or REDRIVE_IDEMPOTENCY_TABLE), or a batch size of 1".into(),
            );
        }
    }
    if let Some(dlq) = account.queues.get(dlq_arn) {
        if !queue.fifo && dlq.retention_seconds <= queue.retention_seconds {
            find(
                "dlq-retention-short",
                &format!("queue {}", dlq.url),
                format!(
                    "the DLQ keeps messages {} s, its standard source {} s",
                    dlq.retention_seconds, queue.retention_seconds
                ),
                format!("on a standard queue SQS keeps a moved message's original enqueue time, so the DLQ deletes it once the DLQ's retention has passed since the message was first sent: one that spent days in the source expires in the DLQ soon after it arrives ({DLQ_RETENTION})"),
                format!("set the DLQ's retention above {} s (14 days is SQS's longest)", queue.retention_seconds),
            );
        }
    }
}

/// Reads the SQS mappings (of `functions` only, when any are named), their functions and their
/// queues and DLQs. A read the endpoint does not answer (moto has no recursion config) leaves
/// that field unknown; any other failure stops the doctor with the call named.
pub async fn gather(
    lambda: &aws_sdk_lambda::Client,
    sqs: &aws_sdk_sqs::Client,
    scheduler: &aws_sdk_scheduler::Client,
    functions: &[String],
) -> Result<Account, Box<dyn std::error::Error>> {
    let mut account = Account {
        mappings: mappings(lambda, scheduler, functions).await?,
        ..Account::default()
    };
    for mapping in account.mappings.clone() {
        if !account.functions.contains_key(&mapping.function) {
            let function = read_function(lambda, &mapping.function).await?;
            account.functions.insert(mapping.function.clone(), function);
        }
        read_queue(sqs, &mapping.queue_arn, &mut account).await?;
        let dlq = account.queues[&mapping.queue_arn].redrive.clone();
        if let Some((dlq_arn, _)) = dlq {
            read_queue(sqs, &dlq_arn, &mut account).await?;
        }
    }
    Ok(account)
}

/// The SQS event source mappings (of `functions` only, when any are named), each disabled one
/// with the intake controller's switch if it holds one.
pub async fn mappings(
    lambda: &aws_sdk_lambda::Client,
    scheduler: &aws_sdk_scheduler::Client,
    functions: &[String],
) -> Result<Vec<Mapping>, Box<dyn std::error::Error>> {
    let mut mappings = Vec::new();
    let mut pages = lambda.list_event_source_mappings().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| format!("ListEventSourceMappings: {}", describe(&e)))?;
        for mapping in page.event_source_mappings() {
            let queue_arn = mapping.event_source_arn().unwrap_or_default();
            if !queue_arn.starts_with("arn:") || !queue_arn.contains(":sqs:") {
                continue;
            }
            let function = mapping
                .function_arn()
                .unwrap_or_default()
                .rsplit(':')
                .next()
                .unwrap_or_default()
                .to_owned();
            if !functions.is_empty() && !functions.contains(&function) {
                continue;
            }
            mappings.push(Mapping {
                uuid: mapping.uuid().unwrap_or_default().to_owned(),
                function,
                queue_arn: queue_arn.to_owned(),
                batch_size: to_u32(mapping.batch_size()),
                batching_window_seconds: to_u32(mapping.maximum_batching_window_in_seconds()),
                partial_batch_response: mapping.function_response_types().iter().any(|t| {
                    *t == aws_sdk_lambda::types::FunctionResponseType::ReportBatchItemFailures
                }),
                maximum_concurrency: mapping
                    .scaling_config()
                    .and_then(|scaling| scaling.maximum_concurrency())
                    .map(|n| to_u32(Some(n))),
                provisioned_pollers: mapping.provisioned_poller_config().is_some(),
                enabled: matches!(mapping.state(), Some("Enabled" | "Enabling")),
                switch: None,
            });
        }
    }
    for mapping in mappings.iter_mut().filter(|mapping| !mapping.enabled) {
        mapping.switch = crate::intake::switch(scheduler, &mapping.uuid)
            .await?
            .map(|switch| (switch.description, switch.expression));
    }
    Ok(mappings)
}

async fn read_function(
    lambda: &aws_sdk_lambda::Client,
    name: &str,
) -> Result<Function, Box<dyn std::error::Error>> {
    let configuration = lambda
        .get_function_configuration()
        .function_name(name)
        .send()
        .await
        .map_err(|e| format!("GetFunctionConfiguration {name}: {}", describe(&e)))?;
    let reserved = lambda
        .get_function_concurrency()
        .function_name(name)
        .send()
        .await
        .map_err(|e| format!("GetFunctionConcurrency {name}: {}", describe(&e)))?;
    let recursive_loop = lambda
        .get_function_recursion_config()
        .function_name(name)
        .send()
        .await
        .ok()
        .and_then(|config| config.recursive_loop().map(|r| r.as_str().to_owned()));
    Ok(Function {
        timeout_seconds: to_u32(configuration.timeout()),
        environment: configuration
            .environment()
            .and_then(|env| env.variables())
            .map(|vars| vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        reserved_concurrency: reserved
            .reserved_concurrent_executions()
            .map(|n| to_u32(Some(n))),
        recursive_loop,
    })
}

async fn read_queue(
    sqs: &aws_sdk_sqs::Client,
    arn: &str,
    account: &mut Account,
) -> Result<(), Box<dyn std::error::Error>> {
    if account.queues.contains_key(arn) {
        return Ok(());
    }
    // arn:aws:sqs:REGION:ACCOUNT:NAME
    let mut parts = arn.rsplitn(2, ':');
    let name = parts.next().unwrap_or_default();
    let owner = parts
        .next()
        .and_then(|rest| rest.rsplit(':').next())
        .unwrap_or_default();
    let url = sqs
        .get_queue_url()
        .queue_name(name)
        .queue_owner_aws_account_id(owner)
        .send()
        .await
        .map_err(|e| format!("GetQueueUrl {arn}: {}", describe(&e)))?
        .queue_url
        .unwrap_or_default();
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| format!("GetQueueAttributes {url}: {}", describe(&e)))?
        .attributes
        .unwrap_or_default();
    let number = |name: aws_sdk_sqs::types::QueueAttributeName| {
        attributes
            .get(&name)
            .and_then(|value| value.parse::<u32>().ok())
            .unwrap_or_default()
    };
    use aws_sdk_sqs::types::QueueAttributeName as Name;
    let redrive = attributes.get(&Name::RedrivePolicy).and_then(|policy| {
        let policy: serde_json::Value = serde_json::from_str(policy).ok()?;
        let dlq = policy["deadLetterTargetArn"].as_str()?.to_owned();
        let count = match &policy["maxReceiveCount"] {
            serde_json::Value::String(text) => text.parse().ok()?,
            value => u32::try_from(value.as_u64()?).ok()?,
        };
        Some((dlq, count))
    });
    let queue = Queue {
        fifo: attributes
            .get(&Name::FifoQueue)
            .is_some_and(|value| value == "true"),
        visibility_timeout_seconds: number(Name::VisibilityTimeout),
        retention_seconds: number(Name::MessageRetentionPeriod),
        redrive,
        url,
    };
    account.queues.insert(arn.to_owned(), queue);
    Ok(())
}

fn to_u32(value: Option<i32>) -> u32 {
    value
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or_default()
}

fn describe<E: std::error::Error + 'static>(error: &aws_sdk_lambda::error::SdkError<E>) -> String {
    match error.as_service_error() {
        Some(service) => service.to_string(),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Account {
        let queue = "arn:aws:sqs:eu-west-1:123456789012:orders".to_owned();
        let dlq = "arn:aws:sqs:eu-west-1:123456789012:orders-dlq".to_owned();
        let mut account = Account {
            mappings: vec![Mapping {
                uuid: "m-1".into(),
                function: "orders".into(),
                queue_arn: queue.clone(),
                batch_size: 10,
                partial_batch_response: true,
                maximum_concurrency: Some(10),
                enabled: true,
                ..Mapping::default()
            }],
            ..Account::default()
        };
        account.functions.insert(
            "orders".into(),
            Function {
                timeout_seconds: 30,
                environment: [(
                    "REDRIVE_DLQ_URL".to_owned(),
                    "https://sqs/orders-dlq".to_owned(),
                )]
                .into(),
                reserved_concurrency: None,
                recursive_loop: Some("Allow".into()),
            },
        );
        account.queues.insert(
            queue,
            Queue {
                url: "https://sqs/orders".into(),
                visibility_timeout_seconds: 180,
                retention_seconds: 345_600,
                redrive: Some((dlq.clone(), 10)),
                ..Queue::default()
            },
        );
        account.queues.insert(
            dlq,
            Queue {
                url: "https://sqs/orders-dlq".into(),
                retention_seconds: 1_209_600,
                ..Queue::default()
            },
        );
        account
    }

    fn codes(account: &Account) -> Vec<&'static str> {
        diagnose(account)
            .iter()
            .map(|finding| finding.code)
            .collect()
    }

    /// Issue 43, item 10, the findings moto cannot set up (it has neither provisioned pollers nor
    /// the recursion setting); the others are on moto in tests/cli.rs.
    #[test]
    fn pollers_beside_a_concurrency_cap_and_a_terminated_loop_are_found() {
        assert!(codes(&healthy()).is_empty(), "{:?}", diagnose(&healthy()));
        let mut pollers = healthy();
        pollers.mappings[0].provisioned_pollers = true;
        assert_eq!(codes(&pollers), ["pollers-with-maximum-concurrency"]);
        let mut loop_stopped = healthy();
        loop_stopped
            .functions
            .get_mut("orders")
            .unwrap()
            .recursive_loop = Some("Terminate".into());
        assert_eq!(codes(&loop_stopped), ["recursion-terminate"]);
        let mut report_only = loop_stopped;
        report_only
            .functions
            .get_mut("orders")
            .unwrap()
            .environment
            .clear();
        assert!(
            codes(&report_only).is_empty(),
            "a report-only consumer re-sends nothing"
        );
    }

    /// Issue 56: a disabled mapping says whether the intake controller holds it (and when its
    /// switch fires) or someone else does.
    #[test]
    fn a_disabled_mapping_says_who_paused_it() {
        let mut by_hand = healthy();
        by_hand.mappings[0].enabled = false;
        let findings = diagnose(&by_hand);
        assert_eq!(findings[0].code, "mapping-disabled");
        assert!(findings[0].what.contains("by hand"), "{findings:?}");
        assert!(
            findings[0].fix.contains("dlq resume orders"),
            "{findings:?}"
        );
        let mut by_controller = by_hand;
        by_controller.mappings[0].switch = Some((
            "orders's downstream is down: paused by redrive, probing".into(),
            "at(2026-11-29T15:00:00)".into(),
        ));
        let findings = diagnose(&by_controller);
        assert!(
            findings[0].what.contains("downstream is down"),
            "{findings:?}"
        );
        assert!(
            findings[0].why.contains("at(2026-11-29T15:00:00)"),
            "{findings:?}"
        );
    }
}
