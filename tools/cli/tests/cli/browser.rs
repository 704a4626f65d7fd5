//! What the console's tests drive: one HTTP exchange, a headless Chromium through ChromeDriver
//! (W3C WebDriver, spoken over plain HTTP), and `dlq console` as a process.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// One HTTP/1.1 exchange with a server on loopback, the connection closed after it: (status, body).
pub(crate) fn http(
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
pub(crate) struct Browser {
    driver: Child,
    port: u16,
    session: String,
    shots: PathBuf,
    profile: PathBuf,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    pub(crate) fn start() -> Self {
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
        let profile = std::env::temp_dir().join(format!(
            "dlq-console-chromium-{}-{port}",
            std::process::id()
        ));
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
        // A click returns before the page it loads is there: finding an element waits for it
        // (finding none waits this long too).
        let implicit = json!({"implicit": 20_000});
        browser.call("POST", &browser.session("/timeouts"), Some(implicit));
        std::fs::create_dir_all(&browser.shots).unwrap();
        browser
    }

    /// A WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = self.try_call(method, path, body);
        assert_eq!(status, 200, "{method} {path}: {answer}");
        answer
    }

    /// A WebDriver command that may fail: (status, `value`).
    fn try_call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let headers = [("Content-Type", "application/json")];
        let (status, text) = http(self.port, method, path, &headers, &body);
        let answer: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {path}: {status} {text:?}: {e}"));
        (status, answer["value"].clone())
    }

    /// The text of the element `css` finds, if the page has it now (it may be reloading).
    fn try_text(&self, css: &str) -> Option<String> {
        let (status, found) = self.try_call(
            "POST",
            &self.session("/element"),
            Some(json!({"using": "css selector", "value": css})),
        );
        let element = found[ELEMENT].as_str().filter(|_| status == 200)?;
        let path = self.session(&format!("/element/{element}/text"));
        let (status, text) = self.try_call("GET", &path, None);
        text.as_str().filter(|_| status == 200).map(str::to_owned)
    }

    fn session(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    pub(crate) fn open(&self, url: &str) {
        self.call("POST", &self.session("/url"), Some(json!({ "url": url })));
    }

    /// The page's HTML as the browser holds it now.
    pub(crate) fn source(&self) -> String {
        let page = self.call("GET", &self.session("/source"), None);
        page.as_str().unwrap_or_default().to_owned()
    }

    /// The element `css` finds; when there is none, the panic shows the page.
    fn find(&self, css: &str) -> String {
        let (status, found) = self.try_call(
            "POST",
            &self.session("/element"),
            Some(json!({"using": "css selector", "value": css})),
        );
        match found[ELEMENT].as_str() {
            Some(element) if status == 200 => element.to_owned(),
            _ => {
                panic!("{css}: {found}\non the page {}", self.source())
            }
        }
    }

    pub(crate) fn count(&self, css: &str) -> usize {
        let found = self.call(
            "POST",
            &self.session("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        );
        found.as_array().unwrap().len()
    }

    pub(crate) fn click(&self, css: &str) {
        let element = self.find(css);
        self.call(
            "POST",
            &self.session(&format!("/element/{element}/click")),
            Some(json!({})),
        );
    }

    /// An attribute of the element `css` finds.
    pub(crate) fn attribute(&self, css: &str, name: &str) -> String {
        let element = self.find(css);
        let value = self.call(
            "GET",
            &self.session(&format!("/element/{element}/attribute/{name}")),
            None,
        );
        value.as_str().unwrap_or_default().to_owned()
    }

    /// Types `text` into the field `css` finds.
    pub(crate) fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css);
        self.call(
            "POST",
            &self.session(&format!("/element/{element}/value")),
            Some(json!({ "text": text })),
        );
    }

    pub(crate) fn text(&self, css: &str) -> String {
        let element = self.find(css);
        let text = self.call(
            "GET",
            &self.session(&format!("/element/{element}/text")),
            None,
        );
        text.as_str().unwrap().to_owned()
    }

    /// Waits (the page refreshes itself while a job runs) until `css` reads `want`, for at most
    /// 5 minutes.
    pub(crate) fn wait_for(&self, css: &str, want: &str) {
        let started = Instant::now();
        loop {
            if self.try_text(css).as_deref() == Some(want) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "{css} never read {want:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    pub(crate) fn screenshot(&self, name: &str) {
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

/// `dlq console`, ended with the test.
pub(crate) struct Console(Child);

impl Console {
    /// `dlq console` with `args` (the queues first) and `env`: (process, port, token).
    pub(crate) fn start(args: &[&str], env: &[(&str, &str)]) -> (Self, u16, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlq"))
            .arg("console")
            .args(args)
            .envs(env.iter().copied())
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
