//! `dlq console` in a real browser: Debian's Chromium driven through ChromeDriver (W3C WebDriver,
//! spoken over plain HTTP), against moto. An operator finds the group whose cause was fixed and
//! redrives exactly it in three clicks; dead letters of the same group that arrive after the job
//! was made stay in the DLQ. The console refuses requests without its token, its form value, its
//! own Host or its own Origin.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use super::{dead_letters, dlq, origin_and_dlq, stdout};

/// One HTTP/1.1 exchange with a server on loopback, the connection closed after it: (status, body).
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(90)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(name, _)| *name == "Host") {
        request.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    // ChromeDriver keeps the connection open after its answer: read what Content-Length says.
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("{method} {path}: {e} after {head:?}"));
        if line.trim_end().is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())
            .flatten()
    });
    let mut body = Vec::new();
    match length {
        Some(length) => {
            body.resize(length, 0);
            reader.read_exact(&mut body).unwrap();
        }
        None => {
            reader.read_to_end(&mut body).unwrap();
        }
    }
    (status, String::from_utf8(body).unwrap())
}

/// A headless Chromium session through ChromeDriver; both end with it.
struct Browser {
    driver: Child,
    port: u16,
    session: String,
    shots: PathBuf,
    profile: PathBuf,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    fn start() -> Self {
        let chromedriver = "/usr/bin/chromedriver";
        assert!(
            std::path::Path::new(chromedriver).exists(),
            "run with `make test`, which installs Debian's chromium and chromium-driver"
        );
        let port = redrive_local::free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        redrive_local::wait_until_listening(port, Duration::from_secs(30), "chromedriver");
        let profile =
            std::env::temp_dir().join(format!("dlq-console-chromium-{}", std::process::id()));
        // The flags keep a headless Chromium off the network it has no access to here.
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-quic", "--no-first-run", "--window-size=1400,900",
                format!("--user-data-dir={}", profile.display()),
            ]}
        }}});
        let mut browser = Self {
            driver,
            port,
            session: String::new(),
            shots: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console"),
            profile,
        };
        let session = browser.call("POST", "/session", Some(capabilities));
        browser.session = session["sessionId"].as_str().unwrap().to_owned();
        std::fs::create_dir_all(&browser.shots).unwrap();
        browser
    }

    /// A WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let headers = [("Content-Type", "application/json")];
        let (status, text) = http(self.port, method, path, &headers, &body);
        let answer: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {path}: {status} {text:?}: {e}"));
        assert_eq!(status, 200, "{method} {path}: {answer}");
        answer["value"].clone()
    }

    fn session(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    fn open(&self, url: &str) {
        self.call("POST", &self.session("/url"), Some(json!({ "url": url })));
    }

    fn find(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            &self.session("/element"),
            Some(json!({"using": "css selector", "value": css})),
        );
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("{css}: {found}"))
            .to_owned()
    }

    fn count(&self, css: &str) -> usize {
        let found = self.call(
            "POST",
            &self.session("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        );
        found.as_array().unwrap().len()
    }

    fn click(&self, css: &str) {
        let element = self.find(css);
        self.call(
            "POST",
            &self.session(&format!("/element/{element}/click")),
            Some(json!({})),
        );
    }

    fn text(&self, css: &str) -> String {
        let element = self.find(css);
        let text = self.call(
            "GET",
            &self.session(&format!("/element/{element}/text")),
            None,
        );
        text.as_str().unwrap().to_owned()
    }

    /// Waits (the page refreshes itself while a job runs) until `css` reads `want`.
    fn wait_for(&self, css: &str, want: &str) {
        let started = Instant::now();
        loop {
            if self.count(css) == 1 && self.text(css) == want {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{css} never read {want:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn screenshot(&self, name: &str) {
        let png = self.call("GET", &self.session("/screenshot"), None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::write(self.shots.join(format!("{name}.png")), bytes).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(self.port, "DELETE", &self.session(""), &[], "");
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// `dlq console` for `queues`, ended with the test: (process, port, token).
struct Console(Child);

impl Console {
    fn start(queues: &[&str]) -> (Self, u16, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlq"))
            .arg("console")
            .args(queues)
            .args(["--rate", "200"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_owned();
        let (address, token) = url
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once("/?token="))
            .unwrap_or_else(|| panic!("the console printed {url:?}"));
        let port = address.rsplit(':').next().unwrap().parse().unwrap();
        (Self(child), port, token.to_owned())
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bodies(queue: &str) -> Vec<String> {
    let mut bodies: Vec<String> = stdout(&dlq(&["export", queue], &[]))
        .lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).unwrap();
            line["body"].as_str().unwrap().to_owned()
        })
        .collect();
    bodies.sort();
    bodies
}

fn orders(range: impl IntoIterator<Item = usize>) -> Vec<String> {
    let mut bodies: Vec<String> = range
        .into_iter()
        .map(|n| format!(r#"{{"orderId":"o-{n}"}}"#))
        .collect();
    bodies.sort();
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_an_operator_redrives_the_fixed_group_and_nothing_else() {
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-console", std::process::id());
    let (origin_url, dlq_url, origin_arn) = origin_and_dlq(&client, &prefix).await;
    // The incident: invalid orders on version 7 (fixed in 8), invalid orders on 8, timeouts on 8.
    let fixed = ("permanent", "invalid_order", "7");
    dead_letters(&client, &dlq_url, fixed, &origin_arn, 0..4).await;
    let invalid = ("permanent", "invalid_order", "8");
    dead_letters(&client, &dlq_url, invalid, &origin_arn, 4..6).await;
    let timeout = ("transient", "payment_timeout", "8");
    dead_letters(&client, &dlq_url, timeout, &origin_arn, 6..9).await;
    let (_console, port, token) = Console::start(&[&dlq_url]);

    // What a page of another site, or a request without the token, cannot do.
    let home = format!("/?token={token}");
    assert_eq!(http(port, "GET", &home, &[], "").0, 200);
    assert_eq!(
        http(port, "GET", "/?token=0123", &[], "").0,
        403,
        "a wrong token"
    );
    assert_eq!(
        http(
            port,
            "GET",
            &home,
            &[("Host", &format!("evil.example:{port}"))],
            ""
        )
        .0,
        403,
        "another Host (DNS rebinding)"
    );
    let groups_path = format!(
        "/groups?queue={}&token={token}",
        dlq_url.replace(':', "%3A").replace('/', "%2F")
    );
    let (status, page) = http(port, "GET", &groups_path, &[], "");
    assert_eq!(status, 200, "{page}");
    let csrf = page
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let post = |csrf: &str, origin: &str| {
        let body = format!(
            "csrf={csrf}&queue={}&group=0",
            dlq_url.replace(':', "%3A").replace('/', "%2F")
        );
        let headers = [form[0], ("Origin", origin)];
        http(
            port,
            "POST",
            &format!("/jobs?token={token}"),
            &headers,
            &body,
        )
        .0
    };
    let own = format!("http://127.0.0.1:{port}");
    assert_eq!(post("not-it", &own), 403, "a change without the form value");
    assert_eq!(
        post(csrf, "http://evil.example"),
        403,
        "a change from another site"
    );
    assert_eq!(
        post(csrf, &own),
        404,
        "the form value and the origin pass (no such group)"
    );

    let browser = Browser::start();
    browser.open(&format!("http://127.0.0.1:{port}/?token={token}"));
    browser.screenshot("1-queues");
    browser.click("a.queue"); // 1
    assert_eq!(browser.count("tr.group"), 3, "three groups");
    browser.screenshot("2-failure-groups");
    browser.click(r#"tr.group[data-kind="invalid_order"][data-version="7"] button"#); // 2
    assert_eq!(browser.text("#selected"), "4");
    assert_eq!(browser.text("#state"), "ready");
    browser.screenshot("3-job-dry-run");

    // Two more failures of the fixed group arrive after the job was made.
    dead_letters(&client, &dlq_url, fixed, &origin_arn, 9..11).await;
    browser.click("#run"); // 3
    browser.wait_for("#state", "done");
    browser.screenshot("4-job-done");

    assert_eq!(
        bodies(&origin_url),
        orders(0..4),
        "exactly the selection went home"
    );
    assert_eq!(
        bodies(&dlq_url),
        orders(4..11),
        "the other groups and the later failures stay"
    );
}
