//! The large-message row: a batch of Extended Client pointers to bodies of 900 KiB in S3 (moto
//! server on loopback, through the real S3 client), against a batch of as many ordinary orders on
//! the same processor. Counts the S3 calls each batch makes, and the time the reads add (moto's:
//! a Python server, slower than S3 from Lambda in its region).
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redrive::aws::S3Payloads;
use redrive::payload::{PayloadError, PayloadStore, Pointer, SIZE_ATTRIBUTE};
use redrive::Payloads;

use crate::event::generate_event;
use crate::{median, ms, processor_with, run_with, CheckStatus};

pub const RECORDS: usize = 10;
pub const BODY_BYTES: usize = 900 * 1024;
const RUNS: usize = 15;
const BUCKET: &str = "bench-payloads";

pub struct Measured {
    /// S3 calls per pointer batch, and per ordinary batch.
    pub calls_large: f64,
    pub calls_ordinary: f64,
    pub large_ms: f64,
    pub ordinary_ms: f64,
}

/// Counts the calls it passes on.
struct Counted {
    inner: S3Payloads,
    calls: AtomicUsize,
}

impl PayloadStore for Counted {
    fn get<'a>(&'a self, pointer: &'a Pointer<'a>) -> BoxFuture<'a, Result<String, PayloadError>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.get(pointer)
    }
    fn put<'a>(
        &'a self,
        pointer: &'a Pointer<'a>,
        body: &'a str,
    ) -> BoxFuture<'a, Result<(), PayloadError>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.put(pointer, body)
    }
    fn delete<'a>(&'a self, pointer: &'a Pointer<'a>) -> BoxFuture<'a, Result<(), PayloadError>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.delete(pointer)
    }
}

/// moto server on a free loopback port, stopped when dropped.
struct Moto(Child, u16);

impl Moto {
    fn start(moto_server: &Path) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let child = Command::new(moto_server)
            .args(["-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", moto_server.display()))?;
        let moto = Self(child, port);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err("moto server did not start within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(moto)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// The ordinary 10-record batch, and its records as pointers to 900 KiB orders (each padded) in S3.
fn events(store: &Counted, runtime: &tokio::runtime::Runtime) -> Result<(String, String), String> {
    let ordinary = generate_event(RECORDS, None);
    let mut large: serde_json::Value =
        serde_json::from_str(&ordinary).map_err(|e| e.to_string())?;
    for (i, record) in large["Records"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        let order = record["body"].as_str().unwrap();
        let padded = format!(
            "{},\"note\":\"{}\"}}",
            &order[..order.len() - 1],
            "n".repeat(BODY_BYTES - order.len() - 10)
        );
        let pointer = Pointer {
            bucket: BUCKET.into(),
            key: format!("producer/{i}").into(),
        };
        runtime
            .block_on(store.inner.put(&pointer, &padded))
            .map_err(|e| e.to_string())?;
        record["body"] = pointer.to_body().into();
        record["messageAttributes"][SIZE_ATTRIBUTE] =
            serde_json::json!({ "stringValue": padded.len().to_string(), "dataType": "Number" });
    }
    Ok((ordinary, large.to_string()))
}

pub fn measure(python: &Path) -> Result<Measured, String> {
    let moto = Moto::start(&python.with_file_name("moto_server"))?;
    // A runtime of its own: the S3 client's sockets need the I/O driver, which the CPU-bound
    // rows' runtime leaves out.
    let runtime = &tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // The bench's own process, one thread: the S3 client reads the endpoint from here.
    for (name, value) in [
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{}", moto.1)),
        ("AWS_ACCESS_KEY_ID", "bench".into()),
        ("AWS_SECRET_ACCESS_KEY", "bench".into()),
        ("AWS_REGION", "us-east-1".into()),
    ] {
        std::env::set_var(name, value);
    }
    let client = redrive::aws::s3_client(&redrive::aws::sdk_config_from_env());
    runtime
        .block_on(client.create_bucket().bucket(BUCKET).send())
        .map_err(|e| format!("CreateBucket on moto: {e}"))?;
    let store = Arc::new(Counted {
        inner: S3Payloads::with_client(client),
        calls: AtomicUsize::new(0),
    });
    let (ordinary, large) = events(&store, runtime)?;
    let processor = processor_with(None, redrive::config::DEFAULT_CONCURRENCY)
        .with_payloads(Payloads::new(store.clone(), BUCKET));
    let turns = |event: &str| -> Result<(Vec<f64>, f64), String> {
        let before = store.calls.load(Ordering::Relaxed);
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let (elapsed, failures, report) =
                run_with(runtime, &processor, &CheckStatus, event.as_bytes());
            if failures != 0 || report.done as usize != RECORDS {
                return Err(format!(
                    "large-message batch: {failures} failures, {report:?}"
                ));
            }
            times.push(ms(elapsed));
        }
        let calls = store.calls.load(Ordering::Relaxed) - before;
        Ok((times, calls as f64 / RUNS as f64))
    };
    turns(&large)?; // warm-up: connections, the allocator
    let (mut large_ms, mut ordinary_ms) = (Vec::new(), Vec::new());
    let (mut calls_large, mut calls_ordinary) = (0.0, 0.0);
    for _ in 0..3 {
        let (times, calls) = turns(&large)?;
        large_ms.extend(times);
        calls_large = calls;
        let (times, calls) = turns(&ordinary)?;
        ordinary_ms.extend(times);
        calls_ordinary = calls;
    }
    Ok(Measured {
        calls_large,
        calls_ordinary,
        large_ms: median(large_ms),
        ordinary_ms: median(ordinary_ms),
    })
}
