//! `weir serve`'s node-wide topic defaults: one flag for each topic config
//! Kafka lets a broker set the default of (`--default-retention-ms` for
//! `retention.ms`, Kafka's `log.retention.ms`), with its variable
//! (`WEIR_DEFAULT_RETENTION_MS`) and file key (`default_retention_ms`) as
//! every flag has. Made from `topic_config::NODE_SYNONYMS` rather than
//! typed out, so each topic config a node can default has its flag (all
//! but `catalog::CLUSTER_ONLY`'s, which no one node sets), and each value
//! is checked at start as Kafka checks the config.

use std::collections::BTreeMap;

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};

use weir_core::catalog::topic_config::{self, NODE_SYNONYMS};
use weir_core::catalog::CLUSTER_ONLY;

/// The topic defaults the flags set, by topic config name
/// (`NodeConfig::topic_defaults`).
#[derive(Debug, Clone, Default)]
pub struct TopicDefaultFlags(pub BTreeMap<String, String>);

/// The topic configs with a flag, each with Kafka's node config for it.
fn flagged() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    NODE_SYNONYMS
        .iter()
        .filter(|(name, _)| !CLUSTER_ONLY.contains(name))
}

/// The flag's id (and file key) for topic config `name`.
fn id(name: &str) -> String {
    format!("default_{}", name.replace('.', "_"))
}

impl FromArgMatches for TopicDefaultFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(TopicDefaultFlags(
            flagged()
                .filter_map(|(name, _)| {
                    let value = matches.get_one::<String>(&id(name))?;
                    Some((name.to_string(), value.clone()))
                })
                .collect(),
        ))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for TopicDefaultFlags {
    fn augment_args(cmd: Command) -> Command {
        flagged().fold(cmd, |cmd, &(name, node_name)| {
            let id = id(name);
            cmd.arg(
                Arg::new(id.clone())
                    .long(id.replace('_', "-"))
                    .env(crate::config_file::env_name(&id))
                    .value_name("VALUE")
                    .help_heading("Topic defaults")
                    .help(format!(
                        "The {name} of topics that do not set it (Kafka's {node_name}); a \
                         default set at run time overrides it"
                    ))
                    .value_parser(move |v: &str| {
                        topic_config::check(name, v).map_err(|e| e.message)
                    }),
            )
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}
