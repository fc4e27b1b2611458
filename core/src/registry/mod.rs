//! A schema registry in the node, answering Confluent Schema Registry's
//! REST API on the HTTP port (`api`), so clients that use one (Avro
//! serializers, Kafka Connect's converters) need no separate service.
//!
//! Every change is a record in the compacted topic `_schemas` (one
//! partition), written acks=all (durable) before it is answered; the state
//! (`state::State`) is made only by applying that topic's records in
//! offset order, at the first request after a start and after each change
//! (so a record another client produced to `_schemas` is applied too).
//! The registry lives on the shard that owns `_schemas`-0: requests that
//! reach another shard hop there, and changes are made one at a time.

pub mod api;
pub mod schema;
pub mod state;

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::Rc;

use weir_storage::records::{build_stamped_batch, Producer};

use crate::by_partition::PartitionWork;
use crate::catalog::placement;
use crate::shard::{NewTopic, Shard};
use crate::table::avro::{Fetched, SchemaSource, WriterSchemas};
use crate::topic_partition::TopicPartition;
use futures::future::LocalBoxFuture;
use state::{encode, Change, State};

/// The topic the registry keeps its records in (Confluent's name).
pub const TOPIC: &str = "_schemas";

impl crate::shard::ShardState for Registry {}

/// One shard's registry (used only on the shard that owns `_schemas`-0).
#[derive(Default)]
pub struct Registry {
    state: RefCell<State>,
    /// Changes are made one at a time: checked against the state, written,
    /// applied.
    writing: futures::lock::Mutex<()>,
}

/// An answer: the HTTP status and its JSON body.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    pub fn ok(body: serde_json::Value) -> Answer {
        Answer {
            status: 200,
            body: body.to_string(),
        }
    }

    /// An error as the registry answers one: its code (the status is its
    /// first three digits) and what was wrong.
    pub fn error(code: u32, message: impl Into<String>) -> Answer {
        let status = if code >= 10_000 { code / 100 } else { code };
        Answer {
            status: status as u16,
            body: serde_json::json!({"error_code": code, "message": message.into()}).to_string(),
        }
    }
}

/// Makes the registry's topic if there is none yet.
pub async fn ensure_topic(shard: &Rc<Shard>) -> Result<(), Answer> {
    if shard.catalog().topic(TOPIC).is_some() {
        return Ok(());
    }
    let made = shard
        .create_topics(
            vec![NewTopic {
                name: TOPIC.into(),
                partitions: 1,
                replication_factor: -1,
                assignments: Vec::new(),
                configs: vec![("cleanup.policy".into(), Some("compact".into()))],
                schema: None,
            }],
            false,
        )
        .await;
    match made.into_iter().next() {
        Some(Err(e)) if shard.catalog().topic(TOPIC).is_none() => Err(Answer::error(
            50001,
            format!("making {TOPIC}: {}", e.message),
        )),
        _ => Ok(()),
    }
}

/// In a cluster, the node leading the registry's topic when it is another
/// node than this one (the registry is served there); the topic is made
/// first if there is none.
pub async fn served_elsewhere(shard: &Rc<Shard>) -> Result<Option<i32>, Answer> {
    if shard.cluster.is_none() {
        return Ok(None);
    }
    ensure_topic(shard).await?;
    Ok(match shard.catalog().place(TOPIC, 0) {
        Some((Some(node), _)) if node != shard.config.node_id => Some(node),
        _ => None,
    })
}

/// The shard the registry lives on.
pub fn owner(shard: &Shard) -> usize {
    shard
        .catalog()
        .shard_for(TOPIC, 0)
        .map(|placed| shard.local_shard(placed))
        .unwrap_or_else(|| placement(TOPIC, 0, shard.nr_shards))
}

fn fetched(st: &State, id: i32) -> Option<Fetched> {
    let full = st.full(id)?;
    Some(Fetched {
        id,
        kind: full.def.kind,
        text: full.def.text,
        refs: full.refs,
        subjects: st.subjects_of(id),
    })
}

/// The node leading `_schemas` when it is another one (none: no topic, so
/// nothing registered, or this node leads it).
fn leader_elsewhere(shard: &Shard) -> Option<i32> {
    shard.cluster.as_ref()?;
    match shard.catalog().place(TOPIC, 0) {
        Some((Some(node), _)) if node != shard.config.node_id => Some(node),
        _ => None,
    }
}

/// What a node asks of the registry on the node leading `_schemas`, for
/// the writer schemas of its Avro tables (`cluster::Service::Schemas`).
#[derive(serde::Serialize, serde::Deserialize)]
enum SchemaQuery {
    ById(Vec<i32>),
    Latest(String),
}

/// Asks node `node`'s registry; the schemas it found.
async fn ask(shard: &Rc<Shard>, node: i32, query: &SchemaQuery) -> Result<Vec<Fetched>, String> {
    let control = shard
        .cluster
        .as_ref()
        .expect("only a cluster has other nodes");
    let service = crate::cluster::Service::Schemas;
    let answer: Result<Vec<Fetched>, String> = control
        .ask(node, service, shard.catalog().version, query)
        .await
        .map_err(|e| e.message)?;
    answer
}

/// Answers a `SchemaQuery` another node forwarded here.
pub async fn handle_schema_query(shard: &Rc<Shard>, body: &[u8]) -> Result<Vec<u8>, String> {
    let query: SchemaQuery =
        serde_json::from_slice(body).map_err(|e| format!("not a schema query: {e}"))?;
    let answer = match query {
        SchemaQuery::ById(ids) => registered_by_id(shard, ids).await,
        SchemaQuery::Latest(subject) => registered_latest(shard, subject)
            .await
            .map(|f| f.into_iter().collect()),
    };
    Ok(serde_json::to_vec(&answer).expect("schemas serialise"))
}

/// The schemas of those `ids` that are registered, asked of the registry
/// (on the node leading `_schemas`, in a cluster).
pub async fn schemas_by_id(shard: &Rc<Shard>, ids: Vec<i32>) -> Result<Vec<Fetched>, String> {
    match leader_elsewhere(shard) {
        Some(node) => ask(shard, node, &SchemaQuery::ById(ids)).await,
        None => registered_by_id(shard, ids).await,
    }
}

/// The latest live version of `subject`'s schema, if it has one.
pub async fn latest(shard: &Rc<Shard>, subject: String) -> Result<Option<Fetched>, String> {
    match leader_elsewhere(shard) {
        Some(node) => Ok(ask(shard, node, &SchemaQuery::Latest(subject))
            .await?
            .into_iter()
            .next()),
        None => registered_latest(shard, subject).await,
    }
}

/// `schemas_by_id` on this node's registry shard (with `_schemas` applied
/// up to its end).
async fn registered_by_id(shard: &Rc<Shard>, ids: Vec<i32>) -> Result<Vec<Fetched>, String> {
    shard
        .invoke_on(owner(shard), move |s| async move {
            let registry = s.state::<Registry>();
            registry.refresh(&s).await.map_err(|a| a.body)?;
            let st = registry.state.borrow();
            Ok(ids.iter().filter_map(|id| fetched(&st, *id)).collect())
        })
        .await
        .map_err(|e| e.message)?
}

/// `latest` on this node's registry shard.
async fn registered_latest(shard: &Rc<Shard>, subject: String) -> Result<Option<Fetched>, String> {
    shard
        .invoke_on(owner(shard), move |s| async move {
            let registry = s.state::<Registry>();
            registry.refresh(&s).await.map_err(|a| a.body)?;
            let st = registry.state.borrow();
            let id = st.versions(&subject, false).last().map(|(_, v)| v.id);
            Ok(id.and_then(|id| fetched(&st, id)))
        })
        .await
        .map_err(|e| e.message)?
}

/// The registry as the source of writer schemas that Avro tables read and
/// check records with (`table::avro::SchemaSource`).
pub struct Source;

impl SchemaSource for Source {
    fn by_id(
        &self,
        shard: &Rc<Shard>,
        ids: Vec<i32>,
    ) -> LocalBoxFuture<'static, Result<Vec<Fetched>, String>> {
        let shard = shard.clone();
        Box::pin(async move { schemas_by_id(&shard, ids).await })
    }

    fn latest(
        &self,
        shard: &Rc<Shard>,
        subject: String,
    ) -> LocalBoxFuture<'static, Result<Option<Fetched>, String>> {
        let shard = shard.clone();
        Box::pin(async move { latest(&shard, subject).await })
    }
}

/// Makes this shard's Avro tables take their writer schemas from the
/// registry (at start-up).
pub fn install(shard: &Shard) {
    shard.state::<WriterSchemas>().set_source(Rc::new(Source));
}

impl Registry {
    /// Applies the records of `_schemas` not applied yet.
    async fn refresh(&self, shard: &Rc<Shard>) -> Result<(), Answer> {
        let Some(p) = shard.partition(TOPIC, 0) else {
            // No topic (none made yet, or deleted): nothing registered.
            *self.state.borrow_mut() = State::default();
            return Ok(());
        };
        let from = {
            let mut st = self.state.borrow_mut();
            if p.log.high_watermark() < st.upto || p.log.log_start() > st.upto && st.upto > 0 {
                // The topic was made again: start over from its records.
                *st = State::default();
            }
            st.upto
        };
        let state = &self.state;
        crate::table::read::each_record(&p, from, None, &mut |r| {
            let mut st = state.borrow_mut();
            if r.offset < st.upto {
                return Ok(ControlFlow::Continue(()));
            }
            if let Some(key) = &r.key {
                if let Err(why) = st.apply(key, r.value.as_deref()) {
                    log::warn!("{TOPIC} offset {}: passed over: {why}", r.offset);
                }
            }
            st.upto = r.offset + 1;
            Ok(ControlFlow::Continue(()))
        })
        .await
        .map_err(|e| Answer::error(50001, format!("reading {TOPIC}: {e:?}")))?;
        Ok(())
    }

    /// Writes `changes` durably (making the topic the first time), then
    /// applies them with anything else new in the topic.
    async fn write(&self, shard: &Rc<Shard>, changes: &[Change]) -> Result<(), Answer> {
        if changes.is_empty() {
            return Ok(());
        }
        ensure_topic(shard).await?;
        let encoded: Vec<_> = changes.iter().map(encode).collect();
        let now = crate::clock::now_ms();
        let stamped: Vec<_> = encoded
            .iter()
            .map(|(k, v)| (now, Some(&k[..]), v.as_deref(), &[][..]))
            .collect();
        let work = vec![PartitionWork {
            at: 0,
            tp: TopicPartition::new(TOPIC.to_string(), 0),
            arg: build_stamped_batch(&stamped, &Producer::NONE),
        }];
        for (_, result) in crate::table::ingest::produce(shard, work, -1).await {
            result.map_err(|e| Answer::error(50001, format!("writing {TOPIC}: {}", e.message)))?;
        }
        self.refresh(shard).await
    }
}
