//! The book (`docs/src/`) and the landing README, checked as a reader would trip on them:
//!
//! - every chapter is in `SUMMARY.md`, every link leads to a file and a heading that exist;
//! - every code block is checked by what it is: Rust compiles (the chapters are doctests of this
//!   crate, `src/lib.rs`), a facilitator or proxy TOML file loads with the real loaders, JSON
//!   parses, and each command line names packages, binaries, scripts, subcommands and flags that
//!   exist (the flags against the binaries' own `--help`);
//! - the references agree with the code: every operation of the OpenAPI document, every
//!   `TOLLGATE_*` variable the configuration reads, every error code and payment state;
//! - the README stays a landing page: under 150 lines, the two commands on its first screen.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tollgate_e2e::built;
use utoipa::OpenApi as _;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn book() -> PathBuf {
    root().join("docs/src")
}

/// Every Markdown file of the book, relative to `docs/src`.
fn chapters() -> Vec<PathBuf> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path.strip_prefix(base).unwrap().to_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(&book(), &book(), &mut out);
    out.sort();
    out
}

/// A fenced code block.
#[derive(Debug)]
struct Block {
    /// The info string's first word (`rust`, `toml`, `console`…), empty when untagged.
    lang: String,
    /// The whole info string (`rust,no_run`).
    info: String,
    text: String,
    /// 1-based line of the opening fence.
    line: usize,
}

/// The file's fenced blocks, and its other lines (numbered) for links and headings.
fn parse(markdown: &str) -> (Vec<Block>, Vec<(usize, String)>) {
    let (mut blocks, mut prose) = (Vec::new(), Vec::new());
    let mut open: Option<(String, String, usize, String)> = None; // fence, info, line, text
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            Some((fence, info, start, text)) => {
                if trimmed.starts_with(fence.as_str()) && trimmed.trim_start_matches('`').trim().is_empty() {
                    let lang = info.split([',', ' ']).next().unwrap_or("").to_owned();
                    let (info, text) = (std::mem::take(info), std::mem::take(text));
                    blocks.push(Block { lang, info, text, line: *start });
                    open = None;
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
            None if trimmed.starts_with("```") => {
                let fence: String = trimmed.chars().take_while(|&c| c == '`').collect();
                let info = trimmed[fence.len()..].trim().to_owned();
                open = Some((fence, info, i + 1, String::new()));
            }
            None => prose.push((i + 1, line.to_owned())),
        }
    }
    assert!(open.is_none(), "a code fence is never closed");
    (blocks, prose)
}

/// A heading's id as mdBook makes it: the text without its Markdown, lowercased, keeping
/// letters, digits, `_` and `-`, spaces turned into `-`.
fn heading_id(text: &str) -> String {
    let mut plain = String::new();
    let mut rest = text;
    // A link in a heading keeps its text only.
    while let Some(open) = rest.find('[') {
        plain.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                plain.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                plain.push('[');
                rest = after;
            }
        }
    }
    plain.push_str(rest);
    plain
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a file's headings (a repeated one gets `-1`, `-2`…, as mdBook numbers them).
fn heading_ids(prose: &[(usize, String)]) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for (_, line) in prose {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let id = heading_id(line[hashes..].trim());
            let n = seen.entry(id.clone()).or_insert(0);
            ids.insert(if *n == 0 { id.clone() } else { format!("{id}-{n}") });
            *n += 1;
        }
    }
    ids
}

/// The inline links (`[text](target)`) of prose lines, outside code spans: (line, target).
fn links(prose: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (number, line) in prose {
        // Drop code spans: a link shown as code is not a link.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("").to_owned();
            out.push((*number, target));
            rest = &after[end..];
        }
    }
    out
}

/// Checks every relative link of `file` (its text `markdown`): the file exists, and a `#anchor`
/// into a Markdown file names one of its headings. Outside `docs/src` only the README may link.
fn check_links(file: &Path, markdown: &str, problems: &mut Vec<String>) {
    let (_, prose) = parse(markdown);
    for (line, target) in links(&prose) {
        let at = format!("{}:{line}", file.strip_prefix(root()).unwrap_or(file).display());
        if target.starts_with("https://") || target.starts_with("http://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
        let resolved = if path.is_empty() { file.to_owned() } else { file.parent().unwrap().join(path) };
        let Ok(resolved) = resolved.canonicalize() else {
            problems.push(format!("{at}: {target}: no such file"));
            continue;
        };
        if file.starts_with(book()) && !resolved.starts_with(book().canonicalize().unwrap()) {
            problems.push(format!("{at}: {target}: outside the book (name repository files as code)"));
            continue;
        }
        if let Some(anchor) = anchor
            && resolved.extension().is_some_and(|e| e == "md")
        {
            let (_, target_prose) = parse(&std::fs::read_to_string(&resolved).unwrap());
            if !heading_ids(&target_prose).contains(anchor) {
                problems.push(format!("{at}: {target}: no heading with the id {anchor:?}"));
            }
        }
    }
}

#[test]
fn every_chapter_is_in_the_summary_and_every_link_leads_somewhere() {
    let summary = std::fs::read_to_string(book().join("SUMMARY.md")).unwrap();
    let (_, prose) = parse(&summary);
    let listed: BTreeSet<PathBuf> = links(&prose).into_iter().map(|(_, t)| PathBuf::from(t)).collect();
    let mut problems = Vec::new();
    for chapter in chapters() {
        if chapter != Path::new("SUMMARY.md") && !listed.contains(&chapter) {
            problems.push(format!("docs/src/{} is not in SUMMARY.md", chapter.display()));
        }
        let path = book().join(&chapter);
        check_links(&path, &std::fs::read_to_string(&path).unwrap(), &mut problems);
    }
    let readme = root().join("README.md");
    check_links(&readme, &std::fs::read_to_string(&readme).unwrap(), &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(listed.len() >= 15, "{listed:?}");
}

#[test]
fn the_links_checker_finds_what_is_broken() {
    let file = book().join("introduction.md");
    let mut problems = Vec::new();
    let text = "[a](getting-started.md) [b](nowhere.md) [c](getting-started.md#no-such-heading) \
                [d](../../README.md) `[e](nowhere.md)` [f](https://example.com)";
    check_links(&file, text, &mut problems);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("nowhere.md: no such file"));
    assert!(problems[1].contains("no heading with the id \"no-such-heading\""));
    assert!(problems[2].contains("outside the book"));
    assert_eq!(heading_id("`POST /payment/send`"), "post-paymentsend");
    assert_eq!(heading_id("Price per use (metered, `upto`)"), "price-per-use-metered-upto");
    assert_eq!(heading_id("See [the API](x.md) now"), "see-the-api-now");
}

#[test]
fn an_ignored_rust_block_only_includes_a_compiled_example() {
    let example = "{{#include ../../../middleware/examples/hyper_seller.rs:12:}}\n";
    assert_eq!(included_example("sell/route.md", example), None);
    for wrong in [
        "fn main() {}\n",
        "{{#include ../../../middleware/src/lib.rs}}\n",
        "{{#include ../../../middleware/examples/no_such_example.rs}}\n",
        "{{#include ../../../middleware/examples/hyper_seller.rs}}\nfn more() {}\n",
    ] {
        assert!(included_example("sell/route.md", wrong).is_some(), "{wrong}");
    }
}

#[test]
fn the_readme_is_a_landing_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines < 150, "the README has {lines} lines: guides and references go into the book");
    let first_screen: String = readme.lines().take(40).collect::<Vec<_>>().join("\n");
    for command in ["cargo run --release -p tollgate-demo", "scripts/test"] {
        assert!(first_screen.contains(command), "{command:?} is not on the README's first screen");
    }
}

/// Every block of the book, with its chapter (relative to `docs/src`).
fn book_blocks() -> Vec<(String, Block)> {
    let mut all = Vec::new();
    for chapter in chapters() {
        let (blocks, _) = parse(&std::fs::read_to_string(book().join(&chapter)).unwrap());
        all.extend(blocks.into_iter().map(|b| (chapter.display().to_string(), b)));
    }
    all
}

/// A Rust block rustdoc does not compile (`ignore`) may only show a compiled example of the
/// workspace, included by mdBook (`{{#include ../../../middleware/examples/x.rs:12:}}`): `cargo
/// test` and clippy build examples. `None` when it is one; else what is wrong.
fn included_example(chapter: &str, text: &str) -> Option<String> {
    let line = text.trim();
    let Some(path) = line.strip_prefix("{{#include ").and_then(|l| l.strip_suffix("}}")) else {
        return Some("an `ignore` Rust block must be an {{#include}} of a workspace example".into());
    };
    let file = book().join(chapter).parent().unwrap().join(path.split(':').next().unwrap_or(path));
    let is_example = file.parent().is_some_and(|d| d.ends_with("examples"))
        && file.extension().is_some_and(|e| e == "rs")
        && file.canonicalize().is_ok_and(|f| f.starts_with(root()));
    (!is_example || line.lines().count() != 1).then(|| format!("{path}: not a workspace example that exists"))
}

#[test]
fn every_rust_block_is_a_doctest_and_every_block_is_tagged() {
    let lib = include_str!("../src/lib.rs");
    let mut problems = Vec::new();
    let mut rust = 0;
    for (file, block) in book_blocks() {
        let line = block.line;
        match block.lang.as_str() {
            "" => problems.push(format!("docs/src/{file}:{line}: an untagged block (say what it is: rust, toml, sh…)")),
            "rust" if block.info.split(',').any(|a| a.trim() == "ignore") => {
                rust += 1;
                if let Some(problem) = included_example(&file, &block.text) {
                    problems.push(format!("docs/src/{file}:{line}: {problem}"));
                }
            }
            "rust" => {
                rust += 1;
                if !lib.contains(&format!("include_str!(\"../../docs/src/{file}\")")) {
                    problems
                        .push(format!("docs/src/{file}: its Rust is not compiled (include it in tests/src/lib.rs)"));
                }
            }
            "rs" => problems.push(format!("docs/src/{file}:{line}: write `rust`, not `rs`")),
            _ => {}
        }
    }
    problems.dedup();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(rust >= 5, "the book shows Rust: {rust} blocks");
}

#[test]
fn every_toml_and_json_block_loads() {
    let dir = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    let mut checked = BTreeMap::<&str, usize>::new();
    for (file, Block { lang, text, line, .. }) in book_blocks() {
        let at = format!("docs/src/{file}:{line}");
        match lang.as_str() {
            "toml" => {
                let kind = text.lines().next().unwrap_or("").trim();
                let outcome = match kind {
                    "# tollgate.toml" => {
                        let path = dir.path().join("tollgate.toml");
                        std::fs::write(&path, &text).unwrap();
                        let flags = tollgate_facilitator::config::Flags::default();
                        tollgate_facilitator::config::Config::load(Some(&path), |_| None, &flags)
                            .map(drop)
                            .map_err(|e| e.to_string())
                    }
                    "# tollgate-proxy.toml" => proxy_check(dir.path(), &text),
                    "# Cargo.toml" => toml::from_str::<toml::Value>(&text).map(drop).map_err(|e| e.to_string()),
                    _ => Err(format!("its first line {kind:?} does not say which file it is (# tollgate.toml…)")),
                };
                if let Err(e) = outcome {
                    problems.push(format!("{at}: {e}"));
                }
                *checked.entry("toml").or_default() += 1;
            }
            "json" => {
                if let Err(e) = serde_json::from_str::<Value>(&text) {
                    problems.push(format!("{at}: not JSON ({e}); a sketch with placeholders is `text`"));
                }
                *checked.entry("json").or_default() += 1;
            }
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked.get("toml").copied().unwrap_or(0) >= 2, "{checked:?}");
}

/// `tollgate-proxy --check` on the file `text` (what a seller runs before starting it), with each
/// variable the file names (`…_env = "NAME"`) set to a stand-in secret.
fn proxy_check(dir: &Path, text: &str) -> Result<(), String> {
    let path = dir.join("tollgate-proxy.toml");
    std::fs::write(&path, text).unwrap();
    let mut command = Command::new(built("tollgate-proxy"));
    command.arg("--check").arg("--config").arg(&path);
    for line in text.lines() {
        let Some((key, value)) = line.split('#').next().unwrap_or("").split_once('=') else { continue };
        if key.trim().ends_with("_env") {
            command.env(value.trim().trim_matches('"'), "0123456789abcdef0123456789abcdef0123456789abcdef");
        }
    }
    let out = command.output().unwrap();
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

/// Shell words of a command line, with quotes removed; a `$(…)` substitution is one word `X`.
fn words(line: &str) -> Vec<String> {
    let mut line = line.to_owned();
    while let Some(start) = line.find("$(") {
        let end = line[start..].find(')').map_or(line.len(), |e| start + e + 1);
        line.replace_range(start..end, "X");
    }
    let (mut out, mut word, mut quote, mut any) = (Vec::new(), String::new(), None::<char>, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// The command lines of a `sh` or `console` block: continuations joined, comments dropped,
/// pipelines and `&&` split; a console block's commands are its `$ ` lines.
fn commands(lang: &str, text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    let mut continuing = false;
    for raw in text.lines() {
        let line = if lang == "console" && !continuing {
            match raw.strip_prefix("$ ") {
                Some(command) => command,
                None => continue,
            }
        } else {
            raw
        };
        let line = line.split(" #").next().unwrap_or("");
        if line.trim_start().starts_with('#') {
            continue;
        }
        continuing = line.trim_end().ends_with('\\');
        current.push_str(line.trim_end().trim_end_matches('\\'));
        current.push(' ');
        if !continuing {
            lines.push(std::mem::take(&mut current));
        }
    }
    lines
        .iter()
        .flat_map(|l| l.split(" && ").map(str::to_owned).collect::<Vec<_>>())
        .flat_map(|l| l.split(" | ").map(str::to_owned).collect::<Vec<_>>())
        .map(|l| l.trim().trim_end_matches('&').trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// A package of the workspace, as its `Cargo.toml` declares it.
struct Package {
    name: String,
    dir: PathBuf,
    /// Its `[[bin]]` names.
    binaries: Vec<String>,
    /// Its `default-run`, if any.
    default_run: Option<String>,
}

impl Package {
    /// The binary `cargo run -p <package>` runs without `--bin`: the only one, or `default-run`;
    /// else why cargo would stop ("could not determine which binary to run").
    fn run_default(&self) -> Result<&str, String> {
        match (&self.default_run, self.binaries.as_slice()) {
            (Some(binary), _) => Ok(binary),
            (None, [only]) => Ok(only),
            (None, []) => Err(format!("the package {} has no binary", self.name)),
            (None, _) => Err(format!(
                "the package {} has several binaries and no default-run: cargo cannot tell which to run (add --bin)",
                self.name
            )),
        }
    }
}

/// The workspace's packages: the root `Cargo.toml`'s members.
fn workspace() -> Vec<Package> {
    let read = |path: PathBuf| toml::from_str::<toml::Value>(&std::fs::read_to_string(path).unwrap()).unwrap();
    let members = read(root().join("Cargo.toml"))["workspace"]["members"].as_array().unwrap().clone();
    members
        .iter()
        .map(|member| {
            let dir = root().join(member.as_str().unwrap());
            let manifest = read(dir.join("Cargo.toml"));
            let name = manifest["package"]["name"].as_str().unwrap().to_owned();
            let bins = manifest.get("bin").and_then(toml::Value::as_array).cloned().unwrap_or_default();
            let binaries = bins.iter().filter_map(|b| b["name"].as_str().map(str::to_owned)).collect();
            let default_run = manifest["package"].get("default-run").and_then(|d| d.as_str()).map(str::to_owned);
            Package { name, dir, binaries, default_run }
        })
        .collect()
}

/// The workspace's binaries: name → package.
fn binaries() -> BTreeMap<String, String> {
    workspace().into_iter().flat_map(|p| p.binaries.into_iter().map(move |b| (b, p.name.clone()))).collect()
}

/// `binary [subcommands…] --help`, and the subcommands named (the leading words it lists).
fn help(binary: &str, args: &[String]) -> (String, usize) {
    let mut depth = 0;
    let mut text = run_help(binary, &[]);
    while let Some(next) = args.get(depth) {
        // A subcommand is listed under "Commands:" as its first word on a line.
        let commands = text.split("Commands:").nth(1).unwrap_or("").split("\n\n").next().unwrap_or("").to_owned();
        let listed = commands.lines().any(|l| l.split_whitespace().next() == Some(next.as_str()));
        if next.starts_with('-') || !listed {
            break;
        }
        depth += 1;
        text = run_help(binary, &args[..depth]);
    }
    (text, depth)
}

fn run_help(binary: &str, subcommands: &[String]) -> String {
    let out =
        Command::new(built(binary)).args(subcommands).arg("--help").env_remove("TOLLGATE_CONFIG").output().unwrap();
    assert!(out.status.success(), "{binary} {subcommands:?} --help: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Checks one command line of the book: what it runs exists and takes the flags it is given.
fn check_command(command: &str, problems: &mut Vec<String>, at: &str) {
    let mut words = words(command);
    // Environment assignments before the command.
    while words.first().is_some_and(|w| w.contains('=') && !w.starts_with('-')) {
        words.remove(0);
    }
    let Some(program) = words.first().cloned() else { return };
    let bins = binaries();
    let (binary, args): (String, Vec<String>) = if program == "cargo" && words.get(1).is_some_and(|w| w == "run") {
        let split = words.iter().position(|w| w == "--").unwrap_or(words.len());
        let cargo_args = &words[2..split];
        let value = |flag: &str| cargo_args.iter().position(|w| w == flag).and_then(|i| cargo_args.get(i + 1)).cloned();
        let Some(package) = value("-p").or_else(|| value("--package")) else {
            problems.push(format!("{at}: `{command}`: say which package (-p)"));
            return;
        };
        if let Some(example) = value("--example") {
            if !package_dir(&package).is_some_and(|d| d.join("examples").join(format!("{example}.rs")).exists()) {
                problems.push(format!("{at}: `{command}`: the package {package} has no example {example}"));
            }
            return;
        }
        let binary = match value("--bin") {
            Some(binary) => binary,
            None => {
                match workspace().into_iter().find(|p| p.name == package).map(|p| p.run_default().map(str::to_owned)) {
                    Some(Ok(binary)) => binary,
                    Some(Err(why)) => {
                        problems.push(format!("{at}: `{command}`: {why}"));
                        return;
                    }
                    None => {
                        problems.push(format!("{at}: `{command}`: no package {package} in the workspace"));
                        return;
                    }
                }
            }
        };
        if bins.get(&binary) != Some(&package) {
            problems.push(format!("{at}: `{command}`: the package {package} has no binary {binary}"));
            return;
        }
        (binary, words.get(split + 1..).unwrap_or_default().to_vec())
    } else if program == "cargo" {
        for (flag, dir) in [("--bench", "benches"), ("--test", "tests"), ("--example", "examples")] {
            if let Some(i) = words.iter().position(|w| w == flag) {
                let name = &words[i + 1];
                let package = words.iter().position(|w| w == "-p").map(|i| words[i + 1].clone());
                // A file or folder of that name, or a target its manifest names (`[[test]]`).
                let kind = flag.trim_start_matches("--");
                let found = package.map(|p| package_dir(&p)).is_some_and(|d| {
                    d.is_some_and(|d| {
                        d.join(dir).join(format!("{name}.rs")).exists()
                            || d.join(dir).join(name).is_dir()
                            || declared_target(&d, kind, name)
                    })
                });
                if !found {
                    problems.push(format!("{at}: `{command}`: no {flag} {name} in its package"));
                }
            }
        }
        if let Some(i) = words.iter().position(|w| w == "-p") {
            let package = &words[i + 1];
            if package_dir(package).is_none() {
                problems.push(format!("{at}: `{command}`: no package {package} in the workspace"));
            }
        }
        return;
    } else if let Some(script) = program.strip_prefix("scripts/").or_else(|| program.strip_prefix("./scripts/")) {
        let path = root().join("scripts").join(script);
        if !path.exists() {
            problems.push(format!("{at}: `{command}`: no script scripts/{script}"));
        }
        return;
    } else if bins.contains_key(program.rsplit('/').next().unwrap_or(&program)) {
        (program.rsplit('/').next().unwrap().to_owned(), words[1..].to_vec())
    } else {
        return; // curl, docker, psql…: not ours
    };
    let (help, depth) = help(&binary, &args);
    let named =
        std::iter::once(binary.as_str()).chain(args[..depth].iter().map(String::as_str)).collect::<Vec<_>>().join(" ");
    if let Some(word) = args.get(depth).filter(|w| !w.starts_with('-'))
        && help.contains("Commands:")
    {
        problems.push(format!("{at}: `{command}`: {named} has no subcommand {word}"));
    }
    for word in &args[depth..] {
        if let Some(flag) = word.strip_prefix("--").map(|f| f.split('=').next().unwrap_or(f))
            && !flag.is_empty()
            && !help.contains(&format!("--{flag}"))
        {
            problems.push(format!("{at}: `{command}`: {named} takes no --{flag}"));
        }
    }
}

/// A workspace package's folder.
fn package_dir(package: &str) -> Option<PathBuf> {
    workspace().into_iter().find(|p| p.name == package).map(|p| p.dir)
}

#[test]
fn every_command_line_names_what_exists() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, Block { lang, text, line, .. }) in book_blocks() {
        if lang == "sh" || lang == "console" {
            for command in commands(&lang, &text) {
                check_command(&command, &mut problems, &format!("docs/src/{file}:{line}"));
                checked += 1;
            }
        }
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for block in parse(&readme).0.into_iter().filter(|b| b.lang == "sh" || b.lang == "console") {
        for command in commands(&block.lang, &block.text) {
            check_command(&command, &mut problems, &format!("README.md:{}", block.line));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 20, "{checked} command lines");
}

#[test]
fn the_command_checker_finds_what_is_wrong() {
    let mut problems = Vec::new();
    for command in [
        "cargo run --release -p tollgate-demo -- --no-such-flag",
        "cargo run -p tollgate-client --bin tollgate-demo",
        "tollgate-facilitator keys nosuch",
        "tollgate-facilitator keys create --plan standard --no-such-flag",
        "scripts/no-such-script",
        "cargo bench -p tollgate --bench no_such_bench",
        "cargo run -p tollgate-client --example no_such_example",
    ] {
        check_command(command, &mut problems, "t");
    }
    assert_eq!(problems.len(), 7, "{problems:#?}");
    let mut fine = Vec::new();
    for command in [
        "TOLLGATE_DEV=1 cargo run --release -p tollgate-facilitator -- serve --dev",
        "cargo run -p tollgate-facilitator -- keys create --plan standard",
        "scripts/test",
        "cargo run -p tollgate-client --example buyer",
    ] {
        check_command(command, &mut fine, "t");
    }
    assert!(fine.is_empty(), "{fine:#?}");
    // A package of several binaries runs one only when it names its default.
    let package = |default_run: Option<&str>, binaries: &[&str]| Package {
        name: "p".into(),
        dir: PathBuf::new(),
        binaries: binaries.iter().map(|b| (*b).to_owned()).collect(),
        default_run: default_run.map(str::to_owned),
    };
    assert_eq!(package(None, &["a"]).run_default(), Ok("a"));
    assert_eq!(package(Some("b"), &["a", "b"]).run_default(), Ok("b"));
    assert!(package(None, &["a", "b"]).run_default().unwrap_err().contains("several binaries"));
    assert!(package(None, &[]).run_default().is_err());
    let lines = commands("console", "$ a \\\n  --b c\nout\n$ d && e # note\n");
    assert_eq!(lines.iter().map(|l| words(l)).collect::<Vec<_>>(), [vec!["a", "--b", "c"], vec!["d"], vec!["e"]]);
    assert_eq!(words("K=$(cat f) x --d 'a b' \"c\""), ["K=X", "x", "--d", "a b", "c"]);
}

/// The OpenAPI document as generated (every operation, `/dev/airdrop` included).
fn contract() -> Value {
    serde_json::to_value(tollgate_facilitator::api::openapi::ApiDoc::openapi()).unwrap()
}

#[test]
fn the_references_name_everything_the_code_has() {
    let read = |chapter: &str| std::fs::read_to_string(book().join(chapter)).unwrap();
    let contract = contract();
    let mut problems = Vec::new();

    let api = read("reference/http-api.md");
    for (path, item) in contract["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_some() {
                let heading = format!("### `{} {path}`", method.to_uppercase());
                if !api.lines().any(|l| l.trim() == heading) {
                    problems.push(format!("reference/http-api.md: no heading {heading}"));
                }
            }
        }
    }

    let configuration = read("reference/configuration.md");
    let source = include_str!("../../facilitator/src/config.rs");
    let variables: BTreeSet<&str> = source
        .split('"')
        .filter(|s| s.len() > "TOLLGATE_".len() && s.starts_with("TOLLGATE_"))
        .filter(|s| s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .collect();
    assert!(variables.len() >= 10, "{variables:?}");
    for variable in variables {
        if !configuration.contains(&format!("`{variable}`")) {
            problems.push(format!("reference/configuration.md: `{variable}` is not documented"));
        }
    }

    // Every key of the TOML file (the fields of config.rs's `File…` structs).
    let mut keys = BTreeSet::new();
    let mut in_file_struct = false;
    for line in source.lines() {
        if line.starts_with("struct File") {
            in_file_struct = true;
        } else if line.starts_with('}') {
            in_file_struct = false;
        } else if in_file_struct
            && !line.trim_start().starts_with(['/', '#'])
            && let Some((name, _)) = line.trim().split_once(": ")
        {
            keys.insert(name.trim_start_matches("pub ").to_owned());
        }
    }
    assert!(keys.len() >= 20 && keys.contains("public_supported"), "{keys:?}");
    for key in keys {
        if ![format!("{key}`"), format!("[{key}"), format!(".{key}]")]
            .iter()
            .any(|shown| configuration.contains(shown.as_str()))
        {
            problems.push(format!("reference/configuration.md: the file key `{key}` is not documented"));
        }
    }

    let errors = read("reference/errors.md");
    let codes = contract.pointer("/components/schemas/ErrorCode/enum").and_then(Value::as_array).unwrap();
    for code in codes {
        if !errors.contains(&format!("`{}`", code.as_str().unwrap())) {
            problems.push(format!("reference/errors.md: `{}` is not documented", code.as_str().unwrap()));
        }
    }

    let states = read("reference/states.md");
    let statuses = contract
        .pointer("/components/schemas/PaymentStatus/enum")
        .and_then(Value::as_array)
        .expect("the contract lists the payment states");
    for status in statuses {
        if !states.contains(&format!("`{}`", status.as_str().unwrap())) {
            problems.push(format!("reference/states.md: `{}` is not documented", status.as_str().unwrap()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Whether the manifest in `dir` declares a `[[kind]]` target named `name`.
fn declared_target(dir: &Path, kind: &str, name: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else { return false };
    let Ok(manifest) = text.parse::<toml::Table>() else { return false };
    manifest.get(kind).and_then(toml::Value::as_array).is_some_and(|targets| {
        targets.iter().any(|target| target.get("name").and_then(toml::Value::as_str) == Some(name))
    })
}
