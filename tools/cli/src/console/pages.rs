//! The reading pages: queues, a queue's failure groups, a group's messages, one message.
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Form, Query, State};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use redrive::envelope::Meta;
use redrive::event::SqsRecord;
use redrive::ledger::AttemptLedger;
use redrive::reprocess::{browse, failure_groups, FailureGroup, Fingerprint};

use super::{encode, escape, failed, not_found, queue_name, when, Answer, Console};

pub(super) async fn queues(State(console): State<Arc<Console>>) -> Answer {
    let mut rows = String::new();
    for url in &console.queues {
        let depth = console.sqs().describe(url).await.map_err(failed)?;
        let _ = write!(
            rows,
            r#"<tr data-queue="{name}"><td><a class="queue" href="{link}">{name}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            depth.visible,
            depth.in_flight,
            depth.delayed,
            name = escape(queue_name(url)),
            link = console.link(&format!("/groups?queue={}", encode(url))),
        );
    }
    let held = match &console.ledger {
        None => String::new(),
        Some((table, ledger)) => match ledger.held().await {
            Ok(held) => format!(
                r#"<p><a href="{}"><span id="held-count">{}</span> FIFO groups held</a> on a head (ledger table {}).</p>"#,
                console.link("/held"),
                held.len(),
                escape(table)
            ),
            Err(error) => return Err(failed(error)),
        },
    };
    let paused = paused_intakes(&console).await;
    let body = format!(
        "<p>Approximate depths, as SQS counts them. A queue's page reads its messages (hidden while read, then visible again: nothing is consumed).</p>\
         <table><tr><th>DLQ</th><th>visible</th><th>in flight</th><th>delayed</th></tr>{rows}</table>{held}{paused}"
    );
    Ok(console.page("Queues", false, &body).into_response())
}

/// The account's disabled SQS mappings and who holds each (the intake controller, with its reason
/// and when its switch fires, or someone else), as `dlq doctor` says; a line saying why when the
/// mappings cannot be read (the page still shows the DLQs).
async fn paused_intakes(console: &Console) -> String {
    let mappings = match crate::doctor::mappings(&console.lambda, &console.scheduler, &[]).await {
        Ok(mappings) => mappings,
        Err(error) => {
            return format!(
                r#"<p id="paused-intakes">The event source mappings could not be read: {}</p>"#,
                escape(&error.to_string())
            )
        }
    };
    let rows: String = mappings
        .iter()
        .filter(|mapping| !mapping.enabled)
        .map(|mapping| {
            let (what, why) = crate::doctor::disabled(mapping);
            format!(
                r#"<tr data-function="{function}"><td>{function}</td><td>{queue}</td><td>{what}</td><td>{why}</td></tr>"#,
                function = escape(&mapping.function),
                queue = escape(queue_name(&mapping.queue_arn)),
                // The doctor's words are for a terminal: no backticks on a page.
                what = escape(&what.replace('`', "")),
                why = escape(&why),
            )
        })
        .collect();
    if rows.is_empty() {
        return r#"<p id="paused-intakes">Every SQS mapping of the account polls.</p>"#.to_owned();
    }
    format!(
        r#"<h2>Paused intakes</h2><table id="paused-intakes"><tr><th>function</th><th>queue</th><th>paused</th><th>what it does</th></tr>{rows}</table><p>dlq resume &lt;function&gt; enables a function's mappings again.</p>"#
    )
}

#[derive(Deserialize)]
pub(super) struct QueueQuery {
    queue: String,
}

/// When a dead letter arrived in the DLQ: the envelope's `deadLetteredAt`, else its SentTimestamp.
fn arrived_ms(record: &SqsRecord<'_>) -> Option<u64> {
    Meta::of(record)
        .and_then(Result::ok)
        .and_then(|meta| meta.dead_lettered_at.map(|at| at.0))
        .or_else(|| record.sent_ms())
}

/// Counts of `times` in equal buckets between `from` and `to`, as a small SVG bar chart.
fn sparkline(times: &[u64], from: u64, to: u64, width: u32, height: u32) -> String {
    const BUCKETS: usize = 24;
    let mut counts = [0u32; BUCKETS];
    let span = to.saturating_sub(from).max(1);
    for &at in times {
        let bucket =
            (at.saturating_sub(from) as u128 * BUCKETS as u128 / (span as u128 + 1)) as usize;
        counts[bucket.min(BUCKETS - 1)] += 1;
    }
    let most = counts.iter().copied().max().unwrap_or(0).max(1);
    let bar = width / BUCKETS as u32;
    let mut svg = format!(
        r#"<svg class="sparkline" width="{width}" height="{height}" role="img" aria-label="{} over time">"#,
        times.len()
    );
    for (index, count) in counts.iter().enumerate() {
        let tall = (count * height).div_ceil(most);
        let _ = write!(
            svg,
            r##"<rect x="{}" y="{}" width="{}" height="{tall}" fill="#c0392b"/>"##,
            index as u32 * bar,
            height - tall,
            bar.saturating_sub(1).max(1),
        );
    }
    svg.push_str("</svg>");
    svg
}

pub(super) async fn groups(
    State(console): State<Arc<Console>>,
    Query(query): Query<QueueQuery>,
) -> Answer {
    console.check_queue(&query.queue)?;
    let records = browse(&console.sqs(), &query.queue, console.max)
        .await
        .map_err(failed)?;
    let groups = failure_groups(&records);
    let mut arrivals: HashMap<String, Vec<u64>> = HashMap::new();
    for record in &records {
        if let Some(at) = arrived_ms(record) {
            let key = Fingerprint::of(record).key();
            arrivals.entry(key).or_default().push(at);
        }
    }
    let all: Vec<u64> = arrivals.values().flatten().copied().collect();
    let (from, to) = (
        all.iter().copied().min().unwrap_or(0),
        all.iter().copied().max().unwrap_or(0),
    );
    let mut rows = String::new();
    for group in &groups {
        let line = sparkline(
            arrivals.get(&group.key).map_or(&[][..], Vec::as_slice),
            from,
            to,
            96,
            18,
        );
        rows.push_str(&group_row(&console, &query.queue, group, &line));
    }
    let body = format!(
        r#"<p><span id="read">{}</span> messages read, in {} groups; arrivals from {} to {}:</p>{}
<p>A job takes the messages of its group, or those its filter takes, as they are when it is made: a later failure is never in it. Its dry run shows what it would do before it does anything.</p>{filter}
<table><tr><th>count</th><th>arrivals</th><th>origin</th><th>function</th><th>version</th><th>class</th><th>kind</th><th>error</th><th>first seen</th><th>last seen</th><th>example</th><th>act on the group</th></tr>{rows}</table>"#,
        records.len(),
        groups.len(),
        when(Some(from)),
        when(Some(to)),
        sparkline(&all, from, to, 480, 40),
        filter = filter_form(&console, &query.queue, &groups),
    );
    Ok(console
        .page(
            &format!("Failure groups of {}", queue_name(&query.queue)),
            false,
            &body,
        )
        .into_response())
}

/// The form of a job on a filter across groups: an error kind, an error class, a version bound.
fn filter_form(console: &Console, queue: &str, groups: &[FailureGroup]) -> String {
    let mut kinds: Vec<&str> = groups
        .iter()
        .map(|group| group.fingerprint.error_kind.as_str())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    let options = |values: &[&str]| {
        values.iter().fold(
            r#"<option value="">any</option>"#.to_owned(),
            |mut html, value| {
                let _ = write!(html, r#"<option value="{0}">{0}</option>"#, escape(value));
                html
            },
        )
    };
    format!(
        r#"<form method="post" action="{action}"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="queue" value="{queue}">A job on a filter: kind <select name="kind" id="filter-kind">{kinds}</select> class <select name="class" id="filter-class">{classes}</select> failed before version <input name="before_version" id="filter-before" size="4"> → <select name="action" id="filter-action"><option value="redrive">redrive</option><option value="redirect">redirect to queue ARN</option><option value="archive">archive to queue URL</option><option value="discard">discard</option></select> <input name="target" id="filter-target" size="24" placeholder="queue ARN or URL"> <button id="filter-job">Make the job…</button></form>"#,
        action = console.link("/jobs"),
        csrf = console.csrf,
        queue = escape(queue),
        kinds = options(&kinds),
        classes = options(&["transient", "permanent", "panic"]),
    )
}

fn group_row(console: &Console, queue: &str, group: &FailureGroup, sparkline: &str) -> String {
    let fingerprint = &group.fingerprint;
    let version = fingerprint.function_version.as_deref().unwrap_or_default();
    let other = format!(
        r#"<form method="post" action="{action}"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="queue" value="{queue}"><input type="hidden" name="group" value="{key}"><select name="action" id="action-{key}"><option value="redirect">redirect to queue ARN</option><option value="archive">archive to queue URL</option><option value="discard">discard</option></select> <input name="target" id="target-{key}" size="24" placeholder="queue ARN or URL"> <button id="other-{key}">Make the job…</button></form>"#,
        action = console.link("/jobs"),
        csrf = console.csrf,
        queue = escape(queue),
        key = escape(&group.key),
    );
    format!(
        r#"<tr class="group" data-key="{key}" data-kind="{kind}" data-version="{version}"><td><a class="messages" href="{messages}">{count}</a></td><td>{sparkline}</td><td>{origin}</td><td>{function}</td><td>{version}</td><td>{class}</td><td>{kind}</td><td><code>{pattern}</code></td><td>{first}</td><td>{last}</td><td><code>{example}</code></td><td>{redrive}{other}</td></tr>"#,
        key = escape(&group.key),
        kind = escape(&fingerprint.error_kind),
        version = escape(version),
        messages = console.link(&format!(
            "/messages?queue={}&group={}",
            encode(queue),
            encode(&group.key)
        )),
        count = group.count,
        origin = escape(&fingerprint.origin),
        function = escape(fingerprint.function.as_deref().unwrap_or_default()),
        class = escape(&fingerprint.error_class),
        pattern = escape(&fingerprint.pattern),
        first = when(group.first_seen_ms),
        last = when(group.last_seen_ms),
        example = escape(&group.example),
        redrive = console.form(
            "/jobs",
            &[
                ("queue", queue),
                ("group", &group.key),
                ("action", "redrive")
            ],
            "Redrive this group…",
            &format!("redrive-{}", group.key),
        ),
    )
}

#[derive(Deserialize)]
pub(super) struct GroupQuery {
    queue: String,
    group: String,
}

/// The messages shown of a group at most.
const SHOWN: usize = 200;

pub(super) async fn messages(
    State(console): State<Arc<Console>>,
    Query(query): Query<GroupQuery>,
) -> Answer {
    console.check_queue(&query.queue)?;
    let records = browse(&console.sqs(), &query.queue, console.max)
        .await
        .map_err(failed)?;
    let members: Vec<&SqsRecord<'_>> = records
        .iter()
        .filter(|record| Fingerprint::of(record).key() == query.group)
        .collect();
    let mut rows = String::new();
    for record in members.iter().take(SHOWN) {
        let id = record.message_id.as_deref().unwrap_or_default();
        let meta = Meta::of(record).and_then(Result::ok);
        let _ = write!(
            rows,
            r#"<tr><td><a class="message" href="{link}">{id}</a></td><td>{failed}</td><td>{attempts}</td><td>{redriven}</td><td><code>{error}</code></td></tr>"#,
            link = console.link(&format!(
                "/message?queue={}&id={}",
                encode(&query.queue),
                encode(id)
            )),
            id = escape(id),
            failed = when(meta.as_ref().map(|m| m.last_failure_at.0)),
            attempts = meta.as_ref().map_or(0, |m| m.attempts),
            redriven = meta.as_ref().map_or(0, |m| m.reprocess_count),
            error = escape(meta.as_ref().map_or("", |m| &*m.error_message)),
        );
    }
    let body = format!(
        "<p>{} messages in this group ({} shown).</p><table><tr><th>message id</th><th>last failure</th><th>attempts</th><th>redriven</th><th>error</th></tr>{rows}</table>",
        members.len(),
        members.len().min(SHOWN),
    );
    Ok(console
        .page(&format!("Group {}", query.group), false, &body)
        .into_response())
}

#[derive(Deserialize)]
pub(super) struct MessageQuery {
    queue: String,
    id: String,
}

pub(super) async fn message(
    State(console): State<Arc<Console>>,
    Query(query): Query<MessageQuery>,
) -> Answer {
    message_view(&console, &query.queue, &query.id, false).await
}

#[derive(Deserialize)]
pub(super) struct Reveal {
    csrf: String,
    queue: String,
    id: String,
}

/// Shows a message's body: an audit event first (a body may hold personal data), then a log line.
pub(super) async fn reveal(
    State(console): State<Arc<Console>>,
    Form(form): Form<Reveal>,
) -> Answer {
    console.check_change(&form.csrf)?;
    console.check_queue(&form.queue)?;
    let detail = json!({ "queue": form.queue, "messageId": form.id });
    console
        .audit
        .record("Message body revealed", detail)
        .await
        .map_err(failed)?;
    tracing::warn!(
        queue = form.queue,
        message_id = form.id,
        "message body revealed"
    );
    message_view(&console, &form.queue, &form.id, true).await
}

async fn message_view(console: &Console, queue: &str, id: &str, reveal: bool) -> Answer {
    console.check_queue(queue)?;
    let records = browse(&console.sqs(), queue, console.max)
        .await
        .map_err(failed)?;
    let Some(record) = records
        .iter()
        .find(|record| record.message_id.as_deref() == Some(id))
    else {
        return Err(not_found(
            "that message is no longer in the DLQ (or beyond the messages read)",
        ));
    };
    let mut body = String::from("<h2>Failure</h2>");
    match Meta::of(record) {
        None => body.push_str("<p>No failure envelope: SQS moved it here by itself.</p>"),
        Some(Err(error)) => {
            let _ = write!(
                body,
                "<p>An unreadable envelope: {}</p>",
                escape(&error.to_string())
            );
        }
        Some(Ok(meta)) => body.push_str(&envelope(&meta)),
    }
    body.push_str(
        "<h2>Message attributes</h2><table><tr><th>name</th><th>type</th><th>value</th></tr>",
    );
    let mut names: Vec<_> = record.message_attributes.keys().collect();
    names.sort();
    for name in names {
        if &**name == redrive::envelope::META_ATTRIBUTE {
            continue;
        }
        let value = &record.message_attributes[name];
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            escape(name),
            escape(&value.data_type),
            escape(value.string_value.as_deref().unwrap_or("(binary)")),
        );
    }
    let _ = write!(
        body,
        "</table><h2>SQS</h2><table><tr><th>sent</th><td>{}</td></tr><tr><th>received (this read included)</th><td>{}</td></tr><tr><th>message group</th><td>{}</td></tr></table><h2>Body</h2>",
        when(record.sent_ms()),
        escape(record.attributes.approximate_receive_count.as_deref().unwrap_or_default()),
        escape(record.attributes.message_group_id.as_deref().unwrap_or("-")),
    );
    if reveal {
        let _ = write!(
            body,
            r#"<pre id="body">{}</pre>"#,
            escape(record.body.as_deref().unwrap_or_default())
        );
    } else {
        let bytes = record.body.as_deref().map_or(0, str::len);
        let _ = write!(
            body,
            "<p>{bytes} bytes, hidden: showing it is recorded in the audit trail.</p>"
        );
        body.push_str(&console.form(
            "/message/reveal",
            &[("queue", queue), ("id", id)],
            "Reveal the body",
            "reveal",
        ));
    }
    Ok(console
        .page(&format!("Message {id}"), false, &body)
        .into_response())
}

/// The failure envelope as a table, the request id and trace id as links to their logs and trace.
fn envelope(meta: &Meta<'_>) -> String {
    let origin: &str = &meta.origin_queue_arn;
    let region = origin.split(':').nth(3).unwrap_or("us-east-1");
    let mut rows = vec![
        ("origin queue", escape(origin)),
        ("origin message id", escape(&meta.origin_message_id)),
        ("error class", escape(meta.error_class.as_str())),
        ("error kind", escape(&meta.error_kind)),
        (
            "error",
            format!("<code>{}</code>", escape(&meta.error_message)),
        ),
        ("attempts", meta.attempts.to_string()),
        ("first failure", when(Some(meta.first_failure_at.0))),
        ("last failure", when(Some(meta.last_failure_at.0))),
        ("dead-lettered", when(meta.dead_lettered_at.map(|at| at.0))),
        ("redriven", meta.reprocess_count.to_string()),
        ("last redrive", when(meta.redriven_at.map(|at| at.0))),
    ];
    if let Some(at) = &meta.failed_in {
        rows.push(("function", escape(&at.function)));
        rows.push(("version", escape(at.version.as_deref().unwrap_or("?"))));
        rows.push((
            "request id",
            format!(
                r#"<a id="logs" href="{}">{}</a> (its log lines, CloudWatch Logs Insights)"#,
                escape(&logs_insights(region, &at.function, &at.request_id)),
                escape(&at.request_id)
            ),
        ));
        if let Some(trace) = &at.trace_id {
            rows.push((
                "trace id",
                format!(
                    r#"<a id="trace" href="{}">{}</a> (X-Ray)"#,
                    escape(&x_ray(region, trace)),
                    escape(trace)
                ),
            ));
        }
    }
    let mut table = String::from("<table>");
    for (name, value) in rows {
        let _ = write!(table, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    table.push_str("</table>");
    table
}

/// The CloudWatch console's deep link to a Logs Insights query of the function's default log
/// group (`/aws/lambda/<function>`) for one request, over the last 14 days (SQS keeps a message
/// 14 days at most). The console's form: `~(...)` lists, `'` before a string, and each string
/// URI-encoded with `*` in place of `%`.
fn logs_insights(region: &str, function: &str, request_id: &str) -> String {
    let star = |text: &str| encode(text).replace('%', "*");
    let query = format!(
        "fields @timestamp, @message | filter @requestId = \"{request_id}\" | sort @timestamp asc"
    );
    format!(
        "https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#logsV2:logs-insights$3FqueryDetail$3D~(end~0~start~-1209600~timeType~'RELATIVE~unit~'seconds~editorString~'{}~source~(~'{}))",
        star(&query),
        star(&format!("/aws/lambda/{function}")),
    )
}

/// The CloudWatch console's X-Ray trace page; a trace header's `Root=` is the trace id.
fn x_ray(region: &str, trace: &str) -> String {
    let id = trace
        .split(';')
        .next()
        .unwrap_or(trace)
        .trim_start_matches("Root=");
    format!(
        "https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#xray:traces/{id}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_counts_each_time_once_in_its_bucket() {
        let svg = sparkline(&[0, 0, 50, 100], 0, 100, 48, 10);
        assert_eq!(svg.matches("<rect").count(), 24);
        assert!(svg.contains("4 over time"));
        assert!(
            svg.contains(r#"y="0" width="1" height="10""#),
            "the tallest: 2 at 0"
        );
    }

    #[test]
    fn links_name_the_request_and_the_trace() {
        let logs = logs_insights("eu-west-1", "orders", "c6af9ac6-7b61");
        assert!(logs.starts_with("https://eu-west-1.console.aws.amazon.com/cloudwatch/"));
        assert!(logs.contains("c6af9ac6-7b61") && logs.contains("*2Faws*2Flambda*2Forders"));
        assert!(!logs.contains('%') && !logs.contains(' '));
        assert_eq!(
            x_ray("eu-west-1", "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"),
            "https://eu-west-1.console.aws.amazon.com/cloudwatch/home?region=eu-west-1#xray:traces/1-5759e988-bd862e3fe1be46a994272793"
        );
    }
}
