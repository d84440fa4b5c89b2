//! Helpers for the workspace tests: a fault-injecting upstream, a real `idemgate serve` process, and
//! a deliberately plain HTTP/1.1 client (one request per connection) that can also send what a
//! polite client would not.

mod hooks;
mod mcp_upstream;
pub mod upstream;

pub use hooks::hook_receiver;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// A claim on the `charges` route for `key` (the same request every time), for ledger-level races.
pub fn charge_claim(key: &str, owner: &str, lease_ms: i64) -> idemgate_ledger::ClaimRequest {
    use idemgate_ledger::{canon, now_millis, testing, ClaimRequest, RequestRecord};
    let body = br#"{"amount":100}"#.to_vec();
    let c = testing::charge(key, now_millis());
    ClaimRequest {
        fingerprint: canon::fingerprint("POST", "charges", &[], &body),
        request: RequestRecord { body, ..c.request },
        owner: owner.into(),
        lease_ms,
        ttl_ms: 3_600_000,
        ..c
    }
}

/// The `idemgate` program of this build: `idemgate-under-test`, the CLI's code built as a binary of
/// this crate, so Cargo rebuilds it whenever the tests are built.
pub fn idemgate_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("idemgate-under-test");
    assert!(
        bin.exists(),
        "{} is missing: build the tests with cargo test -p idemgate-tests",
        bin.display()
    );
    bin
}

/// Runs the CLI to completion.
pub fn idemgate(args: &[&str]) -> Output {
    Command::new(idemgate_bin())
        .args(args)
        .env_remove("IDEMGATE_LEDGER")
        .env_remove("IDEMGATE_CONFIG")
        .env_remove("IDEMGATE_CHAIN_KEY")
        .env_remove("IDEMGATE_OPERATOR")
        .env("IDEMGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("run idemgate")
}

/// Runs the CLI and parses its stdout as JSON; panics with its output when it fails (a `--json`
/// command reports a failure it found on stdout).
pub fn idemgate_json(args: &[&str]) -> serde_json::Value {
    let out = idemgate(args);
    assert!(
        out.status.success(),
        "idemgate {args:?}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// The events of one `kind` in a ledger, newest first (up to 1,000), read with `idemgate log`.
pub fn events_of(ledger: &str, kind: &str) -> Vec<serde_json::Value> {
    idemgate_json(&[
        "log", "--ledger", ledger, "--kind", kind, "--limit", "1000", "--json",
    ])
    .as_array()
    .cloned()
    .unwrap_or_default()
}

/// A running `idemgate serve`.
#[derive(Debug)]
pub struct Proxy {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub config: PathBuf,
    pub ledger: PathBuf,
    pub log: PathBuf,
}

/// A config with `{upstream}` and `{ledger}` filled in.
pub fn config(template: &str, upstream: &str, ledger: &Path) -> String {
    template
        .replace("{upstream}", upstream)
        .replace("{ledger}", &ledger.display().to_string())
}

impl Proxy {
    /// Writes `config_toml` to `dir/idemgate.toml` and starts `idemgate serve` on it; returns once
    /// both listeners are up. Logs go to `dir/serve-N.log`.
    pub fn start(dir: &Path, config_toml: &str, ledger: &Path) -> Proxy {
        Proxy::start_with_env(dir, config_toml, ledger, &[])
    }

    pub fn start_with_env(
        dir: &Path,
        config_toml: &str,
        ledger: &Path,
        env: &[(&str, &str)],
    ) -> Proxy {
        let config = dir.join("idemgate.toml");
        std::fs::write(&config, config_toml).expect("write config");
        let mut n = 0;
        let log = loop {
            let p = dir.join(format!("serve-{n}.log"));
            if !p.exists() {
                break p;
            }
            n += 1;
        };
        let mut cmd = Command::new(idemgate_bin());
        cmd.args(["serve", "--config"])
            .arg(&config)
            .env("IDEMGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("IDEMGATE_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn idemgate serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!(
                "serve did not start: {line:?}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        let addr = v["listening"]["proxy"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .expect("proxy addr");
        let admin = v["listening"]["admin"]
            .as_str()
            .and_then(|a| a.parse().ok());
        Proxy {
            child: Some(child),
            addr,
            admin,
            config,
            ledger: ledger.to_path_buf(),
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL: no chance to flush or drain.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait for the process to exit (it drains requests in flight).
    pub fn terminate(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        let pid = rustix::process::Pid::from_raw(c.id() as i32).expect("a child's pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        request(self.addr, method, path, headers, body)
    }

    /// An admin API GET with the token.
    pub fn admin_get(&self, path: &str) -> Resp {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        request(
            self.admin.expect("admin listener"),
            "GET",
            path,
            &[("authorization", &auth)],
            b"",
        )
    }

    pub fn admin_post(&self, path: &str, body: &serde_json::Value) -> Resp {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let b = serde_json::to_vec(body).expect("json");
        request(
            self.admin.expect("admin listener"),
            "POST",
            path,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            &b,
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A response as the client saw it.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| {
            panic!(
                "not JSON ({}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The problem+json `code`, when this is a problem.
    pub fn code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{} {}",
            self.status,
            self.text()
        );
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }
}

/// One request on a fresh connection (`Connection: close`), with `Content-Length`.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    raw_request(addr, &request_bytes(addr, method, path, headers, body))
}

/// Like [`request`], for a server that may be down or die mid-answer: `None` when the connection is
/// refused or closed before a whole response head arrived.
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<Resp> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    s.write_all(&request_bytes(addr, method, path, headers, body))
        .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let r = parse_response(&buf);
    let len = r
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok());
    // A response cut short by a killed server is no response.
    match len {
        Some(l) if buf.len() - end - 4 < l => None,
        _ => Some(r),
    }
}

fn request_bytes(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    raw
}

/// An address on 127.0.0.1 where every connection is refused, for as long as the test runs: its
/// port stays bound by a socket that never listens. A port bound and let go could be taken by the
/// next listener, even the server under test, which would then call itself.
pub fn refusing_addr() -> SocketAddr {
    use rustix::net::{bind, getsockname, socket, AddressFamily, SocketType};
    static HELD: std::sync::OnceLock<(rustix::fd::OwnedFd, SocketAddr)> =
        std::sync::OnceLock::new();
    HELD.get_or_init(|| {
        let fd = socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
        bind(&fd, &SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind");
        let addr = getsockname(&fd).expect("getsockname");
        let addr = SocketAddr::try_from(addr).expect("an IPv4 address");
        (fd, addr)
    })
    .1
}

/// Sends raw bytes and parses the response (read to EOF).
pub fn raw_request(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let _ = s.write_all(raw);
    read_response(&mut s)
}

/// Like [`request`], from a connection whose local address is `from` (any of 127.0.0.0/8 on
/// Linux): another client, as far as the server's per-address limits can tell.
pub fn request_from(
    from: std::net::IpAddr,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    use rustix::net::{bind, connect, socket, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
    bind(&fd, &SocketAddr::new(from, 0)).expect("bind the client's address");
    connect(&fd, &addr).expect("connect");
    let mut s = TcpStream::from(fd);
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let _ = s.write_all(&request_bytes(addr, method, path, headers, body));
    read_response(&mut s)
}

pub fn read_response(s: &mut TcpStream) -> Resp {
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_response(&buf)
}

/// Parses a response, past any interim (1xx) ones; a connection closed without one is status 0.
pub fn parse_response(mut buf: &[u8]) -> Resp {
    while buf.starts_with(b"HTTP/1.1 1") {
        match buf.windows(4).position(|w| w == b"\r\n\r\n") {
            Some(end) => buf = &buf[end + 4..],
            None => break,
        }
    }
    if buf.is_empty() {
        return Resp {
            status: 0,
            headers: Vec::new(),
            body: Vec::new(),
        };
    }
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = buf[end + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + size]);
        b = &b[i + 2 + size + 2..];
    }
    out
}

/// Raises its flag when dropped: threads in a scope that run until a flag is raised stop even
/// when the scope's own closure panics (the scope waits for them before it reports the panic).
#[derive(Debug)]
pub struct RaiseOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Polls `f` until it returns `Some`, or panics after `secs`.
pub fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `idemgate witness serve` on a port of its own, until dropped (SIGKILL: what it acknowledged
/// must already be on disk).
#[derive(Debug)]
pub struct WitnessProcess {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
}

impl WitnessProcess {
    pub fn start(key: &Path, log: &str, state: &Path) -> WitnessProcess {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(idemgate_bin())
            .args([
                "witness",
                "serve",
                "--key",
                key.to_str().expect("utf8"),
                "--log",
                log,
                "--state",
                state.to_str().expect("utf8"),
            ])
            .args(["--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("witness");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("its first line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("witness said {line:?}"))
            .parse()
            .expect("an address");
        WitnessProcess { child, addr }
    }

    /// `add-checkpoint` with `body`: the status and the answer.
    pub fn add(&self, body: &str) -> (u16, String, Option<String>) {
        let r = request(self.addr, "POST", "/add-checkpoint", &[], body.as_bytes());
        (
            r.status,
            r.text(),
            r.header("content-type").map(str::to_owned),
        )
    }
}

impl Drop for WitnessProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
