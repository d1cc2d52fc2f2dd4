//! The demo binary stops whole: SIGTERM (what `docker stop` and service managers send) and Ctrl-C
//! (SIGINT) end it and the proxied service's Python process it started, leaving no orphan.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The processes whose parent is `pid` (from every thread's `children` list).
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        found.extend(list.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    found
}

/// The command line of `pid`, when it still runs (a zombie has none).
fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    (!raw.is_empty()).then(|| String::from_utf8_lossy(&raw).replace('\0', " "))
}

/// Starts the demo binary on free ports, waits until it says it runs, and returns it with the
/// pid of its Python child.
fn start(data: &Path) -> (std::process::Child, u32) {
    let mut demo = Command::new(env!("CARGO_BIN_EXE_tollgate-demo"))
        .env("TOLLGATE_DEMO_DATA", data)
        .env("TOLLGATE_DEMO_LISTEN", "127.0.0.1:0")
        .env("TOLLGATE_DEMO_PROXY", "127.0.0.1:0")
        .env("TOLLGATE_DEMO_FACILITATOR", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(demo.stdout.take().unwrap());
    let mut printed = String::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("Ctrl-C to stop.") {
            break;
        }
    }
    assert!(printed.contains("Ctrl-C to stop."), "the demo did not start:\n{printed}");
    assert!(printed.contains("tollgate-proxy"), "the proxied service is part of the demo:\n{printed}");
    let python = children(demo.id())
        .into_iter()
        .find(|pid| command_line(*pid).is_some_and(|c| c.contains("python3") && c.contains("upstream.py")))
        .expect("the demo runs its Python upstream as a child");
    (demo, python)
}

/// Sends `signal` to the demo and waits (at most 30 s) for it to end.
fn stop(demo: &mut std::process::Child, signal: &str) -> std::process::ExitStatus {
    let sent = Command::new("kill").args([signal, &demo.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = demo.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the demo did not stop on {signal}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_and_ctrl_c_stop_the_demo_and_its_python_service() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no python3 here, so the demo runs no child process");
        return;
    }
    for signal in ["-TERM", "-INT"] {
        let data = tempfile::tempdir().unwrap();
        let (mut demo, python) = start(data.path());
        assert!(command_line(python).is_some());
        let status = stop(&mut demo, signal);
        assert!(status.success(), "{signal}: the demo exits cleanly, not killed by the signal: {status:?}");
        assert_eq!(command_line(python), None, "{signal}: the Python service (pid {python}) outlived the demo");
    }
}
