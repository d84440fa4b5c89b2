//! A real S3-compatible server on loopback for the archive tests: `s3s-fs` (from crates.io,
//! installed by `.ci/test`), serving a temporary directory in which each bucket is a directory and
//! each object a file, so that a test can alter or remove what a bucket holds.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// The variable that skips the tests that need `s3s-fs` (`IDEMGATE_TEST_S3=skip`).
pub const TEST_S3: &str = "IDEMGATE_TEST_S3";

const ACCESS_KEY: &str = "idemgate-test";
const SECRET_KEY: &str = "idemgate-test-secret";

/// A running `s3s-fs`, stopped when dropped.
#[derive(Debug)]
pub struct S3 {
    child: Child,
    root: PathBuf,
    port: u16,
}

impl S3 {
    /// Starts one with an empty bucket `bucket`, and waits until it listens; `None` when
    /// `IDEMGATE_TEST_S3=skip`.
    ///
    /// # Panics
    /// When `s3s-fs` is not on the PATH (a test that needs it must not pass by not running), or
    /// it does not start.
    pub fn start(bucket: &str) -> Option<S3> {
        if std::env::var(TEST_S3).is_ok_and(|v| v == "skip") {
            return None;
        }
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "idemgate-s3-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(root.join(bucket)).expect("the bucket's directory");
        // Port 0: the server binds a port the kernel picks, which no one else holds, and says
        // which in its log's first line (a port picked here and let go could be taken meanwhile,
        // and answer in its place).
        let mut child = match Command::new("s3s-fs")
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&root)
            .env("RUST_LOG", "s3s_fs=info")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => panic!(
                "s3s-fs could not be started ({e}): install it with `cargo install s3s-fs \
                 --version 0.14.1 --features binary --locked`, or set {TEST_S3}=skip"
            ),
        };
        // A thread reads its log: it hands on the port, then reads the rest and drops it, so
        // that the server never waits on a full pipe.
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some((_, at)) = line.split_once("server is running at http://") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(at.trim().parse::<SocketAddr>().map_err(|_| line));
                    }
                }
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(at)) => at.port(),
            Ok(Err(line)) => panic!("s3s-fs said {line:?}"),
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().expect("wait");
                match e {
                    RecvTimeoutError::Timeout => panic!("s3s-fs did not listen within 30 s"),
                    RecvTimeoutError::Disconnected => panic!("s3s-fs ended at start: {status}"),
                }
            }
        };
        Some(S3 { child, root, port })
    }

    /// The environment a process reaches this server with (endpoint, credentials, region).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// Where object `key` of `bucket` is kept on disk.
    pub fn object(&self, bucket: &str, key: &str) -> PathBuf {
        self.root.join(bucket).join(key)
    }

    /// The directory the server keeps its buckets in.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
