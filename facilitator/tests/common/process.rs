//! Real daemon processes: the binary started with a chosen environment, its CLI, and a
//! PostgreSQL schema of a test's own that several daemons share.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate-facilitator");

pub fn command(dir: &Path) -> Command {
    command_with(dir, &[])
}

/// The binary in `dir`, with the caller's `TOLLGATE_*` environment replaced by `env`.
pub fn command_with(dir: &Path, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir);
    for (k, _) in std::env::vars() {
        if k.starts_with("TOLLGATE_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    c
}

/// Runs a CLI command to completion; returns stdout.
pub fn cli(dir: &Path, args: &[&str]) -> String {
    cli_with(dir, &[], args)
}

pub fn cli_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let out = command_with(dir, env).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `args` expecting the process to refuse and exit on its own within 30 s; returns stderr.
pub fn refused(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut child = command_with(dir, env).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?} did not refuse: it is still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

pub struct Daemon {
    pub child: Child,
    pub base: String,
}

impl Daemon {
    /// Starts `serve` on a free port, with `env` as its only `TOLLGATE_*` environment, and waits
    /// for its "listening on" line.
    pub fn start_with(dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::spawn(command_with(dir, env))
    }

    /// Starts `serve` on a free port with `command` (the binary, its directory and environment
    /// set), and waits for its "listening on" line.
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // What went wrong inside a daemon shows beside the test's own failure.
                if line.contains("ERROR") || line.contains("WARN") {
                    eprintln!("[daemon] {line}");
                }
                if let Some(i) = line.find("listening on http://") {
                    let _ =
                        tx.send(line[i + "listening on ".len()..].split_whitespace().next().unwrap_or("").to_owned());
                }
            }
        });
        let base = rx.recv_timeout(Duration::from_secs(30)).expect("the daemon did not report its address");
        Self { child, base }
    }

    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the daemon did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Daemon {
    /// Kills the process at once (SIGKILL: no shutdown, no cleanup), and waits for it to be gone.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// A schema of its own on the test PostgreSQL (`TOLLGATE_TEST_POSTGRES_URL`), dropped by
/// [`PgSchema::drop_schema`].
pub struct PgSchema {
    admin: sqlx::AnyPool,
    name: String,
    /// The database URL that puts a daemon in this schema.
    pub url: String,
}

impl PgSchema {
    /// `None` (and a notice on stderr) when no PostgreSQL is configured for tests.
    pub async fn create(test: &str) -> Option<Self> {
        let Some(base) = std::env::var("TOLLGATE_TEST_POSTGRES_URL").ok().filter(|v| !v.is_empty()) else {
            eprintln!("SKIPPED {test}: TOLLGATE_TEST_POSTGRES_URL is not set");
            return None;
        };
        sqlx::any::install_default_drivers();
        let name = format!("tg_{}", ulid::Ulid::new().to_string().to_lowercase());
        let admin = sqlx::AnyPool::connect(&base).await.unwrap();
        sqlx::query(&format!("CREATE SCHEMA {name}")).execute(&admin).await.unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{name}");
        Some(Self { admin, name, url })
    }

    pub async fn drop_schema(self) {
        sqlx::query(&format!("DROP SCHEMA {} CASCADE", self.name)).execute(&self.admin).await.unwrap();
        self.admin.close().await;
    }
}

/// The test Redis (`TOLLGATE_TEST_REDIS_URL`); `None` (and a notice) when not configured.
pub fn redis_url(test: &str) -> Option<String> {
    let url = std::env::var("TOLLGATE_TEST_REDIS_URL").ok().filter(|v| !v.is_empty());
    if url.is_none() {
        eprintln!("SKIPPED {test}: TOLLGATE_TEST_REDIS_URL is not set");
    }
    url
}
