//! The docs' command examples against the real `weft` (issue 26): every
//! `weft ...` command line in README.md and docs/*.md (in code blocks and
//! in inline code) names subcommands and flags that `weft ... --help`
//! lists. Placeholders (`<N>`, `[--flag]` brackets are opened, `DIR`,
//! `K`) and values are not checked; what a flag or subcommand is called is.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// What `weft <path> --help` lists.
#[derive(Default)]
struct Help {
    subcommands: Vec<String>,
    /// Flag (`--long` or `-s`) to whether it takes a value.
    flags: HashMap<String, bool>,
}

fn help_of(path: &[String]) -> Help {
    let out = Command::new(WEFT).args(path).arg("--help").output().unwrap();
    assert!(out.status.success(), "weft {} --help failed: {}", path.join(" "), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut h = Help::default();
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') {
            section = line.trim_end_matches(':');
            continue;
        }
        let item = line.trim_start();
        match section {
            "Commands" => {
                if let Some(name) = item.split_whitespace().next() {
                    h.subcommands.push(name.to_string());
                }
            }
            "Options" | "Arguments" => {
                // `-c, --cluster <CLUSTER>  text` or `--json  text`.
                let spec = item.split("  ").next().unwrap_or("");
                let takes = spec.contains('<');
                for word in spec.split([',', ' ']).filter(|w| w.starts_with('-')) {
                    h.flags.insert(word.to_string(), takes);
                }
            }
            _ => {}
        }
    }
    h
}

/// The `weft ...` command lines of one markdown text: lines of code blocks
/// that run `weft`, and inline code spans that start with `weft `.
fn commands_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            found.extend(invocation(line));
            continue;
        }
        for (k, span) in line.split('`').enumerate() {
            if k % 2 == 1 && span.starts_with("weft ") {
                found.push(span.to_string());
            }
        }
    }
    found
}

/// The part of a shell line from its `weft` word on, if it runs weft
/// (after a prompt, `sudo`, variables, or a path to the binary).
fn invocation(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "weft" || w.ends_with("/weft"))?;
    let before_ok = words[..at].iter().all(|w| *w == "$" || *w == "#" || *w == "sudo" || *w == "-E" || w.contains('=') || *w == "&&" || *w == ";" || *w == "then" || *w == "do");
    before_ok.then(|| std::iter::once("weft").chain(words[at + 1..].iter().copied()).collect::<Vec<_>>().join(" "))
}

/// Checks one command line; `Err(what is wrong)`.
fn check(line: &str, helps: &mut HashMap<Vec<String>, Help>) -> Result<(), String> {
    let mut path: Vec<String> = Vec::new();
    let mut leaf = false;
    let mut words = line.split_whitespace().skip(1).peekable();
    while let Some(w) = words.next() {
        // The end of the command: shell syntax, a comment, prose after it.
        if ["|", "||", "&&", ";", ">", ">>", "2>&1", "#", "\\", "&"].contains(&w) || w.starts_with('#') || w.starts_with('(') {
            break;
        }
        // Placeholders and optional parts: `[--keep]` is checked as `--keep`.
        let w = w.trim_matches(|c| c == '[' || c == ']' || c == '.' || c == ',' || c == ')');
        if w.is_empty() || w.starts_with('<') || w.starts_with('{') || w == "..." {
            continue;
        }
        let help = helps.entry(path.clone()).or_insert_with(|| help_of(&path));
        if w.starts_with('-') {
            let (flag, inline_value) = match w.split_once('=') {
                Some((f, _)) => (f, true),
                None => (w, false),
            };
            // `-vvv`, `-h` and `--help` are clap's own.
            if flag == "--help" || flag == "-h" || flag == "--version" || flag == "-V" {
                continue;
            }
            let Some(&takes) = help.flags.get(flag) else {
                return Err(format!("`weft {}` has no flag {flag}", path.join(" ")));
            };
            if takes && !inline_value {
                words.next();
            }
            continue;
        }
        if leaf || help.subcommands.is_empty() {
            // A positional argument (a path, a value).
            leaf = true;
            continue;
        }
        if !help.subcommands.iter().any(|s| s == w) {
            return Err(format!("`weft {}` has no subcommand {w:?} (it has {})", path.join(" "), help.subcommands.join(", ")));
        }
        path.push(w.to_string());
    }
    Ok(())
}

fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "md")).collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_weft_command_the_docs_show_exists() {
    let mut helps = HashMap::new();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in commands_in(&text) {
            checked += 1;
            if let Err(e) = check(&line, &mut helps) {
                wrong.push(format!("{}: {line:?}: {e}", file.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    assert!(checked > 100, "only {checked} command lines found: the extraction broke");
    assert!(wrong.is_empty(), "{} command examples name what weft does not have:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn the_check_catches_a_wrong_subcommand_or_flag() {
    let mut helps = HashMap::new();
    assert!(check("weft up --meta-shards 4", &mut helps).is_ok());
    assert!(check("weft job stop --dir DIR [--keep]", &mut helps).is_ok());
    assert!(check("weft upp", &mut helps).is_err());
    assert!(check("weft up --meta-shard 4", &mut helps).is_err());
    assert!(check("weft job halt", &mut helps).is_err());
    assert_eq!(invocation("$ WEFT_CLUSTER=c.toml target/release/weft status"), Some("weft status".into()));
    assert_eq!(invocation("cargo build # builds weft"), None);
}
