//! A minimal Lambda runtime API on loopback, enough to start a function, hand it events and
//! read its answer: the start-up and memory measurements run the real `bootstrap` against it.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the function may stay silent before the bench gives up on it.
const SILENCE: Duration = Duration::from_secs(60);

pub struct RuntimeApi {
    listener: TcpListener,
}

/// What [`RuntimeApi::invoke`] saw, per invocation.
pub struct Invocations {
    /// From serving the event to receiving the answer.
    pub times: Vec<Duration>,
    /// The function's peak resident memory (`VmHWM`) after each answer.
    pub peaks_kib: Vec<u64>,
    pub last_answer: Vec<u8>,
}

/// One HTTP request as the runtime client sends it.
struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

impl RuntimeApi {
    pub fn bind() -> std::io::Result<Self> {
        Ok(Self {
            listener: TcpListener::bind("127.0.0.1:0")?,
        })
    }

    /// Starts `bootstrap` pointed at this API, with `env` on top of the variables Lambda sets.
    pub fn spawn(&self, bootstrap: &str, env: &[(&str, &str)]) -> std::io::Result<Child> {
        let address = self.listener.local_addr()?;
        Command::new(bootstrap)
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "bench")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    }

    /// Time from `started` until the function's first request reaches the API.
    pub fn time_to_first_request(&self, started: Instant) -> std::io::Result<Duration> {
        let (mut stream, _) = self.listener.accept()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first)?;
        Ok(started.elapsed())
    }

    /// Serves `event` to the function `pid` for `invocations` invocations in a row. The function's
    /// HTTP client may open a new connection at any time, so every connection is read (a thread
    /// each) and its requests are answered here in arrival order.
    pub fn invoke(
        &self,
        pid: u32,
        event: &[u8],
        invocations: usize,
    ) -> std::io::Result<Invocations> {
        let requests = self.requests()?;
        let mut served = Instant::now();
        let (mut times, mut peaks_kib) = (vec![], vec![]);
        loop {
            let (request, mut writer) = requests.recv_timeout(SILENCE).map_err(|_| {
                std::io::Error::other(format!("no request from the function for {SILENCE:?}"))
            })?;
            match (request.method.as_str(), request.path.as_str()) {
                ("GET", path) if path.ends_with("/invocation/next") => {
                    let deadline = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis()
                        + 60_000;
                    let headers = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nLambda-Runtime-Aws-Request-Id: bench-{}\r\n\
                         Lambda-Runtime-Deadline-Ms: {deadline}\r\nLambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:123456789012:function:bench\r\n\
                         Lambda-Runtime-Trace-Id: Root=1-00000000-000000000000000000000000\r\nContent-Length: {}\r\n\r\n",
                        times.len() + 1,
                        event.len()
                    );
                    served = Instant::now();
                    writer.write_all(headers.as_bytes())?;
                    writer.write_all(event)?;
                }
                ("POST", path) if path.ends_with("/response") || path.ends_with("/error") => {
                    times.push(served.elapsed());
                    peaks_kib.push(peak_rss_kib(pid).ok_or_else(|| {
                        std::io::Error::other(format!("cannot read VmHWM of {pid}"))
                    })?);
                    writer.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")?;
                    if times.len() == invocations {
                        return Ok(Invocations {
                            times,
                            peaks_kib,
                            last_answer: request.body,
                        });
                    }
                }
                (method, path) => {
                    return Err(std::io::Error::other(format!(
                        "unexpected request {method} {path}"
                    )))
                }
            }
        }
    }

    /// Every request on every connection, with a handle to answer it on its connection.
    fn requests(&self) -> std::io::Result<Receiver<(Request, TcpStream)>> {
        let listener = self.listener.try_clone()?;
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let sender = sender.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone()?);
                    // Until the function closes the connection (an empty request line).
                    loop {
                        let request = read_request(&mut reader)?;
                        if request.method.is_empty() {
                            return Ok::<_, std::io::Error>(());
                        }
                        if sender.send((request, stream.try_clone()?)).is_err() {
                            return Ok(());
                        }
                    }
                });
            }
        });
        Ok(receiver)
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Request> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Request { method, path, body })
}

/// Peak resident memory of a running process, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
