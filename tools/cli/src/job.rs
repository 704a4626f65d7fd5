//! `dlq job`: a selection fixed when it is made (one failure group, or a filter across groups),
//! written to a file, run and resumed from it; the console's jobs run through the same steps.
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Subcommand;
use redrive::config::ReprocessSettings;
use redrive::port::{Clock, SystemClock};
use redrive::reprocess::{
    browse, failure_groups, Filter, Job, JobAction, ReprocessCommand, ReprocessSummary, Reprocessor,
};
use redrive::{ErrorClass, SqsQueue};

use crate::parse_class;

#[derive(Subcommand)]
pub(crate) enum JobCommand {
    /// Read the DLQ, select every message of one failure group (its key from `dlq groups`) or
    /// every message a filter takes, write the job to --out and show what running it would do (a
    /// dry run, as JSON).
    New {
        /// The DLQ: URL, ARN or name.
        queue: String,
        /// The group's key, as `dlq groups` prints it.
        #[arg(long, required_unless_present_any = ["error_kinds", "error_classes", "before_version"], conflicts_with_all = ["error_kinds", "error_classes", "before_version"])]
        group: Option<String>,
        /// Or a filter across groups: only this error kind (repeatable).
        #[arg(long = "error-kind")]
        error_kinds: Vec<String>,
        /// Only this error class (transient, permanent, panic; repeatable).
        #[arg(long = "error-class", value_parser = parse_class)]
        error_classes: Vec<ErrorClass>,
        /// Only what failed on a published function version below N.
        #[arg(long, value_name = "N")]
        before_version: Option<u64>,
        /// Redirect: queue ARN to send every message to instead of each message's origin.
        #[arg(long, conflicts_with_all = ["archive", "discard"])]
        destination: Option<String>,
        /// Archive: copy every message as it is to this queue (URL), then delete it.
        #[arg(long, conflicts_with = "discard")]
        archive: Option<String>,
        /// Discard: delete every message; nothing is kept.
        #[arg(long)]
        discard: bool,
        /// Messages to read at most while selecting.
        #[arg(long, default_value_t = 10_000)]
        max: u32,
        /// Where to write the job (JSON).
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Run a job: each selected message still in the DLQ is sent home (or to the job's
    /// destination) and deleted once SQS confirmed the copy; any other message is made visible
    /// again untouched. Interrupted, it resumes when run again. Prints the summary as JSON.
    Run {
        /// The job file `dlq job new` wrote.
        job: std::path::PathBuf,
        /// Decide and count; send and delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Messages re-sent per second at most.
        #[arg(long, default_value_t = 50.0)]
        rate: f64,
    },
}

/// Runs `dlq job new` or `dlq job run`.
pub(crate) async fn run(
    sqs: SqsQueue,
    command: JobCommand,
    out: &mut impl Write,
) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        JobCommand::New {
            queue,
            group,
            error_kinds,
            error_classes,
            before_version,
            destination,
            archive,
            discard,
            max,
            out: path,
        } => {
            let url = sqs.resolve(&queue).await?;
            let records = browse(&sqs, &url, max).await?;
            let action = match (destination, archive, discard) {
                (Some(destination), _, _) => JobAction::Redirect { destination },
                (_, Some(archive), _) => JobAction::Archive {
                    queue_url: sqs.resolve(&archive).await?,
                },
                (_, _, true) => JobAction::Discard,
                _ => JobAction::Redrive,
            };
            let job = match group {
                Some(group) => {
                    let groups = failure_groups(&records);
                    let chosen = groups
                        .iter()
                        .find(|candidate| candidate.key == group)
                        .ok_or_else(|| {
                            format!("no failure group {group} in {url}: `dlq groups {queue}` lists them")
                        })?;
                    Job::of_group(&url, chosen, action, SystemClock.now_ms())
                }
                None => {
                    let (filter, selected_by) =
                        filter_of(&url, error_kinds, error_classes, before_version)
                            .map_err(|error| error as Box<dyn std::error::Error>)?;
                    Job::of_filter(
                        &url,
                        &records,
                        &filter,
                        selected_by,
                        action,
                        SystemClock.now_ms(),
                    )
                }
            };
            std::fs::write(&path, serde_json::to_string_pretty(&job)? + "\n")
                .map_err(|error| format!("{}: {error}", path.display()))?;
            eprintln!(
                "dlq: {} messages selected (selection {}), written to {}; a dry run:",
                job.message_ids.len(),
                job.selection_hash,
                path.display()
            );
            let summary = run_job(sqs, &job, true, None).await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
        }
        JobCommand::Run { job, dry_run, rate } => {
            let text = std::fs::read_to_string(&job)
                .map_err(|error| format!("{}: {error}", job.display()))?;
            let job: Job = serde_json::from_str(&text)
                .map_err(|error| format!("{}: not a job: {error}", job.display()))?;
            if !job.is_intact() {
                return Err("the job's selection does not match its selectionHash: make it again with `dlq job new`".into());
            }
            let summary = run_job(sqs, &job, dry_run, Some(rate)).await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
        }
    }
    Ok(())
}

/// Runs `job` under the operator's settings (REDRIVE_REPROCESS_MAX: the redrive cap), showing
/// its progress through the selection on stderr.
async fn run_job(
    sqs: SqsQueue,
    job: &Job,
    dry_run: bool,
    rate: Option<f64>,
) -> Result<ReprocessSummary, Box<dyn std::error::Error>> {
    let selected = job.message_ids.len();
    let summary = reprocess_job(sqs, job, dry_run, rate, None, |summary| {
        eprint!(
            "\r{}/{selected} selected examined, {} redriven, {} left in the DLQ, {} others read past untouched",
            summary.examined - summary.filtered_out,
            summary.reprocessed,
            summary.manual_review + summary.alerted + summary.not_yet + summary.send_failures,
            summary.filtered_out,
        );
    })
    .await
    .map_err(|error| error as Box<dyn std::error::Error>)?;
    eprintln!();
    Ok(summary)
}

/// The filter of a job across groups, and how it reads: error kinds, classes, a version bound.
pub(crate) fn filter_of(
    queue_url: &str,
    error_kinds: Vec<String>,
    error_classes: Vec<ErrorClass>,
    before_version: Option<u64>,
) -> Result<(Filter, String), Box<dyn std::error::Error + Send + Sync>> {
    let mut words = Vec::new();
    if !error_kinds.is_empty() {
        words.push(format!("error kind {}", error_kinds.join(" or ")));
    }
    if !error_classes.is_empty() {
        let classes: Vec<&str> = error_classes.iter().map(|class| class.as_str()).collect();
        words.push(format!("error class {}", classes.join(" or ")));
    }
    if let Some(version) = before_version {
        words.push(format!("failed on a version below {version}"));
    }
    if words.is_empty() {
        return Err("a job on a filter needs an error kind, an error class or a version".into());
    }
    let command = ReprocessCommand {
        source: Some(queue_url.to_owned()),
        error_kinds,
        error_classes,
        before_version,
        ..ReprocessCommand::default()
    };
    let filter = command.plan(&ReprocessSettings::from_env()?)?.filter;
    Ok((filter, words.join(", ")))
}

/// Runs `job` under the operator's settings; `progress` sees the summary after every batch, and
/// once `abort` is set the run stops at its next batch.
pub(crate) async fn reprocess_job(
    sqs: SqsQueue,
    job: &Job,
    dry_run: bool,
    rate: Option<f64>,
    abort: Option<Arc<AtomicBool>>,
    progress: impl FnMut(&ReprocessSummary),
) -> Result<ReprocessSummary, Box<dyn std::error::Error + Send + Sync>> {
    let settings = ReprocessSettings::from_env()?;
    let plan = job.plan(&settings, dry_run, rate)?;
    let mut reprocessor = Reprocessor::new(sqs, &settings);
    if let Some(abort) = abort {
        reprocessor = reprocessor.with_abort(abort);
    }
    Ok(reprocessor.run(&plan, None, progress).await?)
}
