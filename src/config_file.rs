//! `weir serve`'s settings from a TOML file (`--config FILE`, or
//! `WEIR_CONFIG`), the environment (`WEIR_<FLAG>`) and flags: a flag beats
//! the environment, which beats the file, which beats the default.
//!
//! Every flag has its variable (`--max-connections` is
//! `WEIR_MAX_CONNECTIONS`) and its file key (`max_connections`, or
//! `max-connections`); the data directory is `data_dir`. The file is read
//! before the flags are parsed and each of its keys becomes the default of
//! its variable where the environment does not set it, so clap applies the
//! order. A key that names no flag is refused by name. The TOML parser is
//! the `toml` crate (the format's reference implementation in Rust).

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

/// Flags that are not settings (they say how to read or show the others).
const NOT_SETTINGS: [&str; 2] = ["config", "print_config"];

/// The environment variable of a setting.
pub fn env_name(id: &str) -> String {
    format!("WEIR_{}", id.to_ascii_uppercase())
}

/// The file `weir serve` reads its settings from, if any: `--config FILE`
/// (or `--config=FILE`) among `args`, else `WEIR_CONFIG`.
pub fn path(args: &[String]) -> Option<PathBuf> {
    if args.get(1).map(String::as_str) != Some("serve") {
        return None;
    }
    let mut it = args.iter().skip(2);
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(p) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(p));
        }
    }
    std::env::var_os("WEIR_CONFIG").map(PathBuf::from)
}

/// Reads `file` and sets the variable of each of its settings that the
/// environment does not set. Answers the settings the file gave.
pub fn apply(file: &std::path::Path, serve: &Command) -> Result<BTreeSet<String>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read config file {}: {e}", file.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("config file {}: {e}", file.display()))?;
    let known: BTreeSet<String> = serve
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .filter(|id| !NOT_SETTINGS.contains(&id.as_str()))
        .collect();
    let mut given = BTreeSet::new();
    for (key, value) in table {
        let id = key.replace('-', "_");
        if !known.contains(&id) {
            return Err(format!(
                "config file {}: unknown key {key:?} (the keys are the flags of weir serve: {})",
                file.display(),
                known.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Float(f) => f.to_string(),
            other => {
                return Err(format!(
                    "config file {}: {key} must be a string, a number or a boolean, not {}",
                    file.display(),
                    other.type_str()
                ))
            }
        };
        let var = env_name(&id);
        if std::env::var_os(&var).is_none() {
            // SAFETY: called from main before any other thread exists.
            unsafe { std::env::set_var(&var, text) };
            given.insert(id);
        }
    }
    Ok(given)
}

/// The effective settings as TOML, each with where it came from: what
/// `weir serve --print-config` prints (and a file `--config` reads back).
pub fn print(serve: &Command, matches: &ArgMatches, from_file: &BTreeSet<String>) -> String {
    let mut out = String::new();
    for arg in serve.get_arguments() {
        let id = arg.get_id().as_str();
        if NOT_SETTINGS.contains(&id) || id == "help" || id == "version" {
            continue;
        }
        let source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) if from_file.contains(id) => "file",
            Some(ValueSource::EnvVariable) => "environment",
            Some(ValueSource::DefaultValue) => "default",
            _ => "unset",
        };
        let values: Vec<String> = matches
            .get_raw(id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let line = match values.first() {
            None => format!("# {id} is not set\n"),
            Some(v) if v.parse::<i64>().is_ok() || v == "true" || v == "false" => {
                format!("{id} = {v}  # {source}\n")
            }
            Some(v) => format!("{id} = {}  # {source}\n", toml::Value::String(v.clone())),
        };
        out.push_str(&line);
    }
    out
}
