//! The console's grouping row: an incident of 10,000 dead letters (6 error kinds on 3 function
//! versions) in a DLQ on LocalStack, read and grouped as `dlq groups` and the console's groups page
//! do (`browse`, then `failure_groups`). Beside it, in alternation, a boto3 loop that only reads the
//! same DLQ and makes it visible again: what any client of SQS pays to look at every message. moto
//! cannot hold the incident: it computes every queue attribute for each message it hands out
//! (1.6 s per ReceiveMessage at 2,000 messages).
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redrive::reprocess::{browse, failure_groups};
use redrive::SqsQueue;

/// Dead letters in the incident (`redrive_local::incident`: 6 kinds on 3 versions).
pub const MESSAGES: usize = 10_000;
/// Alternated runs of each.
const RUNS: usize = 3;

/// Median seconds to read and group the incident, and to only read it with boto3.
pub struct Measured {
    pub ours_s: f64,
    pub boto3_s: f64,
    pub groups: usize,
}

/// LocalStack in host mode on a free loopback port, stopped (its state removed) when dropped.
struct LocalStack {
    child: Child,
    port: u16,
    state: PathBuf,
}

impl LocalStack {
    fn start(python: &Path) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let state = std::env::temp_dir().join(format!("bench-localstack-{port}"));
        // Only loopback and SQS, as tools/with-local-aws starts it.
        let child = Command::new(python)
            .args(["-m", "localstack.runtime.main"])
            .env("GATEWAY_LISTEN", format!("127.0.0.1:{port}"))
            .env("SERVICES", "sqs")
            .env("DNS_ADDRESS", "0")
            .env("SKIP_SSL_CERT_DOWNLOAD", "1")
            .env("DISABLE_EVENTS", "1")
            .env("LOCALSTACK_VOLUME_DIR", &state)
            .env("FILESYSTEM_ROOT", state.join("fs"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        let localstack = Self { child, port, state };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(120) {
                return Err("LocalStack did not start within 120 s".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(localstack)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for LocalStack {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// `None` when LocalStack is not installed (`make localstack`: it needs Python 3.13).
pub fn measure(localstack_python: &Path, python: &Path) -> Result<Option<Measured>, String> {
    if !localstack_python.exists() {
        return Ok(None);
    }
    let localstack = LocalStack::start(localstack_python)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let client = redrive_local::sqs_client_at(&localstack.endpoint());
    let dlq_url = runtime.block_on(async {
        let created = client
            .create_queue()
            .queue_name("incident-dlq")
            .send()
            .await;
        let url = created.map_err(|e| format!("CreateQueue: {e}"))?.queue_url;
        let url = url.ok_or("no queue URL")?;
        let origin = "arn:aws:sqs:us-east-1:000000000000:orders";
        redrive_local::incident::seed(&client, &url, origin, 0..MESSAGES)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(url)
    })?;
    let sqs = SqsQueue::with_client(client);
    let script = Path::new("tools/bench/peers/browse_dlq.py");
    let (mut ours, mut boto3, mut groups) = (Vec::new(), Vec::new(), 0);
    for _ in 0..RUNS {
        let started = Instant::now();
        let records = runtime
            .block_on(browse(&sqs, &dlq_url, 2 * MESSAGES as u32))
            .map_err(|e| e.to_string())?;
        groups = failure_groups(&records).len();
        ours.push(started.elapsed().as_secs_f64());
        if records.len() != MESSAGES {
            return Err(format!("read {} of {MESSAGES} dead letters", records.len()));
        }
        let output = Command::new(python)
            .arg(script)
            .args([&localstack.endpoint(), &dlq_url])
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let (read, seconds) = text.trim().split_once(' ').ok_or_else(|| {
            format!(
                "browse_dlq.py printed {text:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        if read != MESSAGES.to_string() {
            return Err(format!("boto3 read {read} of {MESSAGES} dead letters"));
        }
        boto3.push(seconds.parse::<f64>().map_err(|e| e.to_string())?);
    }
    Ok(Some(Measured {
        ours_s: super::median(ours),
        boto3_s: super::median(boto3),
        groups,
    }))
}
