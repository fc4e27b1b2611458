//! Writer schemas: a registered Avro record schema ready to read and write
//! datums with (`Writer`), the ones a shard holds by id (`WriterSchemas`,
//! an id's schema never changes), and where they come from
//! (`SchemaSource`, which the registry installs).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Instant;

use apache_avro::schema::{Name, Namespace, RecordSchema, ResolvedSchema, Schema};
use futures::future::LocalBoxFuture;

use super::{kind_name, unframe};
use crate::registry::schema::{self as registry_schema, Kind};
use crate::shard::Shard;

/// A writer schema, ready to decode with.
pub struct Writer {
    pub id: u32,
    schema: Schema,
    /// Its named types by full name (what a `Ref` names).
    pub(super) names: HashMap<Name, Schema>,
    /// The namespace its record's fields are read in (kept, not cloned
    /// for each datum).
    pub(super) namespace: Namespace,
    /// The subjects a live version of it was registered under, when asked.
    pub(super) subjects: Vec<String>,
    pub(super) asked: Instant,
}

impl Writer {
    /// A registered schema as the registry gave it; refused unless it is an
    /// Avro record.
    pub fn new(f: &Fetched) -> Result<Writer, String> {
        if f.kind != Kind::Avro {
            return Err(format!(
                "schema id {} is a {} schema, not Avro",
                f.id,
                f.kind.name()
            ));
        }
        let schema = registry_schema::standalone_avro(&f.text, &f.refs)
            .map_err(|e| format!("schema id {} does not parse: {e}", f.id))?;
        let names = ResolvedSchema::try_from(&schema)
            .map_err(|e| format!("schema id {}: {e}", f.id))?
            .get_names()
            .iter()
            .map(|(n, s)| (n.clone(), (*s).clone()))
            .collect();
        let mut w = Writer {
            id: f.id as u32,
            schema,
            names,
            namespace: None,
            subjects: f.subjects.clone(),
            asked: Instant::now(),
        };
        w.namespace = w.record()?.name.namespace.clone();
        Ok(w)
    }

    /// Whether its record has a field `name`.
    pub fn has_field(&self, name: &str) -> bool {
        self.record()
            .is_ok_and(|r| r.fields.iter().any(|f| f.name == name))
    }

    /// The record schema the datum is.
    pub(super) fn record(&self) -> Result<&RecordSchema, String> {
        let mut s = &self.schema;
        if let Schema::Ref { name } = s {
            s = self.names.get(name).unwrap_or(s);
        }
        match s {
            Schema::Record(r) => Ok(r),
            other => Err(format!(
                "schema id {} is not an Avro record (it is {}): a table's rows are records",
                self.id,
                kind_name(other)
            )),
        }
    }
}

fn unknown(id: u32) -> String {
    format!("schema id {id} is not registered in the node's schema registry")
}

/// The latest version of `subject`'s schema (to make a table's columns
/// from, or to write rows with), asked of the registry.
pub async fn latest(shard: &Rc<Shard>, subject: &str) -> Result<Writer, String> {
    let source = shard.state::<WriterSchemas>().source()?;
    let f = source
        .latest(shard, subject.to_string())
        .await
        .map_err(|why| format!("asking the schema registry for {subject}: {why}"))?
        .ok_or_else(|| format!("subject {subject} has no schema in the registry"))?;
    Writer::new(&f).map_err(|why| format!("subject {subject}'s latest schema: {why}"))
}

/// A registered schema as another shard takes it, to read records with
/// (`table::avro`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Fetched {
    pub id: i32,
    pub kind: Kind,
    pub text: String,
    /// The texts of the schemas it references.
    pub refs: Vec<String>,
    /// The subjects a live version of it is registered under.
    pub subjects: Vec<String>,
}

/// Where writer schemas come from: the node's schema registry, which sets
/// itself here at start-up (`crate::registry::install`). A trait, so that
/// tables need not know the registry (which keeps its schemas in a topic,
/// and so uses tables).
pub trait SchemaSource {
    /// Those of `ids` that are registered.
    fn by_id(
        &self,
        shard: &Rc<Shard>,
        ids: Vec<i32>,
    ) -> LocalBoxFuture<'static, Result<Vec<Fetched>, String>>;

    /// The latest live version of `subject`'s schema, if it has one.
    fn latest(
        &self,
        shard: &Rc<Shard>,
        subject: String,
    ) -> LocalBoxFuture<'static, Result<Option<Fetched>, String>>;
}

impl crate::shard::ShardState for WriterSchemas {}

/// The writer schemas one shard holds, by id, and where it asks for more.
#[derive(Default)]
pub struct WriterSchemas {
    pub(super) by_id: RefCell<HashMap<u32, Result<Rc<Writer>, String>>>,
    source: RefCell<Option<Rc<dyn SchemaSource>>>,
}

impl WriterSchemas {
    /// Asks `source` for writer schemas from now on.
    pub fn set_source(&self, source: Rc<dyn SchemaSource>) {
        *self.source.borrow_mut() = Some(source);
    }

    fn source(&self) -> Result<Rc<dyn SchemaSource>, String> {
        self.source
            .borrow()
            .clone()
            .ok_or_else(|| "this node has no schema registry".to_string())
    }

    /// The writer schema `id`, or why records framed with it cannot be read.
    pub fn get(&self, id: u32) -> Result<Rc<Writer>, String> {
        self.by_id
            .borrow()
            .get(&id)
            .cloned()
            .unwrap_or_else(|| Err(unknown(id)))
    }

    pub(super) fn holds(&self, id: u32) -> bool {
        self.by_id.borrow().contains_key(&id)
    }

    /// Asks the registry for `ids` and holds those registered, or why one
    /// cannot be read (not Avro, not a record): an id the registry does
    /// not know stays unknown and is asked for again next time.
    pub async fn fetch(&self, shard: &Rc<Shard>, ids: BTreeSet<u32>) -> Result<(), String> {
        let ids: Vec<i32> = ids
            .into_iter()
            .filter_map(|id| i32::try_from(id).ok())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let asked = self.source()?.by_id(shard, ids);
        for f in asked.await? {
            let held = Writer::new(&f).map(Rc::new);
            self.by_id.borrow_mut().insert(f.id as u32, held);
        }
        Ok(())
    }

    /// Fetches the writer schemas of the framed values among `values` not
    /// held yet (a scan's, before it makes rows).
    pub async fn fetch_missing<'v>(
        &self,
        shard: &Rc<Shard>,
        values: impl Iterator<Item = Option<&'v [u8]>>,
    ) -> Result<(), String> {
        let wanted: BTreeSet<u32> = values
            .flatten()
            .filter_map(|v| unframe(v).ok())
            .map(|(id, _)| id)
            .filter(|id| !self.holds(*id))
            .collect();
        self.fetch(shard, wanted).await
    }
}
