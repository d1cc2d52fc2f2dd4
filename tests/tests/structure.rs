//! The workspace's structure, read from its sources: no module of a crate depends on one that
//! depends on it back (directly or around a cycle), and the facilitator's modules use only those
//! its layer table (`facilitator/src/lib.rs`, "# Layout") puts at or below their own layer.
//!
//! Dependencies are the `crate::`, `super::` and `self::` paths of non-test code (a test module,
//! `#[cfg(test)] mod tests { .. }` or a module declared under `#[cfg(test)]`, is left out). A
//! path is attributed to the deepest module it names; two modules depend on each other when the
//! children of their nearest common ancestor that hold them do (a module using its own
//! descendants, or its ancestors' items, is not a dependency between siblings).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside a crate (`["chains", "solana"]`); the crate root is `[]`, and items of
/// the root itself (`crate::AppState`) are the pseudo-module `["<root>"]`.
type Module = Vec<String>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Every `.rs` file of `src` (binaries and test files left out) by its module path.
fn modules(src: &Path) -> BTreeMap<Module, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut out = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap().with_extension("");
        let mut module: Module = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if module.last().is_some_and(|l| l == "mod") {
            module.pop();
        }
        if module == ["main"] || module.last().is_some_and(|l| l == "tests" || l.ends_with("_tests")) {
            continue;
        }
        if module == ["lib"] {
            module.clear();
        }
        out.insert(module, std::fs::read_to_string(&file).unwrap());
    }
    // Modules declared under #[cfg(test)] are test code.
    let declared_for_tests: Vec<Module> = out
        .iter()
        .flat_map(|(module, text)| {
            let mut found = Vec::new();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("#[cfg(test)]") {
                rest = &rest[at + "#[cfg(test)]".len()..];
                let line = rest.trim_start().lines().next().unwrap_or_default();
                let line = line.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                if let Some(name) = line.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) {
                    found.push(module.iter().cloned().chain([name.trim().to_owned()]).collect());
                }
            }
            found
        })
        .collect();
    for module in declared_for_tests {
        out.remove(&module);
    }
    out
}

/// The code without comments and without its `#[cfg(test)] mod tests { .. }` (always last).
fn code(text: &str) -> String {
    let text = text.find("#[cfg(test)]\nmod tests {").map_or(text, |at| &text[..at]);
    text.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// The paths a `{ .. }` group starting at `text[0]` names, each as its segments.
fn group(text: &str) -> Vec<Vec<String>> {
    fn parse(chars: &[char], mut at: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
        let segments = |token: &str| -> Vec<String> {
            let token = token.split(" as ").next().unwrap_or_default();
            token.split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
        };
        let mut token = String::new();
        at += 1;
        while at < chars.len() {
            match chars[at] {
                '{' => {
                    let nested: Vec<String> = prefix.iter().cloned().chain(segments(&token)).collect();
                    at = parse(chars, at, &nested, out);
                    token.clear();
                    continue;
                }
                '}' | ',' => {
                    if !token.trim().is_empty() {
                        out.push(prefix.iter().cloned().chain(segments(&token)).collect());
                    }
                    token.clear();
                    if chars[at] == '}' {
                        return at + 1;
                    }
                }
                c => token.push(c),
            }
            at += 1;
        }
        at
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    parse(&chars, 0, &[], &mut out);
    out
}

/// The `crate::`, `super::` and `self::` paths of `code`, each as (anchor, segments).
fn paths(code: &str) -> Vec<(&'static str, Vec<String>)> {
    let mut out = Vec::new();
    for anchor in ["crate", "super", "self"] {
        let needle = format!("{anchor}::");
        let mut at = 0;
        while let Some(found) = code[at..].find(&needle) {
            let start = at + found;
            at = start + needle.len();
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = &code[at..];
            let len = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
            let head: Vec<String> = rest[..len].split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
            if rest[len..].starts_with('{') && rest[..len].ends_with("::") || len == 0 && rest.starts_with('{') {
                for tail in group(&rest[len..]) {
                    out.push((anchor, head.iter().cloned().chain(tail).collect()));
                }
            } else {
                out.push((anchor, head));
            }
        }
    }
    out
}

/// Who depends on whom, between the children of each module.
fn dependencies(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let modules = modules(src);
    let root_items: Module = vec!["<root>".into()];
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in &modules {
        let from = if module.is_empty() { root_items.clone() } else { module.clone() };
        for (anchor, mut path) in paths(&code(text)) {
            let mut full: Module = match anchor {
                "crate" => Vec::new(),
                "self" => module.clone(),
                _ => {
                    let mut base = module[..module.len().saturating_sub(1)].to_vec();
                    while path.first().is_some_and(|s| s == "super") {
                        base.pop();
                        path.remove(0);
                    }
                    base
                }
            };
            full.extend(path);
            let target = (0..=full.len()).rev().map(|n| full[..n].to_vec()).find(|m| modules.contains_key(m));
            let to = match target {
                Some(t) if t.is_empty() => {
                    // An item of the crate root (a re-export or a type defined there).
                    if full.first().is_some_and(|s| s.starts_with(char::is_uppercase)) {
                        root_items.clone()
                    } else {
                        continue;
                    }
                }
                Some(t) => t,
                None => continue,
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < from.len() && common < to.len() {
                edges.entry(from[..=common].to_vec()).or_default().insert(to[..=common].to_vec());
            }
        }
    }
    edges
}

/// The cycles of a dependency graph, each as the modules around it.
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    fn visit(
        at: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, bool>,
        stack: &mut Vec<Module>,
        out: &mut Vec<String>,
    ) {
        state.insert(at.clone(), true);
        stack.push(at.clone());
        for next in edges.get(at).into_iter().flatten() {
            match state.get(next) {
                Some(true) => {
                    let from = stack.iter().position(|m| m == next).unwrap_or(0);
                    let names: Vec<String> = stack[from..].iter().chain([next]).map(|m| m.join("::")).collect();
                    out.push(names.join(" -> "));
                }
                Some(false) => {}
                None => visit(next, edges, state, stack, out),
            }
        }
        stack.pop();
        state.insert(at.clone(), false);
    }
    let (mut state, mut out) = (BTreeMap::new(), Vec::new());
    for module in edges.keys() {
        if !state.contains_key(module) {
            visit(module, edges, &mut state, &mut Vec::new(), &mut out);
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_cycle() {
    for krate in ["protocol", "encoding", "middleware", "client", "facilitator"] {
        let found = cycles(&dependencies(&workspace().join(krate).join("src")));
        assert!(found.is_empty(), "{krate}: modules that depend on each other: {found:#?}");
    }
}

/// A crate's layer table (its `lib.rs`'s): each row's modules, top row first.
fn layer_table(src: &Path) -> Vec<Vec<String>> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    lib.lines()
        .filter_map(|line| line.strip_prefix("//! |"))
        .skip(2) // the header and its rule
        .map(|row| {
            let modules = row.split('|').nth(1).unwrap_or_default();
            modules.split('`').skip(1).step_by(2).map(str::to_owned).collect()
        })
        .collect()
}

/// The imports of `src`'s top modules against its layer table (a module missing from the
/// table is one too).
fn upward_imports(src: &Path) -> Vec<String> {
    let table = layer_table(src);
    let row_of = |module: &str| table.iter().position(|row| row.iter().any(|m| m == module));
    let edges = dependencies(src);
    let mut upward = Vec::new();
    for (from, targets) in &edges {
        let [from] = from.as_slice() else { continue };
        if from == "<root>" {
            continue; // the crate root re-exports
        }
        for to in targets {
            let [to] = to.as_slice() else { continue };
            match (row_of(from), row_of(to)) {
                (Some(from_row), Some(to_row)) if to_row < from_row => {
                    upward.push(format!("{from} (layer {from_row}) uses {to} (layer {to_row})"));
                }
                (Some(_), Some(_)) => {}
                _ => upward.push(format!("{from} uses {to}, and one of them is missing from the layer table")),
            }
        }
    }
    upward
}

#[test]
fn the_facilitators_modules_use_only_their_layer_and_those_below() {
    let upward = upward_imports(&workspace().join("facilitator/src"));
    assert!(upward.is_empty(), "imports against the layer order: {upward:#?}");
}

/// The checks themselves, on a crate written to break both rules.
#[test]
fn a_cycle_and_an_upward_import_are_found() {
    let dir = std::env::temp_dir().join(format!("tollgate-structure-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("api")).unwrap();
    let files = [
        (
            "lib.rs",
            "//! # Layout\n//!\n//! | layer | modules | what |\n//! |---|---|---|\n//! | top | [`api`] | x |\n\
             //! | bottom | [`store`], [`config`] | y |\npub mod api;\npub mod config;\npub mod store;\n",
        ),
        ("api/mod.rs", "mod error;\nmod guard;\nuse crate::store::Store;\n"),
        ("api/error.rs", "use super::guard::Marker;\n"),
        (
            "api/guard.rs",
            "use crate::api::{error::ApiError, self};\n#[cfg(test)]\nmod tests {\n use crate::api::error::X;\n}\n",
        ),
        ("store.rs", "use crate::{config::Config, api::Handler};\n// crate::api::Nothing, in a comment\n"),
        ("config.rs", "pub struct Config;\n"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let found = cycles(&dependencies(&dir));
    assert_eq!(found, ["api -> store -> api", "api::error -> api::guard -> api::error"], "{found:#?}");
    assert_eq!(upward_imports(&dir), ["store (layer 1) uses api (layer 0)"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn each_crate_says_how_it_is_laid_out() {
    for krate in ["protocol", "encoding", "middleware", "client", "facilitator"] {
        let lib = std::fs::read_to_string(workspace().join(krate).join("src/lib.rs")).unwrap();
        assert!(lib.contains("//! # Layout"), "{krate}/src/lib.rs has no `# Layout` section");
    }
}
