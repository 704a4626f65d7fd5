//! Jobs: a bulk action on a failure group whose selection is fixed when it is made, its dry run
//! shown before it runs; run, aborted between batches, resumed.
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{Form, Path, State};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use redrive::event::SqsRecord;
use redrive::port::{Clock, SystemClock};
use redrive::reprocess::{browse, failure_groups, Job, JobAction, ReprocessSummary};

use super::{
    bad_request, encode, escape, failed, not_found, queue_name, refused, when, Answer, Console,
    Refusal,
};
use crate::job::reprocess_job;

pub(super) struct JobEntry {
    job: Job,
    dry_run: ReprocessSummary,
    state: JobState,
    abort: Arc<AtomicBool>,
}

enum JobState {
    Ready,
    Running(ReprocessSummary),
    Done(ReprocessSummary),
    Aborted(ReprocessSummary),
    Failed(String),
}

impl JobState {
    /// Whether a run may start (or resume) from here.
    fn may_run(&self) -> bool {
        !matches!(self, Self::Running(_) | Self::Done(_))
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Running(_) => "running",
            Self::Done(_) => "done",
            Self::Aborted(_) => "aborted",
            Self::Failed(_) => "failed",
        }
    }
}

#[derive(Deserialize)]
pub(super) struct NewJob {
    csrf: String,
    queue: String,
    /// A group's key; empty for a job on a filter.
    #[serde(default)]
    group: String,
    action: String,
    #[serde(default)]
    target: String,
    /// The filter, when no group is named: an error kind, an error class, a version bound (each
    /// empty when not asked for).
    #[serde(default)]
    kind: String,
    #[serde(default)]
    class: String,
    #[serde(default)]
    before_version: String,
}

/// The job a form asks for, of a group or on a filter, selected from `records`.
fn job_of(form: &NewJob, records: &[SqsRecord<'_>], action: JobAction) -> Result<Job, Refusal> {
    let now = SystemClock.now_ms();
    if !form.group.is_empty() {
        let groups = failure_groups(records);
        let group = groups
            .iter()
            .find(|group| group.key == form.group)
            .ok_or_else(|| not_found("that group has no messages left"))?;
        return Ok(Job::of_group(&form.queue, group, action, now));
    }
    let some = |text: &str| (!text.trim().is_empty()).then(|| text.trim().to_owned());
    let classes = some(&form.class)
        .map(|class| crate::parse_class(&class))
        .transpose()
        .map_err(|why| bad_request(&why))?;
    let before_version = some(&form.before_version)
        .map(|version| version.parse::<u64>())
        .transpose()
        .map_err(|_| bad_request("a version bound is a published version number"))?;
    let (filter, selected_by) = crate::job::filter_of(
        &form.queue,
        some(&form.kind).into_iter().collect(),
        classes.into_iter().collect(),
        before_version,
    )
    .map_err(|error| bad_request(&error.to_string()))?;
    Ok(Job::of_filter(
        &form.queue,
        records,
        &filter,
        selected_by,
        action,
        now,
    ))
}

/// The action a form asks for; a target queue is checked to exist before anything is selected.
async fn action_of(console: &Console, form: &NewJob) -> Result<JobAction, Refusal> {
    let target = form.target.trim();
    let bad = |why: &str| Err(bad_request(why));
    match form.action.as_str() {
        "redrive" => Ok(JobAction::Redrive),
        "discard" => Ok(JobAction::Discard),
        "redirect" if target.starts_with("arn:") && target.contains(":sqs:") => {
            Ok(JobAction::Redirect {
                destination: target.to_owned(),
            })
        }
        "redirect" => {
            bad("a redirect needs the target queue's ARN (arn:aws:sqs:region:account:name)")
        }
        "archive" if target.starts_with("http") => match console.sqs().describe(target).await {
            Ok(_) => Ok(JobAction::Archive {
                queue_url: target.to_owned(),
            }),
            Err(error) => bad(&format!("the archive queue {target}: {error}")),
        },
        "archive" => bad("an archive needs the archive queue's URL"),
        other => bad(&format!(
            "{other:?} is no action: redrive, redirect, archive or discard"
        )),
    }
}

/// Makes a job of a group as it is now (its selection) and its dry run.
pub(super) async fn new(State(console): State<Arc<Console>>, Form(form): Form<NewJob>) -> Answer {
    console.check_change(&form.csrf)?;
    console.check_queue(&form.queue)?;
    let action = action_of(&console, &form).await?;
    let records = browse(&console.sqs(), &form.queue, console.max)
        .await
        .map_err(failed)?;
    let job = job_of(&form, &records, action)?;
    let dry_run = reprocess_job(console.sqs(), &job, true, Some(console.rate), None, |_| {})
        .await
        .map_err(failed)?;
    let id = {
        let mut jobs = console.jobs.lock().unwrap();
        jobs.push(JobEntry {
            job,
            dry_run,
            state: JobState::Ready,
            abort: Arc::default(),
        });
        jobs.len() - 1
    };
    tracing::info!(job = id, "job made");
    Ok(console.redirect(&format!("/jobs/{id}")))
}

#[derive(Deserialize)]
pub(super) struct Change {
    csrf: String,
}

/// The job's audit detail: what it does to which selection.
fn detail(id: usize, job: &Job) -> serde_json::Value {
    json!({
        "job": id,
        "queue": job.queue_url,
        "action": job.action,
        "group": job.group,
        "selectedBy": job.selected_by,
        "selectionHash": job.selection_hash,
        "selected": job.message_ids.len(),
    })
}

/// Job `id`, and its abort flag, when `state_is` holds of its state; else why not.
fn job_in(
    console: &Console,
    id: usize,
    state_is: impl Fn(&JobState) -> bool,
    why_not: &str,
) -> Result<(Job, Arc<AtomicBool>), Refusal> {
    let jobs = console.jobs.lock().unwrap();
    let entry = jobs.get(id).ok_or_else(|| not_found("no such job"))?;
    if !state_is(&entry.state) {
        return Err(refused(why_not));
    }
    Ok((entry.job.clone(), entry.abort.clone()))
}

/// Runs a job that is ready, or resumes one aborted or failed: an audit event first.
pub(super) async fn run(
    State(console): State<Arc<Console>>,
    Path(id): Path<usize>,
    Form(form): Form<Change>,
) -> Answer {
    console.check_change(&form.csrf)?;
    const BUSY: &str = "the job is running or done";
    let (job, abort) = job_in(&console, id, JobState::may_run, BUSY)?;
    console
        .audit
        .record("Job started", detail(id, &job))
        .await
        .map_err(failed)?;
    {
        // Checked again: another run may have started while the event was put.
        let mut jobs = console.jobs.lock().unwrap();
        let entry = &mut jobs[id];
        if !entry.state.may_run() {
            return Err(refused(BUSY));
        }
        abort.store(false, Ordering::Relaxed);
        entry.state = JobState::Running(ReprocessSummary::default());
    }
    let running = console.clone();
    tokio::spawn(async move {
        let outcome = reprocess_job(
            running.sqs(),
            &job,
            false,
            Some(running.rate),
            Some(abort.clone()),
            |summary| {
                running.jobs.lock().unwrap()[id].state = JobState::Running(summary.clone());
            },
        )
        .await;
        let state = match outcome {
            Ok(summary) if abort.load(Ordering::Relaxed) && summary.stopped_early => {
                JobState::Aborted(summary)
            }
            Ok(summary) => JobState::Done(summary),
            Err(error) => JobState::Failed(error.to_string()),
        };
        let mut ended = detail(id, &job);
        ended["state"] = json!(state.name());
        if let JobState::Done(summary) | JobState::Aborted(summary) = &state {
            ended["summary"] = json!(summary);
        }
        running.jobs.lock().unwrap()[id].state = state;
        // The change is made: an event that cannot be recorded now is logged, loudly.
        if let Err(error) = running.audit.record("Job ended", ended).await {
            tracing::error!(job = id, %error, "the end of a job is missing from the audit trail");
        }
    });
    Ok(console.redirect(&format!("/jobs/{id}")))
}

/// Asks a running job to stop at its next batch: what it sent is deleted first, the rest stays.
pub(super) async fn abort(
    State(console): State<Arc<Console>>,
    Path(id): Path<usize>,
    Form(form): Form<Change>,
) -> Answer {
    console.check_change(&form.csrf)?;
    let running = |state: &JobState| matches!(state, JobState::Running(_));
    let (job, abort) = job_in(&console, id, running, "the job is not running")?;
    console
        .audit
        .record("Job abort asked", detail(id, &job))
        .await
        .map_err(failed)?;
    abort.store(true, Ordering::Relaxed);
    Ok(console.redirect(&format!("/jobs/{id}")))
}

fn summary_list(summary: &ReprocessSummary) -> String {
    format!(
        r#"<dl><dt>sent (home, or to the job's queue)</dt><dd class="reprocessed">{}</dd><dt>archived or discarded</dt><dd class="discarded">{}</dd><dt>left in the DLQ (redrive cap, no origin)</dt><dd class="left">{}</dd><dt>send failures (left)</dt><dd class="send-failures">{}</dd><dt>other messages read past, untouched</dt><dd class="untouched">{}</dd><dt>selected, no longer in the DLQ</dt><dd class="not-found">{}</dd></dl>"#,
        summary.reprocessed,
        summary.discarded,
        summary.manual_review + summary.alerted + summary.not_yet,
        summary.send_failures,
        summary.filtered_out,
        summary.selection_not_found.unwrap_or_default(),
    )
}

pub(super) async fn page(State(console): State<Arc<Console>>, Path(id): Path<usize>) -> Answer {
    let jobs = console.jobs.lock().unwrap();
    let Some(entry) = jobs.get(id) else {
        return Err(not_found("no such job"));
    };
    let job = &entry.job;
    let group = job.group.as_ref().map_or_else(
        || job.selected_by.clone().unwrap_or_default(),
        |group| {
            format!(
                "{} · {} · {} · version {}",
                group.origin,
                group.error_kind,
                group.pattern,
                group.function_version.as_deref().unwrap_or("?")
            )
        },
    );
    let mut body = format!(
        r#"<p><span id="selected">{}</span> messages selected (selection <code>{}</code>) at {}: {}.</p><p>Action: <strong id="action">{}</strong>. A message leaves the DLQ only once SQS has confirmed its copy.</p><h2>Dry run</h2>{}"#,
        job.message_ids.len(),
        job.selection_hash,
        when(Some(job.created_at_ms)),
        escape(&group),
        escape(&job.action.describe()),
        summary_list(&entry.dry_run),
    );
    let refresh = matches!(entry.state, JobState::Running(_));
    match &entry.state {
        JobState::Ready => {
            body.push_str(&console.form(&format!("/jobs/{id}/run"), &[], "Run the job", "run"));
        }
        JobState::Running(summary) => {
            body.push_str("<h2>Run</h2>");
            body.push_str(&summary_list(summary));
            body.push_str(&console.form(&format!("/jobs/{id}/abort"), &[], "Abort", "abort"));
        }
        JobState::Done(summary) => {
            body.push_str("<h2>Run</h2>");
            body.push_str(&summary_list(summary));
        }
        JobState::Aborted(summary) => {
            body.push_str("<h2>Run, aborted</h2>");
            body.push_str(&summary_list(summary));
            body.push_str(&console.form(&format!("/jobs/{id}/run"), &[], "Resume", "run"));
        }
        JobState::Failed(error) => {
            let _ = write!(body, "<p>{}</p>", escape(error));
            body.push_str(&console.form(&format!("/jobs/{id}/run"), &[], "Resume", "run"));
        }
    }
    let _ = write!(
        body,
        r#"<p>State: <strong id="state">{}</strong></p><p><a id="groups" href="{}">The failure groups of {}</a></p>"#,
        entry.state.name(),
        console.link(&format!("/groups?queue={}", encode(&job.queue_url))),
        escape(queue_name(&job.queue_url)),
    );
    Ok(console
        .page(&format!("Job {id}"), refresh, &body)
        .into_response())
}
