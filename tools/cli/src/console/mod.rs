//! `dlq console`: the DLQ console in a browser, served on loopback. Every request carries the
//! random token of the URL it prints; every change also carries a second random value its forms
//! hold (a page of another site can neither read nor guess it), and a request whose `Host` is not
//! the console's own (DNS rebinding) is refused. Every change is an audit event first
//! ([`audit`]).
mod audit;
mod held;
mod jobs;
mod pages;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use redrive::aws::DynamoDbStore;
use redrive::SqsQueue;

use audit::Audit;
use jobs::JobEntry;

/// What `dlq console` is started with.
pub struct Options {
    /// The DLQs (URLs).
    pub queues: Vec<String>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Messages read per queue at most.
    pub max: u32,
    /// Messages a job moves per second at most.
    pub rate: f64,
    /// The consumer's ledger table, for its held FIFO groups.
    pub table: Option<String>,
    /// The EventBridge bus of the audit trail.
    pub audit_bus: String,
}

/// What `dlq console` serves from.
pub struct Console {
    client: aws_sdk_sqs::Client,
    /// The event source mappings and the intake controller's switches: paused intakes.
    lambda: aws_sdk_lambda::Client,
    scheduler: aws_sdk_scheduler::Client,
    ledger: Option<(String, DynamoDbStore)>,
    audit: Audit,
    queues: Vec<String>,
    max: u32,
    rate: f64,
    token: String,
    csrf: String,
    host: String,
    jobs: Mutex<Vec<JobEntry>>,
}

/// Serves the console until the process is stopped; prints its URL, token included, on stdout
/// first.
pub async fn serve(
    config: &aws_config::SdkConfig,
    options: Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let audit = Audit::new(config, options.audit_bus).await?;
    let listener = tokio::net::TcpListener::bind(options.listen).await?;
    let address = listener.local_addr()?;
    let ledger = options.table.map(|table| {
        let store =
            DynamoDbStore::with_client(aws_sdk_dynamodb::Client::new(config), table.clone());
        (table, store)
    });
    eprintln!(
        "dlq: console on http://{address}/ as {} (the token below is its key; Ctrl-C ends it)",
        audit.caller()
    );
    let console = Arc::new(Console {
        client: aws_sdk_sqs::Client::new(config),
        lambda: aws_sdk_lambda::Client::new(config),
        scheduler: aws_sdk_scheduler::Client::new(config),
        ledger,
        audit,
        queues: options.queues,
        max: options.max,
        rate: options.rate,
        token: random_hex()?,
        csrf: random_hex()?,
        host: address.to_string(),
        jobs: Mutex::default(),
    });
    println!("http://{address}/?token={}", console.token);
    let app = Router::new()
        .route("/", get(pages::queues))
        .route("/groups", get(pages::groups))
        .route("/messages", get(pages::messages))
        .route("/message", get(pages::message))
        .route("/message/reveal", post(pages::reveal))
        .route("/held", get(held::page))
        .route("/held/release", post(held::release))
        .route("/jobs", post(jobs::new))
        .route("/jobs/{id}", get(jobs::page))
        .route("/jobs/{id}/run", post(jobs::run))
        .route("/jobs/{id}/abort", post(jobs::abort))
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

/// Why the console answers a request with an error: its status, and a line for the operator.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, format!("dlq console: {}\n", self.1)).into_response()
    }
}

/// What every page and change answers.
type Answer = Result<Response, Refusal>;

fn refused(why: &str) -> Refusal {
    Refusal(StatusCode::FORBIDDEN, why.to_owned())
}

fn failed(error: impl std::fmt::Display) -> Refusal {
    Refusal(StatusCode::BAD_GATEWAY, error.to_string())
}

fn not_found(what: &str) -> Refusal {
    Refusal(StatusCode::NOT_FOUND, what.to_owned())
}

fn bad_request(why: &str) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, why.to_owned())
}

/// The token on every request, the console's own `Host`, and on a change an `Origin` (when the
/// browser sends one) that is the console's own.
async fn guard(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    match admitted(&console, &request) {
        Ok(()) => next.run(request).await,
        Err(why) => refused(why).into_response(),
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
<style>body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}th{{background:#f4f4f4}}code{{font-size:12px}}dl{{display:grid;grid-template-columns:max-content auto;gap:2px 16px}}dd{{margin:0;font-weight:bold}}</style>
</head><body><p><a id="home" href="{home}">Queues</a>{held}</p><h1>{title}</h1>{body}</body></html>"#,
            title = escape(title),
            home = self.link("/"),
            held = if self.ledger.is_some() {
                format!(
                    r#" · <a id="held" href="{}">Held FIFO groups</a>"#,
                    self.link("/held")
                )
            } else {
                String::new()
            },
        ))
    }

    /// A change carries the console's form value (CSRF).
    fn check_change(&self, csrf: &str) -> Result<(), Refusal> {
        if same(csrf, &self.csrf) {
            Ok(())
        } else {
            Err(refused("a change without the console's form value (CSRF)"))
        }
    }

    /// Only the queues the console was started with are read or changed.
    fn check_queue(&self, queue: &str) -> Result<(), Refusal> {
        if self.queues.iter().any(|known| known == queue) {
            Ok(())
        } else {
            Err(refused("a queue the console was not started with"))
        }
    }

    /// Where a page goes after a change (a redirect keeps the token).
    fn redirect(&self, path: &str) -> Response {
        let separator = if path.contains('?') { '&' } else { '?' };
        axum::response::Redirect::to(&format!("{path}{separator}token={}", self.token))
            .into_response()
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

/// The name of a queue, from its URL or ARN.
fn queue_name(queue: &str) -> &str {
    queue.rsplit(['/', ':']).next().unwrap_or(queue)
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
