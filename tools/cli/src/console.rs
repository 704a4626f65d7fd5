//! `dlq console`: the DLQ console in a browser, served on loopback. Every request carries the
//! random token of the URL it prints; every change also carries a second random value its forms
//! hold (a page of another site can neither read nor guess it), and a request whose `Host` is not
//! the console's own (DNS rebinding) is refused.
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use redrive::clock::{Clock, SystemClock};
use redrive::reprocess::{browse, failure_groups, FailureGroup, Job, ReprocessSummary};
use redrive::SqsQueue;

use crate::reprocess_job;

/// What `dlq console` serves from.
pub struct Console {
    client: aws_sdk_sqs::Client,
    queues: Vec<String>,
    max: u32,
    rate: f64,
    token: String,
    csrf: String,
    host: String,
    jobs: Mutex<Vec<JobEntry>>,
}

struct JobEntry {
    job: Job,
    dry_run: ReprocessSummary,
    state: JobState,
}

enum JobState {
    Ready,
    Running(ReprocessSummary),
    Done(ReprocessSummary),
    Failed(String),
}

/// Serves the console for `queues` (URLs) on `listen` until the process is stopped; prints its
/// URL, token included, on stdout first.
pub async fn serve(
    client: aws_sdk_sqs::Client,
    queues: Vec<String>,
    listen: SocketAddr,
    max: u32,
    rate: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let address = listener.local_addr()?;
    let console = Arc::new(Console {
        client,
        queues,
        max,
        rate,
        token: random_hex()?,
        csrf: random_hex()?,
        host: address.to_string(),
        jobs: Mutex::default(),
    });
    println!("http://{address}/?token={}", console.token);
    eprintln!("dlq: console on http://{address}/ (the token above is its key; Ctrl-C ends it)");
    let app = Router::new()
        .route("/", get(queues_page))
        .route("/groups", get(groups_page))
        .route("/jobs", post(new_job))
        .route("/jobs/{id}", get(job_page))
        .route("/jobs/{id}/run", post(run_job))
        .layer(middleware::from_fn_with_state(console.clone(), guard))
        .with_state(console);
    axum::serve(listener, app).await?;
    Ok(())
}

/// 128 random bits from the operating system, as hex.
fn random_hex() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes)?;
    Ok(bytes.iter().fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    }))
}

/// Equal, in a time that does not depend on where two secrets first differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0, |diff, (x, y)| diff | (x ^ y))
            == 0
}

fn refused(why: &str) -> Response {
    (StatusCode::FORBIDDEN, format!("dlq console: {why}\n")).into_response()
}

/// The token on every request, the console's own `Host`, and on a change an `Origin` (when the
/// browser sends one) that is the console's own.
async fn guard(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    match admitted(&console, &request) {
        Ok(()) => next.run(request).await,
        Err(why) => refused(why),
    }
}

fn admitted(console: &Console, request: &Request) -> Result<(), &'static str> {
    let token = request
        .uri()
        .query()
        .and_then(|query| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix("token="))
        })
        .unwrap_or_default();
    if !same(token, &console.token) {
        return Err("no or a wrong token: open the URL `dlq console` printed");
    }
    let header_is = |name: header::HeaderName, wanted: &str| {
        request
            .headers()
            .get(name)
            .is_none_or(|value| value.to_str().is_ok_and(|value| value == wanted))
    };
    if !request.headers().contains_key(header::HOST) || !header_is(header::HOST, &console.host) {
        return Err("a Host that is not the console's");
    }
    if request.method() != axum::http::Method::GET
        && !header_is(header::ORIGIN, &format!("http://{}", console.host))
    {
        return Err("a change asked by another site");
    }
    Ok(())
}

impl Console {
    fn link(&self, path: &str) -> String {
        let separator = if path.contains('?') { '&' } else { '?' };
        escape(&format!("{path}{separator}token={}", self.token))
    }

    fn page(&self, title: &str, refresh: bool, body: &str) -> Html<String> {
        let refresh = if refresh {
            r#"<meta http-equiv="refresh" content="1">"#
        } else {
            ""
        };
        Html(format!(
            r#"<!doctype html><html lang="en"><head><meta charset="utf-8">{refresh}<title>{title} · dlq console</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}th{{background:#f4f4f4}}code{{font-size:12px}}</style>
</head><body><p><a href="{home}">Queues</a></p><h1>{title}</h1>{body}</body></html>"#,
            title = escape(title),
            home = self.link("/"),
        ))
    }

    fn sqs(&self) -> SqsQueue {
        SqsQueue::with_client(self.client.clone())
    }

    /// A form that posts a change, with the console's CSRF value.
    fn form(&self, action: &str, fields: &[(&str, &str)], button: &str, id: &str) -> String {
        let mut form = format!(
            r#"<form method="post" action="{}"><input type="hidden" name="csrf" value="{}">"#,
            self.link(action),
            self.csrf
        );
        for (name, value) in fields {
            let _ = write!(
                form,
                r#"<input type="hidden" name="{name}" value="{}">"#,
                escape(value)
            );
        }
        let _ = write!(form, r#"<button id="{id}">{button}</button></form>"#);
        form
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn when(ms: Option<u64>) -> String {
    ms.map_or_else(String::new, |ms| {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        humantime::format_rfc3339_seconds(at).to_string()
    })
}

fn failed(error: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_GATEWAY, format!("dlq console: {error}\n")).into_response()
}

async fn queues_page(State(console): State<Arc<Console>>) -> Response {
    let mut rows = String::new();
    for url in &console.queues {
        let depth = match console.sqs().describe(url).await {
            Ok(depth) => depth,
            Err(error) => return failed(error),
        };
        let name = url.rsplit('/').next().unwrap_or(url);
        let _ = write!(
            rows,
            r#"<tr data-queue="{name}"><td><a class="queue" href="{link}">{name}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            depth.visible,
            depth.in_flight,
            depth.delayed,
            name = escape(name),
            link = console.link(&format!("/groups?queue={}", encode(url))),
        );
    }
    let body = format!(
        "<table><tr><th>DLQ</th><th>visible</th><th>in flight</th><th>delayed</th></tr>{rows}</table>"
    );
    console.page("Queues", false, &body).into_response()
}

#[derive(Deserialize)]
struct QueueQuery {
    queue: String,
}

async fn groups_page(
    State(console): State<Arc<Console>>,
    Query(query): Query<QueueQuery>,
) -> Response {
    if !console.queues.contains(&query.queue) {
        return refused("a queue the console was not started with");
    }
    let groups = match browse(&console.sqs(), &query.queue, console.max).await {
        Ok(records) => failure_groups(&records),
        Err(error) => return failed(error),
    };
    let mut rows = String::new();
    for group in &groups {
        rows.push_str(&group_row(&console, &query.queue, group));
    }
    let name = query.queue.rsplit('/').next().unwrap_or(&query.queue);
    let body = format!(
        "<p>{} messages read, in {} groups. A job takes the messages of its group as they are when it is made: a later failure is never in it.</p>\
         <table><tr><th>count</th><th>origin</th><th>function</th><th>version</th><th>class</th><th>kind</th><th>error</th><th>first seen</th><th>last seen</th><th>example</th><th></th></tr>{rows}</table>",
        groups.iter().map(|group| group.count).sum::<u32>(),
        groups.len(),
    );
    console
        .page(&format!("Failure groups of {name}"), false, &body)
        .into_response()
}

fn group_row(console: &Console, queue: &str, group: &FailureGroup) -> String {
    let fingerprint = &group.fingerprint;
    let version = fingerprint.function_version.as_deref().unwrap_or_default();
    format!(
        r#"<tr class="group" data-key="{key}" data-kind="{kind}" data-version="{version}"><td>{count}</td><td>{origin}</td><td>{function}</td><td>{version}</td><td>{class}</td><td>{kind}</td><td><code>{pattern}</code></td><td>{first}</td><td>{last}</td><td><code>{example}</code></td><td>{form}</td></tr>"#,
        key = escape(&group.key),
        kind = escape(&fingerprint.error_kind),
        version = escape(version),
        count = group.count,
        origin = escape(&fingerprint.origin),
        function = escape(fingerprint.function.as_deref().unwrap_or_default()),
        class = escape(&fingerprint.error_class),
        pattern = escape(&fingerprint.pattern),
        first = when(group.first_seen_ms),
        last = when(group.last_seen_ms),
        example = escape(&group.example),
        form = console.form(
            "/jobs",
            &[("queue", queue), ("group", &group.key)],
            "Redrive this group…",
            &format!("redrive-{}", group.key),
        ),
    )
}

#[derive(Deserialize)]
struct NewJob {
    csrf: String,
    queue: String,
    group: String,
}

/// Makes a job of a group as it is now (its selection) and its dry run.
async fn new_job(State(console): State<Arc<Console>>, Form(form): Form<NewJob>) -> Response {
    if !same(&form.csrf, &console.csrf) {
        return refused("a change without the console's form value (CSRF)");
    }
    if !console.queues.contains(&form.queue) {
        return refused("a queue the console was not started with");
    }
    let groups = match browse(&console.sqs(), &form.queue, console.max).await {
        Ok(records) => failure_groups(&records),
        Err(error) => return failed(error),
    };
    let Some(group) = groups.iter().find(|group| group.key == form.group) else {
        return (
            StatusCode::NOT_FOUND,
            "dlq console: that group has no messages left\n",
        )
            .into_response();
    };
    let job = Job::of_group(&form.queue, group, None, SystemClock.now_ms());
    let dry_run = match reprocess_job(console.sqs(), &job, true, Some(console.rate), |_| {}).await {
        Ok(summary) => summary,
        Err(error) => return failed(error),
    };
    let id = {
        let mut jobs = console.jobs.lock().unwrap();
        jobs.push(JobEntry {
            job,
            dry_run,
            state: JobState::Ready,
        });
        jobs.len() - 1
    };
    tracing::info!(job = id, group = form.group, "job made");
    Redirect::to(&format!("/jobs/{id}?token={}", console.token)).into_response()
}

#[derive(Deserialize)]
struct Change {
    csrf: String,
}

async fn run_job(
    State(console): State<Arc<Console>>,
    Path(id): Path<usize>,
    Form(form): Form<Change>,
) -> Response {
    if !same(&form.csrf, &console.csrf) {
        return refused("a change without the console's form value (CSRF)");
    }
    let job = {
        let mut jobs = console.jobs.lock().unwrap();
        let Some(entry) = jobs.get_mut(id) else {
            return (StatusCode::NOT_FOUND, "dlq console: no such job\n").into_response();
        };
        if !matches!(entry.state, JobState::Ready) {
            return refused("the job ran already");
        }
        entry.state = JobState::Running(ReprocessSummary::default());
        entry.job.clone()
    };
    let running = console.clone();
    tokio::spawn(async move {
        let outcome = reprocess_job(running.sqs(), &job, false, Some(running.rate), |summary| {
            running.jobs.lock().unwrap()[id].state = JobState::Running(summary.clone());
        })
        .await;
        running.jobs.lock().unwrap()[id].state = match outcome {
            Ok(summary) => JobState::Done(summary),
            Err(error) => JobState::Failed(error.to_string()),
        };
    });
    Redirect::to(&format!("/jobs/{id}?token={}", console.token)).into_response()
}

fn summary_list(summary: &ReprocessSummary) -> String {
    format!(
        r#"<dl><dt>sent home</dt><dd class="reprocessed">{}</dd><dt>left in the DLQ (redrive cap, no origin)</dt><dd class="left">{}</dd><dt>send failures (left)</dt><dd class="send-failures">{}</dd><dt>other messages read past, untouched</dt><dd class="untouched">{}</dd><dt>selected, no longer in the DLQ</dt><dd class="not-found">{}</dd></dl>"#,
        summary.reprocessed,
        summary.manual_review + summary.alerted + summary.not_yet,
        summary.send_failures,
        summary.filtered_out,
        summary.selection_not_found.unwrap_or_default(),
    )
}

async fn job_page(State(console): State<Arc<Console>>, Path(id): Path<usize>) -> Response {
    let jobs = console.jobs.lock().unwrap();
    let Some(entry) = jobs.get(id) else {
        return (StatusCode::NOT_FOUND, "dlq console: no such job\n").into_response();
    };
    let job = &entry.job;
    let group = job.group.as_ref().map_or_else(String::new, |group| {
        format!(
            "{} · {} · {} · version {}",
            group.origin,
            group.error_kind,
            group.pattern,
            group.function_version.as_deref().unwrap_or("?")
        )
    });
    let mut body = format!(
        r#"<p><span id="selected">{}</span> messages selected (selection <code>{}</code>) at {}: {}; each goes to the queue it failed in, sent before it is deleted.</p><h2>Dry run</h2>{}"#,
        job.message_ids.len(),
        job.selection_hash,
        when(Some(job.created_at_ms)),
        escape(&group),
        summary_list(&entry.dry_run),
    );
    let (state, refresh) = match &entry.state {
        JobState::Ready => {
            body.push_str(&console.form(&format!("/jobs/{id}/run"), &[], "Run the job", "run"));
            ("ready", false)
        }
        JobState::Running(summary) => {
            body.push_str(&summary_list(summary));
            ("running", true)
        }
        JobState::Done(summary) => {
            body.push_str("<h2>Run</h2>");
            body.push_str(&summary_list(summary));
            ("done", false)
        }
        JobState::Failed(error) => {
            let _ = write!(body, "<p>{}</p>", escape(error));
            ("failed", false)
        }
    };
    let _ = write!(body, r#"<p>State: <strong id="state">{state}</strong></p>"#);
    console
        .page(&format!("Job {id}"), refresh, &body)
        .into_response()
}

/// `text` as a URL query value.
fn encode(text: &str) -> String {
    text.bytes().fold(String::new(), |mut out, byte| {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
        out
    })
}
